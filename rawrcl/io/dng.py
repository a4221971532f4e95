"""Minimal Bayer DNG writer (tifffile): :func:`write_dng`.

The file is a single-IFD DNG (IFD0 holds the uncompressed 16-bit CFA image, which DNG readers such
as LibRaw/rawpy and Adobe software accept), with the tags rawrcl needs to round-trip its data:
CFARepeatPatternDim, CFAPattern, CFAPlaneColor, CFALayout, BlackLevelRepeatDim, BlackLevel,
WhiteLevel, ColorMatrix1 (+ CalibrationIlluminant1 = D65), AsShotNeutral, ISOSpeedRatings,
ExposureTime, NoiseProfile, DNGVersion, DNGBackwardVersion, UniqueCameraModel, Make, Model.

Units: pixel values and levels are raw DN; ``noise_profile`` (S, O) pairs are in [0, 1] units after
black/white level (DNG semantics: variance = S·x + O).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import tifffile

from rawrcl.cfa import check_pattern
from rawrcl.errors import RawrclError
from rawrcl.io.files import atomic_path

# TIFF/DNG tag codes
NEW_SUBFILE_TYPE = 254
MAKE = 271
MODEL = 272
ORIENTATION = 274
DEFAULT_CROP_ORIGIN = 50719
DEFAULT_CROP_SIZE = 50720
CFA_REPEAT_PATTERN_DIM = 33421
CFA_PATTERN = 33422
EXPOSURE_TIME = 33434
ISO_SPEED_RATINGS = 34855
SENSITIVITY_TYPE = 34864
NOISE_REDUCTION_APPLIED = 50935
ISO_SPEED = 34867
DNG_VERSION = 50706
DNG_BACKWARD_VERSION = 50707
UNIQUE_CAMERA_MODEL = 50708
CFA_PLANE_COLOR = 50710
CFA_LAYOUT = 50711
BLACK_LEVEL_REPEAT_DIM = 50713
BLACK_LEVEL = 50714
WHITE_LEVEL = 50717
COLOR_MATRIX_1 = 50721
AS_SHOT_NEUTRAL = 50728
CALIBRATION_ILLUMINANT_1 = 50778
NOISE_PROFILE = 51041

PHOTOMETRIC_CFA = 32803
MIN_SIZE = 22  # LibRaw (like dcraw) does not read images smaller than 22×22
MAX_SIZE = 64000  # nor images with a side longer than 64000
_CFA_CODE = {"R": 0, "G": 1, "B": 2}
_D65 = 21  # EXIF LightSource code


def _rational(values: Sequence[float], signed: bool, denominator: int = 1_000_000) -> list[int]:
    """Flatten floats into (numerator, denominator) pairs for tifffile's RATIONAL/SRATIONAL."""
    out: list[int] = []
    limit = 2**31 - 1 if signed else 2**32 - 1
    for v in values:
        f = Fraction(float(v)).limit_denominator(denominator)
        num, den = f.numerator, f.denominator
        while abs(num) > limit or den > limit:  # keep within 32 bits
            num, den = num // 2, max(den // 2, 1)
        if not signed and num < 0:
            raise RawrclError(f"negative value {v} for an unsigned rational DNG tag")
        out += [int(num), int(den)]
    return out


