"""Fitting the noise level function var = λshot·x + λread to tile statistics.

:func:`fit_nlf` is the robust non-negative line fit used by every calibration method;
:func:`binned_quantiles` and :class:`PureNoiseTable` give per-bin lower-quantile variance estimates.
The tile fits built on them (plain and censored) are in :mod:`rawrcl.calibration.tile_fit`.

Units: means in [0, 1] after black/white level, variances in [0, 1]².
"""

from __future__ import annotations

import numpy as np

from rawrcl.errors import RawrclError


def _median(x: np.ndarray) -> float:
    """``np.median`` of a short 1-D array (the same value, without its per-call overhead)."""
    s = np.sort(x)
    k = s.size // 2
    return float(s[k]) if s.size % 2 else float((s[k - 1] + s[k]) / 2)


def nnls2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ‖a·x − b‖² over x ≥ 0 for two unknowns: ``a`` (n, 2), ``b`` (n,) → x (2,).

    Exact (the same optimum as ``scipy.optimize.nnls``): the unconstrained least-squares solution when it
    is non-negative, else the better of the two one-column solutions — the optimum of a convex problem
    sits on one of these supports. Small enough to spare the CLI the import of ``scipy.optimize``.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    best, best_r = np.zeros(2), float(b @ b)
    sol, *_ = np.linalg.lstsq(a, b, rcond=None)
    if (sol >= 0).all():
        return sol
    for j in (0, 1):
        col = a[:, j]
        nn = float(col @ col)
        x = max(float(col @ b) / nn, 0.0) if nn > 0 else 0.0
        r = b - col * x
        if float(r @ r) < best_r:
            best_r, best = float(r @ r), np.where(np.arange(2) == j, x, 0.0)
    return best


def fit_nlf(
    mean: np.ndarray, var: np.ndarray, count: np.ndarray, *, robust: bool = True, iters: int = 6
) -> tuple[float, float, np.ndarray]:
    """Fit var = λshot·mean + λread with λ ≥ 0 by iteratively re-weighted NNLS.

    Parameters
    ----------
    mean, var, count : 1-D arrays of bin means ([0, 1]), bin variance estimates ([0, 1]²) and the
        number of samples behind each bin (the variance of a bin estimate is taken ∝ var² / count).
    robust : downweight bins lying far from the line (Tukey biweight on standardised, robustly
        centred residuals; asymmetric: bins above the line are rejected sooner).

    Returns
    -------
    (λshot, λread, weights) — the final relative weight of each bin (0 = rejected).
    """
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    count = np.asarray(count, dtype=np.float64)
    if mean.size < 2:
        raise RawrclError("not enough signal levels to fit the noise level function")
    a = np.stack([mean, np.ones_like(mean)], axis=1)
    model = np.maximum(var, 1e-20)
    rob = np.ones_like(mean)
    coef = np.zeros(2)
    for it in range(iters):
        # scale the columns so the NNLS problem is well conditioned
        w = np.sqrt(count * rob) / np.maximum(model, 1e-20)
        aw = a * w[:, None]
        scale = np.maximum(np.abs(aw).max(axis=0), 1e-30)
        sol = nnls2(aw / scale, var * w)
        coef = sol / scale
        model = np.maximum(a @ coef, 1e-3 * max(_median(var), 1e-20))
        if robust and it >= 1 and mean.size >= 4:
            # standardised residuals, centred robustly (a contaminated fit shifts them all)
            z = (var - model) / model * np.sqrt(count)
            zc = z - _median(z)
            s = 1.4826 * _median(np.abs(zc)) + 1e-12
            # asymmetric: texture only adds variance, so bins above the line are cut sooner
            tune = np.where(zc > 0, 2.5, 4.685)
            u = zc / (tune * max(s, 1.0))
            rob = np.where(np.abs(u) < 1, (1 - u**2) ** 2, 0.0)
            if np.count_nonzero(rob > 0.05) < 2:
                rob = np.ones_like(mean)
    return float(coef[0]), float(coef[1]), rob


