"""Issue 22, training runs: one run per folder (lock), resume before the first checkpoint, NaN loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from rawrcl.cli import main

from rawrcl.errors import RawrclError
from rawrcl.methods import make_method
from rawrcl.train.runlock import LOCK_NAME, RunLock
from tests._spawn import wait_for_steps
from tests.test_train import _dataset, _fit, _losses

REPO = Path(__file__).resolve().parents[1]

RUN_SCRIPT = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    torch.set_num_threads(1)
    from test_train import _fit
    _fit({run!r}, 10000, method="n2s", save_every=1000)
    """
)


def test_second_run_on_the_folder_refused_stale_lock_taken_over_and_early_kill_resumes(tmp_path):
    torch.set_num_threads(1)
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_SCRIPT.format(tests=str(REPO / "tests"), run=str(run))]
    )
    try:
        wait_for_steps(run, 2)
        owner = json.loads((run / LOCK_NAME).read_text())
        assert owner["pid"] == proc.pid
        before = {p.name: p.stat().st_mtime_ns for p in (run / "checkpoints").iterdir()}
        for extra in ({"resume": True}, {"force": True}, {}):
            with pytest.raises(
                RawrclError, match=rf"another run is using this run directory \(pid {proc.pid} "
            ):
                _fit(run, 3, method="n2s", **extra)
        res = CliRunner().invoke(main, ["pretrain", str(tmp_path), "--out", str(run), "--resume"])
        assert res.exit_code == 1 and "another run is using" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        # nothing of the live run was touched (--force did not delete it)
        assert {p.name: p.stat().st_mtime_ns for p in (run / "checkpoints").iterdir()} == before
        assert (run / "config.json").exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # killed before its first last.pt (save_every 1000): the lock is stale, the run resumable
    assert (run / LOCK_NAME).exists() and not (run / "checkpoints" / "last.pt").exists()
    with pytest.warns(UserWarning) as record:
        _fit(run, 3, method="n2s", resume=True)
    text = " ".join(str(w.message) for w in record)
    assert "took over the lock" in text and f"pid {proc.pid}" in text and "starting the run again" in text
    assert not (run / LOCK_NAME).exists()
    _fit(tmp_path / "ref", 3, method="n2s")
    assert _losses(run) == _losses(tmp_path / "ref")  # restarted from init.pt: the very same run


def test_lock_is_released_on_error_and_refuses_a_live_owner(tmp_path):
    with RunLock(tmp_path / "r") as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
        with pytest.raises(RawrclError, match=f"pid {os.getpid()} on "):
            RunLock(tmp_path / "r").acquire()  # a second lock in the same process is refused too
    assert not (tmp_path / "r" / LOCK_NAME).exists()
    with pytest.raises(RawrclError, match="loss"):
        _fit_nan(tmp_path / "n", 2, 1)
    assert not (tmp_path / "n" / LOCK_NAME).exists()


def _fit_nan(run_dir, steps, k, **cfg):
    """:func:`tests.test_train._fit` with an n2s method whose loss is NaN at step ``k``."""
    from rawrcl.models import build_model
    from rawrcl.train import Trainer

    torch.manual_seed(0)
    model = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2})
    conf = {"steps": steps, "batch_size": 4, "log_every": 1, "save_every": 1, "seed": 3, **cfg}
    return Trainer(model, _NaNAt(k, make_method("n2s")), _dataset(), run_dir, conf).fit()


class _NaNAt:
    """A method whose loss is NaN at call ``k`` (1-based) and the wrapped method's otherwise."""

    def __init__(self, k: int, inner) -> None:
        self.k, self.inner, self.calls = k, inner, 0

    def __call__(self, batch, model):
        self.calls += 1
        out = self.inner(batch, model)
        if self.calls == self.k:
            out = {**out, "loss": out["loss"] * float("nan")}
        return out


def test_nan_loss_stops_with_one_line_and_keeps_the_last_good_state(tmp_path):
    torch.set_num_threads(1)
    run = tmp_path / "nan"
    with pytest.raises(RawrclError) as info:
        _fit_nan(run, 6, 3, save_every=1000)
    msg = str(info.value)
    assert "\n" not in msg and "loss became nan at step 3" in msg and "last.pt (step 2)" in msg
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=True)["extra"]["step"] == 2
    _fit(run, 4, method="n2s", resume=True)
    _fit(tmp_path / "ref", 4, method="n2s")
    assert _losses(run) == _losses(tmp_path / "ref")
    # a NaN at the very first step: nothing to save beyond init.pt, and --resume starts again
    with pytest.raises(RawrclError, match="no checkpoint after init.pt"):
        _fit_nan(tmp_path / "first", 3, 1)
    with pytest.warns(UserWarning, match="starting the run again"):
        _fit(tmp_path / "first", 3, method="n2s", resume=True)
    assert _losses(tmp_path / "first") == _losses(tmp_path / "ref")[:3]
