"""Noise calibration: (λshot, λread) from DNG metadata, from one noisy RAW image, and from
flat/dark frames (photon transfer); saving camera noise profiles (read by :mod:`rawrcl.noise.profiles`);
noise-level-function plots.

Units everywhere: RAW values in [0, 1] after black-level subtraction and division by
(white − black); variance = λshot·x + λread. Planes are the canonical packed planes R, G1, G2, B.
"""

from .api import METHODS, calibrate_file
from .metadata import calibrate_metadata, convert_noise_profile, map_noise_profile, metadata_from_tags
from .nlf_fit import fit_nlf
from .photon_transfer import calibrate_flats, photon_transfer
from .plot import plot_nlf
from .profiles import profile_conflicts, profile_result, save_profile
from .result import UNITS, CalibrationResult, PlaneBins
from .single_image import EstimatorSettings, estimate_mosaic, estimate_packed
from .synthetic import dark_mosaic, flat_series, noisy_mosaic, readout, write_series_dngs

__all__ = [
    "METHODS",
    "UNITS",
    "CalibrationResult",
    "EstimatorSettings",
    "PlaneBins",
    "calibrate_file",
    "calibrate_flats",
    "calibrate_metadata",
    "convert_noise_profile",
    "dark_mosaic",
    "estimate_mosaic",
    "estimate_packed",
    "fit_nlf",
    "flat_series",
    "map_noise_profile",
    "metadata_from_tags",
    "noisy_mosaic",
    "photon_transfer",
    "plot_nlf",
    "profile_conflicts",
    "profile_result",
    "readout",
    "save_profile",
    "write_series_dngs",
]