class PureNoiseTable:
    """Sorted statistic ``ref`` of pure-noise tiles (same tile size and detail as the image's) with what
    the binned fit needs of it precomputed: its quantiles, and the low-tail quantile ratio as a function
    of the homogeneous fraction π (:meth:`homogeneous_fraction`)."""

    P = (0.02, 0.1)

    def __init__(self, ref: np.ndarray):
        self.ref = np.asarray(ref, dtype=np.float64)
        self.pis = np.linspace(self.P[1], 1.0, 91)
        self.ratio = np.quantile(self.ref, np.minimum(self.P[1] / self.pis, 1)) / np.quantile(
            self.ref, self.P[0] / self.pis
        )
        self._q: dict[float, float] = {}

    def quantile(self, q: float) -> float:
        if q not in self._q:
            self._q[q] = float(np.quantile(self.ref, q))
        return self._q[q]

    def homogeneous_fraction(self, r: np.ndarray) -> float:
        """Fraction π of tiles that look like pure noise, from the shape of the lower tail.

        ``r`` are tile statistics normalised by a noise model (any constant scale). Model: the lower
        tail of r follows π·F(r/s) with F the pure-noise distribution; the ratio of two low quantiles of
        r, F⁻¹(p₂/π)/F⁻¹(p₁/π), identifies π (textured tiles only populate the upper part)."""
        if r.size < 20:
            return 1.0
        lo, hi = np.quantile(r, self.P)
        ratio = hi / max(lo, 1e-30)
        # the model ratio decreases as π decreases (the quantiles move to the centre); pick the closest
        return float(self.pis[int(np.argmin(np.abs(self.ratio - ratio)))])


def homogeneous_fraction(r: np.ndarray, ref: np.ndarray) -> float:
    """:meth:`PureNoiseTable.homogeneous_fraction` for a sorted pure-noise statistic ``ref``."""
    return PureNoiseTable(ref).homogeneous_fraction(r)


def _sorted_quantiles(r: np.ndarray, starts: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """``np.quantile(seg, q)`` (method "linear", exactly) of every segment ``r[start:start+count]`` of an
    array sorted within segments (counts ≥ 2)."""
    virtual = (counts - 1) * q
    prev = np.floor(virtual)
    gamma = virtual - prev
    i = starts + prev.astype(np.intp)
    a, b = r[i], r[np.minimum(i + 1, starts + counts - 1)]
    diff = b - a
    out = a + diff * gamma
    hi = gamma >= 0.5
    out[hi] = (b - diff * (1 - gamma))[hi]
    return out


def binned_quantiles(
    mu: np.ndarray, v: np.ndarray, edges: np.ndarray, q: float, cq: float, norm: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin of tile mean (``edges``; bins with < 4 tiles skipped): (mean of mu, noise variance,
    tile count). The variance is the ``q``-quantile of the tile statistics ``v`` divided by ``cq``, the
    same quantile of pure-noise tiles; with ``norm`` (a model variance per tile) the tiles are
    normalised by it first and the result is re-scaled at the bin's mean model value."""
    nb = len(edges) - 1
    idx = np.clip(np.searchsorted(edges, mu, side="right") - 1, 0, nb - 1)
    r = v if norm is None else v / norm
    order = np.argsort(r)
    order = order[np.argsort(idx[order], kind="stable")]  # by bin, sorted by r within (2× lexsort's speed)
    counts = np.bincount(idx, minlength=nb)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ok = counts >= 4
    n = np.maximum(counts, 1)
    means = np.bincount(idx, weights=mu, minlength=nb) / n
    vk = _sorted_quantiles(r[order], starts[ok], counts[ok], q) / cq
    if norm is not None:
        vk = vk * (np.bincount(idx, weights=norm, minlength=nb) / n)[ok]
    return means[ok], vk, counts[ok]
