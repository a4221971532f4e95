"""Self-ensemble (test-time augmentation): Bayer phase kept under flips, exact inverse transforms."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.cfa import pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.models import SelfEnsemble, build_model
from rawrcl.models.heads import bilinear_demosaic_packed
from tests._fakes import SparseJDD

torch.set_num_threads(1)


class Lambda(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _transpose_packed(x: torch.Tensor) -> torch.Tensor:
    """Transpose the mosaic behind packed RGGB (B, 4, h, w): stays RGGB, G1 and G2 swap."""
    return pack(unpack(x, "RGGB").transpose(-1, -2), "RGGB")


def test_equivariant_models_are_unchanged():
    x = torch.rand(2, 4, 10, 13)
    torch.testing.assert_close(SelfEnsemble(nn.Identity())(x), x)  # packed RAW → packed RAW
    torch.testing.assert_close(SelfEnsemble(SparseJDD())(x), SparseJDD()(x))  # every pixel, every colour
    rgb = torch.rand(1, 3, 9, 11)
    torch.testing.assert_close(SelfEnsemble(nn.Identity())(rgb), rgb)
    up = Lambda(lambda z: F.interpolate(z, scale_factor=2, mode="nearest"))  # an "sr2" model
    torch.testing.assert_close(SelfEnsemble(up)(rgb), up(rgb))
    bil = Lambda(bilinear_demosaic_packed)  # equivariant away from its own border handling
    torch.testing.assert_close(SelfEnsemble(bil)(x)[..., 2:-2, 2:-2], bil(x)[..., 2:-2, 2:-2])


@pytest.mark.parametrize("head", ["jdd", "raw"])
def test_ensemble_of_a_real_network_commutes_with_transpose(head):
    """SelfEnsemble(f) averages over the whole group, so it commutes with the group's transpose exactly
    (no padding is involved) even though f itself does not."""
    torch.manual_seed(0)
    f = build_model({"arch": "unet", "in_channels": 4, "head": head, "width": 4, "depth": 2}).eval()
    x = torch.rand(1, 4, 12, 16)
    with torch.no_grad():
        e, e_t = SelfEnsemble(f)(x), SelfEnsemble(f)(_transpose_packed(x))
        plain, plain_t = f(x), f(_transpose_packed(x))
    back = _transpose_packed(e_t) if head == "raw" else e_t.transpose(-1, -2)
    torch.testing.assert_close(back, e, atol=1e-5, rtol=1e-4)
    plain_back = _transpose_packed(plain_t) if head == "raw" else plain_t.transpose(-1, -2)
    assert (plain_back - plain).abs().max() > 1e-3  # the network alone is not transpose-equivariant
    assert e.shape == plain.shape


def test_rejects_other_inputs():
    with pytest.raises(RawrclError, match="self-ensemble"):
        SelfEnsemble(nn.Identity())(torch.rand(1, 2, 8, 8))


class _NeedsMultiples(nn.Module):
    """An equivariant packed → packed model that refuses sizes off its ``size_multiple`` (as a blind-spot
    network does)."""

    size_multiple = 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] % 4 or x.shape[-1] % 4:
            raise ValueError(f"needs multiples of 4, got {tuple(x.shape[-2:])}")
        return 2 * x


def test_models_that_need_size_multiples_run_under_the_flips():
    # the flips pad the mosaic by one pixel a side: one packed pixel more than the tiler's multiple
    x = torch.rand(1, 4, 8, 12)
    torch.testing.assert_close(SelfEnsemble(_NeedsMultiples())(x), 2 * x)
    from rawrcl.models.blindspot import BlindSpotDenoiser

    bs = BlindSpotDenoiser(cross=True).eval()
    noise = torch.tensor([[[1e-3] * 4, [1e-5] * 4]])
    told = Lambda(lambda z: bs(z, noise.expand(z.shape[0], -1, -1)))
    told.size_multiple = bs.size_multiple  # as the noise binding reports its model's
    with torch.no_grad():
        out = SelfEnsemble(told)(x)
    assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("t", range(8))
def test_turn_keeps_the_bayer_phase_and_turn_back_inverts_it(t):
    """Every dihedral turn of a mosaic whose sites hold their colour's code (R 0, G 1, B 2) is again an RGGB
    mosaic (R on R sites, …), and turn_back (scale 1 and 2) returns the original grid exactly."""
    from rawrcl.models.geometry import turn, turn_back

    h, w = 6, 10
    colour = torch.tensor([[0.0, 1.0], [1.0, 2.0]]).repeat(h // 2, w // 2)
    turned = turn(colour[None, None], t)
    assert torch.equal(
        turned[0, 0], torch.tensor([[0.0, 1.0], [1.0, 2.0]]).repeat(*(s // 2 for s in turned.shape[-2:]))
    )
    x = torch.rand(1, 1, h, w)
    torch.testing.assert_close(turn_back(turn(x, t), t), x, rtol=0, atol=0)
    up = F.interpolate(turn(x, t), scale_factor=2, mode="nearest")  # an output at 2 pixels per mosaic pixel
    torch.testing.assert_close(turn_back(up, t, 2), F.interpolate(x, scale_factor=2, mode="nearest"))
    rgb = torch.rand(1, 3, h, w)  # photos: plain flips, no padding
    assert turn(rgb, t, bayer=False).shape[-2:] == ((w, h) if t & 1 else (h, w))
    torch.testing.assert_close(turn_back(turn(rgb, t, bayer=False), t, bayer=False), rgb, rtol=0, atol=0)
