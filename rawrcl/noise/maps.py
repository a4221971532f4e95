"""Noise maps: the per-pixel noise std that noise-aware models take as input."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def local_mean(x: torch.Tensor, size: int = 3) -> torch.Tensor:
    """Box mean over ``size``×``size`` neighbours of each channel (edges replicated): (B, C, h, w) → same."""
    p = size // 2
    return F.avg_pool2d(F.pad(x, (p, p, p, p), mode="replicate"), size, stride=1)


def variance_map(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """λshot·max(x, 0) + λread per pixel, (B, C, h, w), for a signal estimate ``x`` (B, C, h, w) in [0, 1]
    units and ``noise`` (B, 2, C) [λshot; λread] per channel: the Poisson–Gaussian variance, one formula for
    the maps, the adaptation objectives and the blind-spot posterior."""
    lam_shot = noise[:, 0, :, None, None].to(x.dtype)
    lam_read = noise[:, 1, :, None, None].to(x.dtype)
    return lam_shot * x.clamp_min(0) + lam_read


def std_map(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Per-pixel noise std of a noisy signal, the input of noise-aware models.

    ``x``: (B, C, h, w) noisy signal in [0, 1] units (packed RAW planes or RGB); ``noise``: (B, 2, C)
    [λshot; λread] per channel (:meth:`NoiseModel.params`). Returns (B, C, h, w)
    √(λshot·max(x̄, 0) + λread) with x̄ the 3×3 local mean of ``x`` — a smoothed signal estimate, so the map
    carries little of the noise itself; negative (below-black) values count as 0.
    """
    return variance_map(local_mean(x), noise).clamp_min(0).sqrt()
