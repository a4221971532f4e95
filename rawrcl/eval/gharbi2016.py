"""Gharbi et al. 2016's released noise-aware Bayer JDD network ("Deep Joint Demosaicking and Denoising",
SIGGRAPH Asia 2016, MIT licence), written from the layer list of the weights' README; weights are read from a
user-given folder of ``<layer>_0.npy`` (weight, out×in×kh×kw) / ``<layer>_1.npy`` (bias) files and never
shipped with rawrcl.

The network (all convolutions *valid*):
``pack_mosaick`` conv 3→4, k2 s2 on the 3-channel masked GRBG mosaic → concat σ plane (5 ch) →
``preconv1`` 5→128 3×3 + ReLU, halves multiplied (64) → ``conv2``…``conv14`` 64→64 3×3 + ReLU →
``conv15`` 64→128 3×3 + ReLU, filters × masks (64) → ``residual`` 1×1 64→12 → ``unpack_mosaick``
transposed conv 12→3 k2 s2 groups 3 → concat with the centre-cropped masked mosaic (6 ch) →
``post_conv1`` 6→64 3×3 + ReLU → ``output`` 1×1 64→3.

Valid convolutions eat 31 full-resolution pixels on each side (15 packed 3×3 layers = 30 px, ``post_conv1``
1 px). :class:`Gharbi2016` takes rawrcl's packed RGGB mosaic (B, 4, h, w), rebuilds the mosaic, reflection-
pads it by 32 rows and 33 columns per side (reflection keeps each sample's CFA colour; the odd column count
turns RGGB into the network's GRBG phase), runs the network and crops the output back onto the input grid:
(B, 3, 2h, 2w), output pixel (y, x) is the RGB colour at mosaic pixel (y, x).

Domain: trained on sRGB-like (gamma) photo values in [0, 1] with Gaussian noise σ ≤ 20/255 given as a scalar
per image; rawrcl feeds it whatever values it gets (photo-valued mosaics are its home ground; linear RAW is
outside its training distribution).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.cfa import unpack
from rawrcl.errors import RawrclError

#: layer name → (weight shape, conv kind); bias shape is (weight_shape[0],) except the transposed conv (3,)
LAYERS: dict[str, tuple[tuple[int, ...], str]] = {
    "pack_mosaick": ((4, 3, 2, 2), "conv"),
    "preconv1": ((128, 5, 3, 3), "conv"),
    **{f"conv{i}": ((64, 64, 3, 3), "conv") for i in range(2, 15)},
    "conv15": ((128, 64, 3, 3), "conv"),
    "residual": ((12, 64, 1, 1), "conv"),
    "unpack_mosaick": ((12, 1, 2, 2), "deconv"),
    "post_conv1": ((64, 6, 3, 3), "conv"),
    "output": ((3, 64, 1, 1), "conv"),
}
#: full-resolution pixels lost on each side by the valid convolutions
CROP = 31
#: reflection padding (rows, columns) per side of the RGGB mosaic: even rows keep the phase, odd columns
#: move it to GRBG; both ≥ CROP so the output covers the input
PAD_Y, PAD_X = 32, 33
#: the σ range the released network was trained for (8-bit 0…20)
SIGMA_MAX = 20.0 / 255.0


def _bias_shape(name: str, wshape: tuple[int, ...]) -> tuple[int, ...]:
    return (3,) if name == "unpack_mosaick" else (wshape[0],)


class Gharbi2016(nn.Module):
    """The noise-aware Bayer network (module docstring); :meth:`forward` takes packed RGGB + σ."""

    def __init__(self) -> None:
        super().__init__()
        self.pack_mosaick = nn.Conv2d(3, 4, 2, stride=2)
        self.preconv1 = nn.Conv2d(5, 128, 3)
        self.trunk = nn.ModuleList([nn.Conv2d(64, 64, 3) for _ in range(2, 15)] + [nn.Conv2d(64, 128, 3)])
        self.residual = nn.Conv2d(64, 12, 1)
        self.unpack_mosaick = nn.ConvTranspose2d(12, 3, 2, stride=2, groups=3)
        self.post_conv1 = nn.Conv2d(6, 64, 3)
        self.output = nn.Conv2d(64, 3, 1)

    def layer(self, name: str) -> nn.Module:
        """The submodule holding the released layer ``name`` (e.g. ``"conv7"``)."""
        if name.startswith("conv") and name[4:].isdigit():
            return self.trunk[int(name[4:]) - 2]
        return getattr(self, name)

    def forward_grbg(self, mosaic3: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """The released network as is: masked GRBG mosaic (B, 3, H, W), H, W even, σ (B,) →
        (B, 3, H − 62, W − 62)."""
        x = self.pack_mosaick(mosaic3)
        sig = sigma.to(x.dtype).view(-1, 1, 1, 1).expand(x.shape[0], 1, x.shape[2], x.shape[3])
        x = F.relu(self.preconv1(torch.cat([x, sig], dim=1)))
        x = x[:, :64] * x[:, 64:]
        for conv in self.trunk:
            x = F.relu(conv(x))
        x = x[:, :64] * x[:, 64:]
        up = self.unpack_mosaick(self.residual(x))
        dy = (mosaic3.shape[-2] - up.shape[-2]) // 2
        dx = (mosaic3.shape[-1] - up.shape[-1]) // 2
        cropped = mosaic3[..., dy : dy + up.shape[-2], dx : dx + up.shape[-1]]
        x = F.relu(self.post_conv1(torch.cat([cropped, up], dim=1)))
        return self.output(x)

    def forward(self, packed: torch.Tensor, sigma: float | torch.Tensor) -> torch.Tensor:
        """Joint demosaicing + denoising of a packed RGGB mosaic.

        Parameters
        ----------
        packed : (B, 4, h, w) [R, G1, G2, B] in RGGB geometry, values in [0, 1]; h, w ≥ 17.
        sigma : Gaussian noise std in the same units — a scalar or one value per sample (B,).

        Returns
        -------
        (B, 3, 2h, 2w) RGB on the mosaic's pixel grid.
        """
        if packed.ndim != 4 or packed.shape[1] != 4:
            raise RawrclError(f"gharbi2016 expects a packed mosaic (B, 4, h, w), got {tuple(packed.shape)}")
        b, _, h, w = packed.shape
        if min(h, w) < 17:
            raise RawrclError(f"gharbi2016 needs at least 17×17 packed pixels, got {h}×{w}")
        sig = torch.as_tensor(sigma, dtype=packed.dtype, device=packed.device).reshape(-1)
        if sig.numel() == 1:
            sig = sig.expand(b)
        if sig.numel() != b:
            raise RawrclError(f"gharbi2016: {sig.numel()} noise levels for a batch of {b}")
        mosaic = unpack(packed, "RGGB")  # (B, 2h, 2w)
        padded = F.pad(mosaic[:, None], (PAD_X, PAD_X, PAD_Y, PAD_Y), mode="reflect")  # GRBG phase
        out = self.forward_grbg(mask_grbg(padded[:, 0]), sig)
        oy, ox = PAD_Y - CROP, PAD_X - CROP
        return out[..., oy : oy + 2 * h, ox : ox + 2 * w]


def mask_grbg(mosaic: torch.Tensor) -> torch.Tensor:
    """(B, H, W) GRBG mosaic → (B, 3, H, W) masked RGB (each pixel's own colour kept, the others 0)."""
    _, hh, ww = mosaic.shape
    m = torch.zeros(3, 2, 2, dtype=mosaic.dtype, device=mosaic.device)
    m[1, 0, 0] = m[1, 1, 1] = 1  # G
    m[0, 0, 1] = 1  # R
    m[2, 1, 0] = 1  # B
    full = m.repeat(1, (hh + 1) // 2, (ww + 1) // 2)[:, :hh, :ww]
    return mosaic[:, None] * full


def load_gharbi2016(folder: str | os.PathLike) -> Gharbi2016:
    """:class:`Gharbi2016` with the released weights from ``folder`` (``<layer>_0.npy``, ``<layer>_1.npy``).

    Raises :class:`RawrclError` naming the file when the folder or a file is missing, unreadable or of the
    wrong shape. The arrays are read with ``allow_pickle=False``. Returns the model in eval mode (CPU).
    """
    d = Path(folder)
    if not d.is_dir():
        raise RawrclError(f"{d}: no such folder (gharbi2016 weights: <layer>_0.npy / <layer>_1.npy files)")
    model = Gharbi2016()
    with torch.no_grad():
        for name, (wshape, _) in LAYERS.items():
            mod = model.layer(name)
            for suffix, param, shape in (
                ("0", mod.weight, wshape),
                ("1", mod.bias, _bias_shape(name, wshape)),
            ):
                f = d / f"{name}_{suffix}.npy"
                if not f.is_file():
                    raise RawrclError(f"{f}: missing gharbi2016 weight file")
                try:
                    arr = np.load(f, allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise RawrclError(f"{f}: unreadable .npy file ({exc})") from None
                if tuple(arr.shape) != tuple(shape):
                    raise RawrclError(f"{f}: shape {tuple(arr.shape)}, expected {tuple(shape)}")
                if not np.all(np.isfinite(arr)):
                    raise RawrclError(f"{f}: contains NaN or infinite values")
                param.copy_(torch.from_numpy(arr.astype(np.float32)))
    return model.eval()


def gharbi_sigma(packed: torch.Tensor, lambda_shot, lambda_read) -> torch.Tensor:
    """σ per sample for the network: sqrt(mean over planes of λshot·mean(x) + λread), x the input (B, 4, h, w)
    clipped to [0, 1]; λ scalars or one value per plane (then each plane at its own mean level); (B,)."""
    mean = packed.clamp(0, 1).mean(dim=(2, 3))  # (B, 4)
    ls = torch.as_tensor(np.asarray(lambda_shot, dtype=np.float64), dtype=mean.dtype).reshape(1, -1)
    lr = torch.as_tensor(np.asarray(lambda_read, dtype=np.float64), dtype=mean.dtype).reshape(1, -1)
    return (ls * mean + lr).mean(dim=1).clamp_min(0).sqrt()


def gharbi_jdd(model: Gharbi2016, packed: torch.Tensor, sigma: float | torch.Tensor) -> torch.Tensor:
    """Run ``model`` without gradients: packed (B, 4, h, w) / (4, h, w) → RGB (B, 3, 2h, 2w) / (3, 2h, 2w)."""
    x = torch.as_tensor(packed).float()
    single = x.ndim == 3
    with torch.no_grad():
        out = model(x[None] if single else x, sigma)
    return out[0] if single else out
