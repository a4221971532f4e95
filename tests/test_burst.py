"""rawrcl.eval.burst: registration, reference, measured NLF, ceiling and refusals on synthetic bursts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rawrcl.errors import RawrclError
from rawrcl.eval import burst as B
from rawrcl.eval import burst_align as A
from rawrcl.eval import burst_score as S
from rawrcl.eval.burst_align import PLANE_OFFSETS

SIZE = 256  # mosaic pixels


def _scene(scale: float = 0.6, offset: float = 0.02, blur: float = 1.5) -> np.ndarray:
    """Linear RGB scene (3, SIZE + 64, SIZE + 64) from scikit-image's astronaut (smooth unless blur=0)."""
    from scipy import ndimage
    from skimage import data

    img = data.astronaut()[64 : 64 + SIZE + 64, 128 : 128 + SIZE + 64].astype(np.float64) / 255
    lin = img**2.2 * scale + offset
    return np.stack([ndimage.gaussian_filter(lin[..., c], blur) if blur else lin[..., c] for c in range(3)])


def _affine(theta_deg: float, scale: float, tx: float, ty: float) -> np.ndarray:
    """Target → frame map (2×3, full-resolution mosaic px): rotation/scale about the centre, then shift."""
    th = math.radians(theta_deg)
    a = scale * np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
    c = np.array([SIZE / 2, SIZE / 2])
    return np.concatenate([a, (np.array([tx, ty]) + c - a @ c)[:, None]], axis=1)


def _render(scene: np.ndarray, g: np.ndarray, pattern: str = "RGGB") -> np.ndarray:
    """Mosaic (SIZE, SIZE) of a frame whose target → frame map is g: frame(u) = scene(g⁻¹(u))."""
    from scipy import ndimage

    from rawrcl.cfa import positions

    a, t = g[:, :2], g[:, 2]
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    src = np.linalg.inv(a) @ (np.stack([xx.ravel(), yy.ravel()]) - t[:, None])
    colour = np.zeros((SIZE, SIZE), dtype=int)
    for name, (r, c) in positions(pattern).items():
        colour[r::2, c::2] = {"R": 0, "G1": 1, "G2": 1, "B": 2}[name]
    out = np.zeros(SIZE * SIZE)
    for c in range(3):
        v = ndimage.map_coordinates(scene[c], [src[1] + 32, src[0] + 32], order=3, mode="reflect")
        out[colour.ravel() == c] = v[colour.ravel() == c]
    return out.reshape(SIZE, SIZE)


def _burst(seed=0, n=6, ls=4e-3, lr=1e-4, rotate=0.3, clip_black=False, pattern="RGGB", dark=False):
    rng = np.random.default_rng(seed)
    scene = _scene(0.12, 0.0) if dark else _scene()
    gs = [np.eye(2, 3)] + [
        _affine(rng.uniform(-rotate, rotate), 1 + rng.uniform(-0.002, 0.002), *rng.uniform(-3, 3, 2))
        for _ in range(n - 1)
    ]
    clean = [_render(scene, g, pattern) for g in gs]
    noisy = [c + rng.normal(size=c.shape) * np.sqrt(ls * c + lr) for c in clean]
    if clip_black:
        noisy = [np.maximum(x, 0) for x in noisy]
    return gs, clean, noisy


@pytest.fixture(scope="module")
def synthetic():
    gs, clean, noisy = _burst()
    br = B.build_reference(B.burst_from_arrays(noisy, "RGGB"))
    return gs, clean, noisy, br


def test_registration_subpixel(synthetic):
    gs, _, _, br = synthetic
    yy, xx = np.mgrid[0:SIZE:8, 0:SIZE:8].astype(np.float64)
    pts = np.stack([xx.ravel(), yy.ravel(), np.ones(xx.size)])
    for reg, g in zip(br.registrations, gs[1:], strict=True):
        err = np.linalg.norm(reg.full_res @ pts - g @ pts, axis=0)
        assert np.sqrt(np.mean(err**2)) < 0.05, (reg.path, float(np.sqrt(np.mean(err**2))))
        assert err.max() < 0.12
        assert reg.cc > 0.95
    assert br.moved_blocks == [0.0] * 5


def test_measured_nlf_matches_truth(synthetic):
    *_, br = synthetic
    ls, lr = 4e-3, 1e-4
    lo, hi = br.nlf.x_range
    assert lo < 0.05 and hi > 0.4
    for x in (0.05, 0.2, 0.5):
        true = math.sqrt(ls * x + lr)
        assert abs(math.sqrt(br.nlf.pooled[0] * x + br.nlf.pooled[1]) / true - 1) < 0.10
        for plane, (s, o) in br.nlf.per_plane.items():
            assert abs(math.sqrt(s * x + o) / true - 1) < 0.10, (plane, x)


