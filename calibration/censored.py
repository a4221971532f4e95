"""Noise statistics of a mosaic clipped at black (black level already subtracted, values < floor → floor).

Many phone DNGs (and ``read_raw(clip=True)``) store x̃ = max(x + n, c) with c the floor (0 after black
subtraction). Where the signal is within a few noise std of the floor, a clipped flat patch of true
level μ and noise std σ = √(λshot·μ + λread) has, with a = (μ − c)/σ and Φ, φ the normal cdf and pdf,

    mean   c + σ·M(a),  M(a) = a·Φ(a) + φ(a)
    var    σ²·V(a),     V(a) = (a² + 1)·Φ(a) + a·φ(a) − M(a)²

(the censored normal). The cross-colour residual of such a patch still has zero mean (its weights on
each site sum to 0 or 1, so per-site constant levels cancel) and ``E[d²]`` equals the censored variance,
and the weighted mean m estimates the censored mean (checked by Monte Carlo, docs/calibration.md). So
binned (mean, variance) pairs of dark tiles lie on the curve a ↦ (c + σM(a), σ²V(a)) of the line
(λshot, λread), which :class:`CensoredLine` evaluates and inverts (with Poisson shot noise: at a few
photo-electrons per sample the clipped moments are not the censored normal's). The lower-quantile
statistic of the tiles also changes shape when the samples are far from Gaussian (clipped, or a few
photo-electrons): :class:`TileShape` corrects it from their excess kurtosis.

Units: [0, 1] after black/white level; variances in [0, 1]².
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from rawrcl.errors import RawrclError

from .nlf_fit import PureNoiseTable, binned_quantiles, fit_nlf
from .result import PlaneBins
from .special import gammaincinv, gammaln, ndtr

#: bins whose level is less than this many noise std above the floor (more than ~50 % of their samples
#: clipped) are left out of the fit: there the inversion of the censored curve is ill-conditioned
A_MIN = 0.5
#: bins whose samples are further from Gaussian than this excess kurtosis (a fraction of a photo-electron
#: per sample, or heavily clipped) are left out: the gamma law of :class:`TileShape` no longer holds there
KURT_MAX = 2.0


def unit_moments(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(M(a), V(a)): mean and variance of max(Z + a, 0), Z ~ N(0, 1); arrays like ``a``."""
    a = np.asarray(a, dtype=np.float64)
    cdf, pdf = ndtr(a), np.exp(-0.5 * a * a) / np.sqrt(2 * np.pi)
    m = a * cdf + pdf
    return m, np.maximum((a * a + 1) * cdf + a * pdf - m * m, 1e-300)


def truncated_moments(b: np.ndarray, jmax: int = 4) -> list[np.ndarray]:
    """I_j(b) = E[(Z + b)^j · 1{Z > −b}], Z ~ N(0, 1), j = 0..jmax: the raw moments of max(Z + b, 0)
    for j ≥ 1 (recurrence I_j = b·I_{j−1} + (j − 1)·I_{j−2}, I_1 = b·Φ(b) + φ(b))."""
    b = np.asarray(b, dtype=np.float64)
    out = [ndtr(b), b * ndtr(b) + np.exp(-0.5 * b * b) / np.sqrt(2 * np.pi)]
    for j in range(2, jmax + 1):
        out.append(b * out[-1] + (j - 1) * out[-2])
    return out


