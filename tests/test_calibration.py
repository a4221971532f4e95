"""Tests of rawrcl.calibration: fits on synthetic data with known parameters (fixed seeds),
metadata exactness, profiles, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rawrcl.calibration import (
    CalibrationResult,
    EstimatorSettings,
    calibrate_file,
    convert_noise_profile,
    estimate_mosaic,
    fit_nlf,
    flat_series,
    map_noise_profile,
    noisy_mosaic,
    photon_transfer,
    readout,
    save_profile,
    write_series_dngs,
)

from rawrcl.errors import RawrclError
from rawrcl.noise import NoiseModel
from rawrcl.noise.profiles import load_profile, lookup_profile

SHARED = Path(__file__).resolve().parents[2] / "shared"
IPHONE = SHARED / "data" / "raw" / "iphone12pro_metadata_only.dng"


def _std(ls: float, lr: float, x: float) -> float:
    return float(np.sqrt(ls * x + lr))


def _noisy(clean: np.ndarray, ls: float, lr: float, seed, **readout_args) -> np.ndarray:
    """``clean`` + N(0, λshot·x + λread) (rawrcl.noise), 14-bit, clipped at white unless told."""
    return noisy_mosaic(clean, NoiseModel(ls, lr), np.random.default_rng(seed), **readout_args)


def _photo_mosaic(photo: np.ndarray) -> np.ndarray:
    """RGGB mosaic in [0, 1] of an (H, W, 3) sRGB float photo: inverse gamma, inverse WB (2, 1, 1.6)."""
    from rawrcl.cfa import mosaic
    from rawrcl.isp import srgb_to_linear

    wb = np.array([2.0, 1.0, 1.6])[:, None, None]
    return mosaic(srgb_to_linear(photo).transpose(2, 0, 1) / wb, "RGGB")[0]


def _smooth_scene(h: int = 256, w: int = 256, seed: int = 0) -> np.ndarray:
    """A smooth RAW-like mosaic in [0.01, 0.9]: ramps, a blob and steps (edges)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = 0.02 + 0.75 * xx + 0.1 * np.sin(6 * yy) ** 2
    img += 0.1 * np.exp(-((xx - 0.5) ** 2 + (yy - 0.4) ** 2) / 0.02)
    img[h // 2 : h // 2 + 20] *= 0.5  # an edge band
    return np.clip(img + 0.0 * rng.random(), 0.01, 0.95)


# ---------------------------------------------------------------------------------- fitting


def test_fit_nlf_exact_and_nonnegative():
    m = np.linspace(0.05, 0.8, 12)
    ls, lr, _ = fit_nlf(m, 2e-3 * m + 1e-4, np.full(12, 100))
    assert ls == pytest.approx(2e-3, rel=1e-6) and lr == pytest.approx(1e-4, rel=1e-5)
    # data implying a negative read noise: the constrained fit returns λread = 0, λshot > 0
    ls, lr, _ = fit_nlf(m, 2e-3 * m - 5e-5, np.full(12, 100))
    assert lr == 0.0 and ls > 0


def test_nnls2_is_scipys_nnls():
    """The two-unknown NNLS the fits use gives scipy's optimum on every support (both, one, none)."""
    from rawrcl.calibration.nlf_fit import nnls2
    from scipy.optimize import nnls

    rng = np.random.default_rng(3)
    for trial in range(200):
        a = rng.normal(size=(12, 2)) * rng.uniform(0.01, 100, size=2)
        b = rng.normal(size=12) if trial % 2 else a @ rng.uniform(-1, 1, size=2)
        ref, _ = nnls(a, b)
        got = nnls2(a, b)
        assert (got >= 0).all()
        assert np.linalg.norm(a @ got - b) <= np.linalg.norm(a @ ref - b) * (1 + 1e-9) + 1e-12
        np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-9)


def test_special_functions_match_scipy():
    """ndtr / gammaln / gammaincinv of the censored fit (torch-computed) against scipy.special."""
    import scipy.special as sp
    from rawrcl.calibration.special import gammaincinv, gammaln, ndtr

    x = np.linspace(-37, 12, 2001)
    np.testing.assert_allclose(ndtr(x), sp.ndtr(x), rtol=1e-11, atol=0)
    k = np.arange(1.0, 3000.0)
    np.testing.assert_allclose(gammaln(k), sp.gammaln(k), rtol=1e-12, atol=1e-12)
    a = np.exp(np.linspace(np.log(0.05), np.log(1e5), 60))[:, None]
    q = np.array([1e-4, 0.02, 0.1, 0.5, 0.9, 0.999])[None]
    np.testing.assert_allclose(gammaincinv(a, q), sp.gammaincinv(a, q), rtol=1e-9)


def test_fit_nlf_rejects_outlier_bins():
    m = np.linspace(0.05, 0.8, 16)
    v = 1e-3 * m + 2e-5
    v[[3, 9]] *= 4.0  # textured bins
    ls, lr, w = fit_nlf(m, v, np.full(16, 200))
    assert ls == pytest.approx(1e-3, rel=0.03) and lr == pytest.approx(2e-5, rel=0.1)
    assert w[3] < 0.1 and w[9] < 0.1


# ------------------------------------------------------------------------------ single image


@pytest.mark.parametrize("ls,lr", [(1e-3, 1e-5), (2e-4, 4e-6), (3e-3, 1e-3)])
def test_single_image_smooth_scene(ls, lr):
    noisy = _noisy(_smooth_scene(), ls, lr, 1)
    res = estimate_mosaic(noisy, "GRBG", bootstrap=8)
    for x in (0.1, 0.5):
        assert res.std_at(x) == pytest.approx(_std(ls, lr, x), rel=0.06)
        for c in ("R", "G1", "G2", "B"):
            assert res.std_at(x, c) == pytest.approx(_std(ls, lr, x), rel=0.12)
    assert all(e[0] > 0 and e[1] > 0 for e in res.per_plane_err.values())
    assert res.method == "image" and set(res.bins) == {"R", "G1", "G2", "B"}


