"""A RAW denoiser as a JDD model: denoise the packed mosaic, then demosaic it — bilinearly, or with a
learned JDD network told the little noise the denoiser left (the two-stage JDD).

Why bilinear: a RAW denoiser can be trained with no clean images at all (Noise2Self masking on the noisy
mosaic is well posed), while a JDD network trained self-supervised has no signal for the two colours a
pixel does not sample (docs/benchmarks.md). Chaining the self-supervised (or adapted) denoiser with a
fixed demosaic gives a usable 0-label RGB pipeline.

Why a learned second stage: the noise-aware RAW denoiser is the better-trained denoiser; a noise-aware JDD
network told λ·``residual`` (what is left after it) then mostly demosaics. Measured (docs/weights.md,
"Two-stage JDD"): above the single JDD network at high noise and on smooth full-resolution content, at
about 1.5× its time (whole `rawrcl jdd` command). A blind JDD network is not a good second stage (it
removes the noise it was trained on, which is no longer there: −3 dB on low-noise rows).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rawrcl.models.geometry import size_multiple
from rawrcl.models.heads import bilinear_demosaic_packed

#: λ multiplier the second stage is told by default: σ × 0.1 of the input's noise (chosen on the training
#: sources' validation split and measured on the burst; docs/weights.md)
RESIDUAL = 0.01


class DenoiseThenDemosaic(nn.Module):
    """``demosaicker(denoiser(x))``, or ``bilinear_demosaic_packed(denoiser(x))`` without a demosaicker.

    ``denoiser``: packed RAW → packed RAW (head ``"raw"``); ``demosaicker``: None or a JDD model (head
    ``"jdd"``); a noise-aware demosaicker is told the noise with λ × ``residual``. Shapes: (B, 4, h, w)
    [R, G1, G2, B] in RGGB geometry, [0, 1] → (B, 3, 2h, 2w) linear camera RGB in the same units. Noise
    aware when either stage is; then called ``model(x, noise)``, ``noise`` (B, 2 or 3, 4) [λshot; λread
    (; σ_row²)] per plane. Row-aware (reads σ_row²) when the denoiser is; the demosaicker is told the
    white part only (the denoiser removes the banding).
    """

    def __init__(self, denoiser: nn.Module, demosaicker: nn.Module | None = None, residual: float = RESIDUAL):
        super().__init__()
        if not 0 < residual <= 1:
            raise ValueError(f"residual must be in (0, 1], got {residual}")
        self.denoiser = denoiser
        self.demosaicker = demosaicker
        self.residual = float(residual)
        self.noise_aware = _aware(denoiser) or _aware(demosaicker)
        self.row_aware = bool(getattr(denoiser, "row_aware", False))
        self.size_multiple = max(size_multiple(denoiser), size_multiple(demosaicker) if demosaicker else 1)

    @property
    def head_name(self) -> str:
        return "jdd"

    @property
    def config(self) -> dict:
        """The checkpoint config (arch ``two_stage``; :func:`rawrcl.models.registry.build_model`)."""
        sub = {"denoiser": dict(getattr(self.denoiser, "config", {}))}
        sub["demosaicker"] = (
            None if self.demosaicker is None else dict(getattr(self.demosaicker, "config", {}))
        )
        return {
            "arch": "two_stage",
            "head": "jdd",
            "in_channels": 4,
            "noise_aware": self.noise_aware,
            "row_aware": self.row_aware,
            **sub,
            "residual": self.residual,
        }

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """``noise``: the input's noise parameters (required when :attr:`noise_aware`)."""
        y = self.denoiser(x, noise) if _aware(self.denoiser) else self.denoiser(x)
        if self.demosaicker is not None:
            if not _aware(self.demosaicker):
                return self.demosaicker(y.to(x.dtype))
            told = None if noise is None else noise[:, :2].to(y.device) * self.residual  # no σ_row²
            return self.demosaicker(y.to(x.dtype), told)
        with torch.autocast(y.device.type, enabled=False):
            return bilinear_demosaic_packed(y.float())


def _aware(model: nn.Module | None) -> bool:
    """Whether a stage takes the noise parameters (its ``noise_aware``; the stages are bare models)."""
    return bool(getattr(model, "noise_aware", False))


def serves(head: str | None, wanted: str) -> bool:
    """Whether a model with output head ``head`` can run a task that needs head ``wanted``: the same
    head, or a RAW denoiser (``"raw"``) for ``"jdd"`` (through :func:`adapt`)."""
    return head == wanted or (head, wanted) == ("raw", "jdd")


def adapt(model: nn.Module, head: str | None, wanted: str) -> nn.Module:
    """``model`` ready for head ``wanted``: a RAW denoiser wrapped in :class:`DenoiseThenDemosaic` for
    ``"jdd"``, anything else unchanged (check :func:`serves` first)."""
    return DenoiseThenDemosaic(model) if (head, wanted) == ("raw", "jdd") else model
