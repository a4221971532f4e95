"""Noise2Noise (Lehtinen et al. 2018): regress one noisy realisation onto another.

Needs ``x_a2``/``x_b2`` (an independent noise realisation of the same crops), which only synthetic data
provides (photo datasets). Loss: mean squared error between the model output (mosaicked back to the packed
RAW grid for JDD) and the second realisation, over both crops of every pair.
"""

from __future__ import annotations

import torch

from rawrcl.methods.base import Method, to_input_domain


class N2N(Method):
    name = "n2n"
    needs = ("x_a", "x_b", "x_a2", "x_b2")

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        x = torch.cat([batch["x_a"], batch["x_b"]]).float()
        target = torch.cat([batch["x_a2"], batch["x_b2"]]).float()
        out = model(x)
        pred = to_input_domain(x, out.float())
        loss = torch.mean((pred - target) ** 2)
        return {"loss": loss, "mse": float(loss.detach())}
