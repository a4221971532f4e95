"""Noise model (variance = λshot·x + λread, [0, 1] units) and samplers (paper C.1, Brooks 2019, fixed)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from rawrcl.errors import RawrclError
from rawrcl.noise import (
    PRESETS,
    BrooksSampler,
    FixedSampler,
    NoiseModel,
    PaperSampler,
    sigma8_to_unit,
)


def _fit_variance(clean: np.ndarray, noise: np.ndarray, bins: int = 40) -> tuple[float, float]:
    """Regress the per-bin noise variance on the clean value: returns (slope, intercept)."""
    edges = np.linspace(clean.min(), clean.max(), bins + 1)
    which = np.clip(np.digitize(clean, edges) - 1, 0, bins - 1)
    xs, vs = [], []
    for b in range(bins):
        sel = which == b
        if sel.sum() > 1000:
            xs.append(clean[sel].mean())
            vs.append(noise[sel].var(ddof=1))
    slope, intercept = np.polyfit(xs, vs, 1)
    return float(slope), float(intercept)


def _ramp(n: int = 1_000_000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 1, n, generator=g, dtype=torch.float64)  # (C=1, H=1, W=n) uniform in [0, 1]


@pytest.mark.parametrize("poisson", [False, True])
def test_sample_variance_matches_nlf(poisson):
    ls, lr = 0.01, 4e-4
    clean = _ramp()
    model = NoiseModel(ls, lr, poisson=poisson)
    noisy = model.sample(clean, generator=torch.Generator().manual_seed(1))
    noise = (noisy - clean).numpy().ravel()
    slope, intercept = _fit_variance(clean.numpy().ravel(), noise)
    assert abs(slope / ls - 1) < 0.03, slope
    assert abs(intercept / lr - 1) < 0.05, intercept
    assert abs(noise.mean()) < 5e-4  # zero-mean


def test_variance_and_std_formula():
    model = NoiseModel(0.02, 1e-3)
    x = torch.tensor([[[0.0, 0.5, 1.0, -0.1]]])
    assert torch.allclose(model.variance(x), torch.tensor([[[1e-3, 0.011, 0.021, 1e-3]]]))
    assert torch.allclose(model.std(x) ** 2, model.variance(x))


def test_per_channel_parameters_apply_along_channel_axis():
    ls = [0.001, 0.004, 0.004, 0.016]
    model = NoiseModel(ls, 1e-4)
    clean = torch.full((4, 200, 200), 0.5, dtype=torch.float64)
    noisy = model.sample(clean, generator=torch.Generator().manual_seed(2))
    var = (noisy - clean).var(dim=(1, 2)).numpy()
    assert np.allclose(var, [0.5 * v + 1e-4 for v in ls], rtol=0.05)
    with pytest.raises(RawrclError, match="per-channel"):
        model.sample(torch.zeros(3, 4, 4))


def test_seeded_generator_is_reproducible_and_clip_works():
    model = NoiseModel(0.05, 0.01, clip=True)
    clean = _ramp(10_000)
    a = model.sample(clean, generator=torch.Generator().manual_seed(3))
    b = model.sample(clean, generator=torch.Generator().manual_seed(3))
    c = model.sample(clean, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= 0 and a.max() <= 1
    unclipped = NoiseModel(0.05, 0.01).sample(clean, generator=torch.Generator().manual_seed(3))
    assert unclipped.min() < 0 and unclipped.max() > 1


def test_invalid_parameters_are_refused():
    with pytest.raises(RawrclError):
        NoiseModel(-1e-3, 0.0)
    with pytest.raises(RawrclError):
        NoiseModel(1e-3, float("nan"))


def test_sigma8_conversion():
    assert sigma8_to_unit(255) == 1.0
    assert math.isclose(sigma8_to_unit(20), 20 / 255)


def test_paper_sampler_range_and_distribution():
    sampler = PaperSampler(5.0, 20.0)
    a, b = sampler.bounds()
    assert math.isclose(a, math.sqrt(2 * (5 / 255 / 2) ** 2))
    assert math.isclose(b, math.sqrt(2 * (20 / 255 / 2) ** 2))
    rng = np.random.default_rng(0)
    draws = [sampler(rng) for _ in range(4000)]
    s_shot = np.sqrt([d.lambda_shot for d in draws])
    s_read = np.sqrt([d.lambda_read for d in draws])
    for s in (s_shot, s_read):
        assert s.min() >= a and s.max() <= b
        assert abs(s.mean() - (a + b) / 2) < 0.02 * (b - a)  # uniform in sqrt-space
        assert abs(s.std() - (b - a) / math.sqrt(12)) < 0.03 * (b - a)
    assert np.corrcoef(s_shot, s_read)[0, 1] < 0.05  # drawn independently
    total_sigma8 = np.sqrt(s_shot**2 + s_read**2) * 255  # std at x = 1
    assert total_sigma8.min() >= 5 - 1e-9 and total_sigma8.max() <= 20 + 1e-9
    with pytest.raises(RawrclError):
        PaperSampler(10, 5)


def test_brooks_sampler_log_linear():
    rng = np.random.default_rng(1)
    draws = [BrooksSampler()(rng) for _ in range(4000)]
    log_shot = np.log([d.lambda_shot for d in draws])
    log_read = np.log([d.lambda_read for d in draws])
    assert log_shot.min() >= math.log(1e-4) and log_shot.max() <= math.log(0.012)
    assert abs(log_shot.mean() - (math.log(1e-4) + math.log(0.012)) / 2) < 0.1
    residual = log_read - (2.18 * log_shot + 1.2)
    assert abs(residual.mean()) < 0.02
    assert abs(residual.std() - 0.26) < 0.015


def test_one_noise_grammar(tmp_path):
    from rawrcl.noise import FIXED, PER_FILE, CameraSampler, ProfileSampler, noise_sampler, parse_noise

    rng = np.random.default_rng(0)
    m = parse_noise("0.003, 2e-4").make_sampler()(rng)
    assert (m.lambda_shot, m.lambda_read) == (0.003, 2e-4)
    paper = parse_noise("paper:1-2").make_sampler()
    assert isinstance(paper, PaperSampler) and (paper.sigma_min, paper.sigma_max) == (1, 2)
    assert parse_noise("paper").make_sampler() == PaperSampler(0, 20)
    assert isinstance(parse_noise("brooks").make_sampler(), BrooksSampler)
    assert isinstance(parse_noise("camera").make_sampler(), CameraSampler)
    high = parse_noise("high").make_sampler()(rng)
    assert (high.lambda_shot, high.lambda_read) == PRESETS["high"]
    assert parse_noise("L3").pair == PRESETS["L3"] and parse_noise("none").make_sampler() is None
    assert FixedSampler(1e-3, 1e-4)(rng).to_dict()["lambda_shot"] == 1e-3
    # a profile: one entry per draw without ISO, the interpolated level with ISO
    prof = tmp_path / "p.json"
    entry = lambda iso, s: {"iso": iso, "per_plane": {c: [s, s / 100] for c in ("R", "G1", "G2", "B")}}  # noqa: E731
    cams = {"acme x": {"make": "Acme", "model": "X", "entries": [entry(100, 1e-4), entry(400, 4e-4)]}}
    prof.write_text(json.dumps({"format": "rawrcl-noise-profile/1", "cameras": cams}))
    assert isinstance(parse_noise(str(prof)).make_sampler(), ProfileSampler)
    at200 = parse_noise(f"{prof}:200")
    assert at200.kind == "profile" and at200.iso == 200
    assert at200.make_sampler()(rng).lambda_shot[0] == pytest.approx(2e-4, rel=1e-6)
    # subsets per command, one-line errors
    assert parse_noise("auto", PER_FILE).kind == "auto"
    with pytest.raises(RawrclError, match="not accepted here"):
        parse_noise("auto")  # synthetic data cannot read a file's noise
    with pytest.raises(RawrclError, match="not accepted here"):
        parse_noise("camera", FIXED)
    for bad in ("gaussian", "0.1", "paper:5-1", "-1,0", f"{prof}:abc", ""):
        with pytest.raises(RawrclError):
            parse_noise(bad)
    assert noise_sampler((1e-3, 1e-5))(rng).lambda_read == 1e-5
    assert noise_sampler(None)(rng).lambda_shot <= (20 / 255) ** 2


def test_samplers_are_reproducible():
    for s in (PaperSampler(), BrooksSampler()):
        a = s(np.random.default_rng(42))
        b = s(np.random.default_rng(42))
        assert a == b


def test_readout_quantises_and_clips_like_a_file():
    from rawrcl.noise import Readout

    x = torch.tensor([-0.2, -0.001, 0.0, 0.25, 0.5000001, 1.3])
    sub = Readout(bits=10, black=0.0).apply(x)  # black subtracted: no negative values survive
    assert sub.min() == 0 and sub.max() == 1
    assert torch.allclose(sub * 1023, torch.round(sub * 1023), atol=1e-4)
    ped = Readout(bits=12, black=0.1).apply(x)  # a pedestal keeps noise below black, down to -black/(1-black)
    assert ped[1] < 0 and ped[0] == pytest.approx(-0.1 / 0.9, abs=1e-6)
    assert abs(float(ped[3]) - 0.25) <= 0.5 / (0.9 * 4095) + 1e-7
    with pytest.raises(RawrclError):
        Readout(bits=0)


def test_noise_model_with_readout_round_trips_in_dict_and_params():
    from rawrcl.noise import Readout

    m = NoiseModel([1e-3, 2e-3, 2e-3, 3e-3], 1e-5, poisson=True, readout=Readout(12, 0.0))
    assert m.to_dict()["readout"] == {"bits": 12, "black": 0.0}
    p = m.params(4)
    assert p.shape == (2, 4) and p[0, 2].item() == pytest.approx(2e-3)
    assert torch.allclose(p[1], torch.full((4,), 1e-5))
    y = m.sample(torch.full((4, 64, 64), 0.002), torch.Generator().manual_seed(0))
    assert y.min() >= 0  # clipped at black
    with pytest.raises(RawrclError):
        m.params(3)


def test_camera_sampler_covers_the_documented_ranges():
    from rawrcl.noise import CameraSampler

    rng = np.random.default_rng(0)
    draws = [CameraSampler()(rng) for _ in range(3000)]
    shot = np.array([d.lambda_shot for d in draws])
    read = np.array([d.lambda_read for d in draws])
    assert shot.min() >= 3e-6 and shot.max() <= 4e-2
    assert np.all(read <= 0.15 * shot + 1e-15) and read.min() >= 1e-9
    # read noise grows with the shot level (gain), as in real cameras
    assert np.median(read[shot > 1e-2]) > 100 * np.median(read[shot < 1e-4])
    clipped = np.mean([d.readout.black == 0 for d in draws])
    assert 0.3 < clipped < 0.4
    assert {d.readout.bits for d in draws} == {10, 12, 14}
    assert all(d.poisson for d in draws)


def test_std_map_is_the_nlf_at_the_local_mean():
    from rawrcl.noise import std_map

    x = torch.full((2, 4, 8, 8), 0.25)
    x[1] = -0.01  # below black counts as 0
    noise = torch.tensor([[[1e-3] * 4, [1e-5] * 4], [[4e-3] * 4, [1e-4] * 4]])
    s = std_map(x, noise)
    assert s.shape == x.shape
    assert torch.allclose(s[0], torch.tensor((1e-3 * 0.25 + 1e-5) ** 0.5))
    assert torch.allclose(s[1], torch.tensor(1e-4**0.5))


def test_camera_sampler_per_plane_noise_follows_white_balance_gains():
    """plane_p = 1: R and B planes get λshot·g and λread·g² (g their gain), the greens the base pair."""
    import numpy as np

    from rawrcl.noise import CameraSampler

    assert np.ndim(CameraSampler()(np.random.default_rng(0)).lambda_shot) == 0  # default: one pair
    sampler = CameraSampler(plane_p=1.0, plane_spread=2.5)
    for seed in range(20):
        m = sampler(np.random.default_rng(seed))
        shot, read = np.asarray(m.lambda_shot), np.asarray(m.lambda_read)
        assert shot.shape == read.shape == (4,) and shot[1] == shot[2] and read[1] == read[2]
        gains = shot / shot[1]
        assert np.all((gains >= 1 / 2.5 - 1e-12) & (gains <= 2.5 + 1e-12))
        np.testing.assert_allclose(read / read[1], gains**2, rtol=1e-9)


def test_camera_sampler_free_read_gains_are_independent_and_keep_the_default_stream():
    """plane_free_p = 1: the R/B read gains leave the g² law (independent draws in [1/s², s²]);
    plane_free_p = 0 draws exactly what the sampler drew before the option existed."""
    import numpy as np

    from rawrcl.noise import CameraSampler

    free = CameraSampler(plane_p=1.0, plane_spread=2.5, plane_free_p=1.0)
    off_law = 0
    for seed in range(30):
        m = free(np.random.default_rng(seed))
        shot, read = np.asarray(m.lambda_shot), np.asarray(m.lambda_read)
        g, h = shot / shot[1], read / read[1]
        assert np.all((h >= 1 / 6.25 - 1e-12) & (h <= 6.25 + 1e-12)) and h[1] == h[2] == 1.0
        off_law += int(not np.allclose(h, g**2, rtol=1e-6))
    assert off_law == 30
    tied, base = CameraSampler(plane_p=0.5, plane_free_p=0.0), CameraSampler(plane_p=0.5)
    for seed in range(10):
        a, b = tied(np.random.default_rng(seed)), base(np.random.default_rng(seed))
        np.testing.assert_array_equal(np.asarray(a.lambda_read), np.asarray(b.lambda_read))


def test_scaled_multiplies_both_lambdas_and_keeps_the_rest():
    m = NoiseModel(0.01, [1e-4, 2e-4, 3e-4, 4e-4], poisson=True, row=0.01)
    s = m.scaled(2.0)
    assert s.lambda_shot == pytest.approx(0.02) and s.lambda_read == pytest.approx((2e-4, 4e-4, 6e-4, 8e-4))
    assert (s.poisson, s.row) == (True, 0.01) and isinstance(s.lambda_read, tuple)
