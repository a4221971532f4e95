"""SURE (:mod:`rawrcl.methods.sure`): the estimate tracks the true MSE (white and row noise) and trains."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _box(x: torch.Tensor, k: int = 3) -> torch.Tensor:
    return F.avg_pool2d(F.pad(x, (k // 2,) * 4, mode="replicate"), k, 1)


def _scene(b: int = 4, h: int = 48, w: int = 48) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    s = 0.3 + 0.15 * torch.sin(5 * xx + 1) * torch.cos(3 * yy)
    return s.expand(b, 4, h, w).clone()


@pytest.mark.parametrize("row", [0.0, 0.02])
def test_sure_map_tracks_the_true_mse_of_a_smoother(row):
    """A 3×3 mean leaves a third of the row-offset variance and a ninth of the white: SURE must see both
    (told the row noise; not told, it takes the part of the banding the smoother removes for error)."""
    from rawrcl.methods.r2r import signal_variance
    from rawrcl.methods.sure import sure_map
    from rawrcl.noise import row_offsets

    g = torch.Generator().manual_seed(0)
    x = _scene(8, 96, 48)  # many rows: the row term's estimate averages over rows
    lam = torch.tensor([[4e-3] * 4, [1e-4] * 4]).expand(8, 2, 4)
    var = signal_variance(x, lam)
    rows = torch.full((8,), row)
    est, blind, true = [], [], []
    for _ in range(10):
        y = x + torch.randn(x.shape, generator=g) * var.sqrt() + row_offsets(x.shape, rows, g)
        fy, s = sure_map(_box, y, var, rows, draws=2, generator=g)
        est.append(float(s.mean()))
        blind.append(float(sure_map(_box, y, var, None, generator=g)[1].mean()))  # not told the rows
        true.append(float(((fy - x) ** 2).mean()))
    est_m, true_m = sum(est) / 10, sum(true) / 10
    assert est_m == pytest.approx(true_m, rel=0.05)
    if row > 0:  # without the row term: + σ_row²·(1 − 2/3), the row noise counted as residual error
        assert sum(blind) / 10 == pytest.approx(true_m + row**2 / 3, rel=0.05)
    ident = float(var.mean()) + row**2
    assert true_m < 0.6 * ident  # the check is not trivial: the smoother is far from the identity


def test_sure_method_trains_a_noise_aware_model_without_clean_data():
    """A few dozen SURE steps on noisy crops only lower the true MSE of a tiny noise-aware denoiser; the
    loss backpropagates through both the output and the divergence probes; clipped pixels are not scored."""
    from rawrcl.methods import make_method
    from rawrcl.methods.r2r import signal_variance
    from rawrcl.models import build_model
    from rawrcl.models.conditioning import call

    torch.manual_seed(0)
    m = build_model({"in_channels": 4, "head": "raw", "width": 8, "depth": 2, "noise_aware": True})
    method = make_method("sure")
    g = torch.Generator().manual_seed(2)
    x = _scene(8, 32, 32)
    x[:, :, :6] = 0.0  # black rows: clipped at 0, not scored
    lam = torch.tensor([[4e-3] * 4, [1e-4] * 4]).expand(8, 2, 4).clone()
    var = signal_variance(x, lam)

    def draw():
        return (x + torch.randn(x.shape, generator=g) * var.sqrt()).clamp_min(0.0)

    y_test = draw()

    def true_mse():
        with torch.no_grad():
            return float(((call(m, y_test, lam) - x) ** 2).mean())

    before = true_mse()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(40):
        y = draw()
        out = method({"x_a": y[:4], "x_b": y[4:], "noise": lam[:4], "floor": torch.zeros(4)}, m)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    assert 0.5 < out["scored"] < 0.9
    assert true_mse() < 0.5 * before
