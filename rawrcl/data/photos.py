"""Positive pairs from photos: :class:`PhotoFolderDataset` (RGB, or a simulated mosaic with noise)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from rawrcl import isp
from rawrcl.cfa import mosaic_packed
from rawrcl.data.folders import find_files
from rawrcl.data.pairs import PairDataset
from rawrcl.errors import RawrclError
from rawrcl.io import read_photo
from rawrcl.noise import NoiseLike, NoiseModel, noise_label, noise_sampler


class PhotoFolderDataset(PairDataset):
    """Positive pairs from clean photos with synthetic noise: RGB (``mode="rgb"``) or synthetic RAW
    (``mode="raw"``: RGB → RGGB mosaic, packed, then noise; optionally ``unprocess`` first).

    Each image gets its own noise parameters (λshot, λread), drawn once from ``noise`` (the ``--noise``
    grammar of :mod:`rawrcl.noise.spec` or a sampler; default the paper's App. C.1 sampler, σ ∈ [0, 20]
    8-bit) with ``numpy.random.default_rng([seed, index])``, as in the paper; a calibrated camera profile
    ``PROFILE.json`` draws one of its measured entries per image. ``noise="none"`` adds no noise (photos
    already noisy).
    Every sample draws a fresh noise realisation on the union of its two crops, plus an independent second
    realisation (``x_a2``/``x_b2``, for N2N). Clean crops are returned too (``clean_a``/``clean_b``).

    Parameters
    ----------
    root : folder of photos (PNG, JPEG, TIFF, …; not recursive). ``images`` may give arrays instead.
    crop : crop side in photo pixels (even for RAW; default 128).
    images : optional list of RGB arrays (3, H, W) float in [0, 1] or (H, W, 3) uint8, used instead of files.
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        crop: int = 128,
        overlap: float = 0.5,
        mode: str = "rgb",
        noise: NoiseLike = "paper",
        unprocess: bool = False,
        augment: bool = False,
        seed: int = 0,
        images: Sequence[np.ndarray] | None = None,
    ) -> None:
        super().__init__(crop, overlap, augment, seed)
        if mode not in ("rgb", "raw"):
            raise RawrclError(f"photo dataset mode must be 'rgb' or 'raw', got {mode!r}")
        self.kind = mode
        if mode == "raw" and (crop % 2 or crop < 4):
            raise RawrclError(f"--crop must be an even number of pixels ≥ 4 for RAW tasks, got {crop}")
        self.root = Path(root) if root is not None else Path("<arrays>")
        self.images: list[np.ndarray] = []
        if images is not None:
            for k, arr in enumerate(images):
                self.paths.append(Path(f"image{k:04d}"))
                self.images.append(_as_chw_float(arr))
        else:
            for path in find_files(self.root, "photo"):
                try:
                    self.images.append(read_photo(path))
                    self.paths.append(path)
                except Exception as exc:  # noqa: BLE001
                    self._skip(path, exc if isinstance(exc, RawrclError) else RawrclError(str(exc)))
        self._require_some(self.root, "photo")
        small = set(self._too_small([img.shape[-2:] for img in self.images], self.crop_input))
        if small:
            keep = [k for k in range(len(self.paths)) if k not in small]
            self.paths = [self.paths[k] for k in keep]
            self.images = [self.images[k] for k in keep]
        self.unprocess = bool(unprocess)
        self.sampler_name = noise_label(noise)
        sampler = noise_sampler(noise)
        self.noise_models: list[NoiseModel | None] = []
        for k in range(len(self.images)):
            rng = np.random.default_rng([self.seed, k])
            self.noise_models.append(
                _adapt_channels(sampler(rng), 4 if mode == "raw" else 3) if sampler else None
            )
        self.has_clean = True
        self.has_second = sampler is not None
        if self.unprocess:
            self.images = [
                np.asarray(isp.unprocess(img, np.random.default_rng([self.seed, k, 1]))[0], dtype=np.float32)
                for k, img in enumerate(self.images)
            ]

    def describe(self) -> dict:
        d = super().describe()
        d.update(
            mode=self.kind,
            sampler=self.sampler_name,
            unprocess=self.unprocess,
            noise=[m.to_dict() if m else None for m in self.noise_models],
        )
        return d

    def __getitem__(self, key) -> dict:
        i, sseed = self._key(key)
        rng = np.random.default_rng([self.seed, i, sseed % 2**62])
        img = self.images[i]
        scale = 2 if self.kind == "raw" else 1
        margin = 1 if self.augment and self.kind == "raw" else 0
        geom = self._pair_geometry(rng, img.shape[-2] // scale, img.shape[-1] // scale, margin)
        (y0, x0, uh, uw), a, b, off = geom
        op = int(rng.integers(0, 8)) if self.augment else 0
        region = self._region(img, y0, x0, uh, uw, scale)
        if self.kind == "raw":
            region = mosaic_packed(region, "RGGB")
        clean = torch.from_numpy(np.ascontiguousarray(region, dtype=np.float32))
        model = self.noise_models[i]
        out = {"offset": torch.tensor(off, dtype=torch.int64), "index": torch.tensor(i, dtype=torch.int64)}
        if model is None:
            noisy = noisy2 = clean
            out["noise"] = torch.full((2,), float("nan"))
        else:
            gen = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
            noisy, noisy2 = model.sample(clean, gen), model.sample(clean, gen)
            out["noise"] = torch.tensor(
                [float(np.mean(model.lambda_shot)), float(np.mean(model.lambda_read))], dtype=torch.float32
            )
        for name, arr in (("x", noisy), ("clean", clean)) + ((("x2", noisy2),) if model is not None else ()):
            arr = arr.numpy()
            sa, sb = ("_a", "_b") if name != "x2" else ("_a2", "_b2")
            base = "x" if name == "x2" else name
            out[base + sa], out[base + sb] = self._cut(arr, a, op), self._cut(arr, b, op)
        return out


def _as_chw_float(arr: np.ndarray) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim == 3 and a.shape[-1] == 3 and a.shape[0] != 3:
        a = a.transpose(2, 0, 1)
    if a.dtype == np.uint8:
        a = a.astype(np.float32) / 255.0
    elif a.dtype == np.uint16:
        a = a.astype(np.float32) / 65535.0
    if a.ndim != 3 or a.shape[0] != 3:
        raise RawrclError(f"expected an RGB image (3, H, W) or (H, W, 3), got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _adapt_channels(model: NoiseModel, channels: int) -> NoiseModel:
    """Map per-channel λ between packed RAW (4: R, G1, G2, B) and RGB (3: R, G, B) when needed."""
    out = []
    for v in (model.lambda_shot, model.lambda_read):
        a = np.asarray(v, dtype=np.float64)
        if a.ndim == 1 and a.size != channels:
            if a.size == 4 and channels == 3:
                a = np.array([a[0], 0.5 * (a[1] + a[2]), a[3]])
            elif a.size == 3 and channels == 4:
                a = np.array([a[0], a[1], a[1], a[2]])
            else:
                a = np.full(channels, a.mean())
        out.append(float(a) if a.ndim == 0 else [float(t) for t in a])
    return NoiseModel(out[0], out[1], poisson=model.poisson, clip=model.clip)
