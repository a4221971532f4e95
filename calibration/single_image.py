"""Noise level function (λshot, λread) of one noisy RAW mosaic, from the image itself.

Method (in the spirit of Foi et al. 2008 and darktable's noise profiler, own implementation;
measured in docs/calibration.md):

1. Noise detail (:mod:`.cfa_residual`): every sample minus its prediction by a linear predictor of its
   (2·radius+1)² neighbourhood of all four CFA sites, fitted to the image by constrained least squares
   (flat patches of any colour and linear ramps cancel), divided by √(1 + Σw²). Texture shared by the
   colours is predicted from the other sites one pixel away; noise passes with unit gain and
   ``E[d²] = λshot·m + λread`` exactly, m the w²-weighted local mean.
2. Per packed plane, ``block × block`` tiles → (mean of m, mean of d²) (:mod:`.tiles`). Tiles whose
   windows touch more than ``max_clipped`` clipped samples are dropped; on planes with ≥
   ``texture_min_tiles`` tiles, only the ``texture_keep`` fraction with the least coarse-scale structure
   is kept within bins of tile mean.
3. Equal-count bins of tile mean; per bin the ``quantile``-th lowest tile variance divided by the same
   quantile of pure-noise tiles (fixed-seed white noise through the image's own predictors), in two
   passes with a correction for the fraction of homogeneous tiles (:mod:`.nlf_fit`).
4. Robust NNLS fit of var = λshot·mean + λread (λ ≥ 0); bootstrap over tiles for the uncertainty.

Units: the input is a mosaic in [0, 1] after black/white level (values below 0 from a
pedestal-preserving read are genuine noise); λshot in [0, 1] units, λread in [0, 1]² units.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from rawrcl.cfa import CHANNELS, check_pattern, pack, unpack
from rawrcl.errors import RawrclError

from .censored import Clipping, TileShape
from .cfa_residual import (
    SITES,
    apply_predictor,
    fit_predictor,
    kurtosis_weight,
    pure_noise_residuals,
    site_weights,
    tile_means,
    window_touches,
)
from .result import CalibrationResult
from .tile_fit import fit_with_bootstrap
from .tiles import (
    black_floor,
    blocks,
    box_means,
    check_plane_size,
    clipped_mask,
    coarse_structure,
    tile_bands,
    tile_reduce,
    usable_tiles,
)

#: Packed pixels the cross-colour residual planes are cropped by on every side (allows radius ≤ 4).
CFA_CROP = 2
#: Packed rows of context around each band of a tile subsample (predictor window and texture filter).
_MARGIN = 10

#: Settings of the experiment-only alternatives, which live in ``benchmarks/calibration_variants.py``.
_MOVED = ("estimator", "detail", "order", "tile_stat", "patch", "max_patches", "min_patches")


@dataclass(frozen=True)
class EstimatorSettings:
    """Settings of the single-image estimator (defaults tuned on CBSD68-simulated mosaics,
    ``benchmarks/calibration.py``).

    block : tile side in packed pixels.
    quantile : lower quantile of the tile variances taken per signal-level bin.
    min_count, max_bins : about ``min_count`` tiles per bin, at most ``max_bins`` bins.
    bootstrap : bootstrap resamples of the tiles for the uncertainty (0: none).
    max_clipped : a tile is dropped when more than this fraction of its samples sees a clipped sample.
    mixture : correct the quantile for the fraction of homogeneous tiles.
    texture_keep, texture_scale, texture_min_tiles : texture filter (fraction kept per bin, scale of
        the coarse structure in packed pixels, minimum usable tiles of a plane for it to act).
    radius : half-size of the cross-colour predictor window in mosaic pixels (1–4).
    fit_samples : at most this many centres per CFA site enter the predictor fit.
    max_tiles : on larger mosaics only about this many tiles per plane, in evenly spaced bands of tile
        rows, are computed and fitted (speed: the estimate's cost stops growing with the image);
        0 = all tiles.
    """

    block: int = 8
    quantile: float = 0.1
    min_count: int = 24
    max_bins: int = 24
    bootstrap: int = 48
    max_clipped: float = 0.03
    mixture: bool = True
    texture_keep: float = 0.5
    texture_scale: int = 3
    texture_min_tiles: int = 300
    radius: int = 3
    fit_samples: int = 100_000
    max_tiles: int = 8192

    def __post_init__(self) -> None:
        if not 1 <= int(self.radius) <= 2 * CFA_CROP:
            raise RawrclError(f"radius must be between 1 and {2 * CFA_CROP}, got {self.radius!r}")
        if int(self.block) < 2:
            raise RawrclError(f"block must be ≥ 2, got {self.block!r}")
        if not 0 < self.quantile <= 0.5:
            raise RawrclError(f"quantile must be in (0, 0.5], got {self.quantile!r}")
        if not 0 < self.texture_keep <= 1:
            raise RawrclError(f"texture_keep must be in (0, 1], got {self.texture_keep!r}")
        if int(self.bootstrap) < 0 or int(self.min_count) < 4 or int(self.max_bins) < 2:
            raise RawrclError("bootstrap must be ≥ 0, min_count ≥ 4 and max_bins ≥ 2")


def settings_from(settings: EstimatorSettings | None = None, **overrides) -> EstimatorSettings:
    """``settings`` (default :class:`EstimatorSettings`) with keyword ``overrides``; unknown names raise
    TypeError, the settings of the variants moved to ``benchmarks/`` raise :class:`RawrclError`."""
    moved = sorted(set(overrides) & set(_MOVED))
    if moved:
        raise RawrclError(
            f"single-image settings {', '.join(moved)} select experimental variants (pca estimator, "
            "same-plane detail) that moved to benchmarks/calibration_variants.py; the library has one "
            "estimator"
        )
    unknown = sorted(set(overrides) - {f.name for f in fields(EstimatorSettings)})
    if unknown:
        raise TypeError(f"unknown estimator settings: {unknown}")
    return replace(settings or EstimatorSettings(), **overrides)


def cfa_details(
    packed: np.ndarray, st: EstimatorSettings, name: str = "image"
) -> tuple[list[tuple[np.ndarray, ...]], list[np.ndarray], Clipping | None]:
    """Tile statistics of the cross-colour residual of a packed mosaic (4, h, w) [R, G1, G2, B] in [0, 1].

    The predictors are fitted on the whole mosaic (a regular sub-grid of at most ``fit_samples``
    centres per site) and applied to the tiles that enter the estimate: all of them, or on mosaics with
    more than ``max_tiles`` tiles per plane, evenly spaced bands of tile rows
    (:func:`rawrcl.calibration.tiles.tile_bands`), each plane cropped by ``CFA_CROP``. Returns per plane
    the tile statistics (mean m, mean d², bad fraction, coarse structure), four (n_tiles,) arrays
    (:func:`rawrcl.calibration.tiles.usable_tiles`), per plane the sorted statistic of pure-noise
    tiles through the same predictors (Monte Carlo, fixed seed), and for a mosaic clipped at black
    (:func:`rawrcl.calibration.tiles.black_floor`) its :class:`Clipping` (floor and the shape table of
    clipped pure-noise tiles), else None."""
    radius, block, c = int(st.radius), st.block, CFA_CROP
    h, w = packed.shape[1:]
    check_plane_size((h, w), block, c, name)
    # the predictor fit reads a sub-grid of the whole mosaic (its moments are float64 whatever the
    # input's float type; float32 → float64 is exact); only the tiles' bands are made float64 below
    mosaic = unpack(packed if packed.dtype in (np.float32, np.float64) else packed.astype(np.float64), "RGGB")
    # white clipping (and a pile-up that is no black clip) excludes tiles; samples at a black floor stay
    # in the tiles as censored data and keep out of the predictor fit only
    excluded = np.stack([clipped_mask(p) for p in packed])
    floor = black_floor(packed)
    black = packed <= floor if floor is not None else np.zeros(packed.shape, dtype=bool)
    excluded &= ~black
    unfit = unpack(excluded | black, "RGGB")
    weights = [fit_predictor(mosaic, s, radius, st.fit_samples, unfit) for s in SITES]
    clipped = unpack(excluded, "RGGB")
    bands = tile_bands(h, w, block, c, st.max_tiles, margin=_MARGIN)
    if bands is None:
        interiors = [(c, h - c)]
        mosaic = mosaic.astype(np.float64, copy=False)
    else:  # a collage of the bands with their margins (even mosaic rows: the Bayer phase is kept)
        rows = [slice(2 * (r0 - _MARGIN), 2 * (r1 + _MARGIN)) for r0, r1 in bands]
        mosaic = np.concatenate([mosaic[r] for r in rows], dtype=np.float64)
        clipped = np.concatenate([clipped[r] for r in rows])
        starts = np.cumsum([0] + [r1 - r0 + 2 * _MARGIN for r0, r1 in bands])[:-1]
        interiors = [(s + _MARGIN, s + _MARGIN + r1 - r0) for s, (r0, r1) in zip(starts, bands, strict=True)]
    d, _ = apply_predictor(mosaic, weights, radius, mean=False)
    bad = window_touches(clipped, radius) | ~np.isfinite(d)
    planes, dp, bp = (pack(a, "RGGB") for a in (mosaic, np.nan_to_num(d), bad.astype(np.float64)))
    tile_rows = np.concatenate([np.arange(r0, r1 - block + 1, block) for r0, r1 in interiors])
    tile_cols = np.arange(c, w - c - block + 1, block)
    mu = tile_means(planes, weights, tile_rows, tile_cols, block, radius).reshape(4, -1)
    sites = box_means(planes, tile_rows, tile_cols, block).reshape(4, -1).T if floor is not None else None
    stats = []
    for i in range(4):
        maps = (dp[i] ** 2, bp[i], coarse_structure(planes[i], st.texture_scale))
        v, cl, t = (
            blocks(np.concatenate([a[r0:r1, c : w - c] for r0, r1 in interiors]), block).mean(axis=1)
            for a in maps
        )
        if sites is None:
            stats.append((mu[i], v, cl, t))
        else:  # per tile: the observed levels of the four sites around it and their weights in d
            stats.append(
                (mu[i], v, cl, t, np.hstack([sites, np.tile(site_weights(weights, radius)[i], (v.size, 1))]))
            )
    refs = [
        np.sort(np.concatenate(r))
        for r in zip(
            *(_noise_tiles(f, h, w, block) for f in pure_noise_residuals(weights, radius)), strict=True
        )
    ]
    clipping = None
    if floor is not None:
        gauss = np.concatenate(refs)
        shape = TileShape(
            np.var(gauss) / np.mean(gauss) ** 2, kurtosis_weight(weights, block, radius), block**2
        )
        clipping = Clipping(floor, shape)
    return stats, refs, clipping


def _noise_tiles(field: np.ndarray, h: int, w: int, block: int) -> list[np.ndarray]:
    """Per site, the tile statistic (mean d²) of a Monte Carlo residual field (NaN borders dropped),
    cropped like a (4, h, w) packed image."""
    fp = pack(field, "RGGB")[:, CFA_CROP : h - CFA_CROP, CFA_CROP : w - CFA_CROP]
    out = []
    for i in range(4):
        nan = np.isnan(fp[i]).astype(np.float64)
        _, v, cl = tile_reduce(fp[i], nan, nan, block)
        out.append(v[cl == 0])
    return out


def fit_details(
    details: list[tuple[np.ndarray, ...]],
    refs: list[np.ndarray],
    st: EstimatorSettings,
    *,
    clipping: Clipping | None = None,
    name: str = "image",
) -> CalibrationResult:
    """Steps 2–4 of the estimator on given per-plane tile statistics (mean, mean d², bad fraction,
    coarse structure; :func:`rawrcl.calibration.tiles.usable_tiles`) and their pure-noise tile tables
    ``refs``: per-plane fits, the joint all-plane fit (``pooled``), the signal
    range, the bootstrap uncertainty and the status."""
    res = CalibrationResult(path=None, method="image")
    fit_args = {"quantile": st.quantile, "min_count": st.min_count, "max_bins": st.max_bins}
    fit_args.update(mixture=st.mixture, bootstrap=st.bootstrap, clipping=clipping)
    tile_args = {k: getattr(st, k) for k in ("block", "max_clipped", "min_count", "max_bins")}
    tile_args.update(texture_keep=st.texture_keep, texture_min_tiles=st.texture_min_tiles, name=name)
    all_mu, all_v, all_aux = [], [], []
    for i, c in enumerate(CHANNELS):
        mu, v, aux = usable_tiles(details[i], **tile_args)
        lam, err, bins = fit_with_bootstrap(mu, v, refs[i], seed=i, aux=aux, **fit_args)
        res.per_plane[c], res.per_plane_err[c], res.bins[c] = lam, err, bins
        all_mu.append(mu)
        all_v.append(v)
        all_aux.append(aux)
    ref = np.sort(np.concatenate(refs))
    aux = None if clipping is None else np.concatenate(all_aux)
    lam, err, _ = fit_with_bootstrap(
        np.concatenate(all_mu), np.concatenate(all_v), ref, seed=4, aux=aux, **fit_args
    )
    res.pooled, res.pooled_err = lam, err
    return finish_result(res, asdict(st))


def nlf_misfit(res: CalibrationResult) -> float:
    """How far the fitted bins lie from their plane's line: the median over planes of the median over the
    used bins of |var / (λshot·mean + λread) − 1|. A few % on Poisson–Gaussian mosaics; 11–29 % on
    gamma-encoded ones (hdrplus-like Rec. 709 files at ×4–×8 exposure; docs/real_noise.md). NaN without a
    fitted plane."""
    per = []
    for name, b in res.bins.items():
        if name not in res.per_plane:
            continue
        ls, lr = res.per_plane[name]
        used = np.asarray(b.used, dtype=bool)
        if not used.any():
            continue
        fit = ls * np.asarray(b.mean)[used] + lr
        per.append(float(np.median(np.abs(np.asarray(b.var)[used] / np.maximum(fit, 1e-20) - 1))))
    return float(np.median(per)) if per else float("nan")


def finish_result(res: CalibrationResult, settings: dict) -> CalibrationResult:
    """Complete an image estimate whose ``bins``, ``pooled`` and ``pooled_err`` are set:
    ``extra["signal_range"]``, ``extra["std_rel_uncertainty"]`` (bootstrap relative uncertainty of the
    plane-average std at x = 0.1 and 0.5), ``extra["nlf_misfit"]`` (:func:`nlf_misfit`), ``extra["settings"]``
    and the status (``"low-confidence"`` above 25 %)."""
    (ls, lr), (es, er) = res.pooled, res.pooled_err
    res.extra["nlf_misfit"] = nlf_misfit(res)
    mu_all = np.concatenate([b.mean for b in res.bins.values()])
    res.extra["signal_range"] = [float(mu_all.min()), float(mu_all.max())]
    rel = [0.5 * float(np.hypot(es * x, er)) / max(ls * x + lr, 1e-20) for x in (0.1, 0.5)]
    res.extra["std_rel_uncertainty"] = {"x=0.1": float(rel[0]), "x=0.5": float(rel[1])}
    res.extra["settings"] = settings
    if max(rel) > 0.25:
        res.status = "low-confidence"
    return res


def estimate_packed(
    packed: np.ndarray, *, name: str = "image", settings: EstimatorSettings | None = None, **overrides
) -> CalibrationResult:
    """Estimate (λshot, λread) from a packed mosaic (4, h, w) [R, G1, G2, B] in [0, 1] units.

    Each plane is fitted on its own (``per_plane``, ``per_plane_err``, ``bins``). The plane-average
    scalars (``lambda_shot``, ``lambda_read``) come from a joint fit over the tiles of all four planes
    (``pooled``; 4× the data — equal to the average when the planes share their parameters, as the CFA
    planes of one sensor do in normalised units). ``settings`` / keyword ``overrides``: see
    :class:`EstimatorSettings`. Status ``"low-confidence"`` when the bootstrap relative uncertainty of
    the plane-average noise std at x = 0.1 or 0.5 exceeds 25 %. ``extra["signal_range"]`` is [lowest,
    highest] per-plane bin mean: outside it the predicted std is an extrapolation of the line.
    Raises :class:`RawrclError` for a wrong shape, a too small or mostly clipped mosaic.
    """
    st = settings_from(settings, **overrides)
    packed = np.asarray(packed)
    if packed.ndim != 3 or packed.shape[0] != 4:
        raise RawrclError(f"{name}: expected a packed mosaic (4, h, w), got shape {packed.shape}")
    details, refs, clipping = cfa_details(packed, st, name)
    try:
        res = fit_details(details, refs, st, clipping=clipping, name=name)
    except RawrclError as exc:  # the line fit's own refusals do not know the file: name it
        msg = str(exc)
        raise RawrclError(msg if msg.startswith(f"{name}: ") else f"{name}: {msg}") from None
    if clipping is not None:
        res.extra["black_floor"] = clipping.floor
    return res


def estimate_mosaic(
    cfa: np.ndarray,
    pattern: str,
    *,
    name: str = "image",
    settings: EstimatorSettings | None = None,
    **overrides,
) -> CalibrationResult:
    """Estimate per-plane (λshot, λread) from a Bayer mosaic (H, W) in [0, 1] with phase ``pattern``.

    See :func:`estimate_packed`; planes are reported in canonical order R, G1, G2, B.
    """
    return estimate_packed(packed_mosaic(cfa, pattern, name), name=name, settings=settings, **overrides)


def packed_mosaic(cfa: np.ndarray, pattern: str, name: str = "image") -> np.ndarray:
    """A Bayer mosaic (H, W) of phase ``pattern`` as packed planes (4, H/2, W/2) [R, G1, G2, B]; a one-line
    :class:`RawrclError` for anything that is not a single-channel mosaic."""
    cfa = np.asarray(cfa)
    if cfa.ndim != 2:
        raise RawrclError(f"{name}: expected a single-channel Bayer mosaic (H, W), got shape {cfa.shape}")
    return pack(cfa, check_pattern(pattern))
