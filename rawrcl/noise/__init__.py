"""The sensor noise model (variance = λshot·x + λread, [0, 1] units) and everything that describes it:
:mod:`.model` (:class:`NoiseModel`, :class:`Readout`), :mod:`.samplers` (per-image parameter draws, presets),
:mod:`.profiles` (camera noise-profile files), :mod:`.spec` (the one ``--noise`` grammar), :mod:`.maps`
(the noise-std map of noise-aware models)."""

from rawrcl.noise.maps import local_mean, std_map, variance_map
from rawrcl.noise.model import NoiseModel, PerChannel, Readout, row_offsets, sigma8_to_unit, with_row_variance
from rawrcl.noise.profiles import ProfileSampler, load_profile, lookup_profile, read_profile
from rawrcl.noise.samplers import (
    PRESETS,
    BrooksSampler,
    CameraSampler,
    FixedSampler,
    PaperSampler,
    Sampler,
)
from rawrcl.noise.spec import (
    FIXED,
    PER_FILE,
    SYNTHETIC,
    NoiseLike,
    NoiseSpec,
    noise_label,
    noise_sampler,
    parse_noise,
)

__all__ = [
    "FIXED",
    "PER_FILE",
    "PRESETS",
    "SYNTHETIC",
    "BrooksSampler",
    "CameraSampler",
    "FixedSampler",
    "NoiseLike",
    "NoiseModel",
    "NoiseSpec",
    "PaperSampler",
    "PerChannel",
    "ProfileSampler",
    "Readout",
    "Sampler",
    "load_profile",
    "row_offsets",
    "with_row_variance",
    "local_mean",
    "lookup_profile",
    "noise_label",
    "noise_sampler",
    "parse_noise",
    "read_profile",
    "sigma8_to_unit",
    "std_map",
    "variance_map",
]
