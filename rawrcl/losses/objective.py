"""Total RCL objective (paper Eq. 6): L = α·L_contrast + L_consistency."""

from __future__ import annotations

import torch
from torch import nn

from rawrcl.errors import RawrclError
from rawrcl.losses.contrastive import ResidualContrastiveLoss

__all__ = ["RCLObjective"]


class RCLObjective(nn.Module):
    """L_total = α·L_contrast + L_consistency (Eq. 6).

    Parameters
    ----------
    alpha : weight α of the contrastive term (paper: 1e-3).
    contrastive : a :class:`ResidualContrastiveLoss` (default: ``ResidualContrastiveLoss()``).
    consistency : a consistency module called ``consistency(*consistency_inputs)`` — e.g.
        :class:`PerceptualConsistency` ``(x, fx)`` or :class:`MosaicConsistency` ``(x_packed, rgb)``.
        None: no consistency term (0).

    Call
    ----
    ``objective(r_a, r_b, consistency_inputs=(x, fx), **contrast_kwargs) -> dict`` with
    ``"loss"`` (scalar tensor with graph), ``"contrast"`` and ``"consistency"`` (detached scalars, the
    unweighted terms). ``contrast_kwargs`` go to the contrastive loss (``noise_std_a`` …).
    """

    def __init__(
        self,
        alpha: float = 1e-3,
        contrastive: nn.Module | None = None,
        consistency: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not alpha >= 0:
            raise RawrclError(f"alpha must be ≥ 0, got {alpha}")
        self.alpha = float(alpha)
        self.contrastive = contrastive if contrastive is not None else ResidualContrastiveLoss()
        self.consistency = consistency

    def forward(
        self,
        r_a: torch.Tensor,
        r_b: torch.Tensor,
        consistency_inputs: tuple = (),
        **contrast_kwargs,
    ) -> dict[str, torch.Tensor]:
        contrast = self.contrastive(r_a, r_b, **contrast_kwargs)
        if self.consistency is not None:
            cons = self.consistency(*consistency_inputs)
        else:
            cons = contrast.new_zeros(())
        loss = self.alpha * contrast + cons
        return {"loss": loss, "contrast": contrast.detach(), "consistency": cons.detach()}
