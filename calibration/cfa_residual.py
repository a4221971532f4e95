"""Cross-colour prediction residual of a Bayer mosaic: the noise detail of the single-image estimator.

Every sample is predicted from its ``(2r+1)² − 1`` neighbours *of all four CFA sites* by a linear
predictor fitted to the image itself (least squares, one predictor per CFA site), under constraints that
make it blind to what carries no noise information:

- per site, the weights on that site's samples sum to 1 when it is the centre's own site and to 0 for
  the three others, so a flat patch of any colour predicts itself exactly (whatever the white balance,
  and with a green imbalance between G1 and G2);
- the weights' first moments vanish, so linear ramps cancel too.

What is left of the scene is the part of its texture that the neighbours cannot predict. Natural texture
is mostly shared by the colour channels (luminance), so samples of the other sites one pixel away predict
much of what a same-site high-pass, which only sees samples two pixels away, cannot: on CBSD68-simulated
mosaics the single-image errors drop by about a third against the same-plane detail, by half on
low-noise (Brooks-range) rows (docs/calibration.md).
Independent noise passes with gain ``g = 1 + Σ wⱼ²``; the residual is divided by √g, so for noise of
variance ``λshot·x + λread`` its expected square is ``λshot·m + λread`` exactly, with the weighted local
mean ``m = (x₀ + Σ wⱼ² xⱼ) / g``.

All arrays are (H, W) mosaics in [0, 1] after black/white level; outputs are NaN where the
neighbourhood leaves the image.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from rawrcl.errors import RawrclError

SITES = ((0, 0), (0, 1), (1, 0), (1, 1))


def offsets(radius: int) -> list[tuple[int, int]]:
    """The neighbour offsets (dy, dx) of a (2·radius+1)² window without its centre, row-major."""
    return [(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1) if dy or dx]


def _constraints(site: tuple[int, int], offs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(C, b) with C @ w = b: per-site weight sums (1 on the centre's site, 0 elsewhere) and zero first
    moments in y and x."""
    grp = np.array([((site[0] + dy) % 2) * 2 + (site[1] + dx) % 2 for dy, dx in offs])
    own = site[0] * 2 + site[1]
    rows = [(grp == k).astype(np.float64) for k in range(4)]
    rows += [np.array([dy for dy, _ in offs], np.float64), np.array([dx for _, dx in offs], np.float64)]
    return np.array(rows), np.array([1.0 if k == own else 0.0 for k in range(4)] + [0.0, 0.0])


