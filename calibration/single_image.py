"""Noise level function (λshot, λread) of one noisy RAW mosaic, from the image itself.

Method (in the spirit of Foi et al. 2008 and darktable's noise profiler, own implementation):

1. The noise detail (``detail="cfa"``, default; :mod:`.cfa_residual`): every sample minus its prediction
   by a linear predictor of its 7×7 neighbourhood of all four CFA sites (``radius=3``), fitted to the
   image by least squares under constraints that cancel flat patches of any colour and linear ramps,
   divided by √(1 + Σw²). Texture shared by the colours is predicted from the other sites one pixel
   away, so far less of it reaches the statistic than with a same-plane high-pass; noise passes with
   unit gain and ``E[d²] = λshot · m + λread`` with m the w²-weighted local mean.
   ``detail="plane"`` (and :func:`estimate_plane`, which sees one plane only): per packed CFA plane P
   (h, w), a separable high-pass ``d = (k ⊗ k) * P / Σk²`` with k the
   4th-order finite difference [1, −4, 6, −4, 1] (``order=4``, default; ``order=2`` gives
   Immerkær's [1, −2, 1] kernel) annihilates every signal that is locally a polynomial of degree
   < 4 in one direction, keeps white noise with unit gain, and passes little natural-image texture
   (its response is concentrated at the Nyquist frequency). For independent noise,
   ``E[d²] = Σ K²ᵢⱼ · σ²(xᵢⱼ) = λshot · m + λread`` exactly, where ``m = Σ K²ᵢⱼ xᵢⱼ / ΣK²`` is the
   K²-weighted local mean — so that weighted mean is the one used for binning.
2. The plane is cut into non-overlapping ``block × block`` tiles; each tile gives a local mean and a
   local noise-variance estimate ``v = mean(d²)``. Texture and edges only *add* energy to ``v``.
3. Tiles where more than ``max_clipped`` of the samples are clipped are dropped (clipping shrinks
   the variance near black and white). Clipped = ≥ 1, or equal to the plane's minimum/maximum when
   that value piles up (``read_raw(clip=True)`` data, or a camera that clips at black); negative
   values of a pedestal-preserving read (``read_raw(clip=False)``, what ``calibrate_file`` uses)
   are genuine noise and are kept.
   Texture filter (``texture_keep``, default 0.5; only on planes with ≥ ``texture_min_tiles`` usable
   tiles): within equal-count bins of tile mean, only the ``texture_keep`` fraction of tiles with the
   least coarse-scale structure (:func:`coarse_texture`: squared 3-px differences of the plane
   low-passed by a Gaussian of σ = 1.5 px, a band that does not overlap the noise high-pass) is kept.
   On unfiltered CBSD68 mosaics (plane detail) this lowered the median error at x = 0.5 from 16.9 % to
   15.1 %.
4. Tiles are binned by mean (equal counts). In each bin the ``quantile``-th lowest tile variance is
   taken (the most homogeneous tiles) and divided by the same quantile of pure-noise tiles, measured
   by Monte Carlo for the same tile size and detail (fixed-seed white noise through the same kernel or
   the image's own predictors), which makes it unbiased for Gaussian noise. A second pass normalises
   each tile by the first fit before taking the quantile (wide bins do not bias it) and, with
   ``mixture=True``, corrects for the fraction π of tiles that look like pure noise: if only π of the
   tiles are homogeneous, the q-quantile of all tiles is the (q/π)-quantile of the homogeneous ones;
   π is identified from the ratio of two low quantiles.
5. var = λshot · mean + λread is fitted by iteratively re-weighted non-negative least squares
   (weights n / var², and an asymmetric Tukey biweight on robustly centred residuals — tuning 2.5
   above the line, 4.685 below, since texture only adds variance), so λ ≥ 0. The uncertainty is a
   bootstrap over tiles (one standard deviation).

Alternative (``estimator="pca"``, :mod:`.pca_noise`): per signal-level bin, the lowest level at which
the noise-subspace eigenvalues of the 5×5 patch covariance (Chen et al. 2015) of the patches that look
like pure noise at that level (Liu et al.) reproduce it; then the same NNLS fit. More accurate than
``"tiles"`` on smooth scenes, less on fine texture (docs/calibration.md), so the default stays
``"tiles"``; its uncertainty is a bootstrap over bins.

Units: the input is a mosaic in [0, 1] after black/white level; λshot in [0, 1] units, λread in
[0, 1]² units (variance = λshot·x + λread).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.optimize import nnls

from rawrcl.cfa import CHANNELS, check_pattern, pack, unpack
from rawrcl.errors import RawrclError

from .cfa_residual import cfa_residual, pure_noise_residuals, window_touches
from .pca_noise import binned_pca_variance, extract_patches
from .result import CalibrationResult, PlaneBins

#: Default estimator settings (tuned on CBSD68-simulated mosaics, see benchmarks/calibration.py).
DEFAULTS = {
    "block": 8,
    "quantile": 0.1,
    "min_count": 24,
    "max_bins": 24,
    "bootstrap": 48,
    "max_clipped": 0.03,
    "tile_stat": "mean",
    "order": 4,
    "mixture": True,
    "estimator": "tiles",
    "patch": 5,
    "max_patches": 150000,
    "min_patches": 400,
    "texture_keep": 0.5,
    "texture_scale": 3,
    "texture_min_tiles": 300,
    "detail": "cfa",
    "radius": 3,
    "fit_samples": 200000,
}


_KERNELS = {
    2: np.array([1.0, -2.0, 1.0]),
    4: np.array([1.0, -4.0, 6.0, -4.0, 1.0]),
}


def _sep_valid(p: np.ndarray, k: np.ndarray) -> np.ndarray:
    n = k.size
    t = sum(k[i] * p[:, i : p.shape[1] - n + 1 + i] for i in range(n))
    return sum(k[i] * t[i : t.shape[0] - n + 1 + i] for i in range(n))


def _detail(plane: np.ndarray, order: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """High-pass d = (k ⊗ k) * P / Σk² with k the ``order``-th finite difference (2: [1, −2, 1],
    4: [1, −4, 6, −4, 1]; unit gain for white noise) and the K²-weighted local mean m of a (h, w)
    plane; both (h − order, w − order) float64."""
    if order not in _KERNELS:
        raise RawrclError(f"difference order must be one of {sorted(_KERNELS)}, got {order}")
    p = plane.astype(np.float64, copy=False)
    k = _KERNELS[order]
    norm = float(np.sum(k**2))
    d = _sep_valid(p, k) / norm
    m = _sep_valid(p, k**2) / norm**2
    return d, m


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


def _blocks(a: np.ndarray, b: int) -> np.ndarray:
    """(H, W) → (nH·nW, b·b) non-overlapping tiles (edges cropped)."""
    nh, nw = a.shape[0] // b, a.shape[1] // b
    a = a[: nh * b, : nw * b]
    return a.reshape(nh, b, nw, b).transpose(0, 2, 1, 3).reshape(nh * nw, b * b)


def _tile_reduce(
    d: np.ndarray, m: np.ndarray, clipped: np.ndarray, block: int, tile_stat: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-tile (mean of m, mean or median of d², clipped fraction) of aligned (h, w) maps."""
    dd = _blocks(d * d, block)
    v = dd.mean(axis=1) if tile_stat == "mean" else np.median(dd, axis=1)
    return _blocks(m, block).mean(axis=1), v, _blocks(clipped, block).mean(axis=1)


