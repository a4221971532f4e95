"""A banded camera's adapted model on a file it reads as banded: the start on the de-banded rows, the adapted
network's offsets on the rows where the two disagree, the start alone where they disagree on most rows
(:class:`RowFused`, applied at inference by :func:`with_row_fusion`).

``rawrcl adapt`` on a banded camera makes the model row-aware with a row switch (config ``row_switch``: the
adapted weights for files told σ_row > ``row_min``, the frozen start ``plain`` for the rest). On a file it
reads as banded, two estimates of the clean mosaic are at hand: A, the model told the file's σ_row (the
adapted network), and D, the model told no row noise (the start) on the mosaic with its row offsets removed
(:func:`rawrcl.banding.remove_row_offsets` at σ_row). D is the better one on banded files — the classical
subtraction in front of the start closes more of the camera's gap than the adapted network does — but a
banding-free file whose horizontal scene structure (facade stripes) reads as banding loses that structure in
D (up to −22 dB), while A, taught what this camera's banding looks like, mostly keeps it. The two disagree on
exactly those rows: per mosaic row, δ = mean(A − D) over the samples clear of the input's clip levels is the
offset D removed and A kept. The output is D + u·δ with u = clip(|δ| / (τ·σ_row) − 1, 0, 1), τ =
:data:`DISPUTE`: D where the two agree on the row's offset, A's offset where they differ by 2τ·σ_row or more.
A tile whose rows disagree in all (rms of δ above :data:`GATE`·σ_row) is taken to have no banding — scene
structure read as banding — and gets the start on the tile as it is, as the switch gives a file read as
not banded. A two-stage JDD model gets the same around its first stage (``rawrcl jdd --model RUN``).

Measured (docs/adaptation.md, "The start on de-banded rows, the adapted network's where they disagree"; each
rule fixed before its result): τ chosen on sunhays80[20:30] banded and urban100[25:50] banding-free, the gate
on the same sets' gap, the start for gated tiles on sunhays80[50:60] and urban100[75:100]; checked on
cbsd68[58:68], sunhays80[30:40] and urban100[0:25], [50:75]. Shares of the supervised gap on the banded test
photos (means of four seeds): 79 % (A) → 93 % (σ_row 0.015), 84 % → 92 % (0.03); JDD +0.33 / +0.44 dB over A.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rawrcl.models.geometry import size_multiple

#: τ: rows whose offset D and A disagree on by more than τ·σ_row start to take A's offset, fully at 2τ·σ_row
#: (chosen among 0.25 / 0.5 / 1 on the tuning sets: the only one that lost nothing against A on any
#: banding-free file read as banded)
DISPUTE = 0.25
#: a tile whose rows disagree by more than this in all (rms of δ over its rows / σ_row) is scene structure,
#: not banding: the start (tuning sets: banded files 0.22–0.60, banding-free files read as banded 0.80–3.2)
GATE = 0.7


def row_switch_min(model: nn.Module) -> float | None:
    """``row_min`` of the row switch inside ``model`` (config ``row_switch``), None when it has none."""
    return next((float(m.row_min) for m in model.modules() if getattr(m, "row_switch", False)), None)


def disputed_rows(
    x: torch.Tensor, debanded: torch.Tensor, network: torch.Tensor, row: float
) -> torch.Tensor | None:
    """``debanded`` (D) with the row offsets of ``network`` (A) where the two disagree (module docstring), or
    None where they disagree on most rows (:data:`GATE`): then the rows are not banding.

    Mosaics (H, W) in [0, 1] units, rows = sensor rows: ``x`` the noisy input (its clip levels' samples
    are left out of the row means), D and A two estimates of its clean mosaic; ``row`` σ_row > 0 of the
    file. Returns (H, W), float32, or None."""
    from rawrcl.models.sure import CLIP_TOL, clip_levels

    lo, hi = clip_levels(x[None, None].float())
    ok = ((x > lo + CLIP_TOL) & (x < hi - CLIP_TOL)).float()
    diff = (network.float() - debanded.float()) * ok
    n = ok.sum(-1)
    delta = diff.sum(-1) / n.clamp_min(1)  # (H,): mean(A − D) per row, clipped samples out
    if float(delta[n > 0].square().mean().sqrt()) > GATE * row:  # NaN (no usable row): D
        return None
    u = (delta.abs() / (DISPUTE * row) - 1).clamp(0, 1)
    return debanded.float() + (u * delta)[:, None]


class RowFused(nn.Module):
    """``model`` (a noise-aware packed RAW denoiser with a row switch) with its banded samples fused: for each
    sample told σ_row > the switch's ``row_min``, :func:`disputed_rows` of the model told no row noise on the
    de-banded sample (D) and the model itself (A), or the model told no row noise on the sample as it is where
    that gates; every other sample the model's own output. Two or three passes of the model per banded
    sample. Shapes: ``x`` (B, 4, h, w) packed RGGB in [0, 1] units, ``noise`` (B, 2 or 3, 4) → (B, 4, h, w).
    Inference only (the de-banding runs in NumPy); the commands apply it through :func:`with_row_fusion`.
    :attr:`seen` counts passes, so a self-ensemble's eight flips of one tile count eight times."""

    noise_aware = True
    row_aware = True

    def __init__(self, model: nn.Module, row_min: float):
        super().__init__()
        self.model = model
        self.row_min = float(row_min)
        self.deband = getattr(model, "deband", None)
        self.size_multiple = size_multiple(model)
        #: per banded sample so far: "fused" (D with A's disputed offsets) or "start" (gated), for the log
        self.seen: list[str] = []

    @property
    def head_name(self) -> str:
        return getattr(self.model, "head_name", "raw")

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        import numpy as np

        from rawrcl.banding import remove_row_offsets
        from rawrcl.cfa import pack, unpack

        out = self.model(x, noise)
        if noise.shape[1] < 3:
            return out
        rows = noise[:, 2].amax(dim=1).clamp_min(0).sqrt()  # (B,) σ_row, the same on every plane
        banded = [b for b in range(len(x)) if float(rows[b]) > self.row_min]
        if not banded:
            return out
        out = out.clone()
        for b in banded:
            row = float(rows[b])
            cfa = unpack(x[b].float(), "RGGB")
            deb = remove_row_offsets(cfa.detach().cpu().numpy(), row)
            xd = pack(torch.from_numpy(np.ascontiguousarray(deb)).to(x.device, x.dtype), "RGGB")
            d = self.model(xd[None], noise[b : b + 1, :2])[0]
            fused = disputed_rows(cfa, unpack(d.float(), "RGGB"), unpack(out[b].float(), "RGGB"), row)
            if fused is not None:
                out[b] = pack(fused, "RGGB").to(out.dtype)
            else:  # not banding: the start on the sample as it is, as the switch gives a file told none
                out[b] = self.model(x[b : b + 1], noise[b : b + 1, :2])[0].to(out.dtype)
            self.seen.append("start" if fused is None else "fused")
        return out


