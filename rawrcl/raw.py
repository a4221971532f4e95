"""RAW file reading: :class:`RawImage` and :func:`read_raw` (rawpy/LibRaw), DNG tag reading.

Contract (other modules rely on these field names and units):
- ``cfa``: float32 (H, W), normalised per CFA position: (raw − black[pos]) / (white − black[pos]),
  clipped to [0, 1].
- ``pattern``: "RGGB" | "BGGR" | "GRBG" | "GBRG" — the phase of ``cfa[0:2, 0:2]``.
- ``black_level``: per CFA position of the 2×2 tile, row-major (4 floats, raw DN).
- ``white_level``: raw DN.
- ``wb``: camera white-balance multipliers (R, G, B), normalised so G = 1 (or None).
- ``ccm``: 3×3 camera-RGB → sRGB (linear) matrix or None; ``xyz_to_cam``: 3×3 ColorMatrix or None.
- ``noise_profile``: list of (S, O) pairs in [0, 1] units (DNG NoiseProfile) or None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RawImage:
    """A Bayer RAW frame normalised to [0, 1] and the metadata rawrcl needs."""

    path: str
    cfa: np.ndarray
    pattern: str
    black_level: tuple[float, float, float, float]
    white_level: float
    wb: tuple[float, float, float] | None = None
    ccm: np.ndarray | None = None
    xyz_to_cam: np.ndarray | None = None
    make: str = ""
    model: str = ""
    iso: float | None = None
    exposure_time: float | None = None
    noise_profile: list[tuple[float, float]] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def height(self) -> int:
        return int(self.cfa.shape[0])

    @property
    def width(self) -> int:
        return int(self.cfa.shape[1])
