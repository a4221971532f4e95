"""Tasks: shapes, determinism, noise statistics, RGGB geometry."""

import numpy as np
import pytest
import torch
from skimage import data

from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError
from rawrcl.noise import PRESETS
from rawrcl.noise import noise_sampler as resolve_noise
from rawrcl.tasks import TASKS, downscale, get_task


@pytest.fixture(scope="module")
def photo():
    return (data.astronaut()[100:166, 200:298].astype(np.float32) / 255).transpose(2, 0, 1)  # (3, 66, 98)


SHAPES = {  # (input shape, target shape) for a 64×96 crop (after rounding to the task multiple)
    "denoise": ((3, 66, 98), (3, 66, 98)),
    "sr": ((3, 33, 49), (3, 66, 98)),
    "jdensr": ((3, 33, 49), (3, 66, 98)),
    "raw-denoise": ((4, 33, 49), (4, 33, 49)),
    "jdd": ((4, 33, 49), (3, 66, 98)),
    "jdemsr": ((4, 16, 24), (3, 64, 96)),
    "jddsr": ((4, 16, 24), (3, 64, 96)),
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_shapes_heads_and_determinism(photo, name):
    task = TASKS[name]
    inp, tgt = task.degrade(photo, np.random.default_rng(3))
    assert (tuple(inp.shape), tuple(tgt.shape)) == SHAPES[name]
    assert inp.dtype == torch.float32 and tgt.dtype == torch.float32
    assert inp.shape[0] == task.in_channels
    assert tgt.shape[-1] == inp.shape[-1] * task.scale
    inp2, tgt2 = task.degrade(torch.from_numpy(photo), np.random.default_rng(3))
    assert torch.equal(inp, inp2) and torch.equal(tgt, tgt2)
    if task.noisy:
        inp3, _ = task.degrade(photo, np.random.default_rng(4))
        assert not torch.equal(inp, inp3)


def test_jdd_is_rggb_mosaic_of_target(photo):
    inp, tgt = TASKS["jdd"].degrade(photo, np.random.default_rng(0), noise="none")
    assert torch.equal(inp, mosaic_packed(tgt, "RGGB"))
    # R plane = red channel at (even, even) pixels
    assert torch.equal(inp[0], tgt[0, ::2, ::2]) and torch.equal(inp[3], tgt[2, 1::2, 1::2])
    inp, tgt = TASKS["jdemsr"].degrade(photo, np.random.default_rng(0))
    assert torch.allclose(inp, mosaic_packed(downscale(tgt, 2), "RGGB"))


def test_noise_statistics_match_preset():
    flat = np.full((3, 200, 200), 0.4, np.float32)
    ls, lr = PRESETS["high"]
    inp, tgt = TASKS["raw-denoise"].degrade(flat, np.random.default_rng(1), noise="high")
    var = float((inp - tgt).var())
    assert var == pytest.approx(ls * 0.4 + lr, rel=0.05)
    inp, tgt = TASKS["denoise"].degrade(flat, np.random.default_rng(1), noise=(0.0, 1e-4))
    assert float((inp - tgt).std()) == pytest.approx(0.01, rel=0.05)


def test_resolve_noise_and_errors():
    rng = np.random.default_rng(0)
    assert resolve_noise("low")(rng).lambda_shot == PRESETS["low"][0]
    m = resolve_noise("0.01,0.0016")(rng)
    assert (m.lambda_shot, m.lambda_read) == (0.01, 0.0016)
    sd = [resolve_noise("paper")(np.random.default_rng(s)) for s in range(5)]
    assert len({x.lambda_shot for x in sd}) == 5  # one draw per image
    with pytest.raises(RawrclError):
        resolve_noise("loud")
    with pytest.raises(RawrclError):
        get_task("deblur")
    with pytest.raises(RawrclError):
        get_task("denoise", unprocess=True)
    with pytest.raises(RawrclError):
        TASKS["jdd"].degrade(np.zeros((3, 2, 2), np.float32), rng)


def test_unprocess_target_is_linear_and_carries_camera(photo):
    isp = pytest.importorskip("rawrcl.isp")
    if not hasattr(isp, "unprocess"):
        pytest.skip("rawrcl.isp.unprocess not available")
    task = get_task("jdd", unprocess=True)
    s = task.sample(photo, np.random.default_rng(0), noise="none")
    assert s["meta"]["isp"] is not None
    assert not torch.allclose(s["target"], torch.from_numpy(photo)[:, :66, :98])
    assert torch.equal(s["input"], mosaic_packed(s["target"], "RGGB"))


def test_unprocess_mix_trains_on_both_domains_and_keeps_test_sets_fixed():
    from dataclasses import replace

    photo = np.random.default_rng(3).uniform(0, 1, (3, 32, 32)).astype(np.float32)
    always = get_task("jdd", noise="high", unprocess=True)
    mixed = replace(always, unprocess_mix=0.5)
    kinds = [mixed.sample(photo, np.random.default_rng([7, i]))["meta"]["isp"] is None for i in range(40)]
    assert 5 < sum(kinds) < 35  # both photo-valued and unprocessed samples
    # mix = 1 draws nothing extra: identical to the plain unprocessed task
    a = always.sample(photo, np.random.default_rng(1))["input"]
    b = replace(always, unprocess_mix=1.0).sample(photo, np.random.default_rng(1))["input"]
    assert torch.equal(a, b)


def test_colour_cast_scales_red_and_blue_against_green_exposed_for_the_brightest():
    from dataclasses import replace

    flat = np.full((3, 32, 32), 0.3, np.float32)
    task = replace(get_task("jdd"), cast=4.0)
    casts = []
    for i in range(30):
        s = task.sample(flat, np.random.default_rng([5, i]), noise="none")
        r, b = s["meta"]["cast"]
        assert 0.25 <= r <= 4.0 and 0.25 <= b <= 4.0
        top = max(r, 1.0, b)
        tgt = s["target"]
        for ch, gain in enumerate((r, 1.0, b)):
            assert torch.allclose(tgt[ch], torch.full_like(tgt[ch], 0.3 * gain / top))
        assert float(tgt.max()) <= 0.3 + 1e-6  # the brightest channel keeps its level: nothing clips
        assert torch.equal(s["input"], mosaic_packed(tgt, "RGGB"))  # the cast is in the scene, before the CFA
        casts.append((r, b))
    rs = np.log([c[0] for c in casts])
    assert rs.min() < -0.5 and rs.max() > 0.5  # both warm and cool casts are drawn
    # cast_mix 0 draws no cast; RGB tasks ignore it
    none = replace(task, cast_mix=0.0).sample(flat, np.random.default_rng(0), noise="none")
    assert "cast" not in none["meta"]
    rgb = replace(get_task("denoise"), cast=4.0).sample(flat, np.random.default_rng(0), noise="none")
    assert "cast" not in rgb["meta"]
    # a fixed (red, blue) pair, as the benchmarks' --cast
    warm = replace(get_task("raw-denoise"), cast=(2.5, 0.5))
    fixed = warm.sample(flat, np.random.default_rng(0), noise="none")
    assert fixed["meta"]["cast"] == (2.5, 0.5)
    assert torch.allclose(fixed["target"][0], torch.full_like(fixed["target"][0], 0.3))  # R plane of RGGB
    assert torch.allclose(fixed["target"][1], torch.full_like(fixed["target"][1], 0.12))  # G
    assert torch.allclose(fixed["target"][3], torch.full_like(fixed["target"][3], 0.06))  # B