class CensoredLine:
    """The noise line var = λshot·μ + λread seen through a clip at ``floor``: observed (mean, variance) of
    clipped flat patches against their true level μ ≥ 0.

    Poisson–Gaussian (``poisson``, default; the physics of a sensor, x̃ = λshot·K + N(0, λread) with
    K ~ Poisson(μ/λshot)): at a few photo-electrons per sample the clipped moments differ from the
    censored normal's (the lower tail is read noise around 0 rather than a wide Gaussian), which biased
    λread upwards on simulated dark captures (docs/calibration.md). Mean counts above 50 use the
    censored normal. Tabulated on a grid of μ up to where the clip is 8 std away; above it observed =
    true."""

    def __init__(self, floor: float, lambda_shot: float, lambda_read: float, *, poisson: bool = True):
        c = self.floor = float(floor)
        ls = self.ls = max(float(lambda_shot), 0.0)
        lr = self.lr = max(float(lambda_read), 0.0)
        # μ where (μ − c)/σ(μ) = 8: μ² − (2c + 64λs)μ + c² − 64λr = 0
        b = 2 * c + 64 * ls
        top = max(0.5 * (b + np.sqrt(max(b * b - 4 * (c * c - 64 * lr), 0.0))), c + 1e-9, 1e-9)
        self.mu = top * np.linspace(0.0, 1.0, 161) ** 2  # dense near the floor
        s = max(np.sqrt(lr), 1e-12)
        sig = self.sigma(self.mu)
        gauss = np.ones(self.mu.shape, dtype=bool)
        raw = np.empty((4, self.mu.size))  # E[(x̃ − c)^j], j = 1..4
        if poisson and ls > 0:
            n = self.mu / ls
            gauss = n > 50  # above ~50 photo-electrons Poisson ≈ Gaussian here (excess kurtosis 1/n)
            if (~gauss).any():
                kmax = int(np.ceil(n[~gauss].max() + 12 * np.sqrt(n[~gauss].max()) + 20))
                k = np.arange(kmax + 1)
                nn = n[~gauss][:, None]
                logp = k * np.log(np.maximum(nn, 1e-300)) - nn - gammaln(k + 1)
                p = np.where(nn > 0, np.exp(logp), (k == 0).astype(np.float64))
                part = truncated_moments((ls * k - c) / s)
                for j in range(4):
                    raw[j, ~gauss] = s ** (j + 1) * (p @ part[j + 1])
        part = truncated_moments((self.mu[gauss] - c) / sig[gauss])
        for j in range(4):
            raw[j, gauss] = sig[gauss] ** (j + 1) * part[j + 1]
        m1, m2, m3, m4 = raw
        var = np.maximum(m2 - m1**2, 1e-300)
        self.mean = c + np.maximum.accumulate(m1)  # increasing in μ (guards rounding)
        self.ratio_var = np.clip(var / sig**2, 1e-6, None)
        self.exkurt = (m4 - 4 * m1 * m3 + 6 * m1**2 * m2 - 3 * m1**4) / var**2 - 3

    def sigma(self, mu: np.ndarray) -> np.ndarray:
        """Unclipped noise std √(λshot·μ + λread) at true level μ."""
        return np.maximum(np.sqrt(self.ls * np.maximum(mu, 0.0) + self.lr), 1e-12)

    def level(self, m: np.ndarray) -> np.ndarray:
        """True level μ of the patches whose observed (clipped) mean is ``m``; μ = m above the table."""
        m = np.asarray(m, dtype=np.float64)
        return np.where(m >= self.mean[-1], m - self.mean[-1] + self.mu[-1], np.interp(m, self.mean, self.mu))

    def ratio(self, mu: np.ndarray) -> np.ndarray:
        """Clipping ratio a = (μ − floor)/σ(μ): the level's distance from the clip in noise std."""
        return (np.asarray(mu) - self.floor) / self.sigma(mu)

    def var_ratio(self, mu: np.ndarray) -> np.ndarray:
        """Observed (clipped) variance over the unclipped one, at true level μ (1 above the table)."""
        return np.interp(mu, self.mu, self.ratio_var, right=1.0)

    def excess_kurtosis(self, mu: np.ndarray) -> np.ndarray:
        """Excess kurtosis of the clipped samples at true level μ (0 for Gaussian, 1/counts for pure
        Poisson; the value at the top of the table above it)."""
        return np.interp(mu, self.mu, self.exkurt)

    def observed_var(self, m: np.ndarray) -> np.ndarray:
        """Variance of clipped patches whose observed mean is ``m`` (the model for tile normalisation)."""
        mu = self.level(m)
        return self.var_ratio(mu) * self.sigma(mu) ** 2


@lru_cache(maxsize=256)
def censored_line(floor: float, lambda_shot: float, lambda_read: float) -> CensoredLine:
    """:class:`CensoredLine` (Poisson–Gaussian), cached: bootstrap resamples start from the same line."""
    return CensoredLine(floor, lambda_shot, lambda_read)


