"""A network-denoised mosaic averaged with GAT+BM3D's: ``rawrcl denoise --fuse-bm3d [W]`` (slower, better).

A U-Net and BM3D's block matching make errors that are largely independent, so their average has less
error than either: ``out = (1 − W)·network + W·GAT+BM3D``, BM3D told the same noise as the network
(:func:`rawrcl.gat.gat_bm3d`, joint over the four planes, black-clip corrected when the file is clipped).
W = :data:`FUSE_WEIGHT` was chosen on the validation rows (docs/weights.md, "Fusion with GAT+BM3D"). BM3D
costs about a minute per megapixel on 2 threads, so this is an option for the frames that deserve it,
not the default (which keeps ≥ 1 MP/s).
"""

from __future__ import annotations

import numpy as np

from rawrcl.cfa import align_rggb, pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.gat import gat_bm3d
from rawrcl.noise import NoiseModel

#: weight of GAT+BM3D in the fused output (chosen on the validation rows; docs/weights.md)
FUSE_WEIGHT = 0.3


def check_fuse_weight(weight: float) -> float:
    """``weight`` as a float in [0, 1] (0: no fusion), else a one-line :class:`RawrclError`."""
    w = float(weight)
    if not 0.0 <= w <= 1.0:
        raise RawrclError(f"--fuse-bm3d must be in [0, 1] (the weight of GAT+BM3D), got {weight}")
    return w


def fuse_bm3d(
    denoised: np.ndarray, noisy: np.ndarray, pattern: str, noise: NoiseModel, weight: float
) -> np.ndarray:
    """``(1 − weight)·denoised + weight·GAT+BM3D(noisy)`` on a Bayer mosaic.

    Shapes: ``denoised``, ``noisy`` (H, W) float [0, 1] units (``noisy`` as read: unclipped below black, or
    the file's own black clip), phase ``pattern`` → (H, W) float32. ``noise``: what the network was told
    (per-plane values in [R, G1, G2, B] order of the RGGB-aligned packing, as :func:`rawrcl.infer.pipeline.
    denoise_cfa` packs; a row-noise part is ignored). ``weight`` 0 returns ``denoised`` unchanged.
    """
    w = check_fuse_weight(weight)
    denoised = np.asarray(denoised, dtype=np.float32)
    if w == 0.0:
        return denoised
    noisy = np.asarray(noisy, dtype=np.float32)
    if noisy.shape != denoised.shape or noisy.ndim != 2:
        raise RawrclError(f"fusion needs two (H, W) mosaics of one size, not {noisy.shape}, {denoised.shape}")
    h, w_ = noisy.shape
    aligned, (dy, dx) = align_rggb(noisy, pattern)
    lam = noise.params(4).numpy().astype(np.float64)
    classical = gat_bm3d(pack(aligned, "RGGB"), lam[0], lam[1])
    mosaic = unpack(classical, "RGGB", shape=aligned.shape)[dy : dy + h, dx : dx + w_]
    return ((1.0 - w) * denoised + w * mosaic).astype(np.float32)
