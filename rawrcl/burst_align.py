"""Burst registration: packed-grid geometry, ECC affine registration on the packed greens, and the exact
cubic warp of packed planes (used by :mod:`rawrcl.eval.burst`, whose docstring describes the method, steps
2–3, and by :mod:`rawrcl.data.frame_pairs`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from rawrcl.cfa import CHANNELS, align_rggb, check_pattern, pack, unpack
from rawrcl.errors import RawrclError

#: (x, y) offset of each canonical packed plane inside the RGGB 2×2 cell
PLANE_OFFSETS = {"R": (0.0, 0.0), "G1": (1.0, 0.0), "G2": (0.0, 1.0), "B": (1.0, 1.0)}
#: Keys cubic-convolution parameter
KEYS_A = -0.5
#: a clipped source sample marks the warped pixel as clipped when its |interpolation weight| exceeds this:
#: a tap of weight w at a black-clipped sample biases the warped value by ≤ w·0.4σ, so ≤ 0.02σ here
#: (with 1e-9, i.e. any of the 16 taps, the HDR+ burst keeps 17 % of its pixels instead of 25 %)
CLIP_TAP_WEIGHT = 0.05


# ------------------------------------------------------------------------------------------- packed grid
@dataclass
class PackedGrid:
    """How a (H, W) mosaic of phase ``pattern`` maps onto packed RGGB planes (4, h, w) and back."""

    shape: tuple[int, int]
    pattern: str
    offset: tuple[int, int]  # (dy, dx) of align_rggb
    aligned_shape: tuple[int, int]

    @classmethod
    def of(cls, shape: tuple[int, int], pattern: str) -> PackedGrid:
        probe, (dy, dx) = align_rggb(np.zeros(shape, np.float32), pattern)
        return cls(tuple(shape), check_pattern(pattern), (dy, dx), tuple(probe.shape))  # type: ignore[arg-type]

    def pack(self, cfa: np.ndarray) -> np.ndarray:
        """(H, W) (any dtype) → (4, h, w) in RGGB geometry."""
        aligned, _ = align_rggb(np.asarray(cfa), self.pattern)
        return np.ascontiguousarray(pack(aligned, "RGGB"))

    def unpack(self, planes: np.ndarray) -> np.ndarray:
        """(4, h, w) → (H, W) on the original pixel grid."""
        dy, dx = self.offset
        h, w = self.shape
        return unpack(np.asarray(planes), "RGGB", shape=self.aligned_shape)[dy : dy + h, dx : dx + w]

    def real(self) -> np.ndarray:
        """(4, h, w) bool: packed samples that are real pixels (not reflection padding)."""
        dy, dx = self.offset
        h, w = self.shape
        hp, wp = (self.aligned_shape[0] + 1) // 2, (self.aligned_shape[1] + 1) // 2
        out = np.zeros((4, hp, wp), dtype=bool)
        for c, name in enumerate(CHANNELS):
            ox, oy = PLANE_OFFSETS[name]
            rows = 2 * np.arange(hp) + int(oy)
            cols = 2 * np.arange(wp) + int(ox)
            out[c] = ((rows >= dy) & (rows < dy + h))[:, None] & ((cols >= dx) & (cols < dx + w))[None, :]
        return out


# ------------------------------------------------------------------------------------------ registration
@dataclass
class Registration:
    """Affine motion of one frame relative to the target.

    ``warp``: 2×3 affine in *packed green* coordinates, target (x, y) → frame (x, y) (ECC's convention, use
    with inverse mapping); ``full_res``: the same motion M on the full-resolution (RGGB-aligned) mosaic grid;
    ``cc``: ECC correlation coefficient; ``max_shift``: largest displacement over the image, mosaic px.
    """

    path: str
    warp: np.ndarray
    full_res: np.ndarray
    cc: float
    max_shift: float

    def plane_warp(self, plane: str) -> np.ndarray:
        """2×3 packed-grid affine (target → frame) of one canonical plane (module docstring, step 3)."""
        a, t = self.warp[:, :2], self.warp[:, 2]
        o = np.asarray(PLANE_OFFSETS[plane]) - 0.5
        return np.concatenate([a, (t + (a - np.eye(2)) @ o / 2)[:, None]], axis=1)

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "cc": float(self.cc),
            "max_shift_px": float(self.max_shift),
            "full_res_affine": [[float(v) for v in row] for row in self.full_res],
        }


def pixel_digest(values: np.ndarray) -> str:
    """SHA-1 of an array's values (and dtype and shape): equal for copies of one frame, whose noise is not an
    independent draw (refused by ``eval --burst`` and ``adapt --method burst``), and what tells a folder's
    files from other files of the same names and sizes (``adapt --blindspot-run``)."""
    a = np.ascontiguousarray(values)
    h = hashlib.sha1(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def green_image(planes: np.ndarray) -> np.ndarray:
    """(4, h, w) packed RGGB → (h, w) float32 (G1 + G2)/2, at full-resolution position 2p + (½, ½)."""
    return (0.5 * (planes[1] + planes[2])).astype(np.float32)


def full_res_affine(warp: np.ndarray) -> np.ndarray:
    """Packed-green affine W(p) = A·p + t → full-resolution M(u) = A·u + 2t + (I − A)(½, ½)."""
    a, t = warp[:, :2], warp[:, 2]
    return np.concatenate([a, (2 * t + (np.eye(2) - a) @ np.array([0.5, 0.5]))[:, None]], axis=1)


def register_frame(
    target_green: np.ndarray,
    frame_green: np.ndarray,
    *,
    name: str = "frame",
    levels: int | None = None,
    min_cc: float = 0.5,
    max_shift: float | None = None,
    iterations: int = 200,
    eps: float = 1e-7,
    gauss: tuple[int, int] = (3, 1),
) -> tuple[np.ndarray, float]:
    """ECC affine registration of ``frame_green`` onto ``target_green`` ((h, w) float images).

    Phase-correlation initialisation, then ECC coarse to fine (``levels`` pyramid levels; default: up to 3,
    coarsest ≥ 64 px). ECC pre-smooths with a Gaussian of size ``gauss[0]`` on the coarse levels and
    ``gauss[1]`` on the finest (1 = none: most accurate there, measured on synthetic bursts). Returns (warp
    2×3 target → frame in these coordinates, cc). Raises
    :class:`RawrclError` naming ``name`` when ECC fails, cc < ``min_cc``, or the affine is implausible
    (linear part off identity by > 0.05, or a translation > ``max_shift``, default 10 % of the image size).
    """
    import cv2

    t_img = np.ascontiguousarray(target_green, dtype=np.float32)
    f_img = np.ascontiguousarray(frame_green, dtype=np.float32)
    h, w = t_img.shape
    if min(h, w) < 32:
        raise RawrclError(f"{name}: image too small to register ({h}×{w} packed pixels)")
    if levels is None:
        levels = 1
        while levels < 3 and min(h, w) / 2**levels >= 64:
            levels += 1
    max_shift = 0.1 * max(h, w) if max_shift is None else max_shift
    win = cv2.createHanningWindow((w, h), cv2.CV_32F)
    # copies: OpenCV 5.0's phaseCorrelate multiplies its inputs by the window in place
    (sx, sy), _ = cv2.phaseCorrelate(t_img.copy(), f_img.copy(), win)
    warp = np.array([[1, 0, sx], [0, 1, sy]], dtype=np.float32)
    pyr_t, pyr_f = [t_img], [f_img]
    for _ in range(levels - 1):
        pyr_t.append(cv2.pyrDown(pyr_t[-1]))
        pyr_f.append(cv2.pyrDown(pyr_f[-1]))
    crit = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, iterations, eps)
    cc = float("nan")
    for lev in range(levels - 1, -1, -1):
        s = 2.0**lev
        wl = warp.copy()
        wl[:, 2] /= s
        try:
            g = gauss[1] if lev == 0 else gauss[0]
            cc, wl = cv2.findTransformECC(pyr_t[lev], pyr_f[lev], wl, cv2.MOTION_AFFINE, crit, None, g)
        except cv2.error:
            raise RawrclError(
                f"{name}: registration to the target failed (ECC did not converge at pyramid level {lev}); "
                "frames of one static scene with some texture to register on are needed"
            ) from None
        warp = wl.copy()
        warp[:, 2] *= s
    warp = warp.astype(np.float64)
    lin_err = float(np.abs(warp[:, :2] - np.eye(2)).max())
    shift = float(np.abs(warp[:, 2]).max())
    if not np.all(np.isfinite(warp)) or lin_err > 0.05 or shift > max_shift:
        raise RawrclError(
            f"{name}: implausible registration (affine {np.round(warp, 4).tolist()}); "
            "frames of one static scene taken from nearly the same position are needed"
        )
    if not cc >= min_cc:
        raise RawrclError(
            f"{name}: poor correlation with the target after registration (ECC cc = {cc:.3f} < {min_cc}); "
            "the scene changed or the frames are not of one scene"
        )
    return warp, float(cc)


def _keys(t: np.ndarray) -> np.ndarray:
    """Keys cubic-convolution kernel (a = KEYS_A) at distance t."""
    a = KEYS_A
    t = np.abs(t)
    t2, t3 = t * t, t * t * t
    near = (a + 2) * t3 - (a + 3) * t2 + 1
    far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def warp_plane(
    plane: np.ndarray,
    bad: np.ndarray,
    real: np.ndarray,
    affine: np.ndarray,
    clip_tap_weight: float = CLIP_TAP_WEIGHT,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cubic (Keys) warp of one packed plane onto the target grid.

    Parameters
    ----------
    plane : (h, w) values; bad : (h, w) bool clipped samples; real : (h, w) bool real (not padded) samples.
    affine : 2×3, target (x, y) → source (x, y) in this plane's packed grid.
    clip_tap_weight : a clipped tap counts when its |weight| exceeds this.

    Returns
    -------
    (warped, valid, clipped, gain): float64 values, bool all-16-taps-in-bounds-and-real, bool any tap with
    non-zero weight clipped, float64 Σw² (noise-variance gain), all (h, w).
    """
    h, w = plane.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    sx = affine[0, 0] * xx + affine[0, 1] * yy + affine[0, 2]
    sy = affine[1, 0] * xx + affine[1, 1] * yy + affine[1, 2]
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    fx, fy = sx - x0, sy - y0
    wx = [_keys(fx + 1), _keys(fx), _keys(1 - fx), _keys(2 - fx)]
    wy = [_keys(fy + 1), _keys(fy), _keys(1 - fy), _keys(2 - fy)]
    out = np.zeros((h, w))
    valid = np.ones((h, w), dtype=bool)
    clipped = np.zeros((h, w), dtype=bool)
    for i in range(4):
        iy = y0 + i - 1
        in_y = (iy >= 0) & (iy < h)
        iyc = np.clip(iy, 0, h - 1)
        for j in range(4):
            ix = x0 + j - 1
            ok = in_y & (ix >= 0) & (ix < w)
            ixc = np.clip(ix, 0, w - 1)
            wt = wy[i] * wx[j]
            used = np.abs(wt) > 1e-9
            valid &= ok & real[iyc, ixc] | ~used
            clipped |= (np.abs(wt) > clip_tap_weight) & bad[iyc, ixc]
            out += wt * plane[iyc, ixc]
    gain = sum(v**2 for v in wx) * sum(v**2 for v in wy)
    return out, valid, clipped, gain
