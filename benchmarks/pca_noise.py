"""Texture-robust noise variance per signal level: smallest eigenvalues of the patch covariance
(experimental; used by ``calibration_variants.py``, moved out of the library).

Idea (Liu, Tanaka & Okutomi 2012/2013; Chen, Zhu & Heng, ICCV 2015; own implementation): white
noise of variance σ² adds σ² to *every* eigenvalue of the covariance of p×p image patches, whereas
natural-image structure concentrates in a few directions (low frequencies, edges). Among patches
of similar signal level (so similar noise variance, since variance = λshot·x + λread), the eigen
values that belong to the noise-only subspace are those whose mean equals their median (Chen's
rule); their mean estimates σ². Strongly textured patches are removed iteratively (Liu et al.):
a patch is kept when its gradient energy is below the 99.5 % quantile of that energy for pure
noise of the current σ². The small bias of this selection and of the eigenvalue rule is measured on
pure Gaussian noise (fixed-seed Monte Carlo) and divided out.

Units: patches of a plane in [0, 1]; variances in [0, 1]².
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from rawrcl.errors import RawrclError

TEXTURE_QUANTILE = 0.995
MAX_ITERS = 12
SCAN_RATIO = 0.9  # geometric grid of trial noise levels below the median-energy bound
SCAN_STEPS = 40  # lowest trial level: 0.9**40 ≈ 1.5 % of the bound
SCAN_MIN_FRACTION = 0.02  # a trial level must select at least this fraction of the bin


def _gradient_energy(x: np.ndarray, p: int) -> np.ndarray:
    """Texture strength of each patch: sum of squared horizontal and vertical first differences
    about their patch mean (so a linear ramp scores 0); (n, p²) → (n,)."""
    a = x.reshape(-1, p, p)
    dy, dx = np.diff(a, axis=1), np.diff(a, axis=2)
    dy = dy - dy.mean(axis=(1, 2), keepdims=True)
    dx = dx - dx.mean(axis=(1, 2), keepdims=True)
    return (dy**2).sum(axis=(1, 2)) + (dx**2).sum(axis=(1, 2))


def extract_patches(
    plane: np.ndarray, clipped: np.ndarray, patch: int, max_patches: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Overlapping ``patch × patch`` patches of a (h, w) plane on a regular grid (stride chosen so
    there are at most about ``max_patches``), patches with a clipped sample left out.

    Returns (mean (n,), patches (n, patch²) float64, gradient energy (n,)).
    """
    from numpy.lib.stride_tricks import sliding_window_view

    h, w = plane.shape
    npos = max(h - patch + 1, 0) * max(w - patch + 1, 0)
    stride = max(1, int(np.ceil(np.sqrt(npos / max(max_patches, 1)))))
    win = sliding_window_view(plane, (patch, patch))[::stride, ::stride]
    bad = sliding_window_view(clipped, (patch, patch))[::stride, ::stride].any(axis=(2, 3))
    x = win[~bad].reshape(-1, patch * patch).astype(np.float64)
    return x.mean(axis=1), x, _gradient_energy(x, patch)


