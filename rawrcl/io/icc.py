"""ICC profiles for rawrcl's image outputs (no pixels): matrix/TRC RGB profiles (ICC v2).

- :func:`linear_rgb_profile`: a ``--render linear`` output — linear camera RGB, not white-balanced — opens in
  colour-managed editors with its white balance and colours, as the sRGB rendering shows them. The profile
  maps the file's RGB to the ICC connection space (XYZ, D50) with one 3×3 matrix and identity tone curves:
  RGB → ×wb → ccm (white-balanced camera RGB → linear sRGB, :mod:`rawrcl.colour`) → XYZ (D65) → Bradford
  D65 → D50.
- :func:`display_rgb_profile`: a display profile with a tone curve, which :func:`rawrcl.isp.srgb_profile`
  makes sRGB for the ``--render srgb`` outputs, so no viewer has to guess what they are.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from rawrcl.colour import SRGB_TO_XYZ
from rawrcl.errors import RawrclError

#: the ICC connection space's white (D50), XYZ
D50 = (0.9642, 1.0, 0.8249)
#: Bradford chromatic adaptation D65 → D50 (XYZ → XYZ)
BRADFORD_D65_TO_D50 = np.array(
    [
        [1.0478112, 0.0228866, -0.0501270],
        [0.0295424, 0.9904844, -0.0170491],
        [-0.0092345, 0.0150436, 0.7521316],
    ]
)


def camera_rgb_to_d50(ccm: np.ndarray, wb: Sequence[float] | None) -> np.ndarray:
    """(3, 3) matrix: linear camera RGB (not white-balanced; the RAW's units) → XYZ (D50), through the white
    balance ``wb`` (R, G, B multipliers; None: none) and ``ccm`` (white-balanced camera RGB → linear sRGB)."""
    m = np.asarray(ccm, dtype=np.float64)
    scale = np.diag(np.asarray(wb if wb is not None else (1.0, 1.0, 1.0), dtype=np.float64))
    if (
        m.shape != (3, 3)
        or scale.shape != (3, 3)
        or not np.all(np.isfinite(m))
        or not np.all(np.isfinite(scale))
    ):
        raise RawrclError("ICC profile: need a finite 3×3 colour matrix and three white-balance multipliers")
    return BRADFORD_D65_TO_D50 @ SRGB_TO_XYZ @ m @ scale


def _s15f16(values) -> bytes:
    return b"".join(struct.pack(">i", int(round(float(v) * 65536))) for v in values)


def _xyz_tag(xyz) -> bytes:
    return b"XYZ " + bytes(4) + _s15f16(xyz)


def _desc_tag(text: str) -> bytes:
    ascii_text = text.encode("ascii", "replace") + b"\0"
    # textDescriptionType: the ASCII part, then empty Unicode and ScriptCode parts
    return (
        b"desc" + bytes(4) + struct.pack(">I", len(ascii_text)) + ascii_text + bytes(8) + bytes(3) + bytes(67)
    )


def linear_rgb_profile(to_d50: np.ndarray, description: str) -> bytes:
    """An ICC v2 input-class RGB profile with colorants the columns of ``to_d50`` (3, 3; RGB → XYZ D50) and
    identity tone curves (linear data). Returns the profile's bytes (embed as the TIFF ICCProfile tag or a
    PNG iCCP chunk)."""
    return _rgb_profile(to_d50, description, b"curv" + bytes(4) + struct.pack(">I", 0), b"scnr")


def display_rgb_profile(to_d50: np.ndarray, description: str, decode: np.ndarray) -> bytes:
    """An ICC v2 display-class RGB profile: colorants the columns of ``to_d50`` (3, 3; linear RGB → XYZ D50),
    the tone curve ``decode`` (N,): the linear value, in [0, 1], of N equally spaced code values from 0 to 1
    (e.g. the sRGB decoding, :func:`rawrcl.isp.srgb_profile`). Returns the profile's bytes."""
    table = np.round(np.clip(np.asarray(decode, dtype=np.float64), 0.0, 1.0) * 65535).astype(">u2")
    if table.ndim != 1 or len(table) < 2:
        raise RawrclError("ICC profile: the tone curve needs at least two entries")
    curve = b"curv" + bytes(4) + struct.pack(">I", len(table)) + table.tobytes()
    return _rgb_profile(to_d50, description, curve, b"mntr")


def _rgb_profile(to_d50: np.ndarray, description: str, curve: bytes, device_class: bytes) -> bytes:
    """An ICC v2 matrix/TRC RGB profile: colorants the columns of ``to_d50``, one tone curve for R, G, B."""
    m = np.asarray(to_d50, dtype=np.float64)
    if m.shape != (3, 3) or not np.all(np.isfinite(m)) or np.any(np.abs(m) >= 32767):
        raise RawrclError("ICC profile: the RGB → XYZ matrix must be a finite 3×3 matrix")
    blobs = {
        b"desc": _desc_tag(description),
        b"cprt": b"text" + bytes(4) + b"No copyright, use freely\0",
        b"wtpt": _xyz_tag(D50),
        b"rXYZ": _xyz_tag(m[:, 0]),
        b"gXYZ": _xyz_tag(m[:, 1]),
        b"bXYZ": _xyz_tag(m[:, 2]),
        b"rTRC": curve,
    }
    shared = {b"gTRC": b"rTRC", b"bTRC": b"rTRC"}  # the three curves share one entry
    count = len(blobs) + len(shared)
    offset = 128 + 4 + 12 * count
    table, data, at = [], b"", {}
    for sig, blob in blobs.items():
        at[sig] = (offset + len(data), len(blob))
        data += blob + bytes(-len(blob) % 4)
    for sig, same in shared.items():
        at[sig] = at[same]
    for sig in [*blobs, *shared]:
        table.append(sig + struct.pack(">II", *at[sig]))
    size = offset + len(data)
    header = (
        struct.pack(">I", size)
        + bytes(4)  # preferred CMM
        + struct.pack(">I", 0x02100000)  # version 2.1
        + device_class  # "scnr" input / "mntr" display
        + b"RGB "
        + b"XYZ "
        + bytes(12)  # date and time (not set)
        + b"acsp"
        + bytes(4 + 4 + 4 + 4 + 8)  # platform, flags, manufacturer, model, attributes
        + struct.pack(">I", 0)  # rendering intent: perceptual
        + _s15f16(D50)  # the connection space's illuminant
        + bytes(4)  # creator
        + bytes(44)  # profile ID and reserved
    )
    assert len(header) == 128
    return header + struct.pack(">I", count) + b"".join(table) + data
