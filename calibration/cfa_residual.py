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


def fit_predictor(
    cfa: np.ndarray,
    site: tuple[int, int],
    radius: int = 3,
    max_samples: int = 200_000,
    exclude: np.ndarray | None = None,
) -> np.ndarray:
    """Constrained least-squares predictor of the samples of one CFA ``site`` (row, column parity).

    Parameters
    ----------
    cfa : (H, W) mosaic in [0, 1].
    site : (py, px) ∈ {0, 1}², the centre samples' position in the 2×2 period.
    radius : window half-size in mosaic pixels; ``len(offsets(radius))`` weights.
    max_samples : at most this many centres (a regular sub-grid) enter the fit.
    exclude : optional (H, W) bool mask of centres to leave out (e.g. clipped neighbourhoods).

    Returns
    -------
    (n,) weights in the order of :func:`offsets`.
    """
    offs = offsets(radius)
    ys, xs = _centres(cfa.shape, site, radius)
    if ys.size == 0 or xs.size == 0:
        raise RawrclError(f"mosaic of shape {cfa.shape} is too small for a {2 * radius + 1}-pixel window")
    step = max(1, int(np.ceil(np.sqrt(ys.size * xs.size / max_samples))))
    yy, xx = np.meshgrid(ys[::step], xs[::step], indexing="ij")
    yy, xx = yy.ravel(), xx.ravel()
    if exclude is not None:
        keep = ~exclude[yy, xx]
        yy, xx = yy[keep], xx[keep]
    c, b = _constraints(site, offs)
    n = len(offs)
    if yy.size < 4 * n:  # too little to fit: the minimal-norm weights that meet the constraints
        return np.linalg.lstsq(c, b, rcond=None)[0]
    a = np.stack([cfa[yy + dy, xx + dx] for dy, dx in offs], axis=1)
    t = cfa[yy, xx]
    # the data enter only through second moments; scale them so the KKT system is well conditioned
    g = a.T @ a / yy.size
    h = a.T @ t / yy.size
    g += 1e-9 * np.trace(g) / n * np.eye(n)
    kkt = np.block([[g, c.T], [c, np.zeros((c.shape[0], c.shape[0]))]])
    return np.linalg.solve(kkt, np.concatenate([h, b]))[:n]


def apply_predictor(
    cfa: np.ndarray, weights: list[np.ndarray], radius: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    """Unit-gain residual d and weighted mean m of every sample, given one weight vector per site
    (the order of :data:`SITES`). Returns two (H, W) float64 arrays, NaN at the borders."""
    cfa = np.asarray(cfa, dtype=np.float64)
    offs = offsets(radius)
    d = np.full(cfa.shape, np.nan)
    m = np.full(cfa.shape, np.nan)
    for site, w in zip(SITES, weights, strict=True):
        ys, xs = _centres(cfa.shape, site, radius)
        if ys.size == 0 or xs.size == 0:
            continue
        sl = (slice(ys[0], ys[-1] + 1, 2), slice(xs[0], xs[-1] + 1, 2))
        x0 = cfa[sl]
        pred = np.zeros_like(x0)
        msum = x0.copy()
        for wj, (dy, dx) in zip(w, offs, strict=True):
            nb = cfa[ys[0] + dy : ys[-1] + dy + 1 : 2, xs[0] + dx : xs[-1] + dx + 1 : 2]
            pred += wj * nb
            msum += wj * wj * nb
        g = 1.0 + float(np.sum(w**2))
        d[sl] = (x0 - pred) / np.sqrt(g)
        m[sl] = msum / g
    return d, m


def window_touches(mask: np.ndarray, radius: int) -> np.ndarray:
    """(H, W) bool: the (2·radius+1)² window around the sample contains a ``mask`` sample."""
    from scipy.ndimage import maximum_filter

    return maximum_filter(mask.astype(np.uint8), size=2 * radius + 1, mode="constant") > 0


def cfa_residual(
    cfa: np.ndarray, radius: int = 3, max_samples: int = 200_000, exclude: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Fit the four site predictors on ``cfa`` (H, W) and return ``(d, m, weights)``: the unit-gain
    residual and weighted mean, (H, W) each (NaN at the borders), and the four weight vectors.
    ``exclude`` (H, W) bool marks centres left out of the fit, e.g. ``window_touches(clipped, radius)``."""
    cfa = np.asarray(cfa, dtype=np.float64)
    if cfa.ndim != 2:
        raise RawrclError(f"expected a Bayer mosaic (H, W), got shape {cfa.shape}")
    weights = [fit_predictor(cfa, s, radius, max_samples, exclude) for s in SITES]
    d, m = apply_predictor(cfa, weights, radius)
    return d, m, weights


@lru_cache(maxsize=64)
def _noise_fields(side: int, count: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(12345)
    return tuple(rng.standard_normal((side, side)) for _ in range(count))


def pure_noise_residuals(weights: list[np.ndarray], radius: int = 3, side: int = 520, count: int = 4):
    """The residual ``d`` (H, W) of unit-variance white noise through the given predictors, for the
    Monte Carlo quantile tables of the tile statistic (fixed seed; ``count`` fields of ``side``²: with
    8×8 tiles, 4 096 pure-noise tiles per site)."""
    return [apply_predictor(f, weights, radius)[0] for f in _noise_fields(side, count)]
