"""Frame pairs of a handheld burst of one static scene, for the frame-to-frame objective
(:mod:`rawrcl.methods.f2f`; measured in ``benchmarks/burst_f2f.py``, docs/adaptation.md from "Stop 102").

Each sample is a crop of one frame (the input, packed RGGB with a margin for the networks' reach) and, for
every other frame, a block of that frame's native noisy mosaic samples around the same scene point, with
their positions in the input crop's full-resolution grid: the affine registration of
:mod:`rawrcl.burst_align` mapped into the input frame. Nothing is resampled on the target side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from rawrcl.burst_align import full_res_affine, green_image, register_frame
from rawrcl.errors import RawrclError

#: colour index (0 R, 1 G, 2 B) of the four sites of an RGGB-aligned 2×2 tile
TILE_COLOUR = ((0, 1), (1, 2))


def _affine3(a: np.ndarray) -> np.ndarray:
    return np.vstack([a, [0.0, 0.0, 1.0]])


def pairwise_warps(
    packed: Sequence[np.ndarray], log: Callable[[str], None] | None = None
) -> list[list[np.ndarray]]:
    """``warps[i][j]``: 2×3 affine, frame i → frame j in packed-green coordinates (ECC affine on the packed
    greens, :func:`rawrcl.burst_align.register_frame`), for frames ``packed`` (each (4, h, w) RGGB);
    every frame is registered to the first and the pairs composed."""
    to = [np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])]  # frame 0 → frame k
    g0 = green_image(packed[0])
    for k in range(1, len(packed)):
        w, cc = register_frame(g0, green_image(packed[k]), name=f"training frame {k}")
        if log is not None:
            log(f"  training frame {k} → 0: cc {cc:.3f}, shift {np.round(w[:, 2], 2).tolist()} packed px")
        to.append(w)
    return [
        [(_affine3(to[j]) @ np.linalg.inv(_affine3(to[i])))[:2] for j in range(len(packed))]
        for i in range(len(packed))
    ]


def colour_map(size: int) -> torch.Tensor:
    """(size, size) int64 colour index of each site of an RGGB-aligned mosaic crop at an even origin."""
    col = np.empty((size, size), np.int64)
    for dy in (0, 1):
        for dx in (0, 1):
            col[dy::2, dx::2] = TILE_COLOUR[dy][dx]
    return torch.from_numpy(col)


class FramePairs:
    """Training samples: a crop of frame i (packed, with a margin for the networks' reach) and, for every
    other frame j, a ``crop`` × ``crop`` block of frame j's native mosaic samples around the same scene point,
    with the positions of those samples in the crop's full-resolution RGB (``grid``, grid_sample's [−1, 1]
    units).

    ``packed``: frames (4, h, w) RGGB [0, 1]; ``noise``: each frame's (2, 4) [λshot; λread]; ``warps`` from
    :func:`pairwise_warps`; ``crop``/``margin`` in mosaic px (even). Frames need more than :attr:`reach`
    packed rows and columns (:class:`~rawrcl.errors.RawrclError` otherwise)."""

    def __init__(
        self,
        packed: Sequence[np.ndarray],
        noise: Sequence[np.ndarray],
        warps: Sequence[Sequence[np.ndarray]],
        crop: int = 96,
        margin: int = 24,
        seed: int = 0,
    ) -> None:
        self.packed, self.noise, self.warps = packed, noise, warps
        self.crop, self.margin = crop, margin
        self.rng = np.random.default_rng(seed)
        small = min(min(p.shape[1:]) for p in packed)
        if small <= self.reach:
            raise RawrclError(
                f"frames of {2 * small} px (rows or columns used) are too small for {crop}-px frame pairs "
                f"(more than {2 * self.reach} needed)"
            )

    @property
    def reach(self) -> int:
        """Packed rows/columns a frame needs more than: the input crop and its border."""
        return (self.crop + 2 * self.margin + 16) // 2 + 16

    def draw(self, i: int | None = None) -> dict:
        """``input`` (4, S/2, S/2) of frame i at mosaic origin ``origin`` (x, y); ``grid`` (K, c, c, 2);
        ``target`` (K, c, c) frame j's samples; ``noise`` (2, 4) of frame i, ``noise_j`` (K, 2, 4); ``frac``
        (K, c, c) how far each sample's position lies from a full-resolution pixel centre of the input (px,
        the larger of the two axes: 0 … 0.5)."""
        n, c = len(self.packed), self.crop
        i = int(self.rng.integers(n)) if i is None else i
        _, h, w = self.packed[i].shape
        big = c + 2 * self.margin + 16  # mosaic px of the input crop (even)
        lo = big // 2 + 16
        rx = 2 * int(self.rng.integers(lo // 2, w - lo // 2)) - big // 2
        ry = 2 * int(self.rng.integers(lo // 2, h - lo // 2)) - big // 2
        rx, ry = rx - rx % 2, ry - ry % 2
        cx, cy = rx + big / 2, ry + big / 2
        grids, targets, lams, fracs = [], [], [], []
        for j in range(n):
            if j == i:
                continue
            fwd, back = full_res_affine(self.warps[i][j]), full_res_affine(self.warps[j][i])
            qx = fwd[0, 0] * cx + fwd[0, 1] * cy + fwd[0, 2] - c / 2
            qy = fwd[1, 0] * cx + fwd[1, 1] * cy + fwd[1, 2] - c / 2
            qx0, qy0 = 2 * int(round(qx / 2)), 2 * int(round(qy / 2))
            block = self.packed[j][:, qy0 // 2 : qy0 // 2 + c // 2, qx0 // 2 : qx0 // 2 + c // 2]
            if qx0 < 0 or qy0 < 0 or block.shape[1:] != (c // 2, c // 2):
                continue
            ys, xs = np.mgrid[qy0 : qy0 + c, qx0 : qx0 + c].astype(np.float64)
            px = back[0, 0] * xs + back[0, 1] * ys + back[0, 2]
            py = back[1, 0] * xs + back[1, 1] * ys + back[1, 2]
            grids.append(np.stack([2 * (px - rx) / (big - 1) - 1, 2 * (py - ry) / (big - 1) - 1], -1))
            fracs.append(np.maximum(np.abs(px - np.round(px)), np.abs(py - np.round(py))))
            t = np.empty((c, c), np.float32)
            t[0::2, 0::2], t[0::2, 1::2], t[1::2, 0::2], t[1::2, 1::2] = block
            targets.append(t)
            lams.append(torch.as_tensor(self.noise[j]).float())
        if not targets:  # every other frame's block fell outside it (a frame barely larger than a crop)
            return self.draw()
        inp = self.packed[i][:, ry // 2 : ry // 2 + big // 2, rx // 2 : rx // 2 + big // 2]
        return {
            "input": torch.from_numpy(np.ascontiguousarray(inp)).float(),
            "origin": (rx, ry),
            "grid": torch.from_numpy(np.stack(grids)).float(),
            "target": torch.from_numpy(np.stack(targets)),
            "noise": torch.as_tensor(self.noise[i]).float(),
            "noise_j": torch.stack(lams),
            "frac": torch.from_numpy(np.stack(fracs)).float(),
        }


__all__ = ["FramePairs", "TILE_COLOUR", "colour_map", "pairwise_warps"]
