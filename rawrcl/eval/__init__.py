"""Evaluation: metrics, classical baselines and :func:`evaluate` on synthetic test sets."""

from __future__ import annotations

from rawrcl.eval.runner import (
    BASELINE_NAMES,
    BASELINES,
    BORDER,
    NLM_K,
    baseline_applies,
    evaluate,
    load_images,
    model_predictor,
    nlm_rgb,
    noise_sigma8,
    psnr,
    psnr_float,
    ssim,
    to_srgb,
    to_uint8,
)

__all__ = [
    "baseline_applies",
    "BASELINE_NAMES",
    "BASELINES",
    "BORDER",
    "evaluate",
    "load_images",
    "model_predictor",
    "NLM_K",
    "nlm_rgb",
    "noise_sigma8",
    "psnr",
    "psnr_float",
    "ssim",
    "to_srgb",
    "to_uint8",
]
