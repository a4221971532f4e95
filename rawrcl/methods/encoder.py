"""Self-supervised encoder g_e for the perceptual consistency (paper Sec. 3.5: "g_e could be pre-trained
in a self-supervised fashion using the unlabeled noisy inputs"), SimCLR-style (Chen et al. 2020).

- :class:`Encoder` (registered as arch ``"encoder"``): a small strided CNN ``body`` whose stage outputs are
  the perceptual features (:meth:`Encoder.features`), and a projection MLP ``head`` used only for training.
- :class:`SimCLR` method (``rawrcl pretrain DATA --method simclr --arch encoder``): NT-Xent loss on the two
  overlapping crops of each noisy image (positives) against the other images' crops (negatives).

The resulting checkpoint is passed to RCL with ``--encoder RUN/checkpoints/last.pt``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.methods.base import Method
from rawrcl.models.registry import ARCHS


class Encoder(nn.Module):
    """Config: ``in_channels`` (3|4), ``width`` (default 32), ``depth`` (stages, default 3), ``proj`` (128).

    ``features(x)`` → list of ``depth`` stage maps, stage k: (B, width·2^k, H/2^(k+1), W/2^(k+1)).
    ``forward(x)`` → L2-normalised projection (B, proj).
    """

    def __init__(self, config: dict) -> None:
        super().__init__()
        cfg = {"arch": "encoder", "in_channels": 3, "width": 32, "depth": 3, "proj": 128, **config}
        cfg["width"] = int(cfg.get("width") or 32)
        cfg["depth"] = int(cfg.get("depth") or 3)
        self.config = cfg
        stages = []
        cin = cfg["in_channels"]
        for k in range(cfg["depth"]):
            c = cfg["width"] * 2**k
            stages.append(
                nn.Sequential(
                    nn.Conv2d(cin, c, 3, stride=2, padding=1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(c, c, 3, padding=1),
                    nn.ReLU(inplace=True),
                )
            )
            cin = c
        self.body = nn.ModuleList(stages)
        self.head = nn.Sequential(nn.Linear(cin, cin), nn.ReLU(inplace=True), nn.Linear(cin, cfg["proj"]))

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for st in self.body:
            x = st(x)
            out.append(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)[-1].mean(dim=(-2, -1))
        return F.normalize(self.head(f), dim=1)


ARCHS["encoder"] = Encoder


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
