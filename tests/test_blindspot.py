"""The blind-spot network and its likelihood objective (Laine et al. 2019; models/methods blindspot.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rawrcl.methods import make_method
from rawrcl.methods.blindspot import BlindSpotNLL, censored_nll
from rawrcl.models.blindspot import BlindSpotDenoiser, BlindSpotNet, clipped_posterior
from rawrcl.models.sure import CLIP_TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_each_output_is_blind_to_its_own_packed_pixel_only(dtype):
    torch.manual_seed(0)
    net = BlindSpotNet(width=6).to(dtype)
    torch.nn.init.normal_(net.head[-1].weight, std=0.1)  # trained-like: the U-Net part counts (zero at init)
    y = torch.rand(1, 4, 16, 20, dtype=dtype, requires_grad=True)
    mu, s2 = net(y)
    assert mu.shape == s2.shape == y.shape and bool((s2 > 0).all())
    for i, j in [(0, 0), (7, 9), (15, 19), (8, 0)]:
        g_mu = torch.autograd.grad(mu[0, :, i, j].sum() + s2[0, :, i, j].sum(), y, retain_graph=True)[0]
        assert float(g_mu[0, :, i, j].abs().max()) == 0.0  # all four CFA samples of the pixel hidden
        # every direction is seen, also at distance 3, beyond the ring mean (the U-Net's own reach)
        for di, dj in [(-1, 0), (1, 0), (0, -1), (0, 1), (-3, 0), (3, 0), (0, -3), (0, 3)]:
            a, b = i + di, j + dj
            if 0 <= a < 16 and 0 <= b < 20:
                assert float(g_mu[0, :, a, b].abs().sum()) > 0, (i, j, di, dj)
    with pytest.raises(ValueError, match="multiples of 4"):
        net(torch.rand(1, 4, 10, 12, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cross_outputs_read_the_other_samples_of_their_cell_but_never_their_own(dtype):
    torch.manual_seed(3)
    net = BlindSpotNet(width=6, cross=True).to(dtype)
    torch.nn.init.normal_(net.head_out.weight, std=0.1)
    torch.nn.init.normal_(net.centre, std=0.1)  # trained-like
    y = torch.rand(1, 4, 16, 20, dtype=dtype, requires_grad=True)
    mu, s2 = net(y)
    assert mu.shape == s2.shape == y.shape
    for i, j in [(0, 0), (7, 9), (15, 19)]:
        for c in range(4):
            g = torch.autograd.grad(mu[0, c, i, j] + s2[0, c, i, j], y, retain_graph=True)[0]
            assert float(g[0, c, i, j].abs()) == 0.0  # blind to its own sample
            others = [k for k in range(4) if k != c]
            assert all(float(g[0, k, i, j].abs()) > 0 for k in others), (i, j, c)  # reads the cell's others
    # without cross the whole cell is hidden (test above); an old checkpoint's config builds the old net
    from rawrcl.models.registry import build_model

    m = build_model({"arch": "blindspot", "channels": 4, "width": 6})
    assert not m.net.cross and m.config["cross"] is False
    assert build_model(BlindSpotDenoiser(width=6, cross=True).config).net.cross


@pytest.mark.parametrize("levels", [1, 3, 4])
def test_deeper_branches_stay_blind_and_reach_further(levels):
    torch.manual_seed(2)
    net = BlindSpotNet(width=4, cross=True, levels=levels).double()
    torch.nn.init.normal_(net.head_out.weight, std=0.1)
    torch.nn.init.normal_(net.centre, std=0.1)
    m = 2**levels
    assert net.size_multiple == m
    y = torch.rand(1, 4, 128, 128, dtype=torch.float64, requires_grad=True)
    mu, s2 = net(y)
    i, j = 64, 64
    for c in range(4):
        g = torch.autograd.grad(mu[0, c, i, j] + s2[0, c, i, j], y, retain_graph=True)[0]
        assert float(g[0, c, i, j].abs()) == 0.0
    g = torch.autograd.grad(mu[0, :, i, j].sum(), y)[0][0].abs().sum(0)
    reach = int((g.sum(0) > 0).nonzero().flatten().sub(j).abs().max())  # farthest column read
    # each pooling level about doubles the reach: 19 packed px at 1, 47 at 2 (the default), 99 at 3
    assert reach >= {1: 16, 3: 64, 4: 64}[levels]
    with pytest.raises(ValueError, match=f"multiples of {m}"):
        net(torch.rand(1, 4, m + 1, m, dtype=torch.float64))
    from rawrcl.models.registry import build_model

    d = BlindSpotDenoiser(width=4, cross=True, levels=levels)
    assert d.size_multiple == m and build_model(d.config).net.levels == levels
    assert build_model({"arch": "blindspot", "channels": 4, "width": 4}).net.levels == 2  # before `levels`


def test_posterior_mean_lies_between_the_pixel_and_the_prior():
    torch.manual_seed(1)
    m = BlindSpotDenoiser(width=6).eval()
    y = torch.rand(2, 4, 16, 16)
    noise = torch.tensor([[[1e-2] * 4, [1e-4] * 4]] * 2)
    with torch.no_grad():
        out = m(y, noise)
        mu, _ = m.prior(y)
        m.posterior = False
        assert torch.equal(m(y, noise), mu)
    lo, hi = torch.minimum(y, mu), torch.maximum(y, mu)
    assert bool(((out >= lo - 1e-6) & (out <= hi + 1e-6)).all())
    assert make_method("blindspot").name == "blindspot"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clipped_posterior_is_the_mean_of_the_clean_value_given_the_clip(dtype):
    # x ~ N(mu, s2), y = clip(x + n, 0, 1): where y = 0 the mean of x over the clipped draws, not the Gaussian
    # update of the value 0; elsewhere the Gaussian update untouched; at 1 the mirror case
    g = torch.Generator().manual_seed(0)
    n = 200_000
    mu = torch.full((1, 1, 2, n), 0.002, dtype=dtype)
    mu[:, :, 1] = 0.997
    s2, v = torch.full_like(mu, 1e-5), torch.full_like(mu, 4e-5)
    x = mu + s2.sqrt() * torch.randn(mu.shape, generator=g, dtype=dtype)
    unclipped = x + v.sqrt() * torch.randn(mu.shape, generator=g, dtype=dtype)
    y = unclipped.clamp(0, 1)
    post = (s2 * y + v * mu) / (s2 + v)
    out = clipped_posterior(y, mu, s2, v, post)
    assert out.dtype == dtype
    low, high = y <= CLIP_TOL, y >= 1 - CLIP_TOL
    assert 0.3 < float(low[..., 0, :].float().mean()) < 0.5
    assert 0.25 < float(high[..., 1, :].float().mean()) < 0.45
    # standard error of the empirical means ≈ 1e-5: the Gaussian update is 1e-3 off
    assert abs(float(out[low].mean() - x[low].mean())) < 5e-5
    assert abs(float(out[high].mean() - x[high].mean())) < 5e-5
    assert float(post[low].mean() - x[low].mean()) > 5e-4
    assert torch.equal(out[~(low | high)], post[~(low | high)])
    assert float(((out - x) ** 2).mean()) < float(((post - x) ** 2).mean())
    # an unclipped input (noise beyond black and white kept) is returned as it is
    assert torch.equal(clipped_posterior(unclipped, mu, s2, v, post), post)


def test_likelihood_training_on_noisy_crops_only_learns_the_prior():
    """60 steps on noisy crops only (no clean data) of a column-striped scene, where the untrained estimate
    (the ring mean of the 8 neighbours) is far off: the posterior mean's error falls twentyfold. Black-clipped
    samples are left out of the likelihood."""
    torch.manual_seed(2)
    cols = torch.cos(torch.pi * torch.arange(32.0))[None, :].expand(32, 32)

    def scene(n):
        return torch.rand(n, 4, 1, 1) * 0.4 + 0.3 + (torch.rand(n, 4, 1, 1) * 0.1 + 0.05) * cols

    lam = (1e-3, 1e-4)
    noise = torch.tensor([[[lam[0]] * 4, [lam[1]] * 4]] * 8)
    test = scene(8)
    test_y = test + torch.randn_like(test) * (lam[0] * test + lam[1]).sqrt()
    model = BlindSpotDenoiser(width=12)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    method = BlindSpotNLL()
    with torch.no_grad():
        before = float(((model(test_y, noise) - test) ** 2).mean())
    for _ in range(60):
        x = scene(8)
        y = x + torch.randn_like(x) * (lam[0] * x + lam[1]).sqrt()
        r = method({"x_a": y, "noise": noise, "floor": torch.full((8,), -1.0)}, model)
        opt.zero_grad()
        r["loss"].backward()
        opt.step()
    with torch.no_grad():
        mse = float(((model(test_y, noise) - test) ** 2).mean())
    assert mse < 0.1 * before, (mse, before)
    # a file clipped at 0: samples near the floor are not scored
    r = method({"x_a": torch.zeros(2, 4, 16, 16), "noise": noise[:2], "floor": torch.zeros(2)}, model)
    assert r["scored"] == 0.0 and float(r["loss"].detach()) == 0.0


def test_the_censored_likelihood_finds_the_clean_level_of_a_black_clipped_flat_patch():
    """A flat patch 0.5 noise std above a black clip (31 % of the samples at 0): the censored likelihood is
    maximised at the clean level and the noise std, while the Gaussian likelihood of the stored values is
    maximised at their (biased-up) mean and too small a spread; unclipped samples keep the Gaussian term."""
    torch.manual_seed(0)
    x, sd = 0.01, 0.02
    y = (x + sd * torch.randn(1, 1, 200, 200)).clamp_min(0.0)
    floor = torch.zeros(1)

    def best(censored: bool) -> tuple[float, float]:
        """Maximum-likelihood (level, std) of the stored values ``y``."""
        p = torch.tensor([0.02, -4.0], requires_grad=True)  # level, log std
        opt = torch.optim.LBFGS([p], max_iter=200, line_search_fn="strong_wolfe")

        def nll() -> torch.Tensor:
            opt.zero_grad()
            mu, tot = p[0].expand_as(y), torch.exp(2 * p[1]).expand_as(y)
            g = 0.5 * ((y - mu) ** 2 / tot + torch.log(tot))
            loss = (censored_nll(y, mu, tot, floor, g)[0] if censored else g).mean()
            loss.backward()
            return loss

        opt.step(nll)
        return float(p[0].detach()), float(p[1].detach().exp())

    mu_c, sd_c = best(True)
    mu_g, sd_g = best(False)
    assert abs(mu_c - x) < 0.001 and abs(sd_c - sd) < 0.001, (mu_c, sd_c)
    assert mu_g > x + 0.003 and sd_g < sd - 0.004, (mu_g, sd_g)
    # unclipped samples: the Gaussian term unchanged; clipped ones: −log Φ((floor − μ)/σ)
    mu, tot = torch.full_like(y, x), torch.full_like(y, sd**2)
    g = 0.5 * ((y - mu) ** 2 / tot + torch.log(tot))
    nll, share = censored_nll(y, mu, tot, floor, g)
    at0 = y == 0
    assert torch.equal(nll[~at0], g[~at0])
    assert abs(share - float(at0.float().mean())) < 1e-6 and 0.25 < share < 0.37
    expect = -torch.special.log_ndtr(torch.tensor(-x / sd))
    assert torch.allclose(nll[at0], expect.expand(int(at0.sum())))


def test_the_censored_objective_scores_every_sample_and_trains():
    """``censored=True``: every sample of a black-clipped crop is scored (the plain objective leaves the
    ones near the floor out), the censored share is reported and the loss has a gradient."""
    torch.manual_seed(1)
    y = (0.01 + 0.01 * torch.randn(2, 4, 16, 16)).clamp_min(0.0)
    batch = {"x_a": y, "noise": torch.tensor([[[1e-3] * 4, [1e-4] * 4]] * 2), "floor": torch.zeros(2)}
    model = BlindSpotDenoiser(width=8, cross=True)
    plain, cens = BlindSpotNLL()(batch, model), BlindSpotNLL(censored=True)(batch, model)
    assert plain["scored"] < 0.2 and cens["scored"] == 1.0 and cens["censored"] > 0.1
    cens["loss"].backward()
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in model.parameters())


def test_with_blindspot_is_a_checkpoint_and_sure_weights_lean_on_the_right_estimate(tmp_path):
    """arch with_blindspot round-trips through a checkpoint; called directly it is its base; with SURE
    weights it exposes two estimates — the base with its own SURE weights, the blind-spot network — and leans
    on the one that is right: a blurring base beside a blind-spot network whose prior is the clean signal
    gets (nearly) all the network's weight."""
    from rawrcl.errors import RawrclError
    from rawrcl.models.blindspot import WithBlindSpot
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.registry import build_model, load_checkpoint, save_checkpoint
    from rawrcl.models.shrink import shrink_summary
    from rawrcl.models.sure import SureShrink
    from rawrcl.noise import NoiseModel

    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "width": 4, "depth": 2, "skip": True, "noise_aware": True}
    base = DenoiseThenDemosaic(
        build_model({**cfg, "head": "raw"}), build_model({**cfg, "head": "jdd"}), output="raw"
    )
    model = WithBlindSpot(base, BlindSpotDenoiser(width=4))
    save_checkpoint(tmp_path / "w.pt", model)
    back, conf = load_checkpoint(tmp_path / "w.pt")
    assert isinstance(back, WithBlindSpot) and conf["blindspot"]["width"] == 4
    x = torch.rand(1, 4, 32, 32) * 0.5
    noise = NoiseModel(1e-3, 1e-5).conditioning(4)[None]
    base.eval()  # as loaded: at this low noise its first stage averages two orientations in eval mode
    with torch.no_grad():
        torch.testing.assert_close(back(x, noise), base(x, noise))
        start, net = back.parts(x, noise)
        torch.testing.assert_close(start, SureShrink(base)(x, noise))  # the base as rawrcl denoise runs it
        torch.testing.assert_close(net, back.blindspot(x, noise))
    assert not any(k.startswith("_start") for k in back.state_dict())  # one copy of the base's weights
    with pytest.raises(RawrclError, match="width"):
        build_model({"arch": "blindspot", "width": 0})
    with pytest.raises(RawrclError, match="base"):
        build_model({"arch": "with_blindspot", "base": {**cfg, "head": "jdd"}, "blindspot": {}})

    class Blur(torch.nn.Module):  # a base that removes some noise and blurs the scene
        noise_aware, head_name, config = True, "raw", {}

        def forward(self, y, noise):
            return torch.nn.functional.avg_pool2d(y, 3, 1, 1, count_include_pad=False)

    yy, xx = torch.meshgrid(torch.linspace(0, 1, 64), torch.linspace(0, 1, 64), indexing="ij")
    clean = (0.2 + 0.1 * torch.sin(6 * xx) * torch.cos(4 * yy)).expand(1, 4, 64, 64).contiguous()
    nm = NoiseModel(2e-3, 2e-5)
    y = clean + nm.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(1))
    oracle = BlindSpotDenoiser(width=4)

    def prior(t):
        return clean.expand_as(t), torch.full_like(
            t, 1e-9
        )  # knows the clean signal, never looks at the pixel

    oracle.prior = prior
    oracle.forward = lambda t, n: prior(t)[0]
    shrunk = SureShrink(WithBlindSpot(Blur(), oracle))
    with torch.no_grad():
        out = shrunk(y, nm.conditioning(4)[None])
    w = shrunk.last_weights[0]
    assert w.shape == (2,) and w[1] > 0.9 and w[0] < 0.1, w
    assert float(((out - clean) ** 2).mean()) < 0.05 * float(((y - clean) ** 2).mean())
    assert "blind-spot network" in shrink_summary(shrunk)


