"""U-Net body (Ronneberger et al. 2015), the paper's backbone (Sec. 4, "Implementation").

The body maps (B, C_in, H, W) to features (B, width, H, W) at the input resolution; a separate head
(:mod:`rawrcl.models.heads`) turns them into the prediction. Any H, W work: the input is reflection-padded
to a multiple of 2**depth internally and the features are cropped back.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.models.geometry import pad_to_multiple


def level_channels(width: int, depth: int) -> list[int]:
    """Channels of each U-Net level, top to bottom: ``width`` doubled per level down, capped at 8×width."""
    return [min(width * 2**i, width * 8) for i in range(depth + 1)]


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.LeakyReLU(0.2, inplace=True),
    )


def residual_block(width: int, identity: bool = False) -> nn.Sequential:
    """conv–LeakyReLU–conv at ``width`` channels, added to its input by :class:`UNetBody`; with ``identity``
    the second convolution starts at zero, so the block adds nothing until trained (how
    :func:`rawrcl.models.widen.deepen` grows a trained model without changing its function)."""
    blk = nn.Sequential(
        nn.Conv2d(width, width, 3, padding=1),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(width, width, 3, padding=1),
    )
    if identity:
        nn.init.zeros_(blk[2].weight)
        nn.init.zeros_(blk[2].bias)
    return blk


class UNetBody(nn.Module):
    """Encoder–decoder with skip connections.

    Parameters
    ----------
    in_channels : 3 (RGB) or 4 (packed RAW [R, G1, G2, B], RGGB geometry).
    width : channels of the first level (doubled at each level down, capped at 8×width).
    depth : number of 2× down-samplings (the input is padded to a multiple of 2**depth).
    refine : residual blocks (conv–LeakyReLU–conv, ``x + block(x)``) after the last decoder block, at the
        input resolution: depth where the fine detail is, at width² cost per pixel each (0: the plain U-Net).

    Shapes: (B, in_channels, H, W) → (B, width, H, W), same dtype.
    """

    def __init__(self, in_channels: int = 4, width: int = 32, depth: int = 3, refine: int = 0) -> None:
        super().__init__()
        if depth < 1 or width < 1 or refine < 0:
            raise ValueError("U-Net needs depth ≥ 1, width ≥ 1 and refine ≥ 0")
        self.in_channels, self.width, self.depth = in_channels, width, depth
        chans = level_channels(width, depth)
        self.down = nn.ModuleList()
        cin = in_channels
        for c in chans[:-1]:
            self.down.append(_block(cin, c))
            cin = c
        self.bottom = _block(chans[-2], chans[-1])
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        for i in range(depth - 1, -1, -1):
            self.up.append(nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2))
            self.dec.append(_block(2 * chans[i], chans[i]))
        self.refine = nn.ModuleList(residual_block(width) for _ in range(refine))
        self.out_channels = width
        self.size_multiple = 2**depth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        x = pad_to_multiple(x, self.size_multiple)
        skips = []
        for blk in self.down:
            x = blk(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, dec in zip(self.up, self.dec, strict=True):
            x = up(x)
            x = dec(torch.cat([x, skips.pop()], dim=1))
        for blk in self.refine:
            x = x + blk(x)
        return x[..., :h, :w]
