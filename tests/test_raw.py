"""RAW reading (rawrcl.io.raw): Bayer phases, normalisation, metadata, DNG tags and refusals."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import rawpy
import tifffile

from rawrcl.cfa import PATTERNS
from rawrcl.errors import RawrclError
from rawrcl.io.dng import write_dng
from rawrcl.io.raw import raw_summary, read_raw
from rawrcl.io.tags import read_dng_tags, read_noise_profile

XYZ_TO_CAM = np.array([[0.65, -0.05, -0.08], [-0.8, 1.55, 0.25], [-0.15, 0.2, 0.7]])


def _dng(path, pattern="RGGB", shape=(30, 34), black=(500, 510, 520, 530), white=4095, seed=0, **kw):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, white + 1, size=shape).astype(np.uint16)
    write_dng(path, data, pattern, black, white, **kw)
    return data


def _raw_tiff(path, data, photometric, extratags=()):
    """A DNG-looking TIFF with arbitrary photometric / CFA tags (for refusal tests)."""
    tags = [(50706, "B", 4, (1, 4, 0, 0), True), (50717, "I", 1, 4095, True), *extratags]
    tifffile.imwrite(path, data, photometric=photometric, extratags=tags, metadata=None)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_read_raw_normalises_per_cfa_position(tmp_path, pattern):
    path = tmp_path / f"{pattern}.dng"
    black = (500, 510, 520, 530)
    data = _dng(
        path,
        pattern,
        shape=(25, 29),
        black=black,
        wb=(2.0, 1.0, 1.5),
        color_matrix=XYZ_TO_CAM,
        iso=800,
        exposure_time=1 / 125,
        noise_profile=(2e-3, 1e-5),
    )
    img = read_raw(path)
    assert img.pattern == pattern
    assert img.cfa.dtype == np.float32 and img.cfa.shape == (25, 29)
    assert img.black_level == tuple(float(b) for b in black)
    assert img.white_level == 4095
    tile = np.array(black, dtype=np.float64).reshape(2, 2)
    full = np.tile(tile, (13, 15))[:25, :29]
    expected = np.clip((data - full) / (4095 - full), 0, 1)
    assert np.allclose(img.cfa, expected, atol=1e-6)
    raw = read_raw(path, clip=False)
    assert raw.cfa.min() < 0 and np.allclose(raw.cfa, (data - full) / (4095 - full), atol=1e-6)
    assert img.wb == pytest.approx((2.0, 1.0, 1.5), rel=1e-6)
    assert np.allclose(img.xyz_to_cam, XYZ_TO_CAM, atol=1e-6)
    assert img.ccm is not None and img.ccm.shape == (3, 3)
    assert img.iso == 800 and img.exposure_time == pytest.approx(1 / 125, rel=1e-6)
    assert img.noise_profile == [(2e-3, 1e-5)]
    assert (img.make, img.model) == ("rawrcl", "simulated")
    s = raw_summary(img)
    assert s["pattern"] == pattern and s["width"] == 29 and s["height"] == 25
    assert s["noise_profile"] == [[2e-3, 1e-5]]


def test_per_plane_noise_profile_and_tags(tmp_path):
    path = tmp_path / "p.dng"
    prof = [(1e-3, 1e-6), (2e-3, 2e-6), (3e-3, 3e-6)]
    _dng(path, noise_profile=prof)
    assert read_noise_profile(path) == prof
    tags = read_dng_tags(path)
    assert tags["is_dng"] and tags["raw_ifd"] == "IFD0" and tags["photometric"] == 32803
    assert tags["cfa_repeat_pattern_dim"] == [2, 2] and tags["black_level"] == [500, 510, 520, 530]


def test_dc50_is_grbg(dc50):
    img = read_raw(dc50)
    assert img.pattern == "GRBG"
    assert (img.height, img.width) == (512, 768)
    assert img.black_level == (0.0, 0.0, 0.0, 0.0) and img.white_level == 16383
    assert "Kodak" in img.make and "DC50" in img.model
    assert img.noise_profile is None
    assert 0 <= img.cfa.min() and img.cfa.max() <= 1
    with rawpy.imread(str(dc50)) as r:
        ref = r.raw_image_visible.astype(np.float32) / 16383
    assert np.allclose(img.cfa, ref)


def test_iphone_linear_dng_refused_but_noise_profile_readable(iphone_dng):
    with pytest.raises(RawrclError, match=r"iphone12pro_metadata_only\.dng: linear .*not a Bayer"):
        read_raw(iphone_dng)
    assert read_noise_profile(iphone_dng) == [(3e-05, 3e-08)]
    tags = read_dng_tags(iphone_dng)
    assert tags["iso"] == 32 and tags["raw_ifd"] == "SubIFD0" and tags["photometric"] == 34892
    assert tags["make"] == "Apple" and np.array(tags["color_matrix_2"]).shape == (3, 3)


def test_missing_text_and_truncated_files_are_refused(tmp_path):
    with pytest.raises(RawrclError, match="nope.dng: no such file"):
        read_raw(tmp_path / "nope.dng")
    text = tmp_path / "notes.dng"
    text.write_text("this is not a raw file\n" * 20)
    with pytest.raises(RawrclError, match=r"notes\.dng: .*(unreadable|not a RAW)"):
        read_raw(text)
    assert read_noise_profile(text) is None
    good = tmp_path / "good.dng"
    _dng(good, shape=(64, 96))
    cut = tmp_path / "cut.dng"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
    with pytest.raises(RawrclError, match=r"cut\.dng: unreadable or truncated"):
        read_raw(cut)
    with pytest.raises(RawrclError, match="no such file"):
        read_noise_profile(tmp_path / "nope.dng")


def test_truncated_dc50_is_refused(dc50, tmp_path):
    cut = tmp_path / "cut.kdc"
    cut.write_bytes(dc50.read_bytes()[:60000])
    with pytest.raises(RawrclError, match=r"cut\.kdc: unreadable or truncated"):
        read_raw(cut)
    shutil.copy(dc50, tmp_path / "copy.kdc")
    assert read_raw(tmp_path / "copy.kdc").pattern == "GRBG"


def test_non_bayer_dngs_are_refused(tmp_path):
    # X-Trans-like 6×6 CFA
    xtrans = tmp_path / "xtrans.dng"
    cfa6 = (1, 1, 0, 1, 1, 2, 1, 1, 2, 1, 1, 0, 2, 0, 1, 0, 2, 1) * 2
    _raw_tiff(
        xtrans,
        np.zeros((36, 36), np.uint16),
        32803,
        [(33421, "H", 2, (6, 6), True), (33422, "B", 36, cfa6, True)],
    )
    with pytest.raises(RawrclError, match=r"xtrans\.dng: CFA repeat pattern 6×6"):
        read_raw(xtrans)
    # linear (demosaiced) RGB DNG
    linear = tmp_path / "linear.dng"
    _raw_tiff(linear, np.zeros((32, 32, 3), np.uint16), 34892)
    with pytest.raises(RawrclError, match=r"linear\.dng: linear \(demosaiced\) 3-channel"):
        read_raw(linear)
    # monochrome DNGs (LinearRaw with one sample, or plain grey)
    mono = tmp_path / "mono.dng"
    _raw_tiff(mono, np.zeros((32, 32), np.uint16), "minisblack")
    # tifffile will not write a 1-sample LinearRaw, so patch PhotometricInterpretation 1 → 34892
    entry = (262).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little")
    content = mono.read_bytes()
    at = content.index(entry + (1).to_bytes(2, "little"))
    mono.write_bytes(content[: at + 8] + (34892).to_bytes(2, "little") + content[at + 10 :])
    assert read_dng_tags(mono)["photometric"] == 34892
    with pytest.raises(RawrclError, match=r"mono\.dng: .*monochrome"):
        read_raw(mono)
    grey = tmp_path / "grey.dng"
    _raw_tiff(grey, np.zeros((32, 32), np.uint16), "minisblack")
    with pytest.raises(RawrclError, match=r"grey\.dng: monochrome DNG"):
        read_raw(grey)
