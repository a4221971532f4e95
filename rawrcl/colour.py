"""Colour-space constants and the DNG colour-matrix conversion (no I/O, no ISP pipeline): read by the RAW
reader (a file's ColorMatrix → camera-to-sRGB matrix) and by the ISP (:mod:`rawrcl.isp`).

``xyz_to_cam`` is the DNG ColorMatrix, XYZ (D65) → camera RGB (3, 3); ``ccm`` is white-balanced camera RGB →
linear sRGB (3, 3).
"""

from __future__ import annotations

import numpy as np

from rawrcl.errors import RawrclError

#: linear sRGB → XYZ (D65), IEC 61966-2-1.
SRGB_TO_XYZ = np.array(
    [
        [0.4124564, 0.3575761, 0.1804375],
        [0.2126729, 0.7151522, 0.0721750],
        [0.0193339, 0.1191920, 0.9503041],
    ]
)
XYZ_TO_SRGB = np.linalg.inv(SRGB_TO_XYZ)


def ccm_from_xyz_to_cam(xyz_to_cam: np.ndarray) -> np.ndarray:
    """Camera (white-balanced) → linear sRGB matrix (3, 3) from a DNG ColorMatrix (XYZ → camera)."""
    m = np.asarray(xyz_to_cam, dtype=np.float64)
    if m.shape != (3, 3) or not np.all(np.isfinite(m)):
        raise RawrclError(f"colour matrix must be a finite 3×3 matrix, got shape {m.shape}")
    cam_from_srgb = m @ SRGB_TO_XYZ
    sums = cam_from_srgb.sum(axis=1, keepdims=True)
    if np.any(np.abs(sums) < 1e-9):
        raise RawrclError("colour matrix is degenerate (a row of camera-from-sRGB sums to 0)")
    cam_from_srgb = cam_from_srgb / sums
    try:
        return np.linalg.inv(cam_from_srgb)
    except np.linalg.LinAlgError as exc:
        raise RawrclError("colour matrix is singular") from exc
