"""The ICC profiles of rawrcl's image outputs (rawrcl.io.icc), read by littlecms: the ``--render linear``
profile maps the linear camera RGB to sRGB as rawrcl's own rendering does; the ``--render srgb`` profile is
sRGB; both embedded in TIFFs (with the camera's Make and Model) and in PNGs (iCCP chunk)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile

from rawrcl.colour import ccm_from_xyz_to_cam
from rawrcl.errors import RawrclError
from rawrcl.io.icc import camera_rgb_to_d50, linear_rgb_profile
from rawrcl.isp import render_srgb, srgb_profile

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


def test_srgb_profile_is_srgb():
    image_cms = pytest.importorskip("PIL.ImageCms")
    from PIL import Image

    profile = image_cms.ImageCmsProfile(io.BytesIO(srgb_profile()))
    to_srgb = image_cms.buildTransform(
        profile, image_cms.createProfile("sRGB"), "RGB", "RGB", image_cms.Intent.RELATIVE_COLORIMETRIC
    )
    codes = np.random.default_rng(1).integers(0, 256, (1, 512, 3)).astype(np.uint8)
    got = np.asarray(image_cms.applyTransform(Image.fromarray(codes, "RGB"), to_srgb)).astype(int)
    assert np.abs(got - codes).max() <= 1
    # and not the identity of any profile: the linear one shows the same codes far brighter
    lin = image_cms.ImageCmsProfile(io.BytesIO(linear_rgb_profile(camera_rgb_to_d50(np.eye(3), None), "l")))
    lin_to_srgb = image_cms.buildTransform(
        lin, image_cms.createProfile("sRGB"), "RGB", "RGB", image_cms.Intent.RELATIVE_COLORIMETRIC
    )
    grey = np.full((1, 1, 3), 50, np.uint8)
    assert np.asarray(image_cms.applyTransform(Image.fromarray(grey, "RGB"), lin_to_srgb))[0, 0, 1] > 100


def test_outputs_carry_their_profile(tmp_path):
    from rawrcl.infer.files import _output_profile
    from rawrcl.infer.writers import write_image

    rgb = np.full((3, 8, 8), 0.2, np.float32)
    raw = SimpleNamespace(ccm=ccm_from_xyz_to_cam(CAM), wb=WB, make="Acme", model="X1")
    icc = _output_profile(raw, rgb, "linear")
    assert icc is not None and icc[36:40] == b"acsp" and int.from_bytes(icc[:4], "big") == len(icc)
    assert b"rawrcl linear RGB, Acme X1" in icc
    assert _output_profile(raw, rgb, "srgb") == srgb_profile()
    assert _output_profile(SimpleNamespace(ccm=None, wb=WB, make="", model=""), rgb, "linear") is None
    out = write_image(tmp_path / "o.tiff", rgb, icc=icc, camera=("Acme", ""))
    tags = tifffile.TiffFile(out).pages[0].tags
    assert bytes(tags["InterColorProfile"].value) == icc
    assert tags["Make"].value == "Acme" and "Model" not in tags and tags["Software"].value == "rawrcl"


@pytest.mark.parametrize("bits", [8, 16])
def test_png_carries_the_profile(tmp_path, bits):
    import cv2
    from PIL import Image

    from rawrcl.infer.writers import write_image

    rgb = np.random.default_rng(2).random((3, 9, 7)).astype(np.float32)
    plain = write_image(tmp_path / "plain.png", rgb, bits=bits)
    tagged = write_image(tmp_path / "tagged.png", rgb, bits=bits, icc=srgb_profile())
    with Image.open(tagged) as im:
        assert im.info["icc_profile"] == srgb_profile()  # Pillow checks the chunk's CRC when it reads it
    with Image.open(plain) as im:
        assert "icc_profile" not in im.info
    a = cv2.imread(str(plain), cv2.IMREAD_UNCHANGED)
    b = cv2.imread(str(tagged), cv2.IMREAD_UNCHANGED)
    assert a is not None and b is not None and a.dtype == (np.uint8 if bits == 8 else np.uint16)
    assert np.array_equal(a, b)  # the pixels are untouched
