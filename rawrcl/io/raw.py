"""RAW file reading: :class:`RawImage` and :func:`read_raw` (rawpy/LibRaw; DNG tags: :mod:`.tags`).

Contract (other modules rely on these field names and units):
- ``cfa``: float32 (H, W), normalised per CFA position: (raw − black[pos]) / (white − black[pos]),
  clipped to [0, 1].
- ``pattern``: "RGGB" | "BGGR" | "GRBG" | "GBRG" — the phase of ``cfa[0:2, 0:2]``.
- ``black_level``: per CFA position of the 2×2 tile, row-major (4 floats, raw DN).
- ``white_level``: raw DN.
- ``wb``: camera white-balance multipliers (R, G, B), normalised so G = 1 (or None).
- ``ccm``: 3×3 camera-RGB → sRGB (linear) matrix or None; ``xyz_to_cam``: 3×3 ColorMatrix or None.
- ``noise_profile``: list of (S, O) pairs in [0, 1] units (DNG NoiseProfile) or None.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rawrcl.cfa import PATTERNS
from rawrcl.errors import RawrclError
from rawrcl.io.dng import MIN_SIZE
from rawrcl.io.files import captured_stderr
from rawrcl.io.tags import PHOTOMETRIC_CFA, PHOTOMETRIC_LINEAR_RAW, read_dng_tags
from rawrcl.io.tiffcheck import MAX_PIXELS, MAX_SAMPLES_PER_BYTE


@dataclass
class RawImage:
    """A Bayer RAW frame normalised to [0, 1] and the metadata rawrcl needs."""

    path: str
    cfa: np.ndarray
    pattern: str
    black_level: tuple[float, float, float, float]
    white_level: float
    wb: tuple[float, float, float] | None = None
    ccm: np.ndarray | None = None
    xyz_to_cam: np.ndarray | None = None
    make: str = ""
    model: str = ""
    iso: float | None = None
    exposure_time: float | None = None
    noise_profile: list[tuple[float, float]] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def height(self) -> int:
        return int(self.cfa.shape[0])

    @property
    def width(self) -> int:
        return int(self.cfa.shape[1])


# --------------------------------------------------------------------------------------------------
# DNG / TIFF tag reading (tifffile): works on any TIFF-based file, CFA or not.


def _refuse(path: Path, reason: str) -> RawrclError:
    return RawrclError(f"{path}: {reason}")


def _check_dng_is_bayer(path: Path, tags: dict) -> None:
    if not tags.get("is_dng"):
        return
    photometric = tags.get("photometric")
    spp = tags.get("samples_per_pixel", 1)
    if photometric == PHOTOMETRIC_LINEAR_RAW:
        kind = "monochrome" if spp == 1 else f"{spp}-channel"
        raise _refuse(
            path, f"linear (demosaiced) {kind} DNG (PhotometricInterpretation 34892), not a Bayer CFA mosaic"
        )
    if photometric != PHOTOMETRIC_CFA:
        kind = "monochrome " if spp == 1 else ""
        raise _refuse(path, f"{kind}DNG without a CFA image (PhotometricInterpretation {photometric})")
    planes = tags.get("cfa_plane_color")
    planes = list(planes) if isinstance(planes, (bytes, list, tuple)) else None
    if planes is not None and planes != [0, 1, 2]:  # 0 red, 1 green, 2 blue; 3–6 cyan, magenta, yellow, white
        # another order puts AsShotNeutral and the ColorMatrix rows in that order too (which LibRaw ignores)
        kind = (
            "red, green, blue in another order"
            if sorted(planes) == [0, 1, 2]
            else "not red/green/blue, e.g. CMY"
        )
        raise _refuse(path, f"CFAPlaneColor {planes} ({kind}): only planes red, green, blue in that order")
    layout = tags.get("cfa_layout")
    layout = layout[0] if isinstance(layout, (list, tuple)) and layout else layout
    if layout not in (None, 1):
        raise _refuse(
            path,
            f"CFALayout {layout} (a staggered or non-rectangular CFA grid), not a rectangular Bayer mosaic",
        )
    dim = tags.get("cfa_repeat_pattern_dim")
    if dim is not None:
        dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
        if dims != [2, 2]:  # a corrupt tag may hold any number of values
            shown = "×".join(str(d) for d in dims) if dims else "(empty)"
            raise _refuse(path, f"CFA repeat pattern {shown} (e.g. X-Trans), not a 2×2 Bayer mosaic")


def _check_linearization_table(path: Path, tags: dict) -> None:
    """Refuse a DNG LinearizationTable that LibRaw would apply wrongly without a word: DNG's is SHORT with at
    least 2 entries; LibRaw reads one of another type as SHORTs (a LONG table becomes its values' 16-bit
    halves, interleaved) and maps every pixel through a 1-entry table to that one value."""
    table = tags.get("linearization_table")
    if not tags.get("is_dng") or table is None:
        return
    kind, count = table
    if kind != "SHORT" or count < 2:
        raise _refuse(path, f"LinearizationTable of {count} {kind} values (DNG: SHORT, at least 2 entries)")


#: TIFF Compression codes of a DNG's raw IFD that LibRaw (0.22) does not decode for integer CFA data
_UNDECODED_DNG_CODECS = {5: "LZW (5)", 8: "deflate (8)", 32946: "deflate (32946)", 52546: "JPEG XL (52546)"}


def _libraw_error(path: Path, exc: Exception, notes: list[str] | None = None) -> RawrclError:
    import rawpy

    msg = str(exc).strip("b'\" ") or type(exc).__name__
    if notes:
        msg += "; " + "; ".join(notes)
    if isinstance(exc, rawpy.LibRawFileUnsupportedError):
        return _refuse(path, f"not a RAW format LibRaw can read ({msg})")
    if isinstance(exc, (rawpy.LibRawIOError, rawpy.LibRawDataError)):
        return _refuse(path, f"unreadable or truncated RAW file (LibRaw: {msg})")
    return _refuse(path, f"cannot read RAW file (LibRaw: {type(exc).__name__}: {msg})")


_LIBRAW_NOTE = re.compile(r"(Unexpected end of file|data corrupted at \d+)\s*$")


@contextlib.contextmanager
def _libraw_notes() -> Iterator[list[str]]:
    """LibRaw's messages while decoding ("<file>: Unexpected end of file", "<file>: data corrupted at N"),
    which it prints on the C stderr: the returned list receives them when the block ends, so rawrcl can
    report them in its own one-line error (other output is dropped)."""
    notes: list[str] = []
    with captured_stderr() as lines:
        yield notes
    for line in lines:
        m = _LIBRAW_NOTE.search(line)
        if m and m.group(1) not in notes:
            notes.append(m.group(1))


def _not_raw_content(path: Path) -> str | None:
    """Why a file's first bytes show it is no RAW file at all (empty; text — every RAW format starts with
    a binary header), or None. A cheap check before LibRaw, whose own answer ("Input/output error") reads
    like a damaged RAW file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError:  # unreadable: the tag reader and LibRaw report it
        return None
    if not head:
        return "empty file (0 bytes), not a RAW file"
    text = None
    for cut in range(4):  # a multi-byte character may be cut at byte 512
        try:
            text = head[: len(head) - cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    if text is not None and all(c.isprintable() or c in "\t\r\n\f" for c in text):
        return "a text file, not a RAW file"
    return None


def _open_libraw(path: Path):
    """``rawpy.imread`` for any file name: names that are not valid UTF-8 (which rawpy cannot pass to
    LibRaw) are read through an open file object instead."""
    import rawpy

    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        with open(path, "rb") as fh:
            return rawpy.imread(fh)
    return rawpy.imread(str(path))


#: LibRaw's ``sizes.flip`` (bit 4: transpose, 2: reverse rows, 1: reverse columns) → TIFF Orientation (1–8)
ORIENTATION_OF_FLIP = {0: 1, 1: 2, 2: 4, 3: 3, 4: 5, 5: 8, 6: 6, 7: 7}


def dng_tags_of(img) -> dict:
    """The DNG tags a :class:`RawImage` was read with (``extra["dng"]``: :func:`rawrcl.io.tags.read_dng_tags`
    plus ``black_level_grid``), or {} for a non-DNG source (or any object without them)."""
    return (getattr(img, "extra", None) or {}).get("dng") or {}


def orientation_of(img) -> int:
    """TIFF Orientation (1 = as stored … 8) of a :class:`RawImage`, from LibRaw's flip in ``extra``."""
    return ORIENTATION_OF_FLIP.get(int(getattr(img, "extra", {}).get("flip", 0) or 0), 1)


def to_display(rgb: np.ndarray, flip: int) -> np.ndarray:
    """(C, H, W) image on the sensor grid → as it is displayed (LibRaw's ``flip``: reverse rows if bit 2,
    columns if bit 1, then transpose if bit 4 — what LibRaw's own rendering does). A view, no copy."""
    a = np.asarray(rgb)
    if flip & 2:
        a = a[:, ::-1, :]
    if flip & 1:
        a = a[:, :, ::-1]
    if flip & 4:
        a = a.transpose(0, 2, 1)
    return a


def _decode(path: Path, tiff: bool = False):
    """Open ``path`` with LibRaw, check the declared raw size (``tiff``: the TIFF layout was checked, only
    :data:`MAX_PIXELS` applies), unpack. Returns the open ``rawpy.RawPy``.

    Raises :class:`RawrclError` for unreadable files, absurd sizes and data LibRaw reports as corrupt.
    """
    import rawpy

    size = path.stat().st_size
    raw = None
    error: Exception | None = None
    with _libraw_notes() as notes:
        try:
            raw = _open_libraw(path)
            s = raw.sizes
            pixels = int(s.raw_height) * int(s.raw_width)
            # TIFF-based files had their layout checked already (their compression may be deflate)
            if pixels > MAX_PIXELS or (not tiff and pixels > MAX_SAMPLES_PER_BYTE * size):
                raise _refuse(
                    path,
                    f"corrupt header: declares a {s.raw_width}×{s.raw_height} raw image, "
                    f"impossible for a file of {size} bytes",
                )
            raw.unpack()
        except (rawpy.LibRawError, RawrclError, OSError) as exc:
            error = exc
    if error is not None:
        if raw is not None:
            raw.close()
        if isinstance(error, RawrclError):
            raise error
        if isinstance(error, OSError):
            raise _refuse(path, f"cannot open ({error.strerror or error})")
        raise _libraw_error(path, error, notes)
    if notes:
        raw.close()
        raise _refuse(path, f"corrupt pixel data (LibRaw: {'; '.join(notes)})")
    return raw


def _positive_or_none(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def _finite_or_none(m) -> np.ndarray | None:
    """``m`` as a float64 array when every entry is finite, else None."""
    if m is None:
        return None
    a = np.asarray(m, dtype=np.float64)
    return a if np.all(np.isfinite(a)) else None


#: correlated colour temperature (K) of the EXIF LightSource codes DNG uses as CalibrationIlluminant (DNG SDK)
_ILLUMINANT_CCT = {
    1: 5500,
    2: 4150,
    3: 2850,
    4: 5500,
    9: 5500,
    10: 6500,
    11: 7500,
    12: 6430,
    13: 5000,
    14: 4150,
    15: 3450,
    16: 2940,
    17: 2856,
    18: 4874,
    19: 6774,
    20: 5503,
    21: 6504,
    22: 7504,
    23: 5003,
    24: 3200,
}


def _choose_color_matrix(tags: dict) -> np.ndarray | None:
    """The DNG ColorMatrix calibrated for the illuminant nearest D65 (in inverse colour temperature, the scale
    DNG interpolates on; what LibRaw uses too): D65 itself if there is one; an unknown illuminant counts as
    farthest, ColorMatrix2 winning ties (the DNG convention: 1 is the low, 2 the high temperature)."""
    cands = []
    for i in (1, 2):
        m = tags.get(f"color_matrix_{i}")
        if m is not None:
            ill = tags.get(f"calibration_illuminant_{i}")
            if isinstance(ill, (list, tuple)):
                ill = ill[0] if ill else None
            cct = _ILLUMINANT_CCT.get(int(ill)) if isinstance(ill, (int, float)) else None
            dist = abs(1e6 / cct - 1e6 / 6504) if cct else math.inf
            cands.append((dist, -i, np.asarray(m, dtype=np.float64)))
    if not cands:
        return None
    return min(cands, key=lambda c: (c[0], c[1]))[2]


def _wb_from_white_xy(xy, xyz_to_cam: np.ndarray) -> tuple[float, float, float] | None:
    """White balance (R, G, B), G = 1, of a DNG that gives the as-shot white as a chromaticity (AsShotWhiteXY)
    instead of AsShotNeutral: the camera's neutral is ColorMatrix · XYZ(x, y, Y = 1) (DNG 1.6, "Mapping Camera
    Color Space to CIE XYZ Space"; the matrix rawrcl chose, not one interpolated for that white)."""
    try:
        x, y = (float(v) for v in list(xy)[:2])
    except (TypeError, ValueError):
        return None
    if not (0 < x < 1 and 0 < y < 1 and x + y < 1):
        return None
    neutral = np.asarray(xyz_to_cam, dtype=np.float64) @ np.array([x / y, 1.0, (1 - x - y) / y])
    if not (np.all(np.isfinite(neutral)) and np.all(neutral > 0)):
        return None
    return (float(neutral[1] / neutral[0]), 1.0, float(neutral[1] / neutral[2]))


def _black_pattern(tags: dict, top: int, left: int) -> np.ndarray | None:
    """The DNG BlackLevel repeat pattern on the grid whose origin is (``top``, ``left``) in raw coordinates:
    (R, C) raw DN, R and C the repeat dimensions rounded up to even (element [i, j] is the black of grid
    pixels (i + R·m, j + C·n)). BlackLevel's pattern has its origin at the ActiveArea's top-left (DNG 1.6),
    so an odd offset between the two changes which value is where. None without a usable BlackLevel tag."""
    bl = tags.get("black_level")
    if bl is None:
        return None
    try:
        vals = [float(v) for v in np.ravel(bl)]
        dim = tags.get("black_level_repeat_dim") or [1, 1]
        rd, cd = (int(d) for d in (list(dim) if isinstance(dim, (list, tuple)) else [dim, dim])[:2])
        aa = tags.get("active_area") or [0, 0, 0, 0]
        aa_top, aa_left = int(aa[0]), int(aa[1])
    except (TypeError, ValueError, IndexError):
        return None
    if not (1 <= rd <= 64 and 1 <= cd <= 64) or len(vals) < rd * cd or not all(map(math.isfinite, vals)):
        return None
    rows, cols = math.lcm(rd, 2), math.lcm(cd, 2)
    dy, dx = top - aa_top, left - aa_left
    return np.array([[vals[((i + dy) % rd) * cd + (j + dx) % cd] for j in range(cols)] for i in range(rows)])


def _black_deltas(tags: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """BlackLevelDeltaH (one value per ActiveArea column) and BlackLevelDeltaV (per row), raw DN, or None."""
    out = []
    for key in ("black_level_delta_h", "black_level_delta_v"):
        try:
            d = np.asarray(tags.get(key) or [], dtype=np.float64).ravel()
        except (TypeError, ValueError):
            d = np.zeros(0)
        out.append(d if d.size and np.all(np.isfinite(d)) else None)
    return out[0], out[1]


def dng_black_grid(tags: dict, top: int, left: int, *, deltas: bool = True) -> np.ndarray | None:
    """The DNG black level as a 2×2 tile (per position, row-major, raw DN) on the grid LibRaw returns, whose
    origin is (``top``, ``left``) in raw coordinates: BlackLevel's repeat pattern placed from the ActiveArea's
    origin (:func:`_black_pattern`; a larger pattern averaged per position), plus (``deltas``) the mean
    BlackLevelDeltaH/V (what LibRaw adds). None when the file has no usable BlackLevel tag."""
    pattern = _black_pattern(tags, top, left)
    if pattern is None:
        return None
    tile = np.array([[pattern[i::2, j::2].mean() for j in (0, 1)] for i in (0, 1)])
    for d in _black_deltas(tags) if deltas else ():
        if d is not None:
            tile = tile + float(d.mean())
    return tile


def dng_black_map(tags: dict, top: int, left: int, shape: tuple[int, int]) -> np.ndarray | None:
    """The DNG black level per pixel, (H, W) = ``shape`` float32 raw DN on LibRaw's grid (origin (``top``,
    ``left``)), when LibRaw's 2×2 levels do not hold it: a BlackLevel repeat pattern larger than 2×2 (LibRaw
    reports only its common part), or BlackLevelDeltaH/V that vary across columns/rows (sensors with column or
    row offsets: LibRaw subtracts their mean only). None otherwise, or without a usable BlackLevel tag."""
    pattern = _black_pattern(tags, top, left)
    if pattern is None:
        return None
    h, w = shape
    aa = tags.get("active_area") or [0, 0, 0, 0]
    dy, dx = top - int(aa[0]), left - int(aa[1])
    dh, dv = _black_deltas(tags)
    cols = dh[dx : dx + w] if dh is not None and 0 <= dx and dh.size >= dx + w else None
    rows = dv[dy : dy + h] if dv is not None and 0 <= dy and dv.size >= dy + h else None
    flat = (cols is None or np.ptp(cols) == 0) and (rows is None or np.ptp(rows) == 0)
    if pattern.shape == (2, 2) and flat:
        return None  # LibRaw's 2×2 levels hold it (read_raw corrects their phase)
    ry, rx = pattern.shape
    out = np.tile(pattern.astype(np.float32), (-(-h // ry), -(-w // rx)))[:h, :w]
    # deltas of a length that does not fit the grid: their mean, as in dng_black_grid
    mean_h, mean_v = (float(d.mean()) if d is not None else 0.0 for d in (dh, dv))
    out += np.asarray(cols[None, :] if cols is not None else mean_h, np.float32)
    out += np.asarray(rows[:, None] if rows is not None else mean_v, np.float32)
    return out


def read_raw(path: str | os.PathLike, *, clip: bool = True) -> RawImage:
    """Read a Bayer RAW file (any format LibRaw reads: DNG, NEF, CR2, ARW, RW2, ORF, KDC, …).

    Parameters
    ----------
    path : the RAW file.
    clip : clip the normalised mosaic to [0, 1] (default, the :class:`RawImage` contract). With
        False, values below the black level stay negative and values above white exceed 1 (useful
        for noise calibration).

    Returns
    -------
    :class:`RawImage` whose ``cfa`` is float32 (H, W) of the visible area: (raw − black[pos]) /
    (white − black[pos]); ``pattern`` is the phase of ``cfa[0:2, 0:2]``; ``extra`` holds
    ``raw_type``, ``color_desc``, ``flip``, ``raw_ifd`` (DNG) and ``dng`` (the DNG tags, if any).

    Raises
    ------
    RawrclError naming the file and the reason for missing, unreadable or truncated files and for
    anything that is not a 2×2 RGB Bayer mosaic (X-Trans, Foveon, linear/demosaiced DNG,
    monochrome, CMYG).
    """
    import rawpy

    from rawrcl.colour import ccm_from_xyz_to_cam

    p = Path(path)
    if not p.exists():
        raise _refuse(p, "no such file")
    if not p.is_file():
        raise _refuse(p, "not a file")
    not_raw = _not_raw_content(p)
    if not_raw:
        raise _refuse(p, not_raw)
    try:
        tags = read_dng_tags(p)
    except RawrclError:
        raise
    except Exception:  # tag reading is best effort; LibRaw decides readability
        tags = {}
    _check_dng_is_bayer(p, tags)
    _check_linearization_table(p, tags)
    if tags.get("data_problem"):
        raise _refuse(p, tags["data_problem"])
    shape = tags.get("shape")
    if tags.get("is_dng") and shape is not None and min(shape[:2]) < MIN_SIZE:
        raise _refuse(
            p, f"{shape[1]}×{shape[0]} px: too small (LibRaw reads images of at least {MIN_SIZE}×{MIN_SIZE})"
        )

    try:
        raw = _decode(p, tiff=bool(tags.get("is_tiff")))
    except RawrclError:
        codec = _UNDECODED_DNG_CODECS.get(tags.get("compression")) if tags.get("is_dng") else None
        if codec:  # LibRaw's own words ("corrupted data", "unsupported format") would blame the file
            raise _refuse(
                p,
                f"DNG pixel data compressed with {codec}, which LibRaw cannot decode (re-save it "
                "uncompressed or with lossless JPEG, e.g. with Adobe DNG Converter)",
            ) from None
        raise
    with raw:
        try:
            if raw.raw_type != rawpy.RawType.Flat:
                raise _refuse(p, "not a single-plane CFA mosaic (Foveon, sRAW or linear data)")
            if raw.num_colors < 3:
                raise _refuse(p, "monochrome sensor, not a Bayer CFA mosaic")
            rp = raw.raw_pattern
            if rp is None:
                raise _refuse(p, "no CFA pattern (monochrome or demosaiced data)")
            if rp.shape != (2, 2):
                dims = f"{rp.shape[0]}×{rp.shape[1]}"
                raise _refuse(p, f"CFA repeat pattern {dims} (e.g. X-Trans), not a 2×2 Bayer mosaic")
            desc = raw.color_desc.decode("ascii", "replace")
            colours = raw.raw_colors_visible[:2, :2].astype(int)
            letters = "".join(desc[c] if 0 <= c < len(desc) else "?" for c in colours.ravel())
            if letters not in PATTERNS:
                raise _refuse(p, f"CFA {letters!r} (colours {desc!r}) is not an RGB Bayer pattern")
            data = raw.raw_image_visible.astype(np.float32)
            if data.ndim != 2 or min(data.shape) < 2:
                raise _refuse(p, f"unexpected raw image shape {data.shape}")
            bl_channel = np.asarray(raw.black_level_per_channel, dtype=np.float64)
            black_tile = bl_channel[colours]  # (2, 2), per CFA position
            white = float(raw.white_level)
            cam_wb = np.asarray(raw.camera_whitebalance, dtype=np.float64)
            libraw_xyz = np.asarray(raw.rgb_xyz_matrix, dtype=np.float64)[:3]
            libraw_ccm = np.asarray(raw.color_matrix, dtype=np.float64)[:, :3]
            other = raw.other
            flip = int(raw.sizes.flip)
            margins = (int(raw.sizes.top_margin), int(raw.sizes.left_margin))
        except RawrclError:
            raise
        except rawpy.LibRawError as exc:
            raise _libraw_error(p, exc) from None
        except NotImplementedError as exc:  # rawpy: a CFA layout it cannot describe (e.g. "filters: 46")
            raise _refuse(p, f"unsupported CFA layout ({exc})") from None
    file_black = dng_black_grid(tags, *margins) if tags.get("is_dng") else None
    if file_black is not None:
        # LibRaw (0.22) places a 2×2 BlackLevel pattern by its own grid's phase, not the ActiveArea's: when
        # its grid starts an odd number of rows/columns into the active area (it rounds an odd ActiveArea
        # offset up), the four values land on the wrong CFA positions. Its tile is then the pattern read
        # unshifted (plus a common part); the file's own, correctly placed, levels are used instead.
        unshifted = dng_black_grid(tags, *(int(v) for v in (tags.get("active_area") or [0, 0])[:2]))
        diff = black_tile - unshifted if unshifted is not None else None
        if (
            diff is not None
            and not np.allclose(unshifted, file_black)
            and np.ptp(diff) < 1e-6
            and not np.allclose(black_tile, file_black + np.mean(diff))
        ):
            black_tile = file_black + float(np.mean(diff))  # diff: LibRaw's common part
    h, w = data.shape
    black_map = dng_black_map(tags, *margins, (h, w)) if file_black is not None else None
    if black_map is not None:  # the file's own per-pixel black; RawImage.black_level its per-position mean
        # LibRaw measures the black from MaskedAreas when the file has them (its value replaces BlackLevel and
        # the deltas' mean): its offset from the tags' BlackLevel is kept, as on the 2×2 path
        base = dng_black_grid(tags, *margins, deltas=False)
        offset = black_tile - base if tags.get("masked_areas") is not None and base is not None else None
        if offset is not None and np.ptp(offset) < 1e-6:
            black_map += np.float32(offset.mean())
            black_tile = file_black + float(offset.mean())
        else:
            black_tile = file_black
        if not np.all(black_map < white):
            raise _refuse(p, f"black level up to {float(black_map.max())} is not below white level {white}")
        if float(black_map.min()) < 0:  # negative BlackLevelDeltaH/V beyond BlackLevel: a corrupt file
            raise _refuse(p, f"black level down to {float(black_map.min())} is below 0")
    if not np.all(black_tile < white):
        raise _refuse(p, f"black level {black_tile.ravel().tolist()} is not below white level {white}")

    if black_map is not None:
        black_full = black_map
    else:
        black_full = np.tile(black_tile.astype(np.float32), ((h + 1) // 2, (w + 1) // 2))[:h, :w]
    cfa = (data - black_full) / (np.float32(white) - black_full)
    if clip:
        np.clip(cfa, 0.0, 1.0, out=cfa)

    # white balance (R, G, B), G = 1
    wb = None
    idx = {letter: desc.index(letter) for letter in "RGB" if letter in desc}
    if len(idx) == 3 and cam_wb.size >= len(desc):
        r, g, b = (cam_wb[idx[c]] for c in "RGB")
        if g > 0 and r > 0 and b > 0 and np.all(np.isfinite([r, g, b])):
            wb = (float(r / g), 1.0, float(b / g))

    # metadata is used as numbers downstream: a corrupt (NaN/Inf) matrix or profile counts as absent
    xyz_to_cam = _finite_or_none(_choose_color_matrix(tags))
    if xyz_to_cam is None and np.any(libraw_xyz != 0):
        xyz_to_cam = _finite_or_none(libraw_xyz)
    if wb is None and xyz_to_cam is not None:
        wb = _wb_from_white_xy(tags.get("as_shot_white_xy"), xyz_to_cam)
    ccm = None
    if xyz_to_cam is not None:
        try:
            ccm = _finite_or_none(ccm_from_xyz_to_cam(xyz_to_cam))
        except RawrclError:
            ccm = None
    if ccm is None and np.any(libraw_ccm != 0):
        ccm = _finite_or_none(libraw_ccm)
    profile = tags.get("noise_profile")
    if profile is not None and not np.all(np.isfinite(np.asarray(profile, dtype=np.float64))):
        profile = None

    iso = _positive_or_none(getattr(other, "iso_speed", None)) or _positive_or_none(tags.get("iso"))
    tag_iso = _positive_or_none(tags.get("iso"))
    if iso is not None and iso >= 65535 and tag_iso is not None and tag_iso > iso:  # a saturated SHORT
        iso = tag_iso
    exposure = _positive_or_none(getattr(other, "shutter_speed", None)) or _positive_or_none(
        tags.get("exposure_time")
    )
    extra = {"raw_type": "Flat", "color_desc": desc, "flip": flip, "margins": margins}
    make, model = str(tags.get("make") or "").strip(), str(tags.get("model") or "").strip()
    if not model:  # a DNG may name its camera only in UniqueCameraModel ("Make Model")
        model = str(tags.get("unique_camera_model") or "").strip()
        if make and model.startswith(make + " "):
            model = model[len(make) + 1 :]
    if tags.get("is_dng"):
        extra["raw_ifd"] = tags.get("raw_ifd")
        extra["dng"] = {k: v for k, v in tags.items() if k not in ("is_tiff", "is_dng")}
        if file_black is not None:  # the tags' black level on this grid (what the NoiseProfile refers to)
            extra["dng"]["black_level_grid"] = [float(b) for b in file_black.ravel()]

    return RawImage(
        path=str(p),
        cfa=cfa,
        pattern=letters,
        black_level=tuple(float(b) for b in black_tile.ravel()),  # type: ignore[arg-type]
        white_level=white,
        wb=wb,
        ccm=ccm,
        xyz_to_cam=xyz_to_cam,
        make=make,
        model=model,
        iso=iso,
        exposure_time=exposure,
        noise_profile=profile,
        extra=extra,
    )


def raw_summary(img: RawImage) -> dict:
    """JSON-ready metadata of a :class:`RawImage` (no pixels): path, make, model, pattern, width,
    height, black_level (4, per 2×2 position, DN), white_level (DN), iso, exposure_time (s),
    wb (R, G, B), xyz_to_cam (3×3), noise_profile ([[S, O], …], [0, 1] units)."""

    def _mat(m):
        return None if m is None else [[float(v) for v in row] for row in np.asarray(m)]

    profile = img.noise_profile
    return {
        "path": img.path,
        "make": img.make,
        "model": img.model,
        "pattern": img.pattern,
        "width": img.width,
        "height": img.height,
        "black_level": [float(b) for b in img.black_level],
        "white_level": float(img.white_level),
        "iso": img.iso,
        "exposure_time": img.exposure_time,
        "wb": None if img.wb is None else [float(v) for v in img.wb],
        "xyz_to_cam": _mat(img.xyz_to_cam),
        "noise_profile": None if profile is None else [[float(s), float(o)] for s, o in profile],
    }