def write_dng(
    path: str | os.PathLike,
    cfa_uint16: np.ndarray,
    pattern: str,
    black_level: float | Sequence[float],
    white_level: float,
    *,
    wb: Sequence[float] | None = None,
    color_matrix: np.ndarray | None = None,
    iso: float | None = None,
    exposure_time: float | None = None,
    noise_profile: Sequence[tuple[float, float]] | tuple[float, float] | None = None,
    make: str = "rawrcl",
    model: str = "simulated",
    unique_camera_model: str | None = None,
    orientation: int | None = None,
    default_crop: tuple[Sequence[float], Sequence[float]] | None = None,
    copied_tags: Sequence[tuple[int, int, int, object]] = (),
    noise_reduction_applied: float | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a Bayer mosaic as an uncompressed DNG, atomically.

    Parameters
    ----------
    path : output file (``.dng``).
    cfa_uint16 : (H, W) uint16 raw DN, 22 ≤ H, W ≤ 64000 (what LibRaw reads); other integer dtypes are
        accepted when their values fit in uint16.
    pattern : phase of ``cfa_uint16[0:2, 0:2]``: "RGGB" | "BGGR" | "GRBG" | "GBRG".
    black_level : one value, or 4 values per position of the 2×2 tile (row-major), raw DN.
    white_level : raw DN (≤ 65535).
    wb : camera white-balance multipliers (R, G, B) applied to camera RGB; stored as
        AsShotNeutral = 1/wb (normalised so G = 1). None: no AsShotNeutral.
    color_matrix : (3, 3) XYZ(D65) → camera matrix, stored as ColorMatrix1 with illuminant D65.
    iso : ISOSpeedRatings; exposure_time : seconds.
    noise_profile : (S, O) or a list of (S, O) pairs (one per CFA colour plane), [0, 1] units.
    make, model, unique_camera_model : identification strings (UniqueCameraModel defaults to
        "make model").
    orientation : TIFF Orientation (1–8: how to turn the stored image for display; 1 or None: as stored).
    default_crop : ((x, y), (width, height)) of the DNG DefaultCrop (the part a raw developer shows, px of the
        mosaic); None: none (the whole mosaic).
    copied_tags : a source DNG's rendering tags as ``(code, TIFF type, count, value)``
        (:func:`rawrcl.io.tags.read_rendering_tags`; codes of :data:`~rawrcl.io.tags.RENDERING_TAGS` and
        :data:`~rawrcl.io.tags.OPCODE_TAGS` only), written unchanged; a copied ColorMatrix1 replaces
        ``color_matrix`` (the source's whole colour calibration is kept together).
    noise_reduction_applied : the DNG NoiseReductionApplied tag, 0–1 (1: "the ideal amount" — a raw
        developer should add none of its own); None: not written.
    overwrite : replace an existing file; otherwise raise :class:`RawrclError`.

    Returns
    -------
    The path written.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise RawrclError(f"{path}: already exists (use --force / overwrite=True to replace it)")
    pattern = check_pattern(pattern)
    cfa = np.asarray(cfa_uint16)
    if cfa.ndim != 2 or min(cfa.shape) < MIN_SIZE or max(cfa.shape) > MAX_SIZE:
        raise RawrclError(
            f"{path}: write_dng needs a (H, W) mosaic with {MIN_SIZE} ≤ H, W ≤ {MAX_SIZE} (LibRaw reads no "
            f"other size), got shape {cfa.shape}"
        )
    if cfa.dtype != np.uint16:
        if not np.issubdtype(cfa.dtype, np.integer) or cfa.min() < 0 or cfa.max() > 65535:
            raise RawrclError(f"{path}: CFA data must be uint16 raw DN, got dtype {cfa.dtype}")
        cfa = cfa.astype(np.uint16)
    blacks = (
        np.broadcast_to(np.asarray(black_level, dtype=np.float64).ravel(), (4,))
        if np.size(black_level) in (1, 4)
        else None
    )
    if blacks is None:
        raise RawrclError(f"{path}: black_level must be one value or 4 (one per 2×2 position)")
    white = float(white_level)
    if not (0 < white <= 65535) or np.any(blacks < 0) or np.any(blacks >= white):
        raise RawrclError(f"{path}: need 0 ≤ black < white ≤ 65535, got black {list(blacks)}, white {white}")

    tags: list[tuple] = [
        (CFA_REPEAT_PATTERN_DIM, "H", 2, (2, 2), True),
        (CFA_PATTERN, "B", 4, tuple(_CFA_CODE[c] for c in pattern), True),
        (CFA_PLANE_COLOR, "B", 3, (0, 1, 2), True),
        (CFA_LAYOUT, "H", 1, 1, True),
        (DNG_VERSION, "B", 4, (1, 4, 0, 0), True),
        (DNG_BACKWARD_VERSION, "B", 4, (1, 1, 0, 0), True),
        (UNIQUE_CAMERA_MODEL, "s", 0, unique_camera_model or f"{make} {model}".strip() or "unknown", True),
        (MAKE, "s", 0, make or "unknown", True),
        (MODEL, "s", 0, model or "unknown", True),
        (BLACK_LEVEL_REPEAT_DIM, "H", 2, (2, 2), True),
        (WHITE_LEVEL, "I", 1, int(round(white)), True),
    ]
    if np.all(blacks == np.round(blacks)):
        tags.append((BLACK_LEVEL, "I", 4, tuple(int(b) for b in blacks), True))
    else:
        tags.append((BLACK_LEVEL, "2I", 4, tuple(_rational(blacks, signed=False)), True))
    from rawrcl.io.tags import COLOUR_CALIBRATION, OPCODE_TAGS, RENDERING_TAGS

    copied = list(copied_tags)
    bad = [c[0] for c in copied if c[0] not in RENDERING_TAGS and c[0] not in OPCODE_TAGS]
    if bad:
        raise RawrclError(f"{path}: copied_tags may hold DNG rendering tags only, got codes {bad}")
    if any(c[0] == COLOR_MATRIX_1 for c in copied):
        color_matrix = None  # the source's colour calibration, as a whole
    else:  # no calibration to go with: its illuminants, forward matrices, … would describe ours wrongly
        copied = [c for c in copied if c[0] not in COLOUR_CALIBRATION]
    tags += [(code, dtype, count, value, True) for code, dtype, count, value in copied]
    if noise_reduction_applied is not None:
        nr = float(noise_reduction_applied)
        if not 0 <= nr <= 1:
            raise RawrclError(f"{path}: noise_reduction_applied must be in [0, 1], got {nr}")
        nra = _rational([nr], signed=False)
        tags.append((NOISE_REDUCTION_APPLIED, "2I", 1, tuple(nra), True))
    if color_matrix is not None:
        m = np.asarray(color_matrix, dtype=np.float64)
        if m.shape != (3, 3) or not np.all(np.isfinite(m)):
            raise RawrclError(f"{path}: color_matrix must be a finite 3×3 matrix, got shape {m.shape}")
        tags.append((COLOR_MATRIX_1, "2i", 9, tuple(_rational(m.ravel(), signed=True)), True))
        tags.append((CALIBRATION_ILLUMINANT_1, "H", 1, _D65, True))
    if wb is not None:
        w = np.asarray(wb, dtype=np.float64).ravel()
        if w.shape != (3,) or np.any(~np.isfinite(w)) or np.any(w <= 0):
            raise RawrclError(f"{path}: wb must be 3 positive multipliers (R, G, B), got {wb!r}")
        neutral = (1.0 / w) / (1.0 / w[1])
        tags.append((AS_SHOT_NEUTRAL, "2I", 3, tuple(_rational(neutral, signed=False)), True))
    if orientation is not None:
        if int(orientation) not in range(1, 9):
            raise RawrclError(f"{path}: orientation must be a TIFF Orientation 1–8, got {orientation!r}")
        tags.append((ORIENTATION, "H", 1, int(orientation), True))
    if default_crop is not None:
        (cx, cy), (cw, ch) = (tuple(float(v) for v in pair) for pair in default_crop)
        h, w = cfa.shape
        if not (0 <= cx and 0 <= cy and 0 < cw and 0 < ch and cx + cw <= w and cy + ch <= h):
            raise RawrclError(f"{path}: default_crop {default_crop!r} does not fit a {w}×{h} mosaic")
        tags.append((DEFAULT_CROP_ORIGIN, "2I", 2, tuple(_rational([cx, cy], signed=False)), True))
        tags.append((DEFAULT_CROP_SIZE, "2I", 2, tuple(_rational([cw, ch], signed=False)), True))
    if iso is not None:
        iso_int = int(round(float(iso)))
        if not 0 < iso_int < 2**32:
            raise RawrclError(f"{path}: iso must be a positive number below 2**32, got {iso!r}")
        # ISOSpeedRatings is a SHORT: above 65535 it holds 65535 and ISOSpeed (LONG) the value (EXIF 2.3)
        tags.append((ISO_SPEED_RATINGS, "H", 1, min(iso_int, 65535), True))
        if iso_int > 65535:
            tags.append((SENSITIVITY_TYPE, "H", 1, 3, True))
            tags.append((ISO_SPEED, "I", 1, iso_int, True))
    if exposure_time is not None:
        tags.append((EXPOSURE_TIME, "2I", 1, tuple(_rational([exposure_time], signed=False)), True))
    if noise_profile is not None:
        prof = np.asarray(noise_profile, dtype=np.float64).reshape(-1, 2)
        if np.any(~np.isfinite(prof)) or np.any(prof < 0):
            raise RawrclError(f"{path}: noise_profile values must be finite and ≥ 0, got {noise_profile!r}")
        if prof.shape[0] not in (1, 3):
            raise RawrclError(f"{path}: noise_profile needs 1 or 3 (S, O) pairs, got {prof.shape[0]}")
        tags.append((NOISE_PROFILE, "d", prof.size, tuple(float(v) for v in prof.ravel()), True))

    with atomic_path(path) as tmp:
        tifffile.imwrite(
            tmp,
            cfa,
            photometric=PHOTOMETRIC_CFA,
            subfiletype=0,
            compression=None,
            planarconfig=None,
            metadata=None,
            software="rawrcl",
            extratags=tags,
        )
    return path