def test_single_image_reports_the_fitted_signal_range():
    """``extra["signal_range"]`` spans the bin means the fit saw: a scene darker than 0.3 reports a
    range ending below 0.3 (so x = 0.5 is flagged as extrapolated), the full scene reaches past 0.6."""
    dark = estimate_mosaic(_noisy(0.3 * _smooth_scene(), 1e-3, 1e-5, 5), "RGGB", bootstrap=0)
    lo, hi = dark.extra["signal_range"]
    assert 0 <= lo < 0.05 and 0.15 < hi < 0.3
    full = estimate_mosaic(_noisy(_smooth_scene(), 1e-3, 1e-5, 6), "RGGB", bootstrap=0)
    assert full.extra["signal_range"][1] > 0.6
    assert json.loads(json.dumps(full.to_dict()))["extra"]["signal_range"] == full.extra["signal_range"]


def _grey_texture_mosaic(seed: int = 0, size: int = 384) -> np.ndarray:
    """Pixel-scale luminance texture (white noise blurred by σ = 1 px, × 0.3: ±8 % of the local level)
    on a horizontal ramp 0.1 → 0.7, seen through per-site gains 0.5, 1, 1, 0.6 (an RGGB sensor under a
    white-balance-like illuminant)."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    ramp = 0.1 + 0.6 * np.linspace(0, 1, size)[None, :]
    lum = ramp * (1 + 0.3 * gaussian_filter(rng.standard_normal((size, size)), 1.0))
    gains = np.empty((size, size))
    gains[0::2, 0::2], gains[0::2, 1::2], gains[1::2, 0::2], gains[1::2, 1::2] = 0.5, 1.0, 1.0, 0.6
    return lum * gains


def test_cfa_predictor_constraints_flat_patches_and_unit_noise_gain():
    from rawrcl.calibration.cfa_residual import (
        SITES,
        _constraints,
        apply_predictor,
        cfa_residual,
        offsets,
    )

    d, m, weights = cfa_residual(_grey_texture_mosaic(), radius=3)
    for site, w in zip(SITES, weights, strict=True):
        c, b = _constraints(site, offsets(3))
        np.testing.assert_allclose(c @ w, b, atol=1e-9)
    # a flat patch of four different site levels (any white balance, green imbalance) predicts itself
    flat = np.empty((64, 64))
    flat[0::2, 0::2], flat[0::2, 1::2], flat[1::2, 0::2], flat[1::2, 1::2] = 0.2, 0.5, 0.52, 0.3
    df, mf = apply_predictor(flat, weights, 3)
    assert np.nanmax(np.abs(df)) < 1e-12 and np.isnan(df[:3]).all() and np.isfinite(df[3:-3, 3:-3]).all()
    # the weighted mean of a flat site is its level
    assert np.nanmax(np.abs(mf[3:-3:2, 3:-3:2] - flat[3:-3:2, 3:-3:2])) < 0.2
    # unit gain for white noise: E[d²] = 1 on every site
    noise = np.random.default_rng(1).standard_normal((512, 512))
    dn, _ = apply_predictor(noise, weights, 3)
    for py, px in SITES:
        assert np.nanmean(dn[py::2, px::2] ** 2) == pytest.approx(1.0, rel=0.03)


def test_cfa_detail_cancels_luminance_texture():
    """Texture shared by the colours is predicted from the other sites: on a noise-free grey-texture
    mosaic the cross-colour residual keeps < 1 % of the energy of a same-plane 4th-order high-pass, and
    with weak noise on top the estimate is within 10 % (what the neighbours cannot predict still adds a
    few percent). (The same-plane estimator variant reads > 30 % high there:
    ``python benchmarks/calibration_variants.py --check``.)"""
    from rawrcl.calibration.cfa_residual import cfa_residual
    from rawrcl.calibration.tiles import blocks
    from scipy.ndimage import correlate1d

    from rawrcl.cfa import pack

    clean = _grey_texture_mosaic()
    d, _, _ = cfa_residual(clean)
    k = np.array([1.0, -4.0, 6.0, -4.0, 1.0]) / np.sqrt(70.0)  # unit noise gain: Σ(k⊗k)² = 1
    for i in range(4):
        p = pack(clean, "RGGB")[i]
        hp = correlate1d(correlate1d(p, k, axis=0), k, axis=1)[2:-2, 2:-2]
        assert np.nanmedian(pack(d, "RGGB")[i] ** 2) < 0.01 * np.median(blocks(hp**2, 8).mean(axis=1))
    ls, lr = 2e-4, 1e-6
    cfa = estimate_mosaic(_noisy(clean, ls, lr, 2), "RGGB", bootstrap=0)
    for x in (0.1, 0.5):
        assert cfa.std_at(x) == pytest.approx(_std(ls, lr, x), rel=0.10)


def test_single_image_settings_are_checked():
    noisy = _noisy(_smooth_scene(), 1e-3, 1e-5, 0)
    with pytest.raises(RawrclError, match="detail.*benchmarks/calibration_variants.py"):
        estimate_mosaic(noisy, "RGGB", detail="plane")
    with pytest.raises(RawrclError, match="estimator"):
        estimate_mosaic(noisy, "RGGB", estimator="pca")
    with pytest.raises(RawrclError, match="radius"):
        estimate_mosaic(noisy, "RGGB", radius=5)
    with pytest.raises(RawrclError, match="quantile"):
        EstimatorSettings(quantile=0.9)
    with pytest.raises(TypeError, match="unknown"):
        estimate_mosaic(noisy, "RGGB", blocksize=4)
    # a settings object and keyword overrides give the same estimate; the result records them
    a = estimate_mosaic(noisy, "RGGB", settings=EstimatorSettings(bootstrap=0, texture_keep=1.0))
    b = estimate_mosaic(noisy, "RGGB", bootstrap=0, texture_keep=1.0)
    assert a.pooled == b.pooled and a.extra["settings"]["texture_keep"] == 1.0


def test_tile_means_and_quantiles_match_the_direct_computation():
    """The fast paths give what they replace: tile means of the weighted local mean m from summed-area
    tables = block means of apply_predictor's m; per-bin quantiles = np.quantile per bin."""
    from rawrcl.calibration.cfa_residual import apply_predictor, cfa_residual, tile_means
    from rawrcl.calibration.nlf_fit import binned_quantiles
    from rawrcl.calibration.tiles import blocks

    from rawrcl.cfa import pack

    mosaic = _noisy(_grey_texture_mosaic(size=192), 1e-3, 1e-5, 0).astype(np.float64)
    _, m, weights = cfa_residual(mosaic)
    rows, cols = np.arange(2, 90, 8), np.arange(2, 90, 8)
    fast = tile_means(pack(mosaic, "RGGB"), weights, rows, cols, 8)
    for i in range(4):
        direct = blocks(pack(m, "RGGB")[i][2:90, 2:90], 8).mean(axis=1)
        np.testing.assert_allclose(fast[i].ravel(), direct, rtol=1e-12)
    d_only, no_mean = apply_predictor(mosaic, weights, mean=False)
    assert no_mean is None and np.array_equal(d_only, apply_predictor(mosaic, weights)[0], equal_nan=True)
    rng = np.random.default_rng(1)
    mu, v = rng.random(500), rng.random(500)
    edges = np.array([-np.inf, 0.2, 0.21, 0.5, np.inf])  # a bin with < 4 tiles is skipped
    means, var, cnt = binned_quantiles(mu, v, edges, 0.1, 2.0, None)
    idx = np.searchsorted(edges, mu, side="right") - 1
    expect = [np.quantile(v[idx == k], 0.1) / 2.0 for k in range(4) if (idx == k).sum() >= 4]
    assert var.tolist() == expect and cnt.sum() <= 500 and np.all(cnt >= 4)


