"""Hot and dead pixels of a Bayer mosaic: isolated samples far outside all their same-colour neighbours.

A stuck or hot photosite reads far above (dead: far below) every neighbour of its colour, by much more
than the noise allows; a denoiser told the noise level keeps it as detail. :func:`repair_hot_pixels`
replaces such samples by the median of their 8 same-colour neighbours (darktable's "hot pixels" module
does the same with a fixed threshold; here the threshold follows the file's noise model).
"""

from __future__ import annotations

import numpy as np

from rawrcl.cfa import pack, unpack

#: a sample is a defect when it lies this many noise std beyond the max (min) of its 8 neighbours
HOT_SIGMA = 8.0
#: … and at least this far in [0, 1] units: fine detail of clean, sharp files (0.1 % of the samples of a
#: real 1995 Kodak file stand 0.02 above all their neighbours) is not a defect
HOT_MIN = 0.1


def _neighbours(plane: np.ndarray) -> np.ndarray:
    """(8, h, w) the 8 neighbours of each sample of one packed plane (edges reflected)."""
    p = np.pad(plane, 1, mode="reflect")
    h, w = plane.shape
    return np.stack(
        [p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]
    )


def repair_hot_pixels(
    cfa: np.ndarray,
    pattern: str,
    lambda_shot: float | tuple[float, ...],
    lambda_read: float | tuple[float, ...],
    k: float = HOT_SIGMA,
    min_step: float = HOT_MIN,
) -> tuple[np.ndarray, int]:
    """Replace isolated hot/dead samples of a Bayer mosaic.

    Parameters
    ----------
    cfa : (H, W) float mosaic in [0, 1] (after black/white level), any Bayer ``pattern``.
    lambda_shot, lambda_read : the file's noise, scalars or per packed plane (R, G1, G2, B), [0, 1] units:
        variance λshot·x + λread at signal x.
    k, min_step : a sample y is repaired when y − max(neighbours) > max(k·σ(m), min_step) (hot) or
        min(neighbours) − y > max(k·σ(m), min_step) (dead), m the neighbours' median, σ(m) its noise std.

    Returns
    -------
    (repaired (H, W) float32 mosaic, number of samples replaced by their neighbours' median).
    """
    cfa = np.asarray(cfa, dtype=np.float32)
    planes = np.asarray(pack(cfa, pattern), dtype=np.float32).copy()
    ls = np.broadcast_to(np.asarray(lambda_shot, dtype=np.float64), (4,))
    lr = np.broadcast_to(np.asarray(lambda_read, dtype=np.float64), (4,))
    count = 0
    for c in range(4):
        y = planes[c]
        nb = _neighbours(y)
        med = np.median(nb, axis=0)
        step = np.maximum(k * np.sqrt(np.maximum(ls[c] * np.clip(med, 0, None) + lr[c], 0)), min_step)
        bad = (y - nb.max(axis=0) > step) | (nb.min(axis=0) - y > step)
        count += int(bad.sum())
        y[bad] = med[bad]
    out = np.asarray(unpack(planes, pattern, cfa.shape), dtype=np.float32)
    return out, count
