"""Real-noise evaluation against a burst of one static scene: registration, reference, measured NLF, metrics.

Pipeline (:func:`build_reference`)
----------------------------------
1. :func:`load_burst` — the RAW files of a folder, sorted by name; the first (or ``target``) is the frame to
   denoise, the others build the reference. Read with ``read_raw(clip=False)``; every frame must have the
   same size and Bayer phase. Each mosaic is RGGB-aligned (``align_rggb``) and packed (4, h, w).
2. Registration (:func:`register_frame`) of every other frame to the target with OpenCV ``findTransformECC``
   (``MOTION_AFFINE``) on the packed green image g = (G1 + G2)/2, initialised by phase correlation
   (translation, handles shifts of many pixels) and refined coarse to fine on a Gaussian pyramid (≤ 3
   levels, coarsest ≥ 64 px). Refused (:class:`RawrclError`) when ECC does not converge, when its
   correlation coefficient is below ``min_cc``, or when the affine is implausible (|A − I| > 0.05 or a
   shift beyond ``max_shift``).
3. Warping in a common frame. g samples the scene at full-resolution position u = 2p + (½, ½) (p the packed
   index, x and y alike); ECC's packed-green affine W(p) = A·p + t is therefore the full-resolution affine
   M(u) = A·u + 2t + (I − A)·(½, ½). Plane c (R, G1, G2, B at offsets o_c = (0,0), (1,0), (0,1), (1,1) in
   (x, y)) is warped with its own packed affine q ↦ A·q + t + (A − I)(o_c − (½, ½))/2 — the same motion
   M for every plane, expressed in each plane's grid. (For a pure translation all planes get t; with
   rotation or scale, warping every plane by W would shift the planes against each other by up to
   |A − I|/2 px.) Interpolation: Keys cubic convolution (a = −0.5) written out here, so that three
   per-pixel by-products are exact: the validity (all 16 taps inside the image and on real, not
   reflection-padded, samples), clipping (any tap with non-zero weight on a clipped sample) and the noise
   gain Σw² (the interpolated noise variance is σ²·Σw², between ≈ 0.52 and 1).
4. Reference = mean of the N − 1 registered non-target frames (never the target: its noise would correlate
   with the denoiser's input). Its noise variance at pixel p is σ²(x_p)·c_p with
   c_p = Σ_k Σw²_k(p) / (N − 1)² (≈ 0.6–1 × 1/(N − 1)).
5. Mask (``BurstReference.mask``): a pixel counts when every frame covers it with valid taps, no frame is
   clipped there (see "Clipping"), it lies outside flagged motion blocks (step 7), and — for the metrics —
   it is more than ``border`` pixels from the image edge.
6. Noise-level function (:func:`measure_nlf`): target − reference on masked pixels, divided by
   sqrt(1 + c_p) (removes the reference's own noise exactly for an unbiased reference), binned by the
   reference level (24 equal-count bins per plane); per bin a robust variance (outliers beyond 6 MAD-stds
   dropped, then the plain variance — a MAD variance locks onto the quantisation grid of coarse data);
   bins of a black-clipped burst are truncated samples (only pixels whose every frame stayed above black
   are kept) and get their level and variance corrected for the truncation (:func:`untruncate`); bins
   ≥ 2 noise stds above 0 are fitted by weighted non-negative least squares var = λshot·x + λread, per
   plane and pooled, and the signal range of the fitted bins is reported. The binned variances
   themselves (``BurstNLF.variance(kind="binned")``) are what the ceiling and the motion check use: they
   follow the data where it is not linear in x.
7. Motion check (per frame, after the NLF): z = (target − registered frame)/sqrt(σ²(ref)(1 + Σw²) + a·D),
   D the reference's local detail energy (:func:`detail_energy`) and a ≥ 0 fitted per frame
   (:func:`resampling_slope`) — the frame's own interpolation error, which on sharp bright content exceeds
   the noise at edges (without it, static bursts of such content were refused as "moved"); in
   16×16 packed blocks, the fraction of |z| > 4 (Gaussian: 6·10⁻⁵). A block with ≥ 10 % such pixels is
   "moved" (an isolated hot pixel is not: it is one pixel); moved blocks are masked, and when more than
   ``max_moved`` of the valid blocks of any frame are moved, the burst is refused.

Clipping
--------
A sample is clipped when it is at the file's floor (the minimum value, when ≥ 0.1 % of the samples sit
exactly there — a black-clipped file such as the HDR+ burst, ≈ 16 % zeros) or at/above white (≥ 1); a
warped sample is clipped when a clipped source sample enters its interpolation with |weight| > 0.05
(``CLIP_TAP_WEIGHT``: the bias this ignores is ≤ 0.02σ per tap). A
clipped sample is not a noisy measurement of the signal but a censored one: its mean over frames is
E[max(y, 0)] > x, so the reference there is biased upwards, and a good denoiser's output (an estimate of x)
would be scored against a wrong value. Such pixels are excluded from the metrics and the NLF fit, not
repaired. The exclusion selects pixels whose N noisy draws all stayed above the floor; for signal levels
x ≳ 3σ(x) this selection is negligible (< 1.2 % of the pixels at 3σ with N = 9), below it the kept target
samples are biased upwards — so the metrics describe the part of the scene above the noise floor (report
``mask_fraction``: 24 % of the HDR+ burst's pixels), and the NLF corrects its low bins for the truncation
(step 6). A looser mask (e.g. only the target's own clipped pixels) keeps far more dark pixels but scores
them against a reference biased upwards; :func:`score_mosaic` accepts one for comparisons.

Metrics (:mod:`.burst_score`: :func:`score_raw`, :func:`score_jdd`)
---------------------------------------------
PSNR in the CFA domain, linear [0, 1] (outputs clipped to [0, 1], data range 1) over the mask with a
``border`` (default 32 mosaic px); SSIM per packed plane (scikit-image, 7×7, data range 1) averaged over
the masked pixels of the four planes. JDD outputs (3, H, W) are sampled back at each pixel's own CFA colour.
The reference is noisy: even the true signal x measures MSE_ref = mean(σ²(x)·c_p) against it, the
*ceiling* (:meth:`BurstReference.ceiling`): PSNR_ceiling = −10·log10(MSE_ref). Since the reference noise is
independent of the target frame, a method's true error is MSE_true ≈ MSE_measured − MSE_ref
(``psnr_true``) — e.g. near a 45.9 dB ceiling, +0.5 dB measured is ≈ +1.2 dB of true error. Remaining
reference errors (interpolation blur, residual misregistration) are not in MSE_ref: they make every
method's true error look slightly larger; ``excess_mse`` of the noisy frame (measured − NLF-predicted −
MSE_ref) is an upper bound of their size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rawrcl.cfa import CHANNELS, check_pattern
from rawrcl.errors import RawrclError
from rawrcl.eval.burst_align import (
    CLIP_TAP_WEIGHT,
    PackedGrid,
    Registration,
    full_res_affine,
    green_image,
    register_frame,
    warp_plane,
)
from rawrcl.eval.burst_nlf import MIN_BIN_SNR, BurstNLF, measure_nlf

__all__ = [
    "BORDER",
    "Burst",
    "BurstReference",
    "build_reference",
    "burst_from_arrays",
    "clipped_samples",
    "load_burst",
]

#: metric border in mosaic pixels (the issue's numbers)
BORDER = 32
#: NLF bins are fitted only where the (truncation-corrected) level is ≥ this many noise stds above 0: below,
#: the kept samples of a black-clipped burst are too few and too truncated to correct (at 2σ the kept
#: variance is 11 % low before correction)


# ------------------------------------------------------------------------------------------------ loading
@dataclass
class Burst:
    """Frames of one static scene, target first.

    ``cfa[k]`` (H, W) float32 [0, 1] (unclipped read: values below black may be negative), ``clipped[k]``
    (H, W) bool (module docstring, "Clipping"), ``pattern`` the common Bayer phase, ``paths`` the files.
    """

    paths: list[Path]
    cfa: list[np.ndarray]
    clipped: list[np.ndarray]
    pattern: str

    @property
    def n(self) -> int:
        return len(self.cfa)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.cfa[0].shape)  # type: ignore[return-value]


def clipped_samples(cfa: np.ndarray, floor_fraction: float = 1e-3) -> np.ndarray:
    """Clipped samples of a mosaic: at the floor (its minimum, if ≥ ``floor_fraction`` of the samples sit
    exactly there) or ≥ 1 (white)."""
    a = np.asarray(cfa)
    out = a >= 1.0
    lo = a.min()
    at_floor = a <= lo
    if at_floor.mean() >= floor_fraction:
        out |= at_floor
    return out


def burst_from_arrays(cfas: Sequence[np.ndarray], pattern: str, names: Sequence[str] | None = None) -> Burst:
    """A :class:`Burst` from in-memory mosaics (H, W) [0, 1], target first (tests, simulations)."""
    pattern = check_pattern(pattern)
    arrs = [np.asarray(c, dtype=np.float32) for c in cfas]
    if len(arrs) < 3:
        raise RawrclError(f"a burst needs at least 3 frames (target + 2 for the reference), got {len(arrs)}")
    if any(a.ndim != 2 or a.shape != arrs[0].shape for a in arrs):
        raise RawrclError(f"burst frames must be (H, W) mosaics of one size, got {[a.shape for a in arrs]}")
    names = list(names) if names is not None else [f"frame{k:02d}" for k in range(len(arrs))]
    return Burst([Path(n) for n in names], arrs, [clipped_samples(a) for a in arrs], pattern)


def load_burst(folder: str | os.PathLike, target: str | None = None) -> Burst:
    """Read a burst: the RAW files of ``folder`` sorted by name, the first (or the one named ``target``,
    file name or stem) as the target. Every frame must share size and Bayer phase.

    Raises :class:`RawrclError` for a missing folder, fewer than 3 RAW files, an unknown target, an
    unreadable file (``read_raw``'s message) or frames that differ.
    """
    from rawrcl.io import RAW_EXTENSIONS, folder_files
    from rawrcl.io.raw import read_raw

    d = Path(folder)
    if not d.is_dir():
        raise RawrclError(f"{d}: no such folder (--burst expects a folder of RAW frames of one scene)")
    files = folder_files(d, RAW_EXTENSIONS)
    if len(files) < 3:
        raise RawrclError(f"{d}: a burst needs at least 3 RAW files (target + 2), found {len(files)}")
    if target is not None:
        hit = [p for p in files if target in (p.name, p.stem)]
        if not hit:
            raise RawrclError(f"--target {target!r}: no such RAW file in {d}")
        files.remove(hit[0])
        files.insert(0, hit[0])
    raws = [read_raw(p, clip=False) for p in files]
    first = raws[0]
    for p, r in zip(files[1:], raws[1:], strict=True):
        if r.cfa.shape != first.cfa.shape or r.pattern != first.pattern:
            raise RawrclError(
                f"{p}: {r.cfa.shape[0]}×{r.cfa.shape[1]} {r.pattern}, but the target {files[0].name} is "
                f"{first.cfa.shape[0]}×{first.cfa.shape[1]} {first.pattern}; "
                "a burst must share size and phase"
            )
    return Burst(files, [r.cfa for r in raws], [clipped_samples(r.cfa) for r in raws], first.pattern)


# -------------------------------------------------------------------------------------------------- NLF
@dataclass
class BurstReference:
    """A registered burst reference for its target frame (module docstring).

    Mosaic-domain arrays are (H, W) on the target's pixel grid: ``target``, ``reference``, ``mask``
    (usable: valid, unclipped, not moved; no border applied), ``valid`` (covered by every frame, whatever the
    clipping), ``ref_gain`` (c_p). ``nlf``: the measured NLF;
    ``registrations``: one per non-target frame; ``moved_blocks``: per frame, the fraction of valid blocks
    flagged as moved.
    """

    target: np.ndarray
    reference: np.ndarray
    mask: np.ndarray
    valid: np.ndarray
    ref_gain: np.ndarray
    pattern: str
    n_frames: int
    nlf: BurstNLF
    registrations: list[Registration]
    moved_blocks: list[float]
    paths: list[str]
    clipped_fraction: float

    def metric_mask(self, border: int = BORDER, base: np.ndarray | None = None) -> np.ndarray:
        """(H, W) bool: :attr:`mask` (or ``base``) minus a ``border``-pixel frame."""
        m = (self.mask if base is None else base).copy()
        if border > 0:
            m[:border] = m[-border:] = False
            m[:, :border] = m[:, -border:] = False
        return m

    def ref_noise_var(self, kind: str = "binned") -> np.ndarray:
        """(H, W) variance of the reference's own noise, σ²(reference)·c_p, with the measured NLF
        (``kind``: ``"binned"`` measured bin variances — the default, exact where the NLF is not linear —
        or ``"fit"``)."""
        grid = PackedGrid.of(self.target.shape, self.pattern)
        var = self.nlf.variance(grid.pack(self.reference), kind) * grid.pack(self.ref_gain)
        return grid.unpack(var)

    def ceiling(self, border: int = BORDER, kind: str = "binned") -> dict:
        """What the noise-free target would measure: ``mse`` = mean reference noise variance over the metric
        mask, ``psnr`` = −10·log10(mse); ``kind`` as :meth:`ref_noise_var`."""
        mse = float(self.ref_noise_var(kind)[self.metric_mask(border)].mean())
        from rawrcl.eval.metrics import psnr_from_mse

        return {"mse": mse, "psnr": psnr_from_mse(mse)}

    def summary(self, border: int = BORDER) -> dict:
        """JSON-ready description (no pixels)."""
        return {
            "paths": self.paths,
            "target": self.paths[0],
            "n_frames": self.n_frames,
            "pattern": self.pattern,
            "shape": list(self.target.shape),
            "border": border,
            "mask_fraction": float(self.metric_mask(border).mean()),
            "clipped_fraction": self.clipped_fraction,
            "mean_ref_gain": float(self.ref_gain[self.mask].mean()),
            "nlf": self.nlf.to_dict(),
            "ceiling": self.ceiling(border),
            "ceiling_linear_nlf": self.ceiling(border, "fit"),
            "registrations": [r.to_dict() for r in self.registrations],
            "moved_block_fraction": [float(v) for v in self.moved_blocks],
        }


def detail_energy(planes: np.ndarray) -> np.ndarray:
    """(4, h, w) → (4, h, w): the 3×3 mean of the squared Laplacian (each sample minus its 4 same-plane
    neighbours' mean, edges replicated) — where sub-pixel resampling errs most."""
    import torch

    from rawrcl.noise import local_mean

    p = np.pad(planes, ((0, 0), (1, 1), (1, 1)), mode="edge")
    lap = planes - 0.25 * (p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:])
    return local_mean(torch.from_numpy(lap**2)[None])[0].numpy()


#: the quantile of d² each detail bin is read at, and that quantile of a squared standard normal: the bin's
#: variance from it is not raised by outliers (a moved object) below 10 % of the bin, and, unlike the median,
#: follows the heavier tail of interpolation error at edges
_BIN_QUANTILE, _CHI2_1_Q = 0.9, 2.705543


def resampling_slope(d: np.ndarray, noise_var: np.ndarray, h: np.ndarray, bins: int = 16) -> float:
    """a ≥ 0 in var(d) ≈ noise_var + a·h: the share of a registered frame's difference from the target
    that grows with the scene's detail energy ``h`` (:func:`detail_energy`) — the frame's own interpolation
    error, largest on sharp bright content. Robust: per equal-count bin of h, the variance from the 90th
    percentile of d² (:data:`_BIN_QUANTILE`), then a weighted least-squares line through 0. All arrays 1-D
    (the usable samples)."""
    if d.size < bins * 50:
        return 0.0
    order = np.argsort(h, kind="stable")
    xs, ys, ws = [], [], []
    for idx in np.array_split(order, bins):
        total = float(np.quantile(d[idx] ** 2, _BIN_QUANTILE)) / _CHI2_1_Q
        xs.append(float(h[idx].mean()))
        ys.append(total - float(noise_var[idx].mean()))
        ws.append(idx.size)
    x, y, w = np.asarray(xs), np.asarray(ys), np.asarray(ws, dtype=np.float64)
    den = float(np.sum(w * x * x))
    return max(0.0, float(np.sum(w * x * y)) / den) if den > 0 else 0.0


def _block_reduce(a: np.ndarray, b: int) -> np.ndarray:
    """Sum over non-overlapping b×b blocks of a 2-D array (edge remainder dropped)."""
    h, w = (a.shape[0] // b) * b, (a.shape[1] // b) * b
    return a[:h, :w].reshape(h // b, b, w // b, b).sum(axis=(1, 3))


def build_reference(
    burst: Burst,
    *,
    min_cc: float = 0.5,
    block: int = 16,
    z_outlier: float = 4.0,
    moved_block_fraction: float = 0.10,
    max_moved: float = 0.02,
    clip_tap_weight: float = CLIP_TAP_WEIGHT,
    nlf_min_snr: float = MIN_BIN_SNR,
    progress: Callable[[str], None] | None = None,
) -> BurstReference:
    """Register the burst, build the reference, measure the NLF and check for motion (module docstring).

    Parameters
    ----------
    min_cc : minimum ECC correlation coefficient per frame.
    block, z_outlier, moved_block_fraction : motion blocks (packed px), outlier level |z|, and the share of
        outliers that makes a block "moved".
    max_moved : refuse when a frame has more than this fraction of its valid blocks moved.
    clip_tap_weight : interpolation weight above which a clipped source sample marks a warped pixel clipped.
    nlf_min_snr : truncated (clipped) NLF bins are fitted only ≥ this many noise stds above 0.

    Raises :class:`RawrclError` (naming the frame) for failed registration, poor correlation or motion.
    """
    grid = PackedGrid.of(burst.shape, burst.pattern)
    real = grid.real()
    planes = [grid.pack(c).astype(np.float64) for c in burst.cfa]
    bad = [grid.pack(c) for c in burst.clipped]
    tgt = planes[0]
    g_t = green_image(tgt)
    regs: list[Registration] = []
    warped, valid_all, clip_any = [], real.copy(), bad[0].copy()
    gains = []
    hmax, wmax = burst.shape
    corners = np.array([[0, 0, 1], [wmax, 0, 1], [0, hmax, 1], [wmax, hmax, 1]], dtype=np.float64).T
    for k in range(1, burst.n):
        name = str(burst.paths[k])
        warp, cc = register_frame(g_t, green_image(planes[k]), name=name, min_cc=min_cc)
        full = full_res_affine(warp)
        shift = float(np.abs(full @ corners - corners[:2]).max())
        reg = Registration(name, warp, full, cc, shift)
        regs.append(reg)
        out = np.empty_like(tgt)
        gain = np.empty_like(tgt)
        for c, pname in enumerate(CHANNELS):
            v, ok, cl, g = warp_plane(
                planes[k][c], bad[k][c], real[c], reg.plane_warp(pname), clip_tap_weight
            )
            out[c], gain[c] = v, g
            valid_all[c] &= ok
            clip_any[c] |= cl
        warped.append(out)
        gains.append(gain)
        if progress:
            progress(f"registered {Path(name).name}: cc {cc:.3f}, max shift {shift:.2f} px")
    n_ref = burst.n - 1
    ref = np.mean(warped, axis=0)
    ref_gain = np.sum(gains, axis=0) / n_ref**2
    usable = valid_all & ~clip_any
    nlf = measure_nlf(tgt, ref, usable, valid_all & clip_any, ref_gain, min_snr=nlf_min_snr)

    # motion check, per frame (module docstring, step 7)
    var_t = nlf.variance(ref, "binned")
    moved_any = np.zeros(usable.shape[1:], dtype=bool)
    fractions = []
    detail = detail_energy(ref)
    for k, (out, gain) in enumerate(zip(warped, gains, strict=True), start=1):
        var_k = var_t * (1 + gain)
        a = resampling_slope((tgt - out)[usable], var_k[usable], detail[usable])
        z = (tgt - out) / np.sqrt(var_k + a * detail)
        outlier = (np.abs(z) > z_outlier) & usable
        n_ok = _block_reduce(usable.sum(axis=0).astype(np.float64), block)
        n_out = _block_reduce(outlier.sum(axis=0).astype(np.float64), block)
        live = n_ok >= 0.5 * 4 * block * block
        moved = live & (n_out >= moved_block_fraction * np.maximum(n_ok, 1))
        frac = float(moved.sum() / max(live.sum(), 1))
        fractions.append(frac)
        if frac > max_moved:
            raise RawrclError(
                f"{burst.paths[k]}: the scene moved against the target after registration "
                f"({100 * frac:.1f} % of {block}×{block} blocks differ beyond the noise, limit "
                f"{100 * max_moved:.1f} %); "
                "a burst of one static scene is needed"
            )
        up = np.kron(moved, np.ones((block, block), dtype=bool))
        moved_any[: up.shape[0], : up.shape[1]] |= up
    usable &= ~moved_any[None]
    return BurstReference(
        target=grid.unpack(tgt).astype(np.float32),
        reference=grid.unpack(ref).astype(np.float32),
        mask=grid.unpack(usable).astype(bool),
        valid=grid.unpack(valid_all).astype(bool),
        ref_gain=grid.unpack(ref_gain),
        pattern=burst.pattern,
        n_frames=burst.n,
        nlf=nlf,
        registrations=regs,
        moved_blocks=fractions,
        paths=[str(p) for p in burst.paths],
        clipped_fraction=float(grid.unpack(clip_any & valid_all).mean()),
    )


# ---------------------------------------------------------------------------------------------- metrics
