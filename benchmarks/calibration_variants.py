"""Experimental single-image noise estimators, kept out of the library so that the comparisons in
docs/calibration.md stay reproducible.

- ``detail="plane"``: the tile estimator of ``rawrcl.calibration`` with a same-colour high-pass per
  packed plane, d = (k ⊗ k) * P / Σk², k = [1, −4, 6, −4, 1] (``order=4``) or [1, −2, 1] (``order=2``),
  instead of the cross-colour residual (the library default until session 9; worse on every measured
  row, docs/calibration.md).
- ``estimator="pca"``: patch-PCA per signal-level bin (``pca_noise.py``; Chen et al. 2015, Liu et al.),
  then the same NNLS fit; better than the default only on very smooth photos, by little.

Library building blocks are used through public names only (``rawrcl.calibration.single_image``,
``.tiles``, ``.nlf_fit``).

Usage as a script: ``python benchmarks/calibration_variants.py FILE...`` prints, per RAW file, the
noise std at x = 0.01, 0.03, 0.1, 0.5 and (λshot, λread) of the default estimator and of the variants —
a quick check for files where the cross-colour detail may not suit (misaligned colour planes,
spatially correlated noise): a large disagreement means none should be trusted without flats.
"""

from __future__ import annotations

import argparse
from functools import lru_cache

import numpy as np
from pca_noise import binned_pca_variance, extract_patches
from rawrcl.calibration.nlf_fit import fit_nlf
from rawrcl.calibration.result import CalibrationResult, PlaneBins
from rawrcl.calibration.single_image import (
    EstimatorSettings,
    estimate_packed,
    finish_result,
    fit_details,
    settings_from,
)
from rawrcl.calibration.tiles import check_plane_size, clipped_mask, coarse_structure, tile_reduce, tile_stats

from rawrcl.cfa import CHANNELS, check_pattern, pack
from rawrcl.errors import RawrclError

_KERNELS = {2: np.array([1.0, -2.0, 1.0]), 4: np.array([1.0, -4.0, 6.0, -4.0, 1.0])}

#: settings of the patch-PCA estimator
PCA_DEFAULTS = {"patch": 5, "max_patches": 150000, "min_patches": 400, "max_bins": 24, "bootstrap": 48}


def _sep_valid(p: np.ndarray, k: np.ndarray) -> np.ndarray:
    n = k.size
    t = sum(k[i] * p[:, i : p.shape[1] - n + 1 + i] for i in range(n))
    return sum(k[i] * t[i : t.shape[0] - n + 1 + i] for i in range(n))


