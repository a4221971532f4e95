"""The result object shared by all calibration methods (metadata, single image, photon transfer)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rawrcl.cfa import CHANNELS
from rawrcl.noise import NoiseModel

UNITS = "[0,1] after black/white level; variance = lambda_shot*x + lambda_read"


@dataclass
class PlaneBins:
    """Binned noise statistics of one CFA plane, for fitting and plotting.

    ``mean`` and ``var`` are 1-D float arrays of the same length ([0, 1] units and [0, 1]² units);
    ``count`` is the number of samples (blocks, pixels or frame pairs) behind each bin; ``used`` marks
    the bins that entered the fit (False: clipped, saturated or rejected as outliers).
    """

    mean: np.ndarray
    var: np.ndarray
    count: np.ndarray
    used: np.ndarray

    def to_dict(self) -> dict:
        return {
            "mean": [float(v) for v in self.mean],
            "var": [float(v) for v in self.var],
            "count": [int(v) for v in self.count],
            "used": [bool(v) for v in self.used],
        }


@dataclass
class CalibrationResult:
    """(λshot, λread) of one RAW file or one flat-field series, per canonical CFA plane.

    Attributes
    ----------
    path : the file (or flats folder) it came from, or None for in-memory arrays.
    method : ``"metadata"`` (DNG NoiseProfile), ``"image"`` (single-image estimate; with method auto
        and no metadata, ``extra["fallback"] == "no-metadata"``), ``"flats"`` (photon transfer) or
        ``"profile"`` (a profile lookup).
    status : ``"ok"``; ``"no-metadata"`` (method metadata, the file has no NoiseProfile);
        ``"extrapolated"`` (profile lookup outside the measured ISOs);
        ``"low-confidence"`` (the estimate exists but its relative uncertainty is large).
    per_plane : plane name ("R", "G1", "G2", "B") → (λshot, λread), [0, 1] units; empty when unknown.
    per_plane_err : plane name → (σ(λshot), σ(λread)) one-standard-deviation uncertainty, or empty.
    iso, make, model : from the file when known.
    bins : plane name → :class:`PlaneBins` (what the fit saw), for plots.
    metadata : plane name → (S, O) from the file's NoiseProfile (converted to rawrcl units) when present,
        whatever the method; plotted as a reference line.
    extra : method-specific details (linear range, saturation level, notes), JSON-ready.
    pooled, pooled_err : the joint all-plane fit and its uncertainty (image method), else None.
    """

    path: str | None
    method: str
    status: str = "ok"
    per_plane: dict[str, tuple[float, float]] = field(default_factory=dict)
    per_plane_err: dict[str, tuple[float, float]] = field(default_factory=dict)
    iso: float | None = None
    make: str = ""
    model: str = ""
    bins: dict[str, PlaneBins] = field(default_factory=dict)
    metadata: dict[str, tuple[float, float]] | None = None
    extra: dict = field(default_factory=dict)
    pooled: tuple[float, float] | None = None
    pooled_err: tuple[float, float] | None = None

    @property
    def plane_mean(self) -> tuple[float, float] | None:
        """The mean of the per-plane (λshot, λread) — what a model told :meth:`noise_model` sees on average —
        or None without planes."""
        if not self.per_plane:
            return None
        shot, read = np.mean(list(self.per_plane.values()), axis=0)
        return float(shot), float(read)

    @property
    def lambda_shot(self) -> float | None:
        """Plane-average λshot ([0, 1] units): the joint all-plane fit when there is one (image
        method), else :attr:`plane_mean`'s; None when unknown."""
        if self.pooled is not None:
            return float(self.pooled[0])
        mean = self.plane_mean
        return None if mean is None else mean[0]

    @property
    def lambda_read(self) -> float | None:
        """Plane-average λread ([0, 1]² units), as :attr:`lambda_shot`; None when unknown."""
        if self.pooled is not None:
            return float(self.pooled[1])
        mean = self.plane_mean
        return None if mean is None else mean[1]

    def std_at(self, x: float, plane: str | None = None) -> float:
        """Predicted noise standard deviation sqrt(λshot·x + λread) at signal x ([0, 1] units),
        for one plane or (default) the plane-average parameters."""
        if plane is None:
            ls, lr = self.lambda_shot, self.lambda_read
        else:
            ls, lr = self.per_plane[plane]
        if ls is None or lr is None:
            raise ValueError("no noise parameters in this calibration result")
        return float(np.sqrt(max(ls * max(x, 0.0) + lr, 0.0)))

    def noise_model(self) -> NoiseModel:
        """Per-plane :class:`rawrcl.noise.NoiseModel` (4 values in [R, G1, G2, B] order)."""
        if not self.per_plane:
            raise ValueError("no noise parameters in this calibration result")
        shot = [float(self.per_plane[c][0]) for c in CHANNELS]
        read = [float(self.per_plane[c][1]) for c in CHANNELS]
        return NoiseModel(shot, read)

    def to_dict(self, *, with_bins: bool = False) -> dict:
        """JSON-ready summary: path, method, status, lambda_shot, lambda_read (plane averages),
        per_plane, per_plane_err, iso, make, model, metadata, units, extra (and bins on request)."""
        out = {
            "path": self.path,
            "method": self.method,
            "status": self.status,
            "lambda_shot": self.lambda_shot,
            "lambda_read": self.lambda_read,
            "per_plane": {k: [float(v[0]), float(v[1])] for k, v in self.per_plane.items()},
            "per_plane_err": {k: [float(v[0]), float(v[1])] for k, v in self.per_plane_err.items()},
            "lambda_err": None if self.pooled_err is None else [float(v) for v in self.pooled_err],
            "iso": self.iso,
            "make": self.make,
            "model": self.model,
            "metadata": None
            if self.metadata is None
            else {k: [float(v[0]), float(v[1])] for k, v in self.metadata.items()},
            "units": UNITS,
            "extra": self.extra,
        }
        if with_bins:
            out["bins"] = {k: b.to_dict() for k, b in self.bins.items()}
        return out
