"""Real-noise evaluation against a burst of one static scene: registration, reference, measured NLF, metrics.

Pipeline (:func:`build_reference`)
----------------------------------
1. :func:`load_burst` — the RAW files of a folder, sorted by name; the first (or ``target``) is the frame to
   denoise, the others build the reference. Read with ``read_raw(clip=False)``; every frame must have the
   same size and Bayer phase. Each mosaic is RGGB-aligned (``align_rggb``) and packed (4, h, w).
2. Registration (:func:`register_frame`) of every other frame to the target with OpenCV ``findTransformECC``
   (``MOTION_AFFINE``) on the packed green image g = (G1 + G2)/2, initialised by phase correlation
   (translation, handles shifts of many pixels) and refined coarse to fine on a Gaussian pyramid (≤ 3
   levels, coarsest ≥ 64 px). A frame fails when ECC does not converge, when its correlation coefficient
   is below ``min_cc``, or when the affine is implausible (|A − I| > 0.05 or a shift beyond
   ``max_shift``), or when it is a copy of the target or of an earlier frame (the same values: its noise
   is not an independent draw); it is then left out of the reference (named in ``dropped`` and the log),
   and the burst is refused (:class:`RawrclError`, the first failure's message) when fewer than
   :func:`frames_needed` (two, and at least half) of the non-target frames register.
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
4. Reference = mean of the registered non-target frames (never the target: its noise would correlate
   with the denoiser's input), per pixel over the n_p frames the motion check (step 7) keeps there. Its
   noise variance at pixel p is σ²(x_p)·c_p with c_p = Σ_k Σw²_k(p) / n_p² (≈ 0.6–1 × 1/n_p).
5. Mask (``BurstReference.mask``): a pixel counts when every frame covers it with valid taps, no frame is
   clipped there (see "Clipping"), at least :func:`frames_needed` frames agree with the target there
   (step 7), and — for the metrics — it is more than ``border`` pixels from the image edge.
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
   the noise at edges (without it, static bursts of such content were refused as "moved"), capped at
   ``SLOPE_SPREAD`` × the frames' median + ``SLOPE_FLOOR`` (an object moving over a large part of one
   frame otherwise raises that frame's slope until it reads as noise); in
   16×16 packed blocks, the fraction of |z| > 4 (Gaussian: 6·10⁻⁵). A block with ≥ 10 % such pixels is
   "moved" (an isolated hot pixel is not: it is one pixel). A frame is left out of the reference in its
   moved blocks grown by one block (the way a burst merge rejects moving tiles), and whole when more than
   ``drop_moved`` (25 %) of its blocks moved or when its mean level differs from the target's by more than
   ``EXPOSURE_TOL`` (another exposure); the reference and the NLF are then rebuilt from what is
   kept. Pixels left with fewer than :func:`frames_needed` frames are masked (a target-side motion: every
   frame disagrees there), and the burst is refused when that is more than ``max_motion_masked`` (half)
   of the usable pixels or fewer than two frames are left. (Until stop 100 more than 2 % moved blocks in
   any frame refused the whole burst, and every moved block was masked.)

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

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rawrcl.burst_align import (
    CLIP_TAP_WEIGHT,
    PackedGrid,
    Registration,
    full_res_affine,
    green_image,
    pixel_digest,
    register_frame,
    warp_plane,
)
from rawrcl.cfa import CHANNELS, check_pattern
from rawrcl.errors import RawrclError
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
        what = "not a folder" if d.exists() else "no such folder"
        raise RawrclError(f"{d}: {what} (--burst expects a folder of RAW frames of one scene)")
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
    ``registrations``: one per registered non-target frame; ``moved_blocks``: per registered frame, the
    fraction of valid blocks flagged as moved; ``frames_used``: non-target frames in the reference;
    ``dropped``: frames left out whole (``path``, ``reason``: not registered, or moved in more than
    ``DROP_MOVED`` of their blocks); ``motion_excluded`` / ``motion_masked``: shares of the usable (valid,
    unclipped) pixels where the motion check left out at least one frame / left too few
    (:func:`frames_needed`), so that they are masked; ``resampling_share``: a registered frame's own
    interpolation error against the noise in its difference from the target (median slope × mean detail
    energy / mean noise variance, usable pixels) — above :data:`RESAMPLING_WARN` the reference's error
    inflates the measured NLF, its ceiling and the true-error PSNR (sharp, bright, low-noise content).
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
    frames_used: int = 0
    dropped: list[dict] = field(default_factory=list)
    motion_excluded: float = 0.0
    motion_masked: float = 0.0
    resampling_share: float = 0.0

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
            "frames_used": self.frames_used,
            "dropped": self.dropped,
            "motion_excluded_fraction": self.motion_excluded,
            "motion_masked_fraction": self.motion_masked,
            "resampling_share": self.resampling_share,
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


#: a frame's resampling slope is capped at SLOPE_SPREAD × the frames' median + SLOPE_FLOOR: a moved object
#: over a large part of one frame otherwise raises that frame's own slope until its blocks read as noise
#: (static bursts: every slope within 1.8× the median, 0.08–1.24; an object over a quarter of a frame: 3.5
#: against a median of 0.001)
SLOPE_SPREAD, SLOPE_FLOOR = 3.0, 0.05
#: a motion block is checked when at least this share of its samples is usable (unclipped, covered)
LIVE_BLOCK = 0.1
#: a block is also "moved" where its mean z² (z clipped at ±5) reaches this: a difference as large as the
#: noise itself, too small for 4σ outliers but a bias of the reference (static HDR+ burst: ≤ 1.58 in any of
#: its 512 checked blocks per frame)
Z2_MOVED = 3.0
#: ``BurstReference.resampling_share`` above which the report warns. Sharp, bright synthetic bursts: 0.7
#: (sub-pixel shifts) to 1.2 (odd-pixel shifts, whose NLF reads 2.5× the true λshot) and 2.9–3.4 (the tests'
#: unblurred ones: 5–6×); bright truth bursts of benchmarks/burst_truth.py 0.41–0.57; hdrplus_burst2 0.035,
#: the dark truth burst 0.054, smooth or noisy synthetic bursts 0.03–0.12
RESAMPLING_WARN = 0.25
#: a frame whose mean level over the usable pixels differs from the target's by more than this share is left
#: out whole, as another exposure (a bracketed folder), not as "moved" (hdrplus_burst2: within 0.9 %)
EXPOSURE_TOL = 0.10
#: a frame with more than this share of its motion blocks moved is left out of the reference whole
DROP_MOVED = 0.25
#: refused when motion leaves too few frames (:func:`frames_needed`) on more than this share of the usable
#: pixels
MAX_MOTION_MASKED = 0.5


def frames_needed(kept: int) -> int:
    """Frames a reference pixel needs, of the ``kept`` non-target frames: at least two, and at least half."""
    return max(2, math.ceil(kept / 2))


def _grow(m: np.ndarray) -> np.ndarray:
    """(h, w) bool grown by one cell in each direction (8-neighbourhood)."""
    p = np.pad(m, 1)
    out = np.zeros_like(m)
    for dy in range(3):
        for dx in range(3):
            out |= p[dy : dy + m.shape[0], dx : dx + m.shape[1]]
    return out


def _moved_blocks(
    z: np.ndarray, usable: np.ndarray, block: int, z_outlier: float, outlier_share: float
) -> tuple[np.ndarray, float]:
    """The motion blocks (block × block packed px) of one frame where it moved against the target, from its
    normalised difference ``z`` (4, h, w) on the ``usable`` samples: a block checked (≥ :data:`LIVE_BLOCK`
    usable) is moved when ≥ ``outlier_share`` of its samples have |z| > ``z_outlier``, or when its mean z²
    (z clipped at ±5) reaches :data:`Z2_MOVED`. Returns the (h // block, w // block) bool grid and the share
    of checked blocks moved."""
    n_ok = _block_reduce(usable.sum(axis=0).astype(np.float64), block)
    outlier = (np.abs(z) > z_outlier) & usable
    n_out = _block_reduce(outlier.sum(axis=0).astype(np.float64), block)
    z2 = _block_reduce(np.where(usable, np.minimum(z * z, 25.0), 0.0).sum(axis=0), block)
    live = n_ok >= LIVE_BLOCK * 4 * block * block
    enough = np.maximum(n_ok, 1)
    moved = live & ((n_out >= outlier_share * enough) | (z2 >= Z2_MOVED * enough))
    return moved, float(moved.sum() / max(live.sum(), 1))


def build_reference(
    burst: Burst,
    *,
    min_cc: float = 0.5,
    block: int = 16,
    z_outlier: float = 4.0,
    moved_block_fraction: float = 0.10,
    drop_moved: float = DROP_MOVED,
    max_motion_masked: float = MAX_MOTION_MASKED,
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
    drop_moved : a frame with more than this share of its blocks moved is left out of the reference whole.
    max_motion_masked : refuse when more than this share of the usable pixels is left with fewer than
        :func:`frames_needed` frames by the motion check.
    clip_tap_weight : interpolation weight above which a clipped source sample marks a warped pixel clipped.
    nlf_min_snr : truncated (clipped) NLF bins are fitted only ≥ this many noise stds above 0.

    Raises :class:`RawrclError` (naming the frame) when fewer than :func:`frames_needed` of the non-target
    frames register, and when motion leaves too few frames (above).
    """
    grid = PackedGrid.of(burst.shape, burst.pattern)
    real = grid.real()
    planes = [grid.pack(c).astype(np.float64) for c in burst.cfa]
    bad = [grid.pack(c) for c in burst.clipped]
    tgt = planes[0]
    g_t = green_image(tgt)
    regs: list[Registration] = []
    warped, gains, oks, clips = [], [], [], []
    dropped: list[dict] = []
    failures: list[RawrclError] = []
    hmax, wmax = burst.shape
    corners = np.array([[0, 0, 1], [wmax, 0, 1], [0, hmax, 1], [wmax, hmax, 1]], dtype=np.float64).T
    seen = {pixel_digest(burst.cfa[0]): burst.paths[0]}
    for k in range(1, burst.n):
        name = str(burst.paths[k])
        digest = pixel_digest(burst.cfa[k])
        try:
            if digest in seen:  # its noise is another frame's: no independent draw
                raise RawrclError(f"{name}: a copy of {Path(seen[digest]).name} (the same values)")
            seen[digest] = burst.paths[k]
            warp, cc = register_frame(g_t, green_image(planes[k]), name=name, min_cc=min_cc)
        except RawrclError as err:
            failures.append(err)
            dropped.append({"path": name, "reason": str(err).removeprefix(f"{name}: ")})
            if progress:
                progress(f"{Path(name).name}: left out of the reference ({dropped[-1]['reason']})")
            continue
        full = full_res_affine(warp)
        shift = float(np.abs(full @ corners - corners[:2]).max())
        reg = Registration(name, warp, full, cc, shift)
        regs.append(reg)
        out, gain = np.empty_like(tgt), np.empty_like(tgt)
        ok, cl = np.empty(tgt.shape, dtype=bool), np.empty(tgt.shape, dtype=bool)
        for c, pname in enumerate(CHANNELS):
            out[c], ok[c], cl[c], gain[c] = warp_plane(
                planes[k][c], bad[k][c], real[c], reg.plane_warp(pname), clip_tap_weight
            )
        warped.append(out)
        gains.append(gain)
        oks.append(ok)
        clips.append(cl)
        if progress:
            progress(f"registered {Path(name).name}: cc {cc:.3f}, max shift {shift:.2f} px")
    if len(warped) < frames_needed(burst.n - 1):
        raise RawrclError(
            f"{failures[0]} ({len(failures)} of {burst.n - 1} frames did not register; "
            f"at least {frames_needed(burst.n - 1)} must)"
        )

    def combine(w: np.ndarray | None, use: list[int]):
        """Reference, c_p, coverage, clipping and count of frames ``use``, each where ``w`` (K, h, w) is 1."""
        ws = np.ones((len(warped), *tgt.shape[1:])) if w is None else w
        count = sum(ws[j] for j in use)
        n = np.maximum(count, 1)[None]
        ref = sum(ws[j][None] * warped[j] for j in use) / n
        ref_gain = sum(ws[j][None] * gains[j] for j in use) / n**2
        valid = real.copy()
        clip = bad[0].copy()
        for j in use:  # a frame left out at a pixel neither covers nor clips it
            valid &= oks[j] | (ws[j] == 0)[None]
            clip |= clips[j] & (ws[j] > 0)[None]
        return ref, ref_gain, valid, clip, count

    everyone = list(range(len(warped)))
    ref, ref_gain, valid_all, clip_any, _ = combine(None, everyone)
    usable, clipped = valid_all & ~clip_any, valid_all & clip_any

    # motion check, per frame (module docstring, step 7), on the noise of the differences' Gaussian core
    core = measure_nlf(tgt, ref, usable, clipped, ref_gain, min_snr=nlf_min_snr, core=True)
    var_t = core.variance(ref, "binned")
    detail = detail_energy(ref)
    weights = np.ones((len(warped), *tgt.shape[1:]))
    fractions = []
    slopes = [
        resampling_slope((tgt - out)[usable], (var_t * (1 + gain))[usable], detail[usable])
        for out, gain in zip(warped, gains, strict=True)
    ]
    slope_cap = SLOPE_SPREAD * float(np.median(slopes)) + SLOPE_FLOOR
    resampling = (
        float(np.median(slopes)) * float(detail[usable].mean()) / max(float(var_t[usable].mean()), 1e-30)
    )
    level = max(float(tgt[usable].mean()), 1e-12)
    for j, (out, gain) in enumerate(zip(warped, gains, strict=True)):
        z = (tgt - out) / np.sqrt(var_t * (1 + gain) + min(slopes[j], slope_cap) * detail)
        moved, frac = _moved_blocks(z, usable, block, z_outlier, moved_block_fraction)
        fractions.append(frac)
        name = Path(regs[j].path).name
        exposure = float(out[usable].mean()) / level
        if abs(exposure - 1) > EXPOSURE_TOL:
            weights[j] = 0
            reason = f"its exposure differs from the target's (×{exposure:.2f} in mean level)"
            dropped.append({"path": regs[j].path, "reason": reason})
            if progress:
                progress(f"{name}: left out of the reference ({reason})")
        elif frac > drop_moved:
            weights[j] = 0
            dropped.append({"path": regs[j].path, "reason": f"moved in {100 * frac:.1f} % of its blocks"})
            if progress:
                progress(f"{name}: left out of the reference (moved in {100 * frac:.1f} % of its blocks)")
        elif moved.any():
            up = np.kron(_grow(moved), np.ones((block, block), dtype=bool))
            weights[j, : up.shape[0], : up.shape[1]][up] = 0
            if progress:
                progress(
                    f"{name}: moved in {100 * frac:.1f} % of its blocks, left out of the reference there"
                )
    kept = [j for j in everyone if weights[j].any()]
    excluded = masked = 0.0
    if len(kept) < len(warped) or (weights == 0).any():
        if len(kept) < 2:
            where = dropped[-1]["path"] if dropped else burst.paths[0]
            raise RawrclError(
                f"{where}: the scene moved against the target after registration ({len(kept)} frame(s) "
                "left); a burst of one static scene is needed"
            )
        ref, ref_gain, valid_all, clip_any, count = combine(weights, kept)
        enough = count >= frames_needed(len(kept))
        before = valid_all & ~clip_any
        n_before = max(int(before.sum()), 1)
        excluded = float((before & (count < len(kept))[None]).sum() / n_before)
        masked = float((before & ~enough[None]).sum() / n_before)
        if masked > max_motion_masked:
            raise RawrclError(
                f"{burst.paths[0]}: the scene moved in {100 * masked:.0f} % of the usable pixels (fewer than "
                f"{frames_needed(len(kept))} frames agree with the target there, limit "
                f"{100 * max_motion_masked:.0f} %); a burst of one static scene is needed"
            )
        usable = before & enough[None]
        clipped = valid_all & clip_any & enough[None]
    # the NLF, once, on what the motion check kept
    nlf = measure_nlf(tgt, ref, usable, clipped, ref_gain, min_snr=nlf_min_snr)
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
        frames_used=len(kept),
        dropped=dropped,
        motion_excluded=excluded,
        motion_masked=masked,
        resampling_share=resampling,
    )


# ---------------------------------------------------------------------------------------------- metrics
