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
