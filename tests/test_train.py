"""Trainer: run dir, exact kill-and-resume, errors, two-rank gloo DDP, CLI pretrain/inspect."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import skimage.data
import torch

from rawrcl.data import PhotoFolderDataset
from rawrcl.errors import RawrclError
from rawrcl.methods import make_method
from rawrcl.models import build_model, load_checkpoint
from rawrcl.train import Trainer
from tests._spawn import leave_rank, run_ranks, wait_for_steps

REPO = Path(__file__).resolve().parents[1]


def _dataset():
    photos = [
        skimage.data.astronaut()[:64, :64],
        skimage.data.chelsea()[:64, :64],
        skimage.data.coffee()[:64, :64],
        skimage.data.rocket()[:64, :64],
    ]
    return PhotoFolderDataset(images=photos, crop=32, mode="raw", seed=1)


def _fit(run_dir, steps, resume=False, method="rcl", **cfg):
    torch.manual_seed(0)
    model = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2})
    conf = {
        "steps": steps,
        "batch_size": 4,
        "log_every": 1,
        "save_every": 1,
        "resume": resume,
        "seed": 3,
        **cfg,
    }
    return Trainer(model, make_method(method), _dataset(), run_dir, conf).fit()


def _losses(run_dir):
    return [json.loads(x)["loss"] for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def test_run_dir_and_resume_exact(tmp_path):
    torch.set_num_threads(1)
    full = _fit(tmp_path / "a", 6)
    assert full["steps"] == 6
    for name in ("config.json", "metrics.jsonl", "checkpoints/last.pt", "checkpoints/init.pt"):
        assert (tmp_path / "a" / name).exists()
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["model"]["head"] == "jdd" and cfg["method"]["method"] == "rcl" and cfg["lr"] == 1e-3
    assert cfg["eps"] == 1e-7 and "command" in cfg
    rec = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert {"step", "loss", "lr", "patches_per_s", "contrast", "consistency"} <= set(rec)
    _fit(tmp_path / "b", 3)
    _fit(tmp_path / "b", 6, resume=True)
    assert _losses(tmp_path / "b") == _losses(tmp_path / "a")  # exact, not approximately
    m1, _ = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    m2, _ = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.pt")
    assert all(
        torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values(), strict=True)
    )


def test_run_dir_errors(tmp_path):
    _fit(tmp_path / "r", 1, method="n2s")
    with pytest.raises(RawrclError, match="--resume"):
        _fit(tmp_path / "r", 1, method="n2s")
    _fit(tmp_path / "r", 1, method="n2s", force=True)
    with pytest.raises(RawrclError, match="last.pt"):
        _fit(tmp_path / "empty", 1, resume=True)
    _fit(tmp_path / "r2", 2, method="n2s")
    with pytest.raises(RawrclError, match="at step 2, beyond --steps 1"):  # it would record 1 step, not 2
        _fit(tmp_path / "r2", 1, method="n2s", resume=True)


KILL_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    torch.set_num_threads(1)
    from test_train import _fit
    _fit({run!r}, 10000, method="n2s")
    """
)


def test_sigkill_and_resume(tmp_path):
    torch.set_num_threads(1)
    run = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT.format(tests=str(REPO / "tests"), run=str(run))]
    )
    try:
        wait_for_steps(run, 4)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    k = ckpt["extra"]["step"]
    assert k >= 3
    _fit(run, k + 3, resume=True, method="n2s")
    _fit(tmp_path / "ref", k + 3, method="n2s")
    assert _losses(run) == _losses(tmp_path / "ref")


