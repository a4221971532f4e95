"""Full-size inference on camera files: tiling (:mod:`.tiling`), models on mosaics (:mod:`.pipeline`), the
noise of noise-aware models (:mod:`.noise`), files (:mod:`.files`), batches (:mod:`.batch`) and writers
(:mod:`.writers`)."""

from __future__ import annotations

from rawrcl.device import PRECISIONS, cpu_has_fast_bf16, resolve_device, resolve_precision
from rawrcl.infer.batch import BatchResult, expand_inputs, output_is_file, plan_outputs, run_batch
from rawrcl.infer.files import denoise_file, is_rgb_file, jdd_file, run_denoise, run_jdd
from rawrcl.infer.noise import NoiseOptions, bind_noise
from rawrcl.infer.pipeline import TileOptions, denoise_cfa, denoise_rgb, jdd_cfa, keep_saturated, task_model
from rawrcl.infer.tiling import (
    count_tiles,
    full_precision_head,
    tile_starts,
    tiled_apply,
    whole_apply,
)
from rawrcl.infer.writers import (
    atomic_output,
    requantize_cfa,
    to_uint,
    write_cfa_tiff,
    write_denoised_dng,
    write_image,
)

__all__ = [
    "atomic_output",
    "BatchResult",
    "bind_noise",
    "count_tiles",
    "cpu_has_fast_bf16",
    "denoise_cfa",
    "denoise_file",
    "denoise_rgb",
    "expand_inputs",
    "full_precision_head",
    "is_rgb_file",
    "jdd_cfa",
    "jdd_file",
    "keep_saturated",
    "NoiseOptions",
    "output_is_file",
    "plan_outputs",
    "PRECISIONS",
    "requantize_cfa",
    "resolve_device",
    "resolve_precision",
    "run_batch",
    "run_denoise",
    "run_jdd",
    "task_model",
    "tile_starts",
    "tiled_apply",
    "TileOptions",
    "to_uint",
    "whole_apply",
    "write_cfa_tiff",
    "write_denoised_dng",
    "write_image",
]
