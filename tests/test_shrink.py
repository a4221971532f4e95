"""SURE shrinkage (rawrcl.models.shrink): the weight it picks, where it applies, how the commands use it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.models.shrink import maybe_shrink, with_shrink
from rawrcl.models.sure import CLASSES, SLACK, SureShrink, texture_classes
from rawrcl.noise import NoiseModel


class _Blur(nn.Module):
    """A noise-aware 'denoiser' that ignores the noise and blurs k×k: it over-smooths fine texture."""

    noise_aware = True
    head_name = "raw"

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x, noise):
        p = self.k // 2
        return F.avg_pool2d(F.pad(x, (p, p, p, p), mode="replicate"), self.k, stride=1)


def _texture(size: int, seed: int = 0) -> torch.Tensor:
    """(1, 4, size, size) packed planes: a mid-grey with fine texture of std ≈ 0.03, in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    t = F.avg_pool2d(torch.rand(1, 1, size + 1, size + 1, generator=g), 2, stride=1)
    return (0.4 + 0.1 * (t - 0.5)).expand(1, 4, size, size).contiguous()


@pytest.mark.parametrize("size", [96, 256])  # probed whole / on windows
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_matches_the_oracle_and_beats_both_ends(size, dtype):
    """At low noise on fine texture a blur removes signal: the SURE weight is close to the oracle
    w = Σ(x − y)(f − y) / Σ(f − y)² (which needs the clean x), and the shrunk output beats both the blur and
    the noisy input."""
    clean = _texture(size).to(dtype)
    noise = NoiseModel(1e-4, 1e-6)
    g = torch.Generator().manual_seed(1)
    y = clean + noise.std(clean) * torch.randn(clean.shape, generator=g, dtype=dtype)
    blur = _Blur(5)
    cond = noise.conditioning(4)[None].to(dtype)
    f = blur(y, cond)
    oracle = float(((clean - y) * (f - y)).sum() / ((f - y) ** 2).sum())
    model = SureShrink(blur)
    out = model(y, cond)
    w = float(model.last_weights[0, 0])
    assert 0.05 < oracle < 0.7
    assert abs(w / SLACK - oracle) < 0.1, (w, oracle)
    mse = {k: float(((v - clean) ** 2).mean()) for k, v in {"out": out, "blur": f, "noisy": y}.items()}
    assert mse["out"] < 0.9 * min(mse["blur"], mse["noisy"]), mse
    assert out.dtype == dtype and out.shape == y.shape


def test_a_model_can_ask_for_a_finer_grid_of_probe_windows():
    """``sure_grid = 4`` (the blind-spot composite): 16 probe windows inside the input instead of 4, and the
    weight still matches the oracle; inputs up to 2 windows a side are probed whole either way."""
    calls = []

    class _Recorded(_Blur):
        def forward(self, x, noise):
            calls.append(tuple(x.shape[-2:]))
            return super().forward(x, noise)

    clean = _texture(200)
    noise = NoiseModel(1e-4, 1e-6)
    y = clean + noise.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(1))
    cond = noise.conditioning(4)[None]
    model = _Recorded(5)
    model.sure_grid = 4
    shrink = SureShrink(model)
    assert len(shrink._windows(200, 200)) == 16 and len(SureShrink(_Blur(5))._windows(200, 200)) == 4
    assert all(0 <= t <= 200 - 64 and 0 <= left <= 200 - 64 for t, left, _ in shrink._windows(200, 200))
    shrink(y, cond)
    assert calls[0] == (200, 200) and calls[1:] == [(64, 64)] * 32  # two passes of the 16 windows
    f = model(y, cond)
    oracle = float(((clean - y) * (f - y)).sum() / ((f - y) ** 2).sum())
    assert abs(float(shrink.last_weights[0, 0]) / SLACK - oracle) < 0.1
    assert shrink._windows(128, 300) is None


def test_a_good_denoiser_is_left_alone():
    """When the network removes about the noise (here: the clean image itself), w* ≥ 1/SLACK and the
    output is the network's, unchanged."""
    clean = _texture(128)
    noise = NoiseModel(4e-3, 1e-4)
    y = clean + noise.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(2))

    class Oracle(nn.Module):
        noise_aware = True
        head_name = "raw"

        def forward(self, x, noise):
            return clean.expand_as(x) if x.shape == clean.shape else x  # windows: identity (w = 1 too)

    model = SureShrink(Oracle())
    out = model(y, noise.conditioning(4)[None])
    assert float(model.last_weights[0, 0]) == 1.0
    torch.testing.assert_close(out, clean)


