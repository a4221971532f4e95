"""Noise conditioning of noise-aware models: which models need the noise, and binding it for inference.

A noise-aware model (config ``noise_aware``) is called ``model(x, noise)`` with ``noise`` (B, 2, C) =
[λshot; λread] per input channel ([0, 1] units), or (B, 3, C) with the row (banding) noise variance σ_row²
as third row (:meth:`rawrcl.noise.NoiseModel.conditioning`), which only a row-aware model reads
(:func:`add_row_input`). Training passes each sample's own parameters; inference binds one image's
parameters with :class:`WithNoise`, which gives an ordinary ``model(x)`` module that the tiler, the
self-ensemble and the denoise → demosaic wrapper use unchanged (the noise map is recomputed from each tile
inside the model, so it follows the transforms). A model adapted to a banded camera's de-banded files
carries that camera's row noise instead of reading it (:func:`camera_rows`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rawrcl.models.geometry import size_multiple
from rawrcl.noise import NoiseModel


def is_noise_aware(model: nn.Module) -> bool:
    """Whether ``model`` (or the model it wraps) must be given the noise parameters."""
    from rawrcl.models.registry import unwrap

    return bool(getattr(unwrap(model), "noise_aware", False))


def is_row_aware(model: nn.Module) -> bool:
    """Whether ``model`` (or the model it wraps) reads the row-noise row of its noise input."""
    from rawrcl.models.registry import unwrap

    return bool(getattr(unwrap(model), "row_aware", False))


def camera_rows(model: nn.Module) -> tuple[float, float] | None:
    """(σ_cam, σ_min) of the banded camera whose de-banded files ``model`` (or the model it wraps) was adapted
    on (config ``deband_row`` / ``deband_min``): its files are to be de-banded the same way before it runs
    (:func:`rawrcl.infer.noise.deband_raw`); None for every other model."""
    from rawrcl.models.registry import unwrap

    return getattr(unwrap(model), "deband", None)


def set_camera_rows(model: nn.Module, row: float, row_min: float) -> nn.Module:
    """``model`` (a :class:`~rawrcl.models.registry.RestorationModel`), recording that it serves a banded
    camera of σ_row ``row`` whose files are de-banded first (``row_min``: see :func:`camera_rows`); its
    weights unchanged. Validated as a config (RawrclError)."""
    from rawrcl.models.registry import model_config, unwrap

    base = unwrap(model)
    cfg = model_config({**base.config, "deband_row": float(row), "deband_min": float(row_min)})
    base.config = cfg
    base.deband = (cfg["deband_row"], cfg["deband_min"])
    return model


def add_row_input(model: nn.Module, switch: bool = False, row_min: float = 0.0) -> nn.Module:
    """A row-aware copy of the noise-aware ``model`` (a :class:`~rawrcl.models.registry.RestorationModel`):
    the body's first convolution gets ``in_channels`` more inputs (the σ_row map) with zero weights, so
    the copy computes exactly what ``model`` does until it is trained. ``switch``: the copy also keeps
    ``model`` itself, frozen, for every sample told σ_row ≤ ``row_min`` (config ``row_switch``). Returned
    unchanged when already row-aware; refused (RawrclError) for a blind model."""
    from rawrcl.errors import RawrclError
    from rawrcl.models.registry import build_model, unwrap

    base = unwrap(model)
    if is_row_aware(base):
        return model
    if not is_noise_aware(base):
        raise RawrclError("row-noise conditioning needs a noise-aware model")
    extra = {"row_switch": True, "row_min": float(row_min)} if switch else {}
    new = build_model({**base.config, "row_aware": True} | extra)
    p = next(base.parameters())
    new = new.to(device=p.device, dtype=p.dtype)
    key = next(f"body.{n}.weight" for n, m in base.body.named_modules() if isinstance(m, nn.Conv2d))
    start = base.state_dict()
    state = dict(start)
    w = state[key]  # the first convolution: (out, in, k, k) → zero weights for the σ_row inputs
    state[key] = torch.cat([w, w.new_zeros(w.shape[0], base.config["in_channels"], *w.shape[2:])], dim=1)
    if switch:
        state.update({f"plain.{k}": v for k, v in start.items()})
    new.load_state_dict(state)
    return new


def call(model: nn.Module, x: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
    """``model(x, noise)`` for a noise-aware model, ``model(x)`` otherwise (``noise`` then ignored)."""
    return model(x, noise) if is_noise_aware(model) else model(x)


class WithNoise(nn.Module):
    """``model(x, noise)`` with ``noise`` fixed: an ordinary one-argument module.

    ``noise``: a :class:`~rawrcl.noise.NoiseModel` (scalars or per-channel values) or a (2, C) tensor;
    ``scale`` multiplies the noise std (λ by scale²), the user's strength knob. Shapes: (B, C, h, w) →
    the model's output; the parameters are broadcast over the batch.
    """

    def __init__(self, model: nn.Module, noise: NoiseModel | torch.Tensor, channels: int, scale: float = 1.0):
        super().__init__()
        self.model = model
        if isinstance(noise, NoiseModel):
            params = noise.conditioning(channels)
        else:
            params = torch.as_tensor(noise).float()
        if params.ndim != 2 or params.shape[0] not in (2, 3) or params.shape[1] != channels:
            raise ValueError(f"noise parameters must be (2 or 3, {channels}), got {tuple(params.shape)}")
        self.register_buffer("noise", params * float(scale) ** 2)
        self.size_multiple = size_multiple(model)
        #: told a row (banding) noise: sensor rows must stay rows (the self-ensemble skips transposes)
        self.keeps_rows = is_row_aware(model) and params.shape[0] == 3 and bool((params[2] > 0).any())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, self.noise.to(x.dtype).expand(x.shape[0], -1, -1))
