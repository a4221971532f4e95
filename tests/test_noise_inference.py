"""Noise-aware inference (rawrcl denoise/jdd --noise …) and real-burst evaluation (rawrcl eval --burst).

All data is synthesised here: noisy Bayer DNGs of one smooth scene (scikit-image's astronaut) shifted by a
few pixels per frame, with or without a DNG NoiseProfile.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from rawrcl.cli import main

SIZE = 256
LS, LR = 4e-3, 1e-4
BLACK, WHITE = 512, 16383


def _scene() -> np.ndarray:
    """Smooth linear RGB (3, SIZE + 32, SIZE + 32) in [0.02, 0.62]."""
    from scipy import ndimage
    from skimage import data

    img = data.astronaut()[64 : 64 + SIZE + 32, 128 : 128 + SIZE + 32].astype(np.float64) / 255
    lin = img**2.2 * 0.6 + 0.02
    return np.stack([ndimage.gaussian_filter(lin[..., c], 1.0) for c in range(3)])


def _frame(scene: np.ndarray, dy: int, dx: int, pattern: str, rng) -> np.ndarray:
    """Noisy mosaic (SIZE, SIZE) in [0, 1] units of the scene shifted by (dy, dx) pixels."""
    from rawrcl.cfa import mosaic

    crop = scene[:, 16 + dy : 16 + dy + SIZE, 16 + dx : 16 + dx + SIZE]
    clean = np.asarray(mosaic(crop.astype(np.float32), pattern))[0].astype(np.float64)
    return clean + rng.normal(size=clean.shape) * np.sqrt(LS * clean + LR)


def _write(path: Path, cfa01: np.ndarray, pattern: str, noise_profile=None) -> Path:
    from rawrcl.io.dng import write_dng

    dn = np.clip(np.rint(cfa01 * (WHITE - BLACK) + BLACK), 0, WHITE).astype(np.uint16)
    return write_dng(path, dn, pattern, BLACK, WHITE, noise_profile=noise_profile, overwrite=True)


@pytest.fixture(scope="module")
def burst_dir(tmp_path_factory) -> Path:
    """Five noisy GRBG DNGs of one static scene, shifted by up to 3 px, no NoiseProfile."""
    d = tmp_path_factory.mktemp("burst")
    rng = np.random.default_rng(1)
    scene = _scene()
    for k, (dy, dx) in enumerate([(0, 0), (1, 2), (-2, 1), (3, -1), (-1, -3)]):
        _write(d / f"frame{k:02d}.dng", _frame(scene, dy, dx, "GRBG", rng), "GRBG")
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Tiny untrained checkpoints: a noise-aware and a blind RAW denoiser, a noise-aware RGB denoiser."""
    from rawrcl.models.registry import build_model, save_checkpoint

    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, cfg in {
        "aware": {"in_channels": 4, "head": "raw", "noise_aware": True},
        "blind": {"in_channels": 4, "head": "raw"},
        "rgb_aware": {"in_channels": 3, "head": "rgb", "noise_aware": True},
    }.items():
        torch.manual_seed(0)
        m = build_model({"arch": "unet", "width": 8, "depth": 2, "skip": True, **cfg})
        save_checkpoint(d / f"{name}.pt", m)
        out[name] = d / f"{name}.pt"
    return out


@pytest.fixture
def spy(monkeypatch) -> list[torch.Tensor]:
    """Records the noise parameters every RestorationModel forward is given."""
    from rawrcl.models.registry import RestorationModel

    seen: list[torch.Tensor] = []
    orig = RestorationModel.forward

    def forward(self, x, noise=None):
        if noise is not None:
            seen.append(noise.detach().clone())
        return orig(self, x, noise)

    monkeypatch.setattr(RestorationModel, "forward", forward)
    return seen


def _run(args: list[str]):
    return CliRunner().invoke(main, args)


