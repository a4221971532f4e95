"""rawrcl.eval.burst: registration, reference, measured NLF, ceiling and refusals on synthetic bursts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rawrcl import burst_align as A
from rawrcl.burst_align import PLANE_OFFSETS
from rawrcl.errors import RawrclError
from rawrcl.eval import burst as B
from rawrcl.eval import burst_score as S

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
    assert br.resampling_share < B.RESAMPLING_WARN / 4  # smooth content: no warning


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


def _true_psnr(br, out, clean_target):
    m = br.metric_mask()
    return 10 * math.log10(1 / np.mean((np.clip(out[m], 0, 1) - clean_target[m]) ** 2))


def test_moved_object_is_left_out_of_the_reference_where_it_moved():
    """An object moves in two of four reference frames: those frames are left out of the reference in its
    blocks (not the whole burst refused, as before stop 100); the reference there is unbiased — its error
    against the truth matches the noise it is said to carry — and the noisy target's true-error PSNR is
    read back. A plain mean of all frames there is far off (what the check prevents)."""
    gs, clean, noisy = _burst(seed=2, n=5)
    rng = np.random.default_rng(5)
    moved = [x.copy() for x in noisy]
    for k in (2, 3):  # an object (a 96×96 patch) moves by 8 px in frames 2 and 3
        patch = clean[k][60:156, 60:156]
        c = np.clip(patch, 0, None)
        moved[k][60:156, 68:164] = patch + rng.normal(size=patch.shape) * np.sqrt(4e-3 * c + 1e-4)
    br = B.build_reference(B.burst_from_arrays(moved, "RGGB"))
    assert br.frames_used == 4 and br.dropped == []
    assert br.moved_blocks[1] > 0.02 and br.moved_blocks[2] > 0.02  # frames 2 and 3 (before: refused)
    assert br.moved_blocks[0] == 0.0 and br.moved_blocks[3] == 0.0
    assert 0.05 < br.motion_excluded < 0.5 and br.motion_masked == 0.0  # two frames left there: enough
    region = np.zeros_like(br.mask)
    region[64:152, 72:160] = True
    m = br.metric_mask() & region
    assert m.sum() > 4000  # the object's pixels still count
    err = float(np.mean((br.reference[m] - clean[0][m]) ** 2))
    assert abs(err / float(br.ref_noise_var()[m].mean()) - 1) < 0.25
    plain = np.mean([B.burst_from_arrays(moved, "RGGB").cfa[k] for k in range(1, 5)], axis=0)
    assert float(np.mean((plain[m] - clean[0][m]) ** 2)) > 3 * err
    assert abs(S.score_raw(br, noisy[0])["psnr_true"] - _true_psnr(br, noisy[0], clean[0])) < 0.15


def test_motion_over_a_quarter_of_a_frame_or_in_most_frames_is_found():
    """A smooth object shifted by 8 px over a quarter of one frame: its own resampling slope would absorb the
    difference (nothing was flagged before stop 100; the slope is now capped by the frames' median), and the
    reference there is left unbiased. The same object moved in three of four frames: flagged in each, read
    on the differences' Gaussian core (with the trimmed variance nothing was, and the target's true-error
    PSNR was read 2.7 dB too low)."""
    _, clean, noisy = _burst(seed=3, n=5)
    one = [x.copy() for x in noisy]
    one[3][40:168, 48:176] = noisy[3][40:168, 40:168]
    br = B.build_reference(B.burst_from_arrays(one, "RGGB"))
    assert br.moved_blocks[2] > 0.03 and br.moved_blocks[0] == br.moved_blocks[1] == br.moved_blocks[3] == 0
    m = br.metric_mask()
    m[:40] = m[168:] = False
    m[:, :48] = m[:, 176:] = False
    err = float(np.mean((br.reference[m] - clean[0][m]) ** 2))
    assert err / float(br.ref_noise_var()[m].mean()) < 1.5  # 2.8 before
    most = [x.copy() for x in noisy]
    for k in (2, 3, 4):
        most[k][40:136, 48:144] = noisy[k][40:136, 40:136]
    br = B.build_reference(B.burst_from_arrays(most, "RGGB"))
    assert all(f > 0.02 for f in br.moved_blocks[1:]) and br.motion_masked > 0.1
    assert abs(S.score_raw(br, noisy[0])["psnr_true"] - _true_psnr(br, noisy[0], clean[0])) < 1.0


def test_target_side_motion_is_masked_and_wide_motion_refused():
    """Something else stands in the target: every frame disagrees there, so those pixels are masked (fewer
    than ``frames_needed`` frames) and the rest is scored — refused when that is too much of the image;
    frames that moved in more than ``drop_moved`` of their blocks are left out whole, and with fewer than
    two frames left the burst is refused."""
    gs, clean, noisy = _burst(seed=3, n=5)
    tgt = noisy[0].copy()
    tgt[96:160, 96:160] = noisy[0][SIZE - 64 :, SIZE - 64 :]  # something else stands there in the target
    br = B.build_reference(B.burst_from_arrays([tgt, *noisy[1:]], "RGGB"))
    assert all(f > 0.02 for f in br.moved_blocks) and br.dropped == []
    assert 0.05 < br.motion_masked < 0.4  # its blocks, grown by one block each way
    assert not br.mask[96:160, 96:160].any()  # the object's pixels are out of the metrics
    assert abs(S.score_raw(br, tgt)["psnr_true"] - _true_psnr(br, tgt, clean[0])) < 0.25
    with pytest.raises(RawrclError, match="moved in 2[0-9] % of the usable pixels"):
        B.build_reference(B.burst_from_arrays([tgt, *noisy[1:]], "RGGB"), max_motion_masked=0.1)
    # other content over a corner of frames: each moved in 14 % of its blocks — left out whole above
    # drop_moved; with fewer than two frames left the burst is refused
    wild = [x.copy() for x in noisy]
    for k in (2, 3, 4):
        wild[k][:96, :96] = noisy[k][SIZE - 96 :, SIZE - 96 :]
    br = B.build_reference(B.burst_from_arrays(wild, "RGGB"))
    assert br.dropped == [] and all(0.1 < f < 0.25 for f in br.moved_blocks[1:])
    br = B.build_reference(B.burst_from_arrays([*noisy[:3], wild[3], noisy[4]], "RGGB"), drop_moved=0.1)
    assert [d["path"] for d in br.dropped] == ["frame03"] and br.frames_used == 3
    assert br.summary()["dropped"][0]["reason"].startswith("moved in 1")
    with pytest.raises(RawrclError, match="moved against the target.*1 frame"):
        B.build_reference(B.burst_from_arrays(wild, "RGGB"), drop_moved=0.1)


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
    # the frames' interpolation error is several times the noise here: the NLF reads λshot 5-6x the true 2e-4
    # (it absorbs that error), and the report warns
    assert br.resampling_share > 2 * B.RESAMPLING_WARN and br.nlf.pooled[0] > 4e-4
    moved = [x.copy() for x in noisy]
    for k in (2, 3):  # a 96×96 object moves by 8 px
        moved[k][60:156, 68:164] = noisy[k][60:156, 60:156]
    br = B.build_reference(B.burst_from_arrays(moved, "RGGB"))
    assert [f > 0.02 for f in br.moved_blocks] == [False, True, True, False, False]


def test_clipped_variance_reads_the_gaussian_core():
    """The motion check's noise: a quarter of the samples far out raise the core variance far less than the
    trimmed variance of the NLF; on coarsely quantised noise it does not lock onto the grid."""
    from rawrcl.eval.burst_nlf import _robust_var, clipped_var

    rng = np.random.default_rng(0)
    r = rng.normal(size=20000)
    assert abs(clipped_var(r) - 1) < 0.03
    out = r.copy()
    out[:5000] = rng.normal(size=5000) * 5
    assert clipped_var(out) < 1.7 and _robust_var(out) > 3
    grid = np.round(r * 1.2) / 1.2
    assert abs(clipped_var(grid) / grid.var() - 1) < 0.03


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


def test_unrelated_frame_is_left_out_and_a_majority_refused():
    """A frame that does not register is left out of the reference (named, with why); when fewer than
    ``frames_needed`` of the others register the burst is refused with the first failure's message."""
    _, _, noisy = _burst(seed=4, n=4)
    rng = np.random.default_rng(0)
    other = rng.random((SIZE, SIZE)) * 0.5
    br = B.build_reference(B.burst_from_arrays([*noisy, other], "RGGB"))
    assert [d["path"] for d in br.dropped] == ["frame04"] and br.frames_used == 3
    assert len(br.registrations) == 3 and "frame04" not in br.summary()["registrations"].__repr__()
    others = [rng.random((SIZE, SIZE)) * 0.5 for _ in range(2)]
    with pytest.raises(RawrclError, match="frame02.*2 of 3 frames did not register"):
        B.build_reference(B.burst_from_arrays([*noisy[:2], *others], "RGGB"))


