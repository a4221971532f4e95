"""Tiny fixed models and files shared by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn


def bare_cfa_dng(path: Path, data: np.ndarray, *extra: tuple, **write: object) -> Path:
    """A minimal RGGB CFA DNG written by tifffile with only the tags LibRaw needs (white level 4095) and
    ``extra`` tifffile tag tuples: files ``rawrcl.io.dng.write_dng`` won't make (tiny, float, ActiveArea).
    ``write``: more ``tifffile.imwrite`` options (tiles, compression)."""
    import tifffile

    tags = [
        (33421, "H", 2, (2, 2), True),
        (33422, "B", 4, (0, 1, 1, 2), True),
        (50710, "B", 3, (0, 1, 2), True),
        (50706, "B", 4, (1, 4, 0, 0), True),
        *extra,
    ]
    if not any(t[0] == 50717 for t in extra):
        tags.append((50717, "I", 1, 4095, True))
    tifffile.imwrite(path, data, photometric=32803, metadata=None, extratags=tags, **write)
    return Path(path)


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
