"""Positive pairs: the common :class:`PairDataset` and the RAW-folder dataset (the photo-folder one is
:class:`rawrcl.data.photos.PhotoFolderDataset`; files and the RAW cache are in :mod:`rawrcl.data.folders`).

A *sample* is two overlapping crops ``x_a``, ``x_b`` of the same noisy image (paper Sec. 3.4,
Algorithm 1); crops of different images in a batch are the negatives. Batches are drawn by
:class:`~rawrcl.data.sampler.PairBatchSampler`, which makes step ``s`` of a run a pure function of
``(seed, s)``, so a resumed run sees exactly the batches an uninterrupted one would, and DDP ranks take
disjoint slices of the same global batch.

Sample dict (tensors float32 unless stated; ``c`` = crop side in *model-input* pixels, i.e. packed pixels
for RAW = CFA crop / 2):

- ``x_a``, ``x_b``: (C, c, c) noisy crops; C = 4 (packed RAW [R, G1, G2, B], RGGB geometry) or 3 (RGB).
  Values in [0, 1] units (RAW: after black/white level).
- ``offset``: int64 (2,) position of ``x_b`` relative to ``x_a`` (dy, dx), model-input pixels.
- ``x_a2``, ``x_b2``: the same crops with an independent noise realisation (synthetic data only; N2N).
- ``clean_a``, ``clean_b``: noise-free crops when known (synthetic data, or RAW folders with ``clean_dir``).
- ``noise``: (2,) (λshot, λread) of the image when known (per-channel values averaged), else NaN.
- ``index``: int64 image index.

Overlap: ``x_b`` is ``x_a`` shifted by ``round((1 - overlap)·c)`` pixels along one random axis with a random
sign, so the crops share ``overlap·c²`` pixels. Noise is drawn once on the union of the two crops, so the
overlap carries the same noise in both crops (as two crops of one real noisy photo do).

Sizes: images smaller than the crop are skipped with one warning (their crops would be mostly padding, and
a huge ``crop`` would make every sample that large); when no image is large enough the dataset refuses.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from rawrcl.data.augment import augment_packed, dihedral
from rawrcl.data.folders import find_files, load_packed_raw, resolve_cache_dir
from rawrcl.data.sampler import Key
from rawrcl.errors import RawrclError

log = logging.getLogger("rawrcl.data")


class PairDataset(torch.utils.data.Dataset):
    """Base class: ``dataset[(image_index, sample_seed)]`` → sample dict (module docstring).

    ``dataset[i]`` with a plain int uses ``sample_seed = i`` on image ``i % len(dataset)``.
    """

    kind: str = "raw"  # "raw" (packed 4-channel input) or "rgb"
    keyed: bool = True  # receives (image index, sample seed) keys from PairBatchSampler
    has_clean: bool = False
    has_second: bool = False

    def __init__(self, crop: int, overlap: float, augment: bool, seed: int) -> None:
        if not 0.0 < overlap <= 1.0:
            raise RawrclError(f"--overlap must be in (0, 1], got {overlap}")
        if int(crop) < 2:
            raise RawrclError(f"--crop must be at least 2 pixels, got {crop}")
        self.crop_input = int(crop)  # crop side in file/photo pixels (CFA pixels for RAW)
        self.overlap, self.augment, self.seed = float(overlap), bool(augment), int(seed)
        self.paths: list[Path] = []
        self.skipped: list[tuple[str, str]] = []

    @property
    def in_channels(self) -> int:
        return 4 if self.kind == "raw" else 3

    @property
    def crop(self) -> int:
        """Crop side in model-input pixels (packed pixels for RAW)."""
        return self.crop_input // 2 if self.kind == "raw" else self.crop_input

    def __len__(self) -> int:
        return len(self.paths)

    def describe(self) -> dict:
        return {
            "class": type(self).__name__,
            "files": [p.name for p in self.paths],
            "skipped": self.skipped,
            "crop": self.crop_input,
            "overlap": self.overlap,
            "augment": self.augment,
            "seed": self.seed,
        }

    def _skip(self, path: Path, exc: Exception) -> None:
        reason = str(exc).removeprefix(f"{path}: ")
        self.skipped.append((str(path), str(exc)))
        warnings.warn(f"{path}: skipped ({reason})", stacklevel=3)

    def _too_small(self, sides: Sequence[tuple[int, int]], need: int) -> list[int]:
        """Indices of the images whose (height, width) — in the units of ``need`` — are below ``need``;
        they are recorded as skipped with one warning for all of them. Refuses when none is large enough."""
        small = [k for k, (h, w) in enumerate(sides) if min(h, w) < need]
        if not small:
            return []
        crop = self.crop_input
        if len(small) == len(sides):
            big = max(sides, key=lambda hw: min(hw))
            scale = crop // need
            raise RawrclError(
                f"{self.root}: no image is large enough for --crop {crop} (the largest is "
                f"{big[1] * scale}×{big[0] * scale}); use a smaller --crop"
            )
        names = [self.paths[k].name for k in small]
        for k in small:
            self.skipped.append((str(self.paths[k]), f"smaller than --crop {crop}"))
        listed = ", ".join(names[:5]) + (" …" if len(names) > 5 else "")
        warnings.warn(
            f"{self.root}: skipped {len(small)} image(s) smaller than --crop {crop}: {listed}", stacklevel=3
        )
        return small

    def _require_some(self, root: Path, what: str) -> None:
        if not self.paths:
            extra = f" ({len(self.skipped)} unreadable)" if self.skipped else ""
            raise RawrclError(f"{root}: no usable {what} files{extra}")

    # geometry ----------------------------------------------------------------------------------------
    def _pair_geometry(self, rng: np.random.Generator, h: int, w: int, margin: int):
        """Union-region origin/size and the two crops' positions inside it (model-input pixels)."""
        c = self.crop
        s = int(round((1.0 - self.overlap) * c))
        dy = dx = 0
        if s:
            sign = 1 if rng.random() < 0.5 else -1
            if rng.random() < 0.5:
                dy = sign * s
            else:
                dx = sign * s
        uh, uw = c + abs(dy) + margin, c + abs(dx) + margin
        y0 = int(rng.integers(0, max(h - uh, 0) + 1))
        x0 = int(rng.integers(0, max(w - uw, 0) + 1))
        a = (max(0, -dy), max(0, -dx))
        b = (a[0] + dy, a[1] + dx)
        return (y0, x0, uh, uw), a, b, (dy, dx)

    @staticmethod
    def _region(img: np.ndarray, y0: int, x0: int, uh: int, uw: int, scale: int = 1) -> np.ndarray:
        """img[..., y0:y0+uh, x0:x0+uw] (coordinates × scale), edge-padded when the image is too small."""
        sl = img[..., y0 * scale : (y0 + uh) * scale, x0 * scale : (x0 + uw) * scale]
        ph, pw = uh * scale - sl.shape[-2], uw * scale - sl.shape[-1]
        sl = np.asarray(sl, dtype=np.float32)
        if ph or pw:
            sl = np.pad(sl, [(0, 0)] * (sl.ndim - 2) + [(0, ph), (0, pw)], mode="symmetric")
        return sl

    def _cut(self, region: np.ndarray, pos: tuple[int, int], op: int) -> torch.Tensor:
        c = self.crop
        if self.augment and self.kind == "raw":
            part = region[..., pos[0] : pos[0] + c + 1, pos[1] : pos[1] + c + 1]
            return torch.from_numpy(np.ascontiguousarray(augment_packed(part, op, (c, c)), dtype=np.float32))
        part = region[..., pos[0] : pos[0] + c, pos[1] : pos[1] + c]
        if self.augment:
            part = dihedral(part, op)
        return torch.from_numpy(np.ascontiguousarray(part, dtype=np.float32))

    def _key(self, key) -> Key:
        if isinstance(key, (tuple, list)):
            return int(key[0]) % len(self), int(key[1])
        return int(key) % len(self), int(key)


