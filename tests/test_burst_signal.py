"""The burst selection signal (rawrcl.train.burst_signal): on a synthetic burst with known motion and truth,
its estimate of the difference of two denoisers' true MSE, the samples it compares, the band's strips."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.train.burst_signal import (
    NativePairs,
    band_output,
    burst_errors,
    burst_gain,
    burst_scores,
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
