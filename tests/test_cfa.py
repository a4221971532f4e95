"""Bayer packing / unpacking / mosaicking (rawrcl.cfa): exact round trips for every phase and size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rawrcl import cfa
from rawrcl.errors import RawrclError

SIZES = [(8, 12), (7, 12), (8, 11), (7, 9), (5, 3), (3, 4), (2, 3), (3, 2)]


def _colour_of(pattern: str) -> np.ndarray:
    return np.array([[pattern[0], pattern[1]], [pattern[2], pattern[3]]])


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
@pytest.mark.parametrize("size", SIZES)
def test_pack_unpack_round_trip_numpy(pattern, size):
    rng = np.random.default_rng(0)
    x = rng.random((2, 3, *size)).astype(np.float32)  # batched (..., H, W)
    packed = cfa.pack(x, pattern)
    h2, w2 = (size[0] + 1) // 2, (size[1] + 1) // 2
    assert packed.shape == (2, 3, 4, h2, w2)
    back = cfa.unpack(packed, pattern, shape=size)
    assert back.shape == x.shape
    assert np.array_equal(back, x)


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
@pytest.mark.parametrize("size", SIZES)
def test_pack_unpack_round_trip_torch(pattern, size):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, *size, generator=g, dtype=torch.float64)
    back = cfa.unpack(cfa.pack(x, pattern), pattern, shape=size)
    assert isinstance(back, torch.Tensor)
    assert torch.equal(back, x)


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
def test_pack_channels_hold_the_right_colours(pattern):
    # encode the colour of each pixel in its value: R=1, G on red row=2, G on blue row=3, B=4
    h, w = 6, 8
    tile = _colour_of(pattern)
    red_row = int(np.argwhere(tile == "R")[0][0])
    code = np.zeros((2, 2))
    for r in range(2):
        for c in range(2):
            code[r, c] = {"R": 1, "B": 4}.get(tile[r, c], 2 if r == red_row else 3)
    x = np.tile(code, (h // 2, w // 2))
    packed = cfa.pack(x, pattern)
    for i, value in enumerate([1, 2, 3, 4]):
        assert np.all(packed[i] == value), (pattern, cfa.CHANNELS[i])


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
def test_odd_size_padding_repeats_the_same_colour(pattern):
    # pack pads odd sizes by reflection: the padded samples must be of the right CFA colour
    rng = np.random.default_rng(2)
    x = rng.random((7, 9))
    packed = cfa.pack(x, pattern)
    pos = cfa.positions(pattern)
    for i, c in enumerate(cfa.CHANNELS):
        r, col = pos[c]
        # every packed value must exist in x at the same CFA colour position
        same_colour = x[r::2, col::2]
        assert np.isin(packed[i], same_colour).all()


def test_unpack_without_shape_gives_even_size():
    x = np.arange(7 * 9, dtype=np.float64).reshape(7, 9)
    out = cfa.unpack(cfa.pack(x, "RGGB"), "RGGB")
    assert out.shape == (8, 10)
    assert np.array_equal(out[:7, :9], x)


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
@pytest.mark.parametrize("size", [(6, 8), (7, 9)])
def test_mosaic_samples_the_right_channel(pattern, size):
    rng = np.random.default_rng(3)
    rgb = rng.random((3, *size))
    m = cfa.mosaic(rgb, pattern)
    assert m.shape == (1, *size)
    idx = {"R": 0, "G": 1, "B": 2}
    tile = _colour_of(pattern)
    for y in range(size[0]):
        for x in range(size[1]):
            assert m[0, y, x] == rgb[idx[tile[y % 2, x % 2]], y, x]


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
@pytest.mark.parametrize("size", [(6, 8), (7, 9)])
def test_mosaic_packed_equals_pack_of_mosaic(pattern, size):
    g = torch.Generator().manual_seed(4)
    rgb = torch.rand(2, 3, *size, generator=g)
    a = cfa.mosaic_packed(rgb, pattern)
    b = cfa.pack(cfa.mosaic(rgb, pattern)[..., 0, :, :], pattern)
    assert torch.equal(a, b)
    assert np.array_equal(cfa.mosaic_packed(rgb.numpy(), pattern), b.numpy())


def test_mosaic_is_differentiable():
    rgb = torch.rand(1, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    weights = torch.rand(1, 4, 3, 3, dtype=torch.float64)
    (cfa.mosaic_packed(rgb, "GRBG") * weights).sum().backward()
    # gradient: the weight at sampled positions, zero at the other two colours
    grad = rgb.grad[0]
    assert torch.count_nonzero(grad) == 36
    assert torch.allclose(grad.sum(0), cfa.unpack(weights, "GRBG")[0])


def test_positions_and_shift_pattern_agree_with_crops():
    assert cfa.positions("GRBG") == {"G1": (0, 0), "R": (0, 1), "B": (1, 0), "G2": (1, 1)}
    assert cfa.positions("BGGR")["G1"] == (1, 0)  # green on the red row
    x = np.arange(36).reshape(6, 6)
    for p in cfa.PATTERNS:
        for dy in range(2):
            for dx in range(2):
                q = cfa.shift_pattern(p, dy, dx)
                packed_crop = cfa.pack(x[dy : dy + 4, dx : dx + 4], q)
                # the crop's R plane must be a sub-grid of the full image's R plane
                full_r = cfa.pack(x, p)[0]
                assert np.isin(packed_crop[0], full_r).all()


@pytest.mark.parametrize("pattern", cfa.PATTERNS)
def test_align_rggb(pattern):
    rng = np.random.default_rng(5)
    x = rng.random((7, 10))
    aligned, (dy, dx) = cfa.align_rggb(x, pattern)
    assert (dy, dx) == cfa.rggb_offset(pattern)
    assert np.array_equal(aligned[dy : dy + 7, dx : dx + 10], x)
    # the R plane of the aligned mosaic (as RGGB) is exactly the original R samples (plus padding)
    assert np.isin(cfa.pack(aligned, "RGGB")[0], cfa.pack(x, pattern)[0]).all()
    t, off = cfa.align_rggb(torch.from_numpy(x)[None], pattern)
    assert off == (dy, dx) and torch.equal(t[0], torch.from_numpy(aligned))


def test_packed_to_rgb_averages_greens():
    packed = np.stack([np.full((2, 2), v) for v in (0.1, 0.2, 0.4, 0.9)])
    rgb = cfa.packed_to_rgb(packed)
    assert np.allclose(rgb[:, 0, 0], [0.1, 0.3, 0.9])


def test_bad_inputs_raise_rawrcl_error():
    with pytest.raises(RawrclError, match="pattern"):
        cfa.pack(np.zeros((4, 4)), "RGBG")
    with pytest.raises(RawrclError, match="4 channels"):
        cfa.unpack(np.zeros((3, 2, 2)), "RGGB")
    with pytest.raises(RawrclError, match="3 colour"):
        cfa.mosaic(np.zeros((4, 4, 4)), "RGGB")
    with pytest.raises(RawrclError, match="too small"):
        cfa.pack(np.zeros((1, 4)), "RGGB")  # a 1-row mosaic cannot be padded with the right colour
    assert cfa.check_pattern("gbrg") == "GBRG"
