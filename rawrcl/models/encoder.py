"""The perceptual encoder g_e of RCL's consistency term (paper Sec. 3.5), arch ``"encoder"``.

Trained self-supervised by the ``simclr`` method (:mod:`rawrcl.methods.encoder`); its checkpoint is given to
RCL with ``--encoder RUN/checkpoints/last.pt``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


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
