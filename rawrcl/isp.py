"""Minimal ISP: render linear camera RGB to sRGB, and unprocess sRGB photos (Brooks et al. 2019).

Colour conventions (the same as dcraw/LibRaw and the DNG specification):

- ``xyz_to_cam`` is the DNG ColorMatrix: XYZ (D65) → camera RGB, (3, 3).
- ``ccm`` is camera RGB (white-balanced) → linear sRGB, (3, 3). It is derived from ``xyz_to_cam`` by
  :func:`rawrcl.colour.ccm_from_xyz_to_cam`: cam_from_srgb = xyz_to_cam · M_sRGB→XYZ, rows normalised to sum
  to 1
  (so that a white-balanced neutral stays neutral), then inverted.
- ``wb`` are camera white-balance multipliers (R, G, B), G = 1, applied to camera RGB before ``ccm``.

Images are (3, H, W) (or (..., 3, H, W)) float arrays/tensors in [0, 1]; numpy and torch alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TypeVar

import numpy as np
import torch

from rawrcl.colour import SRGB_TO_XYZ, ccm_from_xyz_to_cam
from rawrcl.errors import RawrclError

Array = TypeVar("Array", np.ndarray, torch.Tensor)

#: XYZ(D65) → camera matrices of a few real cameras (Adobe DNG ColorMatrix values, as published in
#: dcraw's table, ×1e-4). Unprocessing mixes them randomly to obtain plausible camera responses.
REFERENCE_XYZ_TO_CAM = (
    np.array(
        [
            [[6018, -617, -965], [-8645, 15881, 2975], [-1530, 1719, 7642]],  # Canon EOS 350D
            [[4716, 603, -830], [-7798, 15474, 2480], [-1496, 1937, 6651]],  # Canon EOS 5D Mark II
            [[8139, -2171, -663], [-8747, 16541, 2295], [-1925, 2008, 8093]],  # Nikon D700
            [[5271, -712, -347], [-6153, 13653, 2763], [-1601, 2366, 7242]],  # Sony ILCE-7
        ],
        dtype=np.float64,
    )
    / 10000.0
)


def _is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


def _check_rgb(x: Array, name: str) -> None:
    if x.ndim < 3 or x.shape[-3] != 3:
        raise RawrclError(f"{name} must have shape (..., 3, H, W), got {tuple(x.shape)}")


def srgb_to_linear(x: Array) -> Array:
    """Inverse sRGB transfer function (IEC 61966-2-1), elementwise; input in [0, 1] (clamped)."""
    if _is_torch(x):
        x = x.clamp(0, 1)
        return torch.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    x = np.clip(x, 0, 1)
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


#: entries of the sRGB profile's tone-curve table (code value → linear)
SRGB_CURVE_SIZE = 1024


@cache
def srgb_profile() -> bytes:
    """An ICC v2 display-class sRGB profile (:func:`rawrcl.io.icc.display_rgb_profile`: IEC 61966-2-1
    primaries, D65 white adapted to the D50 connection space by Bradford, :func:`srgb_to_linear` as a
    1024-entry table) for the sRGB outputs. Returns the profile's bytes."""
    from rawrcl.io.icc import BRADFORD_D65_TO_D50, display_rgb_profile

    decode = srgb_to_linear(np.linspace(0.0, 1.0, SRGB_CURVE_SIZE))
    return display_rgb_profile(BRADFORD_D65_TO_D50 @ SRGB_TO_XYZ, "sRGB (rawrcl)", decode)


def linear_to_srgb(x: Array) -> Array:
    """sRGB transfer function (gamma), elementwise; input linear in [0, 1] (clamped), output [0, 1]."""
    if _is_torch(x):
        x = x.clamp(0, 1)
        return torch.where(x <= 0.0031308, 12.92 * x, 1.055 * x.clamp_min(1e-12) ** (1 / 2.4) - 0.055)
    x = np.clip(x, 0, 1)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    q = np.sqrt(x)  # x^(1/2.4) = √q · ∛q with q = √x: 2× faster than a power, same result to 1 ulp
    out = np.sqrt(q, out=np.empty_like(x))
    out *= np.cbrt(q)
    out *= 1.055
    out -= 0.055
    np.copyto(out, 12.92 * x, where=x <= 0.0031308)
    return out


