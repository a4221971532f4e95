"""Pretext methods: signature, data requirements, geometry of m2m, J-invariance of n2s, rcl pieces."""

from __future__ import annotations

import logging

import pytest
import skimage.data
import torch
from torch.utils.data import default_collate

from rawrcl.data import PhotoFolderDataset
from rawrcl.errors import RawrclError
from rawrcl.methods import METHODS, make_method
from rawrcl.methods.m2m import M2M, sublattices
from rawrcl.methods.n2s import donut_average, grid_mask
from rawrcl.models import build_model, save_checkpoint


def _batch(mode="raw", crop=32, n=3):
    photos = [
        skimage.data.astronaut()[:96, :96],
        skimage.data.chelsea()[:96, :96],
        skimage.data.coffee()[:96, :96],
    ]
    ds = PhotoFolderDataset(images=photos[:n], crop=crop, mode=mode)
    return default_collate([ds[(i, 10 + i)] for i in range(n)])


def _model(in_ch=4, head="jdd"):
    torch.manual_seed(0)
    return build_model({"arch": "unet", "in_channels": in_ch, "head": head, "width": 8, "depth": 2})


@pytest.mark.parametrize("name", ["rcl", "n2n", "n2s", "m2m"])
def test_methods_jdd_signature(name):
    model = _model()
    out = METHODS[name](_batch(), model)
    assert set(out) >= {"loss"} and out["loss"].ndim == 0 and torch.isfinite(out["loss"])
    assert all(isinstance(v, float) for k, v in out.items() if k != "loss")
    out["loss"].backward()
    assert model.body.down[0][0].weight.grad is not None


@pytest.mark.parametrize("name", ["rcl", "n2n", "n2s"])
def test_methods_same_domain(name):
    out = make_method(name)(_batch("rgb"), _model(3, "rgb"))
    assert torch.isfinite(out["loss"])


def test_registry_and_requirements():
    assert {"rcl", "n2n", "n2s", "m2m", "simclr", "supervised"} <= set(METHODS)
    b = _batch()
    del b["x_a2"], b["x_b2"]
    with pytest.raises(RawrclError, match="n2n"):
        METHODS["n2n"](b, _model())
    with pytest.raises(RawrclError, match="jdd"):
        M2M()(b, _model(4, "raw"))
    with pytest.raises(RawrclError):
        make_method("nope")


def test_m2m_zero_for_exact_constant_scene():
    """A model that outputs the true colour everywhere has zero m2m loss (the geometry is consistent)."""
    colour = torch.tensor([0.2, 0.5, 0.7])

    class Perfect(torch.nn.Module):
        def forward(self, x):
            b, _, h, w = x.shape
            return colour.view(1, 3, 1, 1).expand(b, 3, 2 * h, 2 * w).clone().requires_grad_()

    packed = torch.tensor([0.2, 0.5, 0.5, 0.7]).view(1, 4, 1, 1).expand(2, 4, 8, 8).clone()
    batch = {"x_a": packed, "x_b": packed}
    assert float(M2M()(batch, Perfect())["loss"].detach()) < 1e-7
    a, b = sublattices(torch.arange(64.0).view(1, 1, 8, 8))
    assert a[0, 0, 0, 0] == 0 and b[0, 0, 0, 0] == 9  # B is one packed cell down-right


def test_n2s_masked_input_is_j_invariant():
    x = torch.rand(1, 4, 12, 12)
    mask = grid_mask(12, 12, 4, (1, 2))
    x_in = x * (1 - mask) + donut_average(x) * mask
    x2 = x + 5 * mask  # change only the masked pixels
    x2_in = x2 * (1 - mask) + donut_average(x2) * mask
    # masked pixels' own values never reach the model input at the masked positions
    assert torch.allclose(x_in * mask, x2_in * mask)


