"""File-level calibration: one RAW file → :class:`CalibrationResult` by metadata, image or auto."""

from __future__ import annotations

from pathlib import Path

from rawrcl.errors import RawrclError

from .metadata import metadata_of_raw
from .result import CalibrationResult
from .single_image import estimate_packed, packed_mosaic

METHODS = ("metadata", "image", "auto")


def calibrate_file(path: str | Path, method: str = "auto", **image_kwargs) -> CalibrationResult:
    """Noise parameters of one RAW file, [0, 1] units, per canonical plane R, G1, G2, B.

    Parameters
    ----------
    path : a RAW file (any format ``rawrcl.io.raw.read_raw`` reads). ``metadata`` also accepts
        non-CFA DNGs (only tags are read).
    method : ``"metadata"`` — the DNG NoiseProfile (status ``no-metadata`` and no parameters when
        absent); ``"image"`` — the single-image estimate (the metadata, if any, is attached for
        comparison); ``"auto"`` — metadata when present, else the image estimate (then
        ``extra["fallback"] = "no-metadata"``).
    image_kwargs : ``settings`` (:class:`EstimatorSettings`) and keyword overrides of it for the
        single-image estimate (:func:`rawrcl.calibration.estimate_mosaic`).

    Raises
    ------
    RawrclError for unreadable, non-Bayer (when pixels are needed), too small or saturated files.
    """
    from rawrcl.io.raw import dng_tags_of, read_raw
    from rawrcl.io.tags import read_dng_tags

    if method not in METHODS:
        raise RawrclError(f"unknown calibration method {method!r}; expected one of {', '.join(METHODS)}")
    p = Path(path)
    if not p.exists():
        raise RawrclError(f"{p}: no such file")
    if not p.is_file():
        raise RawrclError(f"{p}: not a file")
    # the image method reads the pixels anyway, a DNG's tags with them; else levels and noise metadata only
    raw = read_raw(p, clip=False) if method == "image" else None
    tags = dng_tags_of(raw) or read_dng_tags(p, rendering=False)
    has_meta = bool(tags.get("noise_profile"))
    if method == "metadata" or (method == "auto" and has_meta):
        pixels = ""
        if has_meta:
            try:
                raw = read_raw(p)
            except RawrclError as exc:
                raw = None  # linear DNG / stripped pixels: the profile is still valid in its own units
                pixels = str(exc).removeprefix(f"{p}: ")
        meta = _meta(tags, raw, p)
        if pixels:
            meta.extra["pixels_unread"] = pixels
        if method == "metadata" and not has_meta and not tags.get("is_tiff"):
            # not TIFF-based: make sure it is at least a readable RAW before saying "no metadata"
            raw = read_raw(p)
            meta.make, meta.model, meta.iso = raw.make or meta.make, raw.model or meta.model, raw.iso
        if meta.iso is None and raw is not None:
            meta.iso = raw.iso
        return meta
    if raw is None:  # keep the noise below black: clipped samples are detected anyway
        raw = read_raw(p, clip=False)
    packed = packed_mosaic(raw.cfa, raw.pattern, str(p))
    res = estimate_packed(packed, name=str(p), **image_kwargs)
    _learned_check(res, packed)
    res.path = str(p)
    res.iso, res.make, res.model = raw.iso, raw.make, raw.model
    if has_meta:
        res.metadata = _meta(tags, raw, p).per_plane
    elif method == "auto":
        res.extra["fallback"] = "no-metadata"
    return res


def _learned_check(res: CalibrationResult, packed) -> None:
    """Lower an image estimate as the commands do where the learned check reads far less noise
    (:func:`rawrcl.calibration.learned.estimate_ratio`), so a profile saved from it tells models what
    ``--noise image`` would; ``extra["learned_check"]`` the factor, ``extra["tile_estimate"]`` the values
    before."""
    from .learned import NOTE, estimate_ratio, lowered

    if not res.per_plane or res.pooled is None:
        return
    ratio = estimate_ratio(packed, res)
    res.extra["learned_check"] = ratio
    if ratio < 1.0:
        res.extra["tile_estimate"] = {"per_plane": dict(res.per_plane), "pooled": list(res.pooled)}
        res.per_plane = lowered(res.per_plane, ratio)
        res.pooled = lowered({"p": res.pooled}, ratio)["p"]
        res.per_plane_err = lowered(res.per_plane_err, ratio)
        if res.pooled_err is not None:
            res.pooled_err = lowered({"p": res.pooled_err}, ratio)["p"]
        res.extra["note"] = NOTE.format(ratio)


def _meta(tags: dict, raw, p: Path) -> CalibrationResult:
    return metadata_of_raw(tags, raw, str(p))
