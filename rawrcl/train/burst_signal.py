"""The burst selection signal of ``rawrcl adapt --method burst``: a candidate's held-out error against the
other frames' *native* noisy samples (docs/adaptation.md, "Stop 109").

For every frame i of a burst, a candidate denoises frame i's held-out band (the bands of
:class:`~rawrcl.data.noisy_crops.NoisyCrops`: never trained on). Each output sample at packed pixel p of plane
c is compared with the sample of another frame j that the registration (ECC affine,
:func:`rawrcl.data.frame_pairs.pairwise_warps`, per plane as
:meth:`rawrcl.burst_align.Registration.plane_warp`) maps p to, where that position lies within :data:`EPS`
packed px of a sample on both axes and inside frame j's own held-out band: nearest, nothing resampled. Frame
j's noise is independent of frame i's, so E[(f(yᵢ) − yⱼ)²] = E[(f(yᵢ) − x)²] + σⱼ² + a term of the residual
offset (≤ EPS, either sign): differences between candidates estimate differences of their true MSE. A
registered *mean* of the other frames (what ``rawrcl eval --burst`` scores against) does not: its cubic
resampling blurs the reference, and it ranked the candidates of a synthetic burst in the wrong order (stop
109: −0.05 dB for a candidate 0.12 dB better against the truth).

Only samples where the first candidate's (the start's) output is more than 3 of frame j's noise std above 0
and below 0.9 are scored (clipped samples are biased), the same samples for every candidate; the edges of each
band (:data:`EDGE`) are left out. Shapes: packed RGGB (4, h, w) in [0, 1]; noise (2, 4) [λshot; λread].

The same comparison chooses how much of GAT+BM3D to average into the kept model's output (``rawrcl
denoise --fuse-bm3d W``; :func:`fusion_scores`, :func:`choose_fusion`): the weight depends on the camera and
the scene — on ``hdrplus_burst2`` the start gains most at 0.4, on a synthetic burst of photos at 0.1
(docs/adaptation.md, "Stop 110").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from rawrcl.burst_align import Registration, full_res_affine
from rawrcl.cfa import CHANNELS
from rawrcl.gat import banded_gat_bm3d
from rawrcl.models.conditioning import call
from rawrcl.models.geometry import pad_to_multiple, size_multiple

#: how far (packed px, each axis) a registered position may lie from another frame's sample to be compared
#: with it (the residual offset's first-order term averages out over offsets of either sign; stop 109's rule
#: fixed it before any result)
EPS = 0.15
#: packed rows above each held-out band the networks see as context (input only, never scored)
CONTEXT = 32
#: packed px at the band's left, right and bottom edges not scored (the networks' border; at the bottom at
#: most a quarter of the band)
EDGE = 16
#: packed px of the square blocks that are the standard error's sampling units
BLOCK = 32
#: packed columns a band is denoised in at a time (plus :data:`CONTEXT` each side): bounded memory
STRIP = 512
#: fewer compared samples than this (a burst whose frames moved by whole-pixel-free translations lands near
#: another frame's samples rarely: 2 of 8 frames of a synthetic burst did): ``rawrcl adapt`` chooses by SURE
MIN_SAMPLES = 10_000
#: the weights of GAT+BM3D averaged into the kept model's output that :func:`fusion_scores` compares (0: none)
FUSE_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


@dataclass
class NativePairs:
    """The compared samples of one frame i: per entry ``(c, p, y, var, block)`` — plane c, flat indices p into
    frame i's band (rows ``top`` … end) of that plane, the other frames' native samples y there, their noise
    variance var at the start's output level, the block ids (for the standard error)."""

    top: int
    entries: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]

    @property
    def count(self) -> int:
        return sum(len(e[1]) for e in self.entries)


