"""Side-by-side figure of a burst evaluation: noisy target, method outputs and the burst reference (PNG).

Rendering (the same for every panel, so they compare): mosaics (RAW denoisers, the noisy target, the
reference) are demosaiced with Menon 2007 (colour-demosaicing) on the crop; JDD outputs are used as they are.
Then one gray-world white balance measured on the whole reference (``rawrcl.isp.gray_world_wb``; the HDR+
burst has no meaningful white balance or colour matrix) and, per crop row, one exposure gain that maps the
99th percentile of the white-balanced reference crop to 0.95 (the burst is dark), clipping to [0, 1] and the
sRGB transfer curve. No colour matrix.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.eval.burst import BurstReference
from rawrcl.io import atomic_path


def _demosaic(cfa: np.ndarray, pattern: str) -> np.ndarray:
    """(H, W) mosaic → (3, H, W) linear RGB (Menon 2007)."""
    from rawrcl.demosaic import demosaic

    return demosaic(cfa, pattern, "menon")


def pick_crops(br: BurstReference, n: int = 2, size: int = 160, border: int = 32) -> list[tuple[int, int]]:
    """Top-left corners (y, x), even, of ``n`` non-overlapping size×size crops with the most reference
    detail (mean |gradient|) among windows that are ≥ half inside the metric mask."""
    ref = br.reference.astype(np.float64)
    grad = np.abs(np.diff(ref, axis=0))[:, :-1] + np.abs(np.diff(ref, axis=1))[:-1]
    mask = br.metric_mask(border)
    h, w = ref.shape
    cands = []
    step = size // 2
    for y in range(border, h - size - border + 1, step):
        for x in range(border, w - size - border + 1, step):
            if mask[y : y + size, x : x + size].mean() < 0.5:
                continue
            cands.append((float(grad[y : y + size - 1, x : x + size - 1].mean()), y - y % 2, x - x % 2))
    if not cands:  # no well-masked window (very clipped scene): take the brightest ones
        for y in range(0, max(h - size, 0) + 1, step):
            for x in range(0, max(w - size, 0) + 1, step):
                cands.append((float(ref[y : y + size, x : x + size].mean()), y - y % 2, x - x % 2))
    chosen: list[tuple[int, int]] = []
    for _, y, x in sorted(cands, reverse=True):
        if all(abs(y - cy) >= size or abs(x - cx) >= size for cy, cx in chosen):
            chosen.append((y, x))
        if len(chosen) == n:
            break
    return chosen


def render_comparison(
    path: str | os.PathLike,
    br: BurstReference,
    panels: dict[str, tuple[str, np.ndarray]],
    *,
    scores: dict[str, float] | None = None,
    crops: list[tuple[int, int]] | None = None,
    size: int = 160,
    overwrite: bool = False,
) -> Path:
    """Write a PNG grid: one row per crop, columns "noisy", the ``panels`` in order, and "reference".

    Parameters
    ----------
    panels : name → (kind, array): kind ``"raw"`` for a (H, W) mosaic, ``"jdd"`` for a (3, H, W) RGB image,
        on the target's pixel grid, [0, 1] linear units.
    scores : name → PSNR (dB) shown in the column titles (``"noisy"`` may be included).
    crops : top-left corners (y, x) in mosaic pixels (default :func:`pick_crops`), each size×size.

    Raises :class:`RawrclError` if ``path`` exists and not ``overwrite``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rawrcl.isp import gray_world_wb, linear_to_srgb

    p = Path(path)
    if p.exists() and not overwrite:
        raise RawrclError(f"{p}: exists (use --force to overwrite)")
    crops = crops or pick_crops(br, size=size)
    ref_rgb_full = _demosaic(br.reference, br.pattern)
    wb = np.asarray(gray_world_wb(np.clip(ref_rgb_full, 0, 1)), dtype=np.float32).reshape(3, 1, 1)
    cols = {"noisy": ("raw", br.target), **panels, "reference": ("raw", br.reference)}
    scores = scores or {}

    def show(kind: str, arr: np.ndarray, y: int, x: int, gain: float) -> np.ndarray:
        pad = 4  # demosaic a little more than the crop, so its border is not the crop's
        y0, x0 = max(y - pad, 0) & ~1, max(x - pad, 0) & ~1
        if kind == "raw":
            from rawrcl.cfa import shift_pattern

            sub = arr[y0 : y + size + pad, x0 : x + size + pad]
            rgb = _demosaic(sub, shift_pattern(br.pattern, y0, x0))[
                :, y - y0 : y - y0 + size, x - x0 : x - x0 + size
            ]
        else:
            rgb = np.asarray(arr)[:, y : y + size, x : x + size]
        return linear_to_srgb(np.clip(rgb * wb * gain, 0, 1)).transpose(1, 2, 0)

    fig, axes = plt.subplots(
        len(crops), len(cols), figsize=(2.2 * len(cols), 2.3 * len(crops)), squeeze=False
    )
    for r, (y, x) in enumerate(crops):
        ref_crop = ref_rgb_full[:, y : y + size, x : x + size] * wb
        gain = 0.95 / max(float(np.percentile(ref_crop, 99)), 1e-6)
        for c, (name, (kind, arr)) in enumerate(cols.items()):
            ax = axes[r][c]
            ax.imshow(show(kind, arr, y, x, gain), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                title = name if name not in scores else f"{name}\n{scores[name]:.2f} dB"
                ax.set_title(title, fontsize=8)
            if c == 0:
                ax.set_ylabel(f"y {y}, x {x}", fontsize=7)
    fig.tight_layout()
    with atomic_path(p, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return p
