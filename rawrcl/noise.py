"""Signal-dependent noise model (paper Appendix A) and parameter samplers (Appendix C.1, Brooks 2019).

Units
-----
The clean signal x is a RAW (or linear RGB) value normalised to [0, 1] after black-level
subtraction and division by (white − black). λshot and λread are in those units:

    n ~ N(0, λshot·x + λread)          (heteroscedastic Gaussian, the paper's NLF)

so that the noise standard deviation at x is ``sqrt(λshot·x + λread)``. This is also the DNG
``NoiseProfile`` semantics (S = λshot, O = λread).

8-bit σ values, as the paper quotes them (σ ∈ [0, 20]), are converted with σ₀₁ = σ₈ / 255 — see
:func:`sigma8_to_unit`. The two scales are never mixed inside this module: samplers take σ in
8-bit units as *arguments* and return λ in [0, 1] units.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rawrcl.errors import RawrclError

PerChannel = float | Sequence[float]


def sigma8_to_unit(sigma8: float) -> float:
    """Convert a noise standard deviation in 8-bit units ([0, 255] scale) to [0, 1] units."""
    return float(sigma8) / 255.0


@dataclass(frozen=True)
class NoiseModel:
    """Heteroscedastic Gaussian (or Poisson–Gaussian) noise, variance = λshot·x + λread.

    Attributes
    ----------
    lambda_shot, lambda_read : float, or one value per channel (applied along dim −3 of the
        signal, e.g. the 4 packed planes [R, G1, G2, B] or 3 RGB channels). [0, 1] units.
    poisson : if True, shot noise is Poisson: x̃ = λshot·Poisson(x/λshot) + N(0, λread)
        (same mean and variance as the Gaussian model, discrete at very low counts).
    clip : clip the noisy signal to [0, 1] (what a real sensor's ADC does at the white level;
        the black side is not clipped by real DNGs, so the default is False).
    """

    lambda_shot: PerChannel
    lambda_read: PerChannel
    poisson: bool = False
    clip: bool = False

    def __post_init__(self) -> None:
        for name in ("lambda_shot", "lambda_read"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if not np.all(np.isfinite(v)) or np.any(v < 0):
                raise RawrclError(f"{name} must be finite and ≥ 0, got {getattr(self, name)!r}")

    def _params(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """λ tensors broadcastable against x of shape (..., C, H, W)."""
        out = []
        for v in (self.lambda_shot, self.lambda_read):
            t = torch.as_tensor(np.asarray(v, dtype=np.float64), dtype=x.dtype, device=x.device)
            if t.ndim == 1:
                if x.ndim < 3 or x.shape[-3] != t.numel():
                    raise RawrclError(
                        f"noise model has {t.numel()} per-channel values but the signal has shape "
                        f"{tuple(x.shape)}"
                    )
                t = t.view(-1, 1, 1)
            out.append(t)
        return out[0], out[1]

    def variance(self, x: torch.Tensor) -> torch.Tensor:
        """Noise variance at clean signal x (..., C, H, W) in [0, 1] units; x < 0 counts as 0."""
        ls, lr = self._params(x)
        return ls * x.clamp_min(0) + lr

    def std(self, x: torch.Tensor) -> torch.Tensor:
        """Noise standard deviation sqrt(λshot·x + λread), same shape as x."""
        return self.variance(x).sqrt()

    def sample(self, clean: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Return a noisy realisation of ``clean`` (..., C, H, W), float, [0, 1] units.

        ``generator`` must live on ``clean.device``; pass one for reproducible noise.
        """
        x = clean.float() if not clean.is_floating_point() else clean
        if self.poisson:
            ls, lr = self._params(x)
            scale = ls.clamp_min(1e-12)
            counts = torch.poisson((x.clamp_min(0) / scale).expand_as(x).contiguous(), generator=generator)
            shot = torch.where(ls > 0, counts * scale, x.clamp_min(0))
            read = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device) * lr.sqrt()
            noisy = shot + read
        else:
            eps = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
            noisy = x + eps * self.std(x)
        return noisy.clamp(0, 1) if self.clip else noisy

    def to_dict(self) -> dict:
        """JSON-ready description (λ in [0, 1] units)."""
        return {
            "lambda_shot": _jsonable(self.lambda_shot),
            "lambda_read": _jsonable(self.lambda_read),
            "poisson": self.poisson,
            "clip": self.clip,
            "units": "[0,1] after black/white level; variance = lambda_shot*x + lambda_read",
        }


def _jsonable(v: PerChannel) -> float | list[float]:
    a = np.asarray(v, dtype=np.float64)
    return float(a) if a.ndim == 0 else [float(t) for t in a]


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


#: Named noise presets, [0, 1] units (the eval presets of the project).
PRESETS: dict[str, tuple[float, float]] = {
    "low": (0.0025, 1e-4),
    "high": (0.01, 1.6e-3),
}


def make_sampler(
    name: str,
    *,
    sigma_range: tuple[float, float] = (0.0, 20.0),
    lambda_shot: float | None = None,
    lambda_read: float | None = None,
) -> Sampler:
    """Build a sampler by name: ``paper`` (σ range in 8-bit units), ``brooks``, ``fixed``
    (needs ``lambda_shot`` and ``lambda_read`` in [0, 1] units), or a preset name (``low``, ``high``).
    """
    if name == "paper":
        return PaperSampler(*sigma_range)
    if name == "brooks":
        return BrooksSampler()
    if name == "fixed":
        if lambda_shot is None or lambda_read is None:
            raise RawrclError("the fixed sampler needs --lambda-shot and --lambda-read ([0,1] units)")
        return FixedSampler(float(lambda_shot), float(lambda_read))
    if name in PRESETS:
        return FixedSampler(*PRESETS[name])
    raise RawrclError(f"unknown noise sampler {name!r}; expected paper, brooks, fixed, low or high")
