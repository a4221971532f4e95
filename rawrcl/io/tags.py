"""DNG / TIFF tag reading (tifffile), for any TIFF-based file, CFA or not: what calibration's metadata path,
``rawrcl info`` and the RAW reader need (make/model, pattern, levels, colour matrices, NoiseProfile, ISO,
…), and the file's data-layout check (:func:`rawrcl.io.tiffcheck.data_layout_problem`)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Collection, Iterator
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.io.tiffcheck import data_layout_problem

#: the largest NoiseProfile value read as a profile ([0, 1] units: S = 1 is a noise std of √x, far above any
#: camera's; larger values are a corrupt tag)
MAX_PROFILE = 1.0
#: the least noise variance at mid-grey (0.18·S + O, [0, 1] units) a NoiseProfile must give: a std of 1e-4,
#: about a tenth of a quiet base-ISO sensor's; a profile of zeros (a placeholder or corrupt tag) would tell a
#: model "no noise"
MIN_PROFILE_VAR = 1e-8

PHOTOMETRIC_CFA = 32803
PHOTOMETRIC_LINEAR_RAW = 34892
DNG_ILLUMINANT_D65 = 21
_TAG_NAMES = {
    271: "make",
    272: "model",
    339: "sample_format",
    33421: "cfa_repeat_pattern_dim",
    33422: "cfa_pattern",
    33434: "exposure_time",
    34855: "iso",
    34867: "iso_speed",
    50706: "dng_version",
    50708: "unique_camera_model",
    50713: "black_level_repeat_dim",
    50711: "cfa_layout",
    50714: "black_level",
    50715: "black_level_delta_h",
    50716: "black_level_delta_v",
    50717: "white_level",
    50719: "default_crop_origin",
    50720: "default_crop_size",
    50721: "color_matrix_1",
    50722: "color_matrix_2",
    50728: "as_shot_neutral",
    50729: "as_shot_white_xy",
    50710: "cfa_plane_color",
    50730: "baseline_exposure",
    50778: "calibration_illuminant_1",
    50779: "calibration_illuminant_2",
    50829: "active_area",
    50830: "masked_areas",
    51041: "noise_profile",
}


def _tag_value(tag) -> object:
    """Tag value as plain Python: rationals → floats, bytes kept, strings stripped."""
    value = tag.value
    dtype = int(getattr(tag, "dtype", 0))
    if dtype in (5, 10):  # RATIONAL, SRATIONAL: flattened (num, den) pairs
        flat = list(value) if isinstance(value, (tuple, list)) else [value]
        pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2)]
        return [n / d if d else math.nan for n, d in pairs]
    if isinstance(value, str):
        return value.strip("\x00 ").strip()
    if isinstance(value, bytes) and tag.code in (33422, 50706, 50710):
        return list(value)
    if isinstance(value, (tuple, list)):
        return list(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "value") and isinstance(value.value, int):  # enums
        return int(value.value)
    return value


def _page_tags(page) -> dict[str, object]:
    out: dict[str, object] = {}
    for tag in page.tags.values():
        name = _TAG_NAMES.get(tag.code)
        if name is not None:
            try:
                out[name] = _tag_value(tag)
            except Exception:  # a malformed tag must not hide the others
                continue
    return out


@contextlib.contextmanager
def _quiet_tifffile() -> Iterator[None]:
    """Silence tifffile's logger (it reports malformed tags on stderr; rawrcl reports one line itself)."""
    logger = logging.getLogger("tifffile")
    old = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(old)


#: IFD0 tags that tell a raw developer how to render the data (colour calibration, exposure, profile): copied
#: unchanged from a source DNG into a rawrcl output DNG of the same pixels (:func:`read_rendering_tags`)
RENDERING_TAGS = {
    50721: "ColorMatrix1",
    50722: "ColorMatrix2",
    50723: "CameraCalibration1",
    50724: "CameraCalibration2",
    50727: "AnalogBalance",
    50729: "AsShotWhiteXY",
    50730: "BaselineExposure",
    50731: "BaselineNoise",
    50732: "BaselineSharpness",
    50734: "LinearResponseLimit",
    50778: "CalibrationIlluminant1",
    50779: "CalibrationIlluminant2",
    50931: "CameraCalibrationSignature",
    50932: "ProfileCalibrationSignature",
    50936: "ProfileName",
    50964: "ForwardMatrix1",
    50965: "ForwardMatrix2",
}
#: the rendering tags of a colour calibration: they go with its ColorMatrix1 (copied with it or not at all)
COLOUR_CALIBRATION = frozenset({50722, 50723, 50724, 50778, 50779, 50931, 50932, 50936, 50964, 50965})
#: raw-IFD opcode lists (DNG 1.3+: bad-pixel fixes, lens-shading GainMaps, lens warps), placed on the raw grid
OPCODE_TAGS = {51008: "OpcodeList1", 51009: "OpcodeList2", 51022: "OpcodeList3"}


