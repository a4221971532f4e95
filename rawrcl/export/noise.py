"""Baking a camera noise-level function into an exported graph (darktable gives the graph no noise input).

A noise-aware rawrcl model (``config["noise_aware"]``) is called ``model(x, noise)`` and builds its noise
std map √(λshot·max(x̄, 0) + λread) from the input itself (:func:`rawrcl.noise.std_map`, which clamps below
black before the square root). Export binds one NLF with :class:`rawrcl.models.conditioning.WithNoise` —
the same binding inference uses — so the parameters become constants of the graph. The NLF is a fixed
level of the one noise grammar (:data:`rawrcl.noise.FIXED`): ``--noise λshot,λread``, a preset, or a
calibrated profile at one ISO; one package therefore serves one ISO (docs/export.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rawrcl.cfa import CHANNELS
from rawrcl.errors import RawrclError
from rawrcl.noise import FIXED, NoiseModel, lookup_profile, parse_noise

PLANES = CHANNELS


@dataclass(frozen=True)
class BakedNLF:
    """λshot, λread per packed plane [R, G1, G2, B] in [0, 1] units, and where they came from."""

    shot: tuple[float, float, float, float]
    read: tuple[float, float, float, float]
    source: dict = field(default_factory=dict)

    def model(self) -> NoiseModel:
        return NoiseModel(list(self.shot), list(self.read))

    def tensor(self) -> torch.Tensor:
        """(2, 4) float32: row 0 λshot, row 1 λread."""
        return torch.tensor([self.shot, self.read], dtype=torch.float32)

    def as_dict(self) -> dict:
        return {
            "lambda_shot": dict(zip(PLANES, self.shot, strict=True)),
            "lambda_read": dict(zip(PLANES, self.read, strict=True)),
            "units": "[0,1] after black/white level; variance = lambda_shot*x + lambda_read",
            **self.source,
        }


def baked_nlf(
    text: str, iso: float | None = None, camera: str | None = None, option: str = "--noise"
) -> BakedNLF:
    """The NLF to bake from ``--noise`` (a fixed level of the grammar) and ``--iso`` / ``--camera``.

    A profile needs an ISO (``PROFILE.json:ISO`` or ``iso``) inside its measured range — export refuses to
    bake an extrapolated NLF; ``camera`` (``"Make Model"``) may be omitted when the profile holds one camera.
    """
    spec = parse_noise(text, FIXED, option)
    if spec.kind != "profile":
        if iso is not None or camera:
            raise RawrclError(f"{option} {spec.text}: --iso/--camera only apply to a noise-profile file")
        shot, read = spec.pair
        return BakedNLF((shot,) * 4, (read,) * 4, {"source": spec.kind, "text": spec.text})
    if spec.iso is not None and iso is not None:
        raise RawrclError(f"{option} {spec.text}: give the ISO once (PROFILE:ISO or --iso)")
    return profile_nlf(spec.profile, spec.iso if spec.iso is not None else iso, camera)


def profile_nlf(path: str, iso: float | None, camera: str | None = None) -> BakedNLF:
    """Per-plane NLF of ``camera`` at ``iso`` from a rawrcl noise-profile file (measured range only)."""
    from rawrcl.noise import read_profile

    data = read_profile(path)
    make, model = "", ""
    if camera:
        make, _, model = camera.strip().partition(" ")
    elif len(data["cameras"]) > 1:
        known = ", ".join(sorted(data["cameras"]))
        raise RawrclError(f"{path}: profile holds several cameras ({known}); choose one with --camera")
    if iso is None:
        raise RawrclError(f"{path}: a profile needs the ISO to bake (--iso N or PROFILE:ISO)")
    per_plane, info = lookup_profile(data, make, model, iso)
    if info["extrapolated"]:
        lo, hi = min(info["measured_isos"]), max(info["measured_isos"])
        raise RawrclError(
            f"--iso {iso:g} is outside the measured ISOs of {info['camera']!r} in {path} "
            f"({lo:g}–{hi:g}); export bakes measured or interpolated noise only"
        )
    src = {
        "source": "profile",
        "profile": str(path),
        "camera": info["camera"],
        "iso": info["iso"],
        "measured_isos": info["measured_isos"],
        "interpolated": info["interpolated"],
    }
    shot = tuple(float(per_plane[c][0]) for c in PLANES)
    read = tuple(float(per_plane[c][1]) for c in PLANES)
    return BakedNLF(shot, read, src)  # type: ignore[arg-type]