def native_pairs(
    packed: Sequence[np.ndarray],
    noise: Sequence[torch.Tensor],
    warps: Sequence[Sequence[np.ndarray]],
    bands: Sequence[int],
    start_out: Sequence[np.ndarray],
    eps: float | None = None,
    edge: int = EDGE,
) -> list[NativePairs]:
    """The compared samples of every frame (module docstring): ``packed`` the frames (4, h, w), ``noise`` each
    frame's (2, 4), ``warps[i][j]`` frame i → j (packed greens), ``bands[i]`` frame i's first held-out packed
    row, ``start_out[i]`` (4, h − bands[i], w) the first candidate's output on that band; ``eps`` default
    :data:`EPS`."""
    eps = EPS if eps is None else eps
    out = []
    for i, frame in enumerate(packed):
        h, w = frame.shape[1:]
        top = bands[i]
        yy, xx = np.mgrid[top:h, 0:w].astype(np.float64)
        inner = np.zeros((h - top, w), bool)
        inner[: h - top - min(edge, (h - top) // 4), edge : w - edge] = True  # a narrow band keeps ¾ of it
        block = ((yy - top) // BLOCK).astype(np.int64) * (w // BLOCK + 1) + (xx // BLOCK).astype(np.int64)
        entries = []
        for j, other in enumerate(packed):
            if j == i:
                continue
            reg = Registration("", warps[i][j], full_res_affine(warps[i][j]), 1.0, 0.0)
            lam = noise[j].detach().cpu().double().numpy()
            for c, name in enumerate(CHANNELS):
                a = reg.plane_warp(name)
                qx = a[0, 0] * xx + a[0, 1] * yy + a[0, 2]
                qy = a[1, 0] * xx + a[1, 1] * yy + a[1, 2]
                rx, ry = np.round(qx), np.round(qy)
                keep = (np.abs(qx - rx) <= eps) & (np.abs(qy - ry) <= eps) & inner
                keep &= (ry >= bands[j]) & (ry < other.shape[1]) & (rx >= 0) & (rx < other.shape[2])
                level = start_out[i][c]
                var = lam[0, c] * np.clip(level, 0, None) + lam[1, c]
                keep &= (level > 3 * np.sqrt(var)) & (level < 0.9)
                if keep.any():
                    y = other[c][ry[keep].astype(np.int64), rx[keep].astype(np.int64)].astype(np.float64)
                    entries.append((c, np.flatnonzero(keep), y, var[keep], block[keep]))
        out.append(NativePairs(top, entries))
    return out


@torch.no_grad()
def band_output(model: nn.Module, frame: np.ndarray, noise: torch.Tensor, top: int) -> np.ndarray:
    """``model``'s output (4, h − top, w) on frame (4, h, w)'s rows ``top`` … end, told ``noise`` (2, 4): the
    band with :data:`CONTEXT` rows above it as input, in strips of :data:`STRIP` columns."""
    lo = max(0, top - CONTEXT)
    x = torch.from_numpy(np.ascontiguousarray(frame[:, lo:], dtype=np.float32))[None]
    n = torch.as_tensor(noise).float()[None]
    mult = size_multiple(model)
    w = x.shape[-1]
    out = np.empty((4, frame.shape[1] - top, w), np.float32)
    for x0 in range(0, w, STRIP):
        a, b = max(0, x0 - CONTEXT), min(w, x0 + STRIP + CONTEXT)
        t = x[..., a:b]
        y = call(model, pad_to_multiple(t, mult), n)[..., : t.shape[-2], : t.shape[-1]].float()
        out[:, :, x0 : min(w, x0 + STRIP)] = y[0, :, top - lo :, x0 - a : x0 - a + min(STRIP, w - x0)].numpy()
    return out


def burst_errors(
    outputs: Sequence[np.ndarray], pairs: Sequence[NativePairs]
) -> tuple[float, dict[int, float]]:
    """(Σ (f(yᵢ) − yⱼ)² over every compared sample, the same per block) of one candidate's band outputs."""
    total, blocks = 0.0, {}
    for i, fp in enumerate(pairs):
        for c, p, y, _, blk in fp.entries:
            e = (outputs[i][c].reshape(-1)[p].astype(np.float64) - y) ** 2
            total += float(e.sum())
            ids, inv = np.unique(blk + i * (1 << 40), return_inverse=True)
            for k, v in zip(ids.tolist(), np.bincount(inv, e).tolist(), strict=True):
                blocks[k] = blocks.get(k, 0.0) + v
    return total, blocks


def burst_gain(
    base: tuple[float, dict[int, float]], cand: tuple[float, dict[int, float]], pairs: Sequence[NativePairs]
) -> dict:
    """A candidate's burst error against the first candidate's: ``burst`` its mean squared error against the
    other frames' samples (lower is better), ``burst_dmse`` the first's minus its (the estimate of the true
    MSE difference; > 0: better) and its standard error ``burst_dmse_se`` (blocks as units),
    ``burst_gain_se_db`` / ``burst_gain_db``: that difference in dB of the
    first's true MSE, estimated as its ``burst`` minus the told noise variance of the compared samples (NaN
    when that is not positive: the told noise is too large), and its standard error (blocks as units)."""
    n = sum(fp.count for fp in pairs)
    var = sum(float(e[3].sum()) for fp in pairs for e in fp.entries) / max(n, 1)
    keys = sorted(set(base[1]) | set(cand[1]))
    d = np.array([base[1].get(k, 0.0) - cand[1].get(k, 0.0) for k in keys])
    dmse = (base[0] - cand[0]) / max(n, 1)
    se = float(d.std(ddof=1) * math.sqrt(len(d)) / n) if len(d) > 1 else math.nan
    m0 = base[0] / max(n, 1) - var
    ok = m0 > 0 and m0 - dmse > 0
    return {
        "burst": cand[0] / n if n else math.nan,
        "burst_dmse": dmse,
        "burst_dmse_se": se,
        "burst_gain_db": 10 * math.log10(m0 / (m0 - dmse)) if ok else math.nan,
        "burst_gain_se_db": 10 / math.log(10) * se / m0 if ok else math.nan,
        "burst_samples": n,
    }


def burst_scores(
    models: Sequence[nn.Module],
    packed: Sequence[np.ndarray],
    noise: Sequence[torch.Tensor],
    warps: Sequence[Sequence[np.ndarray]],
    bands: Sequence[int],
    say: Callable[[str], None] = lambda m: None,
    names: Sequence[str] | None = None,
    min_samples: int = 0,
    outputs: list[list[np.ndarray]] | None = None,
    compared: list[NativePairs] | None = None,
) -> list[dict]:
    """:func:`burst_gain` of every model in ``models`` (scored as given: wrap them as the commands run them)
    against the first, on the frames' held-out bands (module docstring); ``noise`` each frame's (2, 4) or,
    told row noise, (3, 4) conditioning. With fewer compared samples than
    ``min_samples`` only the first model's row (the others are not run). No samples give NaN rows.
    ``outputs``, when given, receives each model's band outputs (one list of frames per model run) and
    ``compared`` the compared samples (:func:`native_pairs`, one per frame), for :func:`fusion_scores`."""
    outs = [] if outputs is None else outputs
    for k, m in enumerate(models):
        outs.append([band_output(m, f, nz, b) for f, nz, b in zip(packed, noise, bands, strict=True)])
        if k == 0:
            pairs = native_pairs(packed, noise, warps, bands, outs[0])
            if compared is not None:
                compared[:] = pairs
            count = sum(p.count for p in pairs)
            say(f"burst signal: {count} samples compared with another frame's")
            if count < min_samples:
                break
        if names is not None:
            say(f"  denoised the held-out bands with the {names[k]}")
    errs = [burst_errors(o, pairs) for o in outs]
    return [burst_gain(errs[0], e, pairs) for e in errs]


def band_gat_bm3d(frame: np.ndarray, noise: torch.Tensor, top: int) -> np.ndarray:
    """GAT+BM3D's output (4, h − top, w) on frame (4, h, w)'s rows ``top`` … end (:data:`CONTEXT` rows above
    as input, as :func:`band_output`), told ``noise``'s λshot, λread rows (2 or 3, 4; a row part ignored)."""
    lo = max(0, top - CONTEXT)
    lam = torch.as_tensor(noise).double().cpu().numpy()
    return banded_gat_bm3d(np.ascontiguousarray(frame[:, lo:], np.float32), lam[0], lam[1])[:, top - lo :]


def fusion_scores(
    model: nn.Module,
    start: nn.Module,
    packed: Sequence[np.ndarray],
    noise: Sequence[torch.Tensor],
    warps: Sequence[Sequence[np.ndarray]],
    bands: Sequence[int],
    grid: Sequence[float] = FUSE_GRID,
    classical: Callable[[np.ndarray, torch.Tensor, int], np.ndarray] = band_gat_bm3d,
    outputs: Sequence[np.ndarray] | None = None,
    pairs: Sequence[NativePairs] | None = None,
) -> list[dict]:
    """:func:`burst_gain` of ``(1 − w)·model + w·classical`` for every weight w of ``grid`` against the first
    (``grid[0]``, 0: the model alone), each row with its ``fuse_bm3d`` w, on the held-out bands' samples that
    ``start``'s output selects (those of :func:`burst_scores`). Arguments as :func:`burst_scores`'s;
    ``classical(frame, noise, top)`` the other denoiser's band output (default: GAT+BM3D told the same
    noise); ``outputs`` ``model``'s band outputs and ``pairs`` the compared samples when
    :func:`burst_scores` made them (with ``start`` first; ``start`` is then not run)."""
    frames = list(zip(packed, noise, bands, strict=True))
    outs = list(outputs) if outputs is not None else [band_output(model, f, nz, b) for f, nz, b in frames]
    if pairs is None:
        base = outs if start is model else [band_output(start, f, nz, b) for f, nz, b in frames]
        pairs = native_pairs(packed, noise, warps, bands, base)
    other = [classical(f, nz, b) for f, nz, b in frames]
    both = list(zip(outs, other, strict=True))
    errs = [burst_errors([(1 - w) * o + w * c for o, c in both], pairs) for w in grid]
    return [{"fuse_bm3d": float(w), **burst_gain(errs[0], e, pairs)} for w, e in zip(grid, errs, strict=True)]


def choose_fusion(rows: Sequence[dict]) -> dict:
    """The row of :func:`fusion_scores` to keep: the smallest weight whose estimated gain lies within one
    standard error of the largest gain (stop 110's rule, fixed before its results: when the signal cannot tell
    the weights apart, less of the slower classical half). No compared samples: the first row (w = 0)."""
    best = max(rows, key=lambda r: (r["burst_dmse"], -r["fuse_bm3d"]))
    if not best["burst_samples"] or not math.isfinite(best["burst_dmse"]):
        return rows[0]
    bar = best["burst_dmse"] - (best["burst_dmse_se"] if math.isfinite(best["burst_dmse_se"]) else 0.0)
    return min((r for r in rows if r["burst_dmse"] >= bar), key=lambda r: r["fuse_bm3d"])


__all__ = [
    "EPS",
    "FUSE_GRID",
    "MIN_SAMPLES",
    "NativePairs",
    "band_gat_bm3d",
    "band_output",
    "burst_errors",
    "burst_gain",
    "burst_scores",
    "choose_fusion",
    "fusion_scores",
    "native_pairs",
]
