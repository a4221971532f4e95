"""A RAW denoiser as a JDD model: denoise the packed mosaic, then demosaic it bilinearly.

Why: a RAW denoiser can be trained with no clean images at all (Noise2Self masking on the noisy mosaic
is well posed), while a JDD network trained self-supervised has no signal for the two colours a
pixel does not sample (docs/benchmarks.md). Chaining the self-supervised denoiser with a fixed
demosaic gives a usable 0-label RGB pipeline.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rawrcl.models.geometry import size_multiple
from rawrcl.models.heads import bilinear_demosaic_packed


class DenoiseThenDemosaic(nn.Module):
    """``bilinear_demosaic_packed(denoiser(x))``.

    ``denoiser``: packed RAW → packed RAW (head ``"raw"``). Shapes: (B, 4, h, w) [R, G1, G2, B] in RGGB
    geometry, [0, 1] → (B, 3, 2h, 2w) linear camera RGB in the same units.
    """

    def __init__(self, denoiser: nn.Module) -> None:
        super().__init__()
        self.denoiser = denoiser
        self.noise_aware = bool(getattr(denoiser, "noise_aware", False))
        self.size_multiple = size_multiple(denoiser)

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """``noise`` (B, 2, 4): the denoiser's noise parameters when it is noise-aware."""
        y = self.denoiser(x, noise) if self.noise_aware else self.denoiser(x)
        with torch.autocast(y.device.type, enabled=False):
            return bilinear_demosaic_packed(y.float())


def serves(head: str | None, wanted: str) -> bool:
    """Whether a model with output head ``head`` can run a task that needs head ``wanted``: the same
    head, or a RAW denoiser (``"raw"``) for ``"jdd"`` (through :func:`adapt`)."""
    return head == wanted or (head, wanted) == ("raw", "jdd")


def adapt(model: nn.Module, head: str | None, wanted: str) -> nn.Module:
    """``model`` ready for head ``wanted``: a RAW denoiser wrapped in :class:`DenoiseThenDemosaic` for
    ``"jdd"``, anything else unchanged (check :func:`serves` first)."""
    return DenoiseThenDemosaic(model) if (head, wanted) == ("raw", "jdd") else model
