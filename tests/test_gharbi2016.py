"""rawrcl.eval.gharbi2016: weight loading, shapes, Bayer phase and output alignment (random weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rawrcl.errors import RawrclError
from rawrcl.eval.gharbi2016 import (
    LAYERS,
    Gharbi2016,
    _bias_shape,
    gharbi_jdd,
    gharbi_sigma,
    load_gharbi2016,
    mask_grbg,
)


def _write_weights(folder, seed=0, scale=0.15):
    rng = np.random.default_rng(seed)
    for name, (wshape, _) in LAYERS.items():
        np.save(folder / f"{name}_0.npy", (rng.standard_normal(wshape) * scale).astype(np.float32))
        np.save(
            folder / f"{name}_1.npy",
            (rng.standard_normal(_bias_shape(name, wshape)) * 0.05).astype(np.float32),
        )
    return folder


def test_load_and_shapes(tmp_path):
    model = load_gharbi2016(_write_weights(tmp_path))
    w = np.load(tmp_path / "conv7_0.npy")
    assert torch.equal(model.layer("conv7").weight, torch.from_numpy(w))
    x = torch.rand(2, 4, 20, 26)
    out = gharbi_jdd(model, x, torch.tensor([0.01, 0.05]))
    assert tuple(out.shape) == (2, 3, 40, 52)
    assert tuple(gharbi_jdd(model, x[0], 0.02).shape) == (3, 40, 52)
    # the σ plane reaches the output, per sample
    a = gharbi_jdd(model, x[:1], 0.0)
    b = gharbi_jdd(model, x[:1], 0.08)
    assert not torch.allclose(a, b)
    with pytest.raises(RawrclError, match="noise levels"):
        model(x, torch.tensor([0.1, 0.2, 0.3]))
    with pytest.raises(RawrclError, match="17"):
        model(torch.rand(1, 4, 10, 40), 0.01)


def test_load_errors(tmp_path):
    with pytest.raises(RawrclError, match="no such folder"):
        load_gharbi2016(tmp_path / "nope")
    _write_weights(tmp_path)
    (tmp_path / "conv9_1.npy").unlink()
    with pytest.raises(RawrclError, match="conv9_1.npy: missing"):
        load_gharbi2016(tmp_path)
    np.save(tmp_path / "conv9_1.npy", np.zeros(64, np.float32))
    np.save(tmp_path / "residual_0.npy", np.zeros((12, 64, 3, 3), np.float32))
    with pytest.raises(RawrclError, match=r"residual_0.npy: shape \(12, 64, 3, 3\)"):
        load_gharbi2016(tmp_path)
    (tmp_path / "residual_0.npy").write_bytes(b"not a numpy file")
    with pytest.raises(RawrclError, match="unreadable"):
        load_gharbi2016(tmp_path)


def test_grbg_phase_of_the_padded_input():
    """The RGGB mosaic, reflection-padded by (32, 33), must be a GRBG mosaic whose masked channels hold
    each sample's own colour."""
    import torch.nn.functional as F

    from rawrcl.cfa import unpack
    from rawrcl.eval.gharbi2016 import PAD_X, PAD_Y

    packed = torch.tensor([0.1, 0.2, 0.3, 0.4]).view(1, 4, 1, 1).expand(1, 4, 20, 24).contiguous()
    mosaic = unpack(packed, "RGGB")
    padded = F.pad(mosaic[:, None], (PAD_X, PAD_X, PAD_Y, PAD_Y), mode="reflect")[:, 0]
    m3 = mask_grbg(padded)[0]
    assert torch.all((m3[0] == 0) | (m3[0] == 0.1)) and torch.all(m3[0][0, 1::2] == 0.1)
    assert torch.all((m3[1] == 0) | (m3[1] == 0.2) | (m3[1] == 0.3))
    assert torch.all((m3[2] == 0) | (m3[2] == 0.4)) and torch.all(m3[2][1::2, 0::2] == 0.4)
    assert torch.all((m3 > 0).sum(dim=0) == 1)  # exactly one colour per pixel


def test_output_is_aligned_with_the_input_grid(tmp_path):
    """With weights that make the network pass its (masked, centre-cropped) input through — every layer 0
    except ``post_conv1`` (centre tap: identity on the 3 mosaic channels) and ``output`` (identity) — the
    output sampled at each pixel's own CFA colour must be the input mosaic exactly: the crop and the
    RGGB → GRBG → RGGB phase handling put the output on the input's pixel grid."""
    from rawrcl.cfa import mosaic, unpack

    for name, (wshape, _) in LAYERS.items():
        w = np.zeros(wshape, np.float32)
        if name == "post_conv1":
            for c in range(3):
                w[c, c, 1, 1] = 1.0
        if name == "output":
            for c in range(3):
                w[c, c, 0, 0] = 1.0
        np.save(tmp_path / f"{name}_0.npy", w)
        np.save(tmp_path / f"{name}_1.npy", np.zeros(_bias_shape(name, wshape), np.float32))
    model = load_gharbi2016(tmp_path)
    packed = torch.rand(2, 4, 18, 23) + 0.1
    out = gharbi_jdd(model, packed, 0.02)
    expect = unpack(packed, "RGGB")
    torch.testing.assert_close(mosaic(out, "RGGB")[:, 0], expect)
    assert torch.all((out > 0).sum(dim=1) == 1)  # one colour per pixel: the mask lines up with the CFA


def test_sigma_from_nlf():
    x = torch.full((2, 4, 8, 8), 0.25)
    x[1] = 0.5
    s = gharbi_sigma(x, 0.01, 1e-4)
    np.testing.assert_allclose(s.numpy(), np.sqrt([0.01 * 0.25 + 1e-4, 0.01 * 0.5 + 1e-4]), rtol=1e-6)
    assert isinstance(Gharbi2016(), torch.nn.Module)
