"""Writers of inference outputs: atomic, never overwriting unless asked (images, denoised DNGs, CFA TIFFs)."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path
from rawrcl.io.raw import dng_tags_of


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (same suffix); on success ``os.replace`` it onto ``path``.

    Raises :class:`RawrclError` if ``path`` exists and ``overwrite`` is False. The temporary file is
    removed on failure, so an interrupted write never leaves a half-written output.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise RawrclError(f"{path}: exists (use --force to overwrite)")
    if path.is_dir():
        raise RawrclError(f"{path}: is a folder")
    with atomic_path(path, suffix=f".tmp{path.suffix}") as tmp:
        yield tmp


#: Image rows converted per step by :func:`to_uint` and the JDD rendering: the temporaries of a band stay in
#: cache instead of 4-6 full-size arrays (page-faulted in by a fresh process: 1.2 s at 12 MP, 0.3 s banded).
BAND_ROWS = 64


def _check_finite(a: np.ndarray) -> None:
    """Refuse to write a result holding NaN or ±inf (they would be written as black or white)."""
    if not np.isfinite(a).all():
        raise RawrclError("the result holds non-finite values (NaN/inf); nothing was written — check --noise")


def to_uint(rgb: np.ndarray, bits: int) -> np.ndarray:
    """(3, H, W) float [0, 1] → (H, W, 3) uint8/uint16 (clipped, rounded), in bands of rows."""
    top = (1 << bits) - 1
    rgb = np.asarray(rgb)
    out = np.empty((*rgb.shape[1:], 3), dtype=np.uint8 if bits == 8 else np.uint16)
    for r0 in range(0, rgb.shape[1], BAND_ROWS):
        a = np.asarray(rgb[:, r0 : r0 + BAND_ROWS], dtype=np.float32)
        _check_finite(a)
        a = np.clip(a, 0, 1)
        a *= top
        a += 0.5
        out[r0 : r0 + BAND_ROWS] = a.transpose(1, 2, 0)  # truncation after +0.5: rounding
    return out


#: TIFF compression of every written TIFF: Deflate level 1 after horizontal differencing (TIFF predictor 2;
#: read by libtiff, OpenCV, Pillow, tifffile). On a 12 MP 16-bit RGB output: 1.2 s and 49 MB, against 2.1 s
#: and 66.5 MB for default-level Deflate without the predictor (72 MB uncompressed).
#: Strips are compressed on up to 4 threads (zlib releases the GIL): 0.8 s instead of 1.4 s on 2 cores, the
#: same bytes; with ``imagecodecs`` installed (a dependency) tifffile uses its faster Deflate: 0.4 s.
TIFF_OPTIONS = {
    "compression": "zlib",
    "compressionargs": {"level": 1},
    "predictor": True,
    "maxworkers": min(
        4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ),
}


def write_image(
    path: str | os.PathLike,
    rgb: np.ndarray,
    bits: int = 16,
    overwrite: bool = False,
    icc: bytes | None = None,
    camera: tuple[str, str] | None = None,
) -> Path:
    """Write a (3, H, W) float [0, 1] image as TIFF (``.tif``/``.tiff``, 16-bit) or PNG (8 or 16-bit).

    ``icc``, an ICC profile (:mod:`rawrcl.io.icc`): the TIFF's ICCProfile tag or the PNG's iCCP chunk. TIFF
    only: ``camera``, the source's (make, model), written as the Make and Model tags (empty strings are left
    out); Software "rawrcl". Atomic; refuses to overwrite unless ``overwrite``. Returns the path.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".tif", ".tiff"):
        import tifffile

        with atomic_output(path, overwrite) as tmp:
            make, model = camera or ("", "")
            names = [(code, "s", 0, v, True) for code, v in ((271, make), (272, model)) if v]
            tifffile.imwrite(
                tmp,
                to_uint(rgb, 16),
                photometric="rgb",
                iccprofile=icc,
                software="rawrcl",
                extratags=names,
                **TIFF_OPTIONS,
            )
    elif suffix == ".png":
        import cv2

        data = to_uint(rgb, bits)[..., ::-1]  # RGB → BGR for OpenCV
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(data))
        if not ok:
            raise RawrclError(f"{path}: PNG encoding failed")
        with atomic_output(path, overwrite) as tmp:
            tmp.write_bytes(_with_icc_chunk(buf.tobytes(), icc) if icc else buf.tobytes())
    else:
        raise RawrclError(f"{path}: unsupported output format {suffix!r} (use .tiff or .png)")
    return path


