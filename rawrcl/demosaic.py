"""Classical demosaicing of Bayer mosaics (NumPy, any phase): the one implementation that evaluation
baselines, the demo and the burst figures use.

Methods: ``bilinear``, ``malvar`` (Malvar–He–Cutler 2004), ``menon`` (Menon 2007) from colour-demosaicing;
``vng`` and ``ea`` from OpenCV (VNG accepts 8-bit data only, so it sees the mosaic quantised to 8 bits; EA
16 bits; both clip to [0, 1]). The differentiable packed-tensor versions inside networks (bilinear and
Malvar skips) are :data:`rawrcl.models.heads.DEMOSAICS`.
"""

from __future__ import annotations

import numpy as np

from rawrcl.cfa import check_pattern
from rawrcl.errors import RawrclError

METHODS = ("bilinear", "malvar", "menon", "vng", "ea")

#: OpenCV names a mosaic by the colours of its second row's 2nd/3rd pixels: RGGB is "BayerBG" (verified by
#: tests/test_eval.py)
_CV_NAME = {"RGGB": "BG", "BGGR": "RG", "GRBG": "GB", "GBRG": "GR"}


def demosaic(cfa: np.ndarray, pattern: str = "RGGB", method: str = "menon") -> np.ndarray:
    """Demosaic a Bayer mosaic.

    Shapes: ``cfa`` (H, W) float in [0, 1] (negative noisy values are kept by the colour-demosaicing
    methods) with phase ``pattern`` → (3, H, W) float32 RGB in the same value scale.
    """
    pattern = check_pattern(pattern)
    cfa = np.asarray(cfa, dtype=np.float64)
    if method in ("bilinear", "malvar", "menon"):
        import colour_demosaicing as cd

        fn = {
            "bilinear": cd.demosaicing_CFA_Bayer_bilinear,
            "malvar": cd.demosaicing_CFA_Bayer_Malvar2004,
            "menon": cd.demosaicing_CFA_Bayer_Menon2007,
        }[method]
        rgb = np.asarray(fn(cfa, pattern))
    elif method in ("vng", "ea"):
        import cv2

        scale, dtype = (255.0, np.uint8) if method == "vng" else (65535.0, np.uint16)
        code = getattr(cv2, f"COLOR_Bayer{_CV_NAME[pattern]}2RGB_{method.upper()}")
        q = np.round(np.clip(cfa, 0, 1) * scale).astype(dtype)
        rgb = cv2.cvtColor(q, code).astype(np.float64) / scale
    else:
        raise RawrclError(f"unknown demosaicing method {method!r}; expected one of {', '.join(METHODS)}")
    return np.ascontiguousarray(rgb.transpose(2, 0, 1), dtype=np.float32)
