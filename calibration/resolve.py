"""The noise of one user's RAW file, as a ``--noise`` specification of kind auto/metadata/image/preset/pair/
profile says (the per-file kinds of :mod:`rawrcl.noise.spec`): what ``rawrcl denoise/jdd`` give a
noise-aware model and what ``rawrcl adapt`` trains with.

``auto`` = the file's DNG NoiseProfile when present, else the entry of ``profile`` (a ``--noise-profile``
file) matching the file's camera at its ISO, else the single-image estimate (:func:`estimate_mosaic`,
without the bootstrap: the uncertainty is not needed here and costs most of the time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rawrcl.cfa import CHANNELS
from rawrcl.errors import RawrclError
from rawrcl.noise import NoiseModel
from rawrcl.noise.profiles import load_profile
from rawrcl.noise.spec import PER_FILE, NoiseSpec, parse_noise

from .metadata import metadata_from_tags
from .single_image import estimate_mosaic

#: ``FileNoise.source`` → what the log says
SOURCES = {
    "metadata": "DNG NoiseProfile",
    "profile": "noise profile",
    "image": "image estimate",
    "given": "--noise",
}


@dataclass(frozen=True)
class FileNoise:
    """The resolved noise of one file.

    Attributes
    ----------
    model : per-plane :class:`NoiseModel` (λshot, λread for the canonical packed planes R, G1, G2, B;
        [0, 1] units after the file's black/white levels), already multiplied by ``scale``.
    source : ``"metadata"``, ``"profile"``, ``"image"`` (the single-image estimate) or ``"given"``.
    scale : the ``--noise-scale`` factor applied to both λ (the std map scales by √scale).
    """

    model: NoiseModel
    source: str
    scale: float = 1.0

    @property
    def source_text(self) -> str:
        """Where the noise came from, for people: e.g. ``"DNG NoiseProfile"``, ``"image estimate"``."""
        return SOURCES.get(self.source, self.source)

    def describe(
        self, name: str | None = None, asked: str | None = None, seconds: float | None = None
    ) -> str:
        """The one log line of a file's noise, e.g. ``frame00.dng: noise from image estimate (no
        NoiseProfile): λshot 0.0012, λread 0.00013 (plane mean; 0.8 s)``; ``asked`` the ``--noise`` kind
        (``"auto"`` explains a missing NoiseProfile), ``seconds`` the time an image estimate took."""
        s, r = self.model.lambda_shot, self.model.lambda_read
        ms = sum(s) / len(s) if isinstance(s, tuple | list) else float(s)
        mr = sum(r) / len(r) if isinstance(r, tuple | list) else float(r)
        why = " (no NoiseProfile)" if self.source in ("image", "profile") and asked == "auto" else ""
        extra = [f"×{self.scale:g}"] if self.scale != 1.0 else []
        if seconds is not None and self.source == "image":
            extra.append(f"{seconds:.1f} s")
        head = f"{name}: " if name else ""
        tail = "; ".join(["plane mean", *extra])
        return f"{head}noise from {self.source_text}{why}: λshot {ms:.3g}, λread {mr:.3g} ({tail})"


def _planes(per_plane: dict[str, tuple[float, float]], scale: float) -> NoiseModel:
    shot = tuple(float(per_plane[c][0]) * scale for c in CHANNELS)
    read = tuple(float(per_plane[c][1]) * scale for c in CHANNELS)
    return NoiseModel(shot, read)


def file_noise(
    raw,
    spec: str | NoiseSpec = "auto",
    *,
    path: str | Path | None = None,
    profile: str | Path | None = None,
    scale: float = 1.0,
) -> FileNoise:
    """Resolve ``spec`` for one file.

    Parameters
    ----------
    raw : the file as :func:`rawrcl.io.raw.read_raw` returns it (``cfa`` (H, W) [0, 1], ``pattern``,
        levels, ``make``/``model``/``iso``).
    spec : a per-file kind of the noise grammar (text or parsed).
    path : the file (to read its DNG tags for ``auto``/``metadata``); None: no metadata.
    profile : a noise profile file consulted by ``auto`` before the image estimate.
    scale : multiplies λshot and λread (> 0).

    Raises
    ------
    RawrclError : ``metadata`` on a file without a NoiseProfile; no profile entry for the camera;
        an image too small or flat to estimate.
    """
    spec = parse_noise(spec, PER_FILE)
    if not scale > 0:
        raise RawrclError(f"--noise-scale must be > 0, got {scale}")
    name = str(path) if path is not None else "image"
    if spec.kind in ("preset", "pair"):
        s, r = spec.pair
        return FileNoise(NoiseModel(s * scale, r * scale), "given", scale)
    if spec.kind == "profile":
        m = spec.fixed_model(raw.make or "", raw.model or "", raw.iso)
        return FileNoise(_scaled(m, scale), "profile", scale)
    if spec.kind in ("auto", "metadata"):
        meta = _metadata(raw, path)
        if meta is not None:
            return FileNoise(_planes(meta, scale), "metadata", scale)
        if spec.kind == "metadata":
            raise RawrclError(f"{name}: --noise metadata: the file has no DNG NoiseProfile (try auto)")
        if profile is not None:
            try:
                m = load_profile(profile, raw.make or "", raw.model or "", raw.iso)
            except RawrclError:
                m = None  # not this camera: fall through to the estimate
            if m is not None:
                return FileNoise(_scaled(m, scale), "profile", scale)
    res = estimate_mosaic(raw.cfa, raw.pattern, name=name, bootstrap=0)
    if not res.per_plane:
        raise RawrclError(f"{name}: could not estimate the noise from the image (give --noise λshot,λread)")
    return FileNoise(_planes(res.per_plane, scale), "image", scale)


def _scaled(m: NoiseModel, scale: float) -> NoiseModel:
    import numpy as np

    s = np.asarray(m.lambda_shot, dtype=np.float64) * scale
    r = np.asarray(m.lambda_read, dtype=np.float64) * scale
    as_value = (lambda a: tuple(float(v) for v in a)) if s.ndim else float
    return NoiseModel(as_value(s), as_value(r) if r.ndim else float(r))


def _metadata(raw, path: str | Path | None) -> dict[str, tuple[float, float]] | None:
    """Per-plane (λshot, λread) from the file's DNG NoiseProfile, in ``raw``'s normalisation; None if none."""
    if path is None:
        return None
    from rawrcl.io.tags import read_dng_tags

    tags = read_dng_tags(Path(path))
    if not tags.get("noise_profile"):
        return None
    res = metadata_from_tags(
        tags, pattern=raw.pattern, black_level=raw.black_level, white_level=raw.white_level, path=str(path)
    )
    return res.per_plane or None
