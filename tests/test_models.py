"""Models: shapes for every arch/head, odd sizes, heads, registry and checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rawrcl.errors import RawrclError
from rawrcl.models import build_model, load_checkpoint, model_config, save_checkpoint

SMALL = {"width": 8, "depth": 2}


@pytest.mark.parametrize("arch", ["unet", "dncnn"])
@pytest.mark.parametrize(
    "in_ch,head,scale,out_ch",
    [
        (4, "jdd", 2, 3),
        (4, "raw", 1, 4),
        (3, "rgb", 1, 3),
        (3, "sr2", 2, 3),
        (3, "sr4", 4, 3),
        (4, "rgb", 1, 3),
    ],
)
def test_shapes_uneven_sizes(arch, in_ch, head, scale, out_ch):
    torch.manual_seed(0)
    m = build_model({"arch": arch, "in_channels": in_ch, "head": head, **SMALL})
    x = torch.rand(2, in_ch, 13, 22)
    y = m(x)
    assert y.shape == (2, out_ch, 13 * scale, 22 * scale)
    assert torch.isfinite(y).all()


def test_dncnn_predicts_residual():
    m = build_model({"arch": "dncnn", "in_channels": 3, "head": "rgb", **SMALL})
    torch.nn.init.zeros_(m.head.conv.weight)
    torch.nn.init.zeros_(m.head.conv.bias)
    x = torch.rand(1, 3, 9, 11)
    assert torch.equal(m(x), x)  # zero noise estimate -> the input itself


def test_bilinear_demosaic_packed_matches_the_classical_one():
    import colour_demosaicing

    from rawrcl.cfa import mosaic, pack
    from rawrcl.models.heads import bilinear_demosaic_packed

    rgb = np.random.default_rng(0).random((3, 10, 14)).astype(np.float32)
    cfa = mosaic(rgb, "RGGB")
    packed = torch.from_numpy(np.asarray(pack(cfa, "RGGB"))).reshape(1, 4, 5, 7)
    out = bilinear_demosaic_packed(packed)[0].numpy()
    ref = colour_demosaicing.demosaicing_CFA_Bayer_bilinear(cfa, "RGGB").transpose(2, 0, 1)
    assert out.shape == (3, 10, 14)
    assert np.abs(out - ref)[:, 1:-1, 1:-1].max() < 1e-6  # same kernels away from the border
    assert np.array_equal(mosaic(out, "RGGB"), cfa)  # every sample kept exactly
    flat = bilinear_demosaic_packed(torch.full((1, 4, 3, 5), 0.3))
    assert torch.allclose(flat, torch.full_like(flat, 0.3))  # borders normalised, no reflected colour


def test_malvar_demosaic_packed_matches_the_classical_one():
    import colour_demosaicing

    from rawrcl.cfa import mosaic, pack
    from rawrcl.models.heads import malvar_demosaic_packed

    rgb = np.random.default_rng(1).random((3, 12, 18)).astype(np.float32)
    cfa = mosaic(rgb, "RGGB")[0]
    packed = torch.from_numpy(np.asarray(pack(cfa, "RGGB")))[None]
    out = malvar_demosaic_packed(packed)[0].numpy()
    ref = colour_demosaicing.demosaicing_CFA_Bayer_Malvar2004(cfa.astype(np.float64), "RGGB")
    assert out.shape == (3, 12, 18)
    assert np.abs(out - ref.transpose(2, 0, 1))[:, 2:-2, 2:-2].max() < 1e-5  # same kernels inside
    assert np.array_equal(mosaic(out, "RGGB")[0], cfa)  # every sample kept exactly
    flat = malvar_demosaic_packed(torch.full((1, 4, 3, 5), 0.3))
    assert torch.allclose(flat, torch.full_like(flat, 0.3))  # phase-keeping reflection: no border colour
    assert malvar_demosaic_packed(torch.rand(1, 4, 1, 3)).shape == (1, 3, 2, 6)  # tiny inputs too


def test_skip_demosaic_option():
    from rawrcl.models import skip_map
    from rawrcl.models.heads import malvar_demosaic_packed

    cfg = {"arch": "unet", "in_channels": 4, "head": "jdd", "skip": True, **SMALL}
    assert build_model(cfg).config["demosaic"] == "bilinear"  # older checkpoints: as trained
    m = build_model({**cfg, "demosaic": "malvar"})
    torch.nn.init.zeros_(m.head.conv.weight)
    torch.nn.init.zeros_(m.head.conv.bias)
    x = torch.rand(1, 4, 8, 10)
    assert torch.allclose(m(x), malvar_demosaic_packed(x))
    assert torch.allclose(skip_map(x, "jdd", "malvar"), malvar_demosaic_packed(x))
    with pytest.raises(RawrclError, match="demosaic"):
        model_config({**cfg, "demosaic": "menon"})


@pytest.mark.parametrize("in_ch,head", [(4, "jdd"), (4, "raw"), (3, "rgb"), (3, "sr2")])
def test_unet_skip_adds_the_classical_estimate(in_ch, head):
    from rawrcl.models import skip_map

    torch.manual_seed(0)
    m = build_model({"arch": "unet", "in_channels": in_ch, "head": head, "skip": True, **SMALL})
    x = torch.rand(2, in_ch, 8, 12)
    assert not torch.allclose(m(x), skip_map(x, head))
    torch.nn.init.zeros_(m.head.conv.weight)
    torch.nn.init.zeros_(m.head.conv.bias)
    assert torch.allclose(m(x), skip_map(x, head))
    # configs written before the option existed have no key: a plain U-Net, as they were trained
    assert build_model({"arch": "unet", "in_channels": in_ch, "head": head, **SMALL}).config["skip"] is False


def test_replace_head_and_freeze():
    torch.manual_seed(0)
    m = build_model({"arch": "unet", "in_channels": 3, "head": "rgb", **SMALL})
    old = m.head.conv.weight.clone()
    m.replace_head("sr2")
    assert m.config["head"] == "sr2" and m.head_name == "sr2"
    assert m(torch.rand(1, 3, 8, 8)).shape == (1, 3, 16, 16)
    m.replace_head()
    assert m.head.conv.weight.shape != old.shape or not torch.equal(m.head.conv.weight, old)
    m.freeze_body()
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("head.") for n in trainable)


def test_config_validation():
    with pytest.raises(RawrclError):
        model_config({"arch": "unet", "in_channels": 3, "head": "jdd"})
    with pytest.raises(RawrclError):
        model_config({"arch": "nope"})
    with pytest.raises(RawrclError):
        model_config({"arch": "unet", "in_channels": 4, "head": "sr3"})
    cfg = model_config({"arch": "unet", "in_channels": 4})
    assert cfg["head"] == "jdd" and cfg["width"] == 32 and cfg["depth"] == 3


def test_checkpoint_roundtrip(tmp_path):
    torch.manual_seed(0)
    m = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", **SMALL})
    m.replace_head("raw")
    path = tmp_path / "m.pt"
    save_checkpoint(path, m, extra={"step": 3, "note": "x"})
    m2, cfg = load_checkpoint(path)
    assert cfg["head"] == "raw" and cfg["width"] == 8
    x = torch.rand(1, 4, 10, 10)
    m.eval()
    assert torch.equal(m(x), m2(x))
    raw = torch.load(path, weights_only=True)
    assert raw["extra"]["step"] == 3
    assert not list(tmp_path.glob(".*tmp"))  # atomic write left no temp file
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints" / "last.pt", m)
    assert torch.equal(load_checkpoint(run)[0](x), m(x))  # a run directory reads its last.pt


def test_bad_checkpoint(tmp_path):
    p = tmp_path / "bad.pt"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(RawrclError, match="bad.pt"):
        load_checkpoint(p)
    with pytest.raises(RawrclError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_noise_aware_model_needs_and_uses_the_noise():
    from rawrcl.models.conditioning import WithNoise, call, is_noise_aware
    from rawrcl.noise import NoiseModel

    torch.manual_seed(0)
    m = build_model({"in_channels": 4, "head": "raw", "noise_aware": True, "skip": True, **SMALL}).eval()
    assert is_noise_aware(m) and model_config({})["noise_aware"] is False
    x = torch.rand(2, 4, 12, 10) * 0.2
    lo, hi = torch.full((2, 2, 4), 1e-5), torch.full((2, 2, 4), 1e-2)
    with torch.no_grad():
        assert m(x, lo).shape == x.shape
        assert not torch.allclose(m(x, lo), m(x, hi))  # the noise map reaches the body
        bound = WithNoise(m, NoiseModel(1e-2, 1e-2), channels=4)
        assert torch.allclose(bound(x), m(x, hi))
        assert torch.allclose(call(m, x, hi), m(x, hi))
    with pytest.raises(RawrclError, match="noise-aware"):
        m(x)
    blind = build_model({"in_channels": 4, "head": "raw", **SMALL})
    with pytest.raises(RawrclError, match="blind"):
        blind(x, lo)
    assert torch.allclose(call(blind, x, lo), blind(x))  # callers need not know


def test_noise_aware_checkpoint_roundtrip(tmp_path):
    m = build_model({"in_channels": 4, "head": "jdd", "noise_aware": True, "skip": True, **SMALL})
    save_checkpoint(tmp_path / "m.pt", m)
    m2, cfg = load_checkpoint(tmp_path / "m.pt")
    assert cfg["noise_aware"] is True
    x, n = torch.rand(1, 4, 8, 8), torch.full((1, 2, 4), 1e-3)
    with torch.no_grad():
        assert torch.allclose(m.eval()(x, n), m2(x, n))


def test_two_stage_jdd_checkpoint(tmp_path):
    """A RAW denoiser then a noise-aware JDD network told λ × residual: saved as one checkpoint (arch
    ``two_stage``) that rebuilds itself and computes exactly the two stages; bad stage configs are refused."""
    from rawrcl.models import DenoiseThenDemosaic
    from rawrcl.models.loading import load_for_task, save_two_stage

    torch.manual_seed(0)
    den = build_model(
        {"in_channels": 4, "head": "raw", "width": 8, "depth": 2, "skip": True, "noise_aware": True}
    )
    dem = build_model(
        {"in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "skip": True, "noise_aware": True}
    )
    save_checkpoint(tmp_path / "den.pt", den)
    save_checkpoint(tmp_path / "dem.pt", dem)
    out = save_two_stage(tmp_path / "den.pt", tmp_path / "dem.pt", tmp_path / "two.pt", residual=0.04)
    model, cfg = load_for_task(out, "jdd")
    assert isinstance(model, DenoiseThenDemosaic) and model.noise_aware and cfg["arch"] == "two_stage"
    x = torch.rand(2, 4, 12, 10)
    noise = torch.tensor([[2e-2] * 4, [1e-3] * 4]).expand(2, 2, 4)  # above the gates: one pass of each stage
    with torch.no_grad():
        want = dem(den(x, noise), noise * 0.04)
        got = model(x, noise)
    assert got.shape == (2, 3, 24, 20) and torch.allclose(got, want, atol=1e-6)
    with pytest.raises(RawrclError, match="noise-aware"):
        model(x)  # the noise is required
    with pytest.raises(RawrclError, match="needs head"):
        load_for_task(out, "raw-denoise")  # a two-stage model is a JDD model only
    with pytest.raises(RawrclError, match="demosaicker"):
        model_config({**cfg, "demosaicker": den.config})  # the second stage must be a JDD network
    with pytest.raises(RawrclError, match="residual"):
        model_config({**cfg, "residual": 0})
    from rawrcl.tasks import get_task
    from rawrcl.train.finetuning import prepare_model

    with pytest.raises(RawrclError, match="two-stage"):
        prepare_model(out, get_task("jdd"), "full")
    swapped = save_two_stage(tmp_path / "den.pt", out, tmp_path / "swap.pt")  # another model's second stage
    assert torch.allclose(load_for_task(swapped, "jdd")[0].demosaicker.head.conv.weight, dem.head.conv.weight)
    bilinear = build_model({**cfg, "demosaicker": None})  # no second stage: the bilinear demosaic
    assert bilinear(x, noise).shape == (2, 3, 24, 20)


def test_two_stage_raw_output_is_the_cfa_site_blend(tmp_path):
    """Output ``"raw"``: blend × the JDD RGB at the CFA sites + (1 − blend) × the first stage, (B, 4, h, w);
    the checkpoint rebuilds it, serves JDD as the same stages' RGB, and gives its first stage to
    ``save_two_stage``; a RAW output without a JDD network, or a blend outside (0, 1], is refused."""
    from rawrcl.cfa import mosaic_packed
    from rawrcl.models import DenoiseThenDemosaic
    from rawrcl.models.compose import first_stage
    from rawrcl.models.loading import load_for_task, save_two_stage
    from rawrcl.models.registry import read_checkpoint

    torch.manual_seed(0)
    base = {"in_channels": 4, "width": 8, "depth": 2, "skip": True, "noise_aware": True}
    den, dem = build_model({**base, "head": "raw"}), build_model({**base, "head": "jdd"})
    save_checkpoint(tmp_path / "den.pt", den)
    save_checkpoint(tmp_path / "dem.pt", dem)
    path = save_two_stage(
        tmp_path / "den.pt", tmp_path / "dem.pt", tmp_path / "raw.pt", 0.04, None, "raw", 0.3, 0.0
    )
    model, cfg = load_for_task(path, "raw-denoise")
    assert cfg["head"] == "raw" and cfg["blend"] == 0.3 and model.head_name == "raw"
    x = torch.rand(2, 4, 12, 10)
    noise = torch.tensor([[2e-2] * 4, [1e-3] * 4]).expand(2, 2, 4)  # above the gates: one pass of each stage
    with torch.no_grad():
        y = den(x, noise)
        rgb = dem(y, noise * 0.04)
        want = 0.3 * mosaic_packed(rgb, "RGGB") + 0.7 * y
        got = model(x, noise)
        assert got.shape == (2, 4, 12, 10) and torch.allclose(got, want, atol=1e-6)
        as_jdd, _ = load_for_task(path, "jdd")  # the same stages' RGB
        assert torch.allclose(as_jdd(x, noise), rgb, atol=1e-6)
    assert first_stage(model) is model.denoiser and first_stage(den) is den
    again = save_two_stage(path, path, tmp_path / "again.pt")  # its first and second stage, RGB out
    assert read_checkpoint(again)["config"]["head"] == "jdd"
    with pytest.raises(RawrclError, match="needs a JDD model"):
        model_config({**cfg, "demosaicker": None})
    with pytest.raises(RawrclError, match="blend"):
        model_config({**cfg, "blend": 1.5})
    with pytest.raises(ValueError, match="needs a JDD network"):
        DenoiseThenDemosaic(den, None, output="raw")
    assert "blend" not in model.with_output("jdd").config  # a JDD file's config is unchanged


def test_two_stage_with_a_row_aware_denoiser():
    """A row-aware (adapted, banded camera) denoiser makes the two-stage model row-aware: the denoiser reads
    σ_row², the JDD stage is told the white noise only; the config says so (export refuses it)."""
    from rawrcl.models import DenoiseThenDemosaic
    from rawrcl.models.conditioning import add_row_input, is_row_aware

    torch.manual_seed(0)
    base = {"in_channels": 4, "width": 8, "depth": 2, "skip": True, "noise_aware": True}
    den = add_row_input(build_model({**base, "head": "raw"}))
    first = next(m for m in den.body.modules() if isinstance(m, torch.nn.Conv2d))
    with torch.no_grad():
        first.weight.normal_()  # make σ_row matter (its new inputs start at zero weight)
    dem = build_model({**base, "head": "jdd"})
    model = DenoiseThenDemosaic(den, dem, 0.1)
    assert is_row_aware(model) and build_model(model.config).row_aware
    x = torch.rand(1, 4, 12, 10)
    white = torch.tensor([[1e-2] * 4, [1e-4] * 4])[None]
    banded = torch.cat([white, torch.full((1, 1, 4), 4e-4)], dim=1)
    with torch.no_grad():
        got = model(x, banded)
        assert torch.allclose(got, dem(den(x, banded), white * 0.1), atol=1e-6)
        assert not torch.allclose(got, model(x, white))


@pytest.mark.parametrize(
    "config,new_width",
    [
        ({"in_channels": 4, "head": "jdd", "width": 6, "depth": 3, "skip": True, "noise_aware": True}, 9),
        (
            {
                "in_channels": 4,
                "head": "raw",
                "width": 5,
                "depth": 2,
                "skip": True,
                "noise_aware": True,
                "row_aware": True,
            },
            8,
        ),
        ({"in_channels": 3, "head": "rgb", "width": 3, "depth": 4}, 4),  # the 8×width cap on the bottom level
        (  # trained (non-identity) top-level residual blocks are widened too
            {"in_channels": 4, "head": "jdd", "width": 5, "depth": 2, "noise_aware": True, "refine": 2},
            7,
        ),
    ],
)
def test_widen_keeps_the_function_and_breaks_the_symmetry(config, new_width):
    from rawrcl.models.widen import widen

    torch.manual_seed(0)
    model = build_model({"arch": "unet", **config}).eval()
    wide = widen(model, new_width, seed=1)
    assert wide.config["width"] == new_width and not wide.training
    assert sum(p.numel() for p in wide.parameters()) > sum(p.numel() for p in model.parameters())
    x = torch.rand(2, config["in_channels"], 20, 28)
    rows = 3 if config.get("row_aware") else 2
    noise = torch.tensor([[2e-3] * 4, [1e-5] * 4, [1e-6] * 4])[None, :rows].repeat(2, 1, 1)
    args = (x, noise) if config.get("noise_aware") else (x,)
    with torch.no_grad():
        torch.testing.assert_close(wide(*args), model(*args), atol=1e-5, rtol=1e-4)
    # replicas of one channel start with equal incoming weights but are read with different weights, so
    # they get different gradients (otherwise the extra width could never learn anything new)
    wide(*args).square().mean().backward()
    old_w = config["width"]
    first = wide.body.down[0][0]
    grads = first.weight.grad.flatten(1)
    for j in range(old_w, new_width):
        src = next(k for k in range(old_w) if torch.equal(first.weight[j], first.weight[k]))
        assert not torch.allclose(grads[j], grads[src])


def test_deepen_keeps_the_function_and_learns(tmp_path):
    from rawrcl.models.widen import deepen

    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 6, "depth": 2, "skip": True}
    model = build_model({**cfg, "noise_aware": True}).eval()
    assert "refine" not in model.config  # configs without the blocks are stored as before
    deep = deepen(model, 2)
    assert deep.config["refine"] == 2 and len(deep.body.refine) == 2 and not deep.training
    x, noise = torch.rand(2, 4, 18, 22), torch.tensor([[2e-3] * 4, [1e-5] * 4])[None].repeat(2, 1, 1)
    with torch.no_grad():
        assert torch.equal(deep(x, noise), model(x, noise))
    deeper = deepen(deep, 1)  # blocks add up; the trained ones are kept
    assert deeper.config["refine"] == 3
    assert torch.equal(deeper.body.refine[0][0].weight, deep.body.refine[0][0].weight)
    # the zero-initialised convolutions get gradients, so the blocks can learn
    deep.train()
    deep(x, noise).square().mean().backward()
    assert all(blk[2].weight.grad.abs().sum() > 0 for blk in deep.body.refine)
    save_checkpoint(tmp_path / "deep.pt", deep)
    back = load_checkpoint(tmp_path / "deep.pt")[0].eval()
    with torch.no_grad():
        assert torch.equal(back(x, noise), deep.eval()(x, noise))
    with pytest.raises(RawrclError, match="≥ 1"):
        deepen(model, 0)
    with pytest.raises(RawrclError, match="U-Net"):
        deepen(build_model({"arch": "dncnn", "in_channels": 4, "head": "raw", "width": 4, "depth": 3}), 1)
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(RawrclError, match="refine"):
            build_model({**cfg, "refine": bad})


def test_widen_refuses_what_it_cannot_widen():
    from rawrcl.models.widen import widen

    unet = build_model({"arch": "unet", "in_channels": 4, "head": "raw", "width": 4, "depth": 2})
    with pytest.raises(RawrclError, match="exceed"):
        widen(unet, 4)
    with pytest.raises(RawrclError, match="U-Net"):
        widen(build_model({"arch": "dncnn", "in_channels": 4, "head": "raw", "width": 4, "depth": 3}), 8)


def test_two_pass_first_stage_is_the_mean_over_the_transposed_mosaic():
    from torch import nn

    from rawrcl.cfa import TRANSPOSED_PLANES
    from rawrcl.infer.pipeline import TileOptions
    from rawrcl.models.compose import DenoiseThenDemosaic, two_pass_stages
    from rawrcl.models.heads import bilinear_demosaic_packed

    torch.manual_seed(0)
    conv = nn.Conv2d(4, 4, 3, padding=1)  # not equivariant under the transpose

    def t(z: torch.Tensor) -> torch.Tensor:  # packed RGGB of the transposed mosaic
        return z[:, TRANSPOSED_PLANES].transpose(-1, -2)

    model = DenoiseThenDemosaic(conv).eval()
    x = torch.rand(1, 4, 8, 12)
    with torch.no_grad():
        one, want = conv(x), 0.5 * (conv(x) + t(conv(t(x))))
        torch.testing.assert_close(model.first(x), one)
        with two_pass_stages(model):
            torch.testing.assert_close(model.first(x), want)
            model.train()
            torch.testing.assert_close(model.first(x), one)  # training keeps one pass
            model.eval()
        assert model.two_pass is None  # restored (the default: the low-noise pass of a JDD stage)
        out = TileOptions(tile=64, overlap=8, precision="fp32", two_pass=True).apply(
            model, x, scale=2
        )  # the commands' path
        torch.testing.assert_close(out, bilinear_demosaic_packed(want), atol=1e-5, rtol=1e-5)
    with pytest.raises(RawrclError, match="--two-pass runs torch models only"):
        from rawrcl.infer.pipeline import task_model

        task_model("no-such.onnx", "raw-denoise", TileOptions(two_pass=True))


def test_two_pass_jdd_stage_is_the_mean_over_the_transposed_mosaic_transposed_back():
    from torch import nn

    from rawrcl.cfa import TRANSPOSED_PLANES
    from rawrcl.models import build_model
    from rawrcl.models.compose import DenoiseThenDemosaic, two_pass_stages

    torch.manual_seed(1)
    conv = nn.Conv2d(4, 4, 3, padding=1)
    jdd = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2}).eval()
    model = DenoiseThenDemosaic(conv, jdd).eval()
    x = torch.rand(1, 4, 8, 12)
    with torch.no_grad():
        y = model.first(x)
        one = jdd(y)
        t = jdd(y[:, TRANSPOSED_PLANES].transpose(-1, -2)).transpose(-1, -2)
        torch.testing.assert_close(model.second(x, y, None), one)
        with two_pass_stages(model):
            torch.testing.assert_close(model.second(x, y, None), 0.5 * (one + t))
            y2 = model.first(x)  # the first stage's two passes feed the JDD stage's
            t2 = jdd(y2[:, TRANSPOSED_PLANES].transpose(-1, -2)).transpose(-1, -2)
            torch.testing.assert_close(model(x), 0.5 * (jdd(y2) + t2))
    assert not torch.allclose(one, t, atol=1e-4)  # the network is not transpose-equivariant: a real average
    raw = model.with_output("raw")  # the CFA-site blend keeps one pass of the JDD stage
    with torch.no_grad(), two_pass_stages(raw):
        torch.testing.assert_close(raw.second(x, y, None), one)


def test_first_stage_averages_its_orientations_by_default_where_the_told_noise_is_low():
    """Stop 98: the first stage of both outputs takes the JDD stage's gate — four orientations at base ISO,
    the pair at a phone's base ISO, one above; one with --one-pass and in training, at least two with
    --two-pass."""
    from torch import nn

    from rawrcl.cfa import TRANSPOSED_PLANES, pack, unpack
    from rawrcl.models import build_model
    from rawrcl.models.compose import DenoiseThenDemosaic, two_pass_stages

    torch.manual_seed(3)
    conv = nn.Conv2d(4, 4, 3, padding=1)  # not equivariant under any turn
    jdd = build_model(
        {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "noise_aware": True}
    ).eval()
    model = DenoiseThenDemosaic(conv, jdd).eval()
    x = torch.rand(3, 4, 8, 12)
    noise = torch.tensor([[[2e-5] * 4, [1e-8] * 4], [[1e-3] * 4, [2e-6] * 4], [[1e-2] * 4, [1.6e-3] * 4]])

    def tr(z: torch.Tensor) -> torch.Tensor:  # packed RGGB of the transposed mosaic; its own inverse
        return z[:, TRANSPOSED_PLANES].transpose(-1, -2)

    def rot(z: torch.Tensor) -> torch.Tensor:  # the mosaic padded 1 px (its phase kept) and turned 180°
        m = torch.nn.functional.pad(unpack(z, "RGGB")[:, None], (1, 1, 1, 1), mode="reflect")
        return pack(m[:, 0].flip(-2, -1), "RGGB")

    def unrot(z: torch.Tensor) -> torch.Tensor:
        return pack(unpack(z, "RGGB").flip(-2, -1)[..., 1:-1, 1:-1], "RGGB")

    with torch.no_grad():
        one, t = conv(x), tr(conv(tr(x)))
        r, rt = unrot(conv(rot(x))), unrot(tr(conv(tr(rot(x)))))
        four, pair = (one + t + r + rt) / 4, 0.5 * (one + t)
        assert model.first_passes(noise).tolist() == [4, 2, 1]
        y = model.first(x, noise)
        torch.testing.assert_close(y[0], four[0])
        torch.testing.assert_close(y[1], pair[1])
        torch.testing.assert_close(y[2], one[2])
        raw = model.with_output("raw")  # the CFA-site blend's first part too; its JDD stage one pass
        torch.testing.assert_close(raw.parts(x, noise)[0], y)
        assert raw.jdd_passes(noise).tolist() == [1, 1, 1] and raw.first_passes(noise).tolist() == [4, 2, 1]
        l6 = torch.tensor([[[1.2e-2] * 4, [2e-4] * 4]])  # std 0.0486 at mid-grey: the first stage's pair only
        assert model.first_passes(l6).tolist() == [2] and model.jdd_passes(l6).tolist() == [1]
        torch.testing.assert_close(model.first(x[:1], l6), pair[:1])
        torch.testing.assert_close(model.first(x), one)  # no noise told: one pass
        with two_pass_stages(model, False):  # --one-pass
            torch.testing.assert_close(model.first(x, noise), one)
        with two_pass_stages(model, True):  # --two-pass: at least the pair
            y2 = model.first(x, noise)
            torch.testing.assert_close(y2[0], four[0])
            torch.testing.assert_close(y2[1:], pair[1:])
        model.train()
        torch.testing.assert_close(model.first(x, noise), one)  # training keeps one pass
        model.eval()
        model.fixed_passes = (2, 1)  # a graph with a noise input for one gate (--backend onnxruntime)
        assert model.first_passes(noise).tolist() == [2, 2, 2]
        assert model.jdd_passes(noise).tolist() == [1, 1, 1]
        model.fixed_passes = (2, 2)
        assert model.first_passes(noise).tolist() == model.jdd_passes(noise).tolist() == [2, 2, 2]
        torch.testing.assert_close(model.first(x, noise), pair)
        with two_pass_stages(model, False):
            assert model.first_passes(noise).tolist() == [1, 1, 1]
        model.fixed_passes = None
    assert not torch.allclose(one, r, atol=1e-4) and not torch.allclose(one, t, atol=1e-4)


def test_jdd_stage_averages_its_orientations_by_default_only_where_the_told_noise_is_low():
    from torch import nn

    from rawrcl.cfa import TRANSPOSED_PLANES, pack, unpack
    from rawrcl.models import build_model
    from rawrcl.models.compose import (
        QUAD_GATE,
        RESIDUAL,
        SIGMA_GATE,
        DenoiseThenDemosaic,
        mid_grey_sigma,
        passes,
        two_pass_stages,
    )
    from rawrcl.models.geometry import pad_to_multiple, size_multiple

    torch.manual_seed(2)
    jdd = build_model(
        {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "noise_aware": True}
    ).eval()
    model = DenoiseThenDemosaic(nn.Conv2d(4, 4, 3, padding=1), jdd).eval()
    x = torch.rand(3, 4, 8, 12)
    # base ISO (σ at mid-grey 0.0019), a phone's base ISO (0.0134) and a high ISO (0.058): one tile each
    noise = torch.tensor([[[2e-5] * 4, [1e-8] * 4], [[1e-3] * 4, [2e-6] * 4], [[1e-2] * 4, [1.6e-3] * 4]])
    sigma = mid_grey_sigma(noise)
    assert sigma[0] <= QUAD_GATE < sigma[1] <= SIGMA_GATE < sigma[2]
    torch.testing.assert_close(sigma[2], torch.tensor((1e-2 * 0.18 + 1.6e-3) ** 0.5))

    def turned(packed: torch.Tensor, told: torch.Tensor) -> torch.Tensor:
        """The JDD stage on the mosaic turned 180° (padded 1 px to keep its phase, then to the network's
        size multiple), its RGB turned back."""
        m = torch.nn.functional.pad(unpack(packed, "RGGB")[:, None], (1, 1, 1, 1), mode="reflect")
        q = pack(m[:, 0].flip(-2, -1), "RGGB")
        rgb = jdd(pad_to_multiple(q, size_multiple(jdd)), told)[..., : 2 * q.shape[-2], : 2 * q.shape[-1]]
        return rgb.flip(-2, -1)[..., 1:-1, 1:-1]

    with torch.no_grad():
        y = model.first(x, noise)
        told = noise * RESIDUAL
        one = jdd(y, told)
        ty, tt = y[:, TRANSPOSED_PLANES].transpose(-1, -2), told[..., TRANSPOSED_PLANES]
        t = jdd(ty, tt).transpose(-1, -2)
        r = turned(y, told)
        rt = turned(ty, tt).transpose(-1, -2)
        assert model.two_pass is None
        out = model.second(x, y, noise)  # the default: four, two or one orientation(s) by the told noise
        torch.testing.assert_close(out[0], (one[0] + t[0] + r[0] + rt[0]) / 4)
        torch.testing.assert_close(out[1], 0.5 * (one[1] + t[1]))
        torch.testing.assert_close(out[2], one[2])
        torch.testing.assert_close(model.second(x[:1], y[:1], noise[:1]), out[:1])  # a batch all of one count
        assert model.jdd_passes(noise).tolist() == [4, 2, 1]
        from rawrcl.noise import PRESETS

        ladder = torch.tensor([[[PRESETS[k][0]] * 4, [PRESETS[k][1]] * 4] for k in ("L2", "L4", "low", "L5")])
        assert model.jdd_passes(ladder).tolist() == [4, 2, 1, 1]  # the pair up to L4 (stop 97), not `low`
        levels = ("L2", "L4", "low", "L5", "L6", "high")  # the first stage's pair up to L6 (stop 101)
        ladder = torch.tensor([[[PRESETS[k][0]] * 4, [PRESETS[k][1]] * 4] for k in levels])
        assert model.first_passes(ladder).tolist() == [4, 2, 2, 2, 2, 1]
        with two_pass_stages(model, False):  # --one-pass
            torch.testing.assert_close(model.second(x, y, noise), one)
        with two_pass_stages(model, True):  # --two-pass: at least the pair for every sample
            out = model.second(x, y, noise)
            torch.testing.assert_close(out[0], (one[0] + t[0] + r[0] + rt[0]) / 4)
            torch.testing.assert_close(out[1:], 0.5 * (one[1:] + t[1:]))
        model.train()
        torch.testing.assert_close(model.second(x, y, noise), one)  # training keeps one pass
        model.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the commands' precision on bf16 CPUs
            low = model.second(x, y, noise)
        assert low.dtype == torch.bfloat16
        torch.testing.assert_close(low[0].float(), (one[0] + t[0] + r[0] + rt[0]) / 4, atol=0.03, rtol=0.03)
    assert not torch.allclose(one[0], t[0], atol=1e-4) and not torch.allclose(one[0], r[0], atol=1e-4)
    # the self-ensemble already averages the orientations: the default passes are off there
    assert passes(None, self_ensemble=True) is False
    assert passes(True, self_ensemble=True) is True and passes(None) is None