def test_rcl_consistency_choice(caplog):
    rcl = make_method("rcl", {"encoder": "none"})
    with caplog.at_level(logging.WARNING, logger="rawrcl.methods.rcl"):
        rcl(_batch("rgb"), _model(3, "rgb"))
    assert rcl.consistency_kind == "residual-l1"
    assert "falls back" in caplog.text
    rcl2 = make_method("rcl", {"distance": "bd", "alpha": 0.5})
    out = rcl2(_batch(), _model())
    assert rcl2.consistency_kind.startswith("mosaic")
    assert out["d_neg"] >= 0 and rcl2.alpha == 0.5


def test_simclr_encoder_feeds_perceptual_consistency(tmp_path):
    torch.manual_seed(0)
    enc = build_model({"arch": "encoder", "in_channels": 3, "width": 8, "depth": 2})
    b = _batch("rgb")
    out = METHODS["simclr"](b, enc)
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    path = tmp_path / "enc.pt"
    save_checkpoint(path, enc)
    rcl = make_method("rcl", {"encoder": str(path)})
    res = rcl(b, _model(3, "rgb"))
    assert rcl.consistency_kind.startswith("perceptual") and torch.isfinite(res["loss"])


# ----------------------------------------------------------------------------------------------------
# RCL under DDP: negatives from every rank


def _rcl_grads(xa, xb, normalize="none"):
    """Parameter gradient (flat) of the rcl loss on RAW crops (residual-L1 consistency: deterministic)."""
    model = _model(4, "raw")
    method = make_method("rcl", {"alpha": 0.1, "normalize": normalize})
    method({"x_a": xa, "x_b": xb}, model)["loss"].backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _rcl_rank(rank, world, port, out):
    import torch.distributed as dist

    from tests._spawn import leave_rank

    torch.set_num_threads(1)
    # a file store, not the TCP store: rank 0 then hosts no store server thread. ``port`` is unused here.
    dist.init_process_group("gloo", init_method=f"file://{out}.store", rank=rank, world_size=world)
    xa, xb = torch.load(out + ".in.pt", weights_only=True)
    n = xa.shape[0] // world
    g = _rcl_grads(xa[rank * n : (rank + 1) * n], xb[rank * n : (rank + 1) * n])
    dist.all_reduce(g)  # what DDP does: average the ranks' gradients
    torch.save(g / world, f"{out}.grad{rank}.pt")
    dist.barrier()
    leave_rank(out, rank, world)  # no gloo teardown (tests/_spawn.py says why)


def test_rcl_ddp_gathers_negatives_across_ranks(tmp_path):
    """Two gloo ranks with 2 images each give the gradient of single-process RCL on all 4 images
    (each anchor meets the other rank's crops as negatives; without the gather it would not)."""
    from tests._spawn import run_ranks

    gen = torch.Generator().manual_seed(5)
    xa, xb = torch.rand(4, 4, 16, 16, generator=gen), torch.rand(4, 4, 16, 16, generator=gen)
    base = str(tmp_path / "rcl")
    torch.save((xa, xb), base + ".in.pt")
    run_ranks(_rcl_rank, 2, base, timeout=120)
    g_ddp = torch.load(base + ".grad0.pt", weights_only=True)
    g_single = _rcl_grads(xa, xb)
    assert torch.allclose(g_ddp, g_single, rtol=1e-4, atol=1e-7)
    # the per-rank loss alone (negatives from the own 2 images only) is measurably different
    g_local = (_rcl_grads(xa[:2], xb[:2]) + _rcl_grads(xa[2:], xb[2:])) / 2
    assert not torch.allclose(g_local, g_single, rtol=1e-3, atol=1e-6)


def test_rcl_noise_level_normalisation_runs():
    """normalize="noise_level" estimates σ from the noisy crops (the method passes them)."""
    gen = torch.Generator().manual_seed(6)
    xa, xb = torch.rand(3, 4, 16, 16, generator=gen), torch.rand(3, 4, 16, 16, generator=gen)
    g = _rcl_grads(xa, xb, normalize="noise_level")
    assert torch.isfinite(g).all() and g.abs().sum() > 0
