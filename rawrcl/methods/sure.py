"""Stein's unbiased risk estimate (SURE) for Poisson–Gaussian RAW noise, as a training objective and a score.

For a noisy packed RAW crop y = x + n, n ~ N(0, Σ) with Σ = diag(v) + σ_row²·(ones within a sensor row),
v = λshot·x + λread per plane ([0, 1] units), and a denoiser f,

    E‖f(y) − x‖² = E[‖f(y) − y‖² − tr Σ + 2·tr(Σ ∂f/∂y)]        (Stein 1981; Gaussian approximation)

so the right-hand side needs no clean x. Per pixel i, (Σ ∂f/∂y)ᵢᵢ = vᵢ·∂fᵢ/∂yᵢ + σ_row²·Σ_{j in i's row}
∂fᵢ/∂y_j; both are estimated by Monte-Carlo probes b (Rademacher per pixel; ±1 per sensor row for the row
term): bᵢ·(f(y + εb) − f(y))ᵢ/ε, ε = ``eps``·σ (σ the crop's rms noise std).

Trained on (Soltanayev & Chun 2018), it is label-free like Recorrupted-to-Recorrupted (:mod:`r2r`) but the
model sees the file itself at its own noise level (no recorruption) and the loss's noise is v, not R2R's
(1 + 1/α²)·v; the price is one more forward pass per probe. Clipped files: only pixels whose neighbours'
mean is ≥ ``margin`` noise stds clear of a clip level are scored (Stein's identity assumes unclipped
Gaussian noise; :func:`~rawrcl.methods.r2r.scored_mask`), the others are context. The same estimate scores
``rawrcl adapt``'s held-out crops (:func:`rawrcl.train.adapt_signal.held_out_scores`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rawrcl.methods.base import Method
from rawrcl.methods.r2r import neighbour_mean, noisy_crops, scored_mask, signal_variance
from rawrcl.models.conditioning import call
from rawrcl.noise import row_offsets, with_row_variance


def sure_map(
    fn: Callable[[torch.Tensor], torch.Tensor],
    y: torch.Tensor,
    var: torch.Tensor,
    row: torch.Tensor | None = None,
    eps: float = 0.05,
    draws: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f(y), per-pixel SURE)`` for ``fn`` = f on ``y`` (B, C, h, w) with per-pixel noise variance ``var``
    (same shape) and row-noise std ``row`` (B,) (None or 0: none). The mean of the SURE map over pixels
    estimates the MSE of f(y) against the clean signal. ``draws`` probes per term; the probes' order
    (all white ones, then all row ones) is fixed, so a seeded ``generator`` gives common random numbers
    across models. Differentiable through ``fn``."""
    fy = fn(y).float()
    sd = var.mean(dim=(1, 2, 3), keepdim=True).sqrt().detach()
    step = eps * sd
    div = torch.zeros_like(fy)
    for _ in range(draws):
        b = torch.randint(0, 2, y.shape, generator=generator, device=y.device).to(y.dtype) * 2 - 1
        div = div + b * (fn(y + step * b).float() - fy) / step
    sure = (fy - y) ** 2 - var + 2 * var * (div / draws)
    if row is not None and bool((row > 0).any()):  # banding couples a row's samples: Σ_j∈row ∂fᵢ/∂y_j
        r2 = (row.to(y.dtype) ** 2).view(-1, 1, 1, 1)
        div_row = torch.zeros_like(fy)
        for _ in range(draws):
            b = torch.sign(row_offsets(y.shape, 1.0, generator, y.device, y.dtype)).expand_as(y)
            div_row = div_row + b * (fn(y + step * b).float() - fy) / step
        sure = sure - r2 + 2 * r2 * div_row / draws
    return fy, sure


class SURE(Method):
    """Options: ``margin`` (2.5 noise stds from a clip level), ``eps`` (probe step, 0.05 of the rms noise
    std), ``draws`` (1 probe per term). Batches as :class:`~rawrcl.methods.r2r.R2R`'s: ``x_a`` (+ ``x_b``),
    ``noise`` (B, 2, 4), ``floor`` (B,) (−1 = not clipped), optionally ``row`` (B,). The loss is the
    estimated MSE over the scored pixels divided by their mean noise variance (≈ true MSE / v)."""

    name = "sure"
    needs = ("x_a", "noise")

    def __init__(self, margin: float = 2.5, eps: float = 0.05, draws: int = 1, **options) -> None:
        super().__init__(margin=float(margin), eps=float(eps), draws=int(draws), **options)
        self.margin, self.eps, self.draws = float(margin), float(eps), int(draws)

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        y, noise, floor, row = noisy_crops(batch)
        xhat = neighbour_mean(y)
        var = signal_variance(xhat, noise)
        w = scored_mask(xhat, var, floor, self.margin)
        cond = with_row_variance(noise, row)  # what a row-aware model is told (others read the first two)
        _, sure = sure_map(lambda t: call(model, t, cond), y, var, row, self.eps, self.draws)
        n = w.sum().clamp_min(1.0)
        mse = (sure * w).sum() / n
        loss = mse / ((var * w).sum() / n).detach().clamp_min(1e-12)
        return {"loss": loss, "sure_mse": float(mse.detach()), "scored": float(w.mean())}