def test_large_mosaics_use_a_band_subsample_of_tiles():
    """Above max_tiles tiles per plane only evenly spaced bands of tile rows are computed: the estimate
    stays within 2 % of the all-tiles one, and the bootstrap spread is still reported."""
    from rawrcl.calibration.tiles import tile_bands

    assert tile_bands(200, 300, 8, 2, 8192) is None  # small: all tiles
    bands = tile_bands(1500, 2000, 8, 2, 8192)
    assert len(bands) >= 8 and all((b - a) % 8 == 0 and a >= 10 and b <= 1490 for a, b in bands)
    assert 8192 <= sum(b - a for a, b in bands) // 8 * 249 < 1.3 * 8192
    assert all(bands[k][1] <= bands[k + 1][0] for k in range(len(bands) - 1))
    noisy = _noisy(_smooth_scene(1024, 1024), 1e-3, 1e-5, 3)
    full = estimate_mosaic(noisy, "RGGB", bootstrap=0, max_tiles=0)
    sub = estimate_mosaic(noisy, "RGGB", bootstrap=8, max_tiles=1024)
    for x in (0.1, 0.5):
        assert sub.std_at(x) == pytest.approx(full.std_at(x), rel=0.02)
        assert sub.std_at(x) == pytest.approx(_std(1e-3, 1e-5, x), rel=0.04)
    assert sub.pooled_err[0] > 0 and sub.extra["settings"]["max_tiles"] == 1024


@pytest.mark.parametrize("poisson", [True, False])
def test_censored_line_matches_clipped_noise(poisson):
    """Observed mean and variance of noise clipped at 0 (Poisson–Gaussian or Gaussian), and the level
    recovered from the observed mean, against 400 000 simulated samples per level."""
    from rawrcl.calibration.censored import CensoredLine

    rng = np.random.default_rng(0)
    ls, lr = 1e-2, 2e-5
    line = CensoredLine(0.0, ls, lr, poisson=poisson)
    for mu in (0.004, 0.01, 0.03, 0.2):
        if poisson:
            y = ls * rng.poisson(mu / ls, 400_000) + rng.normal(0, np.sqrt(lr), 400_000)
        else:
            y = mu + rng.normal(0, np.sqrt(ls * mu + lr), 400_000)
        y = np.maximum(y, 0)
        assert float(line.level(y.mean())) == pytest.approx(mu, rel=0.02, abs=2e-4)
        assert float(line.observed_var(y.mean())) == pytest.approx(y.var(), rel=0.03)
    assert float(line.level(0.5)) == pytest.approx(0.5, rel=1e-6)  # far from the clip: observed = true
    # Poisson at ~1 photo-electron: the clipped variance is not the censored normal's
    gauss = CensoredLine(0.0, ls, lr, poisson=False)
    assert (
        abs(float(CensoredLine(0.0, ls, lr).observed_var(0.011)) / float(gauss.observed_var(0.011)) - 1) > 0.1
    )


