"""The ``supervised`` method: L1 fine-tuning / supervised learning (paper Sec. 4, "SL").

Same signature as every pretext method: ``supervised(batch, model) -> {"loss": tensor, "l1": float}`` with
``batch["input"]`` (B, C_in, h, w) and ``batch["target"]`` (B, C_out, s·h, s·w), float32, [0, 1] units; a
noise-aware model also gets ``batch["noise"]`` (B, 2, C_in), each sample's [λshot; λread].
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F

from rawrcl.errors import RawrclError
from rawrcl.models.conditioning import call
from rawrcl.models.geometry import size_multiple

#: σ₀ of the noise-balanced weights, [0, 1] units (2 8-bit levels): caps the weight of noise-free samples.
BALANCE_SIGMA0 = 2.0 / 255.0


#: σ₀ of the crop-balanced weights (``balance="crop"``), [0, 1] units: RAW crops can be far darker than 0.5.
CROP_SIGMA0 = 5e-4

#: Floor of the per-sample MSE in ``balance="psnr"`` and ``"rmse"`` ([0, 1]² units; 1e-9 = 90 dB): keeps a
#: near-perfect sample from taking the whole gradient (and the square root's gradient finite at 0).
PSNR_MSE_FLOOR = 1e-9

#: The recorded name of each ``balance`` setting (run configs, provenance, ``--loss`` choices).
LOSS_NAMES = {
    False: "l1",
    True: "l1-noise-balanced",
    "crop": "l1-crop-balanced",
    "psnr": "log-mse",
    "rmse": "rmse",
}


def balance_for(loss: str) -> bool | str:
    """The ``balance`` setting of a recorded loss name (the inverse of :data:`LOSS_NAMES`)."""
    for key, name in LOSS_NAMES.items():
        if name == loss:
            return key
    raise RawrclError(f"unknown loss {loss!r}: expected one of {', '.join(LOSS_NAMES.values())}")


def supervised(
    batch: dict,
    model: torch.nn.Module,
    *,
    balance: bool | str = False,
    teacher: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] | None = None,
    teacher_weight: float = 1.0,
) -> dict:
    """Mean absolute error between ``model(batch["input"])`` and ``batch["target"]`` (or, with ``balance``, a
    weighted or mean-squared variant).

    ``balance=True`` (noise-balanced L1) weights sample i's mean L1 by ``1 / (σᵢ + σ₀)``, normalised to mean 1
    over the batch, with ``σᵢ = batch["sigma"][i]`` its noise std at signal 0.5 ([0, 1] units, see
    :class:`rawrcl.train.finetuning.LabelledCrops`) and σ₀ = :data:`BALANCE_SIGMA0`. A denoiser's L1 error
    grows roughly in proportion to σ, so the plain mean lets the noisiest samples dominate the gradient late
    in training; the weights even that out. ``balance="crop"`` uses ``batch["sigma_crop"]`` instead, the noise
    std at the crop's own mean signal, with σ₀ = :data:`CROP_SIGMA0` — for data whose brightness varies
    (exposure-scaled RAW), where the std at 0.5 says little about a dark crop's noise; weighting each
    crop's L1 by 1/σ approximates maximising the mean PSNR over crops. ``balance="psnr"`` maximises it
    directly: the loss is the batch mean of ``log10(MSEᵢ + PSNR_MSE_FLOOR)`` (−PSNRᵢ/10 up to a constant), so
    each sample's squared-error gradient is weighted by 1/MSEᵢ. ``balance="rmse"``: the batch mean of
    per-sample RMS errors — squared error within a sample (the posterior mean, what PSNR rewards), weighted
    across samples by 1/RMSEᵢ, the balance plain L1 gives (between L1 and ``"psnr"``).

    ``teacher(input, noise)`` (e.g. :func:`ensemble_teacher`): a second target, the same loss against its
    output (no gradient through it) added with weight ``teacher_weight``; logged as ``teacher``.

    Returns ``{"loss": scalar tensor (differentiable), "l1": float}`` (``l1`` always the plain mean; with a
    teacher also ``"teacher"``: its loss term, unweighted).
    """
    if "input" not in batch or "target" not in batch:
        raise RawrclError("the supervised method needs batches with 'input' and 'target' (labelled data)")
    out = call(model, batch["input"], batch.get("noise"))
    target = batch["target"].to(out.device, out.dtype)
    if out.shape != target.shape:
        raise RawrclError(f"model output {tuple(out.shape)} does not match target {tuple(target.shape)}")
    loss = _loss(out, target, balance, batch)
    logs = {"l1": float((out - target).abs().mean().detach())}
    if teacher is not None:
        with torch.no_grad():
            taught = teacher(batch["input"], batch.get("noise")).to(out.device, out.dtype)
        extra = _loss(out, taught, balance, batch)
        loss = loss + teacher_weight * extra
        logs["teacher"] = float(extra.detach())
    return {"loss": loss, **logs}


def _loss(out: torch.Tensor, target: torch.Tensor, balance: bool | str, batch: dict) -> torch.Tensor:
    """The loss of :func:`supervised` between ``out`` and ``target`` (same shape)."""
    if not balance:
        return F.l1_loss(out, target)
    if balance in ("rmse", "psnr"):
        per_mse = (out - target).square().flatten(1).mean(dim=1) + PSNR_MSE_FLOOR
        return (per_mse.sqrt() if balance == "rmse" else torch.log10(per_mse)).mean()
    key, sigma0 = ("sigma_crop", CROP_SIGMA0) if balance == "crop" else ("sigma", BALANCE_SIGMA0)
    if key not in batch:
        raise RawrclError(f"the noise-balanced loss needs batches with {key!r} (each sample's noise level)")
    per_sample = (out - target).abs().flatten(1).mean(dim=1)
    w = 1.0 / (batch[key].to(per_sample.device, per_sample.dtype).reshape(-1) + sigma0)
    return (w / w.mean() * per_sample).mean()


def ensemble_teacher(model: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """A frozen copy of ``model`` averaged over the 8 flips/transposes (:class:`rawrcl.models.SelfEnsemble`),
    as :func:`supervised`'s ``teacher``: distils the self-ensemble (``--tta``) into the network itself.
    A two-stage model whose first stage is frozen (a JDD stage trained behind it) ensembles only its second
    stage, on one pass of the first. ``teacher(input, noise)`` → the model's output shape and units."""
    from rawrcl.models import SelfEnsemble
    from rawrcl.models.compose import DenoiseThenDemosaic

    frozen = copy.deepcopy(model).eval().requires_grad_(False)
    staged = (
        isinstance(model, DenoiseThenDemosaic)
        and model.demosaicker is not None
        and model.output == "jdd"
        and not any(p.requires_grad for p in model.denoiser.parameters())
    )

    def teach(x: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        if staged:
            first = frozen.first_pass(x, noise)
            return SelfEnsemble(_Bound(lambda y: frozen.second(x, y, noise), frozen.demosaicker))(first)
        return SelfEnsemble(_Bound(lambda y: call(frozen, y, noise), frozen))(x)

    return teach


class _Bound(torch.nn.Module):
    """``fn(x)`` as a one-argument module with ``like``'s size multiple (what SelfEnsemble pads to)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], like: torch.nn.Module) -> None:
        super().__init__()
        self.fn = fn
        self.size_multiple = size_multiple(like)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


method = supervised