def with_row_fusion(model: nn.Module) -> nn.Module:
    """``model`` with :class:`RowFused` where it holds a row switch (an adapted banded camera's model): around
    it for packed RAW output, around its first stage for a two-stage JDD model (the JDD stage then runs on the
    fused first stage, as ``rawrcl jdd --fuse-bm3d`` binds it); any other model unchanged."""
    from rawrcl.models.compose import DenoiseThenDemosaic

    lo = row_switch_min(model)
    if lo is None or isinstance(model, RowFused):
        return model
    if isinstance(model, DenoiseThenDemosaic) and model.output == "jdd":
        if isinstance(model.denoiser, RowFused):
            return model
        return model.replace(denoiser=RowFused(model.denoiser, lo))
    head = getattr(model, "head_name", None) or getattr(model, "config", {}).get("head")
    return RowFused(model, lo) if head == "raw" else model


def row_fusion_summary(model: nn.Module) -> str | None:
    """One log phrase on what the :class:`RowFused` inside ``model`` did (e.g. ``"banding: 5 of 6 tiles
    de-banded, 1 read as scene structure (the start)"``), None when it has none or saw no banded tile."""
    seen = [s for m in model.modules() if isinstance(m, RowFused) for s in m.seen]
    if not seen:
        return None
    n, start = len(seen), seen.count("start")
    text = f"banding: {n - start} of {n} tile{'s' * (n != 1)} de-banded"
    return text + (f", {start} read as scene structure (the start)" if start else "")


__all__ = [
    "DISPUTE",
    "GATE",
    "RowFused",
    "disputed_rows",
    "row_fusion_summary",
    "row_switch_min",
    "with_row_fusion",
]