def test_a_start_that_gives_back_its_input_leaves_the_network_its_weight():
    """Where the start's own SURE weights choose the input alone, the composite's first estimate equals the
    input: SureShrink gives it weight 0 and weighs the network without it (it used to output the start, i.e.
    the noisy input, on such tiles; a stop-74 machine met it in tests/test_adapt.py's small run)."""
    from rawrcl.models.blindspot import BlindSpotDenoiser, WithBlindSpot
    from rawrcl.models.sure import SureShrink
    from rawrcl.noise import NoiseModel

    class Identity(torch.nn.Module):  # a start that returns its input
        noise_aware, head_name, config = True, "raw", {}

        def forward(self, x, noise):
            return x.clone()

    yy, xx = torch.meshgrid(torch.linspace(0, 1, 64), torch.linspace(0, 1, 64), indexing="ij")
    clean = (0.2 + 0.1 * torch.sin(6 * xx) * torch.cos(4 * yy)).expand(1, 4, 64, 64).contiguous()
    nm = NoiseModel(2e-3, 2e-5)
    y = clean + nm.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(3))
    oracle = BlindSpotDenoiser(width=4)
    oracle.forward = lambda t, n: clean.expand_as(t)
    shrunk = SureShrink(WithBlindSpot(Identity(), oracle))
    with torch.no_grad():
        out = shrunk(y, nm.conditioning(4)[None])
    w = shrunk.last_weights[0]
    assert w[0] == 0 and w[1] > 0.9, w
    assert float(((out - clean) ** 2).mean()) < 0.05 * float(((y - clean) ** 2).mean())
    alone = SureShrink(Identity())  # one estimate equal to the input: the model's own output, as before
    with torch.no_grad():
        torch.testing.assert_close(alone(y, nm.conditioning(4)[None]), y)
    assert bool(alone.last_weights.isnan().all())


