"""Noise conditioning of noise-aware models: which models need the noise, and binding it for inference.

A noise-aware model (config ``noise_aware``) is called ``model(x, noise)`` with ``noise`` (B, 2, C) =
[λshot; λread] per input channel ([0, 1] units). Training passes each sample's own parameters; inference
binds one image's parameters with :class:`WithNoise`, which gives an ordinary ``model(x)`` module that the
tiler, the self-ensemble and the denoise → demosaic wrapper use unchanged (the noise map is recomputed
from each tile inside the model, so it follows the transforms).
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
        params = noise.params(channels) if isinstance(noise, NoiseModel) else torch.as_tensor(noise).float()
        if tuple(params.shape) != (2, channels):
            raise ValueError(f"noise parameters must be (2, {channels}), got {tuple(params.shape)}")
        self.register_buffer("noise", params * float(scale) ** 2)
        self.size_multiple = size_multiple(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, self.noise.to(x.dtype).expand(x.shape[0], -1, -1))
