"""Real-camera DNG level tags: a 2×2 BlackLevel pattern whose origin is the ActiveArea's (odd offsets),
BlackLevelDeltaH/V, the NoiseProfile's normalisation, DefaultCrop after LibRaw's margin rounding, and the
choice between two ColorMatrix tags; BlackLevel patterns larger than 2×2 and per-column/row deltas (per
pixel); lossless-JPEG tiles; ISO from the EXIF IFD; the camera names of denoise's DNG."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from rawrcl.io.raw import read_raw
from tests._fakes import bare_cfa_dng

BLACKS = (100, 200, 300, 400)  # row-major, relative to the ActiveArea's top-left (DNG 1.6, BlackLevel)
WHITE = 4095
GREY = {"R": 0.2, "G": 0.35, "B": 0.25}


def _file(path, top, left, *extra, h=64, w=80, deltas=0.0):
    """RGGB (at the ActiveArea's origin) flat grey; masked rows/columns before the active area."""
    tile = np.array(BLACKS, float).reshape(2, 2) + deltas
    x = np.empty((h, w))
    x[0::2, 0::2], x[0::2, 1::2], x[1::2, 0::2], x[1::2, 1::2] = GREY["R"], GREY["G"], GREY["G"], GREY["B"]
    bl = np.tile(tile, (h // 2, w // 2))
    data = np.full((h + top, w + left), min(BLACKS), np.uint16)
    data[top:, left:] = np.round(bl + x * (WHITE - bl)).astype(np.uint16)
    tags = [
        (50713, "H", 2, (2, 2), True),
        (50714, "I", 4, BLACKS, True),
        (50829, "I", 4, (top, left, top + h, left + w), True),
        *extra,
    ]
    return bare_cfa_dng(path, data, *tags)


@pytest.mark.parametrize("top,left", [(0, 0), (3, 5), (1, 0), (0, 1), (2, 2)])
def test_black_pattern_follows_active_area_phase(tmp_path, top, left):
    img = read_raw(_file(tmp_path / "a.dng", top, left))
    for i in (0, 1):
        for j in (0, 1):
            expected = GREY[img.pattern[2 * i + j]]
            assert abs(float(img.cfa[i::2, j::2].mean()) - expected) < 1e-3, (img.pattern, img.black_level)


def test_noise_profile_not_converted_when_levels_agree(tmp_path):
    """The NoiseProfile refers to the file's own black (pattern origin: the ActiveArea, + BlackLevelDeltaH/V):
    rawrcl's normalisation is the same, so (S, O) must come through unchanged."""
    from rawrcl.calibration.resolve import _metadata

    prof = (51041, "d", 2, (1e-4, 2e-6), True)
    for name, top, left, extra, d in [
        ("odd.dng", 0, 9, (), 0.0),
        ("delta.dng", 0, 0, ((50715, "2i", 80, (30, 1) * 80, True),), 30.0),
    ]:
        path = _file(tmp_path / name, top, left, prof, *extra, deltas=d)
        img = read_raw(path)
        planes, ignored = _metadata(img, path)
        assert not ignored
        for s, o in planes.values():
            assert s == pytest.approx(1e-4, rel=1e-6) and o == pytest.approx(2e-6, rel=1e-6), (name, planes)


def test_default_crop_origin_after_libraw_margin_rounding(tmp_path):
    from rawrcl.infer.writers import _default_crop

    path = _file(tmp_path / "c.dng", 3, 5, (50719, "I", 2, (8, 6), True), (50720, "I", 2, (60, 50), True))
    img = read_raw(path)
    # LibRaw's grid starts at (4, 6), one row and column into the active area starting at (3, 5)
    assert _default_crop(img, img.cfa.shape) == ([7.0, 5.0], [60.0, 50.0])


def test_color_matrix_nearest_d65_when_none_is_d65(tmp_path):
    """ColorMatrix1 for D55 (20) and ColorMatrix2 for Standard A (17): the D55 one, as LibRaw renders."""
    d55 = np.array([[0.6722, -0.0635, -0.0963], [-0.4287, 1.2460, 0.2028], [-0.0908, 0.2162, 0.5668]])
    std_a = np.array([[0.7234, -0.1413, -0.0600], [-0.3631, 1.1150, 0.2850], [-0.0382, 0.1611, 0.7597]])

    def rat(m):
        return tuple(v for x in m.ravel() for v in (int(round(x * 10000)), 10000))

    data = np.full((64, 80), 1000, np.uint16)
    path = bare_cfa_dng(
        tmp_path / "cm.dng",
        data,
        (50721, "2i", 9, rat(d55), True),
        (50778, "H", 1, 20, True),
        (50722, "2i", 9, rat(std_a), True),
        (50779, "H", 1, 17, True),
    )
    np.testing.assert_allclose(read_raw(path).xyz_to_cam, d55, atol=1e-4)


def test_iso_above_65535_round_trips(tmp_path):
    """ISOSpeedRatings is a SHORT: a denoised ISO 102400 file must not crash the writer, and reads back."""
    from rawrcl.infer.writers import write_denoised_dng

    img = read_raw(_file(tmp_path / "i.dng", 0, 0))
    img.iso = 102400.0  # what LibRaw reports for e.g. a Sony/Nikon file at that ISO
    out = write_denoised_dng(tmp_path / "o.dng", img, img.cfa)
    assert read_raw(out).iso == 102400.0


def test_cfa_layout_other_than_rectangular_is_named(tmp_path):
    from rawrcl.errors import RawrclError

    path = bare_cfa_dng(tmp_path / "l.dng", np.full((64, 80), 1000, np.uint16), (50711, "H", 1, 2, True))
    with pytest.raises(RawrclError, match="CFALayout 2"):
        read_raw(path)


@pytest.mark.parametrize("planes", [(3, 4, 5), (2, 1, 0)])
def test_cfa_plane_colours_other_than_rgb_in_order_are_refused(tmp_path, planes):
    """CMY planes were read as RGGB; a permuted RGB order puts AsShotNeutral and the ColorMatrix rows in that
    order too, which LibRaw does not follow (its white balance came out swapped)."""
    from rawrcl.errors import RawrclError

    data = np.full((64, 64), 1000, np.uint16)
    path = bare_cfa_dng(tmp_path / "p.dng", data)
    raw = path.read_bytes()
    at = raw.find(bytes((0, 1, 2)), raw.find((50710).to_bytes(2, "little")))  # the 3 bytes sit in the entry
    path.write_bytes(raw[:at] + bytes(planes) + raw[at + 3 :])
    with pytest.raises(RawrclError, match=rf"CFAPlaneColor \[{', '.join(map(str, planes))}\]"):
        read_raw(path)


def test_white_balance_from_as_shot_white_xy(tmp_path):
    """A DNG giving the as-shot white as a chromaticity (no AsShotNeutral) had no white balance at all:
    the camera neutral is ColorMatrix · XYZ(x, y)."""
    cm = np.array([[0.8, -0.2, -0.05], [-0.35, 1.15, 0.25], [-0.08, 0.2, 0.7]])
    xy = (0.3457, 0.3585)  # D50
    flat = [int(round(v * 10000)) for v in cm.ravel()]
    cm_tag = (50721, "2i", 9, tuple(v for n in flat for v in (n, 10000)), True)
    xy_tag = (50729, "2I", 2, tuple(v for c in xy for v in (int(round(c * 10000)), 10000)), True)
    data = np.full((64, 64), 1000, np.uint16)
    img = read_raw(bare_cfa_dng(tmp_path / "xy.dng", data, cm_tag, (50778, "H", 1, 21, True), xy_tag))
    neutral = cm @ np.array([xy[0] / xy[1], 1.0, (1 - xy[0] - xy[1]) / xy[1]])
    assert img.wb == pytest.approx((neutral[1] / neutral[0], 1.0, neutral[1] / neutral[2]), rel=1e-3)


def _lossless_jpeg_dng(path, data, *extra):
    """A tiled DNG whose tiles are lossless JPEG (Compression 7), as DNG converters write camera files."""
    pytest.importorskip("imagecodecs")
    lossless = {"lossless": True, "bitspersample": 16}
    kw = {"tile": (128, 128), "compression": "jpeg", "compressionargs": lossless}
    try:
        return bare_cfa_dng(path, data, *extra, **kw)
    except Exception as exc:  # an imagecodecs built without lossless JPEG
        pytest.skip(f"no lossless JPEG encoder: {exc}")


def test_lossless_jpeg_tiled_dng_reads_exactly(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(256, WHITE + 1, (256, 384)).astype(np.uint16)
    path = _lossless_jpeg_dng(tmp_path / "lj.dng", data, (50714, "H", 1, 256, True))
    assert tifffile.TiffFile(path).pages[0].compression == 7
    img = read_raw(path)
    assert img.cfa.shape == data.shape and img.pattern == "RGGB"
    np.testing.assert_allclose(img.cfa, (data - 256.0) / (WHITE - 256), atol=1e-6)


def test_lossless_jpeg_dng_cut_inside_a_tile_is_refused(tmp_path):
    from rawrcl.errors import RawrclError

    data = np.random.default_rng(4).integers(0, WHITE + 1, (256, 256)).astype(np.uint16)
    path = _lossless_jpeg_dng(tmp_path / "lj.dng", data)
    path.write_bytes(path.read_bytes()[:-100])  # the last tile loses its end
    with pytest.raises(RawrclError, match="truncated"):
        read_raw(path)


@pytest.mark.parametrize(
    "names,expected",
    [
        (  # profiles are matched on UniqueCameraModel, which need not be "Make Model"
            [
                (271, "s", 0, "Google", True),
                (272, "s", 0, "Pixel 3", True),
                (50708, "s", 0, "Pixel-3 xl", True),
            ],
            ("Google", "Pixel-3 xl"),
        ),
        ([], ("unknown", "unknown")),  # a camera the source does not name is not called "rawrcl"
    ],
)
def test_denoised_dng_keeps_the_source_camera_names(tmp_path, names, expected):
    from rawrcl.infer.writers import write_denoised_dng

    data = np.full((64, 64), 1000, np.uint16)
    img = read_raw(bare_cfa_dng(tmp_path / "a.dng", data, *names))
    out = write_denoised_dng(tmp_path / "o.dng", img, img.cfa)
    tags = tifffile.TiffFile(out).pages[0].tags
    assert (tags["Make"].value, tags["UniqueCameraModel"].value) == expected


def _exif_dng(path, iso_short: int, iso_speed: int | None = None):
    """A DNG whose ISO and exposure time sit in an EXIF IFD (tag 34665), as cameras and phones write them.
    tifffile will not write tag 34665: a placeholder entry (34666, the same sort position) is renamed."""
    import struct

    bare_cfa_dng(path, np.full((64, 64), 1000, np.uint16), (34666, "I", 1, 0, True))
    b = bytearray(path.read_bytes())
    at = b.find(struct.pack("<HHI", 34666, 4, 1))
    assert at >= 0
    b += bytes(-len(b) % 4)
    ifd_at = len(b)
    entries = [struct.pack("<HHIHH", 34855, 3, 1, iso_short, 0)]  # ISOSpeedRatings (SHORT)
    if iso_speed is not None:  # SensitivityType 3 (ISO speed) and ISOSpeed (LONG)
        entries += [struct.pack("<HHIHH", 34864, 3, 1, 3, 0), struct.pack("<HHII", 34867, 4, 1, iso_speed)]
    rational_at = ifd_at + 2 + 12 * (len(entries) + 1) + 4
    entries.insert(0, struct.pack("<HHII", 33434, 5, 1, rational_at))  # ExposureTime (RATIONAL)
    b += (
        struct.pack("<H", len(entries)) + b"".join(entries) + struct.pack("<I", 0) + struct.pack("<II", 1, 50)
    )
    b[at : at + 2], b[at + 8 : at + 12] = struct.pack("<H", 34665), struct.pack("<I", ifd_at)
    path.write_bytes(bytes(b))
    return path


@pytest.mark.parametrize("iso_short,iso_speed,expected", [(3200, None, 3200), (65535, 102400, 102400)])
def test_iso_and_exposure_from_the_exif_ifd(tmp_path, iso_short, iso_speed, expected):
    from rawrcl.io.tags import read_dng_tags

    path = _exif_dng(tmp_path / "e.dng", iso_short, iso_speed)
    tags = read_dng_tags(path)
    assert tags["iso"] == expected and tags["exposure_time"] == pytest.approx(0.02)
    img = read_raw(path)
    assert img.iso == expected and img.exposure_time == pytest.approx(0.02)


def _black_map_file(path, top, left, black, *tags, h=64, w=80):
    """A flat grey (0.3 of the range above black) whose black level ``black`` (h, w) is given per pixel of
    the active area starting at (top, left); masked pixels before it."""
    data = np.full((h + top, w + left), int(black.min()), np.uint16)
    data[top:, left:] = np.round(black + 0.3 * (WHITE - black)).astype(np.uint16)
    return bare_cfa_dng(path, data, (50829, "I", 4, (top, left, top + h, left + w), True), *tags)


@pytest.mark.parametrize("top,left", [(0, 0), (3, 5)])
@pytest.mark.parametrize("kind", ["4x4", "4x4 of a 2x2", "2x4"])
def test_black_pattern_larger_than_2x2(tmp_path, kind, top, left):
    """LibRaw reports only the common part of a BlackLevel pattern larger than 2×2 (the rest was left in the
    data: +0.05 on a flat grey for a 2×2 pattern written as 4×4)."""
    pattern = {
        "4x4": np.arange(16).reshape(4, 4) * 20 + 100,
        "4x4 of a 2x2": np.tile([[100, 200], [300, 400]], (2, 2)),
        "2x4": np.array([[100, 160, 220, 280], [130, 190, 250, 310]]),
    }[kind]
    rd, cd = pattern.shape
    black = np.tile(pattern, (64 // rd, 80 // cd)).astype(float)
    dims = (50713, "H", 2, (rd, cd), True)
    levels = (50714, "I", rd * cd, tuple(int(v) for v in pattern.ravel()), True)
    img = read_raw(_black_map_file(tmp_path / "p.dng", top, left, black, dims, levels))
    assert np.abs(img.cfa - 0.3).max() < 1e-3, kind
    # RawImage.black_level: the per-position mean over whole patterns, on the visible grid's phase
    grid = black[img.extra["margins"][0] - top :, img.extra["margins"][1] - left :][:60, :76]
    expected = [grid[i::2, j::2].mean() for i in (0, 1) for j in (0, 1)]
    np.testing.assert_allclose(img.black_level, expected, atol=0.5)


@pytest.mark.parametrize("masked", [None, 200, 260])
def test_black_level_deltas_per_column_and_row(tmp_path, masked):
    """BlackLevelDeltaH/V vary per column/row (column/row offsets): subtracted per pixel, not their mean.
    With MaskedAreas LibRaw measures the base black there (260: the masked pixels read 60 DN above
    BlackLevel): that offset is kept, as for files without deltas."""
    h, w, left = 64, 80, 4
    dh, dv = 3.0 * np.arange(w), 2.0 * np.arange(h)
    black = 200 + dh[None, :] + dv[:, None]
    tags = [
        (50714, "I", 1, 200, True),
        (50715, "2i", w, tuple(v for c in dh for v in (int(c), 1)), True),
        (50716, "2i", h, tuple(v for r in dv for v in (int(r), 1)), True),
    ]
    if masked is not None:
        tags.append((50830, "I", 4, (0, 0, h, left), True))
    path = _black_map_file(tmp_path / "d.dng", 0, left, black, *tags)
    if masked is not None:
        data = tifffile.imread(path)
        data[:, :left] = masked
        bare_cfa_dng(path, data, (50829, "I", 4, (0, left, h, left + w), True), *tags)
    img = read_raw(path)
    offset = 0.0 if masked is None else masked - 200.0
    expected = (0.3 * (WHITE - black) - offset) / (WHITE - black - offset)
    assert np.abs(img.cfa - expected).max() < 1e-3  # the mean alone leaves ±0.06 across the frame
    np.testing.assert_allclose(img.black_level, [200 + dh.mean() + dv.mean() + offset] * 4)


def test_per_pixel_black_below_zero_is_refused(tmp_path):
    from rawrcl.errors import RawrclError

    rows = tuple(v for r in range(64) for v in (-300 - r, 1))  # BlackLevelDeltaV pulling the black below 0
    path = bare_cfa_dng(
        tmp_path / "n.dng",
        np.full((64, 64), 1000, np.uint16),
        (50714, "I", 1, 200, True),
        (50716, "2i", 64, rows, True),
    )
    with pytest.raises(RawrclError, match="below 0"):
        read_raw(path)
