"""Self-supervised encoder g_e for the perceptual consistency (paper Sec. 3.5: "g_e could be pre-trained
in a self-supervised fashion using the unlabeled noisy inputs"), SimCLR-style (Chen et al. 2020).

- the model, :class:`rawrcl.models.encoder.Encoder` (arch ``"encoder"``): a small strided CNN ``body`` whose
  stage outputs are the perceptual features, and a projection MLP ``head`` used only for training;
- :class:`SimCLR` method (``rawrcl pretrain DATA --method simclr --arch encoder``): NT-Xent loss on the two
  overlapping crops of each noisy image (positives) against the other images' crops (negatives).

The resulting checkpoint is passed to RCL with ``--encoder RUN/checkpoints/last.pt``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.methods.base import Method


def nt_xent(z_a: torch.Tensor, z_b: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    """SimCLR NT-Xent loss for normalised embeddings (N, D) × (N, D); positives share an index."""
    n = z_a.shape[0]
    z = torch.cat([z_a, z_b])
    sim = z @ z.t() / tau
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, target)


class SimCLR(Method):
    """Contrastive encoder pre-training; ``tau`` (0.1)."""

    name = "simclr"
    needs = ("x_a", "x_b")

    def __init__(self, tau: float = 0.1, **options) -> None:
        super().__init__(tau=float(tau), **options)
        self.tau = float(tau)

    def __call__(self, batch: dict, model: nn.Module) -> dict:
        self.check_batch(batch)
        n = batch["x_a"].shape[0]
        z = model(torch.cat([batch["x_a"], batch["x_b"]]).float())
        loss = nt_xent(z[:n].float(), z[n:].float(), self.tau)
        return {"loss": loss, "nt_xent": float(loss.detach())}