class TileShape:
    """How the lower quantile of the tile statistic (mean of d² over a tile) moves with the noise's
    excess kurtosis κ. With κ = 0 its distribution is the estimator's Gaussian pure-noise table, relative
    variance ``gauss_var``; the 4th cumulant adds ``beta``·κ/``n`` (n samples per tile, ``beta`` from the
    predictors' footprint, :func:`rawrcl.calibration.cfa_residual.kurtosis_weight`). Quantiles come from
    a gamma law of that relative variance (the Gaussian table's 2 %–10 % quantiles within 0.5 %; against
    Monte Carlo of clipped and of Poisson noise the factor is within ≈ 2 %, docs/calibration.md)."""

    def __init__(self, gauss_var: float, beta: float, n: int):
        self.gauss_var, self.beta, self.n = float(gauss_var), float(beta), int(n)

    def factor(self, exkurt: np.ndarray, q: float) -> np.ndarray:
        """Q_κ(q)/Q_0(q): the ratio by which the q-quantile of the tile statistic of noise with excess
        kurtosis κ falls short of a Gaussian-calibrated one (both relative to the mean)."""
        var = np.maximum(self.gauss_var + self.beta * np.asarray(exkurt, dtype=np.float64) / self.n, 1e-4)
        k, k0 = 1.0 / var, 1.0 / self.gauss_var
        return (gammaincinv(k, q) / k) / (gammaincinv(k0, q) / k0)


@dataclass(frozen=True)
class Clipping:
    """A mosaic clipped at black: the ``floor`` value ([0, 1] units) and the :class:`TileShape` of its
    tile statistic; :func:`fit_tiles_clipped` fits the censored line."""

    floor: float
    shape: TileShape