def _with_icc_chunk(png: bytes, icc: bytes, name: bytes = b"ICC profile") -> bytes:
    """``png`` with an iCCP chunk (the profile, zlib-compressed) right after its IHDR chunk, where the PNG
    specification wants it (before PLTE and IDAT)."""
    import zlib

    ihdr_end = 8 + 4 + 4 + 13 + 4  # signature, then IHDR: length, type, 13 data bytes, CRC
    if png[12:16] != b"IHDR":
        raise RawrclError("PNG encoding: no IHDR chunk where expected")
    body = b"iCCP" + name + b"\0\0" + zlib.compress(icc, 9)  # name, terminator, compression method 0
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    return png[:ihdr_end] + chunk + png[ihdr_end:]


def requantize_cfa(
    cfa: np.ndarray, pattern: str, black_level: Sequence[float], white_level: float
) -> np.ndarray:
    """[0, 1] CFA → raw DN: ``black[pos] + x·(white − black[pos])``, rounded, clipped to [0, white].

    Shapes: (H, W) float → (H, W) uint16. ``black_level`` holds 4 values, one per position of the 2×2
    tile, row-major (the :class:`~rawrcl.io.raw.RawImage` convention).
    """
    cfa = np.asarray(cfa)
    black = np.asarray(black_level, dtype=np.float64).reshape(2, 2)
    h, w = cfa.shape
    top = min(float(white_level), 65535)
    rows = BAND_ROWS + BAND_ROWS % 2  # even: every band starts on the same Bayer row phase
    bl = np.tile(black, ((rows + 1) // 2, (w + 1) // 2))[:rows, :w]
    out = np.empty((h, w), dtype=np.uint16)
    for r0 in range(0, h, rows):  # in bands of rows: no full-size float64 temporaries
        band = np.asarray(cfa[r0 : r0 + rows], dtype=np.float64)
        _check_finite(band)
        b = bl[: len(band)]
        dn = band * (float(white_level) - b)
        dn += b
        out[r0 : r0 + rows] = np.clip(np.rint(dn, out=dn), 0, top, out=dn)
    return out


def write_denoised_dng(path: str | os.PathLike, raw, cfa: np.ndarray, overwrite: bool = False) -> Path:
    """Write a denoised CFA as a DNG carrying the source :class:`~rawrcl.io.raw.RawImage`'s pattern, size,
    black/white levels and metadata (white balance, colour matrix, ISO, noise profile, make/model,
    orientation; from a DNG source also its DefaultCrop and rendering tags — colour calibration, baseline
    exposure, opcode lists), with NoiseReductionApplied 1.

    ``cfa``: (H, W) float [0, 1] on the source's grid; re-quantised with :func:`requantize_cfa`.
    """
    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import orientation_of

    path = Path(path)
    if path.exists() and not overwrite:
        raise RawrclError(f"{path}: exists (use --force to overwrite)")
    if path.is_dir():
        raise RawrclError(f"{path}: is a folder")
    dn = requantize_cfa(cfa, raw.pattern, raw.black_level, raw.white_level)
    color_matrix = raw.xyz_to_cam if getattr(raw, "xyz_to_cam", None) is not None else None
    return write_dng(  # atomic itself, so a write error names the output, not a temporary file
        path,
        dn,
        raw.pattern,
        raw.black_level,
        raw.white_level,
        wb=raw.wb,
        color_matrix=color_matrix,
        iso=raw.iso,
        exposure_time=getattr(raw, "exposure_time", None),
        noise_profile=_profile_in_output_units(raw),
        make=raw.make,  # "" → write_dng's "unknown": the camera is not rawrcl's to name
        model=raw.model,
        unique_camera_model=_unique_camera_model(raw),
        orientation=orientation_of(raw),
        default_crop=_default_crop(raw, dn.shape),
        copied_tags=_rendering_tags(raw),
        noise_reduction_applied=1.0,
        overwrite=True,
    )


def _unique_camera_model(raw) -> str | None:
    """A DNG source's UniqueCameraModel (raw developers match camera profiles and presets on it), else None
    ("make model")."""
    name = str(dng_tags_of(raw).get("unique_camera_model") or "").strip()
    return name or None


def _rendering_tags(raw) -> list[tuple[int, int, int, object]]:
    """A DNG source's rendering tags for its denoised copy (read with the file's other tags, so a source gone
    by writing time loses nothing; from the source file for a RawImage made without them), the opcode lists
    whose coordinates still fit: OpcodeList2/3 (on the ActiveArea) when the output grid starts at its origin,
    OpcodeList1 (on the whole stored image) only when that origin is the image's (0, 0) too."""
    from rawrcl.io.tags import OPCODE_TAGS, read_rendering_tags

    tags = dng_tags_of(raw)
    extra = getattr(raw, "extra", None) or {}
    read = tags.get("rendering_tags")
    if not tags or (read is None and not getattr(raw, "path", None)):
        return []
    if read is None:
        read = read_rendering_tags(raw.path)
    try:
        aa = tuple(int(v) for v in (tags.get("active_area") or [0, 0])[:2])
        grid = tuple(int(v) for v in extra.get("margins") or (0, 0))
        opcodes = {51009, 51022} if grid == aa else set()
        if grid == aa == (0, 0):
            opcodes.add(51008)
    except (TypeError, ValueError):
        opcodes = set()
    return [t for t in read if t[0] not in OPCODE_TAGS or t[0] in opcodes]


def _default_crop(raw, shape: tuple[int, int]) -> tuple[list[float], list[float]] | None:
    """The source DNG's DefaultCrop ((x, y), (w, h); relative to its active area, which is the mosaic rawrcl
    reads) when it fits the written mosaic; None otherwise or for non-DNG sources."""
    tags = dng_tags_of(raw)
    try:
        origin = [float(v) for v in tags["default_crop_origin"]][:2]
        size = [float(v) for v in tags["default_crop_size"]][:2]
    except (KeyError, TypeError, ValueError):
        return None
    # DefaultCropOrigin is relative to the ActiveArea's top-left; LibRaw's grid may start further in (it
    # rounds an odd ActiveArea offset up to even)
    extra = getattr(raw, "extra", None) or {}
    top, left = (int(v) for v in (extra.get("margins") or (0, 0)))
    aa = tags.get("active_area") or [top, left]
    try:
        origin = [origin[0] - (left - int(aa[1])), origin[1] - (top - int(aa[0]))]
    except (TypeError, ValueError, IndexError):
        return None
    h, w = shape
    ok = len(origin) == len(size) == 2 and min(origin) >= 0 and min(size) > 0
    return (origin, size) if ok and origin[0] + size[0] <= w and origin[1] + size[1] <= h else None


def _profile_in_output_units(raw) -> list[tuple[float, float]] | None:
    """:func:`_profile_for_dng` of the source's NoiseProfile, converted to the levels the output is written in
    (rawrcl's, which may differ from the source's BlackLevel tag: a black measured by LibRaw in MaskedAreas,
    BlackLevelDelta means)."""
    pairs = _profile_for_dng(raw.noise_profile, raw.pattern)
    tags = dng_tags_of(raw)
    if not pairs or not tags:
        return pairs
    from rawrcl.calibration.metadata import metadata_of_raw

    res = metadata_of_raw({**tags, "noise_profile": raw.noise_profile}, raw)
    if "converted" not in res.extra or not res.per_plane:
        return pairs
    pl = res.per_plane
    green = tuple(float(v) for v in np.mean([pl["G1"], pl["G2"]], axis=0))
    return [tuple(map(float, pl["R"])), green, tuple(map(float, pl["B"]))]


def _profile_for_dng(profile, pattern: str) -> list[tuple[float, float]] | None:
    """A source NoiseProfile as a DNG with 3 colour planes stores it: 1 or 3 (S, O) pairs, O ≥ 0 (a negative
    offset read from a camera's tag is clamped, as everywhere it is used); 4 pairs (one per 2×2 position,
    row-major) become R, the mean of the two greens, B. None stays None."""
    from rawrcl.calibration.metadata import map_noise_profile

    if not profile:
        return None
    pairs = [(float(s), max(float(o), 0.0)) for s, o in profile]
    if len(pairs) == 4:
        planes = map_noise_profile(pairs, pattern)
        green = tuple(float(v) for v in np.mean([planes["G1"], planes["G2"]], axis=0))
        pairs = [planes["R"], green, planes["B"]]
    return pairs


def write_cfa_tiff(path: str | os.PathLike, raw, cfa: np.ndarray, overwrite: bool = False) -> Path:
    """Write the denoised CFA in raw DN (black/white range of the source) as a single-channel 16-bit TIFF
    (the sensor's grid and orientation: a mosaic is not turned for display)."""
    import tifffile

    dn = requantize_cfa(cfa, raw.pattern, raw.black_level, raw.white_level)
    with atomic_output(path, overwrite) as tmp:
        tifffile.imwrite(tmp, dn, photometric="minisblack", **TIFF_OPTIONS)
    return Path(path)
