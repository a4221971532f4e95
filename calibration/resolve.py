"""The noise of one user's RAW file, as a ``--noise`` specification of kind auto/metadata/image/preset/pair/
profile says (the per-file kinds of :mod:`rawrcl.noise.spec`): what ``rawrcl denoise/jdd`` give a
noise-aware model and what ``rawrcl adapt`` trains with.

``auto`` = the file's DNG NoiseProfile when present, else the entry of ``profile`` (a ``--noise-profile``
file) matching the file's camera at its ISO, else the single-image estimate (:func:`estimate_mosaic`,
without the bootstrap: the uncertainty is not needed here and costs most of the time).

The single-image estimate refuses small or mostly clipped (very bright, very dark) images; it is then
retried with :data:`RELAXED` settings (coarser tile selection: more clipped samples per tile allowed,
fewer tiles per bin), said in the log line. When that fails too, ``fallback=True`` (what inference asks
for under ``auto``) uses the preset :data:`FALLBACK` with a warning instead of refusing the file.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from rawrcl.cfa import CHANNELS
from rawrcl.errors import RawrclError
from rawrcl.noise import NoiseModel
from rawrcl.noise.profiles import load_profile, read_profile
from rawrcl.noise.samplers import PRESETS
from rawrcl.noise.spec import PER_FILE, NoiseSpec, parse_noise

from .learned import NOTE as LEARNED_NOTE
from .learned import estimate_ratio, lowered
from .metadata import metadata_of_raw
from .single_image import estimate_packed, packed_mosaic

#: The preset (:data:`rawrcl.noise.samplers.PRESETS`) inference falls back to under ``auto`` when no
#: estimate can be made: the middle of the camera ladder (a mid-ISO camera).
FALLBACK = "L4"

#: ``FileNoise.source`` → what the log says
SOURCES = {
    "metadata": "DNG NoiseProfile",
    "profile": "noise profile",
    "image": "image estimate",
    "given": "--noise",
    "fallback": f"fallback preset {FALLBACK}",
}

#: Retries of the single-image estimate after a refusal, in order (:class:`EstimatorSettings` overrides).
#: Chosen on synthetic mosaics of scikit-image photos (small, over-exposed, black-clipped). Where the default
#: refuses, the first gave the noise std at x = 0.3 within 6–10 % on the astronaut over-exposed ×3 … ×20
#: (the scene of `tests/test_noise_inference.py`, which checks ×4) and λshot within 0.8–5.5× on other crops
#: (worst: the most over-exposed); the second (4×4 tiles) serves images too small for 8×8 tiles.
RELAXED: tuple[dict, ...] = (
    dict(max_clipped=0.25, min_count=8),
    dict(max_clipped=0.25, min_count=8, block=4),
)

HINT = "(give --noise λshot,λread)"


@dataclass(frozen=True)
class FileNoise:
    """The resolved noise of one file.

    Attributes
    ----------
    model : per-plane :class:`NoiseModel` (λshot, λread for the canonical packed planes R, G1, G2, B;
        [0, 1] units after the file's black/white levels), already multiplied by ``scale``.
    source : ``"metadata"``, ``"profile"``, ``"image"`` (the single-image estimate), ``"given"`` or
        ``"fallback"`` (the preset :data:`FALLBACK`: no estimate could be made).
    scale : the ``--noise-scale`` factor applied to both λ (the std map scales by √scale).
    note : why the noise is less reliable than usual (a relaxed or failed estimate), for the log line.
    profile_ignored : the file has a NoiseProfile whose values are implausible (``read_dng_tags``), so it
        was not used.
    """

    model: NoiseModel
    source: str
    scale: float = 1.0
    note: str = ""
    profile_ignored: bool = False

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
        why = (
            (" (its NoiseProfile is implausible: ignored)" if self.profile_ignored else " (no NoiseProfile)")
            if self.source in ("image", "profile", "fallback") and asked == "auto"
            else ""
        )
        extra = [f"×{self.scale:g}"] if self.scale != 1.0 else []
        if seconds is not None and self.source == "image":
            extra.append(f"{seconds:.1f} s")
        head = f"{name}: " if name else ""
        tail = "; ".join(["plane mean", *extra])
        note = f" — {self.note}" if self.note else ""
        return f"{head}noise from {self.source_text}{why}: λshot {ms:.3g}, λread {mr:.3g} ({tail}){note}"


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
    fallback: bool = False,
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
    fallback : under ``auto``, use the preset :data:`FALLBACK` (with a warning) when the image estimate
        fails even with :data:`RELAXED` settings, instead of refusing.

    Raises
    ------
    RawrclError : ``metadata`` on a file without a NoiseProfile; no profile entry for the camera;
        an image too small or clipped to estimate (without ``fallback``, or kind ``image``).
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
        return FileNoise(m.scaled(scale), "profile", scale)
    ignored = False
    if spec.kind in ("auto", "metadata"):
        meta, ignored = _metadata(raw, path)
        if meta is not None:
            return FileNoise(_planes(meta, scale), "metadata", scale)
        if spec.kind == "metadata":
            what = "an implausible DNG NoiseProfile (not used)" if ignored else "no DNG NoiseProfile"
            raise RawrclError(f"{name}: --noise metadata: the file has {what} (try auto)")
        if profile is not None:
            data = read_profile(profile)  # a bad file is an error, not "not this camera"
            try:
                m = load_profile(data, raw.make or "", raw.model or "", raw.iso)
            except RawrclError:
                m = None  # not this camera: fall through to the estimate
            if m is not None:
                return FileNoise(m.scaled(scale), "profile", scale, profile_ignored=ignored)
    try:
        per_plane, note = image_estimate(raw.cfa, raw.pattern, name)
    except RawrclError as err:
        if not (fallback and spec.kind == "auto"):
            raise
        why = str(err).removeprefix(f"{name}: ").removesuffix(f" {HINT}")
        warnings.warn(
            f"{name}: no noise estimate ({why}); using preset {FALLBACK} — give --noise for this file",
            stacklevel=2,
        )
        s, r = PRESETS[FALLBACK]
        return FileNoise(
            NoiseModel(s * scale, r * scale),
            "fallback",
            scale,
            note="the image estimate failed",
            profile_ignored=ignored,
        )
    return FileNoise(_planes(per_plane, scale), "image", scale, note=note, profile_ignored=ignored)


#: the single-image estimate's bins' median relative distance from their line above which the file's noise is
#: flagged as not Poisson–Gaussian in its values (:func:`rawrcl.calibration.single_image.nlf_misfit`)
MISFIT_NOTE = 0.10


def image_estimate(cfa, pattern: str, name: str = "image") -> tuple[dict[str, tuple[float, float]], str]:
    """Per-plane (λshot, λread) of a mosaic (H, W) [0, 1] from the single-image estimate, retried with
    :data:`RELAXED` settings where the default refuses, lowered where the learned check reads far less noise
    (:func:`rawrcl.calibration.learned.estimate_ratio`); and a note ("" or why it is less reliable).
    Raises :class:`RawrclError` (the default's reason) when every attempt fails."""
    first: RawrclError | None = None
    packed = packed_mosaic(cfa, pattern, name)  # once, for every attempt and the learned check
    for i, overrides in enumerate(({}, *RELAXED)):
        try:
            res = estimate_packed(packed, name=name, bootstrap=0, **overrides)
        except RawrclError as err:
            first = first or err
            continue
        if res.per_plane:
            notes = [] if i == 0 else ["relaxed estimate (few usable regions: small or mostly clipped image)"]
            per_plane = res.per_plane
            ratio = estimate_ratio(packed, res)
            if ratio < 1.0:  # the learned check reads much less noise: texture taken for noise
                per_plane = lowered(per_plane, ratio)
                notes.append(LEARNED_NOTE.format(ratio))
            misfit = res.extra.get("nlf_misfit", 0.0)
            if misfit > MISFIT_NOTE:
                notes.append(
                    f"uncertain estimate: its bins lie a median {100 * misfit:.0f} % off λshot·x + λread "
                    "(fine texture at low noise, or a non-linear, e.g. gamma-encoded, file); the camera's "
                    "own values (--noise) are safer"
                )
            return per_plane, "; ".join(notes)
    msg = str(first) if first is not None else f"{name}: could not estimate the noise from the image"
    raise RawrclError(f"{msg} {HINT}")


def _metadata(raw, path: str | Path | None) -> tuple[dict[str, tuple[float, float]] | None, bool]:
    """Per-plane (λshot, λread) from the file's DNG NoiseProfile, in ``raw``'s normalisation, or None; and
    whether the file holds a NoiseProfile that was not used for implausible values."""
    if path is None:
        return None, False
    from rawrcl.io.raw import dng_tags_of
    from rawrcl.io.tags import read_dng_tags

    # the tags read_raw already read with the file; opened again only for a RawImage made without them
    tags = dng_tags_of(raw) or read_dng_tags(Path(path), rendering=False)
    if not tags.get("noise_profile"):
        return None, "noise_profile_invalid" in tags
    res = metadata_of_raw(tags, raw, str(path))
    return res.per_plane or None, False
