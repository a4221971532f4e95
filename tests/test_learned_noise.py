"""The learned check on the single-image noise estimate (``rawrcl.calibration.learned``)."""

from __future__ import annotations

import numpy as np
import pytest
import skimage.data
from rawrcl.calibration import learned
from rawrcl.calibration.resolve import image_estimate
from rawrcl.calibration.single_image import estimate_packed

from rawrcl.cfa import CHANNELS, unpack
from rawrcl.noise import PRESETS, NoiseModel
from rawrcl.tasks import get_task


def _mosaic(img: np.ndarray, level: str, seed: int = 0) -> np.ndarray:
    """Packed noisy mosaic (4, h, w) of a (3, H, W) photo at a preset level (photo values, RGGB)."""
    task = get_task("raw-denoise", unprocess=False)
    s = task.sample(img, np.random.default_rng(seed), NoiseModel(*PRESETS[level]))
    return s["input"].numpy()


def _astronaut() -> np.ndarray:
    return (skimage.data.astronaut().astype(np.float32) / 255).transpose(2, 0, 1)[:, 100:356, 150:406]


def test_shipped_weights_load_and_read_a_smooth_scene():
    assert learned.load() is not None  # rawrcl/weights/noise_estimator.pt, read with weights_only=True
    yy, xx = np.mgrid[0:256, 0:256] / 256
    smooth = np.stack([0.2 + 0.3 * xx, 0.3 + 0.2 * yy, 0.25 + 0.1 * xx * yy]).astype(np.float32)
    for level in ("L2", "L4", "L6"):
        ls, lr = PRESETS[level]
        got = learned.learned_std(_mosaic(smooth, level, seed=1), 0.3)
        assert 0.85 < got / np.sqrt(ls * 0.3 + lr) < 1.35, level


def test_cap_lowers_an_over_read_at_base_iso_and_leaves_a_good_estimate():
    """Sharp content at L1: the tile estimator reads ≈ 3× the true std at the median signal; the check
    lowers it (not below the truth). At L4 the estimate is right and stays."""
    img = _astronaut()
    for level, lowered in (("L1", True), ("L4", False)):
        packed = _mosaic(img, level)
        res = estimate_packed(packed, bootstrap=0)
        ratio = learned.cap_ratio(packed, *res.pooled)
        x = float(np.clip(np.median(packed), 0.02, 0.5))
        ls, lr = PRESETS[level]
        est = np.sqrt(res.pooled[0] * x + res.pooled[1]) / np.sqrt(ls * x + lr)
        if lowered:
            assert est > 2 and ratio < 0.85 and ratio * est > 1.0
        else:
            assert ratio == 1.0


def test_inference_estimate_is_lowered_and_says_so():
    packed = _mosaic(_astronaut(), "L1")
    cfa = np.asarray(unpack(packed, "RGGB"))
    per_plane, note = image_estimate(cfa, "RGGB")
    plain = estimate_packed(packed, bootstrap=0).per_plane
    x = float(np.median(packed))
    for c in CHANNELS:
        std, plain_std = (np.sqrt(p[c][0] * x + p[c][1]) for p in (per_plane, plain))
        assert std < 0.85 * plain_std
    assert "learned check" in note


def test_without_weights_the_estimate_is_unchanged(monkeypatch):
    learned.load.cache_clear()
    monkeypatch.setattr(learned, "WEIGHTS", "no-such-file.pt")
    try:
        assert learned.load() is None
        assert learned.cap_ratio(_mosaic(_astronaut(), "L1"), 1e-3, 1e-5) == 1.0
    finally:
        learned.load.cache_clear()


@pytest.mark.parametrize("shape", [(4, 10, 12), (4, 40, 300)])
def test_small_and_narrow_mosaics(shape):
    x = np.random.default_rng(0).uniform(0.2, 0.3, shape).astype(np.float32)
    got = learned.learned_std(x, 0.25)
    assert (got is None) if min(shape[1:]) < 16 else (got is not None and np.isfinite(got) and got > 0)