def _raw_page(ifd0) -> tuple[object, str]:
    """(page, name) of a TIFF's raw image: IFD0 if it is the main image, else its first SubIFD with
    NewSubfileType 0 (``"SubIFD<n>"``), else IFD0."""
    if int(ifd0.subfiletype) != 0:
        for i, sub in enumerate(getattr(ifd0, "pages", None) or []):
            if int(sub.subfiletype) == 0:
                return sub, f"SubIFD{i}"
    return ifd0, "IFD0"


def read_rendering_tags(
    path: str | os.PathLike, opcodes: Collection[int] = tuple(OPCODE_TAGS)
) -> list[tuple[int, int, int, object]]:
    """The source DNG's :data:`RENDERING_TAGS` (IFD0) and those of its raw IFD's :data:`OPCODE_TAGS` whose
    codes are in ``opcodes``, as ``(code, TIFF type, count, value)`` — tifffile's ``extratags`` form, for
    :func:`rawrcl.io.dng.write_dng` (``copied_tags``). Empty for a file that is not a DNG or cannot be read.
    An opcode list's coordinates refer to its stage's grid (OpcodeList1: the whole stored image, masked
    areas included; 2 and 3: the ActiveArea): pass only those that match the output's grid."""
    import tifffile

    try:
        with _quiet_tifffile(), tifffile.TiffFile(path) as tif:
            ifd0 = tif.pages[0]
            if 50706 not in ifd0.tags:  # DNGVersion
                return []
            return _rendering_values(ifd0, _raw_page(ifd0)[0], opcodes)
    except Exception:  # best effort: an unreadable tag is not copied
        return []


def _rendering_values(ifd0, raw_page, opcodes: Collection[int]) -> list[tuple[int, int, int, object]]:
    """:func:`read_rendering_tags` of an open DNG's IFD0 and raw page."""
    out: list[tuple[int, int, int, object]] = []
    for page, codes in ((ifd0, RENDERING_TAGS), (raw_page, [c for c in OPCODE_TAGS if c in opcodes])):
        for code in codes:
            tag = page.tags.get(code)
            if tag is not None:
                out.append((code, int(tag.dtype), int(tag.count), tag.value))
    return out


def read_dng_tags(path: str | os.PathLike, *, rendering: bool = True) -> dict:
    """Read the DNG/TIFF tags rawrcl uses, from IFD0 and the raw (NewSubfileType 0) SubIFD.

    Works on any TIFF-based file, including linear (non-CFA) DNGs and files whose pixel data is
    missing. Values: rationals as floats, matrices as 3×3 lists, ``noise_profile`` as a list of
    (S, O) pairs in [0, 1] units, levels in raw DN.

    Returns
    -------
    dict with ``is_tiff`` (False, and nothing else, for a file tifffile cannot parse), ``is_dng``,
    ``raw_ifd`` ("IFD0" or "SubIFD<n>"), ``photometric``, ``samples_per_pixel`` and ``shape`` of the
    raw IFD, ``data_problem`` (:func:`data_layout_problem`: a one-line reason when the declared pixel
    data is truncated, missing or of an absurd size; :func:`read_raw` refuses such files), and whichever
    of make, model, unique_camera_model, dng_version, iso, exposure_time, black_level, white_level,
    cfa_pattern, cfa_repeat_pattern_dim, color_matrix_1/2, baseline_exposure, calibration_illuminant_1/2,
    as_shot_neutral, noise_profile are present (raw IFD values take precedence over IFD0 ones),
    ``linearization_table`` as (TIFF type name, count) when the raw IFD has one, the raw IFD's TIFF
    ``compression`` code; for a DNG
    also ``rendering_tags``: :func:`read_rendering_tags` with every opcode list, read in the same pass
    (``rendering=False``: not read — for callers that only need levels, pattern and noise metadata).

    Raises
    ------
    RawrclError if the file does not exist or cannot be opened.
    """
    import tifffile

    p = Path(path)
    if not p.is_file():
        raise RawrclError(f"{p}: no such file")
    with _quiet_tifffile():
        return _read_tags(p, tifffile, rendering)