def test_near_a_clip_level_the_composite_keeps_the_start():
    """SURE cannot score samples near a clip level, so a blind-spot composite's weights are unchecked there:
    SureShrink gives the start in the black-clipped shadows (within 1.5 std of black) and the weighed output
    far from any clip; without clipping nothing changes (stop 69: the network had lifted the shadows of
    hdrplus_burst2 by up to 4 dB beside the shipped model)."""
    from rawrcl.models.blindspot import WithBlindSpot
    from rawrcl.models.sure import SureShrink, near_clips_to
    from rawrcl.noise import NoiseModel

    nm = NoiseModel(2e-3, 2e-5)
    noise = nm.conditioning(4)[None]
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 64), torch.linspace(0, 1, 64), indexing="ij")
    clean = (0.3 * xx**2).expand(1, 4, 64, 64).contiguous()  # from black to 0.3
    y = clean + nm.std(clean) * torch.randn(clean.shape, generator=torch.Generator().manual_seed(2))
    first, out = clean.clone(), clean + 0.01
    got = near_clips_to(first, out, y.clamp_min(0), noise)  # black-clipped input
    sd = nm.std(clean)
    torch.testing.assert_close(got[clean < 1.4 * sd], first[clean < 1.4 * sd])
    torch.testing.assert_close(got[clean > 3.6 * sd], out[clean > 3.6 * sd])
    torch.testing.assert_close(near_clips_to(first, out, y, noise), out)  # unclipped: noise below black

    class Shift(torch.nn.Module):  # a base and a "network" that disagree by a constant
        noise_aware, head_name, config = True, "raw", {}

        def __init__(self, d):
            super().__init__()
            self.d = d

        def forward(self, t, n):
            return clean.expand_as(t) + self.d

    net = BlindSpotDenoiser(width=4)
    net.forward = lambda t, n: clean.expand_as(t) + 0.004
    shrunk = SureShrink(WithBlindSpot(Shift(0.0), net))
    assert shrunk.first_near_clips and not SureShrink(Shift(0.0)).first_near_clips
    with torch.no_grad():
        res = shrunk(y.clamp_min(0), noise)
        start = shrunk.model.parts(y.clamp_min(0), noise)[0]
    dark = clean < 1.4 * sd
    torch.testing.assert_close(res[dark], start[dark])
    # a network trained with the censored likelihood goes without the guard (stop 72): beside a start 0.01
    # off, an exact network's weighed output reaches the shadows
    net.forward = lambda t, n: clean.expand_as(t)
    errs = []
    for censored in (False, True):
        net.censored = censored
        shrunk = SureShrink(WithBlindSpot(Shift(0.01), net))
        assert shrunk.first_near_clips is not censored
        with torch.no_grad():
            errs.append(float((shrunk(y.clamp_min(0), noise) - clean)[dark].abs().mean()))
    assert errs[0] > 0.005 and errs[1] < 0.2 * errs[0], errs


