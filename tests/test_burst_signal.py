"""The burst selection signal (rawrcl.train.burst_signal): on a synthetic burst with known motion and truth,
its estimate of the difference of two denoisers' true MSE, the samples it compares, the band's strips, and the
weight of a second denoiser (GAT+BM3D in the commands) averaged into the first that it chooses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.train.burst_signal import (
    FUSE_GRID,
    NativePairs,
    band_gat_bm3d,
    band_output,
    burst_errors,
    burst_gain,
    burst_scores,
    choose_fusion,
    fusion_scores,
    native_pairs,
)

SIGMA = 0.01
SHIFTS = [(0, 0), (3, -2), (-2, 1), (1, 4)]  # (dx, dy) packed px of each frame's view of the scene


class Blur(nn.Module):
    """A noise-aware stand-in denoiser: a k×k box filter per plane (k = 1: the noisy input)."""

    noise_aware = True

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        if self.k == 1:
            return x.clone()
        w = torch.ones(4, 1, self.k, self.k, dtype=x.dtype) / self.k**2
        return F.conv2d(F.pad(x, [self.k // 2] * 4, mode="replicate"), w, groups=4)


def _burst(seed: int = 0, h: int = 96, w: int = 128):
    """(noisy frames, clean frames, warps, noise) of a smooth scene seen through whole-pixel shifts: every
    registered position is a sample of the other frame."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    m = 8
    scene = gaussian_filter(rng.random((4, h + 2 * m, w + 2 * m)), (0, 2, 2)) * 2 - 0.5
    scene = np.clip(scene, 0.05, 0.9)
    clean = [scene[:, m + dy : m + dy + h, m + dx : m + dx + w].astype(np.float32) for dx, dy in SHIFTS]
    noisy = [np.float32(c + rng.normal(0, SIGMA, c.shape)) for c in clean]
    # frame i's (x, y) shows the scene point of frame j's (x + dxᵢ − dxⱼ, y + dyᵢ − dyⱼ)
    warps = [
        [
            np.array([[1.0, 0, SHIFTS[i][0] - SHIFTS[j][0]], [0, 1.0, SHIFTS[i][1] - SHIFTS[j][1]]])
            for j in range(4)
        ]
        for i in range(4)
    ]
    noise = [torch.tensor([[0.0] * 4, [SIGMA**2] * 4]) for _ in range(4)]
    return noisy, clean, warps, noise


def test_the_signal_estimates_the_difference_of_true_errors():
    noisy, clean, warps, noise = _burst()
    bands = [40] * 4
    models = [Blur(1), Blur(3), Blur(9)]
    rows = burst_scores(models, noisy, noise, warps, bands)
    pairs = native_pairs(noisy, noise, warps, bands, [n[:, 40:] for n in noisy])
    assert rows[0]["burst_samples"] == sum(p.count for p in pairs) > 20_000
    # the truth on the same samples
    true = []
    for m in models:
        se, n = 0.0, 0
        for i, fp in enumerate(pairs):
            out = band_output(m, noisy[i], noise[i], bands[i])
            for c, p, *_ in fp.entries:
                se += float(((out[c].reshape(-1)[p] - clean[i][c, 40:].reshape(-1)[p]) ** 2).sum())
                n += len(p)
        true.append(se / n)
    for k in (1, 2):
        d_true = true[0] - true[k]
        est = rows[k]["burst_dmse"]
        assert abs(est - d_true) < 0.1 * abs(d_true) + 3 * rows[k]["burst_gain_se_db"] * true[0] / 4.34
    # the 3×3 box is better than the noisy input, the 9×9 one blurs the scene: worse than the 3×3
    assert rows[1]["burst"] < rows[0]["burst"] and rows[2]["burst"] > rows[1]["burst"]
    assert rows[1]["burst_gain_db"] > 0 and rows[0]["burst_gain_db"] == 0
    # in dB of the first's true MSE (σ² here): 10·log10(σ² / (σ² − Δ))
    assert rows[1]["burst_gain_db"] == pytest.approx(10 * np.log10(true[0] / true[1]), abs=0.3)