def _read_tags(p: Path, tifffile, rendering: bool) -> dict:
    """:func:`read_dng_tags` after the existence check (``tifffile`` passed in, imported lazily)."""
    try:
        tif = tifffile.TiffFile(p)
    except PermissionError as exc:
        raise RawrclError(f"{p}: cannot open ({exc.strerror})") from exc
    except Exception:
        return {"is_tiff": False}
    try:
        with tif:
            try:
                problem = data_layout_problem(tif, p.stat().st_size)
            except Exception:  # a page tifffile cannot parse: LibRaw decides
                problem = None
            ifd0 = tif.pages[0]
            out: dict = {"is_tiff": True}
            out.update(_page_tags(ifd0))
            exif = ifd0.tags.get(34665)
            if exif is not None and isinstance(exif.value, dict):
                if "ISOSpeedRatings" in exif.value and "iso" not in out:
                    iso = exif.value["ISOSpeedRatings"]
                    out["iso"] = iso[0] if isinstance(iso, (tuple, list)) else iso
                if "ExposureTime" in exif.value and "exposure_time" not in out:
                    et = exif.value["ExposureTime"]
                    out["exposure_time"] = et[0] / et[1] if isinstance(et, (tuple, list)) else et
                if "ISOSpeed" in exif.value and "iso_speed" not in out:
                    out["iso_speed"] = exif.value["ISOSpeed"]
            if isinstance(out.get("exposure_time"), list):
                out["exposure_time"] = out["exposure_time"][0]
            # the raw image: IFD0 if it is the main image, else the first SubIFD with NewSubfileType 0
            raw_page, raw_name = _raw_page(ifd0)
            if raw_page is not ifd0:
                out.update(_page_tags(raw_page))
            out["raw_ifd"] = raw_name
            out["photometric"] = int(raw_page.photometric)
            out["samples_per_pixel"] = int(raw_page.samplesperpixel)
            out["shape"] = [int(s) for s in raw_page.shape]
            out["compression"] = int(raw_page.compression)
            table = raw_page.tags.get(50712)  # LinearizationTable: its layout (LibRaw applies the values)
            if table is not None:
                kind = getattr(table.dtype, "name", str(table.dtype))  # "SHORT", "LONG", …
                out["linearization_table"] = (kind, int(table.count))
            if rendering and 50706 in ifd0.tags:  # a DNG: what a denoised copy carries over
                try:
                    out["rendering_tags"] = _rendering_values(ifd0, raw_page, OPCODE_TAGS)
                except Exception:  # best effort: an unreadable tag is not copied
                    out["rendering_tags"] = []
            if problem is not None:
                out["data_problem"] = problem
    except RawrclError:
        raise
    except Exception:
        return {"is_tiff": False}
    out["is_dng"] = "dng_version" in out
    for key in ("color_matrix_1", "color_matrix_2"):
        m = out.get(key)
        try:
            out[key] = [list(map(float, m[i : i + 3])) for i in (0, 3, 6)]  # first 3 camera rows
        except (TypeError, ValueError, IndexError):  # absent, too short or not numbers
            out.pop(key, None)
    if "noise_profile" in out:
        try:
            prof = [float(v) for v in np.ravel(out["noise_profile"])]
        except (TypeError, ValueError):
            prof = []
        # a corrupt profile is no profile: non-finite, a negative or absurd (> 1: a noise std above full
        # scale) value, no noise at all (every plane under MIN_PROFILE_VAR at mid-grey), or a count DNG
        # readers cannot map (1 pair, one per plane, or one per 2×2 position);
        # a negative offset O is kept (the variance λshot·x + O is clamped at 0 where it is used). Floating-
        # point data is converted to integers by LibRaw with a scale of its own, which the profile's units do
        # not follow: its profile is not used either (the image estimate serves instead).
        shots, offsets = prof[0::2], prof[1::2]
        floating = 3 in np.ravel(out.get("sample_format", 1))  # LibRaw rescales float data: units unknown
        if (
            floating
            or not all(math.isfinite(v) for v in prof)
            or len(prof) // 2 not in (1, 3, 4)
            or any(not 0 <= v <= MAX_PROFILE for v in shots)
            or any(abs(v) > MAX_PROFILE for v in offsets)
            or max((0.18 * a + b for a, b in zip(shots, offsets, strict=False)), default=0.0)
            < MIN_PROFILE_VAR
        ):
            out["noise_profile_invalid"] = prof
            prof = []
        out["noise_profile"] = [(prof[i], prof[i + 1]) for i in range(0, len(prof) - 1, 2)] or None
        if out["noise_profile"] is None:
            del out["noise_profile"]
    for key in (
        "iso",
        "iso_speed",
        "white_level",
        "baseline_exposure",
        "calibration_illuminant_1",
        "calibration_illuminant_2",
    ):
        v = out.get(key)
        if isinstance(v, list):
            out[key] = v[0] if v else None
    try:  # ISOSpeedRatings (a SHORT) saturates at 65535: the ISOSpeed tag holds higher values (EXIF 2.3)
        if out.get("iso_speed") and (out.get("iso") is None or float(out["iso"]) >= 65535):
            out["iso"] = out["iso_speed"]
    except (TypeError, ValueError):
        pass
    try:
        if not float(out.get("white_level", 1)) > 0:  # invalid; LibRaw reads the file with its own default
            out.pop("white_level")
    except (TypeError, ValueError):
        out.pop("white_level", None)
    return out


def read_noise_profile(path: str | os.PathLike) -> list[tuple[float, float]] | None:
    """The DNG ``NoiseProfile`` (tag 51041) of a file: list of (S, O) pairs, [0, 1] units
    (variance = S·x + O; one pair for all planes or one per colour plane), or None if absent or the
    file is not TIFF-based. Works on non-CFA (linear) DNGs too.

    Raises :class:`RawrclError` if the file does not exist or cannot be opened.
    """
    return read_dng_tags(path, rendering=False).get("noise_profile")


# --------------------------------------------------------------------------------------------------
# RAW reading (rawpy/LibRaw)
