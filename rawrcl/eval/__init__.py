"""Evaluation: metrics, classical baselines and :func:`evaluate` on synthetic test sets; real-noise
evaluation on bursts (:mod:`rawrcl.eval.burst_eval`)."""

from __future__ import annotations

from rawrcl.eval.baselines import (
    BASELINE_NAMES,
    BASELINES,
    NLM_K,
    baseline_applies,
    make_baseline,
    nlm_rgb,
    noise_sigma8,
)
from rawrcl.eval.metrics import BORDER, psnr, psnr_float, psnr_from_mse, ssim, to_srgb, to_uint8
from rawrcl.eval.runner import evaluate, load_images, model_predictor

__all__ = [
    "baseline_applies",
    "BASELINE_NAMES",
    "BASELINES",
    "BORDER",
    "evaluate",
    "load_images",
    "make_baseline",
    "model_predictor",
    "NLM_K",
    "nlm_rgb",
    "noise_sigma8",
    "psnr",
    "psnr_float",
    "psnr_from_mse",
    "ssim",
    "to_srgb",
    "to_uint8",
]
