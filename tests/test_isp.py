"""Minimal ISP (rawrcl.isp): sRGB transfer, colour matrices, render ∘ unprocess round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage import data

from rawrcl.colour import SRGB_TO_XYZ, XYZ_TO_SRGB, ccm_from_xyz_to_cam
from rawrcl.errors import RawrclError
from rawrcl.isp import (
    REFERENCE_XYZ_TO_CAM,
    linear_to_srgb,
    random_camera,
    render_srgb,
    srgb_to_linear,
    unprocess,
)


def _photo() -> np.ndarray:
    return (data.chelsea()[:64, :80].astype(np.float64) / 255).transpose(2, 0, 1)


def test_srgb_transfer_round_trip_and_known_values():
    x = np.linspace(0, 1, 1001)
    assert np.allclose(srgb_to_linear(linear_to_srgb(x)), x, atol=1e-9)
    assert linear_to_srgb(np.array([0.0, 0.0031308, 1.0])) == pytest.approx([0, 0.0404499, 1], abs=1e-6)
    assert srgb_to_linear(np.array(0.5)) == pytest.approx(0.21404, abs=1e-5)
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    assert torch.allclose(srgb_to_linear(t), torch.from_numpy(srgb_to_linear(t.numpy())))


def test_ccm_maps_white_to_white_and_identity_camera():
    # camera = linear sRGB (ColorMatrix = XYZ → sRGB) gives the identity ccm
    assert np.allclose(ccm_from_xyz_to_cam(XYZ_TO_SRGB), np.eye(3), atol=1e-9)
    for m in REFERENCE_XYZ_TO_CAM:
        ccm = ccm_from_xyz_to_cam(m)
        assert np.allclose(ccm.sum(axis=1), 1.0)  # white-balanced neutral stays neutral
        # camera response to sRGB white, white-balanced, renders to white
        cam_white = m @ SRGB_TO_XYZ @ np.ones(3)
        wb = cam_white[1] / cam_white
        assert np.allclose(ccm @ (wb * cam_white) / cam_white[1], 1.0)
    with pytest.raises(RawrclError):
        ccm_from_xyz_to_cam(np.zeros((3, 3)))
    with pytest.raises(RawrclError):
        ccm_from_xyz_to_cam(np.eye(2))


def test_random_camera_is_seeded_and_in_brooks_ranges():
    cams = [random_camera(np.random.default_rng(s)) for s in range(200)]
    again = random_camera(np.random.default_rng(0))
    assert np.array_equal(again["xyz_to_cam"], cams[0]["xyz_to_cam"]) and np.array_equal(
        again["wb"], cams[0]["wb"]
    )
    wbs = np.array([c["wb"] for c in cams])
    assert wbs[:, 0].min() >= 1.9 and wbs[:, 0].max() <= 2.4 and np.all(wbs[:, 1] == 1)
    assert wbs[:, 2].min() >= 1.5 and wbs[:, 2].max() <= 1.9
    gains = np.array([c["gain"] for c in cams])
    assert 1 / 1.1 <= gains.min() and gains.max() <= 2.0 and abs(np.median(1 / gains) - 0.8) < 0.03
    assert len({c["xyz_to_cam"][0, 0] for c in cams}) == 200


def test_unprocess_render_round_trip_exact_without_clip():
    srgb = _photo()
    lin, meta = unprocess(srgb, np.random.default_rng(3), clip=False)
    back = render_srgb(lin, meta["wb"], meta["ccm"], gain=meta["gain"])
    assert back.shape == srgb.shape
    assert np.abs(back - srgb).max() < 1e-6


def test_unprocess_round_trip_with_clip_and_torch():
    srgb = _photo()
    lin, meta = unprocess(srgb, np.random.default_rng(4))
    assert lin.min() >= 0 and lin.max() <= 1
    # unprocessed RAW is darker in red/blue (inverse white balance) than green
    assert lin[0].mean() < lin[1].mean() and lin[2].mean() < lin[1].mean()
    back = render_srgb(lin, meta["wb"], meta["ccm"], gain=meta["gain"])
    err = np.abs(back - srgb)
    assert np.mean(err < 1 / 255) > 0.98  # only out-of-gamut pixels move
    t = torch.from_numpy(srgb)[None]  # batched torch input
    lin_t, meta_t = unprocess(t, np.random.default_rng(4))
    assert isinstance(lin_t, torch.Tensor) and lin_t.shape == (1, 3, 64, 80)
    assert np.allclose(lin_t[0].numpy(), lin, atol=1e-9)
    back_t = render_srgb(lin_t, meta_t["wb"], meta_t["ccm"], gain=meta_t["gain"])
    assert torch.allclose(back_t[0], torch.from_numpy(back), atol=1e-9)


def test_render_defaults_and_shape_check():
    lin = np.full((3, 2, 2), 0.2)
    assert np.allclose(render_srgb(lin), linear_to_srgb(lin))
    with pytest.raises(RawrclError, match="3, H, W"):
        render_srgb(np.zeros((4, 2, 2)))


@pytest.mark.parametrize("torch_input", [False, True])
def test_clip_highlights_renders_blown_samples_white(torch_input):
    """A sample saturated in all three channels is (1, 1, 1) in camera RGB; the white balance lifts R and B
    above G, and without the clip the colour matrix turns that into magenta (G ≈ 0.90 here)."""
    cam = np.array([[0.65, -0.05, -0.08], [-0.8, 1.55, 0.25], [-0.15, 0.2, 0.7]])
    ccm, wb = ccm_from_xyz_to_cam(cam), (2.0, 1.0, 1.6)
    px = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.7], [0.3, 0.2, 0.25]], dtype=np.float32).T[:, :, None]
    lin = torch.from_numpy(px) if torch_input else px
    plain = np.asarray(render_srgb(lin, wb, ccm))
    clipped = np.asarray(render_srgb(lin, wb, ccm, clip_highlights=True))
    assert plain[1, 0, 0] < 0.95  # magenta without the clip
    np.testing.assert_allclose(clipped[:, 0, 0], 1.0, atol=1e-6)  # blown: white
    assert np.ptp(clipped[:, 1, 0]) < np.ptp(plain[:, 1, 0])  # two channels blown: nearer white
    np.testing.assert_allclose(clipped[:, 2, 0], plain[:, 2, 0])  # below the clip: unchanged
    half = np.asarray(render_srgb(lin, wb, ccm, gain=0.5, clip_highlights=True))
    assert np.ptp(half[:, 0, 0]) < 1e-6  # the clip follows the gain: blown stays neutral


def test_gray_world_wb_neutralises_a_cast_and_detects_missing_wb():
    from rawrcl.isp import gray_world_wb, has_white_balance

    rng = np.random.default_rng(0)
    scene = rng.uniform(0.05, 0.6, size=(1, 32, 32)).repeat(3, axis=0)  # neutral scene
    cast = scene * np.array([0.5, 1.0, 0.7])[:, None, None]  # camera response without WB
    wb = gray_world_wb(cast)
    np.testing.assert_allclose(wb, (2.0, 1.0, 1 / 0.7), rtol=1e-6)
    assert not has_white_balance(None) and not has_white_balance((1.0, 1.0, 1.0))
    assert has_white_balance((2.1, 1.0, 1.6))