@pytest.mark.parametrize("capability", ["AVX2", "AVX512"])
def test_trainer_memory_format_follows_the_cpu(tmp_path, monkeypatch, capability):
    """``channels_last="auto"`` trains in NHWC on an AVX-512 CPU and in the plain layout on an AVX2 one."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    torch.manual_seed(0)
    model = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2})
    conf = {"steps": 1, "batch_size": 2, "log_every": 1, "device": "cpu"}
    Trainer(model, make_method("n2s"), _dataset(), tmp_path / "run", conf).fit()
    w = next(p for p in model.parameters() if p.ndim == 4 and p.shape[1] > 1)
    assert w.is_contiguous(memory_format=torch.channels_last) is (capability == "AVX512")
    assert w.is_contiguous() is (capability == "AVX2")


def _ddp_worker(rank, world, port, out):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    import torch.distributed as dist

    try:
        torch.manual_seed(0)
        model = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 4, "depth": 1})
        conf = {"steps": 2, "batch_size": 2, "log_every": 1, "device": "cpu"}
        Trainer(model, make_method("rcl"), _dataset(), out, conf).fit()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        torch.save(flat, Path(out).parent / f"params{rank}.pt")
    except BaseException:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    # the Trainer has destroyed its process group; leave without interpreter teardown (tests/_spawn.py)
    leave_rank(str(Path(out).parent / "rank"), rank, world)


def test_ddp_two_ranks_gloo(tmp_path):
    out = tmp_path / "ddp"
    run_ranks(_ddp_worker, 2, str(out), timeout=180)
    p0 = torch.load(tmp_path / "params0.pt", weights_only=True)
    p1 = torch.load(tmp_path / "params1.pt", weights_only=True)
    assert torch.equal(p0, p1)  # gradients were all-reduced
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [1, 2]  # only rank 0 wrote
    assert json.loads((out / "config.json").read_text())["world_size"] == 2
    assert (out / "checkpoints" / "last.pt").exists()


def test_cli_pretrain_and_inspect(tmp_path):
    from click.testing import CliRunner
    from rawrcl.cli import main

    from rawrcl.sample_data import write_bundled_photos

    photos = tmp_path / "photos"
    for p in write_bundled_photos(photos, 3):
        import cv2

        cv2.imwrite(str(p), cv2.imread(str(p))[:96, :96])
    runner = CliRunner()
    run = tmp_path / "run"
    args = [
        "pretrain",
        str(photos),
        "--out",
        str(run),
        "--task",
        "denoise",
        "--steps",
        "3",
        "--batch-size",
        "3",
        "--crop",
        "32",
        "--width",
        "8",
        "--depth",
        "2",
        "--encoder",
        "none",
        "--log-every",
        "1",
    ]
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert len(_losses(run)) == 3
    res = runner.invoke(main, args)
    assert res.exit_code == 1 and "--resume" in res.output and "Traceback" not in res.output
    res = runner.invoke(main, ["pretrain", str(photos), "--out", str(tmp_path / "r2"), "--task", "jdd"])
    assert res.exit_code == 1 and "RAW" in res.output
    res = runner.invoke(
        main, ["inspect", str(run), "--json", "--rounds", "1", "--plot", str(tmp_path / "g.png")]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {"gap_before", "gap_after", "gap_true", "unit"} <= set(out) and out["gap_true"] is not None
    assert (tmp_path / "g.png").stat().st_size > 1000


STOP_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    torch.set_num_threads(1)
    from test_train import _fit
    from rawrcl.train import TrainingInterrupted
    try:
        _fit({run!r}, 10000, method="n2s", save_every=1000)
    except TrainingInterrupted as e:
        print(e.step, flush=True)
        sys.exit(e.exit_code)
    """
)


def test_sigterm_saves_the_current_step_and_resumes(tmp_path):
    """SIGTERM mid-run: the trainer writes last.pt at the step it reached (not only every save_every
    steps), exits 130 with one line, and the resumed run continues exactly."""
    torch.set_num_threads(1)
    run = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-c", STOP_SCRIPT.format(tests=str(REPO / "tests"), run=str(run))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_steps(run, 3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    k = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["extra"]["step"]
    assert k == int(out.split()[-1]) >= 3  # saved at the step reached, although save_every=1000
    _fit(run, k + 2, resume=True, method="n2s")
    _fit(tmp_path / "ref", k + 2, method="n2s")
    assert _losses(run) == _losses(tmp_path / "ref")


