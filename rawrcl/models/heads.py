"""Output heads: the named, replaceable "last layer" of the paper's proxy protocol (Sec. 4).

| name  | input                  | output                         | scale |
|-------|------------------------|--------------------------------|-------|
| rgb   | features (B, F, h, w)  | RGB (B, 3, h, w)               | 1     |
| raw   | features (B, F, h, w)  | packed RAW (B, 4, h, w)        | 1     |
| jdd   | features of packed RAW | full-res RGB (B, 3, 2h, 2w)    | 2     |
| sr2   | features (B, F, h, w)  | RGB (B, 3, 2h, 2w)             | 2     |
| sr4   | features (B, F, h, w)  | RGB (B, 3, 4h, 4w)             | 4     |

Every head is a single 3×3 convolution (followed by a pixel shuffle for the up-scaling heads), so
"linear" fine-tuning trains exactly one layer.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.cfa import pack, packed_to_rgb, unpack
from rawrcl.errors import RawrclError

#: head name -> (output channels, up-scaling factor)
HEADS: dict[str, tuple[int, int]] = {
    "rgb": (3, 1),
    "raw": (4, 1),
    "jdd": (3, 2),
    "sr2": (3, 2),
    "sr4": (3, 4),
}


def head_spec(name: str) -> tuple[int, int]:
    """(output channels, scale) of a head, or :class:`RawrclError` for an unknown name."""
    if name not in HEADS:
        raise RawrclError(f"unknown head {name!r}; expected one of {', '.join(HEADS)}")
    return HEADS[name]


class Head(nn.Module):
    """Conv 3×3 (features → out·scale² channels) + PixelShuffle(scale).

    Shapes: (B, in_features, h, w) → (B, out, scale·h, scale·w).
    """

    def __init__(self, name: str, in_features: int) -> None:
        super().__init__()
        out, scale = head_spec(name)
        self.name, self.out_channels, self.scale = name, out, scale
        self.conv = nn.Conv2d(in_features, out * scale * scale, 3, padding=1)
        self.shuffle = nn.PixelShuffle(scale) if scale > 1 else nn.Identity()

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.shuffle(self.conv(feats))

    def extra_repr(self) -> str:
        return f"name={self.name!r}"


#: bilinear interpolation kernels of the full-resolution planes: R and B from a ring, G from a cross
_BILINEAR_RING = ((1.0, 2.0, 1.0), (2.0, 4.0, 2.0), (1.0, 2.0, 1.0))
_BILINEAR_CROSS = ((0.0, 1.0, 0.0), (1.0, 4.0, 1.0), (0.0, 1.0, 0.0))


@functools.lru_cache(maxsize=1)
def _bilinear_packed_kernel() -> torch.Tensor:
    """(12, 4, 3, 3) float64: the bilinear kernels as one convolution of the packed planes [R, G1, G2, B];
    output channel 4c + 2i + j is colour c at position (i, j) of the 2×2 cell (``pixel_shuffle``'s order)."""
    colour = (0, 1, 1, 2)  # colour of each packed plane
    k = torch.zeros(12, 4, 3, 3, dtype=torch.float64)
    for c, kc in enumerate((_BILINEAR_RING, _BILINEAR_CROSS, _BILINEAR_RING)):
        for i, j, dy, dx in itertools.product((0, 1), (0, 1), (-1, 0, 1), (-1, 0, 1)):
            plane = 2 * ((i + dy) % 2) + (j + dx) % 2  # the plane holding full-res pixel (2y+i+dy, 2x+j+dx)
            if colour[plane] == c:
                k[4 * c + 2 * i + j, plane, (i + dy) // 2 + 1, (j + dx) // 2 + 1] += kc[dy + 1][dx + 1]
    return k


def bilinear_demosaic_packed(packed: torch.Tensor) -> torch.Tensor:
    """Bilinear demosaic of a packed RGGB mosaic: (B, 4, h, w) [R, G1, G2, B] → (B, 3, 2h, 2w) RGB.

    Each colour plane is interpolated from its own samples only (normalised convolution, so image borders
    average the samples that exist instead of reflecting the wrong colour). Sampled pixels keep their
    value exactly. Same units as the input; differentiable; parameter-free. Computed as one 3×3
    convolution of the packed planes followed by a pixel shuffle (4× faster than spreading the samples
    over the full-resolution grid first; the same sums).
    """
    if packed.ndim != 4 or packed.shape[1] != 4:
        raise RawrclError(f"bilinear demosaic needs packed RAW (B, 4, h, w), got {tuple(packed.shape)}")
    k = _bilinear_packed_kernel().to(packed)
    num = F.conv2d(packed, k, padding=1)
    den = F.conv2d(torch.ones_like(packed[:1]), k, padding=1)  # weights of the samples that exist
    return F.pixel_shuffle(num / den, 2)


#: Malvar, He & Cutler (2004) gradient-corrected 5×5 kernels (× 1/8), applied to the whole mosaic:
#: green at a red/blue site; the colour of the horizontal neighbours at a green site ("row"; its transpose
#: gives the vertical neighbours' colour, "column"); of the diagonal neighbours at a red/blue site.
_MALVAR_GREEN = [[0, 0, -1, 0, 0], [0, 0, 2, 0, 0], [-1, 2, 4, 2, -1], [0, 0, 2, 0, 0], [0, 0, -1, 0, 0]]
_MALVAR_ROW = [[0, 0, 0.5, 0, 0], [0, -1, 0, -1, 0], [-1, 4, 5, 4, -1], [0, -1, 0, -1, 0], [0, 0, 0.5, 0, 0]]
_MALVAR_DIAG = [
    [0, 0, -1.5, 0, 0],
    [0, 2, 0, 2, 0],
    [-1.5, 0, 6, 0, -1.5],
    [0, 2, 0, 2, 0],
    [0, 0, -1.5, 0, 0],
]


def malvar_demosaic_packed(packed: torch.Tensor) -> torch.Tensor:
    """Malvar–He–Cutler (2004) demosaic of a packed RGGB mosaic: (B, 4, h, w) → (B, 3, 2h, 2w) RGB.

    Bilinear interpolation corrected by the Laplacian of the sampled colour (fixed 5×5 kernels): sharper
    than :func:`bilinear_demosaic_packed` on edges and fine texture, and as cheap (one convolution).
    Borders use a 2-pixel reflection of the mosaic, which keeps the Bayer phase. Sampled pixels keep
    their value exactly. Same units as the input; differentiable; parameter-free.
    """
    if packed.ndim != 4 or packed.shape[1] != 4:
        raise RawrclError(f"Malvar demosaic needs packed RAW (B, 4, h, w), got {tuple(packed.shape)}")
    mos = unpack(packed, "RGGB")[:, None]  # (B, 1, 2h, 2w)
    mode = "reflect" if min(mos.shape[-2:]) > 2 else "replicate"
    kg, krow, kdiag = (
        torch.tensor(k, dtype=packed.dtype, device=packed.device) / 8
        for k in (_MALVAR_GREEN, _MALVAR_ROW, _MALVAR_DIAG)
    )
    k = torch.stack([kg, krow, krow.T, kdiag]).unsqueeze(1)  # (4, 1, 5, 5)
    f = pack(F.conv2d(F.pad(mos, (2, 2, 2, 2), mode=mode), k), "RGGB")  # (B, kernel, site, h, w)
    g_rb, row, col, diag = f.unbind(1)  # each (B, site [R, G1, G2, B], h, w)
    r_, g1, g2, b_ = packed.unbind(1)
    r = torch.stack([r_, row[:, 1], col[:, 2], diag[:, 3]], 1)
    g = torch.stack([g_rb[:, 0], g1, g2, g_rb[:, 3]], 1)
    b = torch.stack([diag[:, 0], col[:, 1], row[:, 2], b_], 1)
    return torch.stack([unpack(c, "RGGB") for c in (r, g, b)], 1)


#: the demosaics a skip can use (config key ``demosaic``)
DEMOSAICS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "bilinear": bilinear_demosaic_packed,
    "malvar": malvar_demosaic_packed,
}


def skip_map(x: torch.Tensor, head: str, demosaic: str = "bilinear") -> torch.Tensor:
    """Fixed, parameter-free estimate of the output from the input (the residual learner's baseline).

    Used by DnCNN (which predicts ``skip_map(x) − f(x)``) and by a U-Net built with ``skip=True``
    (``skip_map(x) + f(x)``). Identity for same-domain heads; packed RAW → full-resolution RGB by
    :func:`bilinear_demosaic_packed` or, with ``demosaic="malvar"``, :func:`malvar_demosaic_packed`
    (input in RGGB geometry; → half-resolution RGB by binning for a scale-1 head); remaining up-scaling by
    bilinear interpolation.

    Shapes: (B, C_in, h, w) → (B, C_out, scale·h, scale·w) of :data:`HEADS`.
    """
    out, scale = head_spec(head)
    if out == 4:
        if x.shape[1] != 4:
            raise RawrclError(f"head 'raw' needs packed RAW input (4 channels), got {x.shape[1]}")
        return x
    if x.shape[1] == 4:
        if scale == 1:
            return packed_to_rgb(x)
        if demosaic not in DEMOSAICS:
            raise RawrclError(f"unknown demosaic {demosaic!r}; expected one of {', '.join(DEMOSAICS)}")
        x, scale = DEMOSAICS[demosaic](x), scale // 2
    if scale > 1:
        x = F.interpolate(x, scale_factor=scale, mode="bilinear", align_corners=False)
    return x