def test_tile_shape_factor_follows_the_kurtosis():
    """The lower-quantile shape factor of the tile statistic against Monte Carlo of clipped noise through
    a fitted cross-colour predictor (within 2.5 %), 1 for Gaussian noise, decreasing with the kurtosis."""
    from rawrcl.calibration.censored import CensoredLine, TileShape
    from rawrcl.calibration.cfa_residual import apply_predictor, cfa_residual, kurtosis_weight, site_weights
    from rawrcl.calibration.tiles import blocks

    from rawrcl.cfa import pack

    rng = np.random.default_rng(0)
    _, _, w = cfa_residual(_noisy(_grey_texture_mosaic(), 1e-3, 1e-5, 0))
    np.testing.assert_allclose(site_weights(w).sum(axis=1), 1.0)
    beta = kurtosis_weight(w, 8)
    assert 0.3 < beta < 0.8

    def tile_stat(field):
        d = pack(apply_predictor(field, w, mean=False)[0], "RGGB")[:, 2:-2, 2:-2]
        return np.concatenate([blocks(d[i] ** 2, 8).mean(axis=1) for i in range(4)])

    gauss = tile_stat(rng.standard_normal((520, 520)))
    shape = TileShape(gauss.var() / gauss.mean() ** 2, beta, 64)
    assert float(shape.factor(0.0, 0.1)) == pytest.approx(1.0)
    assert shape.factor(3.0, 0.1) < shape.factor(1.0, 0.1) < 1.0
    line = CensoredLine(0.0, 1e-3, 1e-4, poisson=False)
    for mu in (0.0, 0.005):
        clipped = tile_stat(np.maximum(mu + 1e-2 * rng.standard_normal((520, 520)), 0) / 1e-2)
        mc = (np.quantile(clipped, 0.1) / clipped.mean()) / (np.quantile(gauss, 0.1) / gauss.mean())
        assert float(shape.factor(line.excess_kurtosis(mu), 0.1)) == pytest.approx(mc, rel=0.025)


def _dark_capture(ls: float, lr: float, seed: int) -> np.ndarray:
    from rawrcl.calibration import dark_mosaic
    from skimage import data

    rng = np.random.default_rng(seed)
    clean = dark_mosaic(data.astronaut(), rng, level=(0.15, 0.15))
    return noisy_mosaic(clean, NoiseModel(ls, lr, poisson=True), rng, bits=12, clip="both")


def test_black_clipped_dark_capture():
    """A dark phone-like capture, black level subtracted and clipped at 0 (≈ 15 % zeros): the session-9
    estimator refused it as "clipped"; the censored fit finds the NLF where the image has its pixels."""
    ls, lr = 4.5e-3, 6.5e-5
    noisy = _dark_capture(ls, lr, 1)
    assert 0.08 < np.mean(noisy == 0) < 0.3
    res = estimate_mosaic(noisy, "RGGB", bootstrap=4)
    assert res.extra["black_floor"] == 0.0 and res.extra["signal_range"][0] < 0.01
    for x in (0.01, 0.03, 0.1):
        assert res.std_at(x) == pytest.approx(_std(ls, lr, x), rel=0.10)
    assert res.pooled_err[0] > 0
    # a pedestal-preserving capture (noise below black kept) has no black floor: the linear fit
    pedestal = estimate_mosaic(_noisy(_smooth_scene(), 1e-3, 1e-5, 0), "RGGB", bootstrap=0)
    assert "black_floor" not in pedestal.extra