def test_ceiling_and_true_error_by_simulation(synthetic):
    _, clean, noisy, br = synthetic
    m = br.metric_mask()
    true_ref_mse = float(np.mean((br.reference[m] - clean[0][m]) ** 2))
    ceil = br.ceiling()
    assert abs(ceil["mse"] / true_ref_mse - 1) < 0.10
    assert 0.05 < float(br.ref_gain[br.mask].mean()) * 5 < 1.0  # Σw²/(N−1): 0.5…1 per frame
    # the noisy target: measured against the noisy reference, converted back to its true error
    score = S.score_raw(br, noisy[0])
    true_psnr = 10 * math.log10(1 / np.mean((np.clip(noisy[0][m], 0, 1) - clean[0][m]) ** 2))
    assert score["psnr"] < true_psnr - 0.2
    assert abs(score["psnr_true"] - true_psnr) < 0.1
    # the clean target measures the ceiling (up to the reference's interpolation error)
    assert abs(S.score_raw(br, clean[0])["psnr"] - ceil["psnr"]) < 0.3


def test_jdd_scoring_samples_own_cfa_colour_grbg():
    gs, clean, noisy = _burst(seed=3, n=4, rotate=0.0, pattern="GRBG")
    br = B.build_reference(B.burst_from_arrays(noisy, "GRBG"))
    assert br.pattern == "GRBG"
    # a JDD output equal to the clean scene's RGB on the target grid scores like the clean mosaic
    from scipy import ndimage

    scene = _scene()
    rgb = np.stack(
        [
            ndimage.map_coordinates(scene[c], np.mgrid[32 : 32 + SIZE, 32 : 32 + SIZE], order=3)
            for c in range(3)
        ]
    )
    jdd = S.score_jdd(br, rgb)
    raw = S.score_raw(br, clean[0])
    assert abs(jdd["psnr"] - raw["psnr"]) < 0.01
    swapped = S.score_jdd(br, rgb[::-1].copy())  # R and B exchanged: must score far worse
    assert swapped["psnr"] < jdd["psnr"] - 10


def test_black_clipped_burst_mask_and_nlf():
    ls, lr = 4e-3, 6.5e-5
    _, clean, noisy = _burst(seed=1, n=7, ls=ls, lr=lr, clip_black=True, dark=True)
    assert np.mean(noisy[0] == 0) > 0.1
    burst = B.burst_from_arrays(noisy, "RGGB")
    assert abs(float(burst.clipped[0].mean()) - float(np.mean(noisy[0] == 0))) < 1e-9
    br = B.build_reference(burst)
    assert not np.any(br.mask & (noisy[0] == 0))  # clipped target samples never count
    assert 0.1 < br.mask.mean() < 0.6
    for x in (0.05, 0.1):
        est = math.sqrt(br.nlf.pooled[0] * x + br.nlf.pooled[1])
        assert abs(est / math.sqrt(ls * x + lr) - 1) < 0.10
    m = br.metric_mask()
    true_psnr = 10 * math.log10(1 / np.mean((noisy[0][m] - clean[0][m]) ** 2))
    assert abs(S.score_raw(br, noisy[0])["psnr_true"] - true_psnr) < 0.15


def test_moved_scene_is_refused():
    gs, clean, noisy = _burst(seed=2, n=5)
    rng = np.random.default_rng(5)
    moved = [x.copy() for x in noisy]
    # an object (a 96×96 patch) moves by 8 px in frames 2 and 3
    for k in (2, 3):
        patch = clean[k][60:156, 60:156]
        c = np.clip(patch, 0, None)
        moved[k][60:156, 68:164] = patch + rng.normal(size=patch.shape) * np.sqrt(4e-3 * c + 1e-4)
    with pytest.raises(RawrclError, match="moved"):
        B.build_reference(B.burst_from_arrays(moved, "RGGB"))
    # the same burst unmoved passes
    B.build_reference(B.burst_from_arrays(noisy, "RGGB"))


@pytest.mark.parametrize("seed", [0, 1])
def test_sharp_bright_static_burst_is_not_moved(seed):
    """Sharp, bright, low-noise content: each frame's own interpolation error exceeds the noise at edges. The
    motion check accounts for it (``resampling_slope``): no block is "moved" (without it 3–9 % were, and every
    such burst was refused); a moved object in the same burst is still found."""
    rng = np.random.default_rng(seed)
    scene = _scene(0.8, 0.02, blur=0.0)
    gs = [np.eye(2, 3)] + [_affine(0.0, 1.0, *rng.uniform(-3, 3, 2)) for _ in range(5)]
    clean = [_render(scene, g) for g in gs]
    noisy = [c + rng.normal(size=c.shape) * np.sqrt(2e-4 * np.clip(c, 0, None) + 1e-6) for c in clean]
    br = B.build_reference(B.burst_from_arrays(noisy, "RGGB"))
    assert br.moved_blocks == [0.0] * 5
    moved = [x.copy() for x in noisy]
    for k in (2, 3):  # a 96×96 object moves by 8 px
        moved[k][60:156, 68:164] = noisy[k][60:156, 60:156]
    with pytest.raises(RawrclError, match="moved"):
        B.build_reference(B.burst_from_arrays(moved, "RGGB"))


