"""Scores against a burst reference (:mod:`rawrcl.eval.burst`): PSNR/SSIM on the CFA sites, the ceiling
and the true-error equivalent."""

from __future__ import annotations

import numpy as np

from rawrcl.burst_align import PackedGrid
from rawrcl.cfa import mosaic, pack
from rawrcl.errors import RawrclError
from rawrcl.eval.burst import BORDER, BurstReference
from rawrcl.eval.metrics import psnr_from_mse


def _ssim_masked(out: np.ndarray, ref: np.ndarray, mask: np.ndarray, pattern: str) -> float:
    from skimage.metrics import structural_similarity

    po, pr, pm = pack(out, pattern), pack(ref, pattern), pack(mask, pattern)
    vals, weights = [], []
    for c in range(4):
        _, smap = structural_similarity(pr[c], po[c], data_range=1.0, win_size=7, full=True)
        if pm[c].any():
            vals.append(float(smap[pm[c]].mean()))
            weights.append(int(pm[c].sum()))
    return float(np.average(vals, weights=weights))


def score_mosaic(
    br: BurstReference, out_cfa: np.ndarray, border: int = BORDER, mask: np.ndarray | None = None
) -> dict:
    """Metrics of a mosaic-domain estimate (H, W) of the target against the reference (module docstring).

    ``mask`` replaces :attr:`BurstReference.mask` (e.g. a looser one, for comparisons; the ceiling is then
    that of the given pixels, with the reference's bias at clipped pixels not accounted for).

    Returns dict with ``psnr`` (measured), ``ssim``, ``mse``, ``psnr_true`` (true-error equivalent, None when
    the measured MSE is not above the reference noise), ``ceiling``.
    """
    o = np.clip(np.asarray(out_cfa, dtype=np.float64), 0, 1)
    if o.shape != br.target.shape:
        raise RawrclError(f"output mosaic {o.shape} does not match the burst's {br.target.shape}")
    m = br.metric_mask(border, mask)
    mse = float(np.mean((o[m] - br.reference[m].astype(np.float64)) ** 2))
    ceil = {"mse": float(br.ref_noise_var()[m].mean())}
    ceil["psnr"] = psnr_from_mse(ceil["mse"])
    true_mse = mse - ceil["mse"]
    return {
        "psnr": psnr_from_mse(mse),
        "ssim": _ssim_masked(o.astype(np.float32), br.reference, m, br.pattern),
        "mse": mse,
        "psnr_true": psnr_from_mse(true_mse) if true_mse > 0 else None,
        "ceiling": ceil["psnr"],
    }


def score_raw(
    br: BurstReference, out_cfa: np.ndarray, border: int = BORDER, mask: np.ndarray | None = None
) -> dict:
    """Metrics of a RAW denoiser's output mosaic (H, W); see :func:`score_mosaic`."""
    return score_mosaic(br, out_cfa, border, mask)


def jdd_to_mosaic(out_rgb: np.ndarray, pattern: str) -> np.ndarray:
    """A JDD output (3, H, W) sampled at each pixel's own CFA colour → (H, W) mosaic."""
    rgb = np.asarray(out_rgb, dtype=np.float32)
    if rgb.ndim != 3 or rgb.shape[0] != 3:
        raise RawrclError(f"JDD output must be (3, H, W), got {rgb.shape}")
    return mosaic(rgb, pattern)[0]


def score_jdd(
    br: BurstReference, out_rgb: np.ndarray, border: int = BORDER, mask: np.ndarray | None = None
) -> dict:
    """Metrics of a JDD output (3, H, W) sampled at each pixel's own CFA colour; see :func:`score_mosaic`."""
    return score_mosaic(br, jdd_to_mosaic(out_rgb, br.pattern), border, mask)


def noisy_excess(br: BurstReference, border: int = BORDER) -> dict:
    """Consistency of the noisy target: its measured MSE, the NLF-predicted noise + reference noise, and the
    excess (an upper bound of the reference's non-noise error: interpolation blur, misregistration)."""
    m = br.metric_mask(border)
    grid = PackedGrid.of(br.target.shape, br.pattern)
    pred_t = grid.unpack(br.nlf.variance(grid.pack(br.reference), "binned"))[m].mean()
    mse = float(np.mean((np.clip(br.target[m], 0, 1) - br.reference[m]) ** 2))
    ceil = br.ceiling(border)["mse"]
    return {
        "mse": mse,
        "predicted_noise": float(pred_t),
        "ref_noise": ceil,
        "excess_mse": mse - pred_t - ceil,
    }
