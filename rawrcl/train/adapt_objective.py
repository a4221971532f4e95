"""The training objective of ``rawrcl adapt``: the self-supervised method and the guards against forgetting.

:func:`make_objective` builds the method (:data:`~rawrcl.train.config.ADAPT_METHODS`); :class:`Guarded`
adds the anchor μ·Σ(θ − θ₀)² towards the starting weights and the synthetic supervised crops of
:func:`synthetic_mix` (bundled scikit-image photos, above :data:`CHECK_BAND` of their rows: the band below
is the forgetting check's, :mod:`rawrcl.train.adapt_signal`). Shapes: packed RAW crops (B, 4, h, w),
noise (B, 2, 4) [λshot; λread] per plane, [0, 1] units.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn

from rawrcl.data.noisy_crops import NoiseFile
from rawrcl.errors import RawrclError
from rawrcl.methods.r2r import R2R, signal_variance
from rawrcl.models.conditioning import call, is_noise_aware
from rawrcl.models.registry import unwrap
from rawrcl.noise import with_row_variance
from rawrcl.train.config import ADAPT_METHODS

#: the bottom fraction of every bundled photo's rows kept out of the mix for the forgetting check
CHECK_BAND = 0.25


class NoiseBound(nn.Module):
    """``model(x)`` → ``model(x, noise)`` with per-sample ``noise`` (B, 2, C) fixed; for methods that call the
    model with one argument. The batch of ``x`` must be a multiple of the noise's (crops are repeated)."""

    def __init__(self, model: nn.Module, noise: torch.Tensor) -> None:
        super().__init__()
        self.model, self.noise = model, noise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.noise
        if x.shape[0] != n.shape[0]:
            if x.shape[0] % n.shape[0]:
                raise RawrclError(f"batch of {x.shape[0]} crops with noise for {n.shape[0]}")
            n = n.repeat(x.shape[0] // n.shape[0], 1, 1)
        return call(self.model, x, n.to(x.device, x.dtype))


class Guarded:
    """``method`` + ``anchor``·Σ(θ − θ₀)² (θ₀ the starting weights) + ``mix``·(supervised MSE on the
    batch's synthetic crops, each crop's normalised by its own mean noise variance) + ``distill``·(the same
    normalised MSE against the frozen ``teacher``'s outputs — the starting model — on those crops; learning
    without forgetting, measured in docs/adaptation.md). n2s / rcl get each sample's noise through
    :class:`NoiseBound`."""

    def __init__(
        self,
        name: str,
        method: Callable,
        start: dict[str, torch.Tensor],
        anchor: float,
        mix: float,
        distill: float = 0.0,
        teacher: nn.Module | None = None,
    ):
        self.name, self.method = name, method
        self.start = {k: v.detach().clone().float() for k, v in start.items()}
        self.anchor, self.mix, self.distill = float(anchor), float(mix), float(distill)
        self.teacher = teacher.eval().requires_grad_(False) if teacher is not None and distill > 0 else None
        self.bind = name in ("n2s", "rcl")

    def config(self) -> dict:
        inner = self.method.config() if hasattr(self.method, "config") else {"method": self.name}
        return {**inner, "method": self.name, "anchor": self.anchor, "mix": self.mix, "distill": self.distill}

    def __call__(self, batch: dict, model: nn.Module) -> dict:
        net = NoiseBound(model, batch["noise"]) if self.bind and is_noise_aware(model) else model
        out = dict(self.method(batch, net))
        loss = out["loss"]
        if self.anchor > 0:
            pen = 0.0
            for name, p in unwrap(model).named_parameters():
                if p.requires_grad and name in self.start:
                    ref = self.start[name]
                    if ref.device != p.device:
                        ref = self.start[name] = ref.to(p.device)
                    pen = pen + ((p - ref) ** 2).sum()
            loss = loss + self.anchor * pen
            out["anchor"] = float(pen.detach()) if torch.is_tensor(pen) else 0.0
        if self.mix > 0 and "input" in batch:
            pred = call(model, batch["input"].float(), batch["sup_noise"].float()).float()
            tgt = batch["target"].float()
            n = batch["sup_noise"].float()
            # per crop: a base-ISO crop weighs as much as a high-ISO one (a batch mean would let the noisiest
            # crops drown it — the low-noise behaviour is what adaptation forgets first)
            var = signal_variance(tgt, n).mean((1, 2, 3))
            sup = (((pred - tgt) ** 2).mean((1, 2, 3)) / var.clamp_min(1e-10)).mean()
            loss = loss + self.mix * sup
            out["sup"] = float(sup.detach())
            if self.teacher is not None:  # stay with the start on the synthetic crops: its outputs as targets
                dev = batch["input"].device
                if next(self.teacher.parameters()).device != dev:  # follows the trained model (CUDA)
                    self.teacher = self.teacher.to(dev)
                with torch.no_grad():
                    ref = call(self.teacher, batch["input"].float(), n).float()
                dis = (((pred - ref) ** 2).mean((1, 2, 3)) / var.clamp_min(1e-10)).mean()
                loss = loss + self.distill * dis
                out["distill"] = float(dis.detach())
        out["loss"] = loss
        return out


def make_objective(name: str, alpha: float = 0.5) -> Callable:
    """The self-supervised objective ``name`` (:data:`~rawrcl.train.config.ADAPT_METHODS`)."""
    if name == "r2r":
        return R2R(alpha=alpha, clip_aware=True)
    if name == "r2r-plain":
        return R2R(alpha=alpha, clip_aware=False)
    if name in ("sure", "n2s", "rcl"):
        from rawrcl.methods import make_method

        return make_method(name)
    raise RawrclError(f"--method {name!r}: expected one of {', '.join(ADAPT_METHODS)}")


def synthetic_mix(
    crop: int, files: Sequence[NoiseFile] = (), own: float = 0.5, photos: int = 8, zoom: float = 0.0
) -> Callable[[np.random.Generator], dict]:
    """Synthetic supervised packed-RAW samples from the photos bundled with scikit-image:
    ``f(rng) -> {"input", "target", "noise"}``. With probability ``own`` the noise is one of ``files``' own
    (its per-plane λ, Poisson shot noise, its row noise, clipped at 0 when the file is black-clipped, else a
    pedestal: the user's camera, including the shadows the clip-aware objective cannot score), otherwise a
    draw of the camera sampler the shipped model was trained with (what it already does well: the
    forgetting guard)."""
    from dataclasses import replace

    from rawrcl.noise import CameraSampler, NoiseModel, Readout
    from rawrcl.sample_data import bundled_photos
    from rawrcl.tasks import get_task
    from rawrcl.train.finetuning import LabelledCrops

    camera = CameraSampler(plane_p=0.5)
    own_models = [
        NoiseModel(
            tuple(float(v) for v in f.noise[0]),
            tuple(float(v) for v in f.noise[1]),
            poisson=True,
            readout=Readout(14, 0.0 if f.floor is not None else 0.06),
            row=row,
        )
        for f in files
        # a banded file also gives crops without banding at the same white noise: a row-aware model then
        # learns that σ_row = 0 means "leave rows alone", where it would otherwise forget the most
        for row in ((float(f.row), 0.0) if f.row > 0 else (0.0,))
    ]

    def noise(rng: np.random.Generator):
        if own_models and rng.random() < own:
            return own_models[int(rng.integers(0, len(own_models)))]
        return camera(rng)

    task = replace(
        get_task("raw-denoise", unprocess=True), unprocess_mix=0.5, exposure=(0.02, 1.0), exposure_mix=0.6
    )
    imgs = [
        (n, np.moveaxis(a[: int(a.shape[0] * (1 - CHECK_BAND))], -1, 0).astype(np.float32) / 255.0)
        for n, a in bundled_photos(photos)
    ]
    zooms = (zoom, 8.0) if zoom > 0 else None  # a share of enlarged (smooth) crops, up to 8×
    ds = LabelledCrops(imgs, task, crop=crop, noise=noise, augment=True, zoom=zooms)

    def sample(rng: np.random.Generator) -> dict:
        it = ds[(int(rng.integers(0, len(ds))), int(rng.integers(0, 2**62)))]
        n = it["noise"]  # (2, 4), or (3, 4) for own noise with banding: one shape for the batch
        n = n if n.shape[0] == 3 else with_row_variance(n[None], 0.0)[0]
        return {"input": it["input"], "target": it["target"], "noise": n}

    return sample