def test_copies_are_left_out_and_a_burst_of_copies_refused():
    """A frame with the target's (or an earlier frame's) exact values carries no independent noise: left out,
    named; a folder of copies is refused (it read a 200 dB ceiling before stop 100)."""
    _, _, noisy = _burst(seed=4, n=4)
    br = B.build_reference(B.burst_from_arrays([*noisy, noisy[2]], "RGGB"))
    assert br.dropped == [{"path": "frame04", "reason": "a copy of frame02 (the same values)"}]
    with pytest.raises(RawrclError, match="frame01: a copy of frame00.*3 of 3 frames did not register"):
        B.build_reference(B.burst_from_arrays([noisy[0]] * 4, "RGGB"))


def test_a_frame_at_another_exposure_is_left_out_as_such():
    """A frame at 0.6× the exposure (a bracketed folder) is left out whole and said to be another exposure
    (it read as "moved in 72 % of its blocks" before)."""
    _, _, noisy = _burst(seed=4, n=5)
    frames = [*noisy[:2], noisy[2] * 0.6, *noisy[3:]]
    br = B.build_reference(B.burst_from_arrays(frames, "RGGB"))
    assert [d["path"] for d in br.dropped] == ["frame02"] and br.frames_used == 3
    assert br.dropped[0]["reason"].startswith("its exposure differs from the target's (×0.6")


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
    with pytest.raises(RawrclError, match="f0.dng: not a folder"):
        B.load_burst(tmp_path / "f0.dng")
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
