"""Crops of a user's own noisy RAW files with each file's noise model: the data of ``rawrcl adapt``.

Every file is read with ``read_raw(clip=False)`` (CFA (H, W) in [0, 1] after black/white), made RGGB-phased
(:func:`rawrcl.cfa.align_rggb`: any Bayer phase) and packed to (4, H/2, W/2) planes [R, G1, G2, B]; crop
offsets are in packed pixels, i.e. multiples of 2 mosaic pixels, so every crop stays RGGB-phased. Each file
carries its own noise (:class:`NoiseFile`: (2, 4) [λshot; λread] per packed plane, [0, 1] units, resolved
by the caller with :func:`rawrcl.calibration.resolve.file_noise`), so folders that mix ISOs work, and its
*floor*: the value the file is clipped at when ≥ 0.1 % of its samples sit exactly at the minimum (a
black-clipped file such as the HDR+ burst, 16 % zeros), else None.

Held-out crops: the bottom ``holdout`` fraction of every file's rows (at least one crop high) is never
used for training; :meth:`NoisyCrops.held_out` returns fixed crops from that band (the label-free
keep-or-discard signal of :mod:`rawrcl.train.adapt`). Training crops are drawn from the rows above it.

Items (``keyed = True``: the trainer passes ``(file index, sample seed)``): ``x_a`` (4, c, c) and ``x_b``
(4, c, c) two crops of the same file overlapping by at least half (the pair the pretext methods take),
``noise`` (2, 4), ``floor`` () (−1 when the file is not clipped), ``row`` () its row-noise std, float32;
optionally the synthetic supervised crop of ``mix`` (``input``, ``target``, ``sup_noise``) — the
anti-forgetting data.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rawrcl.burst_align import pixel_digest
from rawrcl.cfa import align_rggb, pack
from rawrcl.data.augment import augment_packed, plane_order
from rawrcl.errors import RawrclError

#: a file counts as clipped at its minimum when at least this fraction of its samples sit exactly there
CLIP_FRACTION = 1e-3
#: value of ``floor`` for a file that is not clipped
NO_FLOOR = -1.0
#: held-out crops of a folder (about; :meth:`NoisyCrops.held_out`): the crop-to-crop error of the label-free
#: score's gain is ≈ 0.05 dB with 32 crops, 0.02–0.03 with 128 (HDR+ burst; docs/adaptation.md)
HELD_OUT_CROPS = 128


@dataclass
class NoiseFile:
    """One user file, packed: ``packed`` (4, h, w) float32 [0, 1], ``noise`` (2, 4) [λshot; λread] per packed
    plane, ``floor`` the clip level (None: not clipped), ``clipped`` the fraction of samples at it,
    ``source`` where the noise came from (metadata/profile/image/given), ``row`` the std of its row
    (banding) offsets ([0, 1] units, :func:`rawrcl.noise.row_offsets`; 0: none), ``note`` why that noise is
    less reliable than usual ("" if not; :class:`rawrcl.calibration.resolve.FileNoise`), ``debanded`` the
    σ_row of the offsets removed from ``packed`` (0: none; :func:`rawrcl.train.adapt.deband_files`)."""

    name: str
    packed: np.ndarray
    noise: torch.Tensor
    floor: float | None
    clipped: float
    source: str = "given"
    row: float = 0.0
    note: str = ""
    debanded: float = 0.0

    @functools.cached_property
    def digest(self) -> str:
        """:func:`rawrcl.burst_align.pixel_digest` of ``packed`` (computed once)."""
        return pixel_digest(np.asarray(self.packed, dtype=np.float32))

    def describe(self) -> dict:
        n = self.noise
        return {
            "file": self.name,
            "shape": list(self.packed.shape),
            "digest": self.digest,
            "lambda_shot": [float(v) for v in n[0]],
            "lambda_read": [float(v) for v in n[1]],
            "noise_source": self.source,
            "floor": self.floor,
            "clipped_fraction": round(self.clipped, 5),
            "row_noise": float(self.row),
            **({"debanded": float(self.debanded)} if self.debanded else {}),
            **({"noise_note": self.note} if self.note else {}),
        }


def clip_floor(cfa: np.ndarray) -> tuple[float | None, float]:
    """(floor, fraction): the file's minimum when ≥ :data:`CLIP_FRACTION` of the samples equal it, else
    (None, that fraction)."""
    lo = float(np.min(cfa))
    frac = float(np.mean(cfa == lo))
    return (lo if frac >= CLIP_FRACTION else None), frac


def pack_file(
    name: str, cfa: np.ndarray, pattern: str, noise: torch.Tensor, source: str = "given"
) -> NoiseFile:
    """A :class:`NoiseFile` from a CFA (H, W) in [0, 1] of phase ``pattern`` and its (2, 4) noise."""
    cfa = np.asarray(cfa, dtype=np.float32)
    floor, frac = clip_floor(cfa)
    aligned, _ = align_rggb(cfa, pattern)
    h2, w2 = (aligned.shape[0] // 2) * 2, (aligned.shape[1] // 2) * 2
    packed = np.ascontiguousarray(pack(aligned[:h2, :w2], "RGGB"), dtype=np.float32)
    noise = torch.as_tensor(noise, dtype=torch.float32).reshape(2, 4)
    return NoiseFile(name, packed, noise, floor, frac, source)


#: NoisyCrops' augmentation modes: none, the 4 flips, all 8 flips/rotations
AUGMENT_MODES = ("off", "flips", "all")


class NoisyCrops(torch.utils.data.Dataset):
    """Random crops across all files (see module docstring).

    Parameters
    ----------
    files : the packed user files.
    crop : crop size in mosaic pixels (even; packed crops are crop/2).
    seed : crops of key ``(i, s)`` come from ``default_rng([seed, i, s])``.
    holdout : fraction of each file's rows kept for the held-out signal.
    mix : optional ``f(rng) -> {"input", "target", "noise"}`` synthetic supervised sample (packed RAW).
    augment : turn each crop pair by a random phase-correct transform: ``"all"`` (or True) one of the 8
        flips/rotations, ``"flips"`` one of the 4 flips (rows stay rows, G1/G2 keep their planes), ``"off"``
        (or False) none. Files with row noise get flips only.
    held_crop : size in mosaic pixels of the held-out crops (None: ``crop``); the held-out band is at least
        one of them high, so training crops larger than it leave the band, and the held-out set, unchanged.
    """

    keyed = True

    def __init__(
        self,
        files: Sequence[NoiseFile],
        crop: int = 128,
        seed: int = 0,
        holdout: float = 0.125,
        mix: Callable[[np.random.Generator], dict] | None = None,
        augment: bool | str = False,
        held_crop: int | None = None,
    ) -> None:
        if not files:
            raise RawrclError("adaptation needs at least one RAW file")
        self.files = list(files)
        self.c = max(8, int(crop) // 2)
        self.hc = self.c if held_crop is None else max(8, int(held_crop) // 2)
        self.seed, self.mix = int(seed), mix
        self.holdout = float(holdout)
        mode = ("all" if augment else "off") if isinstance(augment, bool) else augment
        if mode not in AUGMENT_MODES:
            raise RawrclError(f"augment must be one of {', '.join(AUGMENT_MODES)}, not {augment!r}")
        self.augment = str(mode)
        self.bands: list[int] = []  # first held-out packed row per file
        for f in self.files:
            h, w = f.packed.shape[1:]
            hold = max(self.hc, int(round(h * self.holdout))) if self.holdout > 0 else 0
            need = self.c + self.c // 2 + self.spare
            if h - hold < need or w < need:
                raise RawrclError(
                    f"{f.name}: {2 * h}×{2 * w} px is too small for {2 * self.c}-px crops and a held-out band"
                    " (use a smaller --crop)"
                )
            self.bands.append(h - hold)

    @property
    def spare(self) -> int:
        """Packed rows/columns read beyond each crop: 1 when augmenting (:func:`augment_packed` needs it)."""
        return int(self.augment != "off")

    @property
    def crop(self) -> int:
        return 2 * self.c

    def __len__(self) -> int:
        return len(self.files)

    def describe(self) -> dict:
        return {
            "kind": "noisy-crops",
            "crop": self.crop,
            "holdout": self.holdout,
            "held_crop": 2 * self.hc,
            "files": [f.describe() for f in self.files],
            "mix": self.mix is not None,
            "augment": self.augment,
        }

    def __getitem__(self, key) -> dict:
        if isinstance(key, tuple | list):
            i, s = int(key[0]), int(key[1])
        else:
            i, s = int(key) % len(self.files), int(key)
        rng = np.random.default_rng([self.seed, i, s % 2**62])
        f, c = self.files[i], self.c
        top, w = self.bands[i], f.packed.shape[2]
        m = c // 2  # x_b is shifted by up to half a crop
        e = self.spare
        ya = int(rng.integers(0, top - c - m - e + 1))
        xa = int(rng.integers(0, w - c - m - e + 1))
        dy, dx = (int(v) for v in rng.integers(0, m + 1, size=2))
        x_a = f.packed[:, ya : ya + c + e, xa : xa + c + e]
        x_b = f.packed[:, ya + dy : ya + dy + c + e, xa + dx : xa + dx + c + e]
        noise = f.noise.clone()
        if e:
            turns = self.augment == "all" and f.row == 0  # rotations would make rows columns
            op = int(rng.integers(0, 8 if turns else 4))
            x_a, x_b = (augment_packed(x, op, (c, c)) for x in (x_a, x_b))
            noise = noise[:, plane_order(op)]
        item = {
            "x_a": torch.from_numpy(np.array(x_a, dtype=np.float32)),  # a copy: never a view of the file
            "x_b": torch.from_numpy(np.array(x_b, dtype=np.float32)),
            "noise": noise,
            "floor": torch.tensor(NO_FLOOR if f.floor is None else f.floor, dtype=torch.float32),
            "row": torch.tensor(float(f.row), dtype=torch.float32),
        }
        if self.mix is not None:
            s_ = self.mix(rng)
            item["input"], item["target"] = s_["input"].float(), s_["target"].float()
            item["sup_noise"] = s_["noise"].float()
        return item

    def held_out(self, total: int = HELD_OUT_CROPS) -> list[dict]:
        """Fixed crops of every file's held-out band: ``[{"x", "noise", "floor", "row", "file"}]`` (the
        same on every call: positions from ``default_rng([seed, 7919, i])``). About ``total`` in all:
        ``total // len(files)`` per file (at least 1), at most twice as many as fit side by side in the
        file's band."""
        out: list[dict] = []
        share = max(1, int(total) // len(self.files))
        for i, f in enumerate(self.files):
            rng = np.random.default_rng([self.seed, 7919, i])
            h, w = f.packed.shape[1:]
            c, top = self.hc, self.bands[i]
            per = min(share, 2 * -(-(h - top) // c) * -(-w // c))
            for _ in range(per):
                y = int(rng.integers(top, h - c + 1))
                x = int(rng.integers(0, w - c + 1))
                out.append(
                    {
                        "x": torch.from_numpy(f.packed[:, y : y + c, x : x + c].copy()),
                        "noise": f.noise.clone(),
                        "floor": NO_FLOOR if f.floor is None else f.floor,
                        "row": float(f.row),
                        "file": f.name,
                    }
                )
        return out


def load_noise_files(
    paths: Sequence[str | Path],
    noise: str = "auto",
    *,
    profile: str | Path | None = None,
    scale: float = 1.0,
    on_error: Callable[[Path, Exception], None] | None = None,
) -> list[NoiseFile]:
    """Read and pack the files, each with its own noise (:func:`rawrcl.calibration.resolve.file_noise`).

    Unreadable files raise (or go to ``on_error`` and are skipped)."""
    from rawrcl.calibration.resolve import file_noise
    from rawrcl.io.raw import read_raw

    out = []
    for p in map(Path, paths):
        try:
            raw = read_raw(p, clip=False)
            fn = file_noise(raw, noise, path=p, profile=profile, scale=scale)
            f = pack_file(p.name, raw.cfa, raw.pattern, fn.model.params(4), fn.source)
            out.append(dataclasses.replace(f, note=fn.note) if fn.note else f)
        except RawrclError as exc:
            if on_error is None:
                raise
            on_error(p, exc)
    return out