class RawFolderDataset(PairDataset):
    """Positive pairs from a folder of RAW files (real noise; no synthetic noise is added).

    Parameters
    ----------
    root : folder of RAW files (DNG, CR2, NEF, …; not recursive).
    crop : crop side in CFA pixels (even; default 128 → 64×64 packed).
    overlap : fraction of the crop area shared by the two crops of a pair, (0, 1].
    augment : phase-correct random flips/rot90 (off by default, as in the paper).
    cache_dir : optional folder for the decoded ``.npy`` cache (``"auto"``: :func:`default_cache_dir`).
    clean_dir : optional folder of noise-free references with the same file names (e.g. the ``clean/``
        folder of ``rawrcl simulate --save-clean``); samples then carry ``clean_a``/``clean_b``.
    files : optional explicit file list (overrides the folder listing).
    """

    kind = "raw"

    def __init__(
        self,
        root: str | os.PathLike,
        crop: int = 128,
        overlap: float = 0.5,
        augment: bool = False,
        cache_dir: str | os.PathLike | None = None,
        clean_dir: str | os.PathLike | None = None,
        seed: int = 0,
        files: Sequence[str | os.PathLike] | None = None,
    ) -> None:
        super().__init__(crop, overlap, augment, seed)
        if crop % 2 or crop < 4:
            raise RawrclError(f"--crop must be an even number of CFA pixels ≥ 4 for RAW data, got {crop}")
        root = Path(root)
        candidates = [Path(f) for f in files] if files is not None else find_files(root, "raw")
        cache_dir = resolve_cache_dir(cache_dir)
        self.root, self.cache_dir = root, cache_dir
        self.images: list[np.ndarray] = []
        self.cleans: list[np.ndarray] = []
        for path in candidates:
            try:
                img = load_packed_raw(path, cache_dir)
                clean = None
                if clean_dir is not None:
                    clean = _find_clean(Path(clean_dir), path)
                    clean = load_packed_raw(clean, cache_dir)
                    if clean.shape != img.shape:
                        raise RawrclError(f"clean reference {clean.shape} does not match {img.shape}")
            except RawrclError as exc:
                self._skip(path, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - a broken file must not end a long run
                self._skip(path, RawrclError(f"{type(exc).__name__}: {exc}"))
                continue
            self.paths.append(path)
            self.images.append(img)
            if clean is not None:
                self.cleans.append(clean)
        self._require_some(root, "RAW")
        small = set(self._too_small([img.shape[-2:] for img in self.images], self.crop))
        if small:
            keep = [k for k in range(len(self.paths)) if k not in small]
            self.paths = [self.paths[k] for k in keep]
            self.images = [self.images[k] for k in keep]
            self.cleans = [self.cleans[k] for k in keep] if self.cleans else []
        self.has_clean = clean_dir is not None

    def __getitem__(self, key) -> dict:
        i, sseed = self._key(key)
        rng = np.random.default_rng([self.seed, i, sseed % 2**62])
        img = self.images[i]
        margin = 1 if self.augment else 0
        (y0, x0, uh, uw), a, b, off = self._pair_geometry(rng, img.shape[-2], img.shape[-1], margin)
        op = int(rng.integers(0, 8)) if self.augment else 0
        region = self._region(img, y0, x0, uh, uw)
        out = {
            "x_a": self._cut(region, a, op),
            "x_b": self._cut(region, b, op),
            "offset": torch.tensor(off, dtype=torch.int64),
            "noise": torch.full((2,), float("nan")),
            "index": torch.tensor(i, dtype=torch.int64),
        }
        if self.has_clean:
            cregion = self._region(self.cleans[i], y0, x0, uh, uw)
            out["clean_a"], out["clean_b"] = self._cut(cregion, a, op), self._cut(cregion, b, op)
        return out


def _find_clean(clean_dir: Path, noisy: Path) -> Path:
    for cand in [clean_dir / noisy.name, *sorted(clean_dir.glob(noisy.stem + ".*"))]:
        if cand.is_file():
            return cand
    raise RawrclError(f"no clean reference named {noisy.stem}.* in {clean_dir}")
