"""The noise-level function measured from a burst (target − registered reference), corrected for the
reference's own noise and for black clipping: step 6 of :mod:`rawrcl.eval.burst`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rawrcl.cfa import CHANNELS
from rawrcl.errors import RawrclError

#: bins fitted only where the level is at least this many noise stds above black
MIN_BIN_SNR = 2.0


@dataclass
class BurstNLF:
    """Noise-level function measured from the burst, [0, 1] units: var = λshot·x + λread.

    ``per_plane``: plane → (λshot, λread); ``pooled``: one fit over the four planes; ``x_range``: signal range
    (reference level) of the fitted bins; ``bins``: plane → dict(mean, var, count, used) lists (pooled under
    "all").
    """

    per_plane: dict[str, tuple[float, float]]
    pooled: tuple[float, float]
    x_range: tuple[float, float]
    bins: dict[str, dict] = field(default_factory=dict)

    def variance(self, planes: np.ndarray, kind: str = "fit") -> np.ndarray:
        """Per-plane noise variance at signal ``planes`` (4, h, w): ``"fit"`` λshot·max(x, 0) + λread, or
        ``"binned"`` the measured variances of the kept (unclipped) pixels' bins interpolated linearly in x
        (constant beyond the end bins; follows the data where it is not linear in x, e.g. a tone-compressed
        range, and includes the truncation of the masked pixels — what the metrics see)."""
        if kind == "binned":
            out = np.empty(np.shape(planes))
            for c, name in enumerate(CHANNELS):
                b = self.bins[name]
                out[c] = np.interp(planes[c], b["mean"], b["var"])
            return out
        ls = np.array([self.per_plane[c][0] for c in CHANNELS]).reshape(4, 1, 1)
        lr = np.array([self.per_plane[c][1] for c in CHANNELS]).reshape(4, 1, 1)
        return ls * np.maximum(planes, 0) + lr

    def to_dict(self) -> dict:
        return {
            "lambda_shot": float(self.pooled[0]),
            "lambda_read": float(self.pooled[1]),
            "per_plane": {k: [float(v[0]), float(v[1])] for k, v in self.per_plane.items()},
            "x_range": [float(v) for v in self.x_range],
            "units": "[0,1] after black/white level; variance = lambda_shot*x + lambda_read",
        }


def _robust_var(r: np.ndarray, trim: float = 6.0) -> float:
    """Variance of ``r`` after discarding |r − median| > ``trim`` robust stds (1.4826·MAD): gross outliers
    (edges, hot pixels) go, the Gaussian bulk stays whole. A plain MAD variance is not used: on coarsely
    quantised data (the HDR+ burst has 76–169 levels per plane) it locks onto the quantisation grid."""
    med = np.median(r)
    s0 = 1.4826 * np.median(np.abs(r - med))
    keep = r if s0 <= 0 else r[np.abs(r - med) <= trim * s0]
    return float(np.var(keep))


#: the variance of a standard normal kept within ±3: what 3-sigma clipping leaves of σ²
_CLIPPED_3 = 0.97333


def clipped_var(r: np.ndarray, iters: int = 8) -> float:
    """Variance of the Gaussian core of ``r`` by iterated 3-sigma clipping about the median (from the MAD
    std, each pass the clipped variance corrected by :data:`_CLIPPED_3`). A quarter of the samples at 5–10 σ
    (a moved object) raise it 1.2–1.6×, the 6-MAD trimmed variance of :func:`_robust_var` 4× (a tenth: 1.1×
    against 1.9×); on a grid of 0.8 σ steps it reads the plain variance within 2 %."""
    med = np.median(r)
    dev = np.abs(r - med)
    s = 1.4826 * float(np.median(dev))
    for _ in range(iters):
        keep = dev <= 3 * s if s > 0 else dev <= 0
        if keep.sum() < 10:
            break
        s_new = math.sqrt(float(np.mean(dev[keep] ** 2)) / _CLIPPED_3)
        if abs(s_new - s) <= 1e-3 * s:
            s = s_new
            break
        s = s_new
    return s * s


def untruncate(m: float, v: float, iters: int = 50) -> tuple[float, float]:
    """Signal level and variance (x, σ²) of a normal whose samples were kept only when > 0 (a black-clipped
    burst: pixels with any clipped frame are masked), from the kept samples' mean ``m`` and variance ``v``:
    m = x + σλ, v = σ²(1 − αλ − λ²) with α = x/σ, λ = φ(α)/Φ(α) (fixed-point iteration)."""
    from rawrcl.calibration.special import ndtr

    x, var = m, v
    for _ in range(iters):
        sd = math.sqrt(max(var, 1e-30))
        a = x / sd
        lam = math.exp(-0.5 * a * a) / math.sqrt(2 * math.pi) / max(float(ndtr(a)), 1e-12)
        f = max(1 - a * lam - lam * lam, 1e-3)
        var = v / f
        x = m - math.sqrt(var) * lam
    return x, var


def _fit_line(x: np.ndarray, v: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    """Weighted non-negative least squares v ≈ λshot·x + λread, weights n / v̂² (two passes)."""
    from rawrcl.calibration.nlf_fit import nnls2

    if x.size < 2:
        raise RawrclError("burst NLF: fewer than 2 usable signal-level bins (scene too dark or too clipped)")
    vhat = np.maximum(v, 1e-12)
    coef = np.zeros(2)
    for _ in range(2):
        sw = np.sqrt(n) / vhat
        coef = nnls2(np.stack([x, np.ones_like(x)], axis=1) * sw[:, None], v * sw)
        vhat = np.maximum(coef[0] * x + coef[1], 1e-12)
    return float(coef[0]), float(coef[1])


def measure_nlf(
    target: np.ndarray,
    reference: np.ndarray,
    usable: np.ndarray,
    clipped: np.ndarray,
    ref_gain: np.ndarray,
    *,
    bins: int = 24,
    min_count: int = 200,
    min_snr: float = MIN_BIN_SNR,
    core: bool = False,
) -> BurstNLF:
    """Fit the NLF from target − reference (module docstring, step 6).

    Parameters
    ----------
    target, reference : (4, h, w) packed planes. usable : (4, h, w) bool pixels to use (valid, unclipped).
    clipped : (4, h, w) bool pixels excluded for clipping (valid geometry). A bin in which ≥ 1 % of the
        pixels were excluded for clipping is a truncated sample: its level and variance are corrected with
        :func:`untruncate`. Bins are fitted when their (corrected) level is ≥ ``min_snr`` noise stds.
    ref_gain : (4, h, w) c_p, the reference's noise variance in units of σ²(x_p).
    bins, min_count : equal-count bins per plane (over the usable pixels), each with ≥ ``min_count`` pixels.
    core : each bin's variance from its Gaussian core (:func:`clipped_var`), not the 6-MAD trimmed variance:
        what the motion check reads before moved pixels are known.
    """
    resid = (target - reference) / np.sqrt(1.0 + ref_gain)
    out_bins: dict[str, dict] = {}
    per_plane: dict[str, tuple[float, float]] = {}
    pooled_x, pooled_v, pooled_n = [], [], []
    lo_hi = [np.inf, -np.inf]
    for c, name in enumerate(CHANNELS):
        u = usable[c]
        cand = u | clipped[c]
        xs = reference[c][u]
        if xs.size < bins * min_count:
            raise RawrclError(f"burst NLF: only {xs.size} usable pixels in plane {name}")
        edges = np.unique(np.quantile(xs, np.linspace(0, 1, bins + 1)))
        idx_u = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, len(edges) - 2)
        idx_c = np.clip(np.searchsorted(edges, reference[c][cand], side="right") - 1, 0, len(edges) - 2)
        clip_c = clipped[c][cand]
        rs = resid[c][u]
        means, vars_, counts, used = [], [], [], []
        for b in range(len(edges) - 1):
            sel = idx_u == b
            n_b = int(sel.sum())
            if n_b < min_count:
                continue
            in_bin = idx_c == b
            truncated = bool(in_bin.any() and clip_c[in_bin].mean() >= 0.01)
            mean_b, var_b = float(xs[sel].mean()), (clipped_var if core else _robust_var)(rs[sel])
            x_b, v_b = untruncate(mean_b, var_b) if truncated else (mean_b, var_b)
            means.append((mean_b, x_b))
            vars_.append((var_b, v_b))
            counts.append(n_b)
            used.append(x_b >= min_snr * math.sqrt(v_b))
        m, v = np.asarray(means), np.asarray(vars_)
        n, k = np.asarray(counts), np.asarray(used)
        per_plane[name] = _fit_line(m[k, 1], v[k, 1], n[k])
        out_bins[name] = {
            "mean": m[:, 0].tolist(),
            "var": v[:, 0].tolist(),
            "x_true": m[:, 1].tolist(),
            "var_true": v[:, 1].tolist(),
            "count": n.tolist(),
            "used": k.tolist(),
        }
        pooled_x.append(m[k, 1])
        pooled_v.append(v[k, 1])
        pooled_n.append(n[k])
        if k.any():
            lo_hi = [min(lo_hi[0], float(m[k, 1].min())), max(lo_hi[1], float(m[k, 1].max()))]
    pooled = _fit_line(np.concatenate(pooled_x), np.concatenate(pooled_v), np.concatenate(pooled_n))
    return BurstNLF(per_plane, pooled, (lo_hi[0], lo_hi[1]), out_bins)


# ----------------------------------------------------------------------------------------------- reference
