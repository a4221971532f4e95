"""Saving calibrations into camera noise profiles (``rawrcl-noise-profile/1``; the file format and the lookup
between measured ISOs are described once, in :mod:`rawrcl.noise.profiles`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.noise.profiles import FORMAT, camera_key, lookup_profile, read_profile

from .result import UNITS, CalibrationResult


def profile_conflicts(profile: dict, results: Iterable[CalibrationResult]) -> list[tuple[str, float]]:
    """(camera key, ISO) of the ``results`` that the ``profile`` dict already holds an entry for."""
    out = []
    for r in results:
        cam = profile["cameras"].get(camera_key(r.make, r.model))
        if cam and r.iso is not None and any(abs(float(e["iso"]) - r.iso) < 1e-9 for e in cam["entries"]):
            out.append((camera_key(r.make, r.model), float(r.iso)))
    return out


def save_profile(path: str | Path, results: Iterable[CalibrationResult], *, replace: bool = True) -> dict:
    """Add calibrations to a profile file (created if absent). Written atomically.

    An entry with the same camera and ISO is replaced when ``replace`` (the file is a profile database,
    updating it is its purpose); with ``replace=False`` such a conflict raises :class:`RawrclError`
    before anything is written (what ``rawrcl calibrate --save-profile`` does without ``--force``).
    Results without parameters, or without ISO, are refused with :class:`RawrclError`.
    Returns the profile dict written.
    """
    p = Path(path)
    results = list(results)
    data = read_profile(p) if p.exists() else {"format": FORMAT, "units": UNITS, "cameras": {}}
    conflicts = [] if replace else profile_conflicts(data, results)
    if conflicts:
        key, iso = conflicts[0]
        raise RawrclError(f"{p}: already has {key!r} at ISO {iso:g} (use --force to replace it)")
    for r in results:
        if not r.per_plane:
            raise RawrclError(f"{r.path}: no noise parameters to save ({r.status})")
        if r.iso is None:
            raise RawrclError(f"{r.path}: ISO unknown, cannot save it in a per-ISO profile")
        key = camera_key(r.make, r.model)
        cam = data["cameras"].setdefault(key, {"make": r.make, "model": r.model, "entries": []})
        entry = {
            "iso": float(r.iso),
            "per_plane": {c: [float(v[0]), float(v[1])] for c, v in r.per_plane.items()},
            "lambda_shot": r.lambda_shot,
            "lambda_read": r.lambda_read,
            "method": r.method,
            "source": r.path,
        }
        cam["entries"] = [e for e in cam["entries"] if abs(float(e["iso"]) - float(r.iso)) > 1e-9]
        cam["entries"].append(entry)
        cam["entries"].sort(key=lambda e: e["iso"])
    atomic_write_text(p, json.dumps(data, indent=2) + "\n")
    return data


def profile_result(path: str | Path, make: str, model: str, iso: float | None) -> CalibrationResult:
    """The lookup as a :class:`CalibrationResult` (method ``"profile"``; status ``"extrapolated"``
    when outside the measured ISOs)."""
    per_plane, info = lookup_profile(path, make, model, iso)
    res = CalibrationResult(path=str(path), method="profile", per_plane=per_plane, iso=info["iso"])
    res.make, res.model = make, model
    res.status = "extrapolated" if info["extrapolated"] else "ok"
    res.extra["lookup"] = info
    return res
