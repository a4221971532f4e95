"""The ``supervised`` method: L1 fine-tuning / supervised learning (paper Sec. 4, "SL").

Same signature as every pretext method: ``supervised(batch, model) -> {"loss": tensor, "l1": float}`` with
``batch["input"]`` (B, C_in, h, w) and ``batch["target"]`` (B, C_out, s·h, s·w), float32, [0, 1] units.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rawrcl.errors import RawrclError


def supervised(batch: dict, model: torch.nn.Module) -> dict:
    """Mean absolute error between ``model(batch["input"])`` and ``batch["target"]``.

    Returns ``{"loss": scalar tensor (differentiable), "l1": float}``.
    """
    if "input" not in batch or "target" not in batch:
        raise RawrclError("the supervised method needs batches with 'input' and 'target' (labelled data)")
    out = model(batch["input"])
    target = batch["target"].to(out.device, out.dtype)
    if out.shape != target.shape:
        raise RawrclError(f"model output {tuple(out.shape)} does not match target {tuple(target.shape)}")
    loss = F.l1_loss(out, target)
    return {"loss": loss, "l1": float(loss.detach())}


method = supervised
