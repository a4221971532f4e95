"""Tile statistics of a noise detail: per-tile (mean, noise variance), clipping and texture masks.

A *noise detail* of one packed CFA plane is a tuple of aligned (h', w') maps ``(d, m, bad, structure)``:
a zero-mean residual d whose expected square is the local noise variance (λshot·m + λread for the
linear model), the local mean m it refers to, a 0/1 map of samples whose residual is unusable
(clipped neighbourhood, image border), and the coarse-scale structure (:func:`coarse_structure`) used
by the texture filter. The default detail is the cross-colour residual of :mod:`.cfa_residual`.

Units: planes in [0, 1] after black/white level; variances in [0, 1]².
"""

from __future__ import annotations

import numpy as np

from rawrcl.errors import RawrclError


def blocks(a: np.ndarray, b: int) -> np.ndarray:
    """(H, W) → (nH·nW, b·b) non-overlapping b×b tiles, row-major (edges cropped)."""
    nh, nw = a.shape[0] // b, a.shape[1] // b
    a = a[: nh * b, : nw * b]
    return a.reshape(nh, b, nw, b).transpose(0, 2, 1, 3).reshape(nh * nw, b * b)


def tile_reduce(
    d: np.ndarray, m: np.ndarray, bad: np.ndarray, block: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-tile (mean of m, mean of d², mean of bad) of aligned (h, w) maps; three (n_tiles,) arrays."""
    return blocks(m, block).mean(axis=1), blocks(d * d, block).mean(axis=1), blocks(bad, block).mean(axis=1)


def clipped_mask(plane: np.ndarray, pileup: float = 1e-3) -> np.ndarray:
    """Samples that are clipped: ≥ 1 (white level), or equal to the plane's minimum / maximum when
    that value piles up (more than ``pileup`` of the samples — a black clip at 0 from
    ``read_raw(clip=True)``, or a sensor that clips below its pedestal, or an ADC ceiling)."""
    p = np.asarray(plane)
    lo, hi = p.min(), p.max()
    mask = p >= 1.0
    if np.mean(p == lo) > pileup:
        mask |= p <= lo
    if np.mean(p == hi) > pileup:
        mask |= p >= hi
    return mask


def black_floor(samples: np.ndarray, pileup: float = 1e-3, highest: float = 0.05) -> float | None:
    """The value at which a mosaic is clipped at black, or None: its minimum when more than ``pileup``
    of the samples sit exactly there and it is ≤ ``highest`` (black already subtracted and clipped at 0,
    as many phone DNGs, or a sensor clipping below its pedestal; a pile-up higher up is not a black
    clip)."""
    lo = float(np.min(samples))
    return lo if lo <= highest and float(np.mean(samples == lo)) > pileup else None


def coarse_structure(plane: np.ndarray, scale: int = 3) -> np.ndarray:
    """Per-sample structure energy at a coarser scale of a (h, w) plane: squared ``scale``-pixel
    differences (down + right) of the plane low-passed by a Gaussian of σ = scale/2. The low-pass
    averages the noise down while edges and gradients survive, and its band does not overlap the
    near-Nyquist band that measures the noise, so selecting tiles on it leaves their noise statistic
    (nearly) unbiased. Returns (h, w) float64, [0, 1]² units."""
    import cv2  # (OpenCV, not scipy.ndimage: the same filter, and it imports in 0.03 s instead of 0.4)

    # Gaussian (not box) low-pass: no sidelobes, so no Nyquist noise leaks into the measure; truncated at
    # 4σ with replicated borders (scipy.ndimage.gaussian_filter's mode="nearest", equal to 1e-15)
    sigma = scale / 2
    k = 2 * int(4 * sigma + 0.5) + 1
    p = cv2.GaussianBlur(
        np.ascontiguousarray(plane, dtype=np.float64),
        (k, k),
        sigma,
        sigmaY=sigma,
        borderType=cv2.BORDER_REPLICATE,
    )
    g = np.zeros_like(p)
    g[:-scale] += (p[scale:] - p[:-scale]) ** 2
    g[:, :-scale] += (p[:, scale:] - p[:, :-scale]) ** 2
    return g


def coarse_texture(plane: np.ndarray, block: int, crop: int = 2, scale: int = 3) -> np.ndarray:
    """Per-tile mean of :func:`coarse_structure`, aligned with the tiles of a detail cropped by ``crop``
    packed pixels on every side; (n_tiles,)."""
    h, w = plane.shape
    return blocks(coarse_structure(plane, scale)[crop : h - crop, crop : w - crop], block).mean(axis=1)


def texture_filter(mu: np.ndarray, t: np.ndarray, keep: float, nbins: int) -> np.ndarray:
    """Mask keeping, within each of ``nbins`` equal-count bins of tile mean ``mu``, the ``keep``
    fraction of tiles with the least coarse-scale structure ``t``."""
    if keep >= 1 or mu.size == 0:
        return np.ones(mu.size, dtype=bool)
    edges = np.quantile(mu, np.linspace(0, 1, nbins + 1))
    idx = np.clip(np.searchsorted(edges, mu, side="right") - 1, 0, nbins - 1)
    sel = np.zeros(mu.size, dtype=bool)
    for k in range(nbins):
        s = np.nonzero(idx == k)[0]
        if s.size:
            sel[s[t[s] <= np.quantile(t[s], keep)]] = True
    return sel


def tile_bands(
    h: int, w: int, block: int, crop: int, max_tiles: int, *, margin: int = 10, max_bands: int = 12
) -> list[tuple[int, int]] | None:
    """Spatial subsample of the tiles of a packed (h, w) plane: packed-row ranges [r0, r1) of up to
    ``max_bands`` evenly spaced horizontal bands of whole tile rows (≥ 4 each; about ``max_tiles``
    tiles in all of a plane cropped by ``crop`` columns), each with ≥ ``margin`` rows of image above
    and below for the filters' context. None — use the whole plane — when it holds ≤ ``max_tiles``
    tiles, when ``max_tiles`` ≤ 0, or when the bands and their margins would cover 80 % of it."""
    per_row, rows = (w - 2 * crop) // block, (h - 2 * crop) // block
    if max_tiles <= 0 or per_row * rows <= max_tiles:
        return None
    need = -(-max_tiles // per_row)  # tile rows
    n = min(max_bands, max(1, need // 4))
    height = -(-need // n) * block
    if n * (height + 2 * margin) > 0.8 * h:
        return None
    starts = margin + np.round(np.linspace(0, h - 2 * margin - height, n) / block).astype(int) * block
    return [(int(s), int(s) + height) for s in starts]


def check_plane_size(shape: tuple[int, ...], block: int, crop: int, name: str) -> None:
    """Raise :class:`RawrclError` unless a packed plane of ``shape`` holds 2×2 tiles after the crop."""
    need = 2 * block + 2 * crop
    if len(shape) != 2 or min(shape) < need:
        raise RawrclError(
            f"{name}: plane of shape {tuple(shape)} is too small for a noise estimate "
            f"(need at least {need}×{need} per CFA plane)"
        )


def box_means(
    planes: np.ndarray, rows: np.ndarray, cols: np.ndarray, block: int, width: int | None = None
) -> np.ndarray:
    """Means of ``block`` × ``width`` boxes (``width`` None: ``block``) of each plane (p, h, w) with top-left
    corners (rows[a], cols[b]), read from summed-area tables; (p, len(rows), len(cols)) float64."""
    width = block if width is None else width
    sat = np.zeros((planes.shape[0], planes.shape[1] + 1, planes.shape[2] + 1))
    np.cumsum(np.cumsum(planes, axis=1, dtype=np.float64), axis=2, out=sat[:, 1:, 1:])
    r0, c0 = np.asarray(rows)[:, None], np.asarray(cols)[None, :]
    r1, c1 = r0 + block, c0 + width
    return (sat[:, r1, c1] - sat[:, r0, c1] - sat[:, r1, c0] + sat[:, r0, c0]) / (block * width)


def tile_stats(
    d: np.ndarray, m: np.ndarray, bad: np.ndarray, structure: np.ndarray, block: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tile statistics of aligned (h, w) detail maps — residual d, local mean m, bad-sample 0/1 map and
    :func:`coarse_structure` — for :func:`usable_tiles`: per tile (mean m, mean d², bad fraction, mean
    structure), four (n_tiles,) arrays."""
    return (*tile_reduce(d, m, bad, block), blocks(structure, block).mean(axis=1))


def usable_tiles(
    stats: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    block: int,
    max_clipped: float,
    min_count: int,
    max_bins: int,
    texture_keep: float,
    texture_min_tiles: int,
    name: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(tile mean, tile noise statistic, aux rows or None) of the usable tiles of one packed plane.

    ``stats`` = (mean m, mean d², bad fraction, coarse structure[, aux rows]) per tile
    (:func:`tile_stats`); aux rows (per-tile data of a clipped fit) follow the selection. Tiles
    with more than ``max_clipped`` bad samples are dropped; then, with ≥ ``texture_min_tiles`` tiles
    left, the texture filter keeps the ``texture_keep`` fraction with the least coarse structure within
    bins of tile mean. Raises :class:`RawrclError` when fewer than 2·``min_count`` are usable.
    """
    mu, v, cl, t = stats[:4]
    aux = stats[4] if len(stats) > 4 else None
    keep = (cl <= max_clipped) & np.isfinite(v) & np.isfinite(mu)
    if keep.sum() < 2 * min_count:
        frac = float((cl > max_clipped).mean())
        if frac > 0.5:
            raise RawrclError(
                f"{name}: {100 * frac:.0f}% of the image is clipped (saturated or black); "
                "no usable region for a noise estimate"
            )
        raise RawrclError(
            f"{name}: too few usable regions ({int(keep.sum())} tiles of {block}×{block}) for a noise "
            "estimate; the image is too small"
        )
    mu, v, aux = mu[keep], v[keep], None if aux is None else aux[keep]
    if texture_keep < 1 and mu.size >= texture_min_tiles:
        t = t[keep]
        nb = int(min(max_bins, max(2, mu.size // (2 * min_count))))
        sel = texture_filter(mu, t, texture_keep, nb)
        mu, v, aux = mu[sel], v[sel], None if aux is None else aux[sel]
    return mu, v, aux