def test_clipped_or_banded_inputs_keep_the_network():
    """Samples at a clip level are not scored (too few left: the model's own output, weight NaN), and a
    sample told row noise keeps the model's output; unclipped dark samples (noise below 0 kept) are scored."""
    blur = SureShrink(_Blur(5))
    dark = torch.zeros(1, 4, 64, 64)
    noise = NoiseModel(1e-3, 1e-5).conditioning(4)[None]
    torch.testing.assert_close(blur(dark, noise), dark)
    assert torch.isnan(blur.last_weights[0, 0])
    g = torch.Generator().manual_seed(3)
    unclipped = 0.002 + 0.004 * torch.randn(1, 4, 64, 64, generator=g)  # dark, noise kept below black
    blur(unclipped, noise)
    assert not torch.isnan(blur.last_weights[0, 0])
    y = _texture(64) + 0.01 * torch.randn(1, 4, 64, 64, generator=g)
    banded = NoiseModel(1e-4, 1e-6, row=0.01).conditioning(4)[None]
    torch.testing.assert_close(blur(y, banded), blur.model(y, banded))
    assert torch.isnan(blur.last_weights[0, 0])
    blur(y, banded[:, :2])
    assert float(blur.last_weights[0, 0]) < 1.0


def test_batch_gets_one_weight_per_sample():
    a, b = _texture(64, 0), torch.full((1, 4, 64, 64), 0.4)
    noise = NoiseModel(1e-4, 1e-6)
    g = torch.Generator().manual_seed(4)
    y = torch.cat([a, b]) + noise.std(torch.cat([a, b])) * torch.randn(2, 4, 64, 64, generator=g)
    model = SureShrink(_Blur(5))
    model(y, noise.conditioning(4)[None].expand(2, -1, -1))
    w = model.last_weights
    assert w.shape == (2, 1) and w[0, 0] < 0.7 and w[1, 0] == 1.0  # texture: shrink; flat: the blur is right


