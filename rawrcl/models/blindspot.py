"""A blind-spot denoiser with a Bayesian posterior-mean step (Laine et al. 2019, "High-quality
self-supervised deep image denoising"), for packed RAW.

:class:`BlindSpotNet` predicts, for every packed pixel, a Gaussian prior N(μ, s²) of the clean value from the
*other* pixels only: one small U-Net is run on the input rotated by 0/90/180/270°, each pass built from
convolutions and pools that see only rows above and at a pixel (:class:`_Down` shifts before pooling), its
output shifted down one row — so each pass sees a half-plane strictly above the pixel, and the four rotations
together see everything but the pixel itself (all four CFA samples of a packed pixel are hidden together).
With ``cross=True`` the head also reads the pixel's *other* CFA samples — for output plane c the 3 samples of
the same 2×2 cell but c, the nearest neighbours a mosaic has (G1 and G2 are diagonal neighbours, R and B
side by side with both greens) — through a per-plane masked 1×1 path: each plane is still blind to its own
sample, whose noise is independent of the others' on a sensor.
Trained on noisy data only (:class:`rawrcl.methods.blindspot.BlindSpotNLL`: the likelihood of y under
N(μ, s² + v)); at inference :class:`BlindSpotDenoiser` combines the prior with the pixel's own value,
E[x | y] = (s²·y + v·μ) / (s² + v), with v = λshot·max(μ, 0) + λread the known noise variance.

Shapes: input (B, 4, h, w) packed RAW in [0, 1] (h, w multiples of 4); prior μ, s² (B, 4, h, w). Diagonal
prior per packed channel (the paper's full covariance over colour channels is left out).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rawrcl.models.beside import Beside
from rawrcl.models.sure import CLIP_TOL, clip_levels
from rawrcl.noise import variance_map

#: log of the prior variance an untrained head starts at (the head's output is added): 1e-4, a typical RAW
#: noise variance in [0, 1] units, so that training starts where the posterior step already matters
LOG_S2_START = math.log(1e-4)


def _shift_down(x: torch.Tensor, n: int = 1) -> torch.Tensor:
    """(B, C, h, w) moved down ``n`` rows, zeros on top: row i then holds what was row i − n."""
    return F.pad(x, (0, 0, n, 0))[:, :, : x.shape[2]]


class _Conv(nn.Module):
    """3×3 convolution whose output row i reads input rows i − 2 … i only, then leaky ReLU."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.conv(F.pad(x, (1, 1, 2, 0))), 0.1)


