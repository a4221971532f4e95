"""DNG writer (rawrcl.io.dng): LibRaw reads it back bit-exactly, with the right metadata, for all phases."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import rawpy
import tifffile

from rawrcl.cfa import PATTERNS
from rawrcl.colour import ccm_from_xyz_to_cam
from rawrcl.errors import RawrclError
from rawrcl.io.dng import write_dng

XYZ_TO_CAM = np.array([[0.7, -0.1, -0.05], [-0.4, 1.2, 0.2], [-0.05, 0.15, 0.6]])


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("shape", [(64, 96), (33, 47)])
def test_rawpy_reads_back_bit_exactly(tmp_path, pattern, shape):
    rng = np.random.default_rng([PATTERNS.index(pattern), shape[0]])
    data = rng.integers(0, 16384, size=shape).astype(np.uint16)
    black = (510, 512, 514, 516)
    path = write_dng(
        tmp_path / "x.dng",
        data,
        pattern,
        black,
        16383,
        wb=(2.0, 1.0, 1.6),
        color_matrix=XYZ_TO_CAM,
        noise_profile=(0.01, 1e-4),
    )
    with rawpy.imread(str(path)) as raw:
        assert raw.raw_type == rawpy.RawType.Flat
        assert np.array_equal(raw.raw_image_visible, data)
        desc = raw.color_desc.decode()
        colours = raw.raw_colors_visible
        assert "".join(desc[c] for c in colours[:2, :2].ravel()) == pattern
        per_pos = np.asarray(raw.black_level_per_channel)[colours[:2, :2]].ravel()
        assert per_pos.tolist() == list(black)
        assert raw.white_level == 16383
        wb = raw.camera_whitebalance
        assert wb[desc.index("R")] / wb[desc.index("G")] == pytest.approx(2.0, rel=1e-5)
        assert wb[desc.index("B")] / wb[desc.index("G")] == pytest.approx(1.6, rel=1e-5)
        # LibRaw derives the same camera→sRGB matrix from ColorMatrix1 as rawrcl.isp does
        assert np.allclose(raw.color_matrix[:, :3], ccm_from_xyz_to_cam(XYZ_TO_CAM), atol=1e-5)


def test_tags_written(tmp_path):
    data = np.full((32, 32), 1000, np.uint16)
    path = write_dng(
        tmp_path / "t.dng",
        data,
        "GBRG",
        512,
        4095,
        iso=400,
        exposure_time=0.02,
        noise_profile=[(1e-3, 1e-6), (2e-3, 2e-6), (3e-3, 3e-6)],
        make="Acme",
        model="Cam 1",
    )
    with tifffile.TiffFile(path) as tif:
        tags = {t.code: t.value for t in tif.pages[0].tags.values()}
    assert int(tags[262]) == 32803  # PhotometricInterpretation CFA
    assert tuple(tags[33421]) == (2, 2)
    assert bytes(tags[33422]) == bytes([1, 2, 0, 1])  # G B / R G
    assert tuple(tags[50714]) == (512, 512, 512, 512) and tags[50717] == 4095
    assert tags[34855] == 400 and tags[33434] == (1, 50)
    assert tags[51041] == (1e-3, 1e-6, 2e-3, 2e-6, 3e-3, 3e-6)
    assert bytes(tags[50706]) == bytes([1, 4, 0, 0])
    assert (tags[271], tags[272], tags[50708]) == ("Acme", "Cam 1", "Acme Cam 1")


def test_fractional_black_levels(tmp_path):
    path = write_dng(
        tmp_path / "f.dng", np.zeros((24, 24), np.uint16), "RGGB", [512.5, 512.25, 511.75, 512], 4095
    )
    with tifffile.TiffFile(path) as tif:
        bl = tif.pages[0].tags[50714].value
    assert [bl[i] / bl[i + 1] for i in range(0, 8, 2)] == [512.5, 512.25, 511.75, 512.0]


def test_no_overwrite_without_permission_and_atomic(tmp_path):
    path = tmp_path / "a.dng"
    write_dng(path, np.zeros((24, 24), np.uint16), "RGGB", 0, 1023)
    before = path.read_bytes()
    with pytest.raises(RawrclError, match="a.dng: already exists"):
        write_dng(path, np.ones((24, 24), np.uint16), "RGGB", 0, 1023)
    assert path.read_bytes() == before
    write_dng(path, np.ones((24, 24), np.uint16), "RGGB", 0, 1023, overwrite=True)
    assert path.read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.dng"]  # no temp file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_bad_arguments(tmp_path):
    img = np.zeros((24, 24), np.uint16)
    with pytest.raises(RawrclError, match="pattern"):
        write_dng(tmp_path / "a.dng", img, "RGBX", 0, 1023)
    with pytest.raises(RawrclError, match="22"):
        write_dng(tmp_path / "a.dng", np.zeros((10, 10), np.uint16), "RGGB", 0, 1023)
    with pytest.raises(RawrclError, match="black"):
        write_dng(tmp_path / "a.dng", img, "RGGB", 2000, 1023)
    with pytest.raises(RawrclError, match="uint16"):
        write_dng(tmp_path / "a.dng", img.astype(np.float32), "RGGB", 0, 1023)
    with pytest.raises(RawrclError, match="wb"):
        write_dng(tmp_path / "a.dng", img, "RGGB", 0, 1023, wb=(1, 0, 1))
    with pytest.raises(RawrclError, match="noise_profile"):
        write_dng(tmp_path / "a.dng", img, "RGGB", 0, 1023, noise_profile=(-1, 0))
    assert not (tmp_path / "a.dng").exists()


def test_denoised_dng_keeps_the_source_rendering_tags(tmp_path):
    """A raw developer renders rawrcl's output as it renders the source: colour calibration (both matrices,
    forward matrices, illuminants), BaselineExposure and the raw IFD's opcode lists (a phone's lens-shading
    GainMap) are copied unchanged — they were dropped — and NoiseReductionApplied says the noise is gone."""
    from rawrcl.infer.writers import write_denoised_dng
    from rawrcl.io.raw import read_raw
    from tests._fakes import bare_cfa_dng

    cm_a = (11000, 10000, -3000, 10000, -1000, 10000, -4000, 10000, 12000, 10000, 2000, 10000) + (
        -500,
        10000,
        1500,
        10000,
        6000,
        10000,
    )
    cm_d65 = (8000, 10000, -2000, 10000, -500, 10000, -3500, 10000, 11500, 10000, 2500, 10000) + (
        -800,
        10000,
        2000,
        10000,
        7000,
        10000,
    )
    fm = (6000, 10000, 3000, 10000, 1000, 10000, 2500, 10000, 7000, 10000, 500, 10000) + (
        0,
        10000,
        1000,
        10000,
        7500,
        10000,
    )
    opcodes = (0).to_bytes(4, "big")  # an empty, valid OpcodeList (count 0)
    copied = {
        50721: (10, 9, cm_a),
        50722: (10, 9, cm_d65),
        50778: (3, 1, 17),  # StdA
        50779: (3, 1, 21),  # D65
        50964: (10, 9, fm),
        50965: (10, 9, fm),
        50730: (10, 1, (-5, 10)),  # BaselineExposure −0.5 EV
        51009: (7, len(opcodes), opcodes),
    }
    data = np.random.default_rng(0).integers(200, 4000, size=(64, 96)).astype(np.uint16)
    src = bare_cfa_dng(
        tmp_path / "src.dng",
        data,
        (50714, "H", 1, 128, True),
        (50728, "2I", 3, (1, 2, 1, 1, 2, 3), True),
        *((code, dtype, count, value, True) for code, (dtype, count, value) in copied.items()),
    )
    raw = read_raw(src)
    out = write_denoised_dng(tmp_path / "out.dng", raw, raw.cfa)
    moved = src.rename(tmp_path / "moved.dng")  # gone by the time of writing: the tags were read with it
    again = write_denoised_dng(tmp_path / "again.dng", raw, raw.cfa)
    src = moved
    for written in (out, again):
        with tifffile.TiffFile(written) as tif:
            tags = tif.pages[0].tags
            assert set(copied) <= set(tags.keys()), written
    with tifffile.TiffFile(out) as tif:
        tags = tif.pages[0].tags
        for code, (_, count, value) in copied.items():
            assert code in tags and tags[code].count == count, code
            got = tags[code].value
            assert (got == value) if isinstance(value, bytes | int) else tuple(got) == value, (code, got)
        assert tags[50935].value == (1, 1)  # NoiseReductionApplied 1
    with rawpy.imread(str(src)) as a, rawpy.imread(str(out)) as b:
        ra = a.postprocess(no_auto_bright=True, output_bps=16, gamma=(1, 1), use_camera_wb=True)
        rb = b.postprocess(no_auto_bright=True, output_bps=16, gamma=(1, 1), use_camera_wb=True)
    assert np.abs(ra.astype(float) - rb.astype(float)).max() <= 2  # the same render (requantisation only)
    # callers that need only levels and noise metadata (calibrate, the noise resolver) skip the opcode lists
    from rawrcl.io.tags import read_dng_tags

    assert {c for c, *_ in read_dng_tags(src)["rendering_tags"]} >= {51009, 50721}
    lean = read_dng_tags(src, rendering=False)
    assert "rendering_tags" not in lean and lean["black_level"] == read_dng_tags(src)["black_level"]


@pytest.mark.parametrize("top,left,kept", [(0, 0, {51008, 51009}), (2, 4, {51009}), (3, 4, set())])
def test_opcode_lists_are_copied_only_onto_their_own_grid(tmp_path, top, left, kept):
    """OpcodeList1 is positioned on the whole stored image, OpcodeList2 on the ActiveArea: the output (the
    active area as LibRaw reads it, an odd offset rounded up) keeps only the lists whose coordinates fit."""
    from rawrcl.infer.writers import write_denoised_dng
    from rawrcl.io.raw import read_raw
    from tests._fakes import bare_cfa_dng

    empty = (0).to_bytes(4, "big")
    data = np.random.default_rng(0).integers(200, 4000, size=(64 + top, 96 + left)).astype(np.uint16)
    src = bare_cfa_dng(
        tmp_path / "src.dng",
        data,
        (50829, "I", 4, (top, left, top + 64, left + 96), True),
        (51008, 7, 4, empty, True),
        (51009, 7, 4, empty, True),
    )
    raw = read_raw(src)
    out = write_denoised_dng(tmp_path / "out.dng", raw, raw.cfa)
    with tifffile.TiffFile(out) as tif:
        assert {c for c in (51008, 51009) if c in tif.pages[0].tags} == kept
