"""The one noise grammar: what every ``--noise`` option (and every ``noise=`` argument) accepts.

=====================  =========  ==================================================================
text                   kind       meaning
=====================  =========  ==================================================================
``none``               none       no noise added
``low``, ``high``,     preset     named (λshot, λread) pairs: the eval presets and the camera ladder
``L1`` … ``L7``                   L1 large sensor at base ISO … L7 small sensor at its highest ISO
``0.01,0.0016``        pair       λshot,λread in [0, 1] units
``paper[:LO-HI]``      sampler    per image, the paper's App. C.1 sampler, σ ∈ [LO, HI] 8-bit (0–20)
``brooks``             sampler    per image, Brooks et al. 2019's log-linear sampler
``camera``             sampler    per image, real cameras' ranges, Poisson shot noise and a readout
``PROFILE.json[:ISO]`` profile    a calibrated noise profile (``rawrcl calibrate --save-profile``):
                                  at ISO (interpolated), else one measured entry drawn per image
``auto``               auto       a RAW file's own: its DNG NoiseProfile, else the single-image estimate
``metadata``           metadata   a RAW file's DNG NoiseProfile (refused when the file has none)
``image``              image      the single-image estimate of each RAW file
``burst``              burst      the noise-level function measured from a burst (``eval --burst``)
=====================  =========  ==================================================================

Commands accept a stated subset: data rawrcl synthesises (``simulate``, ``pretrain``, ``finetune``,
``eval``, ``bench``) take :data:`SYNTHETIC`; commands that read the noise of a user's files (``jdd``,
``denoise``) take :data:`PER_FILE`; ``eval --burst`` takes :data:`BURST` (per file, or the burst's own NLF);
``export`` bakes a fixed level (:data:`FIXED`). The per-file kinds are
resolved where the file is read (:func:`rawrcl.calibration.resolve.file_noise`); everything else here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.noise.model import NoiseModel
from rawrcl.noise.profiles import ProfileSampler, load_profile
from rawrcl.noise.samplers import PRESETS, BrooksSampler, CameraSampler, FixedSampler, PaperSampler, Sampler

#: kinds of data rawrcl synthesises from clean photos
SYNTHETIC = frozenset({"none", "preset", "pair", "sampler", "profile"})
#: kinds that describe the noise of a user's RAW files
PER_FILE = frozenset({"auto", "metadata", "image", "preset", "pair", "profile"})
#: what a noise-aware model or a baseline is told on a burst (``rawrcl eval --burst``)
BURST = PER_FILE | {"burst"}
#: kinds that name one fixed noise level
FIXED = frozenset({"preset", "pair", "profile"})

#: the largest λshot or λread a ``λshot,λread`` pair may give ([0, 1] units; the camera range tops at ≈ 4e-2)
MAX_LAMBDA = 1.0
SAMPLERS = ("paper", "brooks", "camera")
_PAPER = re.compile(r"^paper(?::(?P<lo>[0-9.eE+-]+)-(?P<hi>[0-9.eE+-]+))?$")


@dataclass(frozen=True)
class NoiseSpec:
    """A parsed noise specification (see the module table); ``text`` is its canonical spelling."""

    kind: str
    text: str
    pair: tuple[float, float] | None = None
    sampler: str | None = None
    sigma_range: tuple[float, float] = (0.0, 20.0)
    profile: str | None = None
    iso: float | None = None

    @property
    def label(self) -> str:
        return self.text

    def make_sampler(self) -> Sampler | None:
        """``rng -> NoiseModel`` for the synthetic kinds (None for ``none``); [0, 1] units."""
        if self.kind == "none":
            return None
        if self.kind in ("preset", "pair"):
            assert self.pair is not None
            return FixedSampler(*self.pair)
        if self.kind == "sampler":
            if self.sampler == "paper":
                return PaperSampler(*self.sigma_range)
            return BrooksSampler() if self.sampler == "brooks" else CameraSampler()
        if self.kind == "profile":
            if self.iso is None:
                return ProfileSampler(self.profile)
            model = load_profile(self.profile, "", "", self.iso)
            return lambda rng: model
        raise RawrclError(f"--noise {self.text}: the noise of each file is read from the file, not sampled")

    def fixed_model(self, make: str = "", model: str = "", iso: float | None = None) -> NoiseModel:
        """The one :class:`NoiseModel` of a fixed kind; a profile is looked up for camera ``make model`` at
        the spec's ISO (else ``iso``)."""
        if self.kind in ("preset", "pair"):
            assert self.pair is not None
            return NoiseModel(*self.pair)
        if self.kind == "profile":
            return load_profile(self.profile, make, model, self.iso if self.iso is not None else iso)
        raise RawrclError(f"--noise {self.text}: not a fixed noise level")


def _floats(text: str, n: int) -> tuple[float, ...] | None:
    parts = text.replace(" ", "").split(",")
    if len(parts) != n:
        return None
    try:
        return tuple(float(p) for p in parts)
    except ValueError:
        return None