def _apply_matrix(m: np.ndarray, x: Array) -> Array:
    """(3, 3) matrix applied to the colour axis (−3) of x (..., 3, H, W)."""
    if _is_torch(x):
        mt = torch.as_tensor(m, dtype=x.dtype, device=x.device)
        return torch.einsum("ij,...jhw->...ihw", mt, x)
    return np.einsum("ij,...jhw->...ihw", np.asarray(m, dtype=x.dtype), x)


def _channel_scale(v, x: Array) -> Array:
    a = np.asarray(v, dtype=np.float64).reshape(3, 1, 1)
    if _is_torch(x):
        return torch.as_tensor(a, dtype=x.dtype, device=x.device)
    return a.astype(x.dtype)


def render_srgb(
    rgb_linear: Array,
    wb=None,
    ccm: np.ndarray | None = None,
    *,
    gain: float = 1.0,
    clip_highlights: bool | Sequence[float] = False,
) -> Array:
    """Render linear camera RGB to display sRGB: ×gain, ×wb, ccm, clip, sRGB gamma.

    Parameters
    ----------
    rgb_linear : (..., 3, H, W) float, linear camera RGB in [0, 1] (RAW units).
    wb : (R, G, B) camera white-balance multipliers, or None (no white balance).
    ccm : (3, 3) camera → linear sRGB matrix (:func:`ccm_from_xyz_to_cam`), or None (identity).
    gain : global exposure gain applied first (1 = none).
    clip_highlights : after the white balance, clip every channel at the level a blown sample reaches in
        the channel that gets there first — gain × min over channels of (multiplier × saturation level) — so
        that blown highlights render white instead of magenta: LibRaw's and dcraw's default highlight mode
        ("clip"). True: every channel saturates at 1; or the (R, G, B) levels, RAW units, where the sensor
        clips below the white level (:func:`rawrcl.infer.pipeline.channel_clip_levels`). For files; off for
        the metrics, whose targets are rendered without it.

    Returns
    -------
    (..., 3, H, W) sRGB in [0, 1], same type and dtype as the input.
    """
    _check_rgb(rgb_linear, "rgb_linear")
    x = rgb_linear * gain if gain != 1.0 else rgb_linear
    if wb is not None:
        x = x * _channel_scale(wb, x)
        if clip_highlights is not False:
            sat = np.ones(3) if clip_highlights is True else np.asarray(clip_highlights, dtype=np.float64)
            top = float(gain) * float(np.min(np.asarray(wb, dtype=np.float64) * sat))
            x = x.clamp(max=top) if _is_torch(x) else np.minimum(x, np.asarray(top, dtype=x.dtype))
    if ccm is not None:
        x = _apply_matrix(np.asarray(ccm, dtype=np.float64), x)
    return linear_to_srgb(x)


def gray_world_wb(rgb_linear: np.ndarray, clip_level: float = 0.98) -> tuple[float, float, float]:
    """Gray-world white balance: multipliers (R, G, B), G = 1, that make the scene average neutral.

    The fallback when a file carries no as-shot white balance (LibRaw reports none, or the neutral
    (1, 1, 1) it uses for "unknown"). Pixels with any channel ≥ ``clip_level`` (clipped highlights) are
    left out. Images above 2 MP are sampled on a regular grid (every k-th row and column).

    Parameters
    ----------
    rgb_linear : (3, H, W) float linear camera RGB in [0, 1] units (clipped to [0, 1] here).

    Returns
    -------
    (R, G, B) multipliers, each clamped to [0.25, 8].
    """
    x = np.asarray(rgb_linear)
    step = max(1, int(np.sqrt(x.shape[-2] * x.shape[-1] / 2e6)))  # ≤ ≈ 2 MP are plenty for three means
    x = np.clip(np.asarray(x[:, ::step, ::step], dtype=np.float64), 0, 1).reshape(3, -1)
    keep = np.all(x < clip_level, axis=0) & np.all(x > 0, axis=0)
    if keep.sum() < 16:
        keep = np.ones(x.shape[1], dtype=bool)
    means = x[:, keep].mean(axis=1)
    if not np.all(means > 0):
        return (1.0, 1.0, 1.0)
    r, b = (float(np.clip(means[1] / means[c], 0.25, 8.0)) for c in (0, 2))
    return (r, 1.0, b)


