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
import torch.nn.functional as F

from rawrcl.errors import RawrclError

PerChannel = float | Sequence[float]


def sigma8_to_unit(sigma8: float) -> float:
    """Convert a noise standard deviation in 8-bit units ([0, 255] scale) to [0, 1] units."""
    return float(sigma8) / 255.0


@dataclass(frozen=True)
class Readout:
    """The ADC of a sensor: the noisy signal is offset by the black level, rounded to whole DN and clipped
    to [0, white], then normalised back — what a RAW file stores.

    Attributes
    ----------
    bits : bit depth; white = 2**bits − 1 DN.
    black : black level as a fraction of white (0 ≤ black < 1). ``0`` is a file whose black level was
        subtracted before writing (phone DNGs, the HDR+ burst): every negative noisy value is clipped to
        0. With a pedestal (black > 0) values down to −black/(1 − black) survive.

    Values in [0, 1] units before and after; the quantisation step is 1 / ((1 − black)·white).
    """

    bits: int = 14
    black: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= int(self.bits) <= 16 or not 0.0 <= float(self.black) < 1.0:
            raise RawrclError(f"readout needs 1 ≤ bits ≤ 16 and 0 ≤ black < 1, got {self.bits}, {self.black}")

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Quantise and clip a noisy signal ([0, 1] units, any shape) as the file would store it."""
        white = float(2 ** int(self.bits) - 1)
        black = float(self.black) * white
        scale = white - black
        dn = torch.round(x * scale + black).clamp(0.0, white)
        return (dn - black) / scale

    def to_dict(self) -> dict:
        return {"bits": int(self.bits), "black": float(self.black)}


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
    readout : optional :class:`Readout` (black level, bit depth): quantise and clip like a RAW file.
        ``variance`` / ``std`` describe the noise before the readout.
    """

    lambda_shot: PerChannel
    lambda_read: PerChannel
    poisson: bool = False
    clip: bool = False
    readout: Readout | None = None

    def __post_init__(self) -> None:
        for name in ("lambda_shot", "lambda_read"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if not np.all(np.isfinite(v)) or np.any(v < 0):
                raise RawrclError(f"{name} must be finite and ≥ 0, got {getattr(self, name)!r}")

    def params(self, channels: int) -> torch.Tensor:
        """(2, channels) float32 tensor [λshot; λread] per channel (scalars broadcast), [0, 1] units — the
        ``noise`` input of noise-aware models (:func:`std_map`)."""
        rows = []
        for v in (self.lambda_shot, self.lambda_read):
            a = np.asarray(v, dtype=np.float64)
            if a.ndim == 1 and a.size != channels:
                raise RawrclError(f"noise model has {a.size} per-channel values, the signal {channels}")
            rows.append(np.broadcast_to(a, (channels,)))
        return torch.as_tensor(np.stack(rows), dtype=torch.float32)

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
        if self.readout is not None:
            noisy = self.readout.apply(noisy)
        return noisy.clamp(0, 1) if self.clip else noisy

    def to_dict(self) -> dict:
        """JSON-ready description (λ in [0, 1] units)."""
        return {
            "lambda_shot": _jsonable(self.lambda_shot),
            "lambda_read": _jsonable(self.lambda_read),
            "poisson": self.poisson,
            "clip": self.clip,
            "readout": None if self.readout is None else self.readout.to_dict(),
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


@dataclass(frozen=True)
class CameraSampler:
    """Noise of real camera files, from a large sensor at base ISO to a small sensor at its highest ISO.

    Per draw (ranges derived from public sources, docs/noise.md): ln λshot ~ U(ln ``shot_min``,
    ln ``shot_max``); the read noise referred to electrons σe ~ logU(``electrons_min``, ``electrons_max``)
    and an ADC floor ~ logU(``floor_min``, ``floor_max``) give λread = min(σe²·λshot² + floor,
    ``read_cap``·λshot). Shot noise is Poisson. The readout (:class:`Readout`) is drawn too: bit depth
    from ``bits`` with probabilities ``bits_p``; with probability ``black_subtracted`` the file is clipped
    at 0 (black level subtracted before writing), otherwise it keeps a pedestal of U(``pedestal_min``,
    ``pedestal_max``) of white. [0, 1] units throughout.
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
        return NoiseModel(shot, read, poisson=True, readout=Readout(bits, black))


def local_mean(x: torch.Tensor, size: int = 3) -> torch.Tensor:
    """Box mean over ``size``×``size`` neighbours of each channel (edges replicated): (B, C, h, w) → same."""
    p = size // 2
    return F.avg_pool2d(F.pad(x, (p, p, p, p), mode="replicate"), size, stride=1)


def std_map(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Per-pixel noise std of a noisy signal, the input of noise-aware models.

    ``x``: (B, C, h, w) noisy signal in [0, 1] units (packed RAW planes or RGB); ``noise``: (B, 2, C)
    [λshot; λread] per channel (:meth:`NoiseModel.params`). Returns (B, C, h, w)
    √(λshot·max(x̄, 0) + λread) with x̄ the 3×3 local mean of ``x`` — a smoothed signal estimate, so the map
    carries little of the noise itself; negative (below-black) values count as 0.
    """
    lam_shot = noise[:, 0, :, None, None].to(x.dtype)
    lam_read = noise[:, 1, :, None, None].to(x.dtype)
    return (lam_shot * local_mean(x).clamp_min(0) + lam_read).clamp_min(0).sqrt()


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


def make_sampler(
    name: str,
    *,
    sigma_range: tuple[float, float] = (0.0, 20.0),
    lambda_shot: float | None = None,
    lambda_read: float | None = None,
) -> Sampler:
    """Build a sampler by name: ``paper`` (σ range in 8-bit units), ``brooks``, ``camera``, ``fixed``
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
    if name == "camera":
        return CameraSampler()
    if name in PRESETS:
        return FixedSampler(*PRESETS[name])
    raise RawrclError(f"unknown noise sampler {name!r}; expected paper, brooks, camera, fixed, low or high")
