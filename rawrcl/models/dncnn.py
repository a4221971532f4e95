"""DnCNN body (Zhang et al. 2017), used by the paper's SIDD experiment (App. D.2).

DnCNN predicts the *noise*: the full model (see :class:`rawrcl.models.registry.RestorationModel`) returns
``skip(x) − head(body(x))`` where ``skip`` is a fixed, parameter-free map of the input onto the output
grid (identity for same-size heads). So, like every rawrcl model, it outputs the clean-signal estimate
and the residual x − f(x) of the paper equals the predicted noise.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class DnCNNBody(nn.Module):
    """Plain conv–BN–ReLU stack.

    Parameters
    ----------
    in_channels : 3 (RGB) or 4 (packed RAW).
    width : feature channels (64 in the original).
    depth : number of conv layers in the body (the original has 17 including the output layer,
        which here is the head).

    Shapes: (B, in_channels, H, W) → (B, width, H, W); any H, W.
    """

    def __init__(
        self, in_channels: int = 3, width: int = 64, depth: int = 16, batch_norm: bool = True
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(inplace=True)]
        for _ in range(max(depth - 1, 0)):
            layers.append(nn.Conv2d(width, width, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(width))
            layers.append(nn.ReLU(inplace=True))
        self.net = nn.Sequential(*layers)
        self.in_channels, self.width, self.depth = in_channels, width, depth
        self.out_channels = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