class _ClippedBins:
    """The tiles of a clipped fit grouped into bins, with their site levels: ``aux`` (n, 8) = observed
    means of the four sites around each tile, then the weights with which the sites enter the tile's
    residual d (:func:`rawrcl.calibration.cfa_residual.site_weights`, rows summing to 1). The model of a
    bin is the mean of its tiles' (``exact``) or taken at its mean site levels (bootstrap resamples)."""

    def __init__(
        self, mu: np.ndarray, aux: np.ndarray, edges: np.ndarray, clip: Clipping, exact: bool = True
    ):
        self.sites, self.w, self.clip, self.exact = aux[:, :4], aux[:, 4:8], clip, exact
        nb = len(edges) - 1
        idx = np.clip(np.searchsorted(edges, mu, side="right") - 1, 0, nb - 1)
        counts = np.bincount(idx, minlength=nb)
        ok = counts >= 4  # the bins binned_quantiles keeps, in its order
        self.count = counts[ok]

        def per_bin(x: np.ndarray) -> np.ndarray:
            return (np.bincount(idx, weights=x, minlength=nb) / np.maximum(counts, 1))[ok]

        self.per_bin = per_bin
        self.mean = per_bin(mu)
        self.bin_sites = np.stack([per_bin(self.sites[:, k]) for k in range(4)], axis=1)
        self.bin_w = np.stack([per_bin(self.w[:, k]) for k in range(4)], axis=1)

    @staticmethod
    def _expect(line: CensoredLine, sites: np.ndarray, w: np.ndarray):
        """Per row of observed site levels and site weights: (E[d²] clipped, E[d²] unclipped, true
        weighted level, weighted sample kurtosis) under ``line``."""
        level = line.level(sites)
        sig2 = line.sigma(level) ** 2
        ed2 = np.sum(w * line.var_ratio(level) * sig2, axis=1)
        return (
            ed2,
            np.sum(w * sig2, axis=1),
            np.sum(w * level, axis=1),
            np.sum(w * line.excess_kurtosis(level), axis=1),
        )

    def tile_var(self, lam: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
        """Per tile, the expected clipped E[d²] under the line ``lam`` (to normalise the tiles) and the
        samples' excess kurtosis."""
        ed2, _, _, kurt = self._expect(censored_line(self.clip.floor, *lam), self.sites, self.w)
        return ed2, kurt

    def declipped(self, var: np.ndarray, q: float, lam: tuple[float, float]):
        """Bins (Gaussian-calibrated lower-quantile variances ``var`` at quantile ``q``) mapped to the
        unclipped line under ``lam``: (level, σ², count) of the bins at least A_MIN noise std above the
        floor, not too far from Gaussian, whose mean the line can explain."""
        line = censored_line(self.clip.floor, *lam)
        if self.exact:  # per tile, then averaged over the bin
            ed2, s2, level, kurt = (self.per_bin(x) for x in self._expect(line, self.sites, self.w))
        else:  # at the bin's mean site levels (faster; a little Jensen bias where the curve bends)
            ed2, s2, level, kurt = self._expect(line, self.bin_sites, self.bin_w)
        sig2 = var / self.clip.shape.factor(kurt, q) / (ed2 / s2)
        a = (level - self.clip.floor) / line.sigma(level)
        keep = (a >= A_MIN) & (self.mean > line.mean[0]) & (kurt <= KURT_MAX)
        return level[keep], sig2[keep], self.count[keep]

    def fit(self, var: np.ndarray, q: float, lam: tuple[float, float], iters: int | None = None):
        """Fixed point of λ → declipped bins → :func:`rawrcl.calibration.nlf_fit.fit_nlf`, from ``lam``.
        Returns (λshot, λread, robust weights, level, σ², count) of the final fit."""
        for _ in range(iters or (20 if self.exact else 1)):  # resamples: one step from the solution
            level, s2, c = self.declipped(var, q, lam)
            if level.size < 2:
                raise RawrclError(
                    "too few signal levels clear of clipping for a noise estimate (the image is too dark "
                    "or mostly clipped)"
                )
            ls, lr, rob = fit_nlf(level, s2, c)
            old = np.sqrt(lam[0] * level + lam[1])
            done = np.max(np.abs(np.sqrt(ls * level + lr) / np.maximum(old, 1e-30) - 1)) < 1e-3
            lam = (ls, lr)
            if done:
                break
        return ls, lr, rob, level, s2, c


def tile_model(aux: np.ndarray, clipping: Clipping, lam: tuple[float, float]) -> np.ndarray:
    """(n, 2): per tile, the expected clipped E[d²] and the samples' excess kurtosis under ``lam``."""
    return np.stack(
        _ClippedBins._expect(censored_line(clipping.floor, *lam), aux[:, :4], aux[:, 4:8])[::3], 1
    )


def fit_tiles_clipped(
    mu: np.ndarray,
    v: np.ndarray,
    aux: np.ndarray,
    ref,
    *,
    quantile: float,
    min_count: int,
    max_bins: int,
    mixture: bool,
    clipping: Clipping,
    start: tuple[float, float] | None = None,
):
    """:func:`rawrcl.calibration.tile_fit.fit_tiles` for a mosaic clipped at black: the same bins and
    lower quantiles, but each bin is compared with the censored line — per tile, the expected E[d²]
    mixes the clipped variances of the four sites at their observed levels with the predictor's site
    weights (sites of different colour are clipped differently) — and the line is found as the fixed
    point of declipping the bins and refitting. ``bins`` hold the declipped (level, σ²) pairs.
    ``start`` (a previous fit, e.g. for bootstrap resamples) skips the first pass; then columns 8–9 of
    ``aux``, if present, are the per-tile model of :func:`tile_model` at ``start``.
    Returns (λshot, λread, bins)."""
    table = ref if isinstance(ref, PureNoiseTable) else PureNoiseTable(ref)
    nb = int(min(max_bins, max(2, mu.size // min_count)))
    edges = np.quantile(mu, np.linspace(0, 1, nb + 1))
    edges[0], edges[-1] = -np.inf, np.inf
    edges = np.unique(edges)
    bins = _ClippedBins(mu, aux, edges, clipping, exact=start is None)
    if start is None or start[0] + start[1] <= 0:
        m, var, cnt = binned_quantiles(mu, v, edges, quantile, table.quantile(quantile), None)
        # start from the bins that are hardly clipped (level > 3 std above the floor), if there are two
        far = (m - clipping.floor) > 3 * np.sqrt(np.maximum(var, 0))
        first = far if far.sum() >= 2 else np.ones_like(far)
        ls, lr, _ = fit_nlf(m[first], var[first], cnt[first])
        ls, lr, rob, level, s2, c = bins.fit(var, quantile, (ls, lr))
    else:
        ls, lr = start
    if ls + lr > 0:
        if start is not None and aux.shape[1] >= 10:  # resample: the full fit's per-tile model
            model, kurt = aux[:, 8], aux[:, 9]
        else:
            model, kurt = bins.tile_var((ls, lr))
        model = np.maximum(model, 1e-20)
        # the homogeneous fraction from the near-Gaussian tiles only: the wider spread of clipped or
        # few-photon tiles would pass for texture (a smooth dark scene read π ≈ 0.4, every bin 10 % low)
        gaussian = kurt <= 0.25
        q2 = quantile
        if mixture and gaussian.sum() >= 20:
            q2 = min(quantile / table.homogeneous_fraction(v[gaussian] / model[gaussian]), 0.5)
        _, var, _ = binned_quantiles(mu, v, edges, quantile, table.quantile(q2), model)
        ls, lr, rob, level, s2, c = bins.fit(var, q2, (ls, lr))
    return ls, lr, PlaneBins(mean=level, var=s2, count=c, used=rob > 0.05)