# ------------------------------------------------------------------------------------------- denoise
def test_auto_without_noise_profile_logs_the_image_estimate(burst_dir, models, tmp_path, spy):
    r = _run(
        [
            "denoise",
            str(burst_dir / "frame00.dng"),
            "-o",
            str(tmp_path / "o.dng"),
            "--model",
            str(models["aware"]),
        ]
    )
    assert r.exit_code == 0, r.output
    assert "frame00.dng: noise from image estimate (no NoiseProfile): λshot" in r.stdout
    assert spy, "the model was not given the noise"
    est = spy[0][0].numpy()  # (2, 4)
    std = np.sqrt(est[0] * 0.3 + est[1])
    np.testing.assert_allclose(std, np.sqrt(LS * 0.3 + LR), rtol=0.3)  # a sane estimate per plane


def test_noise_profile_is_used_per_plane(burst_dir, models, tmp_path, spy):
    """A DNG NoiseProfile of 3 (R, G, B) pairs reaches the model as the canonical R, G1, G2, B planes."""
    from rawrcl.io.raw import read_raw

    raw = read_raw(burst_dir / "frame00.dng", clip=False)
    src = _write(
        tmp_path / "np.dng", raw.cfa, "GRBG", noise_profile=[(1e-3, 1e-5), (2e-3, 2e-5), (3e-3, 3e-5)]
    )
    r = _run(["denoise", str(src), "-o", str(tmp_path / "o.dng"), "--model", str(models["aware"])])
    assert r.exit_code == 0, r.output
    assert "np.dng: noise from DNG NoiseProfile: λshot" in r.stdout
    got = spy[0][0].numpy()
    np.testing.assert_allclose(got[0], [1e-3, 2e-3, 2e-3, 3e-3], rtol=1e-5)
    np.testing.assert_allclose(got[1], [1e-5, 2e-5, 2e-5, 3e-5], rtol=1e-5)


