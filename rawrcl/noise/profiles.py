"""Camera noise profiles: the JSON file format (per camera model and ISO) and its lookup.

Written by calibration (:func:`rawrcl.calibration.save_profile`); read here, where the noise model lives, so
that every consumer (synthetic data, inference, export) reads profiles the same way.

File format (``rawrcl-noise-profile/1``)::

    {
      "format": "rawrcl-noise-profile/1",
      "units": "[0,1] after black/white level; variance = lambda_shot*x + lambda_read",
      "cameras": {
        "<make> <model>": {
          "make": "...", "model": "...",
          "entries": [
            {"iso": 100, "per_plane": {"R": [ls, lr], "G1": [...], "G2": [...], "B": [...]},
             "lambda_shot": ls_avg, "lambda_read": lr_avg, "method": "flats", "source": "..."},
            ...
          ]
        }
      }
    }

Lookup at an ISO that was not measured interpolates log λ linearly in log ISO between the two
nearest measured ISOs (per plane, per parameter); outside the measured range it extrapolates from
the two end points and flags it. With a single measured ISO it scales physically (λshot ∝ ISO,
λread ∝ ISO², i.e. gain applied before read noise) and flags the extrapolation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from rawrcl.cfa import CHANNELS
from rawrcl.errors import RawrclError
from rawrcl.noise.model import NoiseModel

FORMAT = "rawrcl-noise-profile/1"
UNITS = "[0,1] after black/white level; variance = lambda_shot*x + lambda_read"
_FLOOR = 1e-14


def camera_key(make: str, model: str) -> str:
    """Normalised key "make model" (case-insensitive, collapsed whitespace; model may repeat make)."""
    make = " ".join(str(make or "").split())
    model = " ".join(str(model or "").split())
    if make and model.lower().startswith(make.lower()):
        model = model[len(make) :].strip()
    return f"{make} {model}".strip().lower() or "unknown"


def read_profile(path: str | Path) -> dict:
    """Read and validate a profile file; raises :class:`RawrclError` on a bad file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise RawrclError(f"{p}: no such noise-profile file") from None
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, or not UTF-8 text at all
        raise RawrclError(f"{p}: not a readable JSON noise profile ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("noiseprofiles"), list):
        raise RawrclError(
            f"{p}: darktable's noiseprofiles.json, whose a and b are not per raw sample (measured on its "
            "demosaiced image's wavelet detail band, ≈ 10× below a raw sample's); rawrcl does not read it "
            "(docs/calibration.md, 'Camera profiles')"
        )
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("cameras"), dict)
    ):
        raise RawrclError(f"{p}: not a rawrcl noise profile (expected format {FORMAT!r})")
    return data


def _interp(isos: list[float], vals: list[float], iso: float, power: float) -> float:
    if len(isos) == 1:
        return vals[0] * (iso / isos[0]) ** power
    lx = [math.log(i) for i in isos]
    ly = [math.log(max(v, _FLOOR)) for v in vals]
    t = math.log(iso)
    k = 0
    while k < len(lx) - 2 and t > lx[k + 1]:
        k += 1
    slope = (ly[k + 1] - ly[k]) / (lx[k + 1] - lx[k])
    out = math.exp(ly[k] + slope * (t - lx[k]))
    return 0.0 if out <= _FLOOR * 1.0001 else out


def lookup_profile(
    profile: dict | str | Path, make: str, model: str, iso: float | None
) -> tuple[dict[str, tuple[float, float]], dict]:
    """Noise parameters of a camera at an ISO.

    Parameters
    ----------
    profile : a profile dict or file path.
    make, model : camera identification (as in the RAW file). A profile holding a single camera is
        used whatever the names when ``make`` and ``model`` are both empty.
    iso : ISO; None is only accepted when the camera has a single entry.

    Returns
    -------
    (per_plane, info): plane → (λshot, λread) in [0, 1] units; info has ``camera``, ``iso``,
    ``measured_isos``, ``exact``, ``interpolated``, ``extrapolated`` (bools).
    """
    data = read_profile(profile) if not isinstance(profile, dict) else profile
    cams = data["cameras"]
    key = camera_key(make, model)
    if key not in cams:
        if not (make or model) and len(cams) == 1:
            key = next(iter(cams))
        else:
            known = ", ".join(sorted(cams)) or "none"
            raise RawrclError(f"noise profile has no camera {key!r} (cameras: {known})")
    entries = sorted(cams[key]["entries"], key=lambda e: e["iso"])
    if not entries:
        raise RawrclError(f"noise profile camera {key!r} has no entries")
    isos = [float(e["iso"]) for e in entries]
    if iso is None:
        if len(entries) > 1:
            raise RawrclError(f"ISO unknown and the profile of {key!r} has several ISOs ({isos})")
        iso = isos[0]
    iso = float(iso)
    if iso <= 0:
        raise RawrclError(f"ISO must be positive, got {iso}")
    exact = any(abs(i - iso) < 1e-9 for i in isos)
    extrap = not exact and (iso < isos[0] or iso > isos[-1] or len(isos) == 1)
    per_plane = {}
    for c in CHANNELS:
        if exact:
            e = entries[[abs(i - iso) < 1e-9 for i in isos].index(True)]
            per_plane[c] = tuple(float(v) for v in e["per_plane"][c])
            continue
        shot = _interp(isos, [e["per_plane"][c][0] for e in entries], iso, 1.0)
        read = _interp(isos, [e["per_plane"][c][1] for e in entries], iso, 2.0)
        per_plane[c] = (shot, read)
    info = {
        "camera": key,
        "iso": iso,
        "measured_isos": isos,
        "exact": exact,
        "interpolated": not exact and not extrap,
        "extrapolated": extrap,
    }
    return per_plane, info


def load_profile(path: str | Path | dict, make: str, model: str, iso: float | None) -> NoiseModel:
    """:class:`rawrcl.noise.NoiseModel` (per plane [R, G1, G2, B], [0, 1] units) of a camera at an
    ISO from a profile file — what ``--noise-profile FILE`` options use. Extrapolated lookups are
    allowed (see :func:`lookup_profile` to know whether it was)."""
    per_plane, _ = lookup_profile(path, make, model, iso)
    return NoiseModel([per_plane[c][0] for c in CHANNELS], [per_plane[c][1] for c in CHANNELS])


class ProfileSampler:
    """A sampler drawing one measured (camera, ISO) entry of a profile uniformly per image: the per-plane
    :class:`NoiseModel` ([R, G1, G2, B], [0, 1] units) of that entry."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.models = [
            NoiseModel([e["per_plane"][c][0] for c in CHANNELS], [e["per_plane"][c][1] for c in CHANNELS])
            for cam in read_profile(path)["cameras"].values()
            for e in cam["entries"]
        ]
        if not self.models:
            raise RawrclError(f"{path}: the noise profile holds no calibrated entries")

    def __call__(self, rng: np.random.Generator) -> NoiseModel:
        return self.models[int(rng.integers(len(self.models)))]