def _noise_eigen_mean(x: np.ndarray) -> float:
    """Mean of the noise-subspace eigenvalues of the covariance of patches x (n, d) (Chen's rule:
    the largest tail of ascending eigenvalues whose mean does not exceed its median)."""
    xc = x - x.mean(axis=0)
    ev = np.linalg.eigvalsh(xc.T @ xc / max(x.shape[0] - 1, 1))  # ascending
    m = np.arange(1, ev.size + 1)
    means = np.cumsum(ev) / m
    medians = 0.5 * (ev[(m - 1) // 2] + ev[m // 2])
    ok = np.nonzero(means <= medians + 1e-30)[0]
    return float(means[ok[-1]]) if ok.size else float(ev[0])


def _selected_variance(x: np.ndarray, g: np.ndarray, gq: float, s2: float, n_min: int) -> tuple[float, int]:
    """Noise-subspace variance of the patches that look like pure noise of variance ``s2``
    (gradient energy below its ``gq`` quantile); NaN when fewer than ``n_min`` qualify."""
    sel = g < gq * s2
    n = int(sel.sum())
    return (_noise_eigen_mean(x[sel]) if n >= n_min else float("nan")), n


def _bin_variance(
    x: np.ndarray, g: np.ndarray, gq: float, gmed: float, iters: int = MAX_ITERS
) -> tuple[float, int]:
    """Noise variance of one bin of patches (uncorrected) and the number of patches kept.

    The estimate is the *lowest* self-consistent level s² = f(s²), where f(s²) is the noise-subspace
    variance of the patches whose gradient energy is below the pure-noise ``gq`` quantile at s²:
    texture only adds energy, so a textured bin can have further fixpoints above the noise level.
    s² is scanned upwards on a geometric grid from well below the median-energy bound
    median(g)/``gmed`` (which is ≥ the noise level) until f(s²) ≤ s², then refined by fixed-point
    steps. Levels that select fewer than ``n_min`` patches are skipped: tiny, heavily overlapping
    sets are nearly rank-deficient and would fake a fixpoint far below the noise (the bug of a
    start from the few smoothest patches: some bins locked onto 1/4 of the variance).
    """
    d = x.shape[1]
    n_min = max(8 * d, int(SCAN_MIN_FRACTION * x.shape[0]))
    top = float(np.median(g)) / gmed
    if not top > 0:
        return 0.0, 0
    s2, n = top, x.shape[0]
    for k in range(SCAN_STEPS, -1, -1):
        level = top * SCAN_RATIO**k
        f, n = _selected_variance(x, g, gq, level, n_min)
        if np.isfinite(f) and f <= level:
            s2 = f
            break
    else:
        s2, n = _selected_variance(x, g, gq, top, 0)
    for _ in range(iters):  # refine: fixed-point steps from just above the crossing
        f, n_new = _selected_variance(x, g, gq, s2, n_min)
        if not np.isfinite(f):
            break
        done = abs(f - s2) <= 3e-3 * s2
        s2, n = f, n_new
        if done:
            break
    return s2, n


@lru_cache(maxsize=8)
def _texture_quantiles(patch: int) -> tuple[float, float]:
    """(99.5 % quantile, median) of the gradient energy of a unit-variance white-noise patch
    (Monte Carlo, fixed seed)."""
    rng = np.random.default_rng(2024)
    e = _gradient_energy(rng.standard_normal((200000, patch * patch)), patch)
    return float(np.quantile(e, TEXTURE_QUANTILE)), float(np.median(e))


@lru_cache(maxsize=32)
def _bias(patch: int, n: int) -> float:
    """E[estimate]/σ² of :func:`_bin_variance` on pure unit Gaussian noise with ``n`` overlapping
    patches per bin (fixed-seed Monte Carlo on a white-noise plane)."""
    rng = np.random.default_rng(777)
    side = int(np.ceil(np.sqrt(n))) + patch - 1
    gq, gmed = _texture_quantiles(patch)
    vals = []
    for _ in range(int(np.clip(200000 // n, 8, 400))):
        plane = rng.standard_normal((side, side))
        _, x, g = extract_patches(plane, np.zeros_like(plane, bool), patch, plane.size)
        vals.append(_bin_variance(x, g, gq, gmed)[0])
    return float(np.mean(vals))


def _bias_for(patch: int, n: int) -> float:
    # tabulate on a coarse log grid (the bias varies slowly with n)
    grid = int(2 ** np.clip(np.round(np.log2(max(n, 64))), 6, 14))
    return _bias(patch, grid)


def binned_pca_variance(
    mu: np.ndarray,
    x: np.ndarray,
    g: np.ndarray,
    *,
    patch: int,
    min_count: int,
    max_bins: int,
    model: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noise variance per signal-level bin (equal-count bins of patch means).

    ``mu`` (n,), ``x`` (n, patch²), ``g`` (n,) from :func:`extract_patches`. With ``model`` (n,) — a
    current noise variance per patch — patches are first divided by its square root (whitened), the
    bin estimate is rescaled at the bin's mean model value (wide bins are then unbiased).
    Returns (bin mean, bin variance, patches used) as 1-D arrays.
    """
    n = mu.size
    if n < 2 * min_count:
        raise RawrclError("too few patches for a noise estimate")
    nb = int(min(max_bins, max(2, n // min_count)))
    order = np.argsort(mu, kind="stable")
    groups = np.array_split(order, nb)
    gq, gmed = _texture_quantiles(patch)
    means, vars_, counts = [], [], []
    for idx in groups:
        if idx.size < 2 * patch * patch:
            continue
        xb, gb = x[idx], g[idx]
        scale = 1.0
        if model is not None:
            sd = np.sqrt(np.maximum(model[idx], 1e-30))
            xb = xb / sd[:, None]
            gb = gb / sd**2
            scale = float(model[idx].mean())
        s2, _ = _bin_variance(xb, gb, gq, gmed)
        means.append(float(mu[idx].mean()))
        vars_.append(s2 / _bias_for(patch, idx.size) * scale)
        counts.append(int(idx.size))
    return np.array(means), np.array(vars_), np.array(counts)
