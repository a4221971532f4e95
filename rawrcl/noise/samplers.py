"""Noise-parameter samplers: one draw of (λshot, λread) per image ([0, 1] units), and named presets.

Every sampler is a callable ``rng -> NoiseModel`` (:data:`Sampler`); the paper's App. C.1 sampler, Brooks
et al. 2019's log-linear one, the camera-range sampler (ranges from public camera data, docs/noise.md) and
a fixed pair. Users name them through the one noise grammar (:func:`rawrcl.noise.parse_noise`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.noise.model import NoiseModel, Readout, sigma8_to_unit

Sampler = Callable[[np.random.Generator], NoiseModel]


@dataclass(frozen=True)
class PaperSampler:
    """The paper's Appendix C.1 sampler: √λshot, √λread ~ U(a, b) independently.

    a = sqrt(2·(σmin/2)²), b = sqrt(2·(σmax/2)²) with σ converted from 8-bit units to [0, 1] units
    (σ/255) first. Since λshot + λread ≤ b²·2 = σmax², the total noise std at x = 1 stays within
    [σmin, σmax] (8-bit) for every draw.
    """

    sigma_min: float = 0.0
    sigma_max: float = 20.0

    def __post_init__(self) -> None:
        if not 0 <= self.sigma_min <= self.sigma_max:
            raise RawrclError(
                f"sigma range must satisfy 0 ≤ min ≤ max, got {self.sigma_min}, {self.sigma_max}"
            )

    def bounds(self) -> tuple[float, float]:
        """(a, b) bounds of √λ in [0, 1] units."""
        lo, hi = sigma8_to_unit(self.sigma_min), sigma8_to_unit(self.sigma_max)
        return math.sqrt(2 * (lo / 2) ** 2), math.sqrt(2 * (hi / 2) ** 2)

    def __call__(self, rng: np.random.Generator) -> NoiseModel:
        a, b = self.bounds()
        s_shot, s_read = rng.uniform(a, b, size=2)
        return NoiseModel(float(s_shot**2), float(s_read**2))


@dataclass(frozen=True)
class BrooksSampler:
    """Brooks et al. 2019 log-linear sampler (unprocessing paper, fitted to DND):

    log λshot ~ U(log 1e-4, log 0.012);  log λread ~ N(2.18·log λshot + 1.2, 0.26²) (0.26 is the std).
    """

    shot_min: float = 1e-4
    shot_max: float = 0.012
    slope: float = 2.18
    intercept: float = 1.2
    read_std: float = 0.26

    def __call__(self, rng: np.random.Generator) -> NoiseModel:
        log_shot = rng.uniform(math.log(self.shot_min), math.log(self.shot_max))
        log_read = rng.normal(self.slope * log_shot + self.intercept, self.read_std)
        return NoiseModel(float(math.exp(log_shot)), float(math.exp(log_read)))


@dataclass(frozen=True)
class FixedSampler:
    """Always the same parameters ([0, 1] units)."""

    lambda_shot: float
    lambda_read: float

    def __call__(self, rng: np.random.Generator) -> NoiseModel:
        return NoiseModel(self.lambda_shot, self.lambda_read)


@dataclass(frozen=True)
class CameraSampler:
    """Noise of real camera files, from a large sensor at base ISO to a small sensor at its highest ISO.

    Per draw (ranges derived from public sources, docs/noise.md): ln λshot ~ U(ln ``shot_min``,
    ln ``shot_max``); the read noise referred to electrons σe ~ logU(``electrons_min``, ``electrons_max``)
    and an ADC floor ~ logU(``floor_min``, ``floor_max``) give λread = min(σe²·λshot² + floor,
    ``read_cap``·λshot). Shot noise is Poisson. The readout (:class:`Readout`) is drawn too: bit depth
    from ``bits`` with probabilities ``bits_p``; with probability ``black_subtracted`` the file is clipped
    at 0 (black level subtracted before writing), otherwise it keeps a pedestal of U(``pedestal_min``,
    ``pedestal_max``) of white. With probability ``plane_p`` the R and B planes get their own parameters,
    as in files whose planes were scaled by white-balance gains before writing (phone DNGs): a gain g per
    plane, log-uniform in [1/``plane_spread``, ``plane_spread``] (G1 = G2 = 1), gives λshot·g and λread·g²
    (per-plane values in the order R, G1, G2, B). ``plane_p = 0``: one pair for all planes. Of those
    per-plane draws, a share ``plane_free_p`` gets a read gain h drawn independently of g, log-uniform in
    [1/``plane_spread``², ``plane_spread``²] (λread·h): per-channel profiles measured on real cameras
    (darktable's, DNG NoiseProfiles) often have shot ratios of 2–3 between channels with read ratios near 1,
    which a single gain cannot give. [0, 1] units throughout.
    """

    shot_min: float = 3e-6
    shot_max: float = 4e-2
    electrons_min: float = 0.5
    electrons_max: float = 8.0
    floor_min: float = 1e-9
    floor_max: float = 1e-6
    read_cap: float = 0.15
    bits: tuple[int, ...] = (14, 12, 10)
    bits_p: tuple[float, ...] = (0.4, 0.4, 0.2)
    black_subtracted: float = 0.35
    pedestal_min: float = 0.02
    pedestal_max: float = 0.13
    plane_p: float = 0.0
    plane_spread: float = 2.5
    plane_free_p: float = 0.0

    def __call__(self, rng: np.random.Generator) -> NoiseModel:
        def log_uniform(lo: float, hi: float) -> float:
            return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))

        shot = log_uniform(self.shot_min, self.shot_max)
        electrons = log_uniform(self.electrons_min, self.electrons_max)
        read = min(electrons**2 * shot**2 + log_uniform(self.floor_min, self.floor_max), self.read_cap * shot)
        bits = int(self.bits[int(rng.choice(len(self.bits), p=self.bits_p))])
        black = 0.0
        if rng.random() >= self.black_subtracted:
            black = float(rng.uniform(self.pedestal_min, self.pedestal_max))
        if self.plane_p > 0 and rng.random() < self.plane_p:
            lo, hi = 1 / self.plane_spread, self.plane_spread
            g = [log_uniform(lo, hi), 1.0, 1.0, log_uniform(lo, hi)]
            shots = tuple(shot * k for k in g)
            h = [k * k for k in g]
            if self.plane_free_p > 0 and rng.random() < self.plane_free_p:
                h = [log_uniform(lo * lo, hi * hi), 1.0, 1.0, log_uniform(lo * lo, hi * hi)]
            reads = tuple(read * k for k in h)
            return NoiseModel(shots, reads, poisson=True, readout=Readout(bits, black))
        return NoiseModel(shot, read, poisson=True, readout=Readout(bits, black))


#: Named noise presets, [0, 1] units (the eval presets of the project).
PRESETS: dict[str, tuple[float, float]] = {
    "low": (0.0025, 1e-4),
    "high": (0.01, 1.6e-3),
    # the camera ladder (docs/noise.md): large sensor at base ISO … small sensor at its highest ISO
    "L1": (2e-5, 1e-8),
    "L2": (1.2e-4, 1e-7),
    "L3": (1e-3, 2e-6),
    "L4": (2e-3, 8e-6),
    "L5": (4e-3, 3e-5),
    "L6": (1.2e-2, 2e-4),
    "L7": (3e-2, 1e-3),
}
