"""Array-level inference: a model for a task, tiling options, and models on mosaics and photos.

Pipeline (RAW inputs)
---------------------
CFA (H, W) float32 in [0, 1] (noise below black kept, as in training) → :func:`rawrcl.cfa.align_rggb`
(reflection-pads the top/left so R is top-left) → :func:`rawrcl.cfa.pack` (4, ⌈H'/2⌉, ⌈W'/2⌉)
[R, G1, G2, B] — the canonical planes whatever the file's Bayer phase, the order of per-plane noise
parameters too — → model, tiled (:func:`rawrcl.infer.tiling.tiled_apply`) → crop back to exactly the
input's pixel grid (every Bayer phase, odd sizes included).

- JDD (head ``"jdd"``): output (3, H, W) float32 *linear camera RGB* in the RAW's [0, 1] scale.
- RAW denoising (head ``"raw"``): output CFA (H, W) float32 in [0, 1].
- RGB denoising (head ``"rgb"``): (3, H, W) → (3, H, W).

Tile size and overlap are in *model-input* pixels: packed pixels for RAW (a 768 tile covers
1536×1536 sensor pixels), pixels for RGB. Noise-aware models are bound to one image's noise parameters
first (:func:`rawrcl.infer.noise.bind_noise`), so the tiler sees an ordinary one-argument model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from rawrcl.cfa import align_rggb, pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.infer.tiling import check_tiling, count_tiles, tiled_apply
from rawrcl.models.compose import passes, two_pass_stages
from rawrcl.models.geometry import size_multiple
from rawrcl.models.loading import load_for_task


def task_model(path: str | os.PathLike | None, task: str, opts: TileOptions) -> nn.Module:
    """The model for ``task`` on ``opts.backend``: torch (:func:`rawrcl.models.load_for_task`) or ONNX Runtime
    (:func:`rawrcl.export.backend.backend_model`, which may set ``opts`` to fp32 / CPU / a static tile)."""
    if opts.backend in (None, "torch") and not str(path or "").lower().endswith(".onnx"):
        opts.backend = "torch"
        return load_for_task(path, task)[0]
    if opts.two_pass:  # before any export or file is read
        raise RawrclError("--two-pass runs torch models only (an ONNX model holds one pass of each stage)")
    from rawrcl.export.backend import backend_model

    return backend_model(path, task, opts)


@dataclass
class TileOptions:
    """How :func:`tiled_apply` runs: tile/overlap in model-input pixels, see module docstring.

    ``self_ensemble``: average the model over the 8 Bayer-phase-preserving flips/transposes
    (:class:`rawrcl.models.SelfEnsemble`; 8× the time, +0.2–0.8 dB on our held-out photos). ``two_pass``: a
    two-stage model's stages run on their input and on the transposed mosaic, averaged — the RAW output (the
    CFA-site blend) the first stage only (:func:`rawrcl.models.compose.two_pass_stages`; ≈ 1.25× the time for
    RAW, 1.75× for JDD, +0.02–0.35 dB; torch models only); ``None`` (default): at low noise
    (:data:`rawrcl.models.compose.SIGMA_GATE`) the first stage and the JDD stage of an RGB output twice, in
    four orientations at the lowest (:data:`~rawrcl.models.compose.QUAD_GATE`); ``False``: one pass of each.
    """

    #: 768 packed pixels, one tile per pass: on a 12 MP frame (2 × 3 tiles) 5 % of the pixels are computed
    #: twice instead of 17 % with 3 × 5 tiles of 512 in batches of 4, and the peak memory is lower
    #: (``rawrcl jdd`` fp32, 2 threads: 11.7 s against 12.5 s; ``docs/weights.md``, "Speed")
    tile: int = 768
    overlap: int = 32
    batch_tiles: int = 1
    device: str | None = None
    precision: str = "auto"
    progress: bool = False
    self_ensemble: bool = False
    two_pass: bool | None = None
    backend: str | None = None  # "torch" | "onnxruntime"; None: onnxruntime for a .onnx model, else torch

    def __post_init__(self) -> None:
        check_tiling(self.tile, self.overlap, self.batch_tiles)  # bad options fail before any file is read

    def apply(self, model: nn.Module, x: torch.Tensor, scale: int, desc: str = "tiles") -> torch.Tensor:
        """Run ``model`` over ``x`` (B, C, h, w) tile by tile (→ (B, C_out, scale·h, scale·w))."""
        if self.self_ensemble:
            from rawrcl.models import SelfEnsemble

            model = SelfEnsemble(model)
        bar = None
        cb: Callable[[int], None] | None = None
        if self.progress:
            from tqdm.auto import tqdm

            mult = size_multiple(model)
            total = count_tiles(tuple(x.shape[-2:]), self.tile, self.overlap, mult)
            bar = tqdm(total=total, desc=desc, unit="tile", leave=False, file=sys.stderr)
            cb = bar.update
        try:
            with two_pass_stages(model, passes(self.two_pass, self.self_ensemble)):
                return tiled_apply(
                    model,
                    x,
                    tile=self.tile,
                    overlap=self.overlap,
                    scale=scale,
                    batch_tiles=self.batch_tiles,
                    device=self.device,
                    precision=self.precision,
                    progress=cb,
                )
        finally:
            if bar is not None:
                bar.close()


def _check_cfa(cfa: np.ndarray) -> np.ndarray:
    cfa = np.asarray(cfa)
    if cfa.ndim != 2:
        raise RawrclError(f"expected a (H, W) CFA mosaic, got shape {cfa.shape}")
    if min(cfa.shape) < 4:
        raise RawrclError(f"CFA of size {cfa.shape[0]}×{cfa.shape[1]} is too small")
    return cfa.astype(np.float32, copy=False)


def jdd_cfa(model: nn.Module, cfa: np.ndarray, pattern: str, opts: TileOptions | None = None) -> np.ndarray:
    """Joint demosaicing + denoising of one Bayer mosaic.

    Parameters
    ----------
    model : head ``"jdd"`` (packed (B, 4, h, w) → (B, 3, 2h, 2w)).
    cfa : (H, W) float32 in [0, 1], any Bayer phase ``pattern``, any H, W ≥ 4 (odd too).

    Returns
    -------
    (3, H, W) float32 linear camera RGB in the RAW's [0, 1] scale (not clipped), on exactly the CFA's
    pixel grid: ``out[:, y, x]`` is the colour at CFA pixel (y, x).
    """
    cfa = _check_cfa(cfa)
    h, w = cfa.shape
    aligned, (dy, dx) = align_rggb(cfa, pattern)
    packed = torch.from_numpy(np.ascontiguousarray(pack(aligned, "RGGB")))[None]
    out = (opts or TileOptions()).apply(model, packed, scale=2, desc="jdd tiles")
    return out[0, :, dy : dy + h, dx : dx + w].numpy()


def denoise_cfa(
    model: nn.Module, cfa: np.ndarray, pattern: str, opts: TileOptions | None = None
) -> np.ndarray:
    """Denoise a Bayer mosaic with a packed → packed model (head ``"raw"``).

    Shapes: cfa (H, W) float32 [0, 1] with phase ``pattern`` → (H, W) float32 (same grid, not clipped).
    """
    cfa = _check_cfa(cfa)
    h, w = cfa.shape
    aligned, (dy, dx) = align_rggb(cfa, pattern)
    packed = torch.from_numpy(np.ascontiguousarray(pack(aligned, "RGGB")))[None]
    out = (opts or TileOptions()).apply(model, packed, scale=1, desc="denoise tiles")
    mosaic = unpack(out[0], "RGGB", shape=aligned.shape)
    return mosaic[dy : dy + h, dx : dx + w].numpy()


def position_clip_levels(cfa: np.ndarray) -> np.ndarray:
    """(2, 2) levels, [0, 1] RAW units, at or above which the samples of each 2×2 position of the mosaic
    ``cfa`` (H, W) are saturated: 1 (the white level), or lower where samples pile up at the position's
    maximum (:func:`rawrcl.models.sure.clip_levels`: sensors that clip below the file's white level)."""
    from rawrcl.models.sure import clip_levels

    levels = np.ones((2, 2))
    for i in (0, 1):
        for j in (0, 1):
            y = np.ascontiguousarray(cfa[i::2, j::2])
            if y.size:
                levels[i, j] = min(float(clip_levels(torch.from_numpy(y)[None, None])[1][0]), 1.0)
    return levels


def keep_saturated(out: np.ndarray, cfa: np.ndarray) -> np.ndarray:
    """``out`` with the input ``cfa``'s saturated samples (:func:`position_clip_levels`) put back: (H, W)
    [0, 1] units, same grid.

    A clipped sample says only "at least this bright": the network's estimate there pulls blown highlights a
    few % below the clip (measured: 15 % of them below 0.99 on an over-exposed photo), so raw developers no
    longer see them as clipped — coloured fringes instead of their highlight handling — and the error against
    the (clipped) truth grows (MSE there 1.0e-4 → 5.7e-5 kept)."""
    levels = position_clip_levels(cfa)
    out = np.array(out, dtype=np.float32, copy=True)
    for i in (0, 1):
        for j in (0, 1):
            y = cfa[i::2, j::2]
            sat = y >= levels[i, j] - 1e-6
            out[i::2, j::2][sat] = y[sat]
    return out


def channel_clip_levels(cfa: np.ndarray, pattern: str) -> tuple[float, float, float]:
    """(R, G, B) levels, [0, 1] RAW units, at which the mosaic ``cfa`` (H, W) with phase ``pattern``
    saturates: per colour the lowest of its 2×2 positions' :func:`position_clip_levels`."""
    levels = position_clip_levels(cfa)
    return tuple(  # type: ignore[return-value]
        min(float(levels[k // 2, k % 2]) for k in range(4) if pattern[k] == c) for c in "RGB"
    )


def denoise_rgb(model: nn.Module, rgb: np.ndarray, opts: TileOptions | None = None) -> np.ndarray:
    """Denoise an RGB photo with a head ``"rgb"`` model.

    Shapes: (3, H, W) float [0, 1] → (3, H, W) float32.
    """
    rgb = np.asarray(rgb, dtype=np.float32)
    if rgb.ndim != 3 or rgb.shape[0] != 3:
        raise RawrclError(f"expected a (3, H, W) RGB image, got shape {rgb.shape}")
    x = torch.from_numpy(np.ascontiguousarray(rgb))[None]
    out = (opts or TileOptions()).apply(model, x, scale=1, desc="denoise tiles")
    return out[0].numpy()