def test_calibrate_image_reports_the_check_and_saves_what_denoise_tells(tmp_path):
    """`rawrcl calibrate --method image` lowers the estimate as the commands do (a profile saved from it
    tells models what --noise image would) and shows the tile estimate beside it."""
    from click.testing import CliRunner
    from rawrcl.calibration.api import calibrate_file
    from rawrcl.cli import main

    from rawrcl.io.dng import write_dng

    packed = _mosaic(_astronaut(), "L1")
    cfa = np.asarray(unpack(packed, "RGGB"))
    dn = np.clip(np.rint(512 + cfa * (16383 - 512)), 0, 16383).astype(np.uint16)
    src = write_dng(tmp_path / "base_iso.dng", dn, "RGGB", 512, 16383)
    res = calibrate_file(src, "image")
    assert res.extra["learned_check"] < 0.85
    told, _ = image_estimate(cfa, "RGGB")
    assert res.lambda_shot + res.lambda_read < sum(res.extra["tile_estimate"]["pooled"])
    for c in CHANNELS:
        np.testing.assert_allclose(res.per_plane[c], told[c], rtol=0.05, atol=1e-9)
    out = CliRunner().invoke(main, ["calibrate", str(src), "--method", "image"])
    assert out.exit_code == 0 and "by the learned check" in out.output and "tile estimate" in out.output


@pytest.mark.parametrize(
    ("misfit", "est_over_net", "expected"),
    [
        (0.0, 1.4, 1.0),  # smooth fit: only a far lower reading counts (CAP 1.5)
        (0.0, 3.0, 0.5),
        (0.1, 1.4, 1.0 / 1.4),  # texture in the fit: the network trusted (CAP_TEXTURED 1.0)
        (0.1, 0.9, 1.0),  # never raised
        (0.1, 2.5, 0.5),  # but lowered at most ×1/2 beyond CAP 1.5's
        (0.1, 4.0, 1.5 / 4.0),  # where CAP 1.5 lowers more, it does
    ],
)
def test_cap_trusts_the_network_closer_where_the_fit_shows_texture(
    monkeypatch, misfit, est_over_net, expected
):
    packed = np.full((4, 32, 32), 0.25, np.float32)  # median 0.25
    shot, read = 1e-3, 0.0
    est = np.sqrt(shot * 0.25)
    monkeypatch.setattr(learned, "learned_std", lambda p, x, net=None: est / est_over_net)
    assert learned.cap_ratio(packed, shot, read, misfit=misfit) == pytest.approx(expected)


def test_the_check_reads_the_per_plane_fits_where_they_read_far_more_than_the_pooled_fit(monkeypatch):
    """Per-plane fits whose mean reads more than PLANES_APART × the pooled fit's std (fine texture read as
    noise plane by plane: a snow scene at base ISO, 7×) are checked by their own level — what the model is
    told; checked against the pooled fit they kept 11× the true std. Nearer, the pooled fit is checked."""
    from rawrcl.calibration.result import CalibrationResult

    packed = np.full((4, 32, 32), 0.25, np.float32)  # median signal 0.25
    res = CalibrationResult(path=None, method="image", pooled=(1e-5, 1e-6))  # std 0.0019 at 0.25
    res.per_plane = {"R": (1e-3, 0.0), "G1": (0.0, 1e-3), "G2": (0.0, 5e-4), "B": (0.0, 9e-4)}
    net = 0.0015  # within CAP of the pooled fit: checked against it, nothing would be lowered
    monkeypatch.setattr(learned, "learned_std", lambda p, x, net_=None: net)
    told = np.sqrt(np.mean([1e-3, 0, 0, 0]) * 0.25 + np.mean([0, 1e-3, 5e-4, 9e-4]))  # 14× the pooled std
    assert learned.estimate_ratio(packed, res) == pytest.approx(learned.CAP * net / told)
    # planes 1.5× the pooled fit (within PLANES_APART): the pooled fit is checked, so nothing is lowered,
    # though the planes' own level would have been (CAP · net / their std = 0.80)
    res.per_plane = {c: (1e-5 * 1.5**2, 1e-6 * 1.5**2) for c in ("R", "G1", "G2", "B")}
    assert learned.cap_ratio(packed, 1e-5 * 1.5**2, 1e-6 * 1.5**2) < 0.85
    assert learned.estimate_ratio(packed, res) == 1.0
    res.per_plane = {}
    assert learned.estimate_ratio(packed, res) == 1.0


