"""(λshot, λread) from a file's metadata: the DNG ``NoiseProfile`` tag (51041).

DNG semantics: the noise of the linear raw signal x ∈ [0, 1] (after linearisation, black-level
subtraction and scaling by the white level of the *file*) has standard deviation
N(x) = sqrt(S·x + O), so S = λshot ([0, 1] units) and O = λread ([0, 1]² units).

Plane mapping (canonical rawrcl planes R, G1, G2, B):

- 1 pair  → the same (S, O) for all four planes;
- 3 pairs → one per colour plane in DNG colour-plane order (CFAPlaneColor, normally R, G, B):
  R → R, G → G1 and G2, B → B;
- 4 pairs → one per CFA position of the 2×2 tile in row-major (file) order — non-standard (DNG
  specifies one pair per colour plane) but written by some tools; mapped through the file's Bayer
  phase, e.g. for GRBG the first pair is G1, the second R, the third B, the fourth G2.

Normalisation: rawrcl normalises with the black/white levels LibRaw reports. When those differ from
the DNG's own BlackLevel/WhiteLevel tags (which the NoiseProfile refers to), the pairs are converted:
with x_file = k·x_rawrcl + c, k = (W_r − B_r)/(W_f − B_f), c = (B_r − B_f)/(W_f − B_f),
S_rawrcl = S/k and O_rawrcl = (O + S·c)/k²  (see :func:`convert_noise_profile`). BaselineExposure
is a rendering hint applied after raw processing; rawrcl never applies it to RAW values, so it does
not change the NoiseProfile — it is only reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rawrcl.cfa import CHANNELS, check_pattern, positions
from rawrcl.errors import RawrclError

from .result import CalibrationResult


def map_noise_profile(
    pairs: Sequence[tuple[float, float]], pattern: str = "RGGB"
) -> dict[str, tuple[float, float]]:
    """Map DNG NoiseProfile pairs to the canonical planes R, G1, G2, B (see the module docstring).

    Parameters
    ----------
    pairs : 1, 3 or 4 (S, O) pairs, [0, 1] units.
    pattern : the file's Bayer phase (only used for 4 pairs).

    Returns
    -------
    dict plane → (λshot, λread).
    """
    p = [(float(s), float(o)) for s, o in pairs]
    if len(p) == 1:
        return {c: p[0] for c in CHANNELS}
    if len(p) == 3:
        return {"R": p[0], "G1": p[1], "G2": p[1], "B": p[2]}
    if len(p) == 4:
        pos = positions(check_pattern(pattern))
        return {c: p[pos[c][0] * 2 + pos[c][1]] for c in CHANNELS}
    raise RawrclError(
        f"NoiseProfile with {len(p)} (S, O) pairs: expected 1, 3 (R, G, B) or 4 (CFA positions)"
    )


def convert_noise_profile(
    pair: tuple[float, float],
    file_black: float,
    file_white: float,
    black: float,
    white: float,
) -> tuple[float, float]:
    """Convert one (S, O) pair from the file's normalisation to another one.

    The file defines x_f = (raw − file_black)/(file_white − file_black); rawrcl uses
    x = (raw − black)/(white − black). Variances scale with 1/k² where x_f = k·x + c.

    Returns (λshot, λread) for x, [0, 1] units.
    """
    s, o = float(pair[0]), float(pair[1])
    den_f = float(file_white) - float(file_black)
    den = float(white) - float(black)
    if den_f <= 0 or den <= 0:
        raise RawrclError(f"invalid black/white levels ({file_black}, {file_white}) → ({black}, {white})")
    k = den / den_f
    c = (float(black) - float(file_black)) / den_f
    return s / k, max(o + s * c, 0.0) / k**2


def _as4(v) -> list[float] | None:
    if v is None:
        return None
    a = np.asarray(v, dtype=np.float64).ravel()
    if a.size == 1:
        return [float(a[0])] * 4
    if a.size >= 4:
        return [float(t) for t in a[:4]]
    if a.size == 2:  # BlackLevelRepeatDim 1×2 → per column
        return [float(a[0]), float(a[1]), float(a[0]), float(a[1])]
    return [float(a.mean())] * 4


def metadata_from_tags(
    tags: dict,
    *,
    pattern: str = "RGGB",
    black_level: Sequence[float] | None = None,
    white_level: float | None = None,
    path: str | None = None,
    file_black_level: Sequence[float] | None = None,
) -> CalibrationResult:
    """Calibration from already-read DNG tags (``rawrcl.io.tags.read_dng_tags``).

    ``black_level`` (4 values, per 2×2 position, DN) and ``white_level`` are the levels rawrcl
    normalised the mosaic with (``RawImage``); when they differ from the tags' BlackLevel/WhiteLevel,
    the profile is converted. ``file_black_level``: the tags' black level already placed on that grid (4
    values; :func:`metadata_of_raw` passes it) — the BlackLevel pattern's origin is the ActiveArea's, not
    the grid's. Status ``no-metadata`` (and empty ``per_plane``) when there is no NoiseProfile.
    """
    res = CalibrationResult(path=path, method="metadata")
    res.iso = _float_or_none(tags.get("iso"))
    res.make = str(tags.get("make", "") or "")
    res.model = str(tags.get("model", "") or "")
    prof = tags.get("noise_profile")
    if not prof:
        res.status = "no-metadata"
        bad = tags.get("noise_profile_invalid")
        res.extra["note"] = (
            "the file has no DNG NoiseProfile (tag 51041)"
            if bad is None
            else f"the file's DNG NoiseProfile {[round(float(v), 6) for v in bad]} is implausible: not used"
        )
        return res
    res.extra["noise_profile_raw"] = [[float(s), float(o)] for s, o in prof]
    planes = map_noise_profile(prof, pattern)
    fb = _as4(file_black_level if file_black_level is not None else tags.get("black_level"))
    fw = _float_or_none(tags.get("white_level"))
    if black_level is not None and white_level is not None and fw is not None:
        fb = fb or [0.0] * 4
        rb = _as4(black_level)
        pos = positions(check_pattern(pattern))
        converted = {}
        changed = False
        for c in CHANNELS:
            i = pos[c][0] * 2 + pos[c][1]
            if abs(fb[i] - rb[i]) > 1e-6 or abs(fw - float(white_level)) > 1e-6:
                changed = True
            try:
                converted[c] = convert_noise_profile(planes[c], fb[i], fw, rb[i], float(white_level))
            except RawrclError as err:  # name the file: the levels are its tags'
                raise RawrclError(f"{path or 'file'}: NoiseProfile not usable: {err}") from None
        if changed:
            res.extra["converted"] = {
                "file_black_level": fb,
                "file_white_level": fw,
                "black_level": rb,
                "white_level": float(white_level),
            }
        planes = converted
    res.per_plane = planes
    res.metadata = dict(planes)
    res.extra["pairs"] = len(prof)
    res.extra["mapping"] = {1: "one pair for all planes", 3: "R, G (G1 and G2), B", 4: "per CFA position"}[
        len(prof)
    ]
    if tags.get("baseline_exposure") is not None:
        res.extra["baseline_exposure"] = tags.get("baseline_exposure")
    return res


def metadata_of_raw(tags: dict, raw, path: str | None = None) -> CalibrationResult:
    """:func:`metadata_from_tags` in the units rawrcl normalised ``raw`` (a :class:`~rawrcl.io.raw.RawImage`)
    with — its pattern and levels, the tags' black placed on its grid (``extra["dng"]["black_level_grid"]``) —
    or, with ``raw`` None (pixels unreadable), in the file's own."""
    if raw is None:
        return metadata_from_tags(tags, path=path)
    from rawrcl.io.raw import dng_tags_of

    file_black = dng_tags_of(raw).get("black_level_grid")
    return metadata_from_tags(
        tags,
        pattern=raw.pattern,
        black_level=raw.black_level,
        white_level=raw.white_level,
        path=path,
        file_black_level=file_black,
    )


