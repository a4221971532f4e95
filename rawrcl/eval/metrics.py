"""Evaluation metrics (paper App. C.3): PSNR/SSIM on 8-bit sRGB, PSNR on float [0, 1] data, and the
rendering of task outputs to sRGB. :func:`psnr_from_mse` is the library's one PSNR formula: every other
PSNR (burst scores, the demo, benchmarks) calls it.

- ``psnr`` / ``ssim``: scikit-image conventions (``structural_similarity`` with ``channel_axis``; 7×7
  uniform window) on **8-bit sRGB** images (H, W, 3) uint8, ``data_range=255``, after cropping an 8-pixel
  border (at output resolution; 4 px for half-resolution RAW previews).
- How outputs become 8-bit sRGB (:func:`to_srgb`): RGB tasks are already in photo (sRGB) values. RAW
  tasks built from sRGB photos *without* unprocess treat the photo values as "linear" camera RGB, so the
  linear output is shown as is (same convention as Gharbi 2016 / the paper). *With* unprocess the output
  is re-rendered by ``rawrcl.isp.render_srgb`` with the same camera parameters (white balance, colour
  matrix, gain) that unprocessed the target. Then values are clipped to [0, 1] and quantised
  ``round(255·x)`` to uint8. ``raw-denoise`` outputs (packed) are previewed as half-resolution RGB
  (R, (G1+G2)/2, B) before rendering.
- ``psnr_float`` (``psnr_linear`` in reports): PSNR on float target-domain values (linear camera RGB, or
  packed RAW for raw-denoise), output clipped to [0, 1], data range 1, same border crop.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rawrcl.cfa import packed_to_rgb
from rawrcl.errors import RawrclError
from rawrcl.isp import render_srgb
from rawrcl.tasks import Task

BORDER = 8


def psnr_from_mse(mse: float, data_range: float = 1.0) -> float:
    """PSNR in dB of a mean squared error: 10·log10(data_range² / mse); ``inf`` for mse 0."""
    mse = float(mse)
    if mse < 0 or not math.isfinite(mse):
        raise RawrclError(f"psnr: mean squared error must be finite and ≥ 0, got {mse}")
    return float("inf") if mse == 0 else 10 * math.log10(float(data_range) ** 2 / mse)


def to_uint8(x: Any) -> np.ndarray:
    """(3, H, W) float in [0, 1] (numpy or torch) → (H, W, 3) uint8, clipped and rounded (round(255·x))."""
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    a = np.clip(a.astype(np.float64), 0.0, 1.0)
    return np.round(a * 255.0).astype(np.uint8).transpose(1, 2, 0)


def _crop(a: np.ndarray, border: int, channel_last: bool) -> np.ndarray:
    if border <= 0:
        return a
    if channel_last:
        return a[border:-border, border:-border]
    return a[..., border:-border, border:-border]


def psnr(output: np.ndarray, target: np.ndarray, border: int = BORDER, data_range: float = 255) -> float:
    """PSNR in dB, scikit-image default, on (H, W, C) images (uint8 sRGB ⇒ data_range 255)."""
    o, t = _crop(output, border, True), _crop(target, border, True)
    if o.shape != t.shape:
        raise RawrclError(f"psnr: shapes differ {o.shape} vs {t.shape}")
    diff = np.asarray(o, dtype=np.float64) - np.asarray(t, dtype=np.float64)
    return psnr_from_mse(float(np.mean(diff**2)), data_range)


def ssim(output: np.ndarray, target: np.ndarray, border: int = BORDER, data_range: float = 255) -> float:
    """SSIM, scikit-image defaults (7×7 uniform window), ``channel_axis=2`` on (H, W, C) images."""
    from skimage.metrics import structural_similarity

    o, t = _crop(output, border, True), _crop(target, border, True)
    return float(structural_similarity(t, o, data_range=data_range, channel_axis=2))


def psnr_float(output: Any, target: Any, border: int = BORDER) -> float:
    """PSNR (dB) of float (C, H, W) arrays in [0, 1] (output clipped), data range 1, border-cropped."""
    o = output.detach().cpu().numpy() if isinstance(output, torch.Tensor) else np.asarray(output)
    t = target.detach().cpu().numpy() if isinstance(target, torch.Tensor) else np.asarray(target)
    o, t = (
        _crop(np.clip(o, 0, 1).astype(np.float64), border, False),
        _crop(t.astype(np.float64), border, False),
    )
    return psnr_from_mse(float(np.mean((o - t) ** 2)))


def to_srgb(x: torch.Tensor, task: Task, meta: dict | None = None) -> torch.Tensor:
    """Render a task output/target (target domain) to sRGB (3, H', W') float (not yet clipped).

    See the module docstring: identity for photo-valued data, ``rawrcl.isp.render_srgb`` with the
    sample's camera parameters when the task was unprocessed, half-res preview for packed RAW.
    """
    x = torch.as_tensor(x).float()
    if task.target_domain == "raw":
        x = packed_to_rgb(x)
    if task.target_domain in ("linear", "raw") and task.unprocess:
        isp = (meta or {}).get("isp")
        if isp is None:
            raise RawrclError("unprocessed sample without camera parameters; cannot render to sRGB")
        out = render_srgb(x.clamp(0, 1).numpy(), isp["wb"], isp["ccm"], gain=float(isp["gain"]))
        return torch.as_tensor(np.asarray(out), dtype=torch.float32)
    return x
