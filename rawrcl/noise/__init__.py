"""The sensor noise model (variance = λshot·x + λread, [0, 1] units), its samplers and noise maps."""

from __future__ import annotations

from rawrcl.noise.model import (
    PRESETS,
    BrooksSampler,
    CameraSampler,
    FixedSampler,
    NoiseModel,
    PaperSampler,
    PerChannel,
    Readout,
    Sampler,
    local_mean,
    make_sampler,
    sigma8_to_unit,
    std_map,
)

__all__ = [
    "BrooksSampler",
    "CameraSampler",
    "FixedSampler",
    "local_mean",
    "make_sampler",
    "NoiseModel",
    "PaperSampler",
    "PerChannel",
    "PRESETS",
    "Readout",
    "Sampler",
    "sigma8_to_unit",
    "std_map",
]
