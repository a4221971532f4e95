"""Real-camera DNG variants read through LibRaw (rawrcl.io.raw.read_raw), on small files made here: a
LinearizationTable, WhiteLevel below the container's maximum, packed 10/12/14-bit samples, big-endian files,
tiles that do not divide the image, the four Bayer phases with odd ActiveArea offsets, and DefaultCrop."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tifffile

from rawrcl.errors import RawrclError
from rawrcl.io.raw import read_raw
from tests._fakes import bare_cfa_dng

_CODE = {"R": 0, "G": 1, "B": 2}
#: 12-bit stored values → 16-bit linear ones (a square law, as cameras store a compressed range)
SQUARE = np.round((np.arange(4096) / 4095.0) ** 2 * 65535).astype(np.uint16)


def _table(table: np.ndarray, dtype: str = "H") -> tuple:
    return (50712, dtype, table.size, tuple(int(v) for v in table), True)


def _random(shape, top: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, top + 1, shape).astype(np.uint16)


def _packed_big_endian(path, data, bits, *tags):
    """A big-endian DNG of ``bits``-bit packed samples. Packed samples are one MSB-first bit stream whatever
    the byte order (TIFF 6; what LibRaw and tifffile's reader decode), but tifffile (2026.3) byte-swaps the
    values before packing them into a big-endian file: it is given them swapped, to write them right."""
    path = bare_cfa_dng(path, data.byteswap(), *tags, bitspersample=bits, byteorder=">")
    np.testing.assert_array_equal(tifffile.imread(path), data)
    return path


@pytest.mark.parametrize("layout", ["16-bit", "packed 12-bit", "big-endian", "lossless JPEG"])
def test_linearization_table_is_applied_and_white_refers_to_its_output(tmp_path, layout):
    """Stored values index the LinearizationTable (12-bit → 16-bit square law); BlackLevel and WhiteLevel
    refer to the table's output: its maximum normalises to 1."""
    stored = _random((64, 80), 4095)
    tags = (_table(SQUARE), (50714, "H", 1, 512, True), (50717, "I", 1, 65535, True))
    path = tmp_path / "lin.dng"
    if layout == "packed 12-bit":
        bare_cfa_dng(path, stored, *tags, bitspersample=12)
    elif layout == "big-endian":
        bare_cfa_dng(path, stored, *tags, byteorder=">")
    elif layout == "lossless JPEG":
        pytest.importorskip("imagecodecs")
        lj = {"lossless": True, "bitspersample": 12}
        bare_cfa_dng(path, stored, *tags, tile=(32, 32), compression="jpeg", compressionargs=lj)
    else:
        bare_cfa_dng(path, stored, *tags)
    img = read_raw(path, clip=False)
    assert img.white_level == 65535 and img.black_level == (512.0,) * 4
    np.testing.assert_allclose(img.cfa, (SQUARE[stored] - 512.0) / (65535 - 512), atol=1e-6)


@pytest.mark.parametrize("dtype,count", [("I", 4096), ("H", 1)])
def test_malformed_linearization_table_is_refused(tmp_path, dtype, count):
    """DNG's LinearizationTable is SHORT, at least 2 entries. LibRaw reads a LONG table as SHORTs (each value
    followed by a 0: every other stored value mapped to black) and maps every pixel through a 1-entry one to a
    single value: both came out as silently wrong mosaics."""
    table = SQUARE if count > 1 else SQUARE[-1:]
    tags = (_table(table, dtype), (50717, "I", 1, 65535, True))
    path = bare_cfa_dng(tmp_path / "bad.dng", _random((64, 80), 4095), *tags)
    with pytest.raises(RawrclError, match="LinearizationTable"):
        read_raw(path)


@pytest.mark.parametrize("bits,packed", [(b, p) for b in (10, 12, 14) for p in (False, True)] + [(16, False)])
def test_white_level_below_the_container_maximum(tmp_path, bits, packed):
    """10/12/14-bit data, packed (BitsPerSample 10/12/14) or in 16-bit containers with WhiteLevel 2^bits − 1:
    normalised by the tag's WhiteLevel, not the container's maximum. Odd width: packed rows end mid-byte."""
    white = 2**bits - 1
    data = _random((63, 81), white, seed=bits)
    kw = {"bitspersample": bits} if packed else {}
    path = bare_cfa_dng(
        tmp_path / "w.dng", data, (50714, "H", 1, 64, True), (50717, "I", 1, white, True), **kw
    )
    img = read_raw(path, clip=False)
    assert img.white_level == white
    np.testing.assert_allclose(img.cfa, (data - 64.0) / (white - 64), atol=1e-6)


@pytest.mark.parametrize("bits", [12, 16])
def test_big_endian(tmp_path, bits):
    """A big-endian ('MM') DNG: pixels, a 2×2 BlackLevel pattern and WhiteLevel read as little-endian ones."""
    white = 2**bits - 1
    data = _random((64, 80), white, seed=1)
    tags = (
        (50713, "H", 2, (2, 2), True),
        (50714, "I", 4, (10, 20, 30, 40), True),
        (50717, "I", 1, white, True),
    )
    if bits == 16:
        path = bare_cfa_dng(tmp_path / "be.dng", data, *tags, byteorder=">")
    else:
        path = _packed_big_endian(tmp_path / "be.dng", data, bits, *tags)
    assert tifffile.TiffFile(path).byteorder == ">"
    img = read_raw(path, clip=False)
    black = np.tile([[10.0, 20.0], [30.0, 40.0]], (32, 40))
    assert img.black_level == (10.0, 20.0, 30.0, 40.0)
    np.testing.assert_allclose(img.cfa, (data - black) / (white - black), atol=1e-6)


@pytest.mark.parametrize("tile,packed", [((32, 48), False), ((16, 16), False), ((16, 32), True)])
def test_tiles_that_do_not_divide_the_image(tmp_path, tile, packed):
    """Tiled CFA data (TileWidth/TileLength) whose tiles overhang a 70×90 image, with an odd ActiveArea."""
    data = _random((70, 90), 4095, seed=2)
    aa = (50829, "I", 4, (1, 3, 69, 87), True)
    kw = {"bitspersample": 12} if packed else {}
    path = bare_cfa_dng(tmp_path / "t.dng", data, aa, (50714, "H", 1, 100, True), tile=tile, **kw)
    assert tifffile.TiffFile(path).pages[0].is_tiled
    img = read_raw(path, clip=False)
    top, left = img.extra["margins"]
    h, w = img.cfa.shape
    np.testing.assert_allclose(img.cfa, (data[top : top + h, left : left + w] - 100.0) / 3995, atol=1e-6)


def _phase_dng(path, data, pattern, top, left):
    """A DNG whose CFAPattern ``pattern`` and 2×2 BlackLevel (100, 200 / 300, 400) have their origin at the
    ActiveArea's top-left (DNG SDK: both apply to the stage-2, ActiveArea, image)."""
    h, w = data.shape
    tags = [
        (33421, "H", 2, (2, 2), True),
        (33422, "B", 4, tuple(_CODE[c] for c in pattern), True),
        (50710, "B", 3, (0, 1, 2), True),
        (50706, "B", 4, (1, 4, 0, 0), True),
        (50713, "H", 2, (2, 2), True),
        (50714, "H", 4, (100, 200, 300, 400), True),
        (50717, "I", 1, 4095, True),
        (50829, "I", 4, (top, left, h, w), True),
    ]
    tifffile.imwrite(path, data, photometric=32803, metadata=None, extratags=tags)
    return path


@pytest.mark.parametrize("pattern", ["RGGB", "BGGR", "GRBG", "GBRG"])
@pytest.mark.parametrize("top,left", [(1, 0), (0, 1), (3, 5)])
def test_bayer_phase_and_black_with_odd_active_area(tmp_path, pattern, top, left):
    """Each phase with odd ActiveArea offsets: LibRaw starts its grid one row/column into the active area
    (even margins); ``pattern`` and the per-position black must follow that grid."""
    data = _random((64 + top, 80 + left), 4095, seed=3)
    img = read_raw(_phase_dng(tmp_path / "p.dng", data, pattern, top, left), clip=False)
    t, l = img.extra["margins"]
    assert (t, l) == (top + top % 2, left + left % 2)
    h, w = img.cfa.shape
    rows, cols = (np.arange(t, t + h) - top) % 2, (np.arange(l, l + w) - left) % 2  # phase in the active area
    black = np.array([[100.0, 200.0], [300.0, 400.0]])[rows[:, None], cols[None, :]]
    expected_pattern = "".join(np.array(list(pattern)).reshape(2, 2)[rows[:2, None], cols[None, :2]].ravel())
    assert img.pattern == expected_pattern
    assert img.black_level == tuple(black[:2, :2].ravel())
    np.testing.assert_allclose(img.cfa, (data[t : t + h, l : l + w] - black) / (4095 - black), atol=1e-6)


def test_default_crop_is_not_applied(tmp_path):
    """read_raw returns LibRaw's visible area (the ActiveArea, margins rounded to even), not the DefaultCrop;
    the crop tags are passed on in ``extra["dng"]`` (rawrcl.infer.writers places them on this grid)."""
    data = _random((67, 85), 4095, seed=4)
    crop = ((50719, "I", 2, (8, 6), True), (50720, "I", 2, (60, 50), True))
    img = read_raw(bare_cfa_dng(tmp_path / "c.dng", data, (50829, "I", 4, (3, 5, 67, 85), True), *crop))
    assert img.cfa.shape == (63, 79) and img.extra["margins"] == (4, 6)
    assert img.extra["dng"]["default_crop_origin"] == [8, 6] and img.extra["dng"]["default_crop_size"] == [
        60,
        50,
    ]


@pytest.mark.parametrize("compression,named", [("zlib", "deflate (8)"), ("lzw", "LZW (5)")])
def test_a_dng_codec_libraw_cannot_decode_is_named(tmp_path, compression, named):
    path = bare_cfa_dng(tmp_path / "c.dng", _random((64, 64), 4095), compression=compression)
    with pytest.raises(RawrclError, match=rf"compressed with {re.escape(named)}, which LibRaw cannot decode"):
        read_raw(path)
