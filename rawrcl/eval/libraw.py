"""LibRaw's own demosaicing (and its FBDD noise reduction) as a baseline: what a photographer's LibRaw/dcraw
pipeline makes of the same mosaic.

The mosaic is written as a 16-bit DNG (black ``BLACK``, white ``WHITE``; values below black are clipped by
LibRaw, as for any file it reads) and developed by rawpy/LibRaw with no white balance, no colour conversion
(``ColorSpace.raw``), linear gamma, no auto-brightening and no maximum adjustment, so the output is linear
camera RGB in the input's [0, 1] units. ``fbdd=True`` adds LibRaw's FBDD noise reduction (``Full``) before
demosaicing, the denoising LibRaw offers at a fixed strength. dcraw's wavelet denoising (``noise_thr``) is not
offered: with rawpy 0.28 / LibRaw 0.22 it left DNG mosaics unchanged, hung on some and aborted the process
("double free") on a Kodak KDC file.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from rawrcl.errors import RawrclError

#: LibRaw demosaicing algorithms rawpy's wheels carry (the GPL demosaic packs are not built in)
ALGORITHMS = {
    "ahd": "AHD",
    "aahd": "AAHD",
    "dht": "DHT",
    "dcb": "DCB",
    "ppg": "PPG",
    "vng": "VNG",
    "linear": "LINEAR",
}
#: raw DN of the intermediate DNG: a pedestal so that [0, 1] maps onto most of 16 bits
BLACK, WHITE = 4096, 65535
#: the default algorithm of :func:`libraw_demosaic` (LibRaw's and dcraw's default quality)
DEFAULT_ALGORITHM = "ahd"
#: the evaluation baselines: ``libraw-ALGO``, and ``+fbdd`` with LibRaw's FBDD noise reduction first
NAMES = ("libraw-ahd", "libraw-aahd", "libraw-dht", "libraw-dht+fbdd")


def libraw_demosaic(
    cfa: np.ndarray, pattern: str = "RGGB", algorithm: str = DEFAULT_ALGORITHM, fbdd: bool = False
) -> np.ndarray:
    """Develop a mosaic with LibRaw.

    Parameters
    ----------
    cfa : (H, W) float mosaic, [0, 1] after black/white level (values outside are clipped).
    pattern : its Bayer phase ("RGGB", "BGGR", "GRBG", "GBRG").
    algorithm : a key of :data:`ALGORITHMS`.
    fbdd : LibRaw's FBDD noise reduction (``Full``) before demosaicing.

    Returns
    -------
    (3, H, W) float32 linear camera RGB, [0, 1].
    """
    import rawpy

    from rawrcl.io.dng import write_dng

    if algorithm not in ALGORITHMS:
        raise RawrclError(f"unknown LibRaw demosaicing {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    cfa = np.asarray(cfa, dtype=np.float64)
    dn = np.clip(np.round(cfa * (WHITE - BLACK) + BLACK), 0, WHITE).astype(np.uint16)
    nr = rawpy.FBDDNoiseReductionMode.Full if fbdd else rawpy.FBDDNoiseReductionMode.Off
    with tempfile.TemporaryDirectory(prefix="rawrcl-libraw-") as tmp:
        path = write_dng(os.path.join(tmp, "mosaic.dng"), dn, pattern, BLACK, WHITE)
        with rawpy.imread(str(path)) as raw:
            rgb = raw.postprocess(
                demosaic_algorithm=getattr(rawpy.DemosaicAlgorithm, ALGORITHMS[algorithm]),
                output_color=rawpy.ColorSpace.raw,
                gamma=(1, 1),
                no_auto_bright=True,
                bright=1.0,
                use_camera_wb=False,
                use_auto_wb=False,
                user_wb=[1.0, 1.0, 1.0, 1.0],
                output_bps=16,
                user_flip=0,
                adjust_maximum_thr=0.0,
                highlight_mode=rawpy.HighlightMode.Clip,
                fbdd_noise_reduction=nr,
            )
    if rgb.shape[:2] != cfa.shape:
        raise RawrclError(f"LibRaw returned {rgb.shape[:2]} for a {cfa.shape} mosaic")
    return (rgb.astype(np.float32) / 65535.0).transpose(2, 0, 1).copy()


def develop(name: str, cfa: np.ndarray, pattern: str = "RGGB") -> np.ndarray:
    """Baseline ``name`` (``libraw-ALGO[+fbdd]``) on a mosaic: :func:`libraw_demosaic`."""
    algo, _, extra = name.removeprefix("libraw-").partition("+")
    if not name.startswith("libraw-") or extra not in ("", "fbdd"):
        raise RawrclError(f"unknown LibRaw baseline {name!r}; known: {', '.join(NAMES)}")
    return libraw_demosaic(cfa, pattern, algo, fbdd=extra == "fbdd")
