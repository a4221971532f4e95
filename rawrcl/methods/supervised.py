"""The ``supervised`` method: L1 fine-tuning / supervised learning (paper Sec. 4, "SL").

Same signature as every pretext method: ``supervised(batch, model) -> {"loss": tensor, "l1": float}`` with
``batch["input"]`` (B, C_in, h, w) and ``batch["target"]`` (B, C_out, s·h, s·w), float32, [0, 1] units.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rawrcl.errors import RawrclError

#: σ₀ of the noise-balanced weights, [0, 1] units (2 8-bit levels): caps the weight of noise-free samples.
BALANCE_SIGMA0 = 2.0 / 255.0


def supervised(batch: dict, model: torch.nn.Module, *, balance: bool = False) -> dict:
    """Mean absolute error between ``model(batch["input"])`` and ``batch["target"]``.

    ``balance=True`` (noise-balanced L1) weights sample i's mean L1 by ``1 / (σᵢ + σ₀)``, normalised to mean 1
    over the batch, with ``σᵢ = batch["sigma"][i]`` its noise std at signal 0.5 ([0, 1] units, see
    :class:`rawrcl.finetune.LabelledCrops`) and σ₀ = :data:`BALANCE_SIGMA0`. A denoiser's L1 error grows
    roughly in proportion to σ, so the plain mean lets the noisiest samples dominate the gradient late in
    training; the weights even that out.

    Returns ``{"loss": scalar tensor (differentiable), "l1": float}`` (``l1`` always the plain mean).
    """
    if "input" not in batch or "target" not in batch:
        raise RawrclError("the supervised method needs batches with 'input' and 'target' (labelled data)")
    out = model(batch["input"])
    target = batch["target"].to(out.device, out.dtype)
    if out.shape != target.shape:
        raise RawrclError(f"model output {tuple(out.shape)} does not match target {tuple(target.shape)}")
    if not balance:
        loss = F.l1_loss(out, target)
        return {"loss": loss, "l1": float(loss.detach())}
    if "sigma" not in batch:
        raise RawrclError(
            "the noise-balanced loss needs batches with 'sigma' (the noise level of each sample)"
        )
    per_sample = (out - target).abs().flatten(1).mean(dim=1)
    w = 1.0 / (batch["sigma"].to(per_sample.device, per_sample.dtype).reshape(-1) + BALANCE_SIGMA0)
    loss = (w / w.mean() * per_sample).mean()
    return {"loss": loss, "l1": float(per_sample.mean().detach())}


method = supervised
