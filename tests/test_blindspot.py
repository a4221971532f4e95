"""The blind-spot network and its likelihood objective (Laine et al. 2019; models/methods blindspot.py)."""

from __future__ import annotations

import pytest
import torch

from rawrcl.methods import make_method
from rawrcl.methods.blindspot import BlindSpotNLL
from rawrcl.models.blindspot import BlindSpotDenoiser, BlindSpotNet


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
