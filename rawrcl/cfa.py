"""Bayer colour-filter-array packing, unpacking and mosaicking (numpy and torch, batched).

Conventions
-----------
- A CFA mosaic is an array of shape (..., H, W) (one sample per pixel).
- A packed mosaic has shape (..., 4, ceil(H/2), ceil(W/2)) with channels in the canonical order
  ``[R, G1, G2, B]`` whatever the file's phase; G1 is the green on the red row, G2 the green on the
  blue row.
- Patterns are the 2×2 tile read row by row: ``"RGGB" | "BGGR" | "GRBG" | "GBRG"``.
- Odd sizes are padded by one row/column of *reflection* (numpy ``"reflect"``, which repeats the
  sample two positions back, i.e. the same CFA colour) before packing; :func:`unpack` crops back to
  the original size when given ``shape``. No row or column is ever dropped.

All functions work on ``numpy.ndarray`` and ``torch.Tensor`` alike (same type out as in) and are
differentiable in torch.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from rawrcl.errors import RawrclError

Array = TypeVar("Array", np.ndarray, torch.Tensor)

PATTERNS = ("RGGB", "BGGR", "GRBG", "GBRG")
CHANNELS = ("R", "G1", "G2", "B")
#: the packed planes [R, G1, G2, B] of an RGGB mosaic transposed (or turned by 90°), as indices into the
#: original's: R and B keep their place, G1 and G2 swap (a list, to index a tensor's plane axis)
TRANSPOSED_PLANES = [0, 2, 1, 3]


def positions(pattern: str) -> dict[str, tuple[int, int]]:
    """(row, col) offset inside the 2×2 tile of each canonical channel.

    >>> positions("GRBG")["R"]
    (0, 1)
    """
    pattern = check_pattern(pattern)
    out: dict[str, tuple[int, int]] = {}
    for idx, colour in enumerate(pattern):
        r, c = divmod(idx, 2)
        if colour == "G":
            # G1 is the green on the red row.
            red_row = pattern.index("R") // 2
            out["G1" if r == red_row else "G2"] = (r, c)
        else:
            out[colour] = (r, c)
    return out


def check_pattern(pattern: str) -> str:
    """Return the upper-cased pattern or raise :class:`RawrclError` if it is not a Bayer phase."""
    p = str(pattern).upper()
    if p not in PATTERNS:
        raise RawrclError(f"unknown Bayer pattern {pattern!r}; expected one of {', '.join(PATTERNS)}")
    return p


def _pad_even(cfa: Array) -> Array:
    h, w = cfa.shape[-2], cfa.shape[-1]
    ph, pw = h % 2, w % 2
    if not (ph or pw):
        return cfa
    if (ph and h < 3) or (pw and w < 3):
        raise RawrclError(f"mosaic of size {h}×{w} is too small to pack")
    if isinstance(cfa, torch.Tensor):
        lead = cfa.shape[:-2]
        flat = cfa.reshape(-1, 1, h, w)
        flat = F.pad(flat, (0, pw, 0, ph), mode="reflect")
        return flat.reshape(*lead, h + ph, w + pw)
    widths = [(0, 0)] * (cfa.ndim - 2) + [(0, ph), (0, pw)]
    return np.pad(cfa, widths, mode="reflect")


def _stack(parts: list, like: Array, dim: int) -> Array:
    if isinstance(like, torch.Tensor):
        return torch.stack(parts, dim=dim)
    return np.stack(parts, axis=dim)


def pack(cfa: Array, pattern: str) -> Array:
    """Pack a Bayer mosaic into half-resolution planes.

    Parameters
    ----------
    cfa : (..., H, W) array or tensor, any dtype (RAW values in [0, 1] by convention).
    pattern : the mosaic's 2×2 phase, e.g. ``"GRBG"``.

    Returns
    -------
    (..., 4, ceil(H/2), ceil(W/2)) in channel order [R, G1, G2, B].
    """
    pos = positions(pattern)
    x = _pad_even(cfa)
    parts = [x[..., pos[c][0] :: 2, pos[c][1] :: 2] for c in CHANNELS]
    return _stack(parts, x, dim=-3)


def unpack(packed: Array, pattern: str, shape: tuple[int, int] | None = None) -> Array:
    """Inverse of :func:`pack`.

    Parameters
    ----------
    packed : (..., 4, h, w) in channel order [R, G1, G2, B].
    pattern : the phase to rebuild.
    shape : the original (H, W); when given, the reflection padding of odd sizes is cropped off.
        Default (2h, 2w).

    Returns
    -------
    (..., H, W) mosaic, exactly the input of :func:`pack` when ``shape`` is the original size.
    """
    if packed.shape[-3] != 4:
        raise RawrclError(f"packed mosaic must have 4 channels, got shape {tuple(packed.shape)}")
    pos = positions(pattern)
    h, w = packed.shape[-2], packed.shape[-1]
    lead = tuple(packed.shape[:-3])
    if isinstance(packed, torch.Tensor):
        out = packed.new_zeros(*lead, 2 * h, 2 * w)
    else:
        out = np.zeros((*lead, 2 * h, 2 * w), dtype=packed.dtype)
    for i, c in enumerate(CHANNELS):
        r, col = pos[c]
        out[..., r::2, col::2] = packed[..., i, :, :]
    if shape is not None:
        out = out[..., : shape[0], : shape[1]]
    return out


def colour_index(pattern: str) -> dict[str, int]:
    """Index in RGB (0, 1, 2) of each canonical packed channel: R→0, G1→1, G2→1, B→2."""
    check_pattern(pattern)
    return {"R": 0, "G1": 1, "G2": 1, "B": 2}


def mosaic(rgb: Array, pattern: str) -> Array:
    """Sample an RGB image on a Bayer grid (the ``mosaic`` of the paper, Eq. 7–8 / App. B.2).

    Parameters
    ----------
    rgb : (..., 3, H, W), linear values.
    pattern : Bayer phase.

    Returns
    -------
    (..., 1, H, W) mosaic; differentiable in torch.
    """
    if rgb.shape[-3] != 3:
        raise RawrclError(f"mosaic expects 3 colour channels, got shape {tuple(rgb.shape)}")
    pos = positions(pattern)
    idx = colour_index(pattern)
    if isinstance(rgb, torch.Tensor):
        mask = torch.zeros(3, 2, 2, dtype=rgb.dtype, device=rgb.device)
    else:
        mask = np.zeros((3, 2, 2), dtype=rgb.dtype)
    for c in CHANNELS:
        mask[idx[c], pos[c][0], pos[c][1]] = 1
    h, w = rgb.shape[-2], rgb.shape[-1]
    reps_h, reps_w = (h + 1) // 2, (w + 1) // 2
    if isinstance(rgb, torch.Tensor):
        full = mask.repeat(1, reps_h, reps_w)[:, :h, :w]
        return (rgb * full).sum(dim=-3, keepdim=True)
    full = np.tile(mask, (1, reps_h, reps_w))[:, :h, :w]
    return (rgb * full).sum(axis=-3, keepdims=True)


def mosaic_packed(rgb: Array, pattern: str) -> Array:
    """RGB (..., 3, H, W) → packed mosaic (..., 4, ceil(H/2), ceil(W/2)) [R, G1, G2, B].

    Equal to ``pack(mosaic(rgb, pattern)[..., 0, :, :], pattern)``, computed by direct sampling.
    """
    if rgb.shape[-3] != 3:
        raise RawrclError(f"mosaic expects 3 colour channels, got shape {tuple(rgb.shape)}")
    pos = positions(pattern)
    idx = colour_index(pattern)
    x = _pad_even_channels(rgb)
    parts = [x[..., idx[c], pos[c][0] :: 2, pos[c][1] :: 2] for c in CHANNELS]
    return _stack(parts, x, dim=-3)


def _pad_even_channels(x: Array) -> Array:
    lead = x.shape[:-2]
    h, w = x.shape[-2], x.shape[-1]
    flat = x.reshape(-1, h, w) if isinstance(x, torch.Tensor) else x.reshape((-1, h, w))
    padded = _pad_even(flat)
    return padded.reshape(*lead, padded.shape[-2], padded.shape[-1])


def packed_to_rgb(packed: Array) -> Array:
    """Half-resolution RGB from a packed mosaic: (..., 4, h, w) → (..., 3, h, w), G = (G1 + G2)/2.

    A cheap preview / 'binning' demosaic; not a substitute for a real demosaicing method.
    """
    r = packed[..., 0, :, :]
    g = 0.5 * (packed[..., 1, :, :] + packed[..., 2, :, :])
    b = packed[..., 3, :, :]
    return _stack([r, g, b], packed, dim=-3)


def shift_pattern(pattern: str, dy: int, dx: int) -> str:
    """Pattern seen by a crop starting at (dy, dx) of a mosaic with ``pattern``."""
    p = check_pattern(pattern)
    tile = [[p[0], p[1]], [p[2], p[3]]]
    return "".join(tile[(r + dy) % 2][(c + dx) % 2] for r in range(2) for c in range(2))


def rggb_offset(pattern: str) -> tuple[int, int]:
    """(dy, dx) of the red sample in the 2×2 tile: RGGB (0,0), GRBG (0,1), GBRG (1,0), BGGR (1,1)."""
    return positions(pattern)["R"]


def align_rggb(cfa: Array, pattern: str) -> tuple[Array, tuple[int, int]]:
    """Make a mosaic RGGB-phased by reflection-padding its top/left edge (no row is dropped).

    Models see packed data in RGGB *geometry* (R top-left of each 2×2 cell) so that full-resolution
    outputs line up with the input pixels. Reflection repeats the sample two positions away, so the
    padded row/column has the right CFA colour.

    Parameters
    ----------
    cfa : (..., H, W) mosaic with phase ``pattern``.

    Returns
    -------
    (aligned, (dy, dx)) where aligned is (..., H + dy, W + dx) with phase RGGB; recover the original
    grid with ``out[..., dy:dy + H, dx:dx + W]`` (for a ×2 JDD output too, it is at mosaic resolution).
    """
    dy, dx = rggb_offset(pattern)
    if not (dy or dx):
        return cfa, (0, 0)
    h, w = cfa.shape[-2], cfa.shape[-1]
    if isinstance(cfa, torch.Tensor):
        lead = cfa.shape[:-2]
        flat = F.pad(cfa.reshape(-1, 1, h, w), (dx, 0, dy, 0), mode="reflect")
        return flat.reshape(*lead, h + dy, w + dx), (dy, dx)
    widths = [(0, 0)] * (cfa.ndim - 2) + [(dy, 0), (dx, 0)]
    return np.pad(cfa, widths, mode="reflect"), (dy, dx)
