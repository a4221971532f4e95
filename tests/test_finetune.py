"""Fine-tuning: label choice, datasets, linear/full/scratch protocols, the supervised method, the CLI."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from skimage import data
from skimage.io import imsave

from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError
from rawrcl.eval import evaluate
from rawrcl.methods.supervised import supervised
from rawrcl.models import read_checkpoint
from rawrcl.tasks import TASKS
from rawrcl.train.finetuning import LabelledCrops, finetune, prepare_model, select_labels

TINY = {"width": 8, "depth": 2}


@pytest.fixture(scope="module")
def photos():
    imgs = [data.astronaut(), data.chelsea(), data.coffee(), data.rocket()]
    return [
        (f"p{i}", (im[:96, :96].astype(np.float32) / 255).transpose(2, 0, 1)) for i, im in enumerate(imgs)
    ]


def test_select_labels_deterministic(photos):
    a = [n for n, _ in select_labels(photos, 2, seed=0)]
    assert a == [n for n, _ in select_labels(photos, 2, seed=0)] and len(set(a)) == 2
    assert {tuple(n for n, _ in select_labels(photos, 2, seed=s)) for s in range(6)} != {tuple(a)}
    assert len(select_labels(photos, "all", 0)) == 4
    with pytest.raises(RawrclError):
        select_labels(photos, 5, 0)


def test_labelled_crops_rggb_phase_and_determinism(photos):
    ds = LabelledCrops(photos, TASKS["jdd"], crop=33, seed=1, noise="none")
    assert ds.crop == 32 and len(ds) == 4
    s = ds[(2, 12345)]
    assert s["input"].shape == (4, 16, 16) and s["target"].shape == (3, 32, 32)
    assert torch.equal(s["input"], mosaic_packed(s["target"], "RGGB"))
    assert torch.equal(ds[(2, 12345)]["target"], s["target"])
    full = torch.from_numpy(photos[2][1])
    hits = [
        (y, x)
        for y in range(0, 65)
        for x in range(0, 65)
        if torch.equal(full[:, y : y + 32, x : x + 32], s["target"])
    ]
    assert hits and all(y % 2 == 0 and x % 2 == 0 for y, x in hits)


def test_labelled_crops_augment_flips_the_clean_crop_before_mosaicking(photos):
    """With augment, the target is a flip/rotation of a crop of the photo and the input is still the
    RGGB mosaic of that target (geometry first, then the task's degradation)."""
    from rawrcl.data import dihedral

    plain = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none")
    aug = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none", augment=True)
    ops = set()
    for k in range(24):
        s = aug[(2, k)]
        assert torch.equal(s["input"], mosaic_packed(s["target"], "RGGB"))
        crop = plain[(2, k)]["target"]  # same offset: the offset is drawn before the op
        found = [
            op
            for op in range(8)
            if torch.equal(torch.from_numpy(dihedral(crop.numpy(), op).copy()), s["target"])
        ]
        assert found, "augmented target is not a flip/rotation of the crop"
        ops.add(found[0])
    assert len(ops) >= 4


def test_zoomed_crop_enlarges_a_window_smoothly(photos):
    """``zoomed_crop``: (3, crop, crop) in [0, 1]; factor 1 is the window itself; a larger factor is an
    enlargement of a smaller window, so its high frequencies (mean |horizontal difference|) drop."""
    from rawrcl.data.labelled import zoomed_crop

    img = photos[0][1]
    same = zoomed_crop(img, 32, 1.0)
    assert same.shape == (3, 32, 32) and same.dtype == np.float32
    assert np.allclose(same, img[:, 32:64, 32:64], atol=1e-5)  # centred window, no resampling
    rough = [np.abs(np.diff(zoomed_crop(img, 32, f), axis=-1)).mean() for f in (1.0, 2.0, 4.0)]
    assert rough[0] > rough[1] > rough[2]
    z = zoomed_crop(img, 32, 3.0, np.random.default_rng(0))
    assert z.min() >= 0 and z.max() <= 1
    assert np.array_equal(z, zoomed_crop(img, 32, 3.0, np.random.default_rng(0)))


def test_labelled_crops_zoom(photos):
    """zoom (p, max): p = 1 enlarges every crop (smoother than the plain crops, mosaic still RGGB-phased);
    p = 0 or None keeps the plain crops; a bad zoom is refused."""
    plain = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none")
    none = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none", zoom=(0.0, 4.0))
    zoom = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none", zoom=(1.0, 4.0))
    rough = {"plain": [], "zoom": []}
    for k in range(16):
        assert torch.equal(plain[(0, k)]["target"], none[(0, k)]["target"])
        s = zoom[(0, k)]
        assert s["target"].shape == (3, 32, 32)
        assert torch.equal(s["input"], mosaic_packed(s["target"], "RGGB"))
        for name, ds in (("plain", plain), ("zoom", zoom)):
            rough[name].append(ds[(0, k)]["target"].diff(dim=-1).abs().mean().item())
    assert np.mean(rough["zoom"]) < 0.8 * np.mean(rough["plain"])
    for bad in ((1.5, 2.0), (0.5, 0.5)):
        with pytest.raises(RawrclError):
            LabelledCrops(photos, TASKS["jdd"], crop=32, zoom=bad)


def test_demosaic_difficulty_ranks_aliasing_content():
    """Bilinear-demosaicking error: 0 on a flat patch, tiny on a slow ramp, large on fine stripes."""
    from rawrcl.data.labelled import demosaic_difficulty

    x = np.arange(32, dtype=np.float32)[None, None, :] * np.ones((3, 32, 1), np.float32)
    flat = np.full((3, 32, 32), 0.3, np.float32)
    ramp, stripes = 0.2 + 0.01 * x, 0.5 + 0.4 * np.sin(2.6 * x)
    assert demosaic_difficulty(flat) == pytest.approx(0.0, abs=1e-12)
    assert demosaic_difficulty(ramp) < 1e-6 < 1e-2 < demosaic_difficulty(stripes)


def test_labelled_crops_hard_mining(photos):
    """hard (p, k): p = 1 picks the hardest of k windows (higher mean difficulty than the plain crops, same
    shapes and RGGB phase, deterministic per key); p = 0 or None keeps the plain crops; bad values refused."""
    from rawrcl.data.labelled import demosaic_difficulty

    plain = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none")
    off = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none", hard=(0.0, 4))
    hard = LabelledCrops(photos, TASKS["jdd"], crop=32, seed=1, noise="none", hard=(1.0, 8))
    score = {"plain": [], "hard": []}
    for i in range(len(photos)):
        for k in range(8):
            assert torch.equal(plain[(i, k)]["target"], off[(i, k)]["target"])
            s = hard[(i, k)]
            assert torch.equal(s["target"], hard[(i, k)]["target"])
            assert torch.equal(s["input"], mosaic_packed(s["target"], "RGGB"))
            for name, ds in (("plain", plain), ("hard", hard)):
                score[name].append(demosaic_difficulty(ds[(i, k)]["target"].numpy()))
    assert np.mean(score["hard"]) > 1.5 * np.mean(score["plain"])
    for bad in ((1.5, 4), (0.5, 0)):
        with pytest.raises(RawrclError):
            LabelledCrops(photos, TASKS["jdd"], crop=32, hard=bad)


def test_labelled_crops_told_noise(photos):
    """told (p, s): the input, target and true sigma stay those of the plain crops; with p = 1 every told
    level is the truth times a log-normal factor (level spread s shared, s/2 per plane, log-mean ≈ 0), apart
    for shot and read; p = 0 tells the truth; bad values refused."""
    task = TASKS["raw-denoise"]
    plain = LabelledCrops(photos, task, crop=32, seed=1, noise="camera")
    off = LabelledCrops(photos, task, crop=32, seed=1, noise="camera", told=(0.0, 0.25))
    told = LabelledCrops(photos, task, crop=32, seed=1, noise="camera", told=(1.0, 0.25))
    logs = []
    for i in range(len(photos)):
        for k in range(40):
            a, b = plain[(i, k)], told[(i, k)]
            for key in ("input", "target", "sigma", "sigma_crop"):
                assert torch.equal(a[key], b[key])
            assert torch.equal(a["noise"], off[(i, k)]["noise"])
            assert torch.equal(b["noise"], told[(i, k)]["noise"])
            logs.append(torch.log(b["noise"] / a["noise"]).numpy())
    logs = np.stack(logs)  # (draws, 2, 4)
    assert abs(logs.mean()) < 0.05
    assert 0.2 < logs.std() < 0.36  # √(0.25² + 0.125²) ≈ 0.28
    level = logs.mean(axis=2)
    assert abs(np.corrcoef(level[:, 0], level[:, 1])[0, 1]) < 0.25  # shot and read drawn apart
    assert np.abs(logs - logs.mean(axis=2, keepdims=True)).max() > 0.05  # the planes differ
    for bad in ((1.5, 0.2), (0.5, -0.1)):
        with pytest.raises(RawrclError):
            LabelledCrops(photos, task, crop=32, told=bad)


def test_supervised_is_l1():
    model = torch.nn.Conv2d(3, 3, 1)
    batch = {"input": torch.rand(2, 3, 8, 8), "target": torch.rand(2, 3, 8, 8)}
    out = supervised(batch, model)
    assert out["loss"].item() == pytest.approx((model(batch["input"]) - batch["target"]).abs().mean().item())
    out["loss"].backward()
    with pytest.raises(RawrclError):
        supervised({"input": batch["input"]}, model)


def test_noise_balanced_l1_weights_each_sample_by_its_noise_level():
    from rawrcl.methods.supervised import BALANCE_SIGMA0

    model = torch.nn.Identity()
    target = torch.zeros(3, 1, 4, 4)
    # per-sample L1 errors 0.01, 0.02, 0.08 for noise levels 0, 0.01, 0.05
    inp = torch.stack([torch.full((1, 4, 4), v) for v in (0.01, 0.02, 0.08)])
    sigma = torch.tensor([0.0, 0.01, 0.05])
    out = supervised({"input": inp, "target": target, "sigma": sigma}, model, balance=True)
    w = 1 / (sigma + BALANCE_SIGMA0)
    expected = (w / w.mean() * torch.tensor([0.01, 0.02, 0.08])).mean()
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert out["loss"].item() < 0.6 * 0.11 / 3  # the noisiest sample no longer dominates the plain mean
    assert out["l1"] == pytest.approx(0.11 / 3, rel=1e-6)  # the log stays the plain mean
    same = supervised({"input": inp, "target": target, "sigma": torch.full((3,), 0.02)}, model, balance=True)
    assert same["loss"].item() == pytest.approx(
        supervised({"input": inp, "target": target}, model)["loss"].item()
    )
    with pytest.raises(RawrclError, match="sigma"):
        supervised({"input": inp, "target": target}, model, balance=True)


def test_labelled_crops_carry_the_noise_level_without_changing_the_samples(photos):
    from rawrcl.noise import FixedSampler

    task = TASKS["raw-denoise"]
    ds = LabelledCrops(photos[:1], task, crop=32, seed=5, noise=FixedSampler(0.004, 1e-4))
    item = ds[(0, 9)]
    assert item["sigma"].item() == pytest.approx(np.sqrt(0.004 * 0.5 + 1e-4), rel=1e-6)
    rng = np.random.default_rng([5, 0, 9])  # the same draws, by hand: crop offset, then the task's degrade
    y, x = (int(rng.integers(0, (96 - 32) // 2 + 1)) * 2 for _ in range(2))
    inp, target = task.degrade(photos[0][1][:, y : y + 32, x : x + 32], rng, FixedSampler(0.004, 1e-4))
    assert torch.equal(item["input"], inp) and torch.equal(item["target"], target)
    clean = LabelledCrops(photos[:1], TASKS["sr"], crop=32, seed=5)[(0, 9)]
    assert clean["sigma"].item() == 0.0


def test_linear_protocol_freezes_all_but_a_fresh_head(tmp_path):
    from rawrcl.models import build_model, save_checkpoint

    src = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", **TINY})
    save_checkpoint(tmp_path / "pre.pt", src)
    model, info = prepare_model(str(tmp_path / "pre.pt"), TASKS["jdemsr"], "linear", seed=0)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("head.") for n in trainable) and info["head_replaced"]
    assert model(torch.rand(1, 4, 8, 8)).shape == (1, 3, 32, 32)
    model, _ = prepare_model(str(tmp_path / "pre.pt"), TASKS["jdd"], "linear", seed=0)
    assert not torch.equal(model.head.conv.weight, src.head.conv.weight)  # fresh head
    model, info = prepare_model(str(tmp_path / "pre.pt"), TASKS["jdd"], "full", seed=0)
    assert all(p.requires_grad for p in model.parameters()) and not info["head_replaced"]
    assert torch.equal(model.head.conv.weight, src.head.conv.weight)
    with pytest.raises(RawrclError):
        prepare_model(str(tmp_path / "pre.pt"), TASKS["denoise"], "full")


def test_finetune_scratch_trains_and_evaluates(tmp_path, photos):
    kw = dict(labels=2, steps=12, batch_size=2, crop=32, noise="low", seed=0, **TINY)
    res = finetune("scratch", "denoise", photos, tmp_path / "run", protocol="full", **kw)
    ck = tmp_path / "run" / "checkpoints" / "last.pt"
    assert ck.exists() and np.isfinite(res["final_loss"]) and len(res["labels"]) == 2
    assert json.loads((tmp_path / "run" / "finetune.json").read_text())["n_labels"] == 2
    r = evaluate(str(tmp_path / "run"), "denoise", photos[:1], noise="low")
    assert np.isfinite(r["psnr"]) and r["n_images"] == 1
    with pytest.raises(RawrclError):
        finetune("scratch", "denoise", photos, tmp_path / "run", protocol="full", **kw)  # exists, no force


def test_finetune_cli(tmp_path, photos):
    from rawrcl.cli import main

    d = tmp_path / "photos"
    d.mkdir()
    for name, img in photos[:2]:
        imsave(d / f"{name}.png", (img.transpose(1, 2, 0) * 255).astype(np.uint8), check_contrast=False)
    args = [
        "finetune",
        "scratch",
        "--task",
        "jdd",
        "--clean-dir",
        str(d),
        "--labels",
        "1",
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--crop",
        "32",
        "--width",
        "8",
        "--depth",
        "2",
        "--out",
        str(tmp_path / "r"),
        "--json",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{") :])
    assert res["protocol"] == "scratch"
    assert read_checkpoint(res["checkpoint"])["config"]["skip"] is True  # the default for new U-Nets
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "exists" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(
        main,
        [
            *args,
            "--force",
            "--no-skip",
            "--ema",
            "0.99",
            "--balance-noise",
            "--zoom",
            "0.5:4",
            "--cast",
            "0.5:4",
        ],
    )
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["zoom"] == [0.5, 4.0] and cfg["cast"] == [0.5, 4.0]
    bads = [("--zoom", b) for b in ("0.5", "2:4", "x:y")] + [("--cast", b) for b in ("0.5", "0.5:1", "x:y")]
    for opt, bad in bads:
        r = CliRunner().invoke(main, [*args, "--force", opt, bad])  # not P:MAX, out of range, not numbers
        assert r.exit_code == 1 and opt[2:] in r.output and "Traceback" not in r.output, r.output
    rgb = [*args[:3], "denoise", *args[4:], "--force", "--cast", "0.5:4"]
    r = CliRunner().invoke(main, rgb)
    assert r.exit_code == 1 and "RAW tasks only" in r.output and "Traceback" not in r.output, r.output
    assert (tmp_path / "r" / "checkpoints" / "last.pt").exists()  # refused before --force cleared the run
    ckpt = read_checkpoint(res["checkpoint"])
    assert ckpt["config"]["skip"] is False
    assert ckpt["extra"]["ema"] == 0.99 and set(ckpt["extra"]["train_weights"]) == set(ckpt["state_dict"])
    assert json.loads((tmp_path / "r" / "config.json").read_text())["loss"] == "l1-noise-balanced"
    r = CliRunner().invoke(main, [*args, "--force", "--ema", "1"])
    assert r.exit_code == 2 and "--ema" in r.output and "Traceback" not in r.output
    for bad in (["--loss", "l2"], ["--loss", "rmse", "--balance-noise"]):  # unknown; the loss given twice
        r = CliRunner().invoke(main, [*args, "--force", *bad])
        assert r.exit_code == 1 and "loss" in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(main, [*args, "--force", "--loss", "rmse"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r" / "config.json").read_text())["loss"] == "rmse"


def _bench_photo_dirs(tmp_path, photos) -> None:
    """tmp_path/train (3 photos) and tmp_path/test (the rest) as 8-bit PNGs."""
    for sub, items in (("train", photos[:3]), ("test", photos[3:])):
        (tmp_path / sub).mkdir()
        for name, img in items:
            imsave(tmp_path / sub / f"{name}.png", (img.transpose(1, 2, 0) * 255).astype(np.uint8))


def _tiny_protocol(**changes):
    """A seconds-long bench protocol (denoise only, no pre-training) with ``changes`` applied."""
    from rawrcl.bench import Protocol

    base = {"tasks": ("denoise",), "pretexts": (), "width": 8, "depth": 2, "crop": 32, "finetune_batch": 2}
    base |= {"finetune_steps": 3, "labels": 1, "sweep": (2,), "seeds": 1, "linear": False}
    return Protocol("tiny", **(base | changes))


def test_bench_minimal_grid_writes_report(tmp_path, photos):
    """The bench machinery end to end without pre-training (pretexts are exercised by the real bench)."""
    from rawrcl.bench import run_bench

    _bench_photo_dirs(tmp_path, photos)
    proto = _tiny_protocol()
    res = run_bench(proto, tmp_path / "train", tmp_path / "test", tmp_path / "rep", log=lambda m: None)
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "SL1 (scratch)" in report and "Oracle" in report and "rawrcl finetune scratch" in report
    methods = {(r["method"], r["labels"]) for r in res["records"]}
    assert {("nlm", 0), ("noisy", 0), ("scratch", 1), ("scratch", 2), ("scratch", "all")} <= methods
    assert json.loads((tmp_path / "rep" / "results.json").read_text())["test_files"] == ["p3.png"]
    with pytest.raises(RawrclError):
        run_bench(proto, tmp_path / "train", tmp_path / "test", tmp_path / "rep")


def test_bench_zero_label_jdd_row_from_a_raw_denoiser(tmp_path, photos):
    """With n2s among the pretexts, the JDD grid pre-trains a Noise2Self RAW denoiser and scores it at
    0 labels as denoise → bilinear demosaic (row and verdict in the report)."""
    from rawrcl.bench import ZERO_LABEL_RAW, run_bench

    _bench_photo_dirs(tmp_path, photos)
    proto = _tiny_protocol(
        tasks=("jdd",), pretexts=("n2s",), pretrain_batch=2, pretrain_steps=2, finetune_steps=2, sweep=()
    )
    res = run_bench(proto, tmp_path / "train", tmp_path / "test", tmp_path / "rep", log=lambda m: None)
    zero = [r for r in res["records"] if r["method"] == ZERO_LABEL_RAW]
    assert len(zero) == 1 and zero[0]["labels"] == 0 and np.isfinite(zero[0]["psnr"])
    report = (tmp_path / "rep" / "report.md").read_text()
    assert f"{ZERO_LABEL_RAW} (0 labels)" in report and "N2S RAW denoiser + bilinear" in report
    assert "--task raw-denoise" in report


def test_finetune_draws_fresh_crops_and_noise_every_step(tmp_path, photos, monkeypatch):
    """The trainer must key LabelledCrops by (photo, fresh sample seed): with plain photo indices every
    step would re-use one fixed crop + noise draw per photo and longer training would memorise them."""
    seen: list = []
    orig = LabelledCrops.__getitem__

    def spy(self, key):
        seen.append(key)
        return orig(self, key)

    monkeypatch.setattr(LabelledCrops, "__getitem__", spy)
    kw = dict(labels=1, steps=4, batch_size=2, crop=32, noise="high", seed=0, **TINY)
    finetune("scratch", "raw-denoise", photos, tmp_path / "run", protocol="full", **kw)
    assert len(seen) == 8 and all(isinstance(k, tuple) and k[0] == 0 for k in seen)
    assert len({k[1] for k in seen}) == 8  # 8 distinct samples of the single labelled photo


def test_labelled_crops_give_noise_aware_models_their_parameters(photos, tmp_path):
    from dataclasses import replace

    from rawrcl.noise import CameraSampler

    task = replace(TASKS["raw-denoise"], exposure=(0.05, 0.5))
    ds = LabelledCrops(photos, task, crop=32, seed=3, noise=CameraSampler())
    item = ds[(1, 7)]
    nm = task.sample(photos[1][1][:, :32, :32], np.random.default_rng(0), CameraSampler())["meta"]["noise"]
    assert item["noise"].shape == (2, 4) and item["noise"][0, 0] > 0
    assert nm.readout is not None  # the camera sampler quantises and clips like a file
    level = float(item["target"].mean())
    assert level <= 0.5 * float(torch.from_numpy(photos[1][1]).max()) + 1e-6  # exposure applied
    assert item["sigma_crop"].item() == pytest.approx(
        float(item["noise"][0].mean() * item["target"].clamp_min(0).mean() + item["noise"][1].mean()) ** 0.5,
        rel=1e-5,
    )
    res = finetune(
        "scratch",
        task,
        photos,
        tmp_path / "na",
        labels="all",
        steps=3,
        batch_size=2,
        crop=32,
        seed=0,
        noise=CameraSampler(),
        noise_aware=True,
        balance_noise="crop",
        lr_schedule="cosine",
        **TINY,
    )
    ckpt = read_checkpoint(res["checkpoint"])
    assert ckpt["config"]["noise_aware"] is True
    cfg = json.loads((tmp_path / "na" / "config.json").read_text())
    assert cfg["loss"] == "l1-crop-balanced" and cfg["lr_schedule"] == "cosine"
    assert evaluate(tmp_path / "na", task.name, photos[:1], "L3")["psnr_linear"] > 10


def test_crop_balanced_l1_uses_the_crop_noise_level():
    from rawrcl.methods.supervised import CROP_SIGMA0

    model = torch.nn.Identity()
    inp = torch.stack([torch.full((1, 2, 2), v) for v in (0.001, 0.01)])
    target = torch.zeros(2, 1, 2, 2)
    sig = torch.tensor([0.001, 0.01])
    out = supervised({"input": inp, "target": target, "sigma_crop": sig}, model, balance="crop")
    w = 1 / (sig + CROP_SIGMA0)
    assert out["loss"].item() == pytest.approx((w / w.mean() * torch.tensor([0.001, 0.01])).mean().item())
    with pytest.raises(RawrclError, match="sigma_crop"):
        supervised({"input": inp, "target": target, "sigma": sig}, model, balance="crop")


def test_psnr_balanced_loss_is_the_mean_log_mse_and_weights_samples_by_their_error():
    from rawrcl.methods.supervised import PSNR_MSE_FLOOR

    target = torch.zeros(2, 1, 2, 2)
    inp = torch.stack([torch.full((1, 2, 2), v) for v in (0.001, 0.1)]).requires_grad_(True)
    out = supervised({"input": inp, "target": target}, torch.nn.Identity(), balance="psnr")
    expected = (torch.log10(torch.tensor([1e-6, 1e-2]) + PSNR_MSE_FLOOR)).mean()
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert out["l1"] == pytest.approx((0.001 + 0.1) / 2, rel=1e-6)
    out["loss"].backward()
    g = inp.grad.flatten(1)[:, 0]
    # d log(e²) / de = 2/e: the sample with 100× less error gets 100× the gradient (plain MSE: 1/100)
    assert (g[0] / g[1]).item() == pytest.approx(100.0, rel=1e-3)


def test_rmse_balanced_loss_is_the_mean_per_sample_rms_error():
    from rawrcl.methods.supervised import PSNR_MSE_FLOOR

    target = torch.zeros(2, 1, 2, 2)
    inp = torch.stack([torch.tensor([[[0.0, 0.02], [0.0, 0.02]]]), torch.full((1, 2, 2), 0.1)])
    inp.requires_grad_(True)
    out = supervised({"input": inp, "target": target}, torch.nn.Identity(), balance="rmse")
    rms = torch.sqrt(torch.tensor([2e-4, 1e-2]) + PSNR_MSE_FLOOR)
    assert out["loss"].item() == pytest.approx(rms.mean().item(), rel=1e-5)
    out["loss"].backward()
    g = inp.grad.flatten(1)
    # within a sample the gradient grows with the error (squared error: the mean, not the median) ...
    assert g[0, 0].item() == 0.0 and g[0, 1].item() > 0
    # ... across samples each one's squared error is weighted by 1/RMSE: a pixel of error e gets ∝ e / RMSE
    assert g[0, 1].item() == pytest.approx(g[1, 0].item() * (0.02 / 0.1) / (rms[0] / rms[1]).item(), rel=1e-4)


def test_teacher_adds_the_same_loss_against_its_output_and_takes_no_gradient():
    target = torch.zeros(2, 1, 2, 2)
    inp = torch.full((2, 1, 2, 2), 0.1, requires_grad=True)
    calls = []

    def teacher(x, noise):
        calls.append(noise)
        return torch.full_like(x, 0.04).requires_grad_(True)  # a tensor that would carry a gradient

    out = supervised(
        {"input": inp, "target": target},
        torch.nn.Identity(),
        balance="rmse",
        teacher=teacher,
        teacher_weight=0.5,
    )
    assert out["loss"].item() == pytest.approx(0.1 + 0.5 * 0.06, rel=1e-5)
    assert out["teacher"] == pytest.approx(0.06, rel=1e-5) and out["l1"] == pytest.approx(0.1, rel=1e-6)
    assert calls == [None]
    out["loss"].backward()
    assert inp.grad is not None and torch.all(inp.grad > 0)


def test_ensemble_teacher_is_the_frozen_self_ensemble_of_the_jdd_stage_behind_a_frozen_first_stage():
    from rawrcl.methods.supervised import _Bound, ensemble_teacher
    from rawrcl.models import SelfEnsemble, build_model
    from rawrcl.models.compose import DenoiseThenDemosaic

    torch.manual_seed(0)
    den = build_model({"arch": "unet", "in_channels": 4, "head": "raw", "noise_aware": True, **TINY})
    jdd = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "noise_aware": True, **TINY})
    den.requires_grad_(False)
    model = DenoiseThenDemosaic(den, jdd).train()
    teach = ensemble_teacher(model)
    x = torch.rand(2, 4, 16, 16) * 0.5
    noise = torch.tensor([[[1e-3] * 4, [1e-5] * 4]] * 2)
    with torch.no_grad():
        first = den(x, noise)
        told = noise * model.residual
        want = SelfEnsemble(_Bound(lambda y: jdd(y, told), jdd))(first)
        got = teach(x, noise)
    assert got.shape == (2, 3, 32, 32)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, model.eval()(x, noise))  # one pass is not the 8-pass mean
    # the teacher is a copy: training the model leaves it as it was
    with torch.no_grad():
        for p in jdd.parameters():
            p.add_(0.01)
        torch.testing.assert_close(teach(x, noise), want)


def test_ensemble_teacher_of_a_one_stage_model_is_its_self_ensemble():
    from rawrcl.methods.supervised import _Bound, ensemble_teacher
    from rawrcl.models import SelfEnsemble, build_model

    torch.manual_seed(1)
    den = build_model({"arch": "unet", "in_channels": 4, "head": "raw", "noise_aware": True, **TINY})
    x = torch.rand(1, 4, 16, 16) * 0.5
    noise = torch.tensor([[[1e-3] * 4, [1e-5] * 4]])
    with torch.no_grad():
        want = SelfEnsemble(_Bound(lambda y: den(y, noise), den))(x)
        torch.testing.assert_close(ensemble_teacher(den)(x, noise), want)
