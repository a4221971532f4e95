"""Residual contrastive loss (paper Eq. 3 and Algorithm 1).

For a batch of N+1 images, ``r_a[j]`` and ``r_b[j]`` are the residuals of two overlapping crops of image
j. With D[j, i] = d(s·ν(r_a[j]), s·ν(r_b[i])) (s = ``scale``, ν = ``normalize``):

    loss_j = −log softmax_i(−D[j, i] / τ)[j] = D[j, j]/τ + logsumexp_i(−D[j, i]/τ)

and the batch loss is Σ_j loss_j (Algorithm 1; ``reduction="mean"`` divides by N+1).

Scale
-----
Residuals in [0, 1] units are tiny (noise σ ≈ 0.004–0.08), so EMDs are ≈ 1e-3 and −D/τ is flat at any
usual τ: no learning signal. The distance is therefore computed on residuals multiplied by an explicit
``scale``; the default 255 puts ``normalize="none"`` distances in 8-bit units, where τ = 0.5 gives logits
that separate instances (measured in docs/losses.md).

Normalisation (the remedy for residual inflation)
-------------------------------------------------
The paper's form (``normalize="none"``) is positively homogeneous: EMD(k·a, k·b) = k·EMD(a, b), so
whenever positives are closer than negatives, inflating every residual lowers the loss without bound;
a network achieves that by leaking image content into its residuals. Options:

- ``"none"``: the paper's form.
- ``"std"``: each residual is divided by its own (differentiable) standard deviation before the
  distance: the loss becomes exactly invariant to residual magnitude, so it can no longer reward
  inflation; only the *shape* of the value distribution (and its mean/std ratio) discriminates.
- ``"noise_level"``: each residual is divided by the expected noise standard deviation
  σ(x) = sqrt(λshot·x + λread), given per pixel or per image (``noise_std_a/noise_std_b``), or
  estimated from the noisy input by :func:`estimate_noise_std` (``x_a/x_b``). A perfectly denoised
  residual then is N(0, 1) for every image; the distance is measured relative to each image's own
  noise level (a per-image noise-level-aware distance). Not magnitude-invariant.

``center`` (optional, any mode) subtracts each residual's per-channel mean before the distance. The
true noise is zero-mean, so centring loses nothing about it, but it removes the cheapest way to tell
instances apart: a per-image offset of the residual, i.e. a colour cast of f(x) (measured at 0 labels
for JDD in docs/losses.md). ``center=False`` keeps the paper's form.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from rawrcl.errors import RawrclError
from rawrcl.losses.pairwise import get_distance, pairwise

__all__ = ["ResidualContrastiveLoss", "estimate_noise_std", "NORMALIZATIONS", "DEFAULT_SCALE"]

NORMALIZATIONS = ("none", "std", "noise_level")

DEFAULT_SCALE = {"none": 255.0, "std": 30.0, "noise_level": 30.0}
"""Default ``scale`` per normalisation (chosen from the logit-spread study in docs/losses.md)."""


def estimate_noise_std(x: torch.Tensor) -> torch.Tensor:
    """Robust per-image, per-channel noise σ of a noisy image (independent of any model).

    Median absolute deviation of the diagonal pixel differences (x[i,j] − x[i+1,j+1])/√2 divided by
    0.6745 (Donoho-style MAD on a high-pass), per channel.

    Parameters
    ----------
    x : (B, C, H, W) noisy image (RGB or packed RAW), [0, 1] units, H, W ≥ 2.

    Returns
    -------
    (B, C, 1, 1) σ estimates in the units of x (detached; edges inflate it slightly on textured crops).
    """
    if x.ndim != 4 or x.shape[-1] < 2 or x.shape[-2] < 2:
        raise RawrclError(f"estimate_noise_std expects (B, C, H, W) with H, W ≥ 2, got {tuple(x.shape)}")
    with torch.no_grad():
        d = (x[..., 1:, 1:] - x[..., :-1, :-1]) / 2**0.5
        d = d.reshape(*d.shape[:2], -1)
        med = d.median(dim=-1, keepdim=True).values
        mad = (d - med).abs().median(dim=-1).values / 0.6745
    return mad[..., None, None]


class ResidualContrastiveLoss(nn.Module):
    """Residual contrastive loss (Eq. 3, Algorithm 1).

    Parameters
    ----------
    distance : a :data:`rawrcl.losses.DISTANCES` name (``"emd"`` | ``"bhattacharyya"``/``"bd"`` |
        ``"mmd"``) or a callable ``d(a, b) -> (B,)``.
    tau : temperature τ > 0.
    scale : residuals are multiplied by ``scale`` before the distance; None = ``DEFAULT_SCALE[normalize]``
        (255 for ``"none"`` → 8-bit units). Irrelevant for scale-free distances (BD) up to their eps.
    normalize : ``"none"`` (paper) | ``"std"`` | ``"noise_level"`` (see module docstring).
    reduction : ``"sum"`` (Algorithm 1) | ``"mean"``.
    center : subtract each residual's per-channel mean (over H, W) before the distance (see above).
    eps : floor of the std/noise σ used by the normalisations, in [0, 1] units.
    distance_options : keyword options forwarded to the distance (e.g. ``{"quantiles": 1024}``).

    Call
    ----
    ``loss(r_a, r_b, *, noise_std_a=None, noise_std_b=None, x_a=None, x_b=None, offset=0) -> scalar``

    r_a, r_b : (N+1, C, H, W) residuals of the two crops of each image ([0, 1] units); crop sizes of
        r_a and r_b may differ. ``noise_std_*``: σ broadcastable to r (e.g. ``NoiseModel.std(x)`` or
        (B, 1, 1, 1)), used by ``"noise_level"``; otherwise σ is estimated from the noisy crops
        ``x_a``/``x_b`` with :func:`estimate_noise_std`.
    r_b may also hold more candidates than r_a has anchors — (K, C, H, W), K ≥ offset + N+1 — e.g. the
        second crops of every rank's batch under DDP: the positive of ``r_a[j]`` is ``r_b[offset + j]``
        and all other rows are negatives (``noise_std_b``/``x_b`` then have K rows too).

    Attributes set on each call (detached, for logging): ``last_distances`` (N+1, K) and
    ``last_logits``.
    """

    def __init__(
        self,
        distance: str | Callable = "emd",
        tau: float = 0.5,
        scale: float | None = None,
        normalize: str = "none",
        reduction: str = "sum",
        eps: float = 1e-4,
        distance_options: dict | None = None,
        center: bool = False,
    ) -> None:
        super().__init__()
        if not tau > 0:
            raise RawrclError(f"contrastive temperature tau must be > 0, got {tau}")
        if normalize not in NORMALIZATIONS:
            raise RawrclError(f"unknown normalize {normalize!r}; expected one of {', '.join(NORMALIZATIONS)}")
        if reduction not in ("sum", "mean"):
            raise RawrclError(f"unknown reduction {reduction!r}; expected 'sum' or 'mean'")
        self.distance = get_distance(distance, **(distance_options or {}))
        self.tau = float(tau)
        self.normalize = normalize
        self.scale = float(DEFAULT_SCALE[normalize] if scale is None else scale)
        self.reduction = reduction
        self.eps = float(eps)
        self.center = bool(center)
        self.last_distances: torch.Tensor | None = None
        self.last_logits: torch.Tensor | None = None

    def _normalise(
        self, r: torch.Tensor, noise_std: torch.Tensor | None, x: torch.Tensor | None
    ) -> torch.Tensor:
        if self.center:
            r = r - r.mean(dim=(-2, -1), keepdim=True)
        if self.normalize == "none":
            return r
        if self.normalize == "std":
            flat = r.reshape(r.shape[0], -1)
            std = flat.std(dim=1, correction=0).clamp_min(self.eps)
            return r / std.reshape(-1, *([1] * (r.ndim - 1)))
        if noise_std is None:
            if x is None:
                raise RawrclError(
                    "normalize='noise_level' needs noise_std_a/noise_std_b (e.g. NoiseModel.std(x)) "
                    "or the noisy crops x_a/x_b to estimate it"
                )
            noise_std = estimate_noise_std(x)
        return r / noise_std.to(r.dtype).clamp_min(self.eps)

    def distances(
        self,
        r_a: torch.Tensor,
        r_b: torch.Tensor,
        *,
        noise_std_a: torch.Tensor | None = None,
        noise_std_b: torch.Tensor | None = None,
        x_a: torch.Tensor | None = None,
        x_b: torch.Tensor | None = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """(N+1, K) matrix D[j, i] = d(s·ν(r_a[j]), s·ν(r_b[i]))."""
        if offset < 0 or r_b.shape[0] < offset + r_a.shape[0]:
            raise RawrclError(
                f"r_b must hold the positives of r_a at rows {offset}…{offset + r_a.shape[0] - 1}, got "
                f"{tuple(r_a.shape)} and {tuple(r_b.shape)}"
            )
        if r_b.shape[0] < 2:
            raise RawrclError(
                "the contrastive loss needs at least 2 images per batch (one positive, ≥ 1 negative)"
            )
        a = self._normalise(r_a, noise_std_a, x_a) * self.scale
        b = self._normalise(r_b, noise_std_b, x_b) * self.scale
        return pairwise(a, b, self.distance)

    def forward(
        self,
        r_a: torch.Tensor,
        r_b: torch.Tensor,
        *,
        noise_std_a: torch.Tensor | None = None,
        noise_std_b: torch.Tensor | None = None,
        x_a: torch.Tensor | None = None,
        x_b: torch.Tensor | None = None,
        offset: int = 0,
    ) -> torch.Tensor:
        d = self.distances(
            r_a, r_b, noise_std_a=noise_std_a, noise_std_b=noise_std_b, x_a=x_a, x_b=x_b, offset=offset
        )
        logits = -d / self.tau
        self.last_distances = d.detach()
        self.last_logits = logits.detach()
        target = offset + torch.arange(d.shape[0], device=d.device)
        # cross_entropy = −log softmax via logsumexp (numerically stable).
        return F.cross_entropy(logits, target, reduction=self.reduction)

    def extra_repr(self) -> str:
        return (
            f"distance={self.distance!r}, tau={self.tau}, scale={self.scale}, normalize={self.normalize!r}, "
            f"reduction={self.reduction!r}, center={self.center}"
        )
