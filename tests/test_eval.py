"""Metrics, classical baselines (incl. OpenCV Bayer naming), evaluate() and the eval CLI."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from skimage import data
from skimage.io import imsave
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError
from rawrcl.eval import BASELINES, evaluate, psnr, ssim, to_uint8
from rawrcl.eval.baselines import _demosaic
from rawrcl.tasks import TASKS


@pytest.fixture(scope="module")
def photos():
    return [("astronaut", data.astronaut()[60:188, 160:288]), ("chelsea", data.chelsea()[40:168, 100:228])]


def test_metrics_are_skimage_defaults_on_cropped_uint8():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-9, 10, a.shape), 0, 255).astype(np.uint8)
    c = (slice(8, -8), slice(8, -8))
    assert psnr(b, a) == pytest.approx(peak_signal_noise_ratio(a[c], b[c], data_range=255))
    assert ssim(b, a) == pytest.approx(structural_similarity(a[c], b[c], data_range=255, channel_axis=2))
    assert psnr(a, a) == float("inf")
    b2 = b.copy()
    b2[:8] = 0  # the border does not count
    assert psnr(b2, a) == psnr(b, a)
    u8 = to_uint8(torch.tensor([[[0.0, 0.5, 1.2]]] * 3))
    assert u8.tolist()[0] == [[0, 0, 0], [128, 128, 128], [255, 255, 255]]


@pytest.mark.parametrize("name", ["bilinear", "malvar", "menon", "vng", "ea"])
def test_demosaicers_get_rggb_colours_right(name):
    """A flat orange RGGB mosaic must come back orange (catches OpenCV's BayerBG/RG naming)."""
    rgb = torch.zeros(3, 32, 32)
    rgb[0], rgb[1], rgb[2] = 0.9, 0.5, 0.1
    out = _demosaic(name, mosaic_packed(rgb, "RGGB"))
    assert out.shape == (3, 32, 32)
    centre = out[:, 8:-8, 8:-8].mean(dim=(1, 2))
    assert torch.allclose(centre, torch.tensor([0.9, 0.5, 0.1]), atol=0.01)


def test_noise_free_demosaicing_quality(photos):
    names = ("bilinear", "malvar", "menon", "vng", "ea")
    res = {b: evaluate(b, "jdd", photos, noise="none")["psnr"] for b in names}
    assert res["bilinear"] > 28 and res["menon"] > res["bilinear"] + 4
    assert res["malvar"] > res["bilinear"] + 2 and res["vng"] > res["bilinear"] + 2
    assert res["ea"] > 28


def test_evaluate_is_deterministic_and_nlm_helps(photos):
    r1 = evaluate("menon", "jdd", photos, noise="high", seed=1)
    r2 = evaluate("menon", "jdd", photos, noise="high", seed=1)
    assert r1["psnr"] == r2["psnr"] and r1["n_images"] == 2 and "psnr_linear" in r1
    assert evaluate("menon+nlm", "jdd", photos, noise="high", seed=1)["psnr"] > r1["psnr"] + 1.5
    noisy = evaluate("noisy", "denoise", photos, noise="high")
    assert evaluate("nlm", "denoise", photos, noise="high")["psnr"] > noisy["psnr"] + 3
    assert evaluate("bicubic", "sr", photos)["psnr"] > 22


def test_evaluate_default_is_the_shipped_weights(photos):
    """``"default"`` scores the task's shipped weights (as ``--burst default`` does), well above the input."""
    res = evaluate("default", "raw-denoise", photos, noise="high", seed=2)
    assert res["model"] == "default" and res["n_images"] == 2
    noisy = evaluate("noisy", "raw-denoise", photos, noise="high", seed=2)
    assert res["psnr_linear"] > noisy["psnr_linear"] + 3
    with pytest.raises(RawrclError, match="default"):
        evaluate("no-such-model", "raw-denoise", photos, noise="high")


def test_evaluate_module_matches_baseline(photos):
    class Identity(torch.nn.Module):
        def forward(self, x):
            return x

    a = evaluate(Identity(), "denoise", photos, noise="low")
    b = evaluate("noisy", "denoise", photos, noise="low")
    assert a["psnr"] == pytest.approx(b["psnr"]) and a["ssim"] == pytest.approx(b["ssim"])


def test_baselines_refuse_wrong_tasks(photos):
    with pytest.raises(RawrclError):
        evaluate("nlm", "jdd", photos)
    with pytest.raises(RawrclError):
        evaluate("menon", "denoise", photos)
    with pytest.raises(RawrclError):
        evaluate("/no/such/ckpt.pt", "jdd", photos)
    assert set(BASELINES) >= {"bilinear", "malvar", "menon", "vng", "ea", "menon+nlm", "nlm", "bicubic"}
    assert TASKS["jdd"].head == "jdd"


def test_eval_cli_json_and_errors(tmp_path, photos):
    from rawrcl.cli import main

    for name, img in photos:
        imsave(tmp_path / f"{name}.png", img, check_contrast=False)
    r = CliRunner().invoke(
        main,
        [
            "eval",
            "bilinear",
            "--task",
            "jdd",
            "--clean-dir",
            str(tmp_path),
            "--noise",
            "0.01,0.0016",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {"psnr", "ssim", "n_images", "task", "model"} <= set(out) and out["n_images"] == 2
    r = CliRunner().invoke(main, ["eval", "menon", "--task", "jdd", "--clean-dir", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "Traceback" not in r.output


def test_raw_denoiser_is_scored_on_jdd_as_denoise_then_bilinear(photos, tmp_path):
    """A head-'raw' checkpoint on --task jdd runs as bilinear_demosaic(denoiser(x)): with an identity
    denoiser (skip + zeroed head) it must score like the bilinear baseline; other heads still fail."""
    from rawrcl.models import DenoiseThenDemosaic, build_model, save_checkpoint
    from rawrcl.models.loading import load_for_task

    m = build_model({"arch": "unet", "in_channels": 4, "head": "raw", "width": 8, "depth": 2, "skip": True})
    torch.nn.init.zeros_(m.head.conv.weight)
    torch.nn.init.zeros_(m.head.conv.bias)
    ckpt = tmp_path / "raw.pt"
    save_checkpoint(ckpt, m)
    model, _ = load_for_task(ckpt, TASKS["jdd"])
    assert isinstance(model, DenoiseThenDemosaic)
    x = torch.rand(1, 4, 12, 10)
    assert model(x).shape == (1, 3, 24, 20)
    ours = evaluate(ckpt, "jdd", photos, "high", 0)
    ref = evaluate("bilinear", "jdd", photos, "high", 0)
    assert ours["psnr"] == pytest.approx(ref["psnr"], abs=0.05)
    with pytest.raises(RawrclError, match="needs"):
        load_for_task(ckpt, TASKS["denoise"])[0]


def test_self_ensemble_eval(photos):
    """`self_ensemble` averages 8 flips of a model; an equivariant model (bilinear) scores the same, a
    baseline name refuses it."""
    from rawrcl.models.heads import bilinear_demosaic_packed

    class Bilinear(torch.nn.Module):
        def forward(self, x):
            return bilinear_demosaic_packed(x)

    plain = evaluate(Bilinear(), "jdd", photos, "high", 0)
    ens = evaluate(Bilinear(), "jdd", photos, "high", 0, self_ensemble=True)
    assert ens["psnr"] == pytest.approx(plain["psnr"], abs=0.02) and "self-ensemble" in ens["model"]
    with pytest.raises(RawrclError, match="baselines"):
        evaluate("bilinear", "jdd", photos, "high", 0, self_ensemble=True)


# ----------------------------------------------------------------------------------------------- LibRaw
LIBRAW = ("libraw-ahd", "libraw-aahd", "libraw-dht", "libraw-dht+fbdd")


def _smooth_scene(h: int = 96, w: int = 128) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    return np.stack([0.2 + 0.1 * np.sin(6 * xx), 0.3 + 0.1 * np.cos(5 * yy), 0.15 + 0.05 * xx + 0.02 * yy])


@pytest.mark.parametrize("name", LIBRAW)
def test_libraw_baselines_units_and_colours(name):
    """A flat orange RGGB mosaic comes back orange in [0, 1] linear units (no white balance, no colour matrix,
    no brightening, no gamma from LibRaw)."""
    rgb = torch.zeros(3, 48, 64)
    rgb[0], rgb[1], rgb[2] = 0.6, 0.3, 0.05
    out = BASELINES[name](mosaic_packed(rgb, "RGGB"), TASKS["jdd"], {})
    assert out.shape == (3, 48, 64) and out.dtype == torch.float32
    assert torch.allclose(out[:, 8:-8, 8:-8].mean(dim=(1, 2)), torch.tensor([0.6, 0.3, 0.05]), atol=2e-3)


@pytest.mark.parametrize("pattern", ["RGGB", "GRBG", "BGGR", "GBRG"])
def test_libraw_demosaic_follows_the_bayer_phase(pattern):
    from rawrcl.cfa import positions
    from rawrcl.eval.libraw import libraw_demosaic

    scene = _smooth_scene()
    cfa = np.zeros(scene.shape[1:])
    for site, (r, c) in positions(pattern).items():
        cfa[r::2, c::2] = scene["RGB".index(site[0]), r::2, c::2]
    for algo in ("ahd", "dht"):
        out = libraw_demosaic(cfa, pattern, algo)
        err = (out - scene)[:, 8:-8, 8:-8]
        assert -10 * np.log10(np.mean(err**2)) > 55, (pattern, algo)  # a wrong phase gives ≈ 20 dB
    clipped = libraw_demosaic(np.clip(cfa * 8 - 1, -1, 2), pattern, "ahd")
    assert clipped.min() >= 0 and clipped.max() <= 1
    with pytest.raises(RawrclError, match="unknown LibRaw"):
        libraw_demosaic(cfa, pattern, "amaze")


def test_libraw_baselines_in_evaluate(photos):
    """Noise-free: LibRaw's AHD/DHT well above bilinear; with noise FBDD removes some of it."""
    clean = {b: evaluate(b, "jdd", photos, noise="none")["psnr"] for b in ("bilinear", *LIBRAW[:3])}
    assert clean["libraw-ahd"] > clean["bilinear"] + 3 and clean["libraw-dht"] > clean["bilinear"] + 3
    noisy = {
        b: evaluate(b, "jdd", photos, noise="high", seed=1)["psnr"] for b in ("libraw-dht", "libraw-dht+fbdd")
    }
    assert noisy["libraw-dht+fbdd"] > noisy["libraw-dht"] + 0.3
    with pytest.raises(RawrclError):
        evaluate("libraw-ahd", "raw-denoise", photos)


def test_bm3d_then_demosaic_baselines(photos):
    """The classical two-step JDD pipelines: GAT+BM3D (true noise) then Menon / LibRaw DHT — far above the
    same demosaicers on the noisy mosaic; not offered without noise."""
    from rawrcl.eval import baseline_applies

    res = {
        b: evaluate(b, "jdd", photos, noise="high", seed=1)["psnr_linear"] for b in ("menon", "libraw-dht")
    }
    for name, plain in (("gat+bm3d+menon", "menon"), ("gat+bm3d+dht", "libraw-dht")):
        assert evaluate(name, "jdd", photos, noise="high", seed=1)["psnr_linear"] > res[plain] + 3
        assert not baseline_applies(name, TASKS["jdemsr"])  # noise-free demosaicing + SR