def _half_textured(size: int, seed: int = 5) -> torch.Tensor:
    """(1, 4, size, size): the left half flat mid-grey, the right half fine texture (:func:`_texture`)."""
    clean = _texture(size, seed).clone()
    clean[..., : size // 2] = 0.4
    return clean


def test_texture_classes_are_equal_count_and_follow_the_texture():
    """:func:`texture_classes`: equal-count classes per sample (ties, e.g. an exactly flat area, would share
    one); the flat half falls in the lowest classes, the textured half in the highest."""
    y = _half_textured(128) + 1e-3 * torch.randn(1, 4, 128, 128, generator=torch.Generator().manual_seed(7))
    v = torch.full_like(y, 1e-6)
    cls = texture_classes(y, v, 4)
    assert cls.shape == (1, 1, 128, 128) and cls.dtype == torch.long
    counts = torch.bincount(cls.flatten(), minlength=4).float()
    assert float(counts.min()) > 0.2 * cls.numel() and float(counts.max()) < 0.3 * cls.numel()
    assert float(cls[..., 8:-8, 8:56].float().mean()) < 1.5 < float(cls[..., 8:-8, 72:-8].float().mean())


@pytest.mark.parametrize("size", [96, 256])  # probed whole / on windows
def test_texture_class_weights_beat_one_weight_per_tile(size):
    """A model asking for ``sure_classes`` gets one set of weights per texture class: on a tile half flat
    (where a blur is right), half fine texture (where it removes signal) the class-wise weights keep the
    blur on the flat half and shrink it on the texture — closer to the clean image than one weight for the
    whole tile; ``last_weights`` stays one (pixel-mean) set per sample."""
    clean = _half_textured(size)
    noise = NoiseModel(1e-4, 1e-6)
    y = clean + noise.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(6))
    cond = noise.conditioning(4)[None]
    tile = SureShrink(_Blur(5))
    classed_model = _Blur(5)
    classed_model.sure_classes = True
    classed = SureShrink(classed_model)
    assert tile.classes == 1 and classed.classes == CLASSES > 1
    out_tile, out_cls = tile(y, cond), classed(y, cond)
    assert classed.last_weights.shape == (1, 1)
    inner = (..., slice(4, -4), slice(4, -4))
    mse_tile = float(((out_tile - clean)[inner] ** 2).mean())
    mse_cls = float(((out_cls - clean)[inner] ** 2).mean())
    assert mse_cls < 0.9 * mse_tile, (mse_cls, mse_tile)
    flat, tex = (..., slice(8, -8), slice(8, size // 2 - 8)), (..., slice(8, -8), slice(size // 2 + 8, -8))
    f = classed_model(y, cond)
    # the weight each half got: its output's share of the blur's correction
    w_flat = float(((out_cls - y)[flat] * (f - y)[flat]).sum() / ((f - y)[flat] ** 2).sum())
    w_tex = float(((out_cls - y)[tex] * (f - y)[tex]).sum() / ((f - y)[tex] ** 2).sum())
    assert w_flat > 0.8 and w_tex < 0.6, (w_flat, w_tex)


def test_best_weights_is_the_constrained_minimum():
    """K = 2: the minimum of wᵀGw − 2wᵀr over w ≥ 0, w₁ + w₂ ≤ 1 (checked on a grid) for random positive
    definite G — interior, edge and corner cases; K = 1: r/G clamped to [0, 1]."""
    from rawrcl.models.sure import best_weights

    rng = np.random.default_rng(0)
    grid = np.array([(a, b) for a in np.linspace(0, 1, 201) for b in np.linspace(0, 1, 201) if a + b <= 1])
    for _ in range(20):
        a = rng.normal(size=(2, 2))
        g, r = a @ a.T + 0.1 * np.eye(2), rng.normal(size=2) * 2
        w = best_weights(torch.tensor(g)[None], torch.tensor(r)[None])[0].numpy()

        def f(v, g=g, r=r):
            return np.einsum("...i,ij,...j->...", v, g, v) - 2 * v @ r

        assert w.min() >= -1e-12 and w.sum() <= 1 + 1e-12
        assert f(w) <= f(grid).min() + 1e-9
    one = best_weights(torch.tensor([[[2.0]], [[2.0]]]), torch.tensor([[1.0], [5.0]]))
    torch.testing.assert_close(one, torch.tensor([[0.5], [1.0]]))
    # K = 3 (the start's two stages and a blind-spot network): the same against a grid of the simplex
    ax = np.linspace(0, 1, 41)
    grid3 = np.array([(a, b, c) for a in ax for b in ax for c in ax if a + b + c <= 1 + 1e-9])
    for _ in range(20):
        a = rng.normal(size=(3, 3))
        g, r = a @ a.T + 0.05 * np.eye(3), rng.normal(size=3) * 2
        w = best_weights(torch.tensor(g)[None], torch.tensor(r)[None])[0].numpy()
        f3 = np.einsum("...i,ij,...j->...", grid3, g, grid3) - 2 * grid3 @ r
        assert w.min() >= 0 and w.sum() <= 1 + 1e-12
        assert w @ g @ w - 2 * w @ r <= f3.min() + 1e-9
    # two identical estimates (a singular Gram matrix): still the minimum, their weights summed
    g, r = torch.tensor([[[2.0, 2, 0], [2, 2, 0], [0, 0, 1]]]), torch.tensor([[1.0, 1, 0.2]])
    w = best_weights(g, r)[0]
    assert abs(float(w[0] + w[1]) - 0.5) < 1e-6 and abs(float(w[2]) - 0.2) < 1e-6


def test_best_weights_up_to_six_estimates_batched():
    """K = 4…6, several rows at once: never above the minimum a general solver finds over the simplex (SLSQP
    from the centre and from each vertex), each row as if solved alone; singular Gram matrices (a repeated or
    an all-zero estimate) included; K = 7 refused."""
    from scipy.optimize import minimize

    from rawrcl.models.sure import best_weights

    rng = np.random.default_rng(1)
    for k in (4, 5, 6):
        rows = []
        for i in range(6):
            a = rng.normal(size=(k, 2 * k))
            if i == 1:
                a[-1] = a[0]
            if i == 2:
                a[1] = 0
            rows.append((a @ a.T, rng.normal(size=k) * 2))
        g = torch.tensor(np.stack([r[0] for r in rows]))
        r = torch.tensor(np.stack([r[1] for r in rows]))
        w = best_weights(g, r).numpy()
        for i, (gi, ri) in enumerate(rows):

            def f(v, gi=gi, ri=ri):
                return float(v @ gi @ v - 2 * v @ ri)

            cons = [{"type": "ineq", "fun": lambda v: 1 - v.sum()}]
            starts = [np.full(k, 1 / (k + 1)), *np.eye(k)]
            best = min(f(minimize(f, s0, bounds=[(0, 1)] * k, constraints=cons).x) for s0 in starts)
            assert w[i].min() >= 0 and w[i].sum() <= 1 + 1e-9
            assert f(w[i]) <= best + 1e-7, (k, i, f(w[i]), best)
            alone = best_weights(g[i : i + 1], r[i : i + 1])[0].numpy()
            np.testing.assert_allclose(w[i], alone, atol=1e-12)
    with pytest.raises(ValueError, match="1 to 6"):
        best_weights(torch.eye(7)[None].double(), torch.ones(1, 7).double())


def test_two_stage_raw_model_gets_both_stage_weights():
    """Around a two-stage RAW model the output is y + w₁(first stage − y) + w₂(JDD stage − y) + the same for
    their high bands: with an over-smoothing first stage and an untrained JDD stage, SURE leans on the input
    and the first stage, never on the untrained stage's whole correction, and beats the model's own fixed
    blend."""
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    torch.manual_seed(0)
    jdd = build_model(dict(arch="unet", head="jdd", in_channels=4, width=8, depth=2, noise_aware=True))
    model = DenoiseThenDemosaic(_Blur(5), jdd.eval(), output="raw")
    clean = _texture(96)
    noise = NoiseModel(1e-4, 1e-6)
    y = clean + noise.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(6))
    cond = noise.conditioning(4)[None]
    shrunk = with_shrink(model)
    assert isinstance(shrunk, SureShrink) and shrunk.multi_part
    with torch.no_grad():
        out, own = shrunk(y, cond), model(y, cond)
    w = shrunk.last_weights[0]  # first stage, JDD stage, their high bands (sure_low_band), the DCT estimate
    assert shrunk.names[-1] == "sliding DCT" and w.shape == (5,), w
    assert 0.05 < w[0] + w[2] + w[4] < 0.9 and w[1] < 0.1, w
    mse = lambda v: float(((v - clean) ** 2).mean())  # noqa: E731
    assert mse(out) < 0.9 * min(mse(own), mse(y))


class _Biased(_Blur):
    """A 'denoiser' that blurs 3×3 and adds a smooth bias: its correction is right in the high band and
    wrong in the low band. ``sure_low_band`` as the CFA-site blend asks for it."""

    def __init__(self, bands: bool):
        super().__init__(3)
        self.sure_low_band = bands

    def forward(self, x, noise):
        return super().forward(x, noise) + 0.01 * torch.linspace(0, 1, x.shape[-1], dtype=x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_high_band_estimate_drops_a_wrong_low_band(dtype):
    """With ``sure_low_band`` each estimate's high band (the input's low band kept) is weighed too: a
    correction whose low band is biased gets its high band chosen, and the output is closer to the truth
    than with the plain weights; the weight vector names both, and models without the flag keep one."""
    from rawrcl.models.sure import LOW_BAND, low_band

    assert LOW_BAND > 0
    clean = F.avg_pool2d(F.pad(_texture(202, seed=3), (1,) * 4, mode="replicate"), 3, stride=1)[
        ..., 1:-1, 1:-1
    ]
    clean = clean.to(dtype)  # smoother texture
    noise = NoiseModel(1e-4, 1e-6)
    y = clean + noise.std(clean) * torch.randn(
        clean.shape, generator=torch.Generator().manual_seed(2), dtype=dtype
    )
    cond = noise.conditioning(4)[None].to(dtype)
    mse = lambda v: float(((v - clean) ** 2).mean())  # noqa: E731
    plain, banded = SureShrink(_Biased(False)), SureShrink(_Biased(True))
    with torch.no_grad():
        out_plain, out_banded = plain(y, cond), banded(y, cond)
    assert plain.last_weights.shape == (1, 1) and banded.last_weights.shape == (1, 2)
    assert banded.names == ("network", "network (high band)")
    w = banded.last_weights[0]
    assert w[1] > 0.5 and w[0] < 0.3, w
    assert mse(out_banded) < 0.8 * mse(out_plain), (mse(out_banded), mse(out_plain))
    assert out_banded.dtype == dtype and out_banded.shape == y.shape
    # the low band itself: a constant passes unchanged, a checkerboard is removed; tiny inputs replicate
    const = torch.full((1, 4, 9, 9), 0.3, dtype=dtype)
    torch.testing.assert_close(low_band(const, 1.0), const)
    checker = (torch.arange(16)[:, None] + torch.arange(16)[None]) % 2
    assert float(low_band(checker.to(dtype).expand(1, 4, 16, 16), 1.0)[..., 4:-4, 4:-4].std()) < 0.01
    assert low_band(torch.rand(1, 4, 2, 3, dtype=dtype), 1.0).shape == (1, 4, 2, 3)


def test_with_shrink_wraps_where_it_applies():
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    cfg = dict(arch="unet", head="raw", in_channels=4, out_channels=4, width=8, depth=2)
    raw = build_model({**cfg, "noise_aware": True})
    blind = build_model(cfg)
    assert isinstance(with_shrink(raw), SureShrink)
    assert with_shrink(with_shrink(raw)).model is raw  # idempotent
    assert with_shrink(blind) is blind
    jdd = DenoiseThenDemosaic(raw)  # denoise → bilinear: the first stage is shrunk
    assert isinstance(with_shrink(jdd).denoiser, SureShrink)
    assert maybe_shrink(raw) is not raw and maybe_shrink(raw, False) is raw  # RAW: on by default
    assert maybe_shrink(jdd) is jdd and isinstance(maybe_shrink(jdd, True).denoiser, SureShrink)
    x = torch.rand(1, 4, 32, 32)
    noise = NoiseModel(1e-3, 1e-5).conditioning(4)[None]
    with torch.no_grad():
        assert with_shrink(jdd)(x, noise).shape == (1, 3, 64, 64)


def test_denoise_command_shrinks_by_default_and_not_with_no_shrink(tmp_path):
    """``rawrcl denoise`` (shipped default) on a low-noise DNG of fine texture: the default is ``--shrink``
    (SURE weights of input, first stage and JDD stage, logged), and closer to the truth than
    ``--no-shrink`` (the fixed CFA-site blend)."""
    from click.testing import CliRunner
    from rawrcl.cli import main

    from rawrcl.cfa import mosaic
    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import read_raw

    rng = np.random.default_rng(0)
    size = 192
    fine = _texture(size - 1, seed=5)[0, 0].numpy()  # pixel-scale texture, shared by the colours
    fine = np.pad(fine, ((0, 1), (0, 1)), mode="edge")
    scene = np.stack([(0.3 + 2 * (fine - 0.4)) * c for c in (0.8, 1.0, 0.9)])
    clean = np.asarray(mosaic(scene.astype(np.float32), "RGGB"))[0]
    noisy = clean + np.sqrt(2e-5 * clean + 1e-8) * rng.standard_normal(clean.shape)
    dn = np.clip(np.round(noisy * 16383), 0, 16383).astype(np.uint16)
    src = tmp_path / "low.dng"
    write_dng(src, dn, "RGGB", 0, 16383, noise_profile=[(2e-5, 1e-8)])
    outs, logs = {}, {}
    for flag in ("--shrink", "--no-shrink", ""):
        dst = tmp_path / f"o{flag}.dng"
        r = CliRunner().invoke(main, ["denoise", str(src), "-o", str(dst)] + [flag] * bool(flag))
        assert r.exit_code == 0, r.output
        outs[flag], logs[flag] = read_raw(dst).cfa.astype(np.float64), r.output
    np.testing.assert_array_equal(outs[""], outs["--shrink"])
    del outs[""]
    err = {k: float(np.mean((v - clean)[8:-8, 8:-8] ** 2)) for k, v in outs.items()}
    assert err["--shrink"] < err["--no-shrink"], err
    assert "SURE weights over 1 tile: first stage" in logs["--shrink"], logs["--shrink"]
    assert "SURE" not in logs["--no-shrink"]


class _DctBlur(_Blur):
    """A blur whose SURE weights may add the sliding-DCT estimate (``sure_dct``, as the CFA-site blend)."""

    sure_dct = True


@pytest.mark.parametrize("size", [96, 256])  # probed whole / on windows
def test_dct_estimate_is_weighed_where_it_helps(size):
    """Behind a 3×3 blur of a smooth, noisy mosaic the DCT Wiener estimate (the blur as pilot) is the better
    estimate: SURE gives it weight, and the output beats the weights without it; its column is last."""
    from rawrcl.models.sure import dct_gate

    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    clean = (0.3 + 0.1 * torch.sin(20 * xx) * torch.cos(14 * yy)).expand(1, 4, -1, -1).contiguous()
    noise = NoiseModel(1e-3, 1e-5)
    y = clean + noise.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(2))
    cond = noise.conditioning(4)[None]
    assert bool(dct_gate(clean, cond))
    with_dct, without = SureShrink(_DctBlur(3)), SureShrink(_Blur(3))
    with torch.no_grad():
        out, ref = with_dct(y, cond), without(y, cond)
    assert with_dct.names == ("network", "sliding DCT")
    assert float(with_dct.last_weights[0, 1]) > 0.2, with_dct.last_weights
    mse = lambda v: float(((v - clean) ** 2).mean())  # noqa: E731
    assert mse(out) < 0.9 * mse(ref)


def test_dct_gate_and_estimate_on_dark_noisy_tiles():
    """The gate opens on bright tiles and stays shut on dark, noisy ones (noise std at the median > 0.3 of
    it) and without shot noise; a shut tile's estimate is its input (weight 0, nothing changes); the estimate
    is float32 and the same under a bf16 autocast (the GAT values' rounding would exceed the noise)."""
    from rawrcl.models.sure import dct_estimate, dct_gate

    g = torch.Generator().manual_seed(3)
    bright, dark = torch.full((1, 4, 64, 64), 0.3), torch.full((1, 4, 64, 64), 0.004)
    x = torch.cat([bright, dark]) + 0.01 * torch.randn(2, 4, 64, 64, generator=g)
    cond = NoiseModel(1e-3, 1e-5).conditioning(4)[None].expand(2, -1, -1)
    gate = dct_gate(torch.cat([bright, dark]), cond)
    assert gate.tolist() == [True, False]
    assert not bool(dct_gate(bright, NoiseModel(0.0, 1e-5).conditioning(4)[None]))
    est = dct_estimate(x, torch.cat([bright, dark]), cond, gate)
    assert est.dtype == torch.float32 and torch.equal(est[1], x[1]) and not torch.equal(est[0], x[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        est_bf16 = dct_estimate(x.bfloat16(), torch.cat([bright, dark]).bfloat16(), cond, gate)
    assert est_bf16.dtype == torch.float32
    ref = dct_estimate(x.bfloat16().float(), torch.cat([bright, dark]), cond, gate)
    torch.testing.assert_close(est_bf16, ref)


def test_dct_weight_is_vetoed_where_a_smaller_noise_would_make_it_lose():
    """K = 2 (an estimate, then the DCT estimate). SURE's risk at 1/DCT_VETO² of the told variance decides:
    a DCT weight that adds correction (weights inside the simplex: at a smaller noise a larger correction
    over-shoots) is dropped for the weights without it; one that replaces part of an estimate already at
    full weight (Σw = 1) and wins at both variances is kept. A model without ``sure_dct``: no veto."""
    from rawrcl.models.sure import DCT_VETO, _risk, _solve

    shrink = SureShrink(_DctBlur(3))
    gram = torch.tensor([[[1.0, 0.9], [0.9, 1.0]]], dtype=torch.float64)
    rhs = torch.tensor([[0.4, 0.5]], dtype=torch.float64)
    w = shrink._solve_vetoed(gram, rhs)
    free = _solve(gram, rhs)  # the weights without the veto: (0, 0.6), inside the simplex
    alone = torch.tensor([[0.4 * SLACK, 0.0]], dtype=torch.float64)
    low = rhs / DCT_VETO**2
    assert float(free[0, 1]) > 0.3 and float(_risk(free, gram, low)) > float(_risk(alone, gram, low))
    torch.testing.assert_close(w, alone)
    gram_b = 0.01 * gram
    rhs_b = torch.tensor([[0.02, 0.025]], dtype=torch.float64)
    kept = shrink._solve_vetoed(gram_b, rhs_b)
    assert abs(float(kept.sum()) - 1) < 1e-9 and float(kept[0, 1]) > 0.5, kept
    torch.testing.assert_close(SureShrink(_Blur(3))._solve_vetoed(gram, rhs), free)