def _clipped_corners(shape, blocks):
    """A noisy mid-grey packed mosaic with white-clipped ``side``-px squares at the given top-left corners."""
    x = np.random.default_rng(3).uniform(0.2, 0.3, shape).astype(np.float32)
    for y0, x0, side in blocks:
        x[:, y0 : y0 + side, x0 : x0 + side] = 1.0
    return x


def test_crops_fall_back_to_a_finer_grid_when_every_coarse_crop_is_clipped():
    """170 px: the one coarse crop (0, 0) holds a clipped 40-px corner (9.8 % > MAX_CLIPPED); the finer
    grid (stride 32, edges included) finds one of the crops at 42 px that leave it out."""
    x = _clipped_corners((4, 170, 170), [(0, 0, 40)])
    got = learned.crops(x)
    assert len(got) == 1 and got[0] in ((0, 42), (42, 0), (42, 42))
    assert learned.learned_std(x, 0.25) is not None
    # a mosaic with a clip-free coarse crop keeps the coarse grid (the fallback never adds crops to it)
    assert learned.crops(_clipped_corners((4, 170, 170), [(130, 130, 40)])) == [(0, 0)]
    # a mosaic narrower than a crop (100 rows; clipped 40-px squares in both coarse crops): the finer grid
    # slides along the long side only and finds the clip-free crop at the right edge
    narrow = _clipped_corners((4, 100, 300), [(0, 0, 40), (0, 128, 40)])
    assert learned.crops(narrow) == [(0, 172)]


def _shares(x: np.ndarray) -> dict:
    """Clipped share of every 128-px crop of the finer grid (stride 32, edges included) of a 170-px mosaic."""
    from rawrcl.calibration.tiles import clipped_mask

    clipped = np.stack([clipped_mask(p) for p in x]).any(0)
    pos = (0, 32, 42)
    return {(y, x0): clipped[y : y + 128, x0 : x0 + 128].mean() for y in pos for x0 in pos}


def test_crops_last_fallback_the_least_clipped_crop_within_its_bound():
    """No crop clip-free even on the finer grid: the least clipped one alone, if at most MAX_CLIPPED_LAST
    clipped (a bright photo with highlights spread over it); beyond that, no crop and no reading."""
    spots = [(y, x0, 24) for y in range(0, 170, 56) for x0 in range(0, 170, 56)]
    some = _clipped_corners((4, 170, 170), spots)
    shares = _shares(some)
    least = min(shares.values())
    assert learned.MAX_CLIPPED < least <= learned.MAX_CLIPPED_LAST
    got = learned.crops(some)
    assert len(got) == 1 and shares[got[0]] == least
    assert learned.learned_std(some, 0.25) is not None
    spots = [(y, x0, 32) for y in range(0, 170, 56) for x0 in range(0, 170, 56)]
    everywhere = _clipped_corners((4, 170, 170), spots)
    assert min(_shares(everywhere).values()) > learned.MAX_CLIPPED_LAST
    assert learned.crops(everywhere) == [] and learned.learned_std(everywhere, 0.25) is None


def test_finer_grid_crops_do_not_overlap_and_are_clip_free():
    from rawrcl.calibration.tiles import clipped_mask

    side = learned.CROP
    # each of the four coarse crops of a 300-px mosaic has a clipped 48-px corner
    x = _clipped_corners((4, 300, 300), [(y, x0, 48) for y in (0, side) for x0 in (0, side)])
    got = learned.crops(x)
    assert len(got) >= 2
    clipped = np.stack([clipped_mask(p) for p in x]).any(0)
    for i, (y, x0) in enumerate(got):
        assert clipped[y : y + side, x0 : x0 + side].mean() <= learned.MAX_CLIPPED
        for cy, cx in got[i + 1 :]:
            assert abs(y - cy) >= side or abs(x0 - cx) >= side
