"""Recorrupted-to-Recorrupted (Pang et al. 2021) for Poisson–Gaussian RAW noise, clipping-aware.

Given a noisy packed RAW crop y = x + n with Var(n) = v(x) = λshot·x + λread per plane ([0, 1] units), draw
z ~ N(0, v(x̂)) with x̂ a smoothed signal estimate, and form

    y1 = y + α·z          (input;  noise variance (1 + α²)·v)
    y2 = y − z/α          (target; noise variance (1 + 1/α²)·v)

Cov(n + αz, n − z/α) = v − v = 0, so (Gaussian approximation) the noises of y1 and y2 are independent and
E[y2 | y1] = x: minimising E‖f(y1) − y2‖² trains f towards E[x | y1], the MMSE denoiser at noise
(1 + α²)·v. A noise-aware model is told exactly that (its λ are multiplied by 1 + α²), so what it learns
transfers to the file's own noise level at inference.

Why the plain form fails on black-clipped files: a file clipped at its floor stores max(y, floor), whose
mean is above x wherever x is within a few σ of the floor; y2 is then a biased target (the model learns to
brighten the shadows), and a recorrupted clipped value is not a sample of any file the model will see.
``clip_aware=True`` (the default) therefore

1. estimates x̂ from the 8 same-colour neighbours only (never the pixel itself, so the choice below does
   not depend on the pixel's own noise), and scores the loss only where x̂ − floor ≥ ``margin``·σ(x̂) and
   x̂ + margin·σ < 1 (at margin 2.5 a pixel is clipped with probability < 0.7 % and the censoring bias of
   its target is < 0.003σ); the other pixels still feed the network as context;
2. re-censors the input, y1 = max(y + αz, floor), so it looks like a file of the same camera (clipped at
   the same level), which is what the model sees at inference.

Row (banding) noise: a file whose rows carry a shared offset of std σ_row (``row`` (B,)) is recorrupted
with offsets of the same covariance (:func:`rawrcl.noise.row_offsets`), so the noises of y1 and y2 stay
uncorrelated and the model learns to remove the banding too (the σ map still describes the white part).

The loss is normalised by the target's mean noise variance (1 + 1/α²)·mean v over the scored pixels, so it
is ≈ 1 + (true MSE at the recorrupted level)/(target variance) whatever the noise level; the log
``r2r_mse`` is the raw mean squared error. Batches: ``x_a`` (and ``x_b``, used as more data), ``noise``
(B, 2, 4), ``floor`` (B,) (−1 = not clipped), optionally ``row`` (B,). Both crops are scored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rawrcl.methods.base import Method
from rawrcl.models.conditioning import call
from rawrcl.noise import row_offsets, variance_map, with_row_variance


def neighbour_mean(x: torch.Tensor, radius: int = 1) -> torch.Tensor:
    """Mean of the (2r+1)² − 1 neighbours of each pixel, per channel, excluding the pixel itself
    (replicated edges). (B, C, h, w) → same. On packed RAW the neighbours are the same CFA colour."""
    k = 2 * radius + 1
    p = F.pad(x, (radius,) * 4, mode="replicate")
    box = F.avg_pool2d(p, k, stride=1) * (k * k)
    return (box - x) / (k * k - 1)


def signal_variance(xhat: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """λshot·max(x̂, 0) + λread per pixel (:func:`rawrcl.noise.variance_map`), at least 1e-12; ``noise``
    (B, 2, C)."""
    return variance_map(xhat, noise).clamp_min(1e-12)


def scored_mask(xhat: torch.Tensor, var: torch.Tensor, floor: torch.Tensor, margin: float) -> torch.Tensor:
    """1 where the local signal is ≥ ``margin`` noise stds above the floor and below white, else 0.
    ``floor`` (B,), −1 (or any value < −0.5) = the file is not clipped at black."""
    sd = var.sqrt()
    fl = floor.to(xhat.dtype).view(-1, 1, 1, 1)
    clipped = fl > -0.5
    low_ok = torch.where(clipped, xhat - fl >= margin * sd, torch.ones_like(xhat, dtype=torch.bool))
    return (low_ok & (xhat + margin * sd < 1.0)).to(xhat.dtype)


def recorrupt(
    y: torch.Tensor,
    noise: torch.Tensor,
    floor: torch.Tensor,
    alpha: float = 0.5,
    clip_aware: bool = True,
    margin: float = 2.5,
    generator: torch.Generator | None = None,
    row: torch.Tensor | None = None,
) -> dict:
    """One recorruption of ``y`` (B, C, h, w): ``{"input", "target", "weight", "var", "noise"}`` where
    ``noise`` is the conditioning (B, 2, C) of the input, (1 + α²)·λ (with ``row``: (B, 3, C), third row
    (1 + α²)·σ_row²), and ``weight`` the scored pixels; ``row`` (B,) the row-noise std of each sample
    (None: none)."""
    if clip_aware:
        xhat = neighbour_mean(y)
    else:  # the plain estimate: 3×3 mean including the pixel
        xhat = F.avg_pool2d(F.pad(y, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    var = signal_variance(xhat, noise)
    z = torch.randn(y.shape, generator=generator, device=y.device, dtype=y.dtype) * var.sqrt()
    if row is not None and bool((row > 0).any()):
        z = z + row_offsets(y.shape, row.to(y.device, y.dtype), generator, y.device, y.dtype)
    y1 = y + alpha * z
    y2 = y - z / alpha
    if clip_aware:
        fl = floor.to(y.dtype).view(-1, 1, 1, 1)
        y1 = torch.where(fl > -0.5, torch.maximum(y1, fl.expand_as(y1)), y1)
        weight = scored_mask(xhat, var, floor, margin)
    else:
        weight = torch.ones_like(y)
    return {
        "input": y1,
        "target": y2,
        "weight": weight,
        "var": var,
        "noise": (noise if row is None else with_row_variance(noise, row)) * (1.0 + alpha**2),
    }


def noisy_crops(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, noise, floor, row)`` of an adapt batch, float32: ``x_a`` (B, C, h, w) with ``x_b`` appended as
    more data (2B), ``noise`` (2B, 2, C), ``floor`` (2B,) (−1 = not clipped, the default) and ``row`` (2B,)
    (0 = no banding, the default), each sample's values repeated for its second crop."""
    y = batch["x_a"].float()
    noise = batch["noise"].float()
    floor = batch.get("floor", torch.full((y.shape[0],), -1.0, device=y.device)).float()
    row = batch.get("row", torch.zeros(y.shape[0], device=y.device)).float()
    if "x_b" in batch:
        y = torch.cat([y, batch["x_b"].float()])
        noise, floor, row = torch.cat([noise, noise]), torch.cat([floor, floor]), torch.cat([row, row])
    return y, noise, floor, row


class R2R(Method):
    """Options: ``alpha`` (0.5), ``clip_aware`` (True), ``margin`` (2.5 noise stds; clip-aware only)."""

    name = "r2r"
    needs = ("x_a", "noise")

    def __init__(self, alpha: float = 0.5, clip_aware: bool = True, margin: float = 2.5, **options) -> None:
        super().__init__(alpha=float(alpha), clip_aware=bool(clip_aware), margin=float(margin), **options)
        self.alpha, self.clip_aware, self.margin = float(alpha), bool(clip_aware), float(margin)

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        y, noise, floor, row = noisy_crops(batch)
        r = recorrupt(y, noise, floor, self.alpha, self.clip_aware, self.margin, row=row)
        out = call(model, r["input"], r["noise"]).float()
        w = r["weight"]
        n = w.sum().clamp_min(1.0)
        mse = ((out - r["target"]) ** 2 * w).sum() / n
        target_var = (1.0 + 1.0 / self.alpha**2) * (r["var"] * w).sum() / n
        loss = mse / target_var.detach().clamp_min(1e-12)
        return {"loss": loss, "r2r_mse": float(mse.detach()), "scored": float(w.mean())}
