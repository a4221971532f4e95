"""rawrcl.losses: distances vs independent references, contrastive loss vs Algorithm 1, consistency."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from rawrcl.cfa import mosaic_packed, pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.losses import (
    DISTANCES,
    MosaicConsistency,
    PerceptualConsistency,
    ResidualContrastiveLoss,
    bhattacharyya,
    emd,
    estimate_noise_std,
    keys_shift,
    keys_upsample2,
    mmd,
    pairwise,
    raw_residual,
    residual,
    residual_from_noise_prediction,
    resnet50_imagenet,
)
from rawrcl.noise import NoiseModel

# ----------------------------------------------------------------------------------------------------
# fixtures


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def realistic():
    """(6, 3, 32, 32) residuals in 8-bit units: true signal-dependent noise + a little leaked content."""
    import skimage.data

    im = torch.from_numpy(skimage.data.astronaut()[:, :, :3].astype(np.float32) / 255.0).permute(2, 0, 1)
    g = _gen(1)
    out = []
    for i in range(6):
        y = im[:, 40 * i : 40 * i + 32, 100 + 30 * i : 132 + 30 * i][None] ** 2.2
        nm = NoiseModel(lambda_shot=(2 + 3 * i) ** 2 * 1e-5, lambda_read=(1 + i) ** 2 * 1e-6)
        noise = nm.sample(y, generator=g) - y
        content = y - y.mean()
        out.append((noise + 0.05 * content) * 255)
    return torch.cat(out).double()


def _np_v_stat(a, b, bws):
    def km(x, y):
        d2 = (x[:, None] - y[None, :]) ** 2
        return np.mean(sum(np.exp(-d2 / (2 * s * s)) for s in bws) / len(bws))

    return km(a, a) + km(b, b) - 2 * km(a, b)


def _np_u_stat(a, b, bws):
    def k(x, y):
        d2 = (x[:, None] - y[None, :]) ** 2
        return sum(np.exp(-d2 / (2 * s * s)) for s in bws) / len(bws)

    n, m = len(a), len(b)
    kaa, kbb = k(a, a), k(b, b)
    return (
        (kaa.sum() - np.trace(kaa)) / (n * (n - 1))
        + (kbb.sum() - np.trace(kbb)) / (m * (m - 1))
        - 2 * k(a, b).mean()
    )


def _np_bd(a, b):
    mp, mq = a.mean(), b.mean()
    vp, vq = a.var(ddof=1), b.var(ddof=1)
    return 0.25 * math.log(0.25 * (vp / vq + vq / vp + 2)) + 0.25 * (mp - mq) ** 2 / (vp + vq)


# ----------------------------------------------------------------------------------------------------
# residuals


def test_residuals():
    g = _gen()
    x, fx = torch.rand(2, 3, 8, 8, generator=g), torch.rand(2, 3, 8, 8, generator=g)
    assert torch.equal(residual(x, fx), x - fx)
    assert residual_from_noise_prediction(fx) is fx
    with pytest.raises(RawrclError):
        residual(x, fx[:, :2])
    xp = torch.rand(2, 4, 5, 6, generator=g)
    rgb = torch.rand(2, 3, 10, 12, generator=g)
    expected = xp - pack(unpack(mosaic_packed(rgb, "RGGB"), "RGGB"), "RGGB")
    assert torch.allclose(raw_residual(xp, rgb), expected)
    # Pixel (0, 0) of the R plane is the red value of the RGB pixel at (0, 0); B plane at (1, 1).
    assert torch.allclose(raw_residual(xp, rgb)[:, 0, 0, 0], xp[:, 0, 0, 0] - rgb[:, 0, 0, 0])
    assert torch.allclose(raw_residual(xp, rgb)[:, 3, 0, 0], xp[:, 3, 0, 0] - rgb[:, 2, 1, 1])
    with pytest.raises(RawrclError):
        raw_residual(xp, rgb[..., :-2])


# ----------------------------------------------------------------------------------------------------
# EMD


def test_emd_matches_scipy_random_equal_and_unequal_sizes():
    g = _gen(2)
    a = torch.randn(4, 2, 7, 5, generator=g, dtype=torch.float64)
    b = torch.randn(4, 2, 7, 5, generator=g, dtype=torch.float64) * 1.7 + 0.3
    c = torch.randn(4, 3, 4, 3, generator=g, dtype=torch.float64).exp()  # 36 vs 70 values, skewed
    for x, y in ((a, b), (a, c), (c, a)):
        ref = [scipy.stats.wasserstein_distance(x[i].ravel(), y[i].ravel()) for i in range(4)]
        np.testing.assert_allclose(emd(x, y).numpy(), ref, rtol=1e-10, atol=1e-12)
    ref_pc = [np.mean([scipy.stats.wasserstein_distance(a[i, k].ravel(), b[i, k].ravel()) for k in range(2)])
              for i in range(4)]  # fmt: skip
    np.testing.assert_allclose(emd(a, b, per_channel=True).numpy(), ref_pc, rtol=1e-10)


def test_emd_matches_scipy_realistic(realistic):
    a, b = realistic[:3], realistic[3:]
    ref = [scipy.stats.wasserstein_distance(a[i].ravel(), b[i].ravel()) for i in range(3)]
    np.testing.assert_allclose(emd(a, b).numpy(), ref, rtol=1e-10)
    # Crops of different sizes (quantile matching).
    ref2 = [scipy.stats.wasserstein_distance(a[i].ravel(), b[i, :, :20, :25].ravel()) for i in range(3)]
    np.testing.assert_allclose(emd(a, b[:, :, :20, :25]).numpy(), ref2, rtol=1e-10)
    # Quantile-subsampled fast variant: documented error (≈ 1e-3 relative at q = 1024 here).
    rel = (emd(a, b, quantiles=1024) - emd(a, b)).abs() / emd(a, b)
    assert float(rel.max()) < 1e-2


# ----------------------------------------------------------------------------------------------------
# Bhattacharyya and MMD


def test_bhattacharyya_closed_form(realistic):
    a, b = realistic[:3], realistic[3:]
    ref = [_np_bd(a[i].numpy().ravel(), b[i].numpy().ravel()) for i in range(3)]
    np.testing.assert_allclose(bhattacharyya(a, b, eps=0.0).numpy(), ref, rtol=1e-10)
    g = _gen(3)
    x = torch.randn(3, 50, generator=g, dtype=torch.float64)
    y = torch.randn(3, 40, generator=g, dtype=torch.float64) * 3 + 1
    ref = [_np_bd(x[i].numpy(), y[i].numpy()) for i in range(3)]
    np.testing.assert_allclose(bhattacharyya(x, y, eps=0.0).numpy(), ref, rtol=1e-10)
    # Zero variance: finite thanks to eps, with finite gradients.
    z = torch.zeros(2, 10, dtype=torch.float64, requires_grad=True)
    d = bhattacharyya(z, torch.ones(2, 10, dtype=torch.float64))
    d.sum().backward()
    assert torch.isfinite(d).all() and torch.isfinite(z.grad).all()


def test_mmd_against_direct_quadratic_estimates():
    g = _gen(4)
    a = torch.randn(3, 300, generator=g, dtype=torch.float64) * 4
    b = torch.randn(3, 250, generator=g, dtype=torch.float64) * 6 + 1.5
    bws = (1.0, 2.0, 4.0, 8.0, 16.0)
    v = [_np_v_stat(a[i].numpy(), b[i].numpy(), bws) for i in range(3)]
    u = [_np_u_stat(a[i].numpy(), b[i].numpy(), bws) for i in range(3)]
    np.testing.assert_allclose(mmd(a, b).numpy(), v, rtol=2e-3)  # binned (default)
    np.testing.assert_allclose(mmd(a, b, estimator="subsample", samples=10_000).numpy(), v, rtol=1e-10)
    np.testing.assert_allclose(
        mmd(a, b, estimator="subsample", samples=10_000, unbiased=True).numpy(), u, rtol=1e-10
    )
    # A random subsample of 200 of the 300/250 values stays close to the full estimate.
    sub = mmd(a, b, estimator="subsample", samples=200, generator=_gen(5))
    np.testing.assert_allclose(sub.numpy(), v, rtol=0.2)


def test_mmd_realistic(realistic):
    a, b = realistic[:3, :, :12, :12], realistic[3:, :, :12, :12]
    bws = (1.0, 2.0, 4.0, 8.0, 16.0)
    v = [_np_v_stat(a[i].numpy().ravel(), b[i].numpy().ravel(), bws) for i in range(3)]
    np.testing.assert_allclose(mmd(a, b).numpy(), v, rtol=2e-3)


# ----------------------------------------------------------------------------------------------------
# common properties and pairwise


@pytest.mark.parametrize("name", ["emd", "bhattacharyya", "mmd"])
def test_distance_properties(name, realistic):
    d = DISTANCES[name]
    a = realistic[:3].clone().requires_grad_(True)
    b = realistic[3:].clone().requires_grad_(True)
    dab = d(a, b)
    assert dab.shape == (3,)
    assert (dab > 0).all()
    assert torch.allclose(dab, d(b, a), rtol=1e-9, atol=1e-12)  # symmetric
    assert torch.allclose(d(a, a), torch.zeros(3, dtype=a.dtype), atol=1e-12)  # d(a, a) = 0
    dab.sum().backward()
    for t in (a, b):
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["emd", "bhattacharyya", "mmd"])
def test_pairwise_equals_rowwise(name, realistic):
    x, y = realistic[:4], realistic[2:5, :, :28, :30]
    m = pairwise(x, y, name)
    m_chunked = pairwise(x, y, name, chunk=1)
    loop = torch.stack([torch.stack([DISTANCES[name](x[i : i + 1], y[k : k + 1])[0] for k in range(3)])
                        for i in range(4)])  # fmt: skip
    # The MMD grid spans all values of the call, so row-wise and pairwise differ by binning error only.
    rtol = 1e-3 if name == "mmd" else 1e-9
    assert m.shape == (4, 3)
    torch.testing.assert_close(m, loop, rtol=rtol, atol=1e-12)
    torch.testing.assert_close(m_chunked, m, rtol=1e-12, atol=1e-12)
    # Generic callable path.
    gen = pairwise(x, y, lambda a, b: (a - b).abs().flatten(1).mean(1) if a.shape == b.shape else emd(a, b))
    torch.testing.assert_close(gen, pairwise(x, y, "emd"), rtol=1e-9, atol=1e-12)
    with pytest.raises(RawrclError):
        pairwise(x, y, "nope")


def test_pairwise_emd_options(realistic):
    x, y = realistic[:3], realistic[3:]
    loop = torch.tensor([[float(emd(x[i : i + 1], y[k : k + 1], per_channel=True)) for k in range(3)]
                         for i in range(3)], dtype=x.dtype)  # fmt: skip
    torch.testing.assert_close(pairwise(x, y, "emd", per_channel=True), loop)


# ----------------------------------------------------------------------------------------------------
# contrastive loss vs Algorithm 1


def _algorithm1(r_a, r_b, tau, scale, reduction="sum"):
    """Explicit loop over anchors, scipy EMD, InfoNCE with math.exp (Algorithm 1 + Eq. 3)."""
    n = r_a.shape[0]
    total = []
    for j in range(n):
        ds = [
            scipy.stats.wasserstein_distance((scale * r_a[j]).ravel(), (scale * r_b[i]).ravel())
            for i in range(n)
        ]
        num = math.exp(-ds[j] / tau)
        den = sum(math.exp(-d / tau) for d in ds)
        total.append(-math.log(num / den))
    return sum(total) if reduction == "sum" else sum(total) / n


def test_contrastive_matches_algorithm1(realistic):
    r = realistic / 255.0  # back to [0, 1] units
    r_a, r_b = r[:, :, :24, :24], r[:, :, 8:, 8:]
    for tau, reduction in ((0.5, "sum"), (0.1, "mean")):
        loss = ResidualContrastiveLoss("emd", tau=tau, reduction=reduction)(r_a, r_b)
        ref = _algorithm1(r_a.numpy(), r_b.numpy(), tau, 255.0, reduction)
        assert abs(float(loss) - ref) < 1e-8 * max(1.0, abs(ref))
    # Numerically stable for very large logits (naive exp would underflow to log(0)).
    loss = ResidualContrastiveLoss("emd", tau=1e-4)(r_a, r_b)
    assert torch.isfinite(loss)


def test_contrastive_options_and_gradients(realistic):
    r = (realistic / 255.0).float()
    r_a = r[:, :, :24, :24].clone().requires_grad_(True)
    r_b = r[:, :, 8:, 8:].clone().requires_grad_(True)
    for kw in (
        {"distance": "emd"},
        {"distance": "bhattacharyya"},
        {"distance": "mmd"},
        {"normalize": "std"},
        {"normalize": "none"},
        {"distance": "emd", "distance_options": {"quantiles": 64}},
    ):
        fn = ResidualContrastiveLoss(**kw)
        r_a.grad = r_b.grad = None
        loss = fn(r_a, r_b)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(r_a.grad).all() and r_a.grad.abs().sum() > 0, kw
        assert fn.last_distances.shape == (6, 6)
    # "std" makes the loss invariant to the residual magnitude; the paper's form is not.
    std = ResidualContrastiveLoss(normalize="std")
    paper = ResidualContrastiveLoss()
    assert torch.allclose(std(r_a, r_b), std(3 * r_a, 3 * r_b), rtol=1e-5)
    torch.testing.assert_close(paper.distances(3 * r_a, 3 * r_b), 3 * paper.distances(r_a, r_b))
    # center: a per-image offset of the residual (a colour cast) no longer changes any distance.
    cen = ResidualContrastiveLoss(center=True)
    offset = torch.linspace(-0.05, 0.05, 6).view(6, 1, 1, 1)
    torch.testing.assert_close(cen.distances(r_a + offset, r_b - offset), cen.distances(r_a, r_b))
    assert not torch.allclose(paper.distances(r_a + offset, r_b - offset), paper.distances(r_a, r_b))
    # noise_level: given σ or estimated from noisy crops.
    sig = torch.full((6, 1, 1, 1), 0.02)
    nl = ResidualContrastiveLoss(normalize="noise_level")
    torch.testing.assert_close(
        nl(r_a, r_b, noise_std_a=sig, noise_std_b=sig), ResidualContrastiveLoss(scale=30 / 0.02)(r_a, r_b)
    )
    assert torch.isfinite(nl(r_a, r_b, x_a=r_a + 0.5, x_b=r_b + 0.5))
    with pytest.raises(RawrclError):
        nl(r_a, r_b)
    for bad in ({"normalize": "l2"}, {"tau": 0.0}, {"reduction": "max"}, {"distance": "kl"}):
        with pytest.raises(RawrclError):
            ResidualContrastiveLoss(**bad)
    with pytest.raises(RawrclError):
        paper(r_a[:1], r_b[:1])


def test_estimate_noise_std():
    x = 0.3 + 0.05 * torch.randn(2, 4, 64, 64, generator=_gen(6))
    s = estimate_noise_std(x)
    assert s.shape == (2, 4, 1, 1)
    assert torch.allclose(s, torch.full_like(s, 0.05), rtol=0.1)


# ----------------------------------------------------------------------------------------------------
# Keys interpolation and mosaic consistency


def test_keys_shift_and_upsample():
    g = _gen(7)
    x = torch.rand(2, 3, 16, 20, generator=g, dtype=torch.float64)
    # Integer shift: exact copy (interior).
    s = keys_shift(x, 2, -1)
    torch.testing.assert_close(s[..., 2:, :-1], x[..., :-2, 1:])
    # Sub-pixel shift reproduces quadratic signals exactly (Keys a = -1/2 is 3rd-order accurate).
    yy, xx = torch.meshgrid(
        torch.arange(16.0, dtype=torch.float64), torch.arange(20.0, dtype=torch.float64), indexing="ij"
    )
    quad = (0.3 * yy**2 - 0.2 * xx * yy + xx).double()[None, None]
    dy, dx = 0.4, -1.3
    ref = (0.3 * (yy - dy) ** 2 - 0.2 * (xx - dx) * (yy - dy) + (xx - dx)).double()
    torch.testing.assert_close(keys_shift(quad, dy, dx)[0, 0, 3:-3, 3:-3], ref[3:-3, 3:-3])
    # ×2 upsampling: output pixel q samples the input at q/2 − 1/4.
    up = keys_upsample2(quad)
    assert up.shape == (1, 1, 32, 40)
    yq, xq = torch.meshgrid(
        torch.arange(32.0, dtype=torch.float64) / 2 - 0.25,
        torch.arange(40.0, dtype=torch.float64) / 2 - 0.25,
        indexing="ij",
    )
    ref = (0.3 * yq**2 - 0.2 * xq * yq + xq).double()
    torch.testing.assert_close(up[0, 0, 4:-4, 4:-4], ref[4:-4, 4:-4])


def test_mosaic_consistency_transforms():
    g = _gen(8)
    rgb = torch.rand(2, 3, 24, 28, generator=g)
    x = mosaic_packed(rgb, "RGGB")
    ident = MosaicConsistency("identity")
    assert float(ident(x, rgb)) == 0.0
    assert float(ident(x, rgb.roll(1, -1))) > 0
    # Translate: colour c of f at p − δ is compared with the CFA sample at p (integer δ, interior).
    tr = MosaicConsistency("translate", max_shift=2, subpixel=False, seed=3)
    f = torch.rand(2, 3, 24, 28, generator=g, requires_grad=True)
    loss = tr(x, f)
    dy, dx = (int(v) for v in tr.last_shift)
    shifted = torch.roll(f, shifts=(dy, dx), dims=(-2, -1))
    m = math.ceil(max(abs(dy), abs(dx))) + 2
    m += m % 2
    ref = (x[..., m // 2 : 12 - m // 2, m // 2 : 14 - m // 2] - mosaic_packed(shifted, "RGGB")[
        ..., m // 2 : 12 - m // 2, m // 2 : 14 - m // 2]).abs().mean()  # fmt: skip
    torch.testing.assert_close(loss, ref)
    loss.backward()
    assert torch.isfinite(f.grad).all() and f.grad.abs().sum() > 0
    # A constant-colour image is consistent under every translation (all three colours constrained).
    const = torch.tensor([0.2, 0.5, 0.7]).view(1, 3, 1, 1).expand(2, 3, 24, 28)
    trs = MosaicConsistency("translate", seed=1)
    for _ in range(3):
        assert float(trs(mosaic_packed(const, "RGGB"), const)) < 1e-6
    # upsample2 takes RGB at packed resolution.
    up = MosaicConsistency("upsample2")
    half = torch.rand(2, 3, 12, 14, generator=g)
    assert float(up(x, half)) > 0
    with pytest.raises(RawrclError):
        up(x, rgb)
    with pytest.raises(RawrclError):
        ident(x, half)
    with pytest.raises(RawrclError):
        MosaicConsistency("warp")


# ----------------------------------------------------------------------------------------------------
# perceptual consistency, encoders, objective


def test_perceptual_consistency_with_self_supervised_encoder():
    from rawrcl.methods.rcl import _FeaturesOf, _freeze
    from rawrcl.models.encoder import Encoder

    torch.manual_seed(0)
    enc = _freeze(_FeaturesOf(Encoder({"in_channels": 3, "width": 8, "depth": 2})))
    pc = PerceptualConsistency(enc, layers=[0, 1])
    x = torch.rand(2, 3, 16, 16, generator=_gen(9))
    fx = (x + 0.1 * torch.randn(2, 3, 16, 16, generator=_gen(10))).requires_grad_(True)
    assert float(pc(x, x)) == 0.0
    loss = pc(x, fx)
    loss.backward()
    assert float(loss.detach()) > 0 and fx.grad.abs().sum() > 0
    assert all(p.grad is None for p in enc.parameters())  # frozen
    pc.train()
    assert not enc.training
    with pytest.raises(RawrclError):
        PerceptualConsistency(enc, layers=[5])(x, fx)


def test_resnet50_unavailable_is_a_user_error(tmp_path):
    try:
        import torchvision  # noqa: F401
    except ImportError:
        with pytest.raises(RawrclError, match="torchvision"):
            resnet50_imagenet()
    else:
        with pytest.raises(RawrclError):
            resnet50_imagenet(weights_path=tmp_path / "missing.pth")