def plane_detail(plane: np.ndarray, order: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Same-plane high-pass d = (k ⊗ k) * P / Σk² (unit gain for white noise) and the K²-weighted local
    mean m of a (h, w) plane; both (h − order, w − order) float64, E[d²] = λshot·m + λread."""
    if order not in _KERNELS:
        raise RawrclError(f"difference order must be one of {sorted(_KERNELS)}, got {order}")
    p = plane.astype(np.float64, copy=False)
    k = _KERNELS[order]
    norm = float(np.sum(k**2))
    return _sep_valid(p, k) / norm, _sep_valid(p, k**2) / norm**2


def tile_statistics(plane: np.ndarray, block: int = 8, order: int = 4):
    """Per-tile (mean, mean d², clipped fraction) of one packed plane with the same-plane detail."""
    d, m = plane_detail(plane, order)
    a = order // 2
    c = clipped_mask(plane)[a : a + d.shape[0], a : a + d.shape[1]]
    return tile_reduce(d, m, c, block)


@lru_cache(maxsize=32)
def pure_noise_tiles(block: int, order: int = 4) -> np.ndarray:
    """Sorted tile statistics of unit white Gaussian noise through the same-plane detail (16384 tiles)."""
    rng = np.random.default_rng(12345)
    side = block * 64 + order
    return np.sort(
        np.concatenate(
            [tile_statistics(rng.standard_normal((side, side)), block, order)[1] for _ in range(4)]
        )
    )


def estimate_plane_detail(packed: np.ndarray, order: int = 4, name: str = "image", **overrides):
    """The library's tile estimator with the same-plane detail of ``order`` on a packed mosaic (4, h, w)."""
    st = settings_from(None, **overrides)
    a = order // 2
    for p in packed:
        check_plane_size(p.shape, st.block, a, name)
    details = []
    for p in packed:
        d, m = plane_detail(p, order)
        crop = (slice(a, a + d.shape[0]), slice(a, a + d.shape[1]))
        bad = clipped_mask(p)[crop].astype(np.float64)
        details.append(tile_stats(d, m, bad, coarse_structure(p, st.texture_scale)[crop], st.block))
    res = fit_details(details, [pure_noise_tiles(st.block, order)] * 4, st, name=name)
    res.extra["settings"].update(detail="plane", order=order)
    return res


def _pca_plane(plane: np.ndarray, st: dict, name: str):
    check_plane_size(plane.shape, EstimatorSettings().block, 2, name)
    clipped = clipped_mask(plane)
    mu, x, g = extract_patches(np.asarray(plane, np.float64), clipped, st["patch"], st["max_patches"])
    ok = np.isfinite(mu) & np.isfinite(g)
    if ok.sum() < 2 * st["min_patches"]:
        raise RawrclError(f"{name}: too few usable {st['patch']}×{st['patch']} patches for a noise estimate")
    return mu[ok], x[ok], g[ok]


def _pca_fit(mu, x, g, st: dict):
    kw = {"patch": st["patch"], "min_count": st["min_patches"], "max_bins": st["max_bins"]}
    # first pass: a few wide bins, only to whiten the patches for the second pass
    m, var, cnt = binned_pca_variance(mu, x, g, **{**kw, "max_bins": min(8, st["max_bins"])})
    ls, lr, rob = fit_nlf(m, var, cnt)
    if ls + lr > 0:
        model = np.maximum(ls * np.maximum(mu, 0) + lr, 1e-20)
        m, var, cnt = binned_pca_variance(mu, x, g, model=model, **kw)
        ls, lr, rob = fit_nlf(m, var, cnt)
    return ls, lr, PlaneBins(mean=m, var=var, count=cnt, used=rob > 0.05)


def _pca_bootstrap(mu, x, g, st: dict, seed: int):
    ls, lr, bins = _pca_fit(mu, x, g, st)
    err = (0.0, 0.0)
    if st["bootstrap"] > 0 and bins.mean.size >= 3:  # bootstrap over the signal-level bins
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(st["bootstrap"]):
            i = rng.integers(0, bins.mean.size, bins.mean.size)
            if np.unique(bins.mean[i]).size < 2:
                continue
            try:
                draws.append(fit_nlf(bins.mean[i], bins.var[i], bins.count[i])[:2])
            except RawrclError:
                continue
        if len(draws) >= 2:
            sd = np.std(np.array(draws), axis=0, ddof=1)
            err = (float(sd[0]), float(sd[1]))
    return (ls, lr), err, bins


def estimate_pca(packed: np.ndarray, name: str = "image", **overrides) -> CalibrationResult:
    """Patch-PCA estimate on a packed mosaic (4, h, w); ``overrides`` of :data:`PCA_DEFAULTS`."""
    unknown = set(overrides) - set(PCA_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown pca settings: {sorted(unknown)}")
    st = {**PCA_DEFAULTS, **overrides}
    res = CalibrationResult(path=None, method="image")
    parts = [_pca_plane(p, st, name) for p in packed]
    for i, c in enumerate(CHANNELS):
        res.per_plane[c], res.per_plane_err[c], res.bins[c] = _pca_bootstrap(*parts[i], st, seed=i)
    res.pooled, res.pooled_err, _ = _pca_bootstrap(
        *(np.concatenate(v) for v in zip(*parts, strict=True)), st, seed=4
    )
    return finish_result(res, {**st, "estimator": "pca"})


def estimate_variant(
    cfa: np.ndarray, pattern: str, *, estimator: str = "tiles", detail: str = "cfa", **settings
) -> CalibrationResult:
    """Single-image estimate of a Bayer mosaic (H, W) in [0, 1] by a variant: ``estimator`` "tiles"
    (with ``detail`` "cfa" — the library default — or "plane"; ``order`` 2 | 4 for "plane") or "pca"."""
    packed = pack(np.asarray(cfa), check_pattern(pattern))
    if estimator == "pca":
        return estimate_pca(packed, **settings)
    if estimator != "tiles":
        raise RawrclError(f"estimator must be 'tiles' or 'pca', got {estimator!r}")
    if detail == "plane":
        return estimate_plane_detail(packed, **settings)
    if detail != "cfa":
        raise RawrclError(f"detail must be 'cfa' or 'plane', got {detail!r}")
    return estimate_packed(packed, **settings)


def oracle_estimate(
    noisy: np.ndarray, clean: np.ndarray, frac: float = 0.1, block: int = 8, detail: str = "cfa"
) -> tuple:
    """Diagnostic upper bound for any homogeneity-selecting estimator: per signal-level bin, the mean
    noise statistic of the ``frac`` flattest tiles, flatness judged on the *noise-free* mosaic (which no
    real estimator sees), then the same NNLS fit. What remains is the photo's own texture/grain in its
    flattest regions. ``detail`` is the estimator's noise detail: "cfa" (the cross-colour residual,
    predictors fitted on the noisy mosaic and applied to both) or "plane" (the same-plane high-pass).
    Returns (λshot, λread) in [0, 1] units."""
    from rawrcl.calibration.cfa_residual import apply_predictor, cfa_residual
    from rawrcl.calibration.single_image import CFA_CROP
    from rawrcl.calibration.tiles import tile_reduce

    from rawrcl.cfa import pack

    if detail == "cfa":
        dn, m, weights = cfa_residual(noisy)
        dc, _ = apply_predictor(clean, weights)
        crop = (slice(None), slice(CFA_CROP, -CFA_CROP), slice(CFA_CROP, -CFA_CROP))
        pd, pm, pcl = (pack(a, "RGGB")[crop] for a in (dn, m, dc))
        stats = []
        for c in range(4):
            zero = np.zeros_like(pd[c])
            mu_c, vn_c, _ = tile_reduce(pd[c], pm[c], zero, block)
            stats.append((mu_c, vn_c, tile_reduce(pcl[c], zero, zero, block)[1]))
    else:
        pn, pc = pack(noisy, "RGGB"), pack(clean, "RGGB")
        stats = [(*tile_statistics(pn[c], block)[:2], tile_statistics(pc[c], block)[1]) for c in range(4)]
    mu, vn, vc = (np.concatenate(v) for v in zip(*stats, strict=True))
    edges = np.quantile(mu, np.linspace(0, 1, 13))
    idx = np.clip(np.searchsorted(edges, mu) - 1, 0, 11)
    m, v, n = [], [], []
    for k in range(12):
        s = np.nonzero(idx == k)[0]
        if s.size >= 8:
            sel = s[np.argsort(vc[s])[: max(4, int(frac * s.size))]]
            m.append(mu[sel].mean())
            v.append(vn[sel].mean())
            n.append(sel.size)
    ls, lr, _ = fit_nlf(np.array(m), np.array(v), np.array(n))
    return ls, lr


VARIANTS = {"cfa (default)": {}, "plane": {"detail": "plane"}, "pca": {"estimator": "pca"}}


def self_check() -> bool:
    """The variants still behave as documented (synthetic, fixed seeds; ≈ 1.5 min, most of it the PCA
    bias tables): on a smooth scene plane within 10 % and pca within 4 % at x = 0.1 and 0.5; pca
    converges on strong noise (the session-6 collapse); on pixel-scale grey texture the plane detail
    reads > 30 % high where the library's cross-colour detail is within 10 %."""
    from rawrcl.calibration import estimate_mosaic, noisy_mosaic
    from scipy.ndimage import gaussian_filter

    from rawrcl.noise import NoiseModel

    yy, xx = np.mgrid[0:256, 0:256] / 256
    smooth = (
        0.02
        + 0.75 * xx
        + 0.1 * np.sin(6 * yy) ** 2
        + 0.1 * np.exp(-((xx - 0.5) ** 2 + (yy - 0.4) ** 2) / 0.02)
    )
    smooth[128:148] *= 0.5
    smooth = np.clip(smooth, 0.01, 0.95)
    rng = np.random.default_rng(2)
    lum = (0.1 + 0.6 * np.linspace(0, 1, 384)[None, :]) * (
        1 + 0.3 * gaussian_filter(rng.standard_normal((384, 384)), 1)
    )
    texture = lum * np.tile(np.array([[0.5, 1.0], [1.0, 0.6]]), (192, 192))

    def err(res, ls, lr):
        return [res.std_at(x) / np.sqrt(ls * x + lr) - 1 for x in (0.1, 0.5)]

    cases = []
    for seed, (ls, lr), kw, tol in (
        (1, (1e-3, 1e-5), {"detail": "plane"}, 0.10),
        (1, (1e-3, 1e-5), {"estimator": "pca"}, 0.04),
        (1, (3e-3, 1e-3), {"estimator": "pca"}, 0.04),
    ):
        noisy = noisy_mosaic(smooth, NoiseModel(ls, lr), np.random.default_rng(seed))
        e = err(estimate_variant(noisy, "GRBG", bootstrap=0, **kw), ls, lr)
        cases.append((f"smooth scene λ=({ls:g}, {lr:g}) {kw}", e, max(map(abs, e)) <= tol))
    noisy = noisy_mosaic(texture, NoiseModel(2e-4, 1e-6), np.random.default_rng(2))
    e = err(estimate_variant(noisy, "RGGB", detail="plane", bootstrap=0), 2e-4, 1e-6)
    cases.append(("grey texture, plane detail (> +30 % expected)", e, min(e) > 0.3))
    e = err(estimate_mosaic(noisy, "RGGB", bootstrap=0), 2e-4, 1e-6)
    cases.append(("grey texture, library (cfa) detail", e, max(map(abs, e)) <= 0.10))
    for label, e, ok in cases:
        print(f"{label:<55} x=0.1 {100 * e[0]:+6.1f}%  x=0.5 {100 * e[1]:+6.1f}%  {'PASS' if ok else 'FAIL'}")
    return all(ok for *_, ok in cases)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compare the single-image noise estimators on RAW files.")
    ap.add_argument("files", nargs="*")
    ap.add_argument("--check", action="store_true", help="run the variants' self-check (synthetic data)")
    args = ap.parse_args(argv)
    if args.check:
        return 0 if self_check() else 1
    from rawrcl.io.raw import read_raw

    xs = (0.01, 0.03, 0.1, 0.5)
    print("file / variant".ljust(40) + "".join(f"σ({x})".rjust(11) for x in xs) + "     λshot     λread")
    for f in args.files:
        raw = read_raw(f, clip=False)
        print(f)
        for label, kw in VARIANTS.items():
            try:
                r = estimate_variant(raw.cfa, raw.pattern, bootstrap=0, **kw)
            except RawrclError as exc:
                print(f"  {label:<38}failed: {exc}")
                continue
            cells = "".join(f"{r.std_at(x):>11.3e}" for x in xs)
            print(f"  {label:<38}{cells}  {r.lambda_shot:>9.3e} {r.lambda_read:>9.3e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
