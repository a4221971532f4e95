"""Phase-correct geometric augmentation of packed RAW crops (the 8 flips/rotations by 90°)."""

from __future__ import annotations

import numpy as np

from rawrcl.cfa import TRANSPOSED_PLANES, pack, rggb_offset, shift_pattern, unpack


def dihedral(x: np.ndarray, op: int) -> np.ndarray:
    """One of the 8 flips/rotations of the last two axes of ``x`` (a view): bit 0 flips left-right,
    bit 1 up-down, bit 2 rotates by 90°; op = 0 is the identity. Any leading shape, any dtype."""
    if op & 1:
        x = x[..., :, ::-1]
    if op & 2:
        x = x[..., ::-1, :]
    if op & 4:
        x = np.rot90(x, 1, axes=(-2, -1))
    return x


def plane_order(op: int) -> list[int]:
    """Where each output plane of :func:`augment_packed` came from, as indices into [R, G1, G2, B]: a
    rotation (bit 2 of ``op``) puts the former G2 on the red row; flips keep the order. Per-plane values
    (e.g. a (2, 4) noise tensor) follow the samples with ``values[..., plane_order(op)]``."""
    return list(TRANSPOSED_PLANES) if op & 4 else [0, 1, 2, 3]


def augment_packed(packed: np.ndarray, op: int, out_hw: tuple[int, int]) -> np.ndarray:
    """Phase-correct flip/rot90 of packed RGGB RAW.

    Flipping the packed planes alone would move every sample by one CFA pixel inside its 2×2 cell (a
    flipped RGGB mosaic is GRBG/GBRG/BGGR, not RGGB). So the packed array is unpacked to the CFA, the
    CFA is flipped/rotated, and the result is cropped by one CFA pixel where needed so that red is
    top-left again, then re-packed. ``packed`` must therefore carry one spare packed row and column
    (shape (4, h+1, w+1) for an output of (4, h, w) = ``out_hw``). op as in :func:`dihedral` (0..7).
    After a rot90 the green on the red row is the former G2: the channel order stays [R, G1, G2, B] by
    position.
    """
    h, w = out_hw
    cfa = unpack(packed, "RGGB")
    cfa = np.ascontiguousarray(dihedral(cfa, op))
    # phase of the transformed mosaic: transform a tile-label map the same way
    labels = np.tile(np.array([["R", "G"], ["G", "B"]]), (cfa.shape[0] // 2, cfa.shape[1] // 2))
    labels = dihedral(labels, op)
    pattern = "".join(labels[:2, :2].ravel())
    dy, dx = rggb_offset(pattern)
    cfa = cfa[dy : dy + 2 * h, dx : dx + 2 * w]
    assert shift_pattern(pattern, dy, dx) == "RGGB"
    return pack(cfa, "RGGB")
