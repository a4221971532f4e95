"""``rawrcl adapt``: noisy-crop data, the (clipping-aware) R2R objective, the held-out signal, the CLI."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch


# ------------------------------------------------------------------------------------------ fixtures
def _scene(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A smooth CFA scene in [0, 1] with dark regions (so black clipping happens)."""
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    base = 0.25 + 0.2 * np.sin(6 * xx + 2 * rng.random()) * np.cos(4 * yy) + 0.15 * xx
    base[: h // 4, : w // 3] = 0.002  # a near-black patch
    return np.clip(base, 0, 1)


def _write(
    path: Path, pattern: str, lam: tuple[float, float], black: int, rng, shape=(160, 176)
) -> np.ndarray:
    from rawrcl.io.dng import write_dng

    white = 4095
    clean = _scene(*shape, rng)
    noisy = clean + rng.normal(size=shape) * np.sqrt(lam[0] * clean + lam[1])
    dn = np.clip(np.rint(black + noisy * (white - black)), 0, white).astype(np.uint16)
    write_dng(path, dn, pattern, black, white, iso=400, noise_profile=[lam] * 3, make="Test", model="Cam")
    return clean


@pytest.fixture(scope="module")
def adapt_env(tmp_path_factory) -> dict:
    """3 small 12-bit DNGs (RGGB; GRBG; black-clipped BGGR, black level 0) and a tiny noise-aware denoiser."""
    from rawrcl.models import build_model, save_checkpoint

    d = tmp_path_factory.mktemp("adapt")
    dngs = d / "dngs"
    dngs.mkdir()
    rng = np.random.default_rng(3)
    _write(dngs / "a.dng", "RGGB", (2e-3, 1e-5), 256, rng)
    _write(dngs / "b.dng", "GRBG", (4e-3, 4e-5), 256, rng)
    _write(dngs / "c.dng", "BGGR", (4e-3, 4e-5), 0, rng)  # black-subtracted file: clipped at 0
    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 4, "depth": 2, "skip": True}
    model = build_model({**cfg, "noise_aware": True})
    save_checkpoint(d / "tiny.pt", model)
    return {"dir": d, "dngs": dngs, "ckpt": d / "tiny.pt"}


def _cli(args: list):
    from click.testing import CliRunner
    from rawrcl.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


