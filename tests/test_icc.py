"""The ICC profile of ``--render linear`` outputs (rawrcl.io.icc): read by littlecms, it maps the linear
camera RGB to sRGB as rawrcl's own rendering does; embedded in the TIFF with the camera's Make and Model."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile

from rawrcl.colour import ccm_from_xyz_to_cam
from rawrcl.errors import RawrclError
from rawrcl.io.icc import camera_rgb_to_d50, linear_rgb_profile
from rawrcl.isp import render_srgb

CAM = np.array([[0.65, -0.05, -0.08], [-0.8, 1.55, 0.25], [-0.15, 0.2, 0.7]])  # XYZ → camera (a DNG matrix)
WB = (2.0, 1.0, 1.6)


def test_profile_maps_camera_rgb_as_rawrcl_renders_it():
    image_cms = pytest.importorskip("PIL.ImageCms")
    from PIL import Image

    ccm = ccm_from_xyz_to_cam(CAM)
    profile = image_cms.ImageCmsProfile(io.BytesIO(linear_rgb_profile(camera_rgb_to_d50(ccm, WB), "test")))
    assert image_cms.getProfileDescription(profile).strip() == "test"
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 120, (1, 64, 3)).astype(np.uint8)  # linear camera RGB (not white-balanced)
    to_srgb = image_cms.buildTransform(
        profile, image_cms.createProfile("sRGB"), "RGB", "RGB", image_cms.Intent.RELATIVE_COLORIMETRIC
    )
    got = np.asarray(image_cms.applyTransform(Image.fromarray(codes, "RGB"), to_srgb)) / 255.0
    ref = np.clip(render_srgb(codes[0].T[:, None, :] / 255.0, WB, ccm), 0, 1)[:, 0, :].T
    assert np.abs(got[0] - ref).max() < 0.015  # 8-bit transforms: a code or two


def test_profile_refuses_bad_matrices():
    with pytest.raises(RawrclError):
        linear_rgb_profile(np.full((3, 3), np.nan), "x")
    with pytest.raises(RawrclError):
        camera_rgb_to_d50(np.eye(3), (1.0, np.inf, 1.0))


def test_linear_tiff_carries_the_profile_and_srgb_none(tmp_path):
    from rawrcl.infer.files import _linear_profile
    from rawrcl.infer.writers import write_image

    rgb = np.full((3, 8, 8), 0.2, np.float32)
    raw = SimpleNamespace(ccm=ccm_from_xyz_to_cam(CAM), wb=WB, make="Acme", model="X1")
    icc = _linear_profile(raw, rgb, "linear")
    assert icc is not None and icc[36:40] == b"acsp" and int.from_bytes(icc[:4], "big") == len(icc)
    assert b"rawrcl linear RGB, Acme X1" in icc
    assert _linear_profile(raw, rgb, "srgb") is None
    assert _linear_profile(SimpleNamespace(ccm=None, wb=WB, make="", model=""), rgb, "linear") is None
    out = write_image(tmp_path / "o.tiff", rgb, icc=icc, camera=("Acme", ""))
    tags = tifffile.TiffFile(out).pages[0].tags
    assert bytes(tags["InterColorProfile"].value) == icc
    assert tags["Make"].value == "Acme" and "Model" not in tags and tags["Software"].value == "rawrcl"