def _centres(shape: tuple[int, int], site: tuple[int, int], radius: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the samples of ``site`` whose whole window lies inside the mosaic."""
    ys = np.arange(site[0], shape[0], 2)
    xs = np.arange(site[1], shape[1], 2)
    return ys[(ys >= radius) & (ys < shape[0] - radius)], xs[(xs >= radius) & (xs < shape[1] - radius)]


def _grid(shape: tuple[int, int], site: tuple[int, int], radius: int, max_samples: int):
    """The regular sub-grid of fit centres of ``site``: (first row, first column, stride, ny, nx)."""
    ys, xs = _centres(shape, site, radius)
    if ys.size == 0 or xs.size == 0:
        raise RawrclError(f"mosaic of shape {shape} is too small for a {2 * radius + 1}-pixel window")
    step = max(1, int(np.ceil(np.sqrt(ys.size * xs.size / max_samples))))
    return int(ys[0]), int(xs[0]), 2 * step, len(ys[::step]), len(xs[::step])


def fit_predictor(
    cfa: np.ndarray,
    site: tuple[int, int],
    radius: int = 3,
    max_samples: int = 200_000,
    clipped: np.ndarray | None = None,
) -> np.ndarray:
    """Constrained least-squares predictor of the samples of one CFA ``site`` (row, column parity).

    Parameters
    ----------
    cfa : (H, W) mosaic in [0, 1].
    site : (py, px) ∈ {0, 1}², the centre samples' position in the 2×2 period.
    radius : window half-size in mosaic pixels; ``len(offsets(radius))`` weights.
    max_samples : at most this many centres (a regular sub-grid) enter the fit.
    clipped : optional (H, W) bool mask of clipped samples; centres whose window touches one are left
        out of the fit.

    Returns
    -------
    (n,) weights in the order of :func:`offsets`.
    """
    offs = offsets(radius)
    y0, x0, st, ny, nx = _grid(cfa.shape, site, radius, max_samples)

    def at(
        dy: int, dx: int, a: np.ndarray
    ) -> np.ndarray:  # a[centre + offset] on the whole sub-grid, (ny, nx)
        return a[y0 + dy : y0 + dy + st * (ny - 1) + 1 : st, x0 + dx : x0 + dx + st * (nx - 1) + 1 : st]

    keep = np.ones((ny, nx), dtype=bool)
    if clipped is not None:
        for dy, dx in [(0, 0), *offs]:
            keep &= ~at(dy, dx, clipped)
    c, b = _constraints(site, offs)
    n = len(offs)
    count = int(keep.sum())
    if count < 4 * n:  # too little to fit: the minimal-norm weights that meet the constraints
        return np.linalg.lstsq(c, b, rcond=None)[0]
    # neighbours (rows) × centres; left-out centres are zeroed, so they add nothing to the moments
    a = np.empty((n + 1, ny, nx))
    for j, (dy, dx) in enumerate([*offs, (0, 0)]):
        np.multiply(at(dy, dx, cfa), keep, out=a[j])
    a = torch.from_numpy(a.reshape(n + 1, ny * nx))
    # the data enter only through second moments (torch: numpy's threaded BLAS stalls on a busy machine)
    mom = (a @ a[:n].T).numpy() / count
    g, h = mom[:n], mom[n]
    # scale them so the KKT system is well conditioned
    g += 1e-9 * np.trace(g) / n * np.eye(n)
    kkt = np.block([[g, c.T], [c, np.zeros((c.shape[0], c.shape[0]))]])
    return np.linalg.solve(kkt, np.concatenate([h, b]))[:n]


def apply_predictor(
    cfa: np.ndarray, weights: list[np.ndarray], radius: int = 3, *, mean: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Unit-gain residual d and weighted mean m of every sample, given one weight vector per site
    (the order of :data:`SITES`). Returns two (H, W) float64 arrays, NaN at the borders (m is None
    when ``mean`` is False)."""
    cfa = np.asarray(cfa, dtype=np.float64)
    offs = offsets(radius)
    d = np.full(cfa.shape, np.nan)
    m = np.full(cfa.shape, np.nan)
    # the four sites as contiguous planes: a neighbour of a site is a shifted slice of one of them
    planes = {(py, px): np.ascontiguousarray(cfa[py::2, px::2]) for py, px in SITES}
    for site, w in zip(SITES, weights, strict=True):
        ys, xs = _centres(cfa.shape, site, radius)
        if ys.size == 0 or xs.size == 0:
            continue
        sl = (slice(ys[0], ys[-1] + 1, 2), slice(xs[0], xs[-1] + 1, 2))
        x0 = cfa[sl]
        pred = np.zeros_like(x0)
        msum = x0.copy()
        tmp = np.empty_like(x0)
        for wj, (dy, dx) in zip(w, offs, strict=True):
            (qy, oy), (qx, ox) = divmod(int(ys[0]) + dy, 2)[::-1], divmod(int(xs[0]) + dx, 2)[::-1]
            nb = planes[(qy, qx)][oy : oy + x0.shape[0], ox : ox + x0.shape[1]]
            pred += np.multiply(wj, nb, out=tmp)
            if mean:
                msum += np.multiply(wj * wj, nb, out=tmp)
        g = 1.0 + float(np.sum(w**2))
        d[sl] = (x0 - pred) / np.sqrt(g)
        m[sl] = msum / g
    return d, (m if mean else None)


def tile_means(
    planes: np.ndarray,
    weights: list[np.ndarray],
    rows: np.ndarray,
    cols: np.ndarray,
    block: int,
    radius: int = 3,
) -> np.ndarray:
    """Tile means of the weighted local mean m of :func:`apply_predictor`, without the per-sample map.

    ``planes`` (4, h, w) are the mosaic's sites in the order of :data:`SITES` (RGGB-packed); the tiles
    of site k are the ``block``² squares of plane k with top-left corners (rows[a], cols[b]) (their
    windows must lie inside the planes). Since m = (x₀ + Σ wⱼ² xⱼ)/(1 + Σw²) is linear, its tile mean is
    the same combination of box means of the (shifted) planes, read from summed-area tables.
    Returns (4, len(rows), len(cols)) float64."""
    sat = np.zeros((4, planes.shape[1] + 1, planes.shape[2] + 1))
    np.cumsum(np.cumsum(planes, axis=1, dtype=np.float64), axis=2, out=sat[:, 1:, 1:])
    r, c = np.asarray(rows)[:, None], np.asarray(cols)[None, :]

    def box(k: int, oy: int, ox: int) -> np.ndarray:
        t = sat[k]
        y0, x0, y1, x1 = r + oy, c + ox, r + oy + block, c + ox + block
        return t[y1, x1] - t[y0, x1] - t[y1, x0] + t[y0, x0]

    out = np.empty((4, r.shape[0], c.shape[1]))
    for k, ((py, px), w) in enumerate(zip(SITES, weights, strict=True)):
        acc = box(k, 0, 0)
        for wj, (dy, dx) in zip(w, offsets(radius), strict=True):
            (qy, oy), (qx, ox) = divmod(py + dy, 2)[::-1], divmod(px + dx, 2)[::-1]
            acc += (wj * wj) * box(2 * qy + qx, oy, ox)
        out[k] = acc / (block * block * (1.0 + float(np.sum(w**2))))
    return out


def window_touches(mask: np.ndarray, radius: int) -> np.ndarray:
    """(H, W) bool: the (2·radius+1)² window around the sample contains a ``mask`` sample."""
    import cv2  # a binary dilation (scipy.ndimage's maximum_filter, without its import time)

    box = np.ones((2 * radius + 1, 2 * radius + 1), np.uint8)
    grown = cv2.dilate(mask.astype(np.uint8), box, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    return grown > 0


def cfa_residual(
    cfa: np.ndarray, radius: int = 3, max_samples: int = 200_000, clipped: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Fit the four site predictors on ``cfa`` (H, W) and return ``(d, m, weights)``: the unit-gain
    residual and weighted mean, (H, W) each (NaN at the borders), and the four weight vectors.
    ``clipped`` (H, W) bool: centres whose window touches a clipped sample are left out of the fit."""
    cfa = np.asarray(cfa, dtype=np.float64)
    if cfa.ndim != 2:
        raise RawrclError(f"expected a Bayer mosaic (H, W), got shape {cfa.shape}")
    weights = [fit_predictor(cfa, s, radius, max_samples, clipped) for s in SITES]
    d, m = apply_predictor(cfa, weights, radius)
    return d, m, weights


@lru_cache(maxsize=64)
def _noise_fields(side: int, count: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(12345)
    return tuple(rng.standard_normal((side, side)) for _ in range(count))


def site_weights(weights: list[np.ndarray], radius: int = 3) -> np.ndarray:
    """(4, 4) W[s, q]: the share of site q's samples in the noise of the residual of site s (centre 1
    and the squared weights on q's samples, over 1 + Σw²; rows sum to 1): for independent noise whose
    variance differs by site, E[d²] = Σ_q W[s, q]·var_q."""
    out = np.zeros((4, 4))
    for k, ((py, px), w) in enumerate(zip(SITES, weights, strict=True)):
        out[k, k] = 1.0
        for wj, (dy, dx) in zip(w, offsets(radius), strict=True):
            out[k, 2 * ((py + dy) % 2) + (px + dx) % 2] += wj * wj
        out[k] /= 1.0 + float(np.sum(w**2))
    return out


def kurtosis_weight(weights: list[np.ndarray], block: int, radius: int = 3) -> float:
    """β of :class:`rawrcl.calibration.censored.TileShape`: with S_k the total squared (unit-gain)
    coefficient with which mosaic sample k enters the residuals of one block×block tile of a site's
    centres, the 4th cumulant of the samples adds β·κ/n to the relative variance of the tile mean of d²
    (n = block², κ the samples' excess kurtosis), β = Σ S_k²/n (< 1: a sample's weight is spread over
    several residuals). The mean over the four sites."""
    offs = offsets(radius)
    side = 2 * block + 2 * radius
    out = []
    for (py, px), w in zip(SITES, weights, strict=True):
        canvas = np.zeros((side + 2, side + 2))
        g = 1.0 + float(np.sum(w**2))
        for dy, dx, c2 in [
            (0, 0, 1.0),
            *((dy, dx, float(wj * wj)) for wj, (dy, dx) in zip(w, offs, strict=True)),
        ]:
            y0, x0 = radius + py + dy, radius + px + dx
            canvas[y0 : y0 + 2 * block : 2, x0 : x0 + 2 * block : 2] += c2 / g
        out.append(float(np.sum(canvas**2)) / block**2)
    return float(np.mean(out))


def pure_noise_residuals(weights: list[np.ndarray], radius: int = 3, side: int = 520, count: int = 4):
    """The residual ``d`` (H, W) of unit-variance white noise through the given predictors, for the
    Monte Carlo quantile tables of the tile statistic (fixed seed; ``count`` fields of ``side``²: with
    8×8 tiles, 4 096 pure-noise tiles per site)."""
    return [apply_predictor(f, weights, radius, mean=False)[0] for f in _noise_fields(side, count)]
