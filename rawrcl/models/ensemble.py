"""Geometric self-ensemble ("test-time augmentation"): average a model over the 8 flips/transposes.

A standard way to buy a little quality with compute (Lim et al. 2017, EDSR "self-ensemble"): run the model
on the 8 dihedral transforms of the input, undo each transform on its output and average. The model is
not retrained; inference costs 8×.

On a Bayer mosaic a plain flip changes the CFA phase (RGGB → GRBG), which a model trained on RGGB cannot
read. :class:`SelfEnsemble` therefore transforms packed RAW input as the full-resolution mosaic and keeps
the phase (Liu et al. 2019, "Bayer preserving augmentation"; :func:`~rawrcl.models.geometry.turn`): a
transpose keeps RGGB as it is; before a horizontal (vertical) flip the mosaic is reflection-padded by one
column (row) on each side — a 1-pixel reflection keeps the Bayer phase of the padding — so the flipped
mosaic starts on an R column (row) again; the padding is cropped from the output after flipping back.
That padding makes the input one packed pixel larger than the tiler's: it is padded again to the model's
``size_multiple`` (whole packed pixels, bottom/right; :func:`~rawrcl.models.geometry.pad_to_multiple`) and
the output cropped, so a model that needs multiples (a blind-spot network: 4) runs under the ensemble too.
A model bound to a row (banding) noise (``keeps_rows``, :class:`~rawrcl.models.conditioning.WithNoise`)
gets the 4 flips only: a transpose would turn the sensor's rows into columns.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rawrcl.cfa import pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.models.geometry import pad_to_multiple, size_multiple, turn, turn_back


class SelfEnsemble(nn.Module):
    """``mean over t of T_t⁻¹(model(T_t(x)))`` for the 8 flips/transposes ``T_t`` (4 flips for a model
    with ``keeps_rows``).

    The input kind is read from its channels: 4 = packed RAW (B, 4, h, w) [R, G1, G2, B] in RGGB
    geometry, transformed as the (2h, 2w) mosaic; 3 = RGB (B, 3, H, W). Outputs with 4 channels at the
    input's size are packed RAW (head ``"raw"``); any other output is an image on a grid ``s`` times the
    mosaic's (RAW input: JDD s = 1, ...) or the photo's (RGB input), s a positive integer. Values and units
    pass through ([0, 1] RAW or photo values); shapes are those of ``model``.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.size_multiple = size_multiple(model)

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        """``model(x)`` with x (B, C, h, w) padded to the model's size multiple and the output cropped back
        (to ``s``·h × ``s``·w, s the model's output pixels per input pixel)."""
        h, w = x.shape[-2:]
        xp = pad_to_multiple(x, self.size_multiple)
        y = self.model(xp)
        if xp.shape[-2:] == x.shape[-2:]:
            return y
        s = y.shape[-1] // xp.shape[-1]
        return y[..., : s * h, : s * w]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] not in (3, 4):
            raise RawrclError(f"self-ensemble expects (B, 3|4, H, W), got {tuple(x.shape)}")
        raw = x.shape[1] == 4
        grid = unpack(x, "RGGB")[:, None] if raw else x  # the mosaic keeps its phase under the transforms
        acc, packed_out = None, False
        ts = (0, 2, 4, 6) if getattr(self.model, "keeps_rows", False) else range(8)
        for t in ts:
            g = turn(grid, t, bayer=raw)
            y = self._run(pack(g[:, 0], "RGGB") if raw else g)
            if raw and y.shape[1] == 4 and 2 * y.shape[-1] == g.shape[-1]:
                y, packed_out = unpack(y, "RGGB")[:, None], True
            s = y.shape[-1] // g.shape[-1]  # output pixels per mosaic / photo pixel
            y = turn_back(y, t, s, bayer=raw).float()
            acc = y if acc is None else acc + y
        out = acc / len(ts)
        return pack(out[:, 0], "RGGB") if packed_out else out