def test_grad_clip_logs_the_norm_and_caps_the_step(tmp_path):
    torch.set_num_threads(1)
    _fit(tmp_path / "free", 2, method="n2s")
    _fit(tmp_path / "clip", 2, method="n2s", grad_clip=1e-6)
    free, clip = (
        [json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
        for d in ("free", "clip")
    )
    # the logged norm is the one before clipping: identical at step 1, far above the cap
    assert free[0]["grad_norm"] == clip[0]["grad_norm"] > 1e-3
    assert free[0]["loss"] == clip[0]["loss"]
    # a gradient clipped to 1e-6 moves Adam (ε = 1e-7) far less: the second losses differ
    assert abs(free[1]["loss"] - clip[1]["loss"]) > 1e-6
    assert json.loads((tmp_path / "clip" / "config.json").read_text())["grad_clip"] == 1e-6


def test_zero_intervals_mean_only_at_the_end(tmp_path):
    """save_every / log_every ≤ 0 (as `rawrcl demo --pretrain` passes) log and save at the last step only."""
    torch.set_num_threads(1)
    summary = _fit(tmp_path / "r", 2, method="n2s", save_every=0, log_every=0)
    assert summary["steps"] == 2
    assert [json.loads(x)["step"] for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()] == [2]
    assert (tmp_path / "r" / "checkpoints" / "last.pt").exists()


def test_ema_checkpoints_hold_the_average_and_resume_exactly(tmp_path):
    """With ``ema`` the saved state_dict is the warm-up EMA of the optimiser's weights (which travel in
    extra["train_weights"]); training itself is unchanged and a resumed run reproduces the same average."""
    torch.set_num_threads(1)
    _fit(tmp_path / "plain", 4, method="n2s")
    _fit(tmp_path / "ema", 4, method="n2s", ema=0.9, keep_every=1)
    assert _losses(tmp_path / "ema") == _losses(tmp_path / "plain")
    ck = tmp_path / "ema" / "checkpoints"
    init = torch.load(ck / "init.pt", weights_only=True)["state_dict"]
    expected = {k: v.clone() for k, v in init.items()}
    for t in range(1, 5):
        saved = torch.load(ck / f"step_{t:07d}.pt", weights_only=True)
        d = min(0.9, (1 + t) / (10 + t))
        for k, w in saved["extra"]["train_weights"].items():
            expected[k] = d * expected[k] + (1 - d) * w
            assert torch.allclose(saved["state_dict"][k], expected[k], atol=1e-6), (t, k)
    last = torch.load(ck / "last.pt", weights_only=True)
    plain = torch.load(tmp_path / "plain" / "checkpoints" / "last.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(plain[k], v) for k, v in last["extra"]["train_weights"].items())
    assert any(not torch.equal(plain[k], v) for k, v in last["state_dict"].items())
    # kill-and-resume: same losses and bit-identical average
    _fit(tmp_path / "b", 2, method="n2s", ema=0.9)
    _fit(tmp_path / "b", 4, method="n2s", ema=0.9, resume=True)
    assert _losses(tmp_path / "b") == _losses(tmp_path / "ema")
    resumed = torch.load(tmp_path / "b" / "checkpoints" / "last.pt", weights_only=True)
    for key in ("state_dict",):
        assert all(torch.equal(resumed[key][k], v) for k, v in last[key].items())
    with pytest.raises(RawrclError, match="ema"):
        _fit(tmp_path / "bad", 1, method="n2s", ema=1.0)
    assert not (tmp_path / "bad").exists()  # refused before the run directory is made


def test_cosine_schedule_is_a_function_of_the_step():
    from rawrcl.train import lr_schedule

    f = lr_schedule(1e-3, "cosine", 100)
    assert f(0) == pytest.approx(1e-3) and f(100) == pytest.approx(1e-5)
    assert f(50) == pytest.approx(1e-3 * (0.01 + 0.99 * 0.5))
    assert lr_schedule(2e-4, "constant", 10)(7) == 2e-4
    with pytest.raises(RawrclError, match="lr-schedule"):
        lr_schedule(1e-3, "step", 10)


def test_progress_in_a_log_file_is_plain_lines(tmp_path, capsys):
    """Off a terminal (pytest's captured stderr) a run prints a line every 10 % of its steps; False: none."""
    torch.set_num_threads(1)
    _fit(tmp_path / "a", 20, method="n2s", progress=None)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("train: step")]
    assert [x.split()[2] for x in lines] == [f"{s}/20" for s in range(2, 21, 2)]
    assert "(100 %)" in lines[-1] and lines[-1].endswith("0 s left") and "steps/s" in lines[0]
    _fit(tmp_path / "b", 4, method="n2s", progress=False)
    assert "train: step" not in capsys.readouterr().err


def test_progress_durations_read_as_people_say_them():
    from rawrcl.train.progress import Progress, format_duration

    assert [format_duration(s) for s in (3.2, 600, 7200, -1)] == ["3 s", "10 min", "2.0 h", "0 s"]
    with pytest.raises(ValueError, match="mode"):
        Progress("verbose", 10, 0)
