"""The blind-spot objective of Laine et al. (2019) for :class:`rawrcl.models.blindspot.BlindSpotDenoiser`:
the negative log-likelihood of each noisy packed pixel y under N(μ, s² + v), where (μ, s²) is the network's
prior from the pixel's surroundings (the pixel itself hidden) and v = λshot·max(μ, 0) + λread its known noise
variance. No clean data: the likelihood is maximised where μ is the clean value and s² its uncertainty.

Scored only where the local signal is clear of a clip level (the mask of :mod:`rawrcl.methods.r2r`): a
black-clipped sample is not Gaussian about its clean value. Batches as ``rawrcl adapt``'s (``x_a``
[+ ``x_b``], ``noise`` (B, 2, C), ``floor`` (B,)); banded files are not modelled (row noise breaks the
blind spot's independence assumption: a row's other samples carry the same offset).
"""

from __future__ import annotations

import math

import torch

from rawrcl.methods.base import Method
from rawrcl.methods.r2r import neighbour_mean, noisy_crops, scored_mask, signal_variance
from rawrcl.models.registry import unwrap


class BlindSpotNLL(Method):
    """Options: ``margin`` (2.5 noise stds from a clip level). The model must offer ``prior(y)`` → (μ, s²)."""

    name = "blindspot"
    needs = ("x_a", "noise")

    def __init__(self, margin: float = 2.5, **options) -> None:
        super().__init__(margin=float(margin), **options)
        self.margin = float(margin)

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        y, noise, floor, _ = noisy_crops(batch)
        mu, s2 = unwrap(model).prior(y)  # through DistributedDataParallel / torch.compile
        v = signal_variance(mu, noise)  # the told variance at the prior mean
        xhat = neighbour_mean(y)
        w = scored_mask(xhat, signal_variance(xhat, noise), floor, self.margin)
        tot = s2 + v
        nll = 0.5 * ((y - mu) ** 2 / tot + torch.log(tot) + math.log(2 * math.pi))
        n = w.sum().clamp_min(1.0)
        loss = (nll * w).sum() / n
        std = float((s2.detach().sqrt() * w).sum() / n)
        return {"loss": loss, "prior_std": std, "scored": float(w.mean())}


__all__ = ["BlindSpotNLL"]
