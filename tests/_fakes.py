"""Tiny fixed models shared by the tests."""

from __future__ import annotations

import torch
import torch.nn as nn


class SparseJDD(nn.Module):
    """Packed RGGB (B, 4, h, w) → sparse full-res RGB (B, 3, 2h, 2w): each sample at its own CFA site, in
    its own colour channel, zeros elsewhere (any phase error puts a value in the wrong channel or pixel)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        out = x.new_zeros(b, 3, 2 * h, 2 * w)
        out[:, 0, 0::2, 0::2] = x[:, 0]
        out[:, 1, 0::2, 1::2] = x[:, 1]
        out[:, 1, 1::2, 0::2] = x[:, 2]
        out[:, 2, 1::2, 1::2] = x[:, 3]
        return out
