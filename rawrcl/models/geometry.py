"""Input-size rules of the models: the factor an input is padded to, and the padding itself.

A U-Net of depth d pools d times, so it pads its input to a multiple of 2**d; tiled inference and
evaluation pad whole images to the same multiple so that every tile sees the whole image's pooling grid.
Every model (and every wrapper) answers :func:`size_multiple`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def size_multiple(model: nn.Module) -> int:
    """The factor ``model``'s input height and width are padded to (its ``size_multiple`` attribute; 1 if
    it has none). Wrappers (self-ensemble, noise binding, denoise → demosaic, DDP) report their model's."""
    m = getattr(model, "size_multiple", None)
    if isinstance(m, int) and m >= 1:
        return m
    inner = getattr(model, "module", None)  # DistributedDataParallel
    return size_multiple(inner) if isinstance(inner, nn.Module) else 1


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Pad (B, C, H, W) on the bottom/right to multiples of ``multiple``: reflection, or replication when
    the image is too small to reflect. Packed RAW stays RGGB-phased (whole packed pixels are added)."""
    h, w = x.shape[-2:]
    ph, pw = (-h) % multiple, (-w) % multiple
    if not (ph or pw):
        return x
    mode = "reflect" if (ph < h and pw < w) else "replicate"
    return F.pad(x, (0, pw, 0, ph), mode=mode)


def turn(grid: torch.Tensor, t: int, bayer: bool = True) -> torch.Tensor:
    """Dihedral transform ``t`` of ``grid`` (..., H, W): bit 2 flips left–right, bit 4 up–down (the flips
    first), bit 1 transposes. With ``bayer`` the grid is a Bayer mosaic whose CFA phase the transform keeps:
    before each flip it is reflection-padded by one pixel on both sides (a 1-pixel reflection keeps the
    phase), so the flipped mosaic starts on the same colour again — (..., H + 2, W) per up–down flip, and so
    on; a transpose keeps an RGGB mosaic RGGB (G1 ↔ G2). :func:`turn_back` undoes it on an output."""
    if t & 2:
        grid = (F.pad(grid, (1, 1, 0, 0), mode="reflect") if bayer else grid).flip(-1)
    if t & 4:
        grid = (F.pad(grid, (0, 0, 1, 1), mode="reflect") if bayer else grid).flip(-2)
    return grid.transpose(-1, -2) if t & 1 else grid


def turn_back(out: torch.Tensor, t: int, scale: int = 1, bayer: bool = True) -> torch.Tensor:
    """The inverse of :func:`turn` on ``out`` (..., H', W'), computed on the turned grid at ``scale`` output
    pixels per grid pixel: transposed back, flipped back and, with ``bayer``, ``scale`` pixels of padding
    cropped from both sides of each flipped axis."""
    if t & 1:
        out = out.transpose(-1, -2)
    if t & 4:
        out = out.flip(-2)[..., scale:-scale, :] if bayer else out.flip(-2)
    if t & 2:
        out = out.flip(-1)[..., scale:-scale] if bayer else out.flip(-1)
    return out