def test_the_censored_flag_is_kept_in_a_checkpoint_and_absent_means_false():
    from rawrcl.errors import RawrclError
    from rawrcl.models.registry import build_model

    net = BlindSpotDenoiser(width=4, censored=True)
    assert net.config["censored"] is True and build_model(net.config).censored
    old = {k: v for k, v in net.config.items() if k != "censored"}  # written before stop 72
    assert build_model(old).censored is False
    with pytest.raises(RawrclError, match="censored must be true or false"):
        build_model({**net.config, "censored": 1})


def test_the_adapt_benchmark_blindspot_row_runs_end_to_end(tmp_path):
    """benchmarks/adapt.py's blind-spot row (train, then score every kept checkpoint alone, as a prior and
    beside the start with SURE weights) on tiny files: it crashed in its log line once (a list rounded)."""
    import argparse

    from rawrcl.data.noisy_crops import pack_file
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.registry import build_model, save_checkpoint
    from rawrcl.noise import NoiseModel
    from tests.conftest import load_benchmark

    bench = load_benchmark("adapt")
    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "width": 4, "depth": 2, "skip": True, "noise_aware": True}
    start = DenoiseThenDemosaic(
        build_model({**cfg, "head": "raw"}), build_model({**cfg, "head": "jdd"}), output="raw"
    )
    save_checkpoint(tmp_path / "start.pt", start)
    nm = NoiseModel(1e-3, 1e-5).conditioning(4)
    rng = np.random.default_rng(0)
    files = [
        pack_file(f"f{i}", (0.3 + 0.05 * rng.standard_normal((96, 96))).astype(np.float32), "RGGB", nm)
        for i in range(3)
    ]
    y = torch.from_numpy(files[0].packed)[None]

    def score(model):
        with torch.no_grad():
            out = model(y, nm[None])
        return {"psnr": float(-10 * torch.log10(((out - y) ** 2).mean() + 1e-12))}

    args = argparse.Namespace(
        start=str(tmp_path / "start.pt"),
        out=str(tmp_path),
        extra={"width": 4, "crop": 32, "batch_size": 2},
        bsp_frames="others",
        bsp_steps=2,
    )
    logs: list[str] = []
    res = bench.burst_blindspot(args, files, score, logs.append)
    steps = [r["step"] for r in res["rows"]]
    assert steps == [0, 1, 2], steps
    assert all(len(r["weights_beside"]) == 2 for r in res["rows"][1:])  # start, network
    assert sum("blindspot step" in m for m in logs) == 2
    # adapt's label-free choice: held-out SURE of the start and of each checkpoint beside it, gain ± SE
    assert res["held_out_crops"] > 3 and all(np.isfinite(r["held_sure_psnr"]) for r in res["rows"])
    assert all(r["held_gain_se_db"] >= 0 for r in res["rows"][1:]) and res["selected_step"] in steps
    best = max(res["rows"], key=lambda r: r["held_sure_psnr"])
    assert res["selected_step"] == best["step"] and res["options"]["augment"] == "flips"
