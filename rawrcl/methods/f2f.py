"""The frame-to-frame objective on a handheld burst of one static scene (Ehret et al. 2019's idea for burst
JDD; measured, not in ``rawrcl adapt``: ``benchmarks/burst_f2f.py``, docs/adaptation.md from "Stop 102").

A two-stage RAW model's JDD RGB of a crop of a native frame i, resampled at the positions of another frame j's
mosaic samples (the affine registration mapped into frame i; bicubic, full resolution) and read in each
sample's CFA colour, predicts frame j's *native* noisy samples (:class:`rawrcl.data.frame_pairs.FramePairs`
draws them). Nothing is resampled on the target side, so, unlike Noise2Noise against registered means, the
targets carry no resampling error for the network to imitate; and what is resampled is a full-resolution RGB
estimate, not one aliased packed plane (a first form that resampled both frames' packed planes to their
midpoint learnt to blur). Loss: :func:`f2f_loss`. Values in [0, 1] after black/white level.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def predict_samples(rgb: torch.Tensor, grid: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """``rgb`` (1, 3, S, S) resampled (bicubic) at ``grid`` (K, c, c, 2), each sample in its colour ``col``
    (c, c) → (K, c, c)."""
    k = grid.shape[0]
    smp = F.grid_sample(
        rgb.expand(k, -1, -1, -1), grid, mode="bicubic", padding_mode="border", align_corners=True
    )
    return smp.gather(1, col[None, None].expand(k, 1, -1, -1))[:, 0]


def f2f_loss(
    pred: torch.Tensor, batch: dict, col: torch.Tensor, k_std: float = 3.0, near: float = 0.5
) -> tuple[torch.Tensor, float, float]:
    """(masked MSE of ``pred`` (K, c, c) against ``batch["target"]``, the scored share, the mean noise
    variance there): samples where the detached prediction is above ``k_std`` noise std of frame j (its λ in
    that colour; G1's for green) and below 0.9, and whose position lies within ``near`` px of a pixel centre
    of the input (``batch["frac"]``; 0.5: every sample), where bicubic resampling is ≈ identity (measured in
    stop 103: it does not change the forgetting, docs/adaptation.md)."""
    lam = batch["noise_j"]  # (K, 2, 4)
    shot = torch.stack([lam[:, 0, 0], lam[:, 0, 1], lam[:, 0, 3]], -1)[:, col]
    read = torch.stack([lam[:, 1, 0], lam[:, 1, 1], lam[:, 1, 3]], -1)[:, col]
    level = pred.detach()
    var = shot * level.clamp_min(0) + read
    m = (level > k_std * var.sqrt()) & (level < 0.9)
    if near < 0.5:
        m = m & (batch["frac"] <= near)
    m = m.to(pred.dtype)
    n = m.sum().clamp_min(1)
    return ((pred - batch["target"]) ** 2 * m).sum() / n, float(m.mean()), float((var * m).sum() / n)


__all__ = ["f2f_loss", "predict_samples"]
