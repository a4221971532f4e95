"""The signal-dependent noise model (paper Appendix A) and the sensor readout.

Units
-----
The clean signal x is a RAW (or linear RGB) value normalised to [0, 1] after black-level
subtraction and division by (white − black). λshot and λread are in those units:

    n ~ N(0, λshot·x + λread)          (heteroscedastic Gaussian, the paper's NLF)

so that the noise standard deviation at x is ``sqrt(λshot·x + λread)``. This is also the DNG
``NoiseProfile`` semantics (S = λshot, O = λread).

8-bit σ values, as the paper quotes them (σ ∈ [0, 20]), are converted with σ₀₁ = σ₈ / 255 — see
:func:`sigma8_to_unit`; samplers (:mod:`.samplers`) take σ in 8-bit units as *arguments* and return λ in
[0, 1] units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

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
    row : std of an offset shared by every sample of a sensor row (banding; :func:`row_offsets`),
        [0, 1] units, added before the readout. Not part of ``variance`` / ``std`` / :meth:`params`
        (the white noise a σ map describes).
    """

    lambda_shot: PerChannel
    lambda_read: PerChannel
    poisson: bool = False
    clip: bool = False
    readout: Readout | None = None
    row: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(float(self.row)) and float(self.row) >= 0):
            raise RawrclError(f"row noise must be finite and ≥ 0, got {self.row!r}")
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

    def scaled(self, factor: float) -> NoiseModel:
        """The same noise with both λ × ``factor`` (the σ map × √factor; ``--noise-scale``); per-channel
        values stay per channel (as tuples), every other field is kept."""

        def times(v: PerChannel) -> PerChannel:
            return tuple(float(x) * factor for x in v) if np.ndim(v) else float(v) * factor

        return replace(self, lambda_shot=times(self.lambda_shot), lambda_read=times(self.lambda_read))

    def conditioning(self, channels: int) -> torch.Tensor:
        """The ``noise`` input of noise-aware models: :meth:`params`, plus a third row σ_row² (the row
        noise's variance, every channel) when ``row`` > 0 — (2 or 3, channels) float32, [0, 1] units."""
        p = self.params(channels)
        return with_row_variance(p[None], self.row)[0] if self.row > 0 else p

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
        if self.row > 0:
            noisy = noisy + row_offsets(x.shape, self.row, generator, x.device, x.dtype)
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
            **({"row": float(self.row)} if self.row > 0 else {}),
            "units": "[0,1] after black/white level; variance = lambda_shot*x + lambda_read",
        }


def row_offsets(
    shape: Sequence[int],
    row: float | torch.Tensor,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Row (banding) offsets for a signal of ``shape`` (..., C, H, W): N(0, row²) per sensor row, the same
    along W, shape (..., C, H, 1). With C = 4 (packed RGGB planes [R, G1, G2, B]) planes 0–1 share the
    offset of mosaic row 2k and planes 2–3 that of row 2k + 1; otherwise every channel shares its row's.
    ``row`` a float or a tensor broadcastable to the leading dims (e.g. (B,) per sample), [0, 1] units."""
    *lead, c, h, _ = (int(v) for v in shape)
    groups = 2 if c == 4 else 1
    z = torch.randn((*lead, groups, h, 1), generator=generator, device=device, dtype=dtype)
    z = z.repeat_interleave(2, dim=-3) if groups == 2 else z.expand(*lead, c, h, 1)
    r = torch.as_tensor(row, dtype=dtype, device=device)
    if r.ndim:
        r = r.reshape(*r.shape, *([1] * (len(shape) - r.ndim)))
    return z * r


def with_row_variance(noise: torch.Tensor, row: float | torch.Tensor) -> torch.Tensor:
    """Conditioning (B, 2, C) [λshot; λread] → (B, 3, C) with σ_row² as third row (``row`` the std, a float
    or (B,)); a (B, 3, C) input has its third row replaced. [0, 1] units."""
    r = torch.as_tensor(row, dtype=noise.dtype, device=noise.device).reshape(-1, 1, 1)
    third = (r**2).expand(noise.shape[0], 1, noise.shape[2])
    return torch.cat([noise[:, :2], third], dim=1)


def _jsonable(v: PerChannel) -> float | list[float]:
    a = np.asarray(v, dtype=np.float64)
    return float(a) if a.ndim == 0 else [float(t) for t in a]