def test_resampling_slope_recovers_a_detail_dependent_variance():
    """var(d) = v + a·h is fitted back (a = 3), 0 without the h term, and a minority of outliers does not
    move it much."""
    rng = np.random.default_rng(0)
    h = rng.exponential(1e-4, 200_000)
    v = np.full_like(h, 1e-4)
    d = rng.normal(size=h.size) * np.sqrt(v + 3.0 * h)
    assert abs(B.resampling_slope(d, v, h) - 3.0) < 0.15
    assert B.resampling_slope(rng.normal(size=h.size) * np.sqrt(v), v, h) < 0.05
    d_out = d.copy()
    d_out[rng.random(h.size) < 0.03] = 1.0  # 3 % gross outliers (σ 0.01 otherwise)
    assert abs(B.resampling_slope(d_out, v, h) - 3.0) < 1.0  # a 90th percentile: +25 % at most here


def test_unrelated_frame_is_refused():
    _, _, noisy = _burst(seed=4, n=4)
    other = np.random.default_rng(0).random((SIZE, SIZE)) * 0.5
    with pytest.raises(RawrclError, match="frame04"):
        B.build_reference(B.burst_from_arrays([*noisy, other], "RGGB"))


def test_poor_correlation_is_refused(synthetic):
    *_, noisy, _ = synthetic
    with pytest.raises(RawrclError, match="poor correlation.*cc = 0.9"):
        B.build_reference(B.burst_from_arrays(noisy[:3], "RGGB"), min_cc=0.999)


def test_plane_warps_share_one_motion():
    """A rotation moves each plane by the same full-resolution motion, not by the packed-green warp."""
    reg = A.Registration("f", np.array([[1.0, -0.01, 0.3], [0.01, 1.0, -0.2]]), np.eye(2, 3), 1.0, 0.0)
    full = A.full_res_affine(reg.warp)
    for plane, (ox, oy) in PLANE_OFFSETS.items():
        w = reg.plane_warp(plane)
        for q in ([0.0, 0.0], [10.0, 7.0], [40.0, 3.0]):
            src_plane = w[:, :2] @ q + w[:, 2]
            src_full = full[:, :2] @ (2 * np.array(q) + [ox, oy]) + full[:, 2]
            np.testing.assert_allclose(2 * src_plane + [ox, oy], src_full, atol=1e-12)


def test_load_burst_files_target_and_mismatch(tmp_path):
    from rawrcl.io.dng import write_dng

    rng = np.random.default_rng(0)
    for k in range(3):
        write_dng(
            tmp_path / f"f{k}.dng", (rng.random((64, 64)) * 3000 + 400).astype(np.uint16), "GRBG", 512, 4095
        )
    b = B.load_burst(tmp_path, target="f1")
    assert [p.name for p in b.paths] == ["f1.dng", "f0.dng", "f2.dng"]
    assert b.pattern == "GRBG" and b.shape == (64, 64)
    assert b.cfa[0].min() < 0  # read unclipped
    with pytest.raises(RawrclError, match="no such RAW"):
        B.load_burst(tmp_path, target="nope")
    write_dng(tmp_path / "f3.dng", np.full((64, 66), 700, np.uint16), "GRBG", 512, 4095)
    with pytest.raises(RawrclError, match="f3.dng"):
        B.load_burst(tmp_path)
    with pytest.raises(RawrclError, match="no such folder"):
        B.load_burst(tmp_path / "missing")
    (tmp_path / "two").mkdir()
    for k in range(2):
        (tmp_path / "two" / f"f{k}.dng").write_bytes((tmp_path / "f0.dng").read_bytes())
    with pytest.raises(RawrclError, match="at least 3"):
        B.load_burst(tmp_path / "two")


def test_shared_hdrplus_burst_crop():
    from tests.conftest import SHARED_RAW

    folder = SHARED_RAW / "hdrplus_burst2"
    if not (folder / "frame00.dng").is_file():
        pytest.skip("../shared HDR+ burst not available")
    from rawrcl.io.raw import read_raw

    frames = [read_raw(folder / f"frame0{k}.dng", clip=False) for k in range(4)]
    cfas = [f.cfa[200:712, 200:712] for f in frames]
    br = B.build_reference(B.burst_from_arrays(cfas, frames[0].pattern))  # GRBG crop at even offset
    assert all(r.cc > 0.8 and r.max_shift < 8 for r in br.registrations)
    assert br.clipped_fraction > 0.05
    s, o = br.nlf.per_plane["G1"]
    assert 1e-4 < math.sqrt(s * 0.05 + o) / 1 < 0.05
    assert 38 < br.ceiling()["psnr"] < 50


def test_side_by_side_figure(synthetic, tmp_path):
    from rawrcl.eval.burst_figure import pick_crops, render_comparison

    gs, clean, noisy, br = synthetic
    crops = pick_crops(br, n=2, size=64)
    assert len(crops) == 2 and all(y % 2 == 0 and x % 2 == 0 for y, x in crops)
    rgb = np.stack([clean[0]] * 3)
    out = render_comparison(
        tmp_path / "fig.png", br, {"clean": ("raw", clean[0]), "grey jdd": ("jdd", rgb)}, crops=crops, size=64
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(RawrclError, match="exists"):
        render_comparison(out, br, {}, crops=crops, size=64)
