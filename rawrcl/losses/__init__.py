"""Residuals, distances, the residual contrastive loss and consistency terms (paper Sec. 3, App. B).

Public API
----------
- residuals: :func:`residual`, :func:`residual_from_noise_prediction`, :func:`raw_residual`
- distances ``d(a, b) -> (B,)``: :func:`emd`, :func:`bhattacharyya`, :func:`mmd`; :func:`pairwise` → (M, K);
  registry :data:`DISTANCES`
- :class:`ResidualContrastiveLoss` (Eq. 3, Algorithm 1), :func:`estimate_noise_std`
- consistency: :class:`PerceptualConsistency`, :func:`resnet50_imagenet`,
  :class:`MosaicConsistency` (+ Keys helpers :func:`keys_shift`, :func:`keys_upsample2`)
- the RCL objective α·contrast + consistency (Eq. 6) is the ``rcl`` method (:mod:`rawrcl.methods.rcl`)
"""

from rawrcl.losses.consistency import (
    MOSAIC_TRANSFORMS,
    MosaicConsistency,
    PerceptualConsistency,
    keys_kernel,
    keys_shift,
    keys_upsample2,
    resnet50_imagenet,
)
from rawrcl.losses.contrastive import (
    DEFAULT_SCALE,
    NORMALIZATIONS,
    ResidualContrastiveLoss,
    estimate_noise_std,
)
from rawrcl.losses.distances import bhattacharyya, emd, mmd
from rawrcl.losses.pairwise import DISTANCES, PairwiseDistance, get_distance, pairwise
from rawrcl.losses.residuals import raw_residual, residual, residual_from_noise_prediction

__all__ = [
    "residual",
    "residual_from_noise_prediction",
    "raw_residual",
    "emd",
    "bhattacharyya",
    "mmd",
    "pairwise",
    "get_distance",
    "DISTANCES",
    "PairwiseDistance",
    "ResidualContrastiveLoss",
    "estimate_noise_std",
    "NORMALIZATIONS",
    "DEFAULT_SCALE",
    "PerceptualConsistency",
    "resnet50_imagenet",
    "MosaicConsistency",
    "MOSAIC_TRANSFORMS",
    "keys_kernel",
    "keys_shift",
    "keys_upsample2",
]