def tile_statistics(
    plane: np.ndarray, block: int = 8, tile_stat: str = "mean", order: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-tile (mean, noise variance estimate, clipped flag) of one packed plane (h, w) in [0, 1],
    with the same-plane high-pass of :func:`_detail` (``detail="plane"``).

    Returns three 1-D arrays of length n_tiles: weighted local mean ([0, 1]), mean(d²) ([0, 1]²),
    and the fraction of the tile's (centre) samples that are clipped (≤ 0 or ≥ 1).
    """
    d, m = _detail(plane, order)
    a = order // 2
    c = clipped_mask(plane)[a : a + d.shape[0], a : a + d.shape[1]]
    return _tile_reduce(d, m, c, block, tile_stat)


@lru_cache(maxsize=32)
def _pure_noise_tiles(block: int, tile_stat: str = "mean", order: int = 4) -> np.ndarray:
    """Sorted tile statistics of unit-variance white Gaussian noise (fixed-seed Monte Carlo, 16384
    tiles: quantile error < 1 %)."""
    rng = np.random.default_rng(12345)
    side = block * 64 + order
    vals = [tile_statistics(rng.standard_normal((side, side)), block, tile_stat, order)[1] for _ in range(4)]
    return np.sort(np.concatenate(vals))


def homogeneous_fraction(r: np.ndarray, ref: np.ndarray, p: tuple = (0.02, 0.1)) -> float:
    """Fraction π of tiles that look like pure noise, from the shape of the lower tail.

    ``r`` are tile statistics normalised by a noise model (any constant scale); ``ref`` the statistic
    of pure-noise tiles (same tile size and detail). Model: the lower tail of r follows π·F(r/s) with F
    the pure-noise distribution; the ratio of two low quantiles of r, F⁻¹(p₂/π)/F⁻¹(p₁/π), identifies π
    (textured tiles only populate the upper part).
    """
    if r.size < 20:
        return 1.0
    ratio = np.quantile(r, p[1]) / max(np.quantile(r, p[0]), 1e-30)
    pis = np.linspace(p[1], 1.0, 91)
    model = np.quantile(ref, np.minimum(p[1] / pis, 1)) / np.quantile(ref, p[0] / pis)
    # model ratio decreases as π decreases (the quantiles move to the centre); pick the closest
    return float(pis[int(np.argmin(np.abs(model - ratio)))])


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
        sol, _ = nnls(aw / scale, var * w)
        coef = sol / scale
        model = np.maximum(a @ coef, 1e-3 * max(float(np.median(var)), 1e-20))
        if robust and it >= 1 and mean.size >= 4:
            # standardised residuals, centred robustly (a contaminated fit shifts them all)
            z = (var - model) / model * np.sqrt(count)
            zc = z - np.median(z)
            s = 1.4826 * np.median(np.abs(zc)) + 1e-12
            # asymmetric: texture only adds variance, so bins above the line are cut sooner
            tune = np.where(zc > 0, 2.5, 4.685)
            u = zc / (tune * max(s, 1.0))
            rob = np.where(np.abs(u) < 1, (1 - u**2) ** 2, 0.0)
            if np.count_nonzero(rob > 0.05) < 2:
                rob = np.ones_like(mean)
    return float(coef[0]), float(coef[1]), rob


def _binned(
    mu: np.ndarray, v: np.ndarray, edges: np.ndarray, q: float, cq: float, norm: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    idx = np.clip(np.searchsorted(edges, mu, side="right") - 1, 0, len(edges) - 2)
    means, vars_, counts = [], [], []
    for k in range(len(edges) - 1):
        sel = idx == k
        n = int(sel.sum())
        if n < 4:
            continue
        mk = float(mu[sel].mean())
        if norm is None:
            vk = float(np.quantile(v[sel], q)) / cq
        else:
            # normalise each tile by the current model, take the quantile, re-scale at the bin mean
            vk = float(np.quantile(v[sel] / norm[sel], q)) / cq * float(norm[sel].mean())
        means.append(mk)
        vars_.append(vk)
        counts.append(n)
    return np.array(means), np.array(vars_), np.array(counts)


def _fit_tiles(
    mu: np.ndarray,
    v: np.ndarray,
    q: float,
    ref: np.ndarray,
    min_count: int,
    max_bins: int,
    mixture: bool,
) -> tuple[float, float, PlaneBins]:
    """Binned lower-quantile fit of tile statistics ``v`` against tile means ``mu``; ``ref`` is the sorted
    statistic of pure-noise tiles (same tile size and detail), which makes the quantile unbiased."""
    n = mu.size
    nb = int(min(max_bins, max(2, n // min_count)))
    edges = np.quantile(mu, np.linspace(0, 1, nb + 1))
    edges[0], edges[-1] = -np.inf, np.inf
    edges = np.unique(edges)
    cq = float(np.quantile(ref, q))
    m, var, cnt = _binned(mu, v, edges, q, cq, None)
    ls, lr, rob = fit_nlf(m, var, cnt)
    model = np.maximum(ls * np.maximum(mu, 0) + lr, 1e-20)
    if ls + lr > 0:
        if mixture:
            pi = homogeneous_fraction(v / model, ref)
            cq = float(np.quantile(ref, min(q / pi, 0.5)))
        m, var, cnt = _binned(mu, v, edges, q, cq, model)
        ls, lr, rob = fit_nlf(m, var, cnt)
    return ls, lr, PlaneBins(mean=m, var=var, count=cnt, used=rob > 0.05)


def coarse_texture(plane: np.ndarray, block: int, order: int = 4, scale: int = 3) -> np.ndarray:
    """Per-tile structure energy at a coarser scale, aligned with :func:`tile_statistics`' tiles:
    mean squared ``scale``-pixel differences of the plane low-passed by a Gaussian of σ = scale/2.
    The low-pass averages the noise down while edges and gradients survive, and its band does not
    overlap the near-Nyquist high-pass that measures the noise, so selecting on it leaves the noise
    statistic of the kept tiles (nearly) unbiased. Returns (n_tiles,), [0, 1]² units."""
    from scipy.ndimage import gaussian_filter

    # Gaussian (not box) low-pass: no sidelobes, so no Nyquist noise leaks into t
    p = gaussian_filter(np.asarray(plane, dtype=np.float64), scale / 2, mode="nearest")
    g = np.zeros_like(p)
    g[:-scale] += (p[scale:] - p[:-scale]) ** 2
    g[:, :-scale] += (p[:, scale:] - p[:, :-scale]) ** 2
    a = order // 2
    return _blocks(g[a : a + plane.shape[0] - order, a : a + plane.shape[1] - order], block).mean(axis=1)


def _texture_filter(mu: np.ndarray, t: np.ndarray, keep: float, nbins: int) -> np.ndarray:
    """Mask keeping, within each of ``nbins`` equal-count bins of tile mean, the ``keep`` fraction of
    tiles with the least coarse-scale structure ``t``."""
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


def _plane_tiles(
    plane: np.ndarray,
    block: int,
    tile_stat: str,
    max_clipped: float,
    min_count: int,
    name: str,
    order: int,
    texture_keep: float = 1.0,
    texture_scale: int = 3,
    max_bins: int = 24,
    texture_min_tiles: int = 300,
    detail: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
):
    """Usable (tile mean, tile statistic) of one packed plane (h, w). ``detail`` = (d, m, clipped), each
    (h − order, w − order) and aligned like :func:`_detail`'s output, replaces the same-plane high-pass
    (the cross-colour residual of :mod:`.cfa_residual`)."""
    plane = np.asarray(plane, dtype=np.float64)
    if plane.ndim != 2 or min(plane.shape) < 2 * block + order:
        raise RawrclError(
            f"{name}: plane of shape {plane.shape} is too small for a noise estimate "
            f"(need at least {2 * block + order}×{2 * block + order} per CFA plane)"
        )
    if detail is None:
        mu, v, cl = tile_statistics(plane, block, tile_stat, order)
    else:
        mu, v, cl = _tile_reduce(*detail, block, tile_stat)
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
    mu, v = mu[keep], v[keep]
    if texture_keep < 1 and mu.size >= texture_min_tiles:
        t = coarse_texture(plane, block, order if detail is None else 2 * _CFA_CROP, texture_scale)[keep]
        nb = int(min(max_bins, max(2, mu.size // (2 * min_count))))
        sel = _texture_filter(mu, t, texture_keep, nb)
        mu, v = mu[sel], v[sel]
    return mu, v


def _fit_with_bootstrap(
    mu: np.ndarray, v: np.ndarray, settings: dict, ref: np.ndarray, bootstrap: int, seed: int
) -> tuple[tuple[float, float], tuple[float, float], PlaneBins]:
    args = (settings["quantile"], ref, settings["min_count"], settings["max_bins"], settings["mixture"])
    ls, lr, bins = _fit_tiles(mu, v, *args)
    err = (0.0, 0.0)
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(bootstrap):
            i = rng.integers(0, mu.size, mu.size)
            try:
                s, r, _ = _fit_tiles(mu[i], v[i], *args)
            except RawrclError:
                continue
            draws.append((s, r))
        if len(draws) >= 2:
            sd = np.std(np.array(draws), axis=0, ddof=1)
            err = (float(sd[0]), float(sd[1]))
    return (ls, lr), err, bins


def _tile_args(st: dict) -> dict:
    keys = ("block", "tile_stat", "max_clipped", "min_count", "order", "texture_keep", "texture_scale")
    keys += ("max_bins", "texture_min_tiles")
    return {k: st[k] for k in keys}


def _settings(kwargs: dict) -> dict:
    unknown = set(kwargs) - set(DEFAULTS)
    if kwargs.get("estimator", "pca") not in ("pca", "tiles"):
        raise RawrclError(f"estimator must be 'pca' or 'tiles', got {kwargs['estimator']!r}")
    if kwargs.get("detail", "cfa") not in ("cfa", "plane"):
        raise RawrclError(f"detail must be 'cfa' or 'plane', got {kwargs['detail']!r}")
    if not 1 <= int(kwargs.get("radius", 3)) <= _CFA_CROP * 2:
        raise RawrclError(f"radius must be between 1 and {_CFA_CROP * 2}, got {kwargs['radius']!r}")
    if unknown:
        raise TypeError(f"unknown estimator settings: {sorted(unknown)}")
    return {**DEFAULTS, **kwargs}


def _plane_patches(plane: np.ndarray, st: dict, name: str):
    """(means, patches, gradient energies) of one plane for the PCA estimator, with the same
    input checks as the tile estimator (too small, mostly clipped)."""
    plane = np.asarray(plane, dtype=np.float64)
    block, order = st["block"], st["order"]
    if plane.ndim != 2 or min(plane.shape) < 2 * block + order:
        raise RawrclError(
            f"{name}: plane of shape {plane.shape} is too small for a noise estimate "
            f"(need at least {2 * block + order}×{2 * block + order} per CFA plane)"
        )
    clipped = clipped_mask(plane)
    mu, x, g = extract_patches(plane, clipped, st["patch"], st["max_patches"])
    finite = np.isfinite(mu) & np.isfinite(g)
    mu, x, g = mu[finite], x[finite], g[finite]
    if mu.size < 2 * st["min_patches"]:
        frac = float(clipped.mean())
        if frac > 0.5:
            raise RawrclError(
                f"{name}: {100 * frac:.0f}% of the image is clipped (saturated or black); "
                "no usable region for a noise estimate"
            )
        raise RawrclError(
            f"{name}: too few usable regions ({mu.size} unclipped {st['patch']}×{st['patch']} patches) "
            "for a noise estimate; the image is too small"
        )
    return mu, x, g


def _fit_patches(mu: np.ndarray, x: np.ndarray, g: np.ndarray, st: dict):
    kw = {"patch": st["patch"], "min_count": st["min_patches"], "max_bins": st["max_bins"]}
    # first pass: a few wide bins, only to whiten the patches for the second pass
    m, var, cnt = binned_pca_variance(mu, x, g, **{**kw, "max_bins": min(8, st["max_bins"])})
    ls, lr, rob = fit_nlf(m, var, cnt)
    if ls + lr > 0:
        model = np.maximum(ls * np.maximum(mu, 0) + lr, 1e-20)
        m, var, cnt = binned_pca_variance(mu, x, g, model=model, **kw)
        ls, lr, rob = fit_nlf(m, var, cnt)
    return ls, lr, PlaneBins(mean=m, var=var, count=cnt, used=rob > 0.05)


def _pca_with_bootstrap(mu, x, g, st: dict, seed: int):
    ls, lr, bins = _fit_patches(mu, x, g, st)
    err = (0.0, 0.0)
    if st["bootstrap"] > 0 and bins.mean.size >= 3:
        # bootstrap over the signal-level bins (each bin estimate is an independent measurement)
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(st["bootstrap"]):
            i = rng.integers(0, bins.mean.size, bins.mean.size)
            if np.unique(bins.mean[i]).size < 2:
                continue
            try:
                s, r, _ = fit_nlf(bins.mean[i], bins.var[i], bins.count[i])
            except RawrclError:
                continue
            draws.append((s, r))
        if len(draws) >= 2:
            sd = np.std(np.array(draws), axis=0, ddof=1)
            err = (float(sd[0]), float(sd[1]))
    return (ls, lr), err, bins


#: margin (packed pixels) that the cross-colour residual planes are cropped by, like the order-4 detail,
#: so their tiles align with :func:`coarse_texture`'s; it allows windows of radius ≤ 4 mosaic pixels.
_CFA_CROP = 2


def _cfa_details(packed: np.ndarray, st: dict) -> tuple[list[tuple], list[np.ndarray]] | None:
    """Cross-colour residual of a packed mosaic (4, h, w): per plane (d, m, clipped) cropped by
    :data:`_CFA_CROP` (the layout :func:`_plane_tiles` takes), and per plane the sorted statistic of
    pure-noise tiles through the same predictors (Monte Carlo, fixed seed). None when the planes are too
    small to tile (then :func:`_plane_tiles` reports it)."""
    radius, block, c = int(st["radius"]), st["block"], _CFA_CROP
    h, w = packed.shape[1:]
    if min(h, w) < 2 * block + 2 * c:
        return None
    mosaic = unpack(packed.astype(np.float64), "RGGB")
    touched = window_touches(unpack(np.stack([clipped_mask(p) for p in packed]), "RGGB"), radius)
    d, m, weights = cfa_residual(mosaic, radius, st["fit_samples"], touched)
    bad = touched | ~np.isfinite(d)
    crop = (slice(None), slice(c, h - c), slice(c, w - c))
    dp, mp, bp = (pack(a, "RGGB")[crop] for a in (d, m, bad.astype(np.float64)))
    details = [(np.nan_to_num(dp[i]), np.nan_to_num(mp[i]), bp[i]) for i in range(4)]
    refs = [[] for _ in range(4)]
    for f in pure_noise_residuals(weights, radius):
        fp = pack(f, "RGGB")[crop]
        for i in range(4):
            nan = np.isnan(fp[i]).astype(np.float64)
            _, v, cl = _tile_reduce(fp[i], nan, nan, block, st["tile_stat"])
            refs[i].append(v[cl == 0])
    return details, [np.sort(np.concatenate(r)) for r in refs]


def estimate_plane(
    plane: np.ndarray, *, seed: int = 0, name: str = "plane", **settings
) -> tuple[tuple[float, float], tuple[float, float], PlaneBins]:
    """Estimate (λshot, λread) of one CFA plane (h, w) in [0, 1] (values below 0 are fine: a
    pedestal-preserving read; clipped samples are detected and avoided).

    ``settings`` override :data:`DEFAULTS` (block, quantile, min_count, max_bins, bootstrap,
    max_clipped, tile_stat, mixture, order; estimator "tiles" | "pca" and, for "pca", patch,
    max_patches, min_patches). Returns ``((λshot, λread), (σλshot, σλread), bins)``; the
    uncertainty is the bootstrap standard deviation over tiles (zeros when ``bootstrap`` is 0).
    Raises :class:`RawrclError` when the plane is too small or almost entirely clipped.
    """
    st = _settings(settings)
    if st["estimator"] == "pca":
        return _pca_with_bootstrap(*_plane_patches(plane, st, name), st, seed)
    mu, v = _plane_tiles(plane, name=name, **_tile_args(st))
    ref = _pure_noise_tiles(st["block"], st["tile_stat"], st["order"])
    return _fit_with_bootstrap(mu, v, st, ref, st["bootstrap"], seed)


def estimate_packed(packed: np.ndarray, *, name: str = "image", **settings) -> CalibrationResult:
    """Estimate (λshot, λread) from a packed mosaic (4, h, w) [R, G1, G2, B] in [0, 1] units.

    Each plane is fitted on its own (``per_plane``, ``per_plane_err``, ``bins``). The plane-average
    scalars (``lambda_shot``, ``lambda_read``) come from a joint fit over the tiles of all four
    planes (``pooled``; 4× the data, so a steadier lower envelope — it equals the average when the
    planes share their parameters, as the CFA planes of one sensor do in normalised units).
    ``settings`` override :data:`DEFAULTS`; for the tiles estimator, ``detail`` "cfa" (default: the
    cross-colour prediction residual of :mod:`.cfa_residual`, window ``radius`` mosaic pixels, fitted on
    at most ``fit_samples`` centres per site) or "plane" (same-plane high-pass of order ``order``).
    Status ``"low-confidence"`` when the bootstrap relative
    uncertainty of the plane-average noise std at x = 0.1 or 0.5 exceeds 25 %.
    ``extra["signal_range"]`` is [lowest, highest] per-plane bin mean ([0, 1] units): the signal levels
    the fit saw; the predicted std outside it is an extrapolation of the line (and most sensitive to
    texture, which steepens the slope).
    """
    st = _settings(settings)
    packed = np.asarray(packed)
    if packed.ndim != 3 or packed.shape[0] != 4:
        raise RawrclError(f"{name}: expected a packed mosaic (4, h, w), got shape {packed.shape}")
    res = CalibrationResult(path=None, method="image")
    all_mu, all_v = [], []
    if st["estimator"] == "pca":
        parts = [_plane_patches(packed[i], st, name) for i in range(4)]
        for i, c in enumerate(CHANNELS):
            lam, err, bins = _pca_with_bootstrap(*parts[i], st, seed=i)
            res.per_plane[c], res.per_plane_err[c], res.bins[c] = lam, err, bins
        lam, err, _ = _pca_with_bootstrap(*(np.concatenate(v) for v in zip(*parts, strict=True)), st, seed=4)
    if st["estimator"] != "pca":
        cfa = _cfa_details(packed, st) if st["detail"] == "cfa" else None
        if cfa is None:  # same-plane detail (or planes too small to tile, which _plane_tiles reports)
            cfa = [None] * 4, [_pure_noise_tiles(st["block"], st["tile_stat"], st["order"])] * 4
        details, refs = cfa
        for i, c in enumerate(CHANNELS):
            mu, v = _plane_tiles(packed[i], name=name, detail=details[i], **_tile_args(st))
            lam, err, bins = _fit_with_bootstrap(mu, v, st, refs[i], st["bootstrap"], seed=i)
            res.per_plane[c], res.per_plane_err[c], res.bins[c] = lam, err, bins
            all_mu.append(mu)
            all_v.append(v)
        ref = np.sort(np.concatenate(refs))
        lam, err, _ = _fit_with_bootstrap(
            np.concatenate(all_mu), np.concatenate(all_v), st, ref, st["bootstrap"], seed=4
        )
    res.pooled, res.pooled_err = lam, err
    mu_all = np.concatenate([b.mean for b in res.bins.values()])
    res.extra["signal_range"] = [float(mu_all.min()), float(mu_all.max())]
    rel = []
    for x in (0.1, 0.5):
        var = lam[0] * x + lam[1]
        sd_var = float(np.hypot(err[0] * x, err[1]))
        rel.append(0.5 * sd_var / max(var, 1e-20))
    res.extra["std_rel_uncertainty"] = {"x=0.1": float(rel[0]), "x=0.5": float(rel[1])}
    res.extra["settings"] = st
    if max(rel) > 0.25:
        res.status = "low-confidence"
    return res


def estimate_mosaic(cfa: np.ndarray, pattern: str, *, name: str = "image", **kwargs) -> CalibrationResult:
    """Estimate per-plane (λshot, λread) from a Bayer mosaic (H, W) in [0, 1] with phase ``pattern``.

    See :func:`estimate_packed`; planes are reported in canonical order R, G1, G2, B.
    """
    cfa = np.asarray(cfa)
    if cfa.ndim != 2:
        raise RawrclError(f"{name}: expected a single-channel Bayer mosaic (H, W), got shape {cfa.shape}")
    return estimate_packed(pack(cfa, check_pattern(pattern)), name=name, **kwargs)
