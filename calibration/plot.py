"""Noise-level-function plot: binned variance vs mean per CFA plane, fitted and metadata lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rawrcl.cfa import CHANNELS
from rawrcl.io import atomic_path

from .result import CalibrationResult

_COLOURS = {"R": "#d62728", "G1": "#2ca02c", "G2": "#17becf", "B": "#1f77b4"}


def plot_nlf(result: CalibrationResult, path: str | Path) -> Path:
    """Write a PNG (matplotlib, Agg) of the noise level function of one calibration.

    One panel per plane (R, G1, G2, B): the binned noise variance against the mean signal
    ([0, 1] units; filled dots = bins used by the fit, hollow = rejected/clipped/saturated, error
    bars = the bin's sampling standard error), the fitted line var = λshot·x + λread with its
    values ± 1σ, the DNG NoiseProfile line (dashed) when the file has one, and for photon transfer the
    linear range used (shaded) and the full-well signal (dotted). Written atomically.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), sharex=True, sharey=True, constrained_layout=True)
    xmax = 0.0
    ymax = 0.0
    for c in CHANNELS:
        b = result.bins.get(c)
        if b is not None and len(b.mean):
            xmax = max(xmax, float(np.max(b.mean)))
            ymax = max(ymax, float(np.quantile(b.var, 0.95)) * 1.3)
    xmax = min(max(xmax * 1.1, 0.1), 1.0)
    for ax, c in zip(axes.ravel(), CHANNELS, strict=True):
        col = _COLOURS[c]
        b = result.bins.get(c)
        if b is not None and len(b.mean):
            se = b.var * np.sqrt(2.0 / np.maximum(b.count, 1))
            u = np.asarray(b.used, dtype=bool)
            ax.errorbar(b.mean[u], b.var[u], yerr=se[u], fmt="o", color=col, ms=4, lw=1, label="bins (fit)")
            if (~u).any():
                ax.plot(b.mean[~u], b.var[~u], "o", mfc="none", color=col, ms=5, label="bins (rejected)")
        xs = np.linspace(0, xmax, 100)
        if c in result.per_plane:
            ls, lr = result.per_plane[c]
            err = result.per_plane_err.get(c)
            lab = f"fit: λshot={ls:.3g}, λread={lr:.3g}"
            if err and any(err):
                lab = f"fit: λshot={ls:.3g}±{err[0]:.2g}, λread={lr:.3g}±{err[1]:.2g}"
            ax.plot(xs, ls * xs + lr, "-", color="k", lw=1.5, label=lab)
            ymax = max(ymax, float(ls * xmax + lr) * 1.1)
        if result.metadata and c in result.metadata:
            s, o = result.metadata[c]
            ax.plot(
                xs, s * xs + o, "--", color="#ff7f0e", lw=1.5, label=f"NoiseProfile: S={s:.3g}, O={o:.3g}"
            )
            ymax = max(ymax, float(s * xmax + o) * 1.1)
        lin = result.extra.get("linear_range", {}).get(c)
        if lin:
            ax.axvspan(lin[0], lin[1], color="0.9", zorder=0, label="linear range used")
        fw = result.extra.get("full_well", {}).get(c)
        if fw is not None:
            ax.axvline(fw, color="0.4", ls=":", lw=1.2, label=f"full well ≈ {fw:.3f}")
        ax.set_title(f"plane {c}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    for ax in axes[1]:
        ax.set_xlabel("mean signal x  ([0,1] after black/white level)")
    for ax in axes[:, 0]:
        ax.set_ylabel("noise variance  ([0,1]² units)")
    axes[0, 0].set_xlim(0, xmax)
    if ymax > 0:
        axes[0, 0].set_ylim(0, ymax)
    name = Path(result.path).name if result.path else "in-memory data"
    iso = f", ISO {result.iso:g}" if result.iso else ""
    fig.suptitle(f"Noise level function — {name} ({result.method}, {result.status}{iso})")
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path