@pytest.mark.parametrize("pattern", ["GRBG", "BGGR"])
def test_estimated_planes_follow_the_bayer_phase(models, tmp_path, spy, pattern):
    """Red noisier than blue in a GRBG/BGGR file: the model's R plane gets the large λ, B the small one."""
    from rawrcl.cfa import positions

    rng = np.random.default_rng(5)
    scene = _scene()
    crop = scene[:, 16 : 16 + SIZE, 16 : 16 + SIZE]
    from rawrcl.cfa import mosaic

    clean = np.asarray(mosaic(crop.astype(np.float32), pattern))[0].astype(np.float64)
    gain = np.ones((2, 2))
    pos = positions(pattern)
    gain[pos["R"]], gain[pos["B"]] = 4.0, 0.5
    g = np.tile(gain, (SIZE // 2, SIZE // 2))
    noisy = clean + rng.normal(size=clean.shape) * np.sqrt(g * (LS * clean + LR))
    src = _write(tmp_path / "x.dng", noisy, pattern)
    r = _run(["denoise", str(src), "-o", str(tmp_path / "o.dng"), "--model", str(models["aware"])])
    assert r.exit_code == 0, r.output
    lam = spy[0][0].numpy()
    var = lam[0] * 0.3 + lam[1]  # R, G1, G2, B
    assert var[0] > 2 * var[1] and var[3] < 0.8 * var[2], var


def test_given_pair_and_scale_reach_the_model(burst_dir, models, tmp_path, spy):
    src = str(burst_dir / "frame01.dng")
    r1 = _run(
        [
            "denoise",
            src,
            "-o",
            str(tmp_path / "a.dng"),
            "--model",
            str(models["aware"]),
            "--noise",
            "0.01,1e-4",
            "--no-shrink",  # SURE would pull this untrained model's output back to the input
        ]
    )
    r2 = _run(
        ["denoise", src, "-o", str(tmp_path / "b.dng"), "--model", str(models["aware"])]
        + ["--noise", "0.01,1e-4", "--noise-scale", "2", "--no-shrink"]
    )
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    assert "noise from --noise: λshot 0.02, λread 0.0002" in r2.stdout
    np.testing.assert_allclose(spy[0][0].numpy(), [[0.01] * 4, [1e-4] * 4], rtol=1e-6)
    np.testing.assert_allclose(spy[-1][0].numpy(), [[0.02] * 4, [2e-4] * 4], rtol=1e-6)
    from rawrcl.io.raw import read_raw

    assert not np.array_equal(read_raw(tmp_path / "a.dng").cfa, read_raw(tmp_path / "b.dng").cfa)


def test_blind_model_unaffected_and_warned_once(burst_dir, models, tmp_path, spy):
    src = [str(burst_dir / "frame00.dng"), str(burst_dir / "frame01.dng")]
    r1 = _run(["denoise", *src, "-o", str(tmp_path / "a"), "--model", str(models["blind"]), "-q"])
    r2 = _run(
        ["denoise", *src, "-o", str(tmp_path / "b"), "--model", str(models["blind"]), "-q", "--noise", "1,1"]
    )
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    assert not spy
    assert "warning" not in r1.stderr
    assert r2.stderr.count("blind to the noise level") == 1
    from rawrcl.io.raw import read_raw

    for f in ("frame00.dng", "frame01.dng"):
        assert np.array_equal(read_raw(tmp_path / "a" / f).cfa, read_raw(tmp_path / "b" / f).cfa)


def test_bad_noise_options_are_one_line_errors(burst_dir, models, tmp_path):
    src = str(burst_dir / "frame00.dng")
    for extra, msg in (
        (["--noise", "burst"], "--noise"),
        (["--noise", "paper"], "not accepted here"),
        (["--noise", "metadata"], "no DNG NoiseProfile"),
    ):
        r = _run(["denoise", src, "-o", str(tmp_path / "o.dng"), "--model", str(models["aware"]), *extra])
        assert r.exit_code == 1 and msg in r.stderr, (extra, r.output)
        assert "Traceback" not in r.output


def _over_exposed(pattern: str, gain: float) -> np.ndarray:
    """A noisy mosaic (SIZE, SIZE) of the scene × ``gain``, clipped at white (mostly saturated)."""
    return np.clip(_frame(_scene() * gain, 0, 0, pattern, np.random.default_rng(2)), 0, 1)


def test_relaxed_image_estimate_where_the_default_refuses():
    """An over-exposed mosaic: the default estimator refuses (too clipped), the relaxed retry gives a
    usable estimate and says so."""
    from rawrcl.calibration.resolve import image_estimate
    from rawrcl.calibration.single_image import estimate_mosaic

    from rawrcl.errors import RawrclError

    cfa = _over_exposed("RGGB", 4.0)  # 46 % of the samples saturated
    with pytest.raises(RawrclError):
        estimate_mosaic(cfa, "RGGB", bootstrap=0)
    per_plane, note = image_estimate(cfa, "RGGB")
    assert "relaxed" in note
    std = np.sqrt(np.mean([s * 0.3 + r for s, r in per_plane.values()]))
    assert 0.8 < std / np.sqrt(LS * 0.3 + LR) < 1.25


def test_unestimable_file_falls_back_to_a_preset_under_auto(models, tmp_path, spy):
    """A saturated file: ``auto`` runs with the fallback preset and a one-line warning; ``image`` refuses."""
    from rawrcl.calibration.resolve import FALLBACK

    from rawrcl.noise.samplers import PRESETS

    src = _write(tmp_path / "white.dng", np.clip(_over_exposed("GRBG", 50.0), 0, 1), "GRBG")
    r = _run(["denoise", str(src), "-o", str(tmp_path / "o.dng"), "--model", str(models["aware"])])
    assert r.exit_code == 0, r.output
    assert f"using preset {FALLBACK}" in r.stderr and "Traceback" not in r.output
    assert f"noise from fallback preset {FALLBACK}" in r.stdout
    np.testing.assert_allclose(spy[0][0].numpy()[:, 0], PRESETS[FALLBACK], rtol=1e-6)
    r = _run(
        [
            "denoise",
            str(src),
            "-o",
            str(tmp_path / "p.dng"),
            "--model",
            str(models["aware"]),
            "--noise",
            "image",
        ]
    )
    assert r.exit_code == 1 and "give --noise" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "p.dng").exists()


def test_noise_aware_rgb_model_takes_a_pair_only(models, tmp_path, photo_dir):
    src = str(photo_dir / "coffee.png")
    r = _run(["denoise", src, "-o", str(tmp_path / "a.png"), "--model", str(models["rgb_aware"])])
    assert r.exit_code == 1 and "needs --noise λshot,λread for photos" in r.stderr
    r = _run(
        [
            "denoise",
            src,
            "-o",
            str(tmp_path / "b.png"),
            "--model",
            str(models["rgb_aware"]),
            "--noise",
            "1e-3,1e-4",
        ]
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b.png").is_file()


def test_jdd_with_noise_aware_raw_denoiser(burst_dir, models, tmp_path, spy):
    r = _run(
        [
            "jdd",
            str(burst_dir / "frame02.dng"),
            "-o",
            str(tmp_path / "o.tiff"),
            "--model",
            str(models["aware"]),
        ]
        + ["--noise", "L3", "-q"]
    )
    assert r.exit_code == 0, r.output
    assert spy and (tmp_path / "o.tiff").is_file()


def test_jdd_with_a_two_stage_model(burst_dir, models, tmp_path, spy):
    """``rawrcl jdd --model TWO_STAGE``: the denoiser is told the file's noise, the JDD stage λ × residual."""
    from rawrcl.models.loading import save_two_stage
    from rawrcl.models.registry import build_model, save_checkpoint

    torch.manual_seed(0)
    dem = build_model(
        {"arch": "unet", "width": 8, "depth": 2, "skip": True, "head": "jdd", "noise_aware": True}
    )
    save_checkpoint(tmp_path / "dem.pt", dem)
    two = save_two_stage(models["aware"], tmp_path / "dem.pt", tmp_path / "two.pt", residual=0.01)
    args = ["jdd", str(burst_dir / "frame02.dng"), "-o", str(tmp_path / "o.tiff"), "--model", str(two)]
    r = _run([*args, "--one-pass"])  # one pass of each stage: the spy sees the denoiser, then the JDD stage
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o.tiff").is_file() and len(spy) >= 2
    assert torch.allclose(spy[1], spy[0] * 0.01)  # per tile: denoiser, then the JDD stage


# ----------------------------------------------------------------------------------------------- burst
def test_burst_eval_noisy_and_gat_bm3d(burst_dir, tmp_path):
    docs = {}
    for name in ("noisy", "gat+bm3d"):
        out = tmp_path / f"{name}.json"
        r = _run(["eval", name, "--burst", str(burst_dir), "--json", str(out)])
        assert r.exit_code == 0, r.output
        assert "PSNR" in r.stdout and "ceiling" in r.stdout
        docs[name] = json.loads(out.read_text())
    noisy, bm3d = docs["noisy"], docs["gat+bm3d"]
    for key in ("psnr", "ssim", "psnr_true", "ceiling", "noisy", "noise", "nlf", "burst", "seconds"):
        assert key in bm3d
    assert bm3d["psnr"] > noisy["psnr"] + 3
    assert bm3d["psnr"] < bm3d["ceiling"]
    assert bm3d["noise"]["source"] == "image estimate"  # auto on frames without a NoiseProfile
    nlf = bm3d["nlf"]["burst"]
    assert abs(np.sqrt(nlf["lambda_shot"] * 0.3 + nlf["lambda_read"]) / np.sqrt(LS * 0.3 + LR) - 1) < 0.15
    assert bm3d["nlf"]["image"]["lambda_shot"] > 0
    assert bm3d["burst"]["n_frames"] == 5 and noisy["noise"] is None


def test_burst_eval_libraw_scores_the_cfa_sites(burst_dir, tmp_path):
    """LibRaw's demosaicing keeps the CFA samples: without denoising it scores as the noisy target; FBDD
    removes some noise."""
    docs = {}
    for name in ("libraw-ahd", "libraw-dht+fbdd"):
        r = _run(["eval", name, "--burst", str(burst_dir), "--json"])
        assert r.exit_code == 0, r.output
        docs[name] = json.loads(r.stdout)
    ahd, fbdd = docs["libraw-ahd"], docs["libraw-dht+fbdd"]
    assert ahd["kind"] == "jdd" and ahd["noise"] is None
    assert abs(ahd["psnr"] - ahd["noisy"]["psnr"]) < 0.05
    assert fbdd["psnr"] > fbdd["noisy"]["psnr"] + 0.3


def test_burst_eval_nlm_with_burst_nlf_and_plot(burst_dir, tmp_path):
    plot = tmp_path / "fig.png"
    r = _run(["eval", "nlm", "--burst", str(burst_dir), "--noise", "burst", "--plot", str(plot), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["noise"]["source"] == "burst NLF"
    assert doc["psnr"] > doc["noisy"]["psnr"]
    assert plot.is_file() and plot.stat().st_size > 1000


def test_burst_eval_of_a_checkpoint_and_target(burst_dir, models, tmp_path, spy):
    r = _run(["eval", str(models["aware"]), "--burst", str(burst_dir), "--target", "frame02", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "raw" and Path(doc["burst"]["target"]).name == "frame02.dng"
    assert spy and doc["noise"]["source"] == "image estimate"


def test_the_burst_benchmark_scores_the_defaults_as_the_commands_do(burst_dir, tmp_path):
    """benchmarks/burst.py's model rows ran the noise-aware defaults without a noise level and stopped ("needs
    the noise parameters") until stop 69: its RAW and JDD rows must equal `rawrcl eval default --burst`."""
    from rawrcl.eval.burst_eval import evaluate_burst
    from tests.conftest import load_benchmark

    bench = load_benchmark("burst")
    out = tmp_path / "table.json"
    argv = ["--burst", str(burst_dir), "--target", "frame01", "--skip", "bm3d,calib,nlm,tta,gharbi"]
    assert bench.main([*argv, "--threads", "1", "--json", str(out)]) == 0
    rows = {r["method"]: r["psnr"] for r in json.loads(out.read_text())["rows"]}
    for name, task in (("shipped RAW denoiser", "raw-denoise"), ("shipped JDD (CFA sites)", "jdd")):
        doc = evaluate_burst("default", burst_dir, target="frame01", task=task)
        assert doc["noise"]["source"] == "image estimate"
        assert rows[name] == pytest.approx(doc["psnr"], abs=1e-6), name
        assert rows[name] > rows["noisy"] + 1


def test_burst_with_an_unrelated_frame_leaves_it_out_and_a_majority_is_refused(burst_dir, tmp_path):
    """One frame of another scene is left out of the reference and named in the report; when most of the
    other frames do not register the command refuses in one line naming one of them."""
    d = tmp_path / "bad"
    d.mkdir()
    for f in sorted(burst_dir.glob("*.dng"))[:4]:
        (d / f.name).write_bytes(f.read_bytes())
    rng = np.random.default_rng(3)
    _write(d / "frame09.dng", rng.random((SIZE, SIZE)) * 0.5, "GRBG")
    r = _run(["eval", "noisy", "--burst", str(d)])
    assert r.exit_code == 0, r.output
    left = [ln for ln in r.output.splitlines() if ln.startswith("left out of the reference")]
    assert len(left) == 1 and "3 of 4 frames kept" in left[0] and "frame09.dng" in left[0], r.output
    for f in sorted(d.glob("*.dng"))[2:4]:
        f.unlink()
    _write(d / "frame08.dng", rng.random((SIZE, SIZE)) * 0.5, "GRBG")
    r = _run(["eval", "noisy", "--burst", str(d)])
    assert r.exit_code == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("rawrcl: error:")]
    assert len(lines) == 1 and "frame08.dng" in lines[0] and "did not register" in lines[0], r.stderr
    assert "Traceback" not in r.output


def test_burst_with_a_moving_object_is_scored_and_says_where(burst_dir, tmp_path):
    """Something else stands in a square of one frame: the command scores the burst (it refused before stop
    100), names the frame in its log and reports the share of pixels where frames were left out; the
    ``--json`` record holds the same."""
    import json

    from rawrcl.io.raw import read_raw

    d = tmp_path / "moving"
    d.mkdir()
    for f in sorted(burst_dir.glob("*.dng")):
        (d / f.name).write_bytes(f.read_bytes())
    moved = read_raw(d / "frame02.dng").cfa.copy()
    moved[40:104, 40:104] = moved[SIZE - 64 :, SIZE - 64 :]
    _write(d / "frame02.dng", moved, "GRBG")
    r = _run(["eval", "noisy", "--burst", str(d), "--json", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    assert "frame02.dng: moved in" in r.output and "left out of the reference there" in r.output, r.output
    assert any(ln.startswith("motion: frames left out") for ln in r.output.splitlines()), r.output
    doc = json.loads((tmp_path / "m.json").read_text())["burst"]
    assert doc["frames_used"] == 4 and doc["dropped"] == [] and doc["motion_excluded_fraction"] > 0
    assert doc["moved_block_fraction"][1] > 0 and doc["moved_block_fraction"][0] == 0


def test_eval_needs_burst_or_clean_dir():
    r = _run(["eval", "noisy"])
    assert r.exit_code == 1 and "--burst" in r.stderr


# ------------------------------------------------------------------------------------ synthetic eval
def test_synthetic_raw_denoise_baselines_beat_noisy(photo_dir):
    from rawrcl.eval import baseline_applies, evaluate
    from rawrcl.tasks import get_task

    t = get_task("raw-denoise")
    assert baseline_applies("gat+bm3d", t) and baseline_applies("nlm", t)
    assert not baseline_applies("gharbi2016", get_task("jdd"))
    assert baseline_applies("gharbi2016", get_task("jdd"), "somewhere")
    res = {
        n: evaluate(n, "raw-denoise", photo_dir, "high", limit=1)["psnr_linear"]
        for n in ("noisy", "nlm", "gat+bm3d")
    }
    assert res["gat+bm3d"] > res["noisy"] + 1 and res["nlm"] > res["noisy"] + 1


def test_synthetic_eval_tells_noise_aware_models_the_true_noise(photo_dir, models, spy):
    from rawrcl.eval import evaluate

    evaluate(str(models["aware"]), "raw-denoise", photo_dir, "0.02,0.001", limit=1)
    np.testing.assert_allclose(spy[0][0].numpy(), [[0.02] * 4, [0.001] * 4], rtol=1e-6)


def test_gharbi2016_without_weights_is_a_clear_error(photo_dir):
    r = _run(["eval", "gharbi2016", "--task", "jdd", "--clean-dir", str(photo_dir), "--limit", "1"])
    assert r.exit_code == 1 and "--gharbi-weights" in r.stderr


def test_shared_gharbi_weights_on_synthetic_jdd(photo_dir):
    from tests.conftest import SHARED

    weights = SHARED / "models" / "gharbi2016_bayer_noise"
    if not weights.is_dir():
        pytest.skip("../shared Gharbi 2016 weights not available")
    from rawrcl.eval import evaluate

    g = evaluate("gharbi2016", "jdd", photo_dir, "low", limit=1, gharbi_weights=weights)
    n = evaluate("noisy", "jdd", photo_dir, "low", limit=1)
    assert g["psnr"] > n["psnr"]


@pytest.mark.parametrize("pattern", ["RGGB", "BGGR", "GRBG", "GBRG"])
@pytest.mark.parametrize("method", ["bilinear", "menon", "vng", "ea"])
def test_classical_demosaic_every_phase(pattern, method):
    """A flat orange mosaic of any phase comes back orange (OpenCV's Bayer naming is shifted)."""
    from rawrcl.cfa import mosaic
    from rawrcl.demosaic import demosaic

    rgb = np.ones((3, 32, 32), np.float32) * np.array([0.8, 0.5, 0.1], np.float32)[:, None, None]
    out = demosaic(np.asarray(mosaic(rgb, pattern))[0], pattern, method)
    np.testing.assert_allclose(out[:, 8:-8, 8:-8].mean(axis=(1, 2)), [0.8, 0.5, 0.1], atol=0.01)


# ------------------------------------------------------------------------------- --fuse-bm3d
def test_fuse_bm3d_averages_the_shipped_model_with_gat_bm3d(tmp_path):
    """``--fuse-bm3d W`` writes (1 − W)·network + W·GAT+BM3D (both told the file's noise), and on a
    noisy frame of a smooth scene the average beats both of its halves (their errors differ)."""
    from rawrcl.cfa import mosaic
    from rawrcl.io.raw import read_raw

    scene = _scene()
    clean = np.asarray(mosaic(scene[:, 16 : 16 + SIZE, 16 : 16 + SIZE].astype(np.float32), "GRBG"))[0]
    src = _write(
        tmp_path / "n.dng", _frame(scene, 0, 0, "GRBG", np.random.default_rng(5)), "GRBG", [(LS, LR)]
    )
    outs = {}
    for w in ("0", "0.3", "1"):
        dst = tmp_path / f"o{w}.dng"
        r = _run(["denoise", str(src), "-o", str(dst), "--fuse-bm3d", w, "--no-shrink"])
        assert r.exit_code == 0, r.output
        assert ("fused with GAT+BM3D (weight" in r.stdout) == (w != "0")
        outs[w] = read_raw(dst).cfa.astype(np.float64)
    dn = 1 / (WHITE - BLACK)  # outputs are re-quantised to the file's DN and clipped at black
    inside = (outs["0"] > 0) & (outs["1"] > 0) & (outs["0.3"] > 0)
    assert inside.mean() > 0.95
    np.testing.assert_allclose(
        outs["0.3"][inside], (0.7 * outs["0"] + 0.3 * outs["1"])[inside], atol=1.01 * dn
    )
    mse = {w: float(np.mean((o - clean)[8:-8, 8:-8] ** 2)) for w, o in outs.items()}
    # the margin shrinks as the network improves on smooth content: 3.0 % with stop 52 weights, 2.6 % with
    # stop 55's, 0.3 % since stop 101's first-stage pair at this noise (std 0.03 at mid-grey)
    assert mse["0.3"] < 0.999 * min(mse["0"], mse["1"]), mse


def test_fuse_bm3d_help_names_the_library_weights():
    from rawrcl.infer.fusion import FUSE_WEIGHTS

    for command, task in (("denoise", "raw-denoise"), ("jdd", "jdd")):
        text = " ".join(_run([command, "--help"]).stdout.split())
        assert f"({FUSE_WEIGHTS[task]:g} measured best" in text, command


def test_fuse_bm3d_bad_weight_and_wrong_inputs_are_one_line_errors(burst_dir, models, tmp_path, photo_dir):
    src = str(burst_dir / "frame00.dng")
    r = _run(["denoise", src, "-o", str(tmp_path / "o.dng"), "--fuse-bm3d", "1.5"])
    assert r.exit_code == 1 and "--fuse-bm3d must be in [0, 1]" in r.stderr and "Traceback" not in r.output
    photo = next(iter(sorted(photo_dir.iterdir())))
    r = _run(
        [
            "denoise",
            str(photo),
            "-o",
            str(tmp_path / "p.png"),
            "--model",
            str(models["rgb_aware"]),
            "--noise",
            "1e-3,1e-5",
            "--fuse-bm3d",
            "0.3",
        ]
    )
    assert r.exit_code == 1 and "applies to RAW files" in r.stderr, r.output
    r = _run(["eval", "gat+bm3d", "--burst", str(burst_dir), "--fuse-bm3d", "0.3"])
    assert r.exit_code == 1 and "applies to rawrcl models" in r.stderr, r.output
    r = _run(["jdd", src, "-o", str(tmp_path / "j.tif"), "--fuse-bm3d", "0.3", "--two-pass"])
    assert r.exit_code == 1 and "--two-pass is not combined with --fuse-bm3d" in r.stderr, r.output


def test_burst_eval_with_fusion_records_it(burst_dir, models, tmp_path):
    docs = {}
    for w in ("0", "0.5"):
        r = _run(["eval", str(models["blind"]), "--burst", str(burst_dir), "--fuse-bm3d", w, "--json"])
        assert r.exit_code == 0, r.output
        docs[w] = json.loads(r.stdout)
    assert docs["0"]["noise"] is None  # a blind model alone is told nothing
    assert docs["0.5"]["noise"]["fuse_bm3d"] == 0.5 and docs["0.5"]["noise"]["source"] == "image estimate"
    assert docs["0.5"]["psnr"] != docs["0"]["psnr"]


def test_an_adapt_runs_fusion_weight_is_used_unless_told(burst_dir, models, tmp_path):
    """A checkpoint whose ``rawrcl adapt --method burst`` run chose a GAT+BM3D weight: ``rawrcl denoise`` and
    ``rawrcl eval --burst`` fuse at it (saying so) unless told ``--fuse-bm3d``; other checkpoints do not."""
    import rawpy

    from rawrcl.models.loading import adapted_fusion
    from rawrcl.models.registry import load_checkpoint, save_checkpoint

    model, _ = load_checkpoint(models["blind"])
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / "denoise.pt", model, None, {"adapt": {"method": "burst", "fuse_bm3d": 0.5}})
    assert adapted_fusion(run) == adapted_fusion(run / "denoise.pt") == 0.5
    assert adapted_fusion(models["blind"]) == adapted_fusion("default") == adapted_fusion(None) == 0.0
    docs = {}
    for name, extra in (("own", []), ("told", ["--fuse-bm3d", "0.5"]), ("off", ["--fuse-bm3d", "0"])):
        r = _run(["eval", str(run), "--burst", str(burst_dir), "--json", *extra])
        assert r.exit_code == 0, r.output
        docs[name] = json.loads(r.stdout)
    assert docs["own"]["noise"]["fuse_bm3d"] == 0.5 and docs["own"]["psnr"] == docs["told"]["psnr"]
    assert docs["off"]["noise"] is None and docs["off"]["psnr"] != docs["own"]["psnr"]
    src = str(burst_dir / "frame00.dng")
    outs = {}
    for name, extra in (("own", []), ("off", ["--fuse-bm3d", "0"])):
        r = _run(["denoise", src, "-o", str(tmp_path / f"{name}.dng"), "--model", str(run), *extra])
        assert r.exit_code == 0, r.output
        assert ("the weight its adapt run chose" in r.stdout) == (name == "own"), r.stdout
        with rawpy.imread(str(tmp_path / f"{name}.dng")) as raw:
            outs[name] = raw.raw_image_visible.astype(np.int64)
    assert np.abs(outs["own"] - outs["off"]).mean() > 0


def test_jdd_fusion_runs_the_models_own_second_stage(burst_dir, tmp_path):
    """Fusion between the stages with weight 0 is exactly the two-stage model; with weight 0.3 the JDD
    command writes it; a one-stage JDD model is refused in one line."""
    from rawrcl.infer import TileOptions
    from rawrcl.infer.fusion import jdd_fused
    from rawrcl.infer.noise import bind_noise
    from rawrcl.infer.pipeline import jdd_cfa, task_model
    from rawrcl.io.raw import read_raw
    from rawrcl.models.registry import build_model, save_checkpoint
    from rawrcl.noise import NoiseModel

    raw = read_raw(burst_dir / "frame00.dng", clip=False)
    # an RGGB window, a multiple of the model's size: no padding, so the two paths are the same numbers
    # (elsewhere the padding of the mid mosaic differs near the edges, like a tile seam)
    cfa = raw.cfa[:96, 1:129]
    nm = NoiseModel(LS, LR)
    model = task_model(None, "jdd", TileOptions())
    plain = jdd_cfa(bind_noise(model, nm, 4), cfa, "RGGB")
    np.testing.assert_allclose(jdd_fused(model, cfa, "RGGB", nm, 0.0), plain, atol=1e-5)
    fused = jdd_fused(model, cfa, "RGGB", nm, 0.3)
    assert fused.shape == plain.shape and 1e-4 < float(np.abs(fused - plain).mean()) < 0.02

    r = _run(["jdd", str(burst_dir / "frame00.dng"), "-o", str(tmp_path / "f.tiff"), "--fuse-bm3d", "0.3"])
    assert r.exit_code == 0 and "fused with GAT+BM3D (weight 0.3" in r.stdout, r.output
    torch.manual_seed(0)
    one = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 4, "depth": 2})
    save_checkpoint(tmp_path / "one.pt", one)
    r = _run(
        [
            "jdd",
            str(burst_dir / "frame00.dng"),
            "-o",
            str(tmp_path / "g.tiff"),
            "--model",
            str(tmp_path / "one.pt"),
            "--fuse-bm3d",
            "0.3",
        ]
    )
    assert r.exit_code == 1 and "needs a two-stage model" in r.stderr and "Traceback" not in r.output
