"""A banded camera's adapted model on a banded file: the start on de-banded rows, the adapted network's rows
where the two disagree (:mod:`rawrcl.models.row_fusion`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def _tiny():
    from rawrcl.models import build_model

    cfg = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 8, "depth": 2, "noise_aware": True}
    torch.manual_seed(0)
    return build_model(cfg).eval()


def _scene(h: int = 128, w: int = 192) -> np.ndarray:
    """A smooth mosaic (H, W) in [0.1, 0.4]."""
    yy, xx = np.mgrid[0:h, 0:w]
    return (0.25 + 0.15 * np.sin(xx / 17.0) * np.cos(yy / 23.0)).astype(np.float32)


def test_disputed_rows_keeps_agreeing_rows_and_gives_back_disputed_offsets():
    from rawrcl.models.row_fusion import DISPUTE, disputed_rows

    row = 0.02
    x = torch.from_numpy(_scene())
    d = x.clone()
    a = x.clone()
    a[10] += 0.5 * DISPUTE * row  # below τσ: D's row
    a[20] += 3 * DISPUTE * row  # beyond 2τσ: A's offset
    a[30] -= 1.5 * DISPUTE * row  # between: half of it
    out = disputed_rows(x, d, a, row)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert torch.equal(out[10], d[10]) and torch.equal(out[0], d[0])
    assert torch.allclose(out[20], a[20], atol=1e-7)
    assert torch.allclose(out[30], d[30] + 0.5 * (a[30] - d[30]), atol=1e-7)


def test_disputed_rows_leaves_clipped_samples_out_of_the_row_means():
    from rawrcl.models.row_fusion import DISPUTE, disputed_rows

    row = 0.02
    x = torch.from_numpy(_scene())
    x[:, :96] = 0.0  # the left half of every row clipped at black
    d = torch.zeros_like(x) + 0.1
    a = d.clone()
    a[:, :96] += 10 * row  # A and D differ only where the input is clipped: no dispute
    assert torch.equal(disputed_rows(x, d, a, row), d)
    a[5, 96:] += 3 * DISPUTE * row
    assert float((disputed_rows(x, d, a, row)[5] - d[5]).mean()) == pytest.approx(3 * DISPUTE * row)


def test_with_row_fusion_wraps_only_a_row_switch_raw_model():
    from rawrcl.models.conditioning import add_row_input
    from rawrcl.models.row_fusion import RowFused, row_switch_min, with_row_fusion

    base = _tiny()
    assert with_row_fusion(base) is base and row_switch_min(base) is None
    plain_row = add_row_input(base)
    assert with_row_fusion(plain_row) is plain_row  # row-aware without a switch: unchanged
    sw = add_row_input(base, switch=True, row_min=0.004)
    fused = with_row_fusion(sw)
    assert isinstance(fused, RowFused) and fused.row_min == pytest.approx(0.004)
    assert with_row_fusion(fused) is fused


class _Adapted(torch.nn.Module):
    """A stand-in for an adapted banded camera's model, with the record of a row switch: told no row noise
    (or σ_row ≤ row_min), the identity (the start); told σ_row, the de-banded mosaic plus ``extra`` (H,)
    offsets on some rows (the adapted network keeping what it takes for scene structure)."""

    row_switch = True
    row_min = 0.005
    head_name = "raw"

    def __init__(self, extra: np.ndarray):
        super().__init__()
        self.extra = extra
        self.told: list[int] = []

    def forward(self, x, noise):
        from rawrcl.banding import remove_row_offsets
        from rawrcl.cfa import pack, unpack

        self.told.append(noise.shape[1])
        row = float(noise[0, 2, 0].sqrt()) if noise.shape[1] > 2 else 0.0
        if row <= self.row_min:  # the switch: the start
            return x.clone()
        cfa = unpack(x[0], "RGGB").double().numpy()
        a = remove_row_offsets(cfa, row) + self.extra[:, None]
        return pack(torch.from_numpy(a).to(x.dtype), "RGGB")[None]


def _banded_input(dtype, row: float = 0.02):
    from rawrcl.cfa import pack

    rng = np.random.default_rng(0)
    clean = _scene()
    offsets = rng.standard_normal(clean.shape[0]).astype(np.float32) * row
    cfa = clean + offsets[:, None] + rng.standard_normal(clean.shape).astype(np.float32) * 0.005
    lam = torch.tensor([[1e-4] * 4, [1e-5] * 4], dtype=dtype)
    return cfa, pack(torch.from_numpy(cfa), "RGGB")[None].to(dtype), lam


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_fused_model_is_the_model_below_row_min_and_fuses_banded_samples(dtype):
    """Samples told no row noise or σ_row ≤ row_min: exactly the model. A banded sample: D (the model told no
    row noise on the de-banded mosaic) on the rows where A (the model told σ_row) agrees, A's offset on the
    rows where they disagree by 2τ·σ_row or more, part of it in between."""
    from rawrcl.banding import remove_row_offsets
    from rawrcl.cfa import unpack
    from rawrcl.models.row_fusion import DISPUTE, RowFused

    row = 0.02
    cfa, x, lam = _banded_input(dtype, row)
    extra = np.zeros(cfa.shape[0])
    extra[::8] = 3 * DISPUTE * row  # A keeps these rows' offsets
    extra[4::16] = 1.5 * DISPUTE * row  # half-way
    inner = _Adapted(extra)
    model = RowFused(inner, inner.row_min)
    with torch.no_grad():
        for told in (lam[None], torch.cat([lam, torch.full((1, 4), 0.004**2, dtype=dtype)])[None]):
            assert torch.equal(model(x, told), x)
        assert inner.told == [2, 3]  # one pass each: no de-banded pass below row_min
        told = torch.cat([lam, torch.full((1, 4), row**2, dtype=dtype)])[None]
        out = unpack(model(x, told)[0], "RGGB").double().numpy()
    assert inner.told[2:] == [3, 2]  # A told σ_row, then D told none
    assert out.dtype == np.float64 and out.shape == cfa.shape
    d = remove_row_offsets(cfa, row).astype(np.float64)
    tol = 1e-5
    assert np.allclose((out - d)[::8], 3 * DISPUTE * row, atol=tol)  # A's rows
    assert np.allclose((out - d)[4::16], 0.5 * 1.5 * DISPUTE * row, atol=tol)
    rest = np.ones(cfa.shape[0], bool)
    rest[::8] = rest[4::16] = False
    assert np.allclose(out[rest], d[rest], atol=tol)  # the de-banded start


def test_row_fused_model_gives_the_start_where_most_rows_disagree():
    """A tile whose rows disagree in all (rms of δ above GATE·σ_row: scene structure read as banding): the
    start on the tile as it is (the stand-in's start is the identity)."""
    from rawrcl.models.row_fusion import GATE, RowFused

    row = 0.02
    cfa, x, lam = _banded_input(torch.float32, row)
    extra = np.where(np.arange(cfa.shape[0]) % 2 == 0, 1.05, -1.05) * GATE * row
    inner = _Adapted(extra)
    told = torch.cat([lam, torch.full((1, 4), row**2)])[None]
    with torch.no_grad():
        assert torch.equal(RowFused(inner, inner.row_min)(x, told), x)
        assert inner.told == [3, 2, 2]  # A, D, then the start
        inner.extra = extra * 0.9 / 1.05  # just below the gate: fused, A's offsets on every row
        out = RowFused(inner, inner.row_min)(x, told)
        assert torch.allclose(out, inner(x, told), atol=1e-5)


def test_bind_noise_fuses_a_banded_cameras_model_as_the_commands_run_it():
    from rawrcl.infer.noise import bind_noise
    from rawrcl.models.conditioning import add_row_input
    from rawrcl.models.row_fusion import RowFused
    from rawrcl.noise import NoiseModel

    sw = add_row_input(_tiny(), switch=True, row_min=0.005)
    net = bind_noise(sw, NoiseModel(1e-4, 1e-5, row=0.02), 4, shrink=True)
    assert any(isinstance(m, RowFused) for m in net.modules())
    net = bind_noise(_tiny(), NoiseModel(1e-4, 1e-5), 4, shrink=True)
    assert not any(isinstance(m, RowFused) for m in net.modules())


def test_an_adapted_banded_run_is_fused_where_the_commands_bind_it(tmp_path):
    """``rawrcl adapt`` on banded files (row switch, the default) → the run, loaded as the commands load it
    and bound to a banded file's noise, holds a :class:`RowFused` (around it for ``denoise``, around its
    first stage for ``jdd``) and runs on the file; without the switch it does not."""
    from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa
    from rawrcl.infer.noise import bind_noise, row_noise_for
    from rawrcl.models.loading import load_for_task
    from rawrcl.models.registry import save_checkpoint
    from rawrcl.models.row_fusion import RowFused
    from rawrcl.noise import NoiseModel
    from rawrcl.train.adapt import adapt
    from tests.test_row_noise import _banded_files

    save_checkpoint(tmp_path / "start.pt", _tiny())
    _, files = _banded_files()
    mosaic = np.zeros((400, 500), np.float32)
    p = files[0].packed
    mosaic[0::2, 0::2], mosaic[0::2, 1::2], mosaic[1::2, 0::2], mosaic[1::2, 1::2] = p
    for switch in (True, False):
        run = tmp_path / f"r{switch}"
        adapt(
            files, run, source=tmp_path / "start.pt", steps=2, crop=32, batch_size=2, evals=1, lr=1e-3,
            row_noise="auto", row_switch=switch, progress=False,
        )  # fmt: skip
        model = load_for_task(str(run), "raw-denoise")[0].eval()
        nm = row_noise_for(model, mosaic, "RGGB", NoiseModel(2e-3, 2e-5))
        assert nm.row == pytest.approx(0.01, rel=0.2)
        net = bind_noise(model, nm, 4, None)
        assert any(isinstance(m, RowFused) for m in net.modules()) is switch
        with torch.no_grad():
            out = denoise_cfa(net, mosaic, "RGGB", TileOptions())
        assert out.shape == mosaic.shape and np.isfinite(out).all()
        jdd = bind_noise(load_for_task(str(run), "jdd")[0].eval(), nm, 4, None)  # its first stage fused
        assert any(isinstance(m, RowFused) for m in jdd.modules()) is switch
        with torch.no_grad():
            rgb = jdd_cfa(jdd, mosaic, "RGGB", TileOptions())
        assert rgb.shape == (3, *mosaic.shape) and np.isfinite(rgb).all()
