"""Residual tensors n̂(x) (paper Eq. 2 and Appendix B.2).

- Same domain (RGB→RGB denoising, packed RAW→packed RAW): n̂(x) = x − f(x) (:func:`residual`).
- DnCNN form: when the model predicts the *noise* (f(x) = x − denoised), the residual is the model
  output itself; :func:`residual_from_noise_prediction` makes that explicit.
- RAW → RGB (JDD, Appendix B.2): n̂(x) = x − mosaic(f(x)), computed on the packed [R, G1, G2, B]
  mosaic in RGGB geometry (:func:`raw_residual`).

Values keep the units of x ([0, 1] after black/white level); the contrastive loss rescales explicitly.
"""

from __future__ import annotations

import torch

from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError

__all__ = ["residual", "residual_from_noise_prediction", "raw_residual"]


def residual(x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """n̂(x) = x − f(x) (Eq. 2).

    Parameters
    ----------
    x : (B, C, H, W) noisy input, float, [0, 1] units.
    fx : (B, C, H, W) model output in the same domain as x.

    Returns
    -------
    (B, C, H, W) residual, same units as x.
    """
    if x.shape != fx.shape:
        raise RawrclError(
            f"residual needs x and f(x) of the same shape, got {tuple(x.shape)} and {tuple(fx.shape)}"
        )
    return x - fx


def residual_from_noise_prediction(noise_pred: torch.Tensor) -> torch.Tensor:
    """Residual of a DnCNN-style model that outputs the noise estimate (denoised = x − output).

    Then n̂(x) = x − denoised = output: this returns ``noise_pred`` unchanged (B, C, H, W), so callers
    never compute x − (x − output), which would only add rounding error.
    """
    return noise_pred


def raw_residual(x_packed: torch.Tensor, rgb_full: torch.Tensor) -> torch.Tensor:
    """RAW-domain residual for a RAW→RGB model: x − mosaic(f(x)) (Appendix B.2).

    Parameters
    ----------
    x_packed : (B, 4, h, w) noisy packed mosaic [R, G1, G2, B] in RGGB geometry, [0, 1] units.
    rgb_full : (B, 3, 2h, 2w) model output (linear RGB at full resolution, same units).

    Returns
    -------
    (B, 4, h, w) residual ``x_packed − mosaic_packed(rgb_full, "RGGB")``.
    """
    if x_packed.ndim != 4 or x_packed.shape[1] != 4:
        raise RawrclError(f"raw_residual expects packed input (B, 4, h, w), got {tuple(x_packed.shape)}")
    b, _, h, w = x_packed.shape
    if tuple(rgb_full.shape) != (b, 3, 2 * h, 2 * w):
        raise RawrclError(
            f"raw_residual expects RGB output (B, 3, 2h, 2w) = {(b, 3, 2 * h, 2 * w)}, "
            f"got {tuple(rgb_full.shape)}"
        )
    return x_packed - mosaic_packed(rgb_full, "RGGB")