def test_only_samples_near_another_frames_samples_and_in_its_band_are_compared():
    noisy, _, warps, noise = _burst()
    start = [n[:, 40:] for n in noisy]
    half = [[w.copy() for w in row] for row in warps]
    for i in range(4):
        for j in range(4):
            if i != j:
                half[i][j][0, 2] += 0.5  # half a packed pixel: between two samples
    assert sum(p.count for p in native_pairs(noisy, noise, half, [40] * 4, start)) == 0
    within = [[w.copy() for w in row] for row in warps]
    for row in within:
        for w in row:
            w[1, 2] += 0.1  # within EPS: still compared
    assert sum(p.count for p in native_pairs(noisy, noise, within, [40] * 4, start)) > 0
    # frame 1's band starting lower: frame 0's band samples that map above it are not compared
    full = native_pairs(noisy, noise, warps, [40] * 4, start)
    lower = native_pairs(
        noisy, noise, warps, [40, 60, 40, 40], [start[0], noisy[1][:, 60:], start[2], start[3]]
    )
    assert lower[0].count < full[0].count


def test_the_band_is_denoised_in_strips_as_in_one_piece(monkeypatch):
    noisy, _, _, noise = _burst()
    m = Blur(5)
    whole = m(torch.from_numpy(noisy[0])[None], noise[0][None])[0, :, 40:].numpy()
    monkeypatch.setattr("rawrcl.train.burst_signal.STRIP", 48)
    assert np.allclose(band_output(m, noisy[0], noise[0], 40), whole, atol=1e-6)


def test_a_gain_has_no_db_scale_when_the_told_noise_exceeds_the_error():
    fp = NativePairs(0, [(0, np.arange(4), np.zeros(4), np.full(4, 1.0), np.arange(4))])
    base, cand = burst_errors([np.full((4, 1, 4), 0.1)], [fp]), burst_errors([np.full((4, 1, 4), 0.05)], [fp])
    g = burst_gain(base, cand, [fp])
    assert g["burst_dmse"] == pytest.approx(0.01 - 0.0025) and np.isnan(g["burst_gain_db"])


def test_too_few_samples_stop_after_the_first_model():
    noisy, _, warps, noise = _burst()

    class Counted(Blur):
        calls = 0

        def forward(self, x, n):
            Counted.calls += 1
            return super().forward(x, n)

    rows = burst_scores([Blur(1), Counted(3)], noisy, noise, warps, [40] * 4, min_samples=10**9)
    assert len(rows) == 1 and rows[0]["burst_samples"] > 0 and Counted.calls == 0