def parse_noise(
    value: str | NoiseSpec, allowed: frozenset[str] = SYNTHETIC, option: str = "--noise"
) -> NoiseSpec:
    """Parse ``value`` by the grammar of the module table; :class:`RawrclError` (one line naming ``option``
    and the accepted forms) when it is malformed or of a kind not in ``allowed``."""
    spec = value if isinstance(value, NoiseSpec) else _parse(str(value).strip(), option)
    if spec.kind not in allowed:
        raise RawrclError(
            f"{option} {spec.text}: {spec.kind} noise is not accepted here; {accepted(allowed)}"
        )
    return spec


def accepted(allowed: frozenset[str]) -> str:
    """One-line description of the forms of ``allowed`` kinds (for errors and ``--help``)."""
    forms = {
        "none": "none",
        "preset": f"a preset ({', '.join(PRESETS)})",
        "pair": "λshot,λread",
        "sampler": "paper[:LO-HI] | brooks | camera",
        "profile": "PROFILE.json[:ISO]",
        "auto": "auto",
        "metadata": "metadata",
        "image": "image",
        "burst": "burst",
    }
    order = ["auto", "metadata", "image", "burst", "none", "preset", "pair", "sampler", "profile"]
    return "expected " + " | ".join(forms[k] for k in order if k in allowed)


def _parse(text: str, option: str) -> NoiseSpec:
    if not text:
        raise RawrclError(f"{option}: empty noise specification")
    if text in ("none", "auto", "metadata", "image", "burst"):
        return NoiseSpec(text, text)
    if text in PRESETS:
        return NoiseSpec("preset", text, pair=PRESETS[text])
    if text in ("brooks", "camera"):
        return NoiseSpec("sampler", text, sampler=text)
    m = _PAPER.match(text)
    if m:
        lo, hi = (float(m["lo"]), float(m["hi"])) if m["lo"] is not None else (0.0, 20.0)
        PaperSampler(lo, hi)  # validates the range
        return NoiseSpec("sampler", text, sampler="paper", sigma_range=(lo, hi))
    pair = _floats(text, 2)
    if pair is not None:
        NoiseModel(*pair)  # finite and ≥ 0
        if max(pair) > MAX_LAMBDA:
            raise RawrclError(
                f"{option} {text}: λshot,λread above {MAX_LAMBDA:g} are not a camera's noise (a std above "
                "full scale); they are in [0, 1] units after black/white level, e.g. 2e-3,1e-5"
            )
        return NoiseSpec("pair", f"{pair[0]:g},{pair[1]:g}", pair=(float(pair[0]), float(pair[1])))
    path, iso = text, None
    head, sep, tail = text.rpartition(":")
    if sep and not Path(text).is_file() and _floats(tail, 1) is not None:
        path, iso = head, float(tail)
        if iso <= 0:
            raise RawrclError(f"{option} {text}: ISO must be positive")
    if Path(path).is_file():
        from rawrcl.noise.profiles import read_profile

        read_profile(path)  # a bad file is refused here, in one line
        return NoiseSpec("profile", text, profile=str(path), iso=iso)
    raise RawrclError(
        f"{option} {text!r}: not a noise specification or an existing profile file; "
        f"{accepted(SYNTHETIC | PER_FILE)}"
    )


NoiseLike = (
    None | str | NoiseSpec | tuple[float, float] | NoiseModel | Callable[[np.random.Generator], NoiseModel]
)


def noise_sampler(noise: NoiseLike, default: str = "paper") -> Sampler | None:
    """A sampler ``rng -> NoiseModel`` (None: no noise) from anything the Python API accepts for ``noise=``:
    a grammar string or :class:`NoiseSpec` (synthetic kinds), a (λshot, λread) pair, a
    :class:`NoiseModel`, or a sampler; ``None`` means ``default``."""
    if noise is None:
        noise = default
    if isinstance(noise, str | NoiseSpec):
        return parse_noise(noise).make_sampler()
    if isinstance(noise, NoiseModel):
        return lambda rng: noise
    if isinstance(noise, tuple | list) and len(noise) == 2:
        model = NoiseModel(float(noise[0]), float(noise[1]))
        return lambda rng: model
    if callable(noise):
        return noise
    raise RawrclError(f"unsupported noise specification {noise!r}")


def noise_label(noise: NoiseLike, default: str = "paper") -> str:
    """Short human-readable name of a noise specification (for reports and run records)."""
    if noise is None:
        return default
    if isinstance(noise, NoiseSpec):
        return noise.text
    if isinstance(noise, str):
        return parse_noise(noise).text
    if isinstance(noise, NoiseModel):
        return f"{noise.lambda_shot},{noise.lambda_read}"
    if isinstance(noise, tuple | list):
        return f"{noise[0]},{noise[1]}"
    return type(noise).__name__