class _Down(nn.Module):
    """Shift down one row, then 2×2 max-pool: after nearest upsampling no row sees a row below it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(_shift_down(x), 2)


class _Branch(nn.Module):
    """U-Net of :class:`_Conv` layers with ``levels`` poolings (2: ``e0``, ``e1``, ``mid``, ``d1``, ``d0``;
    each more level one more pair ``e{i}``/``d{i}`` at half the resolution); output row i depends on input
    rows ≤ i. h, w must be multiples of 2^levels."""

    def __init__(self, cin: int, width: int, levels: int = 2) -> None:
        super().__init__()
        w, self.levels = width, int(levels)
        if self.levels < 1:
            raise ValueError(f"levels must be ≥ 1, got {levels}")
        self.e0 = nn.Sequential(_Conv(cin, w), _Conv(w, w))
        for i in range(1, self.levels):
            setattr(self, f"e{i}", nn.Sequential(_Down(), _Conv(w, w), _Conv(w, w)))
            setattr(self, f"d{i}", nn.Sequential(_Conv(2 * w, w), _Conv(w, w)))
        self.mid = nn.Sequential(_Down(), _Conv(w, w), _Conv(w, w))
        self.d0 = nn.Sequential(_Conv(2 * w + cin, w), _Conv(w, w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.e0(x)]
        for i in range(1, self.levels):
            skips.append(getattr(self, f"e{i}")(skips[-1]))
        u = self.mid(skips[-1])
        for i in range(self.levels - 1, 0, -1):
            u = getattr(self, f"d{i}")(
                torch.cat([F.interpolate(u, scale_factor=2.0, mode="nearest"), skips[i]], 1)
            )
        return self.d0(torch.cat([F.interpolate(u, scale_factor=2.0, mode="nearest"), skips[0], x], 1))


def ring_mean(y: torch.Tensor) -> torch.Tensor:
    """Mean of each packed pixel's 8 neighbours per channel (those inside the image; never the pixel itself,
    also at the border), (B, C, h, w) → same: the blind estimate :class:`BlindSpotNet` refines."""
    k = torch.ones(1, 1, 3, 3, dtype=y.dtype, device=y.device)
    k[..., 1, 1] = 0
    c = y.shape[1]
    total = F.conv2d(F.pad(y, (1, 1, 1, 1)), k.expand(c, 1, 3, 3), groups=c)
    count = F.conv2d(F.pad(torch.ones_like(y[:, :1]), (1, 1, 1, 1)), k)
    return total / count


class BlindSpotNet(nn.Module):
    """Prior N(μ, s²) of each packed pixel from its surroundings only: μ = :func:`ring_mean` + a learned
    correction, log s² = log 1e-4 + a learned offset. ``channels`` packed planes (4), ``width`` features per
    rotation; ``cross``: the head also reads the pixel's other planes (module docstring), each output plane
    blind to its own sample only; ``levels`` poolings of each rotation's U-Net (h, w multiples of
    ``size_multiple`` = 2^levels)."""

    def __init__(self, channels: int = 4, width: int = 32, cross: bool = False, levels: int = 2) -> None:
        super().__init__()
        self.channels, self.width, self.cross = int(channels), int(width), bool(cross)
        self.levels = int(levels)
        self.size_multiple = 2**self.levels
        self.branch = _Branch(self.channels, self.width, self.levels)
        w4, c = 4 * self.width, self.channels
        if not self.cross:
            self.head = nn.Sequential(
                nn.Conv2d(w4, w4, 1),
                nn.LeakyReLU(0.1),
                nn.Conv2d(w4, self.width, 1),
                nn.LeakyReLU(0.1),
                nn.Conv2d(self.width, 2 * c, 1),
            )
            last = self.head[-1]
        else:
            self.head_in = nn.Conv2d(w4, w4, 1)
            #: (C out, 4·width, C in) weights of the same cell's samples; [c, :, c] is held at 0 by ``own``
            self.centre = nn.Parameter(torch.zeros(c, w4, c))
            self.register_buffer("own", torch.eye(c)[:, None, :].bool(), persistent=False)
            self.head_mid = nn.Conv2d(w4, self.width, 1)
            self.head_out = nn.Conv2d(c * self.width, 2 * c, 1, groups=c)  # per plane: (μ correction, log s²)
            last = self.head_out
        nn.init.zeros_(last.weight)  # untrained: μ = the ring mean, s² = 1e-4
        nn.init.zeros_(last.bias)

    def _head_cross(self, feats: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(B, 2C, h, w) [μ corrections; log s² offsets] from the blind features and, per output plane c, the
        same cell's samples of the other planes."""
        a = self.head_in(feats)
        w = self.centre.masked_fill(self.own, 0.0).to(y.dtype)
        hidden = []
        for c in range(self.channels):
            h = F.leaky_relu(a + F.conv2d(y, w[c][:, :, None, None]), 0.1)
            hidden.append(F.leaky_relu(self.head_mid(h), 0.1))
        out = self.head_out(torch.cat(hidden, 1))  # grouped: [μ₀, ls₀, μ₁, ls₁, …]
        return torch.cat([out[:, 0::2], out[:, 1::2]], 1)

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(μ, s²) of (B, C, h, w) ``y``; each output pixel independent of the same pixel of ``y`` (with
        ``cross``: each output sample independent of the same sample of ``y``)."""
        m = self.size_multiple
        if y.shape[-2] % m or y.shape[-1] % m:
            raise ValueError(f"BlindSpotNet needs h, w multiples of {m}, got {tuple(y.shape[-2:])}")
        feats = []
        for k in range(4):
            f = self.branch(torch.rot90(y, k, (2, 3)))
            feats.append(torch.rot90(_shift_down(f), -k, (2, 3)))
        feats = torch.cat(feats, 1)
        out = self._head_cross(feats, y) if self.cross else self.head(feats)
        mu = ring_mean(y) + out[:, : self.channels]
        s2 = torch.exp(out[:, self.channels :].clamp(-20.0, 20.0) + LOG_S2_START)
        return mu, s2


class BlindSpotDenoiser(nn.Module):
    """``model(y, noise)`` → the posterior mean (B, C, h, w) of a :class:`BlindSpotNet` prior and
    Gaussian noise of the told variance; ``noise`` (B, 2 or 3, C) (λshot, λread; a σ_row² row is ignored),
    as noise-aware models take it. ``posterior=False`` returns the prior mean μ alone (the blind-spot
    estimate). ``censored``: the network was trained with the censored likelihood
    (:func:`rawrcl.methods.blindspot.censored_nll`), which scores the clipped samples too — then a composite
    need not keep the start near the clip levels (:class:`WithBlindSpot`). Registered as arch ``"blindspot"``
    (config ``channels``, ``width``, ``cross``, ``levels``, ``censored``: absent in checkpoints written before
    them, = False, 2, False)."""

    noise_aware = True
    head_name = "raw"
    #: a sample at a clip level of its input gets :func:`clipped_posterior` (the posterior given only that the
    #: noisy value lies beyond the clip), not the Gaussian update applied to the clipped value. Off: measured
    #: worse on two synthetic clipped bursts with a truth, up to −0.5 dB beside the start (stop 72,
    #: docs/adaptation.md, "Lifting the shadow guard …")
    clipped_posterior = False

    def __init__(
        self,
        channels: int = 4,
        width: int = 32,
        posterior: bool = True,
        cross: bool = False,
        levels: int = 2,
        censored: bool = False,
    ) -> None:
        super().__init__()
        self.net = BlindSpotNet(channels, width, cross, levels)
        self.size_multiple = self.net.size_multiple
        self.posterior = bool(posterior)
        self.censored = bool(censored)

    @property
    def config(self) -> dict:
        return {
            "arch": "blindspot",
            "channels": self.net.channels,
            "width": self.net.width,
            "cross": self.net.cross,
            "levels": self.net.levels,
            "censored": self.censored,
        }

    def prior(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net(y)

    def forward(self, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        mu, s2 = self.net(y)
        if not self.posterior:
            return mu
        v = variance_map(mu, noise[:, :2]).clamp_min(1e-12)
        post = (s2 * y + v * mu) / (s2 + v)
        return clipped_posterior(y, mu, s2, v, post) if self.clipped_posterior else post


def clipped_posterior(
    y: torch.Tensor, mu: torch.Tensor, s2: torch.Tensor, v: torch.Tensor, post: torch.Tensor
) -> torch.Tensor:
    """``post`` (B, C, h, w) where ``y`` is not at a clip level of its own samples (:func:`clip_levels`), else
    the mean of the clean value x ~ N(μ, s²) given only that y = x + n, n ~ N(0, v), lies beyond the clip:
    E[x | y ≤ lo] = μ − s²/√t · φ(a)/Φ(a), a = (lo − μ)/√t, and E[x | y ≥ hi] = μ + s²/√t · φ(b)/Φ(b),
    b = (μ − hi)/√t, t = s² + v — the truncated-normal counterpart of the censored likelihood the network is
    trained with (:func:`rawrcl.methods.blindspot.censored_nll`). All (B, C, h, w) in [0, 1] units."""
    lo, hi = (t.view(-1, 1, 1, 1) for t in clip_levels(y.float()))
    low, high = y.float() <= lo + CLIP_TOL, y.float() >= hi - CLIP_TOL
    if not bool((low | high).any()):
        return post
    mu32, s232 = mu.float(), s2.float()
    sd = (s232 + v.float()).sqrt()
    a = ((torch.where(torch.isfinite(lo), lo, 0.0) - mu32) / sd).clamp(-40, 40)
    b = ((mu32 - torch.where(torch.isfinite(hi), hi, 1.0)) / sd).clamp(-40, 40)

    def mills(z: torch.Tensor) -> torch.Tensor:  # φ(z)/Φ(z), stable far into the lower tail
        return torch.exp(-0.5 * z * z - 0.5 * math.log(2 * math.pi) - torch.special.log_ndtr(z))

    out = torch.where(low, (mu32 - s232 / sd * mills(a)).to(post.dtype), post)
    return torch.where(high, (mu32 + s232 / sd * mills(b)).to(post.dtype), out)


class WithBlindSpot(Beside):
    """A RAW denoiser (``base``: the start, e.g. the shipped CFA-site blend) beside a blind-spot network
    trained on the user's own noisy files (``blindspot``, :class:`BlindSpotDenoiser`): two estimates of each
    file with unlike errors, which :class:`~rawrcl.models.sure.SureShrink` combines with the input by
    per-tile weights from Stein's estimate — label-free, and back to the base where the blind-spot network
    does not help (``rawrcl adapt --method blindspot``; the form: :class:`~rawrcl.models.beside.Beside`).

    :meth:`parts` (nested): the base as ``rawrcl denoise`` runs it — with its own SURE weights, for the
    CFA-site blend over its first stage and JDD stage —, then the blind-spot posterior mean; an outer
    SureShrink weighs the two (K = 2). Chosen over one flat K = 3 SURE over all the estimates on synthetic
    conditions (level on each, ±0.001 dB; docs/adaptation.md, "The cross head, nested SURE weights …").
    Called directly (no SURE weights, ``--no-shrink``) the model is the base alone. Shapes: ``x`` (B, 4, h, w)
    packed [R, G1, G2, B] in [0, 1], ``noise`` (B, 2 or 3, 4) → (B, 4, h, w). Registered as arch
    ``"with_blindspot"`` (config ``base``, ``blindspot``).
    """

    arch, other_key = "with_blindspot", "blindspot"
    part_names = ("start (its SURE weights)", "blind-spot network")

    def __init__(self, base: nn.Module, blindspot: BlindSpotDenoiser) -> None:
        super().__init__(base, blindspot)
        self.blindspot = blindspot

    @property
    def sure_first_near_clips(self) -> bool:
        """Near a clip level (where SURE cannot score) SureShrink outputs the start, unless the network was
        trained with the censored likelihood: a network trained with the clipped samples left out lifted the
        shadows of a black-clipped burst (docs/adaptation.md, "The shadows"); a censored one, beside the start
        without this guard, is better on two synthetic clipped bursts against their truth, in the shadows too
        ("Lifting the shadow guard for censored networks")."""
        return not self.blindspot.censored

    def second(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.blindspot(x, noise[:, :2])


__all__ = ["BlindSpotDenoiser", "BlindSpotNet", "WithBlindSpot", "clipped_posterior", "ring_mean"]
