"""Tile statistics → (λshot, λread): the binned lower-quantile fit, its censored variant for mosaics
clipped at black, and the bootstrap uncertainty over tiles.

Kept apart from :mod:`rawrcl.calibration.nlf_fit` so that the imports run one way:
``nlf_fit`` (line fit, bins) ← ``censored`` (declipping) ← ``tile_fit`` (dispatch between the two).
Units: means in [0, 1] after black/white level, variances in [0, 1]².
"""

from __future__ import annotations

import numpy as np

from rawrcl.errors import RawrclError

from .censored import fit_tiles_clipped, tile_model
from .nlf_fit import PureNoiseTable, binned_quantiles, fit_nlf
from .result import PlaneBins


def fit_tiles(
    mu: np.ndarray,
    v: np.ndarray,
    ref: np.ndarray | PureNoiseTable,
    *,
    quantile: float,
    min_count: int,
    max_bins: int,
    mixture: bool,
    clipping=None,
    aux: np.ndarray | None = None,
    start: tuple[float, float] | None = None,
) -> tuple[float, float, PlaneBins]:
    """Binned lower-quantile fit of tile statistics ``v`` against tile means ``mu`` (both (n,)).

    ``ref`` is the sorted statistic of pure-noise tiles (same tile size and detail; or its
    :class:`PureNoiseTable`), which makes the quantile unbiased for Gaussian noise. Equal-count bins (at
    most ``max_bins``, about ``min_count`` tiles each or more). First pass: per-bin quantiles and
    :func:`fit_nlf`; second pass: tiles normalised by the first fit and, with ``mixture``, the quantile
    corrected for the fraction of homogeneous tiles. With ``clipping`` (a mosaic clipped at black,
    :class:`rawrcl.calibration.censored.Clipping`; ``aux`` its per-tile site levels and weights) the
    censored fit of :func:`rawrcl.calibration.censored.fit_tiles_clipped` is used instead.
    Returns (λshot, λread, bins).
    """
    if clipping is not None:
        return fit_tiles_clipped(
            mu,
            v,
            aux,
            ref,
            quantile=quantile,
            min_count=min_count,
            max_bins=max_bins,
            mixture=mixture,
            clipping=clipping,
            start=start,
        )
    table = ref if isinstance(ref, PureNoiseTable) else PureNoiseTable(ref)
    n = mu.size
    nb = int(min(max_bins, max(2, n // min_count)))
    edges = np.quantile(mu, np.linspace(0, 1, nb + 1))
    edges[0], edges[-1] = -np.inf, np.inf
    edges = np.unique(edges)
    cq = table.quantile(quantile)
    m, var, cnt = binned_quantiles(mu, v, edges, quantile, cq, None)
    ls, lr, rob = fit_nlf(m, var, cnt)
    model = np.maximum(ls * np.maximum(mu, 0) + lr, 1e-20)
    if ls + lr > 0:
        if mixture:
            pi = table.homogeneous_fraction(v / model)
            cq = table.quantile(min(quantile / pi, 0.5))
        m, var, cnt = binned_quantiles(mu, v, edges, quantile, cq, model)
        ls, lr, rob = fit_nlf(m, var, cnt)
    return ls, lr, PlaneBins(mean=m, var=var, count=cnt, used=rob > 0.05)


#: the bootstrap resamples at most this many tiles (m-out-of-n; the spread is scaled by √(m/n)), so its
#: cost stops growing with the image
BOOTSTRAP_TILES = 4096


def fit_with_bootstrap(
    mu: np.ndarray,
    v: np.ndarray,
    ref: np.ndarray,
    *,
    bootstrap: int,
    seed: int,
    aux: np.ndarray | None = None,
    **fit_args,
) -> tuple[tuple[float, float], tuple[float, float], PlaneBins]:
    """:func:`fit_tiles` (``fit_args``: quantile, min_count, max_bins, mixture, clipping; ``aux`` per-tile
    rows resampled with the tiles) plus the standard deviation of (λshot, λread) over ``bootstrap``
    resamples of the tiles (zeros when 0): resamples of n tiles with replacement, or of m =
    :data:`BOOTSTRAP_TILES` < n tiles with the spread scaled by √(m/n).
    Returns ((λshot, λread), (σλshot, σλread), bins)."""
    table = PureNoiseTable(ref)
    ls, lr, bins = fit_tiles(mu, v, table, aux=aux, **fit_args)
    err = (0.0, 0.0)
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        size = min(mu.size, BOOTSTRAP_TILES)
        boot_args = fit_args
        if fit_args.get("clipping") is not None:  # iterative: resamples start from the full fit
            boot_args = {**fit_args, "start": (ls, lr)}
            aux = np.hstack([aux, tile_model(aux, fit_args["clipping"], (ls, lr))])
        draws = []
        for _ in range(bootstrap):
            i = rng.integers(0, mu.size, size)
            try:
                s, r, _ = fit_tiles(mu[i], v[i], table, aux=None if aux is None else aux[i], **boot_args)
            except RawrclError:
                continue
            draws.append((s, r))
        if len(draws) >= 2:
            sd = np.std(np.array(draws), axis=0, ddof=1) * np.sqrt(size / mu.size)
            err = (float(sd[0]), float(sd[1]))
    return (ls, lr), err, bins
