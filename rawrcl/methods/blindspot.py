"""The blind-spot objective of Laine et al. (2019) for :class:`rawrcl.models.blindspot.BlindSpotDenoiser`:
the negative log-likelihood of each noisy packed pixel y under N(μ, s² + v), where (μ, s²) is the network's
prior from the pixel's surroundings (the pixel itself hidden) and v = λshot·max(μ, 0) + λread its known noise
variance. No clean data: the likelihood is maximised where μ is the clean value and s² its uncertainty.

Clipped samples: by default scored only where the local signal is clear of a clip level (the mask of
:mod:`rawrcl.methods.r2r`): a black-clipped sample is not Gaussian about its clean value. ``censored=True``
scores every sample with the censored (Tobit) likelihood instead: a sample at the file's floor (or at 1)
has the probability P(x + n ≤ floor) = Φ((floor − μ)/√(s² + v)) (resp. P(x + n ≥ 1)), every other sample
its Gaussian density, so the shadows train the network too. Batches as ``rawrcl adapt``'s (``x_a``
[+ ``x_b``], ``noise`` (B, 2, C), ``floor`` (B,)); banded files are not modelled (row noise breaks the
blind spot's independence assumption: a row's other samples carry the same offset).
"""

from __future__ import annotations

import math

import torch

from rawrcl.methods.base import Method
from rawrcl.methods.r2r import neighbour_mean, noisy_crops, scored_mask, signal_variance
from rawrcl.models.registry import unwrap
from rawrcl.models.sure import CLIP_TOL


class BlindSpotNLL(Method):
    """Options: ``margin`` (2.5 noise stds from a clip level; not censored), ``censored`` (False: the clipped
    samples' likelihood, module docstring). The model must offer ``prior(y)`` → (μ, s²)."""

    name = "blindspot"
    needs = ("x_a", "noise")

    def __init__(self, margin: float = 2.5, censored: bool = False, **options) -> None:
        super().__init__(margin=float(margin), censored=bool(censored), **options)
        self.margin, self.censored = float(margin), bool(censored)

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        y, noise, floor, _ = noisy_crops(batch)
        mu, s2 = unwrap(model).prior(y)  # through DistributedDataParallel / torch.compile
        v = signal_variance(mu, noise)  # the told variance at the prior mean
        tot = s2 + v
        nll = 0.5 * ((y - mu) ** 2 / tot + torch.log(tot) + math.log(2 * math.pi))
        if self.censored:
            nll, share = censored_nll(y, mu, tot, floor, nll)
            w = torch.ones_like(y)  # every sample scored
        else:
            xhat = neighbour_mean(y)
            w = scored_mask(xhat, signal_variance(xhat, noise), floor, self.margin)
            share = 0.0
        n = w.sum().clamp_min(1.0)
        loss = (nll * w).sum() / n
        std = float((s2.detach().sqrt() * w).sum() / n)
        return {"loss": loss, "prior_std": std, "scored": float(w.mean()), "censored": share}


def censored_nll(
    y: torch.Tensor, mu: torch.Tensor, tot: torch.Tensor, floor: torch.Tensor, nll: torch.Tensor
) -> tuple[torch.Tensor, float]:
    """(nll, share of censored samples): ``nll`` (the Gaussian one, (B, C, h, w)) replaced by
    −log Φ((floor − μ)/√tot) where ``y`` sits at its file's ``floor`` (B,) (−1: not clipped) and by
    −log Φ((μ − 1)/√tot) where it sits at 1."""
    sd = tot.sqrt()
    fl = floor.to(y.dtype).view(-1, 1, 1, 1)
    low = (fl > -0.5) & (y <= fl + CLIP_TOL)
    high = y >= 1.0 - CLIP_TOL
    nll = torch.where(low, -torch.special.log_ndtr((fl - mu) / sd), nll)
    nll = torch.where(high, -torch.special.log_ndtr((mu - 1.0) / sd), nll)
    return nll, float((low | high).float().mean())


__all__ = ["BlindSpotNLL", "censored_nll"]