def has_white_balance(wb) -> bool:
    """True when ``wb`` is a real as-shot white balance (not None and not the neutral (1, 1, 1))."""
    return wb is not None and not np.allclose(np.asarray(wb, dtype=np.float64), 1.0)


def random_camera(rng: np.random.Generator) -> dict:
    """Random but plausible camera parameters (Brooks et al. 2019, Sec. 3):

    - ``xyz_to_cam``: random convex combination of :data:`REFERENCE_XYZ_TO_CAM`;
    - ``wb``: red gain ~ U(1.9, 2.4), blue gain ~ U(1.5, 1.9), green 1;
    - ``gain``: global brightness gain 1/g with g ~ N(0.8, 0.1) (clamped to [0.5, 1.1]).

    Returns a dict with ``xyz_to_cam`` (3, 3), ``ccm`` (3, 3) camera → sRGB, ``wb`` (3,), ``gain``.
    """
    weights = rng.uniform(1e-8, 1.0, size=len(REFERENCE_XYZ_TO_CAM))
    weights /= weights.sum()
    xyz_to_cam = np.tensordot(weights, REFERENCE_XYZ_TO_CAM, axes=1)
    wb = np.array([rng.uniform(1.9, 2.4), 1.0, rng.uniform(1.5, 1.9)])
    gain = 1.0 / float(np.clip(rng.normal(0.8, 0.1), 0.5, 1.1))
    return {"xyz_to_cam": xyz_to_cam, "ccm": ccm_from_xyz_to_cam(xyz_to_cam), "wb": wb, "gain": gain}


def unprocess(srgb: Array, rng: np.random.Generator, *, camera: dict | None = None, clip: bool = True):
    """Invert a simple camera pipeline (Brooks et al. 2019) to synthesise linear camera RGB.

    sRGB → linear (inverse gamma) → inverse CCM (sRGB → white-balanced camera RGB) → inverse white
    balance → inverse brightness gain. Camera parameters are drawn from ``rng`` with
    :func:`random_camera` unless ``camera`` is given.

    Parameters
    ----------
    srgb : (..., 3, H, W) float sRGB in [0, 1] (numpy or torch).
    rng : numpy Generator (seeded by the caller).
    camera : optional dict as returned by :func:`random_camera`.
    clip : clip the result to [0, 1] (out-of-gamut colours would otherwise go slightly negative).

    Returns
    -------
    (rgb_linear_camera, meta): the linear camera RGB, same shape/type as ``srgb``, in [0, 1]
    RAW units, and ``meta`` with ``xyz_to_cam``, ``ccm``, ``wb``, ``gain`` such that
    ``render_srgb(rgb_linear_camera, meta["wb"], meta["ccm"], gain=meta["gain"])`` ≈ ``srgb``.
    """
    _check_rgb(srgb, "srgb")
    cam = dict(camera) if camera is not None else random_camera(rng)
    lin = srgb_to_linear(srgb)
    balanced = _apply_matrix(np.linalg.inv(cam["ccm"]), lin)
    raw = balanced / _channel_scale(cam["wb"], balanced) / cam["gain"]
    if clip:
        raw = raw.clamp(0, 1) if _is_torch(raw) else np.clip(raw, 0, 1)
    return raw, cam