# ------------------------------------------------------------------------------------------ data
def test_noisy_crops_any_phase_and_floor(adapt_env):
    from rawrcl.cfa import pack
    from rawrcl.data.noisy_crops import NoisyCrops, load_noise_files
    from rawrcl.io.raw import read_raw

    files = load_noise_files(sorted(adapt_env["dngs"].glob("*.dng")))
    assert [f.name for f in files] == ["a.dng", "b.dng", "c.dng"]
    assert [f.floor is not None for f in files] == [False, False, True]
    assert all(f.source == "metadata" for f in files)
    np.testing.assert_allclose(files[1].noise[0].numpy(), 4e-3, rtol=1e-3)
    # GRBG → RGGB geometry: a 1-px reflection pad on the left, then packed; crops are offset in packed px
    raw = read_raw(adapt_env["dngs"] / "b.dng", clip=False)
    ref = pack(np.pad(raw.cfa, ((0, 0), (1, 0)), mode="reflect"), "RGGB")
    np.testing.assert_array_equal(files[1].packed, ref[:, :, : files[1].packed.shape[2]])
    ds = NoisyCrops(files, crop=32, seed=1)
    it = ds[(2, 5)]
    assert it["x_a"].shape == it["x_b"].shape == (4, 16, 16) and it["noise"].shape == (2, 4)
    assert float(it["floor"]) == pytest.approx(files[2].floor)
    assert torch.equal(ds[(2, 5)]["x_a"], it["x_a"])  # deterministic in the key
    held = ds.held_out()
    assert torch.equal(held[0]["x"], ds.held_out()[0]["x"])  # fixed crops
    # about `total` in all, at most twice the crops that fit side by side in each file's band
    cap = [
        2 * -(-(f.packed.shape[1] - top) // 16) * -(-f.packed.shape[2] // 16)
        for f, top in zip(files, ds.bands, strict=True)
    ]
    assert len(held) == sum(min(128 // 3, k) for k in cap) and len(held) > 12
    assert len(ds.held_out(6)) == 6 and [c["file"] for c in ds.held_out(6)].count("b.dng") == 2
    assert all(int(c["x"].shape[1]) == 16 for c in held)


def test_noisy_crops_augment_keeps_phase_noise_and_held_out_band():
    """Augmented crops: every plane still holds one colour's samples and its told noise follows it (a rotation
    swaps G1 and G2); the held-out band is never read; files with row noise are only flipped."""
    from rawrcl.data.noisy_crops import NoiseFile, NoisyCrops
    from rawrcl.errors import RawrclError

    h, w = 64, 48
    packed = np.stack([np.full((h, w), v, np.float32) for v in (0.1, 0.2, 0.3, 0.4)])
    packed[:, 48:] = 9.0  # the held-out band (the bottom eighth, at least one crop: 16 of 64 rows)
    noise = torch.tensor([[1e-3, 2e-3, 3e-3, 4e-3], [1e-5, 2e-5, 3e-5, 4e-5]])

    def file(row: float) -> NoiseFile:
        return NoiseFile("f.dng", packed, noise, None, 0.0, "metadata", row, "")

    swapped = {(0.0, "all"): set(), (0.01, "all"): set(), (0.0, "flips"): set()}
    for row, mode in swapped:
        ds = NoisyCrops([file(row)], crop=32, seed=3, augment=True if mode == "all" else mode)
        for s in range(64):
            it = ds[(0, s)]
            for x in (it["x_a"], it["x_b"]):
                assert x.shape == (4, 16, 16) and float(x.max()) < 9.0
                planes = x.flatten(1)
                assert torch.all(planes == planes[:, :1])  # one colour per plane
                np.testing.assert_allclose(planes[:, 0].numpy() / 100, it["noise"][0].numpy(), rtol=1e-5)
            swapped[row, mode].add(bool(it["noise"][0, 1] == 3e-3))
    assert swapped[0.0, "all"] == {False, True} and swapped[0.01, "all"] == swapped[0.0, "flips"] == {False}
    plain = NoisyCrops([file(0.0)], crop=32, seed=3)
    assert plain.describe()["augment"] == "off" and torch.equal(plain[(0, 1)]["noise"], noise)
    with pytest.raises(RawrclError, match="augment must be one of"):
        NoisyCrops([file(0.0)], crop=32, augment="rotate")
    # larger training crops with the held-out crops of the default size: the same band and held-out set
    big = NoisyCrops([file(0.0)], crop=48, seed=3, augment="flips", held_crop=32)
    assert big.bands == plain.bands == [48] and big.describe()["held_crop"] == 32
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(big.held_out(), plain.held_out(), strict=True))
    for s in range(32):
        assert big[(0, s)]["x_a"].shape == (4, 24, 24) and float(big[(0, s)]["x_b"].max()) < 9.0
    assert NoisyCrops([file(0.0)], crop=48).bands == [40]  # without it the band is one 48-px crop high


def test_adapt_runs_write_last_pt_often_whatever_they_keep():
    """A hard kill loses at most ADAPT_SAVE_EVERY steps: the blind-spot default keeps one checkpoint (step
    6000) and wrote its resumable last.pt only there until stop 74."""
    from rawrcl.train.config import ADAPT_SAVE_EVERY, AdaptConfig

    for c, keep in ((AdaptConfig(method="blindspot"), 6000), (AdaptConfig(), 100), (AdaptConfig(steps=7), 1)):
        t = c.trainer_config(64, "default", False, False, False)
        assert t["keep_every"] == keep and t["save_every"] == min(keep, ADAPT_SAVE_EVERY) == min(keep, 200)


def test_blindspot_crops_hold_out_128_px_crops_whatever_the_training_crop():
    """adapt --method blindspot trains on 64-px crops and scores on 128-px held-out crops (what its signal
    was measured with); files too small for those get held-out crops of the training size."""
    from rawrcl.data.noisy_crops import NoiseFile
    from rawrcl.train.adapt_blindspot import HELD_CROP, blindspot_crops
    from rawrcl.train.config import AdaptConfig

    c = AdaptConfig(method="blindspot")
    assert (c.crop, c.batch_size, HELD_CROP) == (64, 16, 128)
    assert (AdaptConfig().crop, AdaptConfig().batch_size) == (128, 4)  # the fine-tune keeps its own
    noise = torch.tensor([[1e-3] * 4, [1e-5] * 4])
    rng = np.random.default_rng(0)

    def files(h: int, w: int) -> list:
        return [NoiseFile("f.dng", rng.random((4, h, w), dtype=np.float32), noise, None, 0.0, "metadata")]

    ds = blindspot_crops(files(300, 200), c.crop)
    assert ds.describe()["held_crop"] == 128 and ds.crop == 64 and ds.augment == "flips"
    assert ds.bands == [300 - 64]  # one 64-packed-px held-out crop high (> 300/8)
    assert {tuple(h["x"].shape) for h in ds.held_out(8)} == {(4, 64, 64)}
    assert ds[(0, 0)]["x_a"].shape == (4, 32, 32)
    small = blindspot_crops(files(80, 60), 32)  # 64 packed rows would leave no room to train
    assert small.describe()["held_crop"] == 32 and small.bands == [80 - 16]


# ------------------------------------------------------------------------------------------ R2R
def test_r2r_target_unbiased_and_clip_aware_less_biased():
    """Poisson–Gaussian noise without clipping: the mean over many recorruptions of the target y2 is the clean
    signal x (and E[y2 | y1] = x since Cov(noise(y1), noise(y2)) = 0). With black clipping the plain target is
    biased upwards in the shadows; the clip-aware loss scores only pixels clear of the floor: not biased."""
    from rawrcl.methods.r2r import recorrupt

    g = torch.Generator().manual_seed(0)
    ls, lr = 4e-3, 4e-5
    x = torch.linspace(0.0, 0.6, 64).view(1, 1, 1, 64).expand(1, 4, 32, 64).contiguous()
    noise = torch.tensor([[[ls] * 4, [lr] * 4]])
    n_draws = 400
    y2_mean = torch.zeros_like(x)
    y2_mean_c = torch.zeros_like(x)
    cov = torch.zeros_like(x)
    w_sum = torch.zeros_like(x)
    bias_plain = torch.zeros_like(x)
    for _ in range(n_draws):
        y = x + torch.randn(x.shape, generator=g) * (ls * x + lr).sqrt()
        r = recorrupt(y, noise, torch.tensor([-1.0]), 0.5, clip_aware=False, generator=g)
        y2_mean += r["target"] / n_draws
        cov += (r["input"] - x) * (r["target"] - x) / n_draws
        yc = y.clamp_min(0.0)  # a black-clipped file
        rp = recorrupt(yc, noise, torch.tensor([-1.0]), 0.5, clip_aware=False, generator=g)
        bias_plain += rp["target"] / n_draws
        rc = recorrupt(yc, noise, torch.tensor([0.0]), 0.5, clip_aware=True, generator=g)
        y2_mean_c += rc["target"] * rc["weight"]
        w_sum += rc["weight"]
    sd = (ls * x + lr).sqrt()
    # unbiased target: column means (32·4·400 samples each) within 4 standard errors of x
    se = sd * (1 + 1 / 0.5**2) ** 0.5 / (32 * 4 * n_draws) ** 0.5
    col = y2_mean.mean(dim=(0, 1, 2))
    assert torch.all((col - x[0, 0, 0]).abs() < 4 * se[0, 0, 0] + 1e-6)
    # input and target noise uncorrelated (relative to the noise variance)
    assert float(cov.mean() / (sd**2).mean()) == pytest.approx(0.0, abs=0.05)
    # clipping: the plain target is biased upwards in the darkest columns; clip-aware scored pixels are not
    dark = x[0, 0, 0] < 2 * sd[0, 0, 0]
    plain_bias = float((bias_plain.mean(dim=(0, 1, 2)) - x[0, 0, 0])[dark].mean())
    scored = w_sum > n_draws / 2
    ca = (y2_mean_c / w_sum.clamp_min(1) - x)[scored]
    assert plain_bias > 0.1 * float(sd[0, 0, 0][dark].mean())
    assert abs(float(ca.mean())) < 0.2 * abs(plain_bias)
    assert scored.float().mean() > 0.5  # most of the ramp is still scored


def test_r2r_method_runs_on_a_noise_aware_model():
    from rawrcl.methods import make_method
    from rawrcl.models import build_model

    torch.manual_seed(0)
    m = build_model({"in_channels": 4, "head": "raw", "width": 4, "depth": 2, "noise_aware": True})
    batch = {
        "x_a": torch.rand(2, 4, 16, 16),
        "x_b": torch.rand(2, 4, 16, 16),
        "noise": torch.tensor([[[1e-3] * 4, [1e-5] * 4]] * 2),
        "floor": torch.tensor([-1.0, 0.0]),
    }
    out = make_method("r2r")(batch, m)
    out["loss"].backward()
    assert torch.isfinite(out["loss"]) and 0 < out["scored"] <= 1


def test_held_out_sure_tracks_true_mse():
    """SURE on fixed crops ranks an identity 'denoiser' far worse than a good one, close to their true MSE."""
    from rawrcl.train.adapt_signal import held_out_scores

    crops = _flat_crops()
    ident = held_out_scores(torch.nn.Identity(), crops)
    blur = held_out_scores(_Blur(), crops)
    var = 2e-3 * 0.3 + 1e-5
    assert ident["sure"] == pytest.approx(var, rel=0.1)  # identity: true MSE = the noise variance
    assert blur["sure"] < 0.2 * var and blur["sure_psnr"] > ident["sure_psnr"] + 7
    # without the R2R pass (adapt unless --select r2r): the same SURE, two forward passes fewer per crop
    calls = []
    counted = _Blur()
    counted.register_forward_hook(lambda *a: calls.append(1))
    fast = held_out_scores(counted, crops, r2r=False)
    assert "r2r" not in fast and "r2r" in blur and len(calls) == 3 * len(crops)
    assert fast["sure"] == blur["sure"] and fast["crop_sure"] == blur["crop_sure"]


def _flat_crops(scale: float = 1.0, n: int = 4) -> list[dict]:
    """Noisy crops of a flat 0.3 grey (λshot 2e-3, λread 1e-5), told ``scale`` × their true λ."""
    g = torch.Generator().manual_seed(1)
    x = torch.full((4, 32, 32), 0.3)
    lam = torch.tensor([[2e-3] * 4, [1e-5] * 4])
    crops = []
    for _ in range(n):
        y = x + torch.randn(x.shape, generator=g) * (2e-3 * x + 1e-5).sqrt()
        crops.append({"x": y, "noise": lam * scale, "floor": -1.0})
    return crops


class _Blur(torch.nn.Module):
    noise_aware = False

    def forward(self, x):
        return torch.nn.functional.avg_pool2d(torch.nn.functional.pad(x, (2,) * 4, mode="replicate"), 5, 1)


def test_sure_scale_range_is_where_the_held_out_gain_holds():
    """SURE told s·v is linear in s: the break-even scale of :func:`sure_scale_range` is where the two
    models' held-out SURE are equal when told that variance (exact for linear models); an identity
    'denoiser' beats a blur only if the noise were far below the told, the blur beats it from there up."""
    from rawrcl.train.adapt_signal import held_out_scores, holds, scale_text, sure_scale_range

    blur, ident = held_out_scores(_Blur(), _flat_crops()), held_out_scores(torch.nn.Identity(), _flat_crops())
    lo, hi = sure_scale_range(blur["crop_sure"], blur["crop_fit"], ident["crop_sure"], ident["crop_fit"])
    assert lo == 0 and 0.2 < hi < 1 / 1.2 and not holds((lo, hi), 1.2) and "below" in scale_text((lo, hi))
    at = [held_out_scores(m, _flat_crops(hi)) for m in (_Blur(), torch.nn.Identity())]
    assert sum(at[0]["crop_sure"]) == pytest.approx(sum(at[1]["crop_sure"]), rel=1e-4)
    back = sure_scale_range(ident["crop_sure"], ident["crop_fit"], blur["crop_sure"], blur["crop_fit"])
    assert back == (pytest.approx(hi), math.inf) and holds(back, 1.2) and not holds(back, 1 / hi + 0.1)
    same = sure_scale_range(blur["crop_sure"], blur["crop_fit"], blur["crop_sure"], blur["crop_fit"])
    assert same is None and not holds(same, 1.0)  # no gain at any scale
    assert holds(sure_scale_range([2.0], [3.0], [1.0], [2.0]), 100)  # lower fit, same variance part: always


def test_adapt_keeps_the_start_when_a_gain_holds_only_within_the_noise_slack():
    """With ``noise_slack`` 1.2, a checkpoint better on the held-out SURE only for a told variance within
    it is not kept: the warning says so and how to take it; with the default ``noise_slack`` 1 it would be."""
    from rawrcl.train.adapt_signal import adapt_warnings, holds
    from rawrcl.train.config import AdaptConfig

    rows = [
        {"step": 0, "sure": 1e-4, "forget_db": 0.0, "forget_at": "photo L1", "sure_holds": True},
        {"step": 100, "sure": 0.9e-4, "forget_db": -0.02, "forget_at": "photo L7 4x", "sure_holds": False,
         "sure_scales": [0.0, 1.11]},
    ]  # fmt: skip
    with pytest.warns(UserWarning, match=r"step 100 .* below 1.11× the told one .*--resume --noise-slack 1"):
        (msg,) = adapt_warnings(rows, rows[0], AdaptConfig(noise_slack=1.2))
    assert "kept the starting weights" in msg
    assert adapt_warnings(rows, rows[1], AdaptConfig(noise_slack=1.2)) == []  # one was kept: nothing to say
    assert holds((0.0, 1.11), 1.0) and not holds((0.0, 1.11), 1.2)


def test_gain_standard_error_matches_resampling_crops():
    """The delta-method standard error of a held-out gain is what resampling the crops gives; 0 when the
    candidate scales every crop alike; NaN with one crop."""
    from rawrcl.train.adapt_signal import gain_se_db

    rng = np.random.default_rng(0)
    start = rng.gamma(4.0, 1e-5, 60) * rng.integers(500, 5000, 60)  # crops' SURE sums, unequal sizes
    cand = start * rng.lognormal(-0.02, 0.08, 60)
    se = gain_se_db(start, cand)
    boot = []
    for _ in range(4000):
        i = rng.integers(0, 60, 60)
        boot.append(10 * np.log10(start[i].sum() / cand[i].sum()))
    assert se == pytest.approx(np.std(boot), rel=0.15) and se > 0.005
    assert gain_se_db(start, 0.9 * start) == pytest.approx(0.0, abs=1e-9)
    assert np.isnan(gain_se_db(start[:1], cand[:1]))


# ------------------------------------------------------------------------------------------ adapt / CLI
@pytest.mark.slow
def test_adapt_cli_writes_a_run_denoise_accepts_and_resume(adapt_env, tmp_path):
    run = tmp_path / "run"
    args = ["adapt", adapt_env["dngs"], "--out", run, "--from", adapt_env["ckpt"], "--steps", 4, "--crop", 32]
    res = _cli([*args, "--batch-size", 2, "--evals", 2, "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output[res.output.index("{") :])
    assert summary["steps"] == 4 and [f["file"] for f in summary["files"]] == ["a.dng", "b.dng", "c.dng"]
    assert summary["files"][2]["floor"] == 0.0 and summary["files"][0]["floor"] is None
    assert [r["step"] for r in summary["held_out"]] == [0, 2, 4]
    assert all(np.isfinite(r["sure"]) for r in summary["held_out"])
    assert summary["held_out"][0]["forget_db"] == 0 and all("forget_at" in r for r in summary["held_out"])
    assert summary["held_out"][0]["sure_gain_se_db"] == 0 and summary["held_out"][1]["sure_gain_se_db"] > 0
    assert summary["held_out_crops"] > 12 and summary["settings"]["held_out"] == 128
    # default noise_slack 1: a checkpoint "holds" exactly when it beats the start at the told noise
    assert summary["settings"]["noise_slack"] == 1.0 and summary["held_out"][0]["sure_holds"]
    base = summary["held_out"][0]["sure"]
    assert all(r["sure_holds"] == (r["step"] == 0 or r["sure"] < base) for r in summary["held_out"])
    assert summary["verdict"].startswith(("kept start", "adapted"))
    ck = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert ck["extra"]["adapt"]["files"][1]["file"] == "b.dng" and ck["config"]["noise_aware"]
    assert json.loads((run / "adapt.json").read_text())["selected_step"] == summary["selected_step"]
    # resume to more steps continues from step 4
    res2 = _cli(
        [*args[:-4], "--steps", 6, "--crop", 32, "--batch-size", 2, "--evals", 3, "--resume", "--json"]
    )
    assert res2.exit_code == 0, res2.output
    s2 = json.loads(res2.output[res2.output.index("{") :])
    assert s2["steps"] == 6
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["step"] == 6
    # an existing run without --resume/--force is refused in one line
    res3 = _cli(args)
    assert res3.exit_code != 0 and "already holds a run" in res3.output

    # the run is an ordinary checkpoint: the task loader takes it, and with the file's noise it denoises
    from rawrcl.infer import denoise_cfa
    from rawrcl.io.raw import read_raw
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.models.loading import load_for_task

    net, _ = load_for_task(run, "raw-denoise")
    raw = read_raw(adapt_env["dngs"] / "b.dng", clip=False)
    lam = torch.tensor([[4e-3] * 4, [4e-5] * 4])
    assert denoise_cfa(WithNoise(net, lam, 4), raw.cfa, raw.pattern).shape == raw.cfa.shape
    out = _cli(["denoise", adapt_env["dngs"] / "b.dng", "-o", tmp_path / "b_out.dng", "--model", run, "-q"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "b_out.dng").stat().st_size > 0


@pytest.mark.parametrize(
    "case",
    ["empty", "not-dng", "missing-out", "missing-dir"],
)
def test_adapt_bad_input_one_line_error(case, tmp_path, adapt_env):
    d = tmp_path / "in"
    d.mkdir()
    if case == "not-dng":
        (d / "x.dng").write_bytes(b"not a raw file")
    args = ["adapt", d if case != "missing-dir" else tmp_path / "nope", "--from", adapt_env["ckpt"]]
    if case != "missing-out":
        args += ["--out", tmp_path / "run"]
    res = _cli(args)
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert "Traceback" not in res.output
    assert len(lines) == 1 and lines[0].startswith("rawrcl: error:"), res.output


def test_shadow_bias_zero_for_the_clean_signal_positive_for_brightened_shadows():
    from rawrcl.methods.r2r import neighbour_mean, signal_variance
    from rawrcl.train.adapt_signal import censored_mean, shadow_bias

    g = torch.Generator().manual_seed(2)
    lam = torch.tensor([[[2e-3] * 4, [2e-3] * 4]])
    x = torch.linspace(0.0, 0.3, 64).view(1, 1, 1, 64).expand(1, 4, 64, 64).contiguous()
    v = signal_variance(x, lam)
    y = (x + torch.randn(x.shape, generator=g) * v.sqrt()).clamp_min(0.0)
    xhat = neighbour_mean(y)
    var = signal_variance(xhat, lam)
    s0, n0 = shadow_bias(x, y, lam, 0.0, xhat, var)
    s1, n1 = shadow_bias(censored_mean(x, v, 0.0), y, lam, 0.0, xhat, var)  # learnt E[y_c] instead of x
    assert n0 == n1 > 1000
    assert abs(s0 / n0) < 0.02 and s1 / n1 > 0.04


def test_mix_draws_the_files_own_noise_and_clipping(adapt_env):
    """``--mix``: with ``own = 1`` every synthetic crop carries one of the files' own per-plane λ, and a
    black-clipped file's synthetic crops are clipped at 0 like the file; with ``own = 0`` the camera
    sampler's (other levels)."""
    from rawrcl.data.noisy_crops import load_noise_files
    from rawrcl.train.adapt_objective import synthetic_mix

    files = load_noise_files(sorted(adapt_env["dngs"].glob("*.dng")), "auto")
    own = {tuple(np.round(f.noise.numpy().ravel(), 9)) for f in files}
    clipped = next(f for f in files if f.floor is not None)
    draw = synthetic_mix(64, [clipped], own=1.0, photos=2)
    rng = np.random.default_rng(0)
    for _ in range(3):
        s = draw(rng)
        assert s["input"].shape == (4, 32, 32) and s["target"].shape == (4, 32, 32)
        assert s["noise"].shape == (3, 4)  # [λshot; λread; σ_row²], σ_row = 0 here
        assert torch.allclose(s["noise"][:2], clipped.noise, rtol=1e-5) and not s["noise"][2].any()
        assert float(s["input"].min()) >= 0.0  # clipped at black like the file
    mixed = synthetic_mix(64, files, own=1.0, photos=2)
    assert tuple(np.round(mixed(rng)["noise"][:2].numpy().ravel(), 9)) in own
    cam = synthetic_mix(64, files, own=0.0, photos=2)
    assert all(tuple(np.round(cam(rng)["noise"][:2].numpy().ravel(), 9)) not in own for _ in range(3))


def test_forgetting_check_scores_and_guard(adapt_env, tmp_path):
    """The forgetting check is fixed across calls, ranks a biased model below an unbiased one on every
    condition, and an impossible tolerance (every condition must gain 1 dB) makes ``adapt`` keep the start."""
    from rawrcl.train.adapt import adapt
    from rawrcl.train.adapt_signal import CHECK_LEVELS, check_crops, check_scores

    a = check_crops(crop=32, per_photo=1, draws=2, photos=2)
    b = check_crops(crop=32, per_photo=1, draws=2, photos=2)
    assert len(a) == 4 * len(CHECK_LEVELS) and a[0]["batches"][0][0].shape == (4, 4, 16, 16)
    assert all(torch.equal(x["batches"][0][0], y["batches"][0][0]) for x, y in zip(a, b, strict=True))
    # the smooth (enlarged) conditions come after the plain ones, which draw as without them
    plain = check_crops(crop=32, per_photo=1, draws=2, photos=2, zoom=1.0)
    n = len(plain)
    assert [c["key"] for c in a[n:]] == [c["key"] + " 4x" for c in plain]
    assert all(torch.equal(x["batches"][0][0], y["batches"][0][0]) for x, y in zip(a[:n], plain, strict=True))

    def roughness(c):  # mean squared difference of horizontal neighbours of the clean targets
        t = c["batches"][0][1]
        return float(((t[..., 1:] - t[..., :-1]) ** 2).mean())

    assert sum(map(roughness, a[n:])) < 0.5 * sum(map(roughness, plain))

    class Shift(torch.nn.Module):
        noise_aware = True

        def __init__(self, d: float):
            super().__init__()
            self.d = d

        def forward(self, x, noise):
            return x + self.d

    good, bad = check_scores(Shift(0.0), a), check_scores(Shift(0.1), a)
    assert all(bad[k] < good[k] - 1 for k in good)
    # told the start's scores, scoring stops at the first failed condition, an enlarged one
    stopped = check_scores(Shift(0.1), a, good, 0.1)
    assert list(stopped) == [a[n]["key"]] and stopped[a[n]["key"]] == bad[a[n]["key"]]
    assert len(check_scores(Shift(0.0), a, good, 0.1)) == len(a)  # a model that passes: every condition
    summ = adapt(
        adapt_env["dngs"], tmp_path / "r", source=adapt_env["ckpt"], steps=2, crop=32, batch_size=2,
        evals=2, forget_tol=-1.0, progress=False,
    )  # fmt: skip
    assert summ["selected_step"] == 0 and summ["verdict"] == "kept start" and summ["final_forgot"]
    # the failed checkpoint before the final one was checked only until it failed; the final in full
    rows = summ["held_out"]
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[1].get("forget_stopped")
    assert "forget_stopped" not in rows[2]


def test_forget_hint_points_to_what_helped():
    """When the forgetting check makes a fine-tune keep the start, the warning names what helped where it
    failed: a larger --mix at 1×, --method blindspot on smooth (enlarged) content; nothing once a checkpoint
    was kept, nor for the blind-spot method (its start is never changed)."""
    from rawrcl.train.adapt_signal import adapt_warnings, forget_hint
    from rawrcl.train.config import AdaptConfig

    kept, adapted, sure = {"step": 0}, {"step": 100}, AdaptConfig()
    assert "--method blindspot" in forget_hint("unproc L1 4x", kept, sure)
    assert "--mix (e.g. 2)" in forget_hint("unproc L1", kept, sure)
    assert forget_hint("unproc L1 4x", adapted, sure) == ""
    assert forget_hint("unproc L1 4x", kept, AdaptConfig(method="blindspot")) == ""
    table = [
        {"step": 0, "sure": 1e-4, "forget_db": 0.0, "forget_at": "photo L1"},
        {"step": 100, "sure": 0.9e-4, "forget_db": -0.8, "forget_at": "unproc L1 4x"},
    ]
    with pytest.warns(UserWarning, match="lost 0.80 dB at unproc L1 4x .*--method blindspot"):
        (msg,) = adapt_warnings(table, kept, sure)
    assert "kept the starting weights" in msg


def test_train_only_changes_only_the_named_parameters(adapt_env, tmp_path):
    from rawrcl.errors import RawrclError
    from rawrcl.models.registry import load_checkpoint, read_checkpoint
    from rawrcl.train.adapt import adapt

    adapt(
        adapt_env["dngs"], tmp_path / "r", source=adapt_env["ckpt"], steps=2, crop=32, batch_size=2, evals=1,
        lr=1e-2, mix=0.0, train_only=["head."], progress=False,
    )  # fmt: skip
    start = load_checkpoint(adapt_env["ckpt"])[0].state_dict()
    last = read_checkpoint(tmp_path / "r" / "checkpoints" / "last.pt")
    trained = last["extra"].get("train_weights", last["state_dict"])
    changed = {k for k in start if not torch.equal(start[k], trained[k])}
    assert changed and all(k.startswith("head.") for k in changed)
    with pytest.raises(RawrclError, match="matches no parameter"):
        adapt(
            adapt_env["dngs"],
            tmp_path / "r2",
            source=adapt_env["ckpt"],
            steps=1,
            crop=32,
            train_only=["nope"],
        )


def test_adapt_runs_the_sure_objective(adapt_env, tmp_path):
    from rawrcl.models.registry import read_checkpoint
    from rawrcl.train.adapt import adapt

    res = adapt(
        adapt_env["dngs"], tmp_path / "s", source=adapt_env["ckpt"], method="sure", steps=2, crop=32,
        batch_size=2, evals=1, lr=1e-2, mix=0.0, progress=False,
    )  # fmt: skip
    assert res["method"] == "sure"
    last = read_checkpoint(tmp_path / "s" / "checkpoints" / "last.pt")
    assert last["extra"]["adapt"]["method"] == "sure"
    start = read_checkpoint(adapt_env["ckpt"])["state_dict"]
    trained = last["extra"].get("train_weights", last["state_dict"])
    assert any(not torch.equal(start[k], trained[k]) for k in start)


def test_adapt_config_validates_and_resume_keeps_it(adapt_env, tmp_path):
    from rawrcl.errors import RawrclError
    from rawrcl.train.adapt import adapt
    from rawrcl.train.config import AdaptConfig

    c = AdaptConfig.from_options(mix=2, steps=10, train_only=["head."])
    assert AdaptConfig(**c.to_dict()) == c and c.mix == 2.0 and c.lr == AdaptConfig().lr
    for bad, match in (
        ({"mix": -1}, "--mix"), ({"mix_own": 1.5}, "--mix-own"), ({"lr": float("nan")}, "--lr"),
        ({"steps": 0}, "--steps"), ({"crop": 15}, "--crop"), ({"select": "psnr"}, "--select"),
        ({"method": "n2n"}, "--method"), ({"alpha": 0}, "--alpha"),
        ({"bogus": 1}, "unknown adaptation option"),
    ):  # fmt: skip
        with pytest.raises(RawrclError, match=match):
            AdaptConfig.from_options(**bad)
    with pytest.raises(RawrclError, match="RAW denoiser only.*rawrcl jdd --model RUN"):
        adapt(tmp_path / "no such folder", tmp_path / "b", method="blindspot", task="jdd")  # before any file
    run = tmp_path / "r"
    common = {"source": adapt_env["ckpt"], "crop": 32, "batch_size": 2, "evals": 1, "progress": False}
    adapt(adapt_env["dngs"], run, steps=2, mix=0.0, anchor=0.2, **common)
    adapt(adapt_env["dngs"], run, steps=3, resume=True, **common)
    saved = json.loads((run / "config.json").read_text())["run_config"]
    assert saved["steps"] == 3 and saved["mix"] == 0.0 and saved["anchor"] == 0.2
    assert json.loads((run / "adapt.json").read_text())["settings"] == saved
    res = _cli(
        ["adapt", adapt_env["dngs"], "--out", tmp_path / "r2", "--from", adapt_env["ckpt"], "--mix", -1]
    )
    assert res.exit_code != 0 and "--mix must be" in res.output and "Traceback" not in res.output


def test_adapt_cli_help_states_the_configs_defaults():
    """The CLI does not import ``rawrcl.train`` at start-up, so its help repeats the defaults as text: every
    ``[default: X; blindspot Y]`` naming an :class:`AdaptConfig` field must be the config's own."""
    import re

    from rawrcl.cli.adapt import adapt as adapt_cmd

    from rawrcl.train.config import AdaptConfig

    plain, blind = AdaptConfig(), AdaptConfig(method="blindspot")
    fields = set(plain.to_dict())
    checked = set()
    for opt in adapt_cmd.params:
        m = re.search(r"\[default: ([^\]]+)\]", getattr(opt, "help", None) or "")
        if opt.name not in fields or m is None:
            continue
        text = m.group(1)
        first = text.split(";")[0].split(",")[0].strip()
        want = getattr(plain, opt.name)
        same = first == str(want) or (_num(first) is not None and _num(first) == _num(want))
        assert same, (opt.name, first)
        b = re.search(r"blindspot ([0-9.e+-]+)", text)
        if b:
            assert _num(b.group(1)) == _num(getattr(blind, opt.name)), (opt.name, b.group(1))
        checked.add(opt.name)
    assert {"steps", "batch_size", "crop", "lr", "evals", "anchor", "mix", "select", "held_out"} <= checked


def _num(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _kept_denoiser_with_the_sources_jdd_stage(path: Path, run: Path, src: Path) -> dict:
    """The checkpoint at ``path``, checked to hold the run's kept (plain) denoiser as its first stage and the
    source's JDD stage as its second."""
    from rawrcl.models import read_checkpoint

    two, den, source = (read_checkpoint(p) for p in (path, run / "checkpoints" / "last.pt", src))
    assert den["config"]["arch"] == "unet"
    for k, v in den["state_dict"].items():
        assert torch.equal(two["state_dict"][f"denoiser.{k}"], v), k
    for k, v in source["state_dict"].items():
        if k.startswith("demosaicker."):
            assert torch.equal(two["state_dict"][k], v), k
    return two


def test_adapt_jdd_writes_a_two_stage_run_that_jdd_runs(adapt_env, tmp_path):
    """--task jdd adapts the first stage of a two-stage JDD checkpoint and writes RUN/jdd.pt (the kept
    denoiser + the source's JDD stage), which the JDD loader takes for the run; a later --force run of
    another task does not leave a stale jdd.pt."""
    from rawrcl.models import DenoiseThenDemosaic, build_model, save_checkpoint
    from rawrcl.models.loading import checkpoint_for, load_for_task

    torch.manual_seed(1)
    base = {"arch": "unet", "in_channels": 4, "width": 4, "depth": 2, "skip": True, "noise_aware": True}
    src = tmp_path / "two_stage.pt"
    save_checkpoint(
        src,
        DenoiseThenDemosaic(build_model({**base, "head": "raw"}), build_model({**base, "head": "jdd"}), 0.05),
    )
    run = tmp_path / "run"
    args = ["adapt", adapt_env["dngs"], "--out", run, "--from", src, "--steps", 2, "--crop", 32]
    res = _cli([*args, "--batch-size", 2, "--evals", 1, "--task", "jdd"])
    assert res.exit_code == 0, res.output
    assert checkpoint_for(run, "jdd") == run / "jdd.pt"
    assert checkpoint_for(run, "raw-denoise") == run / "checkpoints" / "last.pt"
    jdd = _kept_denoiser_with_the_sources_jdd_stage(run / "jdd.pt", run, src)
    assert jdd["config"]["arch"] == "two_stage" and jdd["config"]["residual"] == 0.05
    model, _ = load_for_task(run, "jdd")
    assert isinstance(model, DenoiseThenDemosaic) and model.demosaicker is not None
    out = _cli(["jdd", adapt_env["dngs"] / "a.dng", "-o", tmp_path / "a.tif", "--model", run, "-q"])
    assert out.exit_code == 0, out.output
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime"):  # export: jdd.pt for JDD
        noise = ["--noise", "0.003,0.0001"]
        for head, channels in ((["--head", "jdd"], 3), ([], 4)):
            onnx = tmp_path / f"run{channels}.onnx"
            res = _cli(["export", run, "--format", "onnx", "-o", onnx, *head, *noise])
            assert res.exit_code == 0 and f"output ['batch', {channels}," in res.output, res.output
        assert (tmp_path / "run3.onnx").stat().st_size > 1.5 * (tmp_path / "run4.onnx").stat().st_size
    res = _cli([*args, "--batch-size", 2, "--evals", 1, "--force"])
    assert res.exit_code == 0, res.output
    assert not (run / "jdd.pt").exists()


def test_adapt_from_a_cfa_site_blend_writes_its_raw_model(adapt_env, tmp_path):
    """Started from a two-stage RAW denoiser (the shipped default's kind: the CFA-site blend), adapt trains
    its first stage and writes RUN/denoise.pt — the kept denoiser, the start's JDD stage, residual and blend —
    which RAW denoising takes for the run (``rawrcl denoise --model RUN``)."""
    from rawrcl.models import DenoiseThenDemosaic, build_model, save_checkpoint
    from rawrcl.models.loading import checkpoint_for, load_for_task

    torch.manual_seed(2)
    base = {"arch": "unet", "in_channels": 4, "width": 4, "depth": 2, "skip": True, "noise_aware": True}
    src = tmp_path / "blend.pt"
    two = DenoiseThenDemosaic(
        build_model({**base, "head": "raw"}), build_model({**base, "head": "jdd"}), 0.05, "raw", 0.4, 0.002
    )
    save_checkpoint(src, two)
    run = tmp_path / "run"
    args = ["adapt", adapt_env["dngs"], "--out", run, "--from", src, "--steps", 2, "--crop", 32]
    res = _cli([*args, "--batch-size", 2, "--evals", 1])
    assert res.exit_code == 0, res.output
    assert checkpoint_for(run, "raw-denoise") == run / "denoise.pt"
    assert res.output.rstrip().endswith(str(run / "denoise.pt"))  # the summary names the file denoise uses
    raw = _kept_denoiser_with_the_sources_jdd_stage(run / "denoise.pt", run, src)
    assert raw["config"]["head"] == "raw" and raw["config"]["blend"] == 0.4
    assert raw["config"]["blend_sigma"] == 0.002
    assert raw["config"]["residual"] == 0.05
    model, _ = load_for_task(run, "raw-denoise")
    assert isinstance(model, DenoiseThenDemosaic) and model.head_name == "raw"
    # JDD from the same run: the kept denoiser in front of the blend's own JDD stage, not bilinear
    assert checkpoint_for(run, "jdd") == run / "denoise.pt"
    jdd, _ = load_for_task(run, "jdd")
    assert jdd.output == "jdd" and jdd.demosaicker is not None
    assert torch.equal(
        jdd.denoiser.state_dict()["head.conv.weight"], model.denoiser.state_dict()["head.conv.weight"]
    )
    out = _cli(["denoise", adapt_env["dngs"] / "a.dng", "-o", tmp_path / "a.dng", "--model", run, "-q"])
    assert out.exit_code == 0, out.output
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime"):  # export: denoise.pt too
        res = _cli(["export", run, "--format", "onnx", "-o", tmp_path / "r.onnx", "--noise", "0.003,0.0001"])
        assert res.exit_code == 0, res.output
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(tmp_path / "r.onnx")).metadata_props}
        assert json.loads(meta["rawrcl.source"])["checkpoint"] == "denoise.pt"  # what denoise runs
    # --from the run: its kept denoiser is adapted further, still inside the source's blend
    run2 = tmp_path / "run2"
    res = _cli(
        [
            "adapt",
            adapt_env["dngs"],
            "--out",
            run2,
            "--from",
            run,
            "--steps",
            2,
            "--crop",
            32,
            "--batch-size",
            2,
            "--evals",
            1,
        ]
    )
    assert res.exit_code == 0, res.output
    assert checkpoint_for(run2, "raw-denoise") == run2 / "denoise.pt"
    raw2 = _kept_denoiser_with_the_sources_jdd_stage(run2 / "denoise.pt", run2, src)
    assert raw2["config"]["blend"] == 0.4 and raw2["config"]["blend_sigma"] == 0.002
    res = _cli([*args, "--batch-size", 2, "--evals", 1, "--force", "--from", adapt_env["ckpt"]])
    assert res.exit_code == 0, res.output
    assert not (run / "denoise.pt").exists()  # a plain start: the run's last.pt is the model
    assert checkpoint_for(run, "jdd") == run / "checkpoints" / "last.pt"  # then denoise → bilinear for JDD


def test_distillation_term_pulls_towards_the_starting_outputs():
    """``Guarded(distill=…)`` adds the noise-normalised distance to the frozen start's outputs on the mix's
    crops: zero while the model is the start, positive once it moved, its gradient pointing back."""
    from rawrcl.train.adapt_objective import Guarded

    class Gain(torch.nn.Module):
        noise_aware = True

        def __init__(self, g: float):
            super().__init__()
            self.g = torch.nn.Parameter(torch.tensor(g))

        def forward(self, x, noise):
            return self.g * x

    def method(batch, model):
        return {"loss": torch.zeros(())}

    x = torch.rand(2, 4, 8, 8) * 0.5 + 0.2
    noise = torch.tensor([[1e-3] * 4, [1e-5] * 4]).expand(2, 2, 4)
    batch = {"x": x, "noise": noise, "input": x, "target": x, "sup_noise": noise}
    start = Gain(1.0)
    obj = Guarded("r2r", method, start.state_dict(), anchor=0.0, mix=1e-9, distill=1.0, teacher=start)
    assert obj.teacher is not None and not any(p.requires_grad for p in obj.teacher.parameters())
    same = Gain(1.0)
    assert obj(batch, same)["distill"] == pytest.approx(0.0, abs=1e-12)
    moved = Gain(1.2)
    out = obj(batch, moved)
    assert out["distill"] > 0
    out["loss"].backward()
    assert float(moved.g.grad) > 0  # descending the loss lowers the gain towards the start's 1.0
    assert Guarded("r2r", method, start.state_dict(), 0.0, 0.5, distill=0.0, teacher=start).teacher is None
    from rawrcl.errors import RawrclError
    from rawrcl.train.config import AdaptConfig

    with pytest.raises(RawrclError, match="mix > 0"):
        AdaptConfig(distill=1.0, mix=0.0)


def test_adapt_warns_when_the_files_noise_is_uncertain(adapt_env, tmp_path):
    """A file whose noise estimate carries a note (e.g. a gamma-encoded file) makes ``adapt`` say that its
    label-free scores trust that noise; the note is kept in adapt.json's file list."""
    import dataclasses

    from rawrcl.data.noisy_crops import load_noise_files
    from rawrcl.train.adapt import adapt, find_raw_files

    files = load_noise_files(find_raw_files(adapt_env["dngs"]))
    assert all(f.note == "" for f in files)  # NoiseProfile files: nothing uncertain
    files[0] = dataclasses.replace(files[0], note="uncertain estimate: test")
    with pytest.warns(UserWarning, match=r"noise of 1 file\(s\) \(a.dng\) is uncertain"):
        summ = adapt(
            files, tmp_path / "r", source=adapt_env["ckpt"], steps=1, crop=32, batch_size=2, evals=1,
            progress=False,
        )  # fmt: skip
    assert summ["files"][0]["noise_note"] == "uncertain estimate: test"
    assert "noise_note" not in summ["files"][1]


def test_adapt_blindspot_writes_the_start_beside_a_new_network(adapt_env, tmp_path, monkeypatch):
    """--method blindspot trains a blind-spot network from scratch (its own defaults: thousands of steps,
    lr 1e-3, weight averaging) and writes RUN/denoise.pt: the start beside the network (arch
    with_blindspot, weights of both exactly as trained) when chosen, which rawrcl denoise --model RUN runs
    with SURE weights over all three estimates; the start itself when kept."""
    from rawrcl.models import DenoiseThenDemosaic, build_model, read_checkpoint, save_checkpoint
    from rawrcl.models.blindspot import WithBlindSpot
    from rawrcl.models.loading import checkpoint_for, load_for_task
    from rawrcl.train.adapt_signal import check_crops
    from rawrcl.train.config import AdaptConfig

    monkeypatch.setattr("rawrcl.train.adapt_blindspot.WIDTH", 4)  # a small network: the plumbing is tested
    small = check_crops(crop=32, per_photo=1, draws=1, photos=2)  # and a small forgetting check
    monkeypatch.setattr("rawrcl.train.adapt_signal.check_crops", lambda: small)
    c = AdaptConfig.from_options(method="blindspot")
    assert (c.steps, c.lr, c.ema, c.evals) == (6000, 1e-3, 0.999, 1)
    assert (AdaptConfig().steps, AdaptConfig().lr, AdaptConfig().ema) == (400, 3e-5, None)
    assert (c.crop, c.batch_size) == (64, 16)
    torch.manual_seed(2)
    base = {"arch": "unet", "in_channels": 4, "width": 4, "depth": 2, "skip": True, "noise_aware": True}
    src = tmp_path / "blend.pt"
    save_checkpoint(
        src,
        DenoiseThenDemosaic(
            build_model({**base, "head": "raw"}), build_model({**base, "head": "jdd"}), 0.05, "raw"
        ),
    )
    run = tmp_path / "run"
    args = ["adapt", adapt_env["dngs"], "--out", run, "--from", src, "--method", "blindspot", "--crop", 32]
    res = _cli([*args, "--steps", 3, "--batch-size", 2, "--select", "last", "--forget-tol", 1e9])
    assert res.exit_code == 0, res.output
    assert checkpoint_for(run, "raw-denoise") == run / "denoise.pt"
    summary = json.loads((run / "adapt.json").read_text())
    assert summary["settings"]["lr"] == 1e-3 and [r["step"] for r in summary["held_out"]] == [0, 3]
    assert summary["verdict"] == "adapted (step 3)"
    assert summary["objective"] == {"method": "blindspot", "margin": 2.5, "censored": True}  # CENSORED
    assert read_checkpoint(run / "denoise.pt")["extra"]["adapt"]["objective"]["censored"] is True
    assert json.loads((run / "config.json").read_text())["data"]["augment"] == "flips"  # AUGMENT, recorded
    saved, net = read_checkpoint(run / "denoise.pt"), read_checkpoint(run / "checkpoints" / "step_0000003.pt")
    assert saved["config"]["arch"] == "with_blindspot"
    for k, v in net["state_dict"].items():
        assert torch.equal(saved["state_dict"][f"blindspot.{k}"], v), k
    for k, v in read_checkpoint(src)["state_dict"].items():
        assert torch.equal(saved["state_dict"][f"base.{k}"], v), k
    model, _ = load_for_task(run, "raw-denoise")
    assert isinstance(model, WithBlindSpot)
    # rawrcl eval RUN --burst runs what denoise --model RUN runs (last.pt is the network alone: no head)
    from rawrcl.eval.burst_eval import _load_model
    from rawrcl.infer import TileOptions

    assert isinstance(_load_model(str(run), None, TileOptions())[0], WithBlindSpot)
    assert model.part_names == ("start (its SURE weights)", "blind-spot network")
    out = _cli(["denoise", adapt_env["dngs"] / "a.dng", "-o", tmp_path / "a.dng", "--model", run])
    assert out.exit_code == 0, out.output
    assert "blind-spot network" in out.output, out.output  # the log names the SURE weights of both parts
    out = _cli(["jdd", adapt_env["dngs"] / "a.dng", "-o", tmp_path / "a.tif", "--model", run, "-q"])
    assert out.exit_code == 0, out.output
    jdd, _ = load_for_task(run, "jdd")  # the composite with its SURE weights, then its start's JDD stage
    from rawrcl.models.sure import SureShrink

    assert isinstance(jdd.denoiser, SureShrink) and isinstance(jdd.denoiser.model, WithBlindSpot)
    view = jdd.denoiser.model
    assert jdd.demosaicker is view.base.demosaicker and jdd.output == "jdd"
    # its first part is the start's first stage (what the JDD stage is trained behind), not the start's
    # SURE-weighted RAW output (which lost up to 0.16 dB on held-out JDD rows); the modules are shared
    assert view.part_names == ("start's first stage", "blind-spot network")
    from rawrcl.models.compose import adapt as for_task

    shared = for_task(model, "raw", "jdd").denoiser.model  # a view of the composite: modules shared
    assert shared.blindspot is model.blindspot and shared.base is model.base and shared is not model
    x = torch.rand(1, 4, 16, 16)
    noise = torch.tensor([[[3e-3] * 4, [1e-4] * 4]])
    with torch.no_grad():
        first, net = view.parts(x, noise)
        start, net_raw = model.parts(x, noise)  # the RAW composite, loaded apart: the same weights
        # the start's first stage as the commands run it (at this noise, std 0.026 at mid-grey, its pair)
        assert torch.equal(first, model.base.first(x, noise)) and torch.equal(net, net_raw)
        assert not torch.equal(first, start)
    assert model.part_names == ("start (its SURE weights)", "blind-spot network")  # the RAW model unchanged
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime"):  # not the start alone
        for fmt, out in (("onnx", "b.onnx"), ("darktable", "b.dtmodel")):
            res = _cli(["export", run, "--format", fmt, "-o", tmp_path / out, "--noise", "0.003,0.0001"])
            assert res.exit_code != 0 and "SURE weights" in res.output and "Traceback" not in res.output, fmt
    # --from the run: its network trained on beside the same base
    more = ["--method", "blindspot", "--crop", 32, "--steps", 2, "--batch-size", 2, "--lr", 3e-4]
    res = _cli(
        ["adapt", adapt_env["dngs"], "--out", tmp_path / "run2", "--from", run, *more, "--select", "last"]
    )
    assert res.exit_code == 0 and "continuing the blind-spot network" in res.output, res.output
    again = read_checkpoint(tmp_path / "run2" / "denoise.pt")
    assert again["config"]["arch"] == "with_blindspot"
    assert all(
        torch.equal(again["state_dict"][k], v)
        for k, v in saved["state_dict"].items()
        if k.startswith("base.")
    )
    assert any(
        not torch.equal(again["state_dict"][k], v)
        for k, v in saved["state_dict"].items()
        if k.startswith("blindspot.")
    )
    res = _cli([*args, "--steps", 2, "--batch-size", 2, "--force", "--forget-tol", -1e9])
    assert res.exit_code == 0, res.output
    assert json.loads((run / "adapt.json").read_text())["verdict"] == "kept start"
    assert read_checkpoint(run / "denoise.pt")["config"]["arch"] == "two_stage"
