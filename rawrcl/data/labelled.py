"""Labelled (input, target) crops for fine-tuning: :class:`LabelledCrops` degrades clean photos with a task.

The task is passed in (any object with ``multiple`` and ``sample(clean, rng, noise)``, i.e. a
:class:`rawrcl.tasks.Task`), so this module does not import the task table (a sibling of ``data`` in the
layering, docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rawrcl.cfa import mosaic
from rawrcl.data.augment import dihedral
from rawrcl.demosaic import demosaic
from rawrcl.errors import RawrclError
from rawrcl.noise import NoiseLike


def zoomed_crop(
    img: np.ndarray, crop: int, factor: float, rng: np.random.Generator | None = None
) -> np.ndarray:
    """A window of ``img`` (3, H, W) of about crop/factor pixels, enlarged to (3, crop, crop) by bicubic
    interpolation and clipped to [0, 1] (float32). ``factor`` ≥ 1; the window is drawn with ``rng``, or
    centred when ``rng`` is None."""
    _, h, w = img.shape
    s = int(min(crop, h, w, max(4, round(crop / factor))))
    y, x = (h - s) // 2, (w - s) // 2
    if rng is not None:
        y, x = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
    src = torch.from_numpy(np.ascontiguousarray(img[:, y : y + s, x : x + s]))[None]
    out = torch.nn.functional.interpolate(src, size=(crop, crop), mode="bicubic", align_corners=False)
    return out[0].clamp(0.0, 1.0).numpy()


def demosaic_difficulty(patch: np.ndarray) -> float:
    """Mean squared error of bilinear demosaicking (:func:`rawrcl.demosaic.demosaic`) on the noise-free
    RGGB mosaic of ``patch`` (3, h, w) in [0, 1], 2-px border excluded: high where the content aliases (fine
    stripes, colour edges, text) — the crops a demosaicker gets wrong, the criterion Gharbi et al. (2016)
    mined their training set with."""
    out = demosaic(mosaic(patch, "RGGB")[0], "RGGB", "bilinear")
    return float(((out - patch)[:, 2:-2, 2:-2] ** 2).mean())


def told_noise(params: torch.Tensor, spread: float, rng: np.random.Generator) -> torch.Tensor:
    """A noise level as a calibration would tell it: ``params`` (2, C) [λshot; λread] per channel ([0, 1]
    units) times exp(u + v_c), drawn apart for λshot and λread: u ~ N(0, spread²) shared by the channels,
    v_c ~ N(0, (spread/2)²) per channel — the level and per-plane errors of a profile or single-image
    estimate. Returns a new (2, C) float32 tensor."""
    c = params.shape[1]
    log_f = rng.normal(0.0, spread, size=(2, 1)) + rng.normal(0.0, spread / 2, size=(2, c))
    return (params * torch.from_numpy(np.exp(log_f))).float()


class LabelledCrops(torch.utils.data.Dataset):
    """Random crops of labelled photos degraded by a task.

    Parameters
    ----------
    images : ``[(name, (3, H, W) float32 [0, 1])]``.
    task : the task whose ``degrade`` makes (input, target).
    crop : crop size in clean-photo pixels (rounded down to a multiple of ``task.multiple``; the offsets
        are multiples too, so packed crops stay RGGB-phased).
    seed : key ``(i, sample_seed)`` (the engine's ``PairBatchSampler`` keys) uses photo ``i`` and
        ``numpy.random.default_rng([seed, i, sample_seed])`` for the crop offset and the noise draw; a plain
        int key ``k`` means ``(k % len, k)``. ``len(dataset)`` is the number of labelled photos.
    augment : apply one of the 8 flips/rotations by 90° (drawn from the same generator) to the *clean*
        square crop before the task degrades it, so the mosaic and noise are synthesised after the
        geometry change and stay correctly phased (8× more distinct labels; off = the paper's protocol).
    zoom : (p, max): a share p of the crops is a smaller window enlarged by a factor log-uniform in [1, max]
        (:func:`zoomed_crop`).
    hard : (p, k): a share p of the plain (not enlarged) crops is the hardest of k candidate windows of the
        photo by :func:`demosaic_difficulty` (hard-example mining for demosaicking); None: off.
    told : (p, s): a share p of the crops tells the model a wrong noise level, as a calibration does —
        :func:`told_noise`, log-spread s; the noise drawn into the input is unchanged. None: the truth.

    Items: ``{"input": (C_in, h, w), "target": (C_out, s·h, s·w), "sigma": (), "noise": (2, C_in)}`` float32
    tensors; ``sigma`` is the drawn noise's standard deviation at signal 0.5, √(λshot·0.5 + λread) in [0, 1]
    units (0 for a noise-free task), for the noise-balanced loss; ``noise`` its [λshot; λread] per input
    channel as the model is told it (the truth unless ``told``), the input of noise-aware models.

    ``keyed = True``: the trainer passes ``(image, sample seed)`` keys with a fresh seed every step, so every
    step sees new crops, noise draws (and cameras, flips); a plain int index would fix one sample per photo.
    """

    keyed = True

    def __init__(
        self,
        images: Sequence[tuple[str, np.ndarray]],
        task: Any,
        crop: int = 64,
        seed: int = 0,
        noise: NoiseLike = None,
        augment: bool = False,
        zoom: tuple[float, float] | None = None,
        hard: tuple[float, int] | None = None,
        told: tuple[float, float] | None = None,
    ) -> None:
        if not images:
            raise RawrclError("fine-tuning needs at least one labelled photo")
        self.images = [np.ascontiguousarray(a, dtype=np.float32) for _, a in images]
        self.names = [n for n, _ in images]
        self.task, self.seed, self.noise, self.augment = task, int(seed), noise, bool(augment)
        if zoom is not None and not (0 <= zoom[0] <= 1 and zoom[1] >= 1):
            raise RawrclError(f"zoom must be (probability in [0, 1], max factor ≥ 1), got {zoom}")
        self.zoom = zoom if zoom is not None and zoom[0] > 0 and zoom[1] > 1 else None  # None: plain crops
        if hard is not None and not (0 <= hard[0] <= 1 and int(hard[1]) >= 1):
            raise RawrclError(f"hard must be (probability in [0, 1], candidates ≥ 1), got {hard}")
        if told is not None and not (0 <= told[0] <= 1 and told[1] >= 0):
            raise RawrclError(f"told must be (probability in [0, 1], spread ≥ 0), got {told}")
        wrong = told is not None and told[0] > 0 and told[1] > 0
        self.told = (float(told[0]), float(told[1])) if wrong else None  # None: the truth
        mined = hard is not None and hard[0] > 0 and int(hard[1]) > 1
        self.hard = (float(hard[0]), int(hard[1])) if mined else None  # None: plain crops
        m = task.multiple
        self.crop = max(2 * m, (int(crop) // m) * m)
        small = [n for n, a in images if min(a.shape[1:]) < self.crop]
        if small:
            raise RawrclError(f"photo {small[0]} is smaller than the crop size {self.crop}")

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: int | tuple[int, int]) -> dict:
        if isinstance(key, tuple | list):
            i, sseed = int(key[0]), int(key[1])
        else:
            i, sseed = int(key) % len(self.images), int(key)
        rng = np.random.default_rng([self.seed, i, sseed % 2**62])
        img = self.images[i]
        m, c = self.task.multiple, self.crop
        _, h, w = img.shape
        if self.zoom is not None and rng.random() < self.zoom[0]:
            patch = zoomed_crop(img, c, float(np.exp(rng.uniform(0.0, np.log(self.zoom[1])))), rng)
        else:
            tries = self.hard[1] if self.hard is not None and rng.random() < self.hard[0] else 1
            windows = []
            for _ in range(tries):
                y = int(rng.integers(0, (h - c) // m + 1)) * m
                x = int(rng.integers(0, (w - c) // m + 1)) * m
                windows.append(img[:, y : y + c, x : x + c])
            patch = max(windows, key=demosaic_difficulty) if tries > 1 else windows[0]
        if self.augment:
            patch = np.ascontiguousarray(dihedral(patch, int(rng.integers(0, 8))))
        s = self.task.sample(patch, rng, self.noise)
        nm = s["meta"]["noise"]
        channels = s["input"].shape[0]
        sigma = sigma_crop = 0.0
        params = torch.zeros(2, channels)
        if nm is not None:  # plane average for per-channel profiles
            planes = max(np.size(nm.lambda_shot), np.size(nm.lambda_read))
            sigma = float(nm.std(torch.full((planes, 1, 1), 0.5, dtype=torch.float64)).mean())
            params = nm.conditioning(channels)
            mean_signal = float(s["target"].clamp_min(0).mean())
            sigma_crop = float(params[0].mean() * mean_signal + params[1].mean()) ** 0.5
            if self.told is not None and rng.random() < self.told[0]:  # drawn last: the crops stay the same
                params = told_noise(params, self.told[1], rng)
        return {
            "input": s["input"],
            "target": s["target"],
            "sigma": torch.tensor(sigma, dtype=torch.float32),
            "sigma_crop": torch.tensor(sigma_crop, dtype=torch.float32),
            "noise": params,
        }
