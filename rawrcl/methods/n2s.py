"""Noise2Self (Batson & Royer 2019): J-invariant masking.

Each step masks a regular grid of pixels (spacing ``grid``, random phase), replaces the masked pixels by
the average of their 8 neighbours (per channel; for packed RAW the neighbours are the same CFA colour two
CFA pixels away), and scores the model only on the masked pixels, where its output cannot depend on the
pixel's own noise. For packed RAW the mask covers whole 2×2 CFA cells (all 4 planes); for JDD the RGB output
is mosaicked back onto the packed grid before scoring. Loss: masked mean squared error.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rawrcl.methods.base import Method, to_input_domain


def donut_average(x: torch.Tensor) -> torch.Tensor:
    """Per-channel mean of the 8 neighbours (3×3 ring), reflection at the borders. (B, C, H, W) → same."""
    c = x.shape[1]
    k = torch.ones(3, 3, dtype=x.dtype, device=x.device)
    k[1, 1] = 0
    k = (k / 8).expand(c, 1, 3, 3)
    return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), k, groups=c)


def grid_mask(h: int, w: int, grid: int, phase: tuple[int, int], device=None) -> torch.Tensor:
    """(1, 1, h, w) float mask, 1 where (y mod grid, x mod grid) == phase."""
    yy = torch.arange(h, device=device).view(-1, 1) % grid == phase[0]
    xx = torch.arange(w, device=device).view(1, -1) % grid == phase[1]
    return (yy & xx).float().view(1, 1, h, w)


class N2S(Method):
    name = "n2s"
    needs = ("x_a", "x_b")

    def __init__(self, grid: int = 4, **options) -> None:
        super().__init__(grid=int(grid), **options)
        self.grid = int(grid)

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        x = torch.cat([batch["x_a"], batch["x_b"]]).float()
        # phase from the global RNG (the trainer reseeds it every step, so this is reproducible)
        phase = tuple(int(v) for v in torch.randint(0, self.grid, (2,)))
        mask = grid_mask(x.shape[-2], x.shape[-1], self.grid, phase, x.device)
        x_in = x * (1 - mask) + donut_average(x) * mask
        out = model(x_in)
        pred = to_input_domain(x, out.float())
        se = (pred - x) ** 2 * mask
        loss = se.sum() / (mask.sum() * x.shape[0] * x.shape[1]).clamp_min(1)
        return {"loss": loss, "masked_mse": float(loss.detach())}
