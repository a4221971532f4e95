"""Mosaic2Mosaic-style JDD self-supervision from single RAW images (after Ehret et al. 2019).

Ehret et al. fine-tune a JDD network on a *burst*: the RGB output for frame i is warped onto frame j by the
registration, re-mosaicked, and compared with frame j's raw samples; because frames move by non-integer /
odd amounts, frame j supplies the colours frame i did not observe, and the two frames' noise is
independent.

Single-image choice (documented in docs/training.md): the two "frames" are two interleaved sub-lattices of
the *same* noisy mosaic, so their noise is independent (pixel-wise independent noise) and the model never
sees the target samples (no identity solution). With the packed RGGB image P (4, h, w):

- frame A = P[:, 0::2, 0::2] (every other 2×2 CFA cell), frame B = P[:, 1::2, 1::2];
- in A's CFA grid, B sits at a known offset of (+1, +1) CFA pixels — odd, so where A observed blue, B
  observed red, etc. (the colour diversity M2M needs);
- loss ‖mosaic_RGGB(shift₍₁,₁₎ f(A)) − B‖₁ on the overlap, plus the symmetric term f(B) → A (offset
  (−1, −1), pattern BGGR), where shift is an integer shift of the full-resolution RGB output.

The sub-lattices are a 2× sub-sampled (binned) view of the scene, like Neighbor2Neighbor (Huang et al.
2021); the integer warp ignores the residual sub-cell geometry of the sub-sampling. Needs the JDD head.
"""

from __future__ import annotations

import torch

from rawrcl.cfa import mosaic, unpack
from rawrcl.errors import RawrclError
from rawrcl.methods.base import Method, domain


def sublattices(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed (B, 4, h, w) → frames A = x[..., 0::2, 0::2], B = x[..., 1::2, 1::2], (B, 4, h//2, w//2)."""
    h, w = (x.shape[-2] // 2) * 2, (x.shape[-1] // 2) * 2
    x = x[..., :h, :w]
    return x[..., 0::2, 0::2], x[..., 1::2, 1::2]


class M2M(Method):
    name = "m2m"
    needs = ("x_a", "x_b")

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        x = torch.cat([batch["x_a"], batch["x_b"]]).float()
        if x.shape[1] != 4 or min(x.shape[-2:]) < 4:
            raise RawrclError("m2m needs packed RAW crops of at least 4×4 packed pixels (the JDD task)")
        fa, fb = sublattices(x)
        n = fa.shape[0]
        out = model(torch.cat([fa, fb])).float()
        if domain(fa, out[:n]) != "jdd":
            raise RawrclError("m2m needs the jdd head (packed RAW → full-resolution RGB)")
        ya, yb = out[:n], out[n:]
        cfa_a, cfa_b = unpack(fa, "RGGB"), unpack(fb, "RGGB")  # (n, H, W)
        # B's sample at A-grid position p + (1, 1) is cfa_b[p]: compare f(A)(p + (1,1)) in colour RGGB(p)
        pred_ab = mosaic(ya[..., 1:, 1:], "RGGB")[:, 0]
        loss_ab = (pred_ab - cfa_b[..., :-1, :-1]).abs().mean()
        # A's sample at B-grid position q − (1, 1) is cfa_a[q]: f(B)(q − (1,1)), colours from q = 1 (BGGR)
        pred_ba = mosaic(yb[..., :-1, :-1], "BGGR")[:, 0]
        loss_ba = (pred_ba - cfa_a[..., 1:, 1:]).abs().mean()
        loss = 0.5 * (loss_ab + loss_ba)
        return {"loss": loss, "l1": float(loss.detach())}