def test_the_estimate_does_not_import_scipy():
    """The single-image estimate of a black-clipped capture (the censored fit) runs without importing
    scipy: ≈ 0.5–1 s of every ``rawrcl denoise/jdd`` start-up (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from rawrcl.calibration import estimate_mosaic, dark_mosaic\n"
        "from rawrcl.calibration.synthetic import noisy_mosaic\n"
        "from rawrcl.noise import NoiseModel\n"
        "rng = np.random.default_rng(0)\n"
        "ramp = np.linspace(0, 1, 256)[None, :, None] * np.ones((256, 1, 3))\n"
        "clean = dark_mosaic((ramp * 255).astype(np.uint8), rng, level=(0.15, 0.15))\n"
        "noisy = noisy_mosaic(clean, NoiseModel(4.5e-3, 6.5e-5, poisson=True), rng, bits=12, clip='both')\n"
        "assert (noisy == 0).mean() > 0.05\n"
        "estimate_mosaic(noisy, 'RGGB', bootstrap=2)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_cli_reports_a_black_clipped_file(tmp_path):
    """A DNG whose black level is already subtracted (black 0, zeros piled up): the CLI estimate says
    it fitted through the clip, and --json carries the floor."""
    from rawrcl.io.dng import write_dng

    noisy = _dark_capture(4.5e-3, 6.5e-5, 2)
    path = write_dng(
        tmp_path / "dark.dng", np.round(noisy * 4095).astype(np.uint16), "RGGB", 0, 4095, iso=800
    )
    res = _cli(["calibrate", str(path), "--method", "image"])
    assert res.exit_code == 0 and "clipped at black (x = 0)" in res.output, res.output
    (o,) = json.loads(_cli(["calibrate", str(path), "--json"]).output)
    assert o["extra"]["black_floor"] == 0.0 and o["lambda_shot"] == pytest.approx(4.5e-3, rel=0.25)


def test_too_dark_is_refused_in_one_line():
    noisy = np.zeros((256, 256), np.float32)
    noisy[::7, ::5] = 0.003  # almost all samples at the black floor
    with pytest.raises(RawrclError, match="dark|clipped"):
        estimate_mosaic(noisy, "RGGB", bootstrap=0)


def test_texture_filter_keeps_the_flat_tiles():
    """The coarse-scale structure measure tells edges from noise: on a plane whose lower half is
    covered with steps (random 6-px blocks), the kept tiles come from the flat half."""
    from rawrcl.calibration.tiles import blocks, coarse_texture, texture_filter

    rng = np.random.default_rng(3)
    h = w = 256
    plane = np.full((h, w), 0.3)
    blocks_ = rng.uniform(-0.05, 0.05, (h // 12 + 1, w // 6 + 1))
    plane[h // 2 :] += np.kron(blocks_, np.ones((6, 6)))[: h // 2, :w]
    plane += rng.normal(0, np.sqrt(1e-3 * 0.3 + 1e-5), plane.shape)
    mu = blocks(plane[2:-2, 2:-2], 8).mean(axis=1)  # tiles of a detail cropped by 2
    keep = texture_filter(mu, coarse_texture(plane, 8, crop=2), 0.5, 1)
    rows = (np.arange(mu.size) // ((w - 4) // 8)) * 8 + 2  # first sample row of each tile
    assert keep.mean() == pytest.approx(0.5, abs=0.05)
    assert np.mean(rows[keep] < h // 2 - 8) > 0.9


def test_single_image_large_scene_with_texture_filter():
    """Above ``texture_min_tiles`` the filter is active; the estimate stays unbiased (3 noise draws:
    each within 8 %, their mean within 4 %)."""
    ls, lr = 1e-3, 1e-5
    ratios = []
    for seed in range(3):
        noisy = _noisy(_smooth_scene(640, 640), ls, lr, seed)
        res = estimate_mosaic(noisy, "RGGB", bootstrap=0)
        ratios.append([res.std_at(x) / _std(ls, lr, x) for x in (0.1, 0.5)])
    ratios = np.array(ratios)
    assert np.all(np.abs(ratios - 1) <= 0.08)
    assert np.all(np.abs(ratios.mean(axis=0) - 1) <= 0.04)


def test_single_image_per_plane_differences():
    """Planes with different parameters are told apart (per-plane fits)."""
    from rawrcl.cfa import pack, unpack

    clean = pack(_smooth_scene(), "RGGB")
    model = NoiseModel([2e-3, 5e-4, 5e-4, 1e-3], [1e-5, 1e-5, 1e-5, 4e-5])
    import torch

    noisy = model.sample(torch.from_numpy(clean).float(), torch.Generator().manual_seed(0)).numpy()
    res = estimate_mosaic(unpack(noisy, "RGGB"), "RGGB", bootstrap=0)
    for i, c in enumerate(("R", "G1", "G2", "B")):
        true = _std(model.lambda_shot[i], model.lambda_read[i], 0.5)
        assert res.std_at(0.5, c) == pytest.approx(true, rel=0.12)


def test_single_image_natural_photo_with_clipping():
    """A natural photo (skimage astronaut, lightly blurred), noise clipped to [0, 1] like read_raw."""
    from scipy.ndimage import gaussian_filter
    from skimage import data

    photo = gaussian_filter(data.astronaut().astype(np.float64) / 255, (1, 1, 0))
    clean = _photo_mosaic(photo)
    ls, lr = 1.5e-3, 4e-4
    res = estimate_mosaic(_noisy(clean, ls, lr, 3, clip="both"), "RGGB", bootstrap=0)
    for x in (0.1, 0.5):
        assert res.std_at(x) == pytest.approx(_std(ls, lr, x), rel=0.15)


def test_single_image_bad_inputs():
    rng = np.random.default_rng(4)
    with pytest.raises(RawrclError, match="too small"):
        estimate_mosaic(rng.random((20, 20)), "RGGB")
    with pytest.raises(RawrclError, match="clipped"):
        estimate_mosaic(np.ones((128, 128), np.float32), "RGGB")
    with pytest.raises(RawrclError):
        estimate_mosaic(rng.random((3, 64, 64)), "RGGB")


# --------------------------------------------------------------------------- photon transfer


@pytest.mark.parametrize("ls,lr", [(1e-3, 1e-5), (4e-3, 5e-4)])
def test_photon_transfer_prnu(ls, lr):
    s = flat_series(ls, lr, prnu=0.01, dsnu=0.002, shape=(128, 128), seed=5)
    res = photon_transfer(s["flats"], s["darks"], s["pattern"])
    for c, (es, er) in res.per_plane.items():
        assert es == pytest.approx(ls, rel=0.05), c
        assert er == pytest.approx(lr, rel=0.05), c
    fw = res.extra["full_well"]["G1"]
    assert fw is not None and 0.7 < fw < 1.0
    lo, hi = res.extra["linear_range"]["G1"]
    assert lo == 0.0 and hi < fw
    assert not res.bins["G1"].used[-1]  # the saturated levels are out of the fit


def test_photon_transfer_per_plane_and_errors():
    s = flat_series(
        [1e-3, 2e-3, 2e-3, 3e-3], [1e-5, 2e-5, 2e-5, 3e-5], shape=(96, 96), seed=6, pattern="BGGR"
    )
    res = photon_transfer(s["flats"], s["darks"], "BGGR")
    assert res.per_plane["R"][0] == pytest.approx(1e-3, rel=0.05)
    assert res.per_plane["B"][0] == pytest.approx(3e-3, rel=0.05)
    with pytest.raises(RawrclError):
        photon_transfer(s["flats"][:1], s["darks"], "BGGR")
    with pytest.raises(RawrclError):
        photon_transfer(s["flats"][-3:], s["darks"], "BGGR")  # all saturated


# ---------------------------------------------------------------------------------- metadata


def test_map_and_convert_noise_profile():
    one = map_noise_profile([(1e-3, 1e-6)])
    assert set(one) == {"R", "G1", "G2", "B"} and one["B"] == (1e-3, 1e-6)
    three = map_noise_profile([(1, 2), (3, 4), (5, 6)])
    assert three == {"R": (1, 2), "G1": (3, 4), "G2": (3, 4), "B": (5, 6)}
    four = map_noise_profile([(1, 0), (2, 0), (3, 0), (4, 0)], "GRBG")  # G R / B G
    assert four == {"G1": (1, 0), "R": (2, 0), "B": (3, 0), "G2": (4, 0)}
    with pytest.raises(RawrclError):
        map_noise_profile([(1, 2), (3, 4)])
    # file normalised to white 4095, rawrcl to 16383 (same black 0): x_file = 4·x
    s, o = convert_noise_profile((1e-3, 1e-5), 0, 4095, 0, 16383)
    k = 16383 / 4095
    assert s == pytest.approx(1e-3 / k) and o == pytest.approx(1e-5 / k**2)
    # the converted profile predicts the same DN variance
    raw = 1000.0
    var_dn_file = (1e-3 * raw / 4095 + 1e-5) * 4095**2
    var_dn_ours = (s * raw / 16383 + o) * 16383**2
    assert var_dn_ours == pytest.approx(var_dn_file)
    # different black level: O absorbs S·c
    s2, o2 = convert_noise_profile((1e-3, 1e-5), 0, 4095, 64, 4095)
    raw = 2000.0
    assert (s2 * (raw - 64) / 4031 + o2) * 4031**2 == pytest.approx((1e-3 * raw / 4095 + 1e-5) * 4095**2)


def _write_noisy_dng(path: Path, ls: float, lr: float, noise_profile=None, iso=200, seed=0) -> Path:
    from rawrcl.io.dng import write_dng

    x = _noisy(_smooth_scene(192, 192), ls, lr, seed, clip="none", bits=None)
    black, white = 512, 16383
    dn = np.clip(np.round(black + x * (white - black)), 0, white).astype(np.uint16)
    return write_dng(
        path, dn, "RGGB", black, white, iso=iso, noise_profile=noise_profile, make="Acme", model="Cam 1"
    )


def test_metadata_exact_from_written_dng(tmp_path):
    p1 = _write_noisy_dng(tmp_path / "one.dng", 1e-3, 1e-5, noise_profile=(1.234567e-3, 8.765e-6))
    r = calibrate_file(p1, "metadata")
    assert r.status == "ok" and r.method == "metadata"
    assert all(v == (1.234567e-3, 8.765e-6) for v in r.per_plane.values())
    assert r.iso == 200 and r.make == "Acme"
    p3 = _write_noisy_dng(
        tmp_path / "three.dng", 1e-3, 1e-5, noise_profile=[(1e-3, 1e-6), (2e-3, 2e-6), (3e-3, 3e-6)]
    )
    r = calibrate_file(p3, "metadata")
    assert r.per_plane == {"R": (1e-3, 1e-6), "G1": (2e-3, 2e-6), "G2": (2e-3, 2e-6), "B": (3e-3, 3e-6)}
    # the image estimate on the same file carries the metadata for comparison
    r = calibrate_file(p1, "image", bootstrap=0)
    assert r.method == "image" and r.metadata["R"] == (1.234567e-3, 8.765e-6)
    assert r.std_at(0.5) == pytest.approx(_std(1e-3, 1e-5, 0.5), rel=0.08)


def test_no_metadata_and_auto_fallback(tmp_path):
    p = _write_noisy_dng(tmp_path / "plain.dng", 2e-3, 2e-5)
    r = calibrate_file(p, "metadata")
    assert r.status == "no-metadata" and r.lambda_shot is None and not r.per_plane
    r = calibrate_file(p, "auto", bootstrap=0)
    assert r.method == "image" and r.extra["fallback"] == "no-metadata"
    assert r.std_at(0.1) == pytest.approx(_std(2e-3, 2e-5, 0.1), rel=0.08)


@pytest.mark.skipif(not IPHONE.exists(), reason="shared iPhone DNG not available")
def test_metadata_iphone_real_noise_profile():
    r = calibrate_file(IPHONE, "metadata")
    assert r.status == "ok" and r.iso == 32
    assert all(v == (3e-05, 3e-08) for v in r.per_plane.values())
    with pytest.raises(RawrclError):  # linear DNG: no image estimate
        calibrate_file(IPHONE, "image")


# ---------------------------------------------------------------------------------- profiles


def _result(iso: float, ls: float, lr: float) -> CalibrationResult:
    planes = {c: (ls, lr) for c in ("R", "G1", "G2", "B")}
    return CalibrationResult(
        path=f"iso{iso}", method="flats", per_plane=planes, iso=iso, make="Acme", model="Cam 1"
    )


def test_profiles_interpolate_log_linear(tmp_path):
    p = tmp_path / "prof.json"
    save_profile(p, [_result(100, 1e-4, 1e-6), _result(800, 8e-4, 6.4e-5)])
    save_profile(p, [_result(3200, 3.2e-3, 1.024e-3)])  # merged into the same file
    planes, info = lookup_profile(p, "Acme", "Cam 1", 400)
    assert planes["G1"][0] == pytest.approx(4e-4, rel=1e-9) and planes["G1"][1] == pytest.approx(
        1.6e-5, rel=1e-9
    )
    assert info["interpolated"] and not info["extrapolated"]
    planes, info = lookup_profile(p, "ACME", "Acme Cam 1", 6400)  # case/prefix-insensitive camera key
    assert info["extrapolated"] and planes["R"][0] == pytest.approx(6.4e-3, rel=1e-9)
    nm = load_profile(p, "Acme", "Cam 1", 800)
    assert isinstance(nm, NoiseModel) and nm.lambda_shot == [8e-4] * 4
    with pytest.raises(RawrclError, match="no camera"):
        lookup_profile(p, "Other", "X", 100)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(RawrclError):
        load_profile(bad, "Acme", "Cam 1", 100)


def test_bad_or_darktable_profile_refused_not_skipped(tmp_path):
    """A ``--noise-profile`` file that is not a rawrcl profile is an error for every consumer — also where
    a camera missing from a good profile falls through to the image estimate — and darktable's
    noiseprofiles.json (not per raw sample: docs/calibration.md) is named as such."""
    from rawrcl.calibration.resolve import file_noise

    from rawrcl.infer.noise import NoiseOptions
    from rawrcl.io.raw import read_raw
    from rawrcl.noise.spec import PER_FILE, parse_noise

    dt = tmp_path / "noiseprofiles.json"
    entry = {"name": "D750 iso 100", "iso": 100, "a": [2e-6, 1e-6, 2e-6], "b": [1e-8, 1e-8, 1e-8]}
    dt.write_text(
        json.dumps(
            {
                "version": 0,
                "noiseprofiles": [{"maker": "Nikon", "models": [{"model": "D750", "profiles": [entry]}]}],
            }
        )
    )
    with pytest.raises(RawrclError, match="darktable's noiseprofiles.json"):
        load_profile(dt, "Nikon", "D750", 100)
    with pytest.raises(RawrclError, match="darktable"):
        NoiseOptions(profile=dt)
    binary = tmp_path / "raw.json"
    binary.write_bytes(bytes([0xD7, 0xFF, 0x00, 0x81]) * 64)  # not text: one line, not a traceback
    with pytest.raises(RawrclError, match="not a readable JSON noise profile"):
        NoiseOptions(profile=binary)
    raw = read_raw(_write_noisy_dng(tmp_path / "a.dng", 1e-3, 1e-5))
    auto = parse_noise("auto", PER_FILE, "--noise")
    with pytest.raises(RawrclError, match="darktable"):
        file_noise(raw, auto, profile=dt)
    good = tmp_path / "prof.json"
    save_profile(good, [_result(100, 1e-4, 1e-6)])
    raw.model = "Other"  # not in the profile: the image estimate, as before
    assert file_noise(raw, auto, profile=good).source == "image"


# ----------------------------------------------------------------------------------------- CLI


def _cli(args: list[str]):
    from rawrcl.cli import main

    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_cli_json_plot_profile(tmp_path):
    a = _write_noisy_dng(tmp_path / "a.dng", 1e-3, 1e-5, noise_profile=(1e-3, 1e-5), iso=100)
    b = _write_noisy_dng(tmp_path / "b.dng", 2e-3, 4e-5, iso=400, seed=1)
    png, prof = tmp_path / "nlf.png", tmp_path / "prof.json"
    res = _cli(["calibrate", str(a), str(b), "--json", "--plot", str(png), "--save-profile", str(prof)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [o["path"] for o in out] == [str(a), str(b)]
    for o in out:
        assert {"path", "method", "lambda_shot", "lambda_read", "per_plane", "iso", "status"} <= set(o)
        assert set(o["per_plane"]) == {"R", "G1", "G2", "B"}
    assert out[0]["method"] == "metadata" and out[0]["lambda_shot"] == 1e-3 and out[0]["iso"] == 100
    assert out[1]["method"] == "image" and out[1]["lambda_shot"] == pytest.approx(2e-3, rel=0.25)
    pngs = sorted(tmp_path.glob("nlf_*.png"))
    assert len(pngs) == 2 and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    planes, info = lookup_profile(prof, "Acme", "Cam 1", 200)
    assert info["interpolated"] and 1e-3 < planes["R"][0] < 2.5e-3
    # existing outputs are not overwritten without --force
    res = CliRunner().invoke(
        __import__("rawrcl.cli", fromlist=["main"]).main, ["calibrate", str(a), str(b), "--plot", str(png)]
    )
    assert res.exit_code == 1 and "--force" in res.output


def test_cli_deprecated_estimator_options(tmp_path):
    """--estimator/--detail are hidden deprecated options: the library's own values run with a warning,
    the moved variants are refused in one line naming where they went."""
    b = _write_noisy_dng(tmp_path / "b.dng", 2e-3, 4e-5, iso=400, seed=1)
    res = _cli(["calibrate", str(b), "--method", "image"])
    assert res.exit_code == 0 and "fitted on signal levels x ∈ [" in res.output, res.output
    res = CliRunner().invoke(__import__("rawrcl.cli", fromlist=["main"]).main, ["calibrate", "--help"])
    assert "--estimator" not in res.output and "--detail" not in res.output
    res = _cli(["calibrate", str(b), "--method", "image", "--estimator", "tiles", "--json"])
    assert res.exit_code == 0 and "deprecated" in res.stderr
    assert json.loads(res.stdout)[0]["lambda_shot"] == pytest.approx(2e-3, rel=0.25)
    for opt, value in (("--estimator", "pca"), ("--detail", "plane")):
        res = _cli(["calibrate", str(b), "--method", "image", opt, value])
        assert res.exit_code == 1 and "calibration_variants.py" in res.output
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


def test_profile_iso_conflict_rule(tmp_path):
    """An existing camera/ISO entry is replaced only on request (library) / with --force (CLI)."""
    from rawrcl.calibration import profile_conflicts

    from rawrcl.noise.profiles import read_profile

    p = tmp_path / "prof.json"
    save_profile(p, [_result(100, 1e-4, 1e-6)])
    assert profile_conflicts(read_profile(p), [_result(100, 2e-4, 1e-6), _result(200, 2e-4, 1e-6)]) == [
        ("acme cam 1", 100.0)
    ]
    with pytest.raises(RawrclError, match="already has 'acme cam 1' at ISO 100"):
        save_profile(p, [_result(200, 2e-4, 1e-6), _result(100, 2e-4, 1e-6)], replace=False)
    assert lookup_profile(p, "Acme", "Cam 1", 100)[1]["measured_isos"] == [100.0]  # nothing written
    save_profile(p, [_result(100, 2e-4, 1e-6)])  # the API default replaces
    assert lookup_profile(p, "Acme", "Cam 1", 100)[0]["R"] == (2e-4, 1e-6)
    a = _write_noisy_dng(tmp_path / "a.dng", 1e-3, 1e-5, noise_profile=(1e-3, 1e-5), iso=100)
    prof = tmp_path / "cli.json"
    assert _cli(["calibrate", str(a), "--save-profile", str(prof)]).exit_code == 0
    res = CliRunner().invoke(
        __import__("rawrcl.cli", fromlist=["main"]).main, ["calibrate", str(a), "--save-profile", str(prof)]
    )
    assert res.exit_code == 1 and "--force" in res.output and "Traceback" not in res.output
    assert _cli(["calibrate", str(a), "--save-profile", str(prof), "--force"]).exit_code == 0


def test_readout_and_noisy_mosaic():
    """ADC readout: quantisation to 2^bits − 1 levels, clipping modes; noisy_mosaic draws the noise of
    rawrcl.noise.NoiseModel (scalar or per packed plane) reproducibly."""
    x = np.array([-0.2, 0.30001, 1.3])
    assert readout(x, bits=None, clip="none").tolist() == pytest.approx([-0.2, 0.30001, 1.3])
    assert readout(x, bits=None, clip="white").tolist() == pytest.approx([-0.2, 0.30001, 1.0])
    assert readout(x, bits=2, clip="both").tolist() == pytest.approx([0.0, 1 / 3, 1.0])
    with pytest.raises(RawrclError, match="clip"):
        readout(x, clip="black")
    clean = np.full((64, 64), 0.25)
    a = _noisy(clean, 1e-3, 1e-4, 0, bits=None, clip="none")
    assert np.array_equal(a, _noisy(clean, 1e-3, 1e-4, 0, bits=None, clip="none"))
    assert a.dtype == np.float32 and np.std(a) == pytest.approx(_std(1e-3, 1e-4, 0.25), rel=0.05)
    per_plane = NoiseModel([4e-3, 0.0, 0.0, 0.0], [0.0] * 4)
    b = noisy_mosaic(clean, per_plane, np.random.default_rng(1), bits=None, clip="none")
    assert np.std(b[0::2, 0::2]) == pytest.approx(np.sqrt(4e-3 * 0.25), rel=0.1)
    assert np.all(b[1::2, 1::2] == 0.25) and np.all(b[0::2, 1::2] == 0.25)


def test_calibration_imports_only_lower_layers():
    """calibration/ depends only on I/O, the CFA, the noise model and the ISP (issue 18 layering)."""
    import ast

    allowed = {"rawrcl.errors", "rawrcl.io", "rawrcl.cfa", "rawrcl.noise"}
    allowed.add("rawrcl.isp")
    root = Path(__file__).resolve().parents[1] / "calibration"
    for f in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                if n.startswith("rawrcl"):
                    assert any(n == a or n.startswith(a + ".") for a in allowed), f"{f.name} imports {n}"
        assert len(f.read_text().splitlines()) <= 400, f"{f.name} is over 400 lines"


def test_cli_bad_inputs(tmp_path):
    from rawrcl.cli import main

    junk = tmp_path / "junk.dng"
    junk.write_bytes(b"not a raw file at all" * 10)
    res = CliRunner().invoke(main, ["calibrate", str(junk), "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.output and "junk.dng" in res.output
    res = CliRunner().invoke(main, ["calibrate", str(tmp_path / "missing.dng")])
    assert res.exit_code == 1 and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["calibrate", "--flats", str(tmp_path)])
    assert res.exit_code == 1 and "--darks" in res.output
    if IPHONE.exists():
        res = CliRunner().invoke(main, ["calibrate", str(IPHONE), "--method", "image"])
        assert res.exit_code == 1 and ("Bayer" in res.output or "CFA" in res.output)


def test_cli_flats_darks(tmp_path):
    s = flat_series(
        1e-3, 2e-5, prnu=0.01, shape=(96, 96), seed=7, levels=(0.05, 0.15, 0.3, 0.5, 0.7, 0.95, 1.2)
    )
    write_series_dngs(s, tmp_path / "flats", tmp_path / "darks")
    res = _cli(
        ["calibrate", "--flats", str(tmp_path / "flats"), "--darks", str(tmp_path / "darks"), "--json"]
    )
    assert res.exit_code == 0, res.output
    (o,) = json.loads(res.output)
    assert o["method"] == "flats" and o["iso"] == 100
    assert o["lambda_shot"] == pytest.approx(1e-3, rel=0.1) and o["lambda_read"] == pytest.approx(
        2e-5, rel=0.15
    )
    assert o["extra"]["full_well"]["G1"] is not None


@pytest.mark.parametrize("exposure", [0.3, 1.0])
def test_nlf_misfit_flags_a_gamma_encoded_mosaic(exposure):
    """The single-image estimate's bins lie close to their line on a Poisson–Gaussian mosaic (no note), far
    from it when the same kind of data is Rec. 709-encoded as the HDR+ burst's files are (a note says so)."""
    from rawrcl.calibration.resolve import MISFIT_NOTE, image_estimate
    from rawrcl.calibration.single_image import estimate_mosaic
    from scipy import ndimage
    from skimage import data

    from rawrcl.cfa import mosaic

    img = data.astronaut().astype(np.float64) / 255
    lin = np.stack([ndimage.gaussian_filter(img[..., c] ** 2.2, 1.5) for c in range(3)])
    m = mosaic(lin.astype(np.float32), "RGGB")[0].astype(np.float64) * exposure
    rng = np.random.default_rng(0)
    y = np.clip(m + rng.normal(size=m.shape) * np.sqrt(1e-3 * m + 1e-5), 0, 1)
    u = np.clip(0.5 * m + rng.normal(size=m.shape) * np.sqrt(1e-4 * m + 2e-6), 0, 1)
    v = np.where(u < 0.018, 4.5 * u, 1.099 * np.maximum(u, 0.018) ** 0.45 - 0.099)
    assert estimate_mosaic(y, "RGGB", bootstrap=0).extra["nlf_misfit"] < 0.7 * MISFIT_NOTE
    assert estimate_mosaic(v, "RGGB", bootstrap=0).extra["nlf_misfit"] > 1.2 * MISFIT_NOTE
    assert image_estimate(y, "RGGB")[1] == ""
    assert "uncertain estimate" in image_estimate(v, "RGGB")[1]
