"""A network-denoised mosaic averaged with GAT+BM3D's: ``rawrcl denoise|jdd --fuse-bm3d W`` (slower, better).

A U-Net and BM3D's block matching make errors that are largely independent, so their average has less
error than either: ``out = (1 − W)·network + W·GAT+BM3D``, BM3D told the same noise as the network
(:func:`rawrcl.gat.gat_bm3d`, joint over the four planes, black-clip corrected when the file is clipped).
W = :data:`FUSE_WEIGHTS` was chosen per command on the validation rows (docs/weights.md). BM3D adds about
13 s per megapixel on 2 threads (12 MP: 2.9 min, 2.1 GB peak), so this is an option for the frames that
deserve it, not the default (which keeps ≥ 1 MP/s). ``rawrcl jdd`` fuses the same way between the two stages
of a two-stage model (:func:`jdd_fused`): the JDD network then demosaics the fused mosaic.
A ``rawrcl adapt --method burst`` run chooses its own weight from the burst
(:func:`rawrcl.train.burst_signal.fusion_scores`); ``rawrcl denoise --model RUN`` fuses at it unless told
(:func:`rawrcl.models.loading.adapted_fusion`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch.nn as nn

from rawrcl.cfa import align_rggb, pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.gat import banded_gat_bm3d
from rawrcl.infer.noise import bind_noise
from rawrcl.infer.pipeline import TileOptions, denoise_cfa, jdd_cfa
from rawrcl.models.compose import DenoiseThenDemosaic, FirstStage
from rawrcl.noise import NoiseModel

#: the weight of GAT+BM3D chosen per command on the validation rows (docs/weights.md, "Fusing with GAT+BM3D")
FUSE_WEIGHTS = {"raw-denoise": 0.3, "jdd": 0.5}


def check_fuse_weight(weight: float) -> float:
    """``weight`` as a float in [0, 1] (0: no fusion), else a one-line :class:`RawrclError`."""
    w = float(weight)
    if not 0.0 <= w <= 1.0:
        raise RawrclError(f"--fuse-bm3d must be in [0, 1] (the weight of GAT+BM3D), got {weight}")
    return w


def fuse_bm3d(
    denoised: np.ndarray,
    noisy: np.ndarray,
    pattern: str,
    noise: NoiseModel,
    weight: float,
    log: Callable[[str], None] | None = None,
    name: str = "image",
) -> np.ndarray:
    """``(1 − weight)·denoised + weight·GAT+BM3D(noisy)`` on a Bayer mosaic.

    Shapes: ``denoised``, ``noisy`` (H, W) float [0, 1] units (``noisy`` as read: unclipped below black, or
    the file's own black clip), phase ``pattern`` → (H, W) float32. ``noise``: what the network was told
    (per-plane values in [R, G1, G2, B] order of the RGGB-aligned packing, as :func:`rawrcl.infer.pipeline.
    denoise_cfa` packs; a row-noise part is ignored). ``weight`` 0 returns ``denoised`` unchanged. ``log``
    gets a line before (BM3D is slow) and after, naming ``name``.
    """
    w = check_fuse_weight(weight)
    denoised = np.asarray(denoised, dtype=np.float32)
    if w == 0.0:
        return denoised
    noisy = np.asarray(noisy, dtype=np.float32)
    if noisy.shape != denoised.shape or noisy.ndim != 2:
        raise RawrclError(f"fusion needs two (H, W) mosaics of one size, not {noisy.shape}, {denoised.shape}")
    h, w_ = noisy.shape
    t0 = time.perf_counter()
    if log is not None:
        log(f"{name}: GAT+BM3D for --fuse-bm3d ({h * w_ / 1e6:.1f} MP: about 13 s per MP on 2 threads)")
    aligned, (dy, dx) = align_rggb(noisy, pattern)
    lam = noise.params(4).numpy().astype(np.float64)
    classical = banded_gat_bm3d(pack(aligned, "RGGB"), lam[0], lam[1])
    mosaic = unpack(classical, "RGGB", shape=aligned.shape)[dy : dy + h, dx : dx + w_]
    if log is not None:
        log(f"{name}: fused with GAT+BM3D (weight {w:g}, {time.perf_counter() - t0:.1f} s)")
    return ((1.0 - w) * denoised + w * mosaic).astype(np.float32)


def require_two_stage(model: nn.Module) -> None:
    """A one-line :class:`RawrclError` unless ``model`` can be fused between stages (:func:`jdd_fused`)."""
    if not isinstance(model, DenoiseThenDemosaic):
        raise RawrclError(
            "--fuse-bm3d with a JDD model needs a two-stage model (a RAW denoiser, then a JDD network or "
            "bilinear), e.g. the default"
        )


def jdd_fused(
    model: nn.Module,
    cfa: np.ndarray,
    pattern: str,
    noise: NoiseModel,
    weight: float,
    opts: TileOptions | None = None,
    log: Callable[[str], None] | None = None,
    name: str = "image",
) -> np.ndarray:
    """A two-stage JDD model run stage by stage with the first stage's mosaic fused with GAT+BM3D in between.

    ``model``: a :class:`~rawrcl.models.compose.DenoiseThenDemosaic` (the JDD default, or a RAW denoiser
    with bilinear demosaicing); its second stage sees the fused mosaic and is told what the model itself
    tells it (λ × ``residual``). ``cfa`` (H, W) float [0, 1] units, phase ``pattern``; ``noise``: the
    file's noise (with its row part for a row-aware first stage) → (3, H, W) float32 linear camera RGB.
    ``log``, ``name``: as :func:`fuse_bm3d`.
    """
    require_two_stage(model)
    if opts is not None and opts.two_pass:  # not offered on this path
        raise RawrclError(
            "--two-pass is not combined with --fuse-bm3d for JDD (rawrcl denoise combines them)"
        )
    den = denoise_cfa(bind_noise(FirstStage(model), noise, 4), cfa, pattern, opts)  # with its passes
    den = fuse_bm3d(den, cfa, pattern, noise, weight, log, name)
    second = model.replace(denoiser=nn.Identity(), output="jdd")  # the model's own second stage
    return jdd_cfa(bind_noise(second, noise, 4), den, pattern, opts)