class Line(Blur):
    """A 1×k (``across``) or k×1 box filter per plane: two of them make errors that are mostly independent."""

    def __init__(self, k: int, across: bool) -> None:
        super().__init__(k)
        self.across = across

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        shape = (1, self.k) if self.across else (self.k, 1)
        w = torch.ones(4, 1, *shape, dtype=x.dtype) / self.k
        pad = [self.k // 2] * 2 + [0, 0] if self.across else [0, 0] + [self.k // 2] * 2
        return F.conv2d(F.pad(x, pad, mode="replicate"), w, groups=4)


def test_the_fusion_weight_chosen_is_where_the_truth_is_best():
    noisy, clean, warps, noise = _burst(seed=1)
    bands = [40] * 4
    model, other = Line(5, True), Line(5, False)

    def classical(frame, nz, top):
        return band_output(other, frame, nz, top)

    rows = fusion_scores(model, model, noisy, noise, warps, bands, classical=classical)
    assert [r["fuse_bm3d"] for r in rows] == list(FUSE_GRID) and rows[0]["burst_dmse"] == 0
    a = [band_output(model, f, n, 40) for f, n in zip(noisy, noise, strict=True)]
    pairs = native_pairs(noisy, noise, warps, bands, a)
    b = [classical(f, n, 40) for f, n in zip(noisy, noise, strict=True)]
    true = []
    for w in FUSE_GRID:
        se, n = 0.0, 0
        for i, fp in enumerate(pairs):
            for c, p, *_ in fp.entries:
                out = ((1 - w) * a[i][c] + w * b[i][c]).reshape(-1)[p]
                se += float(((out - clean[i][c, 40:].reshape(-1)[p]) ** 2).sum())
                n += len(p)
        true.append(se / n)
    best = int(np.argmin(true))
    assert best > 0 and true[0] - true[best] > 0.2 * true[0]  # averaging the two stand-ins gains
    chosen = FUSE_GRID.index(choose_fusion(rows)["fuse_bm3d"])
    assert chosen > 0 and true[chosen] - true[best] < 0.1 * (true[0] - true[best])
    # the estimate of each weight's gain is the truth's, within its standard error
    for r, t in zip(rows[1:], true[1:], strict=True):
        assert abs(r["burst_dmse"] - (true[0] - t)) < 3 * r["burst_dmse_se"] + 0.05 * abs(true[0] - t)


def test_fusion_scores_on_burst_scores_outputs_are_the_same_rows():
    noisy, _, warps, noise = _burst(seed=2)
    bands = [40] * 4
    start, model, other = Blur(1), Line(5, True), Line(5, False)

    def classical(frame, nz, top):
        return band_output(other, frame, nz, top)

    outs: list = []
    compared: list = []
    rows = burst_scores([start, model], noisy, noise, warps, bands, outputs=outs, compared=compared)
    assert len(outs) == 2 and all(len(o) == 4 for o in outs)
    assert len(compared) == 4 and sum(p.count for p in compared) == rows[0]["burst_samples"] > 0
    np.testing.assert_array_equal(outs[1][2], band_output(model, noisy[2], noise[2], 40))
    again = fusion_scores(model, start, noisy, noise, warps, bands, classical=classical)

    class NotRun(nn.Module):  # given the outputs and the samples, fusion_scores runs neither model
        def forward(self, *a):
            raise AssertionError("run")

    shared = fusion_scores(
        NotRun(), NotRun(), noisy, noise, warps, bands, classical=classical, outputs=outs[1], pairs=compared
    )
    assert shared == again and again[0]["burst_samples"] == rows[0]["burst_samples"]


def test_choose_fusion_takes_the_smallest_weight_within_one_standard_error():
    def row(w, d, se, n=100):
        return {"fuse_bm3d": w, "burst_dmse": d, "burst_dmse_se": se, "burst_samples": n}

    rows = [row(0.0, 0.0, 0.0), row(0.2, 1.0, 0.3), row(0.4, 1.5, 0.3), row(0.6, 1.6, 0.2)]
    assert choose_fusion(rows)["fuse_bm3d"] == 0.4  # 1.5 ≥ 1.6 − 0.2; 1.0 is not
    rows[3]["burst_dmse_se"] = 0.05
    assert choose_fusion(rows)["fuse_bm3d"] == 0.6
    worse = [row(0.0, 0.0, 0.0), row(0.2, -0.5, 0.1), row(0.4, -1.0, 0.1)]
    assert choose_fusion(worse)["fuse_bm3d"] == 0.0
    none = [row(0.0, float("nan"), float("nan"), 0), row(0.2, float("nan"), float("nan"), 0)]
    assert choose_fusion(none)["fuse_bm3d"] == 0.0


def test_band_gat_bm3d_is_gat_bm3d_of_the_band_with_its_context():
    from rawrcl.burst_align import Registration  # noqa: F401  (the module the signal needs imports)
    from rawrcl.gat import gat_bm3d
    from rawrcl.train.burst_signal import CONTEXT

    noisy, clean, _, noise = _burst(h=80, w=48)
    top = 56
    out = band_gat_bm3d(noisy[0], noise[0], top)
    assert out.shape == (4, 80 - top, 48) and out.dtype == np.float32
    whole = gat_bm3d(noisy[0][:, top - CONTEXT :], 0.0, SIGMA**2)[:, CONTEXT:]
    np.testing.assert_allclose(out, whole, atol=1e-4)
    assert np.mean((out - clean[0][:, top:]) ** 2) < 0.5 * SIGMA**2  # it denoises