def _float_or_none(v) -> float | None:
    try:
        if isinstance(v, (list, tuple)):
            v = v[0]
        f = float(v)
    except (TypeError, ValueError, IndexError):
        return None
    return f if np.isfinite(f) else None


def calibrate_metadata(path: str | Path, raw=None) -> CalibrationResult:
    """Noise parameters from a file's DNG NoiseProfile, in rawrcl's [0, 1] units, per plane.

    Parameters
    ----------
    path : a RAW file; non-CFA (linear) DNGs are accepted here (only metadata is read).
    raw : the file's :class:`rawrcl.io.raw.RawImage` if already read (used for the pattern and the
        black/white levels rawrcl normalises with). None: read it when the file is a Bayer RAW.

    Returns
    -------
    :class:`CalibrationResult` with method ``"metadata"``; status ``"no-metadata"`` when absent.
    """
    from rawrcl.io.raw import dng_tags_of
    from rawrcl.io.tags import read_dng_tags

    # a given RawImage carries its file's tags
    tags = dng_tags_of(raw) or read_dng_tags(path, rendering=False)
    if raw is None and tags.get("noise_profile"):
        try:
            from rawrcl.io.raw import read_raw

            raw = read_raw(path)
        except RawrclError:
            raw = None  # linear DNG or stripped pixels: use the file's own normalisation
    res = metadata_of_raw(tags, raw, str(path))
    if raw is not None:
        res.iso = res.iso if res.iso is not None else raw.iso
        res.make = res.make or raw.make
        res.model = res.model or raw.model
    return res
