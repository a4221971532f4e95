"""Baking a camera noise-level function into an exported graph (darktable gives the graph no noise input).

A noise-aware rawrcl model (``config["noise_aware"]``) is called as ``model(x, noise)``: ``x`` the packed
mosaic (B, 4, h, w) in [0, 1] (values below 0 allowed: data are not clipped at black), ``noise`` (B, 2, 4)
with ``noise[:, 0, c]`` = λshot and ``noise[:, 1, c]`` = λread of packed plane c ([R, G1, G2, B], [0, 1]
units). The model builds its std map √(λshot·max(x̄, 0) + λread) itself. :class:`BakedNoise` freezes one
(λshot, λread) per plane into the module as a constant buffer, so the exported graph has the single input
darktable feeds it. The NLF comes from ``--noise λshot,λread`` or from a calibrated profile at one ISO
(:func:`parse_noise`); one package therefore serves one ISO (docs/export.md says why this was chosen over
estimating the noise from each tile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from rawrcl.errors import RawrclError

PLANES = ("R", "G1", "G2", "B")


@dataclass(frozen=True)
class NoiseSpec:
    """λshot, λread per packed plane [R, G1, G2, B] in [0, 1] units, and where they came from."""

    shot: tuple[float, float, float, float]
    read: tuple[float, float, float, float]
    source: dict = field(default_factory=dict)

    def tensor(self) -> torch.Tensor:
        """(1, 2, 4) float32: row 0 λshot, row 1 λread."""
        return torch.tensor([self.shot, self.read], dtype=torch.float32)[None]

    def as_dict(self) -> dict:
        return {
            "lambda_shot": dict(zip(PLANES, self.shot, strict=True)),
            "lambda_read": dict(zip(PLANES, self.read, strict=True)),
            "units": "[0,1] after black/white level; variance = lambda_shot*x + lambda_read",
            **self.source,
        }


def _check(values: list[float], what: str) -> None:
    for v in values:
        if not math.isfinite(v) or v < 0:
            raise RawrclError(f"{what}: noise parameters must be finite and ≥ 0, got {v}")


def parse_noise(
    text: str, iso: float | None = None, camera: str | None = None, option: str = "--noise"
) -> NoiseSpec:
    """``"λshot,λread"`` (all four planes) or ``"PROFILE.json[:ISO]"`` (with ``iso``/``camera``).

    A profile lookup must hit the profile's measured ISO range: export refuses to bake an extrapolated
    NLF (one line naming the range). ``camera`` is ``"Make Model"`` as in the profile; it may be omitted
    when the profile holds a single camera. Raises :class:`RawrclError` on bad input.
    """
    text = text.strip()
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 2 and not Path(text).exists():
        try:
            shot, read = float(parts[0]), float(parts[1])
        except ValueError:
            raise RawrclError(
                f"{option} {text!r}: expected λshot,λread (two numbers) or a profile file"
            ) from None
        if iso is not None or camera:
            raise RawrclError(f"{option} {text}: --iso/--camera only apply to a noise-profile file")
        _check([shot, read], f"{option} {text}")
        return NoiseSpec((shot,) * 4, (read,) * 4, {"source": "literal", "text": text})
    path, iso_txt = Path(text), None
    if not path.exists() and ":" in text:
        head, _, tail = text.rpartition(":")
        path, iso_txt = Path(head), tail
    if not path.is_file():
        raise RawrclError(f"{option} {text!r}: not λshot,λread and no such noise-profile file")
    if iso_txt is not None:
        if iso is not None:
            raise RawrclError(f"{option} {text}: give the ISO once (PROFILE:ISO or --iso)")
        try:
            iso = float(iso_txt)
        except ValueError:
            raise RawrclError(f"{option} {text}: ISO {iso_txt!r} is not a number") from None
    return profile_noise(path, iso, camera)


def profile_noise(path: str | Path, iso: float | None, camera: str | None = None) -> NoiseSpec:
    """Per-plane NLF of ``camera`` at ``iso`` from a rawrcl noise-profile file (measured range only)."""
    from rawrcl.calibration.profiles import lookup_profile, read_profile

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
        isos = info["measured_isos"]
        lo, hi = min(isos), max(isos)
        raise RawrclError(
            f"--iso {iso:g} is outside the measured ISOs of {info['camera']!r} in {path} "
            f"({lo:g}–{hi:g}); export bakes measured or interpolated noise only"
        )
    shot = tuple(float(per_plane[c][0]) for c in PLANES)
    read = tuple(float(per_plane[c][1]) for c in PLANES)
    _check([*shot, *read], str(path))
    src = {
        "source": "profile",
        "profile": str(path),
        "camera": info["camera"],
        "iso": info["iso"],
        "measured_isos": info["measured_isos"],
        "interpolated": info["interpolated"],
    }
    return NoiseSpec(shot, read, src)  # type: ignore[arg-type]


class BakedNoise(nn.Module):
    """``model(x, noise)`` with a constant NLF: (B, 4, h, w) → the model's output (same shapes/units).

    ``noise`` is a buffer (1, 2, 4) expanded to the batch, so ONNX export stores it as a constant.
    """

    def __init__(self, model: nn.Module, spec: NoiseSpec) -> None:
        super().__init__()
        self.model = model
        self.spec = spec
        self.register_buffer("noise", spec.tensor())
        from rawrcl.models.geometry import size_multiple

        self.size_multiple = size_multiple(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, self.noise.to(x.dtype).expand(x.shape[0], 2, 4))
