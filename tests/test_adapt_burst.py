"""``rawrcl adapt --method burst`` (rawrcl.train.adapt_burst) and its frame-to-frame loop
(rawrcl.train.adapt_f2f) on a small synthetic DNG burst: checkpoints and resume, the three stages end to end,
the one-line refusals of folders that are not bursts, and the run as a model the commands load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from tests.test_burst_f2f import _tiny_pairs, _tiny_two_stage


def test_f2f_resume_after_a_stop_gives_the_uninterrupted_weights(tmp_path):
    """3 steps in one go and 2 + a resumed 1 end with the same weights (average and trained), Adam state and
    random draws restored; the checkpoint is an ordinary model file of the average."""
    from rawrcl.models.registry import load_checkpoint
    from rawrcl.train.adapt_f2f import LAST, train_f2f

    opts = {"batch": 2, "ema": 0.9, "anchor": 0.05, "save_every": 1, "lr": 1e-3}
    whole = _tiny_two_stage()
    train_f2f(whole, _tiny_pairs(), 3, run=tmp_path / "a", **opts)
    part = _tiny_two_stage()
    train_f2f(part, _tiny_pairs(), 2, run=tmp_path / "b", **opts)
    again = _tiny_two_stage()  # a fresh process: the start again, then the run's last.pt
    rows = train_f2f(again, _tiny_pairs(), 3, run=tmp_path / "b", resume=True, **opts)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for (k, a), b in zip(whole.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), k
    saved, _ = load_checkpoint(tmp_path / "b" / LAST)
    for a, b in zip(saved.state_dict().values(), whole.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert not torch.equal(next(saved.parameters()), next(_tiny_two_stage().parameters()))


def test_f2f_stopped_between_rows_resumes_to_the_same_rows(tmp_path, monkeypatch):
    """A stop between two written rows (SIGTERM at step 2 of rows every 4) and a resume give the rows of the
    uninterrupted run (the running sums are saved); a resume with fewer steps than reached is refused."""
    import signal
    from contextlib import contextmanager

    from rawrcl.errors import RawrclError
    from rawrcl.train import adapt_f2f
    from rawrcl.train.signals import TrainingInterrupted

    opts = {"batch": 2, "ema": 0.9, "anchor": 0.05, "save_every": 4, "lr": 1e-3}
    whole = adapt_f2f.train_f2f(_tiny_two_stage(), _tiny_pairs(), 4, run=tmp_path / "a", **opts)
    got: list[int] = []

    @contextmanager
    def requests(enabled):
        yield got

    class StopAtTwo(adapt_f2f.Progress):
        def update(self, step, loss):
            super().update(step, loss)
            if step == 2:
                got.append(signal.SIGTERM)

    monkeypatch.setattr(adapt_f2f, "_stop_requests", requests)
    monkeypatch.setattr(adapt_f2f, "Progress", StopAtTwo)
    with pytest.raises(TrainingInterrupted, match=r"at step 2; .*b/last.pt is saved"):
        adapt_f2f.train_f2f(_tiny_two_stage(), _tiny_pairs(), 4, run=tmp_path / "b", **opts)
    monkeypatch.undo()
    rows = adapt_f2f.train_f2f(_tiny_two_stage(), _tiny_pairs(), 4, run=tmp_path / "b", resume=True, **opts)
    assert [r["step"] for r in rows] == [r["step"] for r in whole] == [4]
    for a, b in zip(rows, whole, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=2e-4) and a["mask"] == pytest.approx(
            b["mask"], abs=2e-3
        )
    with pytest.raises(RawrclError, match="at step 4, beyond --burst-steps 3"):
        adapt_f2f.train_f2f(_tiny_two_stage(), _tiny_pairs(), 3, run=tmp_path / "b", resume=True, **opts)


def _dng_burst(folder, n=4, size=None):
    from rawrcl.io.dng import write_dng
    from tests.test_burst import _burst

    folder.mkdir()
    _, _, noisy = _burst(n=n)
    for k, x in enumerate(noisy):
        if size is not None and k == n - 1:
            x = x[:size, :size]
        dn = np.clip(x * 3583 + 512, 0, 4095).astype(np.uint16)
        write_dng(folder / f"frame{k:02d}.dng", dn, "RGGB", 512, 4095, noise_profile=(4e-3, 1e-4))
    return folder


@pytest.fixture
def small_f2f(monkeypatch, tmp_path):
    """A tiny two-stage start (its file), a tiny blind-spot network, a small forgetting check, and the
    fine-tune's target blocks at 16 px (the test frames, 256 px with half held out, are too small for 96):
    the plumbing is tested. Returns the small runs' options (:data:`TINY` and ``source``)."""
    from rawrcl.models.registry import save_checkpoint
    from rawrcl.train import adapt_burst
    from rawrcl.train.adapt_signal import check_crops

    monkeypatch.setitem(adapt_burst.F2F, "crop", 16)
    monkeypatch.setattr("rawrcl.train.adapt_blindspot.WIDTH", 4)
    small = check_crops(crop=32, per_photo=1, draws=1, photos=2)
    monkeypatch.setattr("rawrcl.train.adapt_signal.check_crops", lambda: small)
    monkeypatch.setattr("rawrcl.train.adapt_burst.check_crops", lambda: small)  # its own import of it
    save_checkpoint(tmp_path / "start.pt", _tiny_two_stage())
    return {**TINY, "source": tmp_path / "start.pt"}


#: the small runs' options (the fixture adds the start's file, ``source``)
TINY: dict = {"steps": 2, "burst_steps": 2, "batch_size": 2, "crop": 32, "held_out": 4}


def test_adapt_burst_runs_the_three_stages_and_writes_a_model_the_commands_run(tmp_path, small_f2f):
    from rawrcl.models.beside import WithFineTune
    from rawrcl.models.blindspot import WithBlindSpot
    from rawrcl.models.loading import load_for_task
    from rawrcl.models.registry import load_checkpoint
    from rawrcl.train.adapt import adapt
    from rawrcl.train.adapt_burst import NAMES

    burst = _dng_burst(tmp_path / "burst")
    run = tmp_path / "run"
    # "last" within any forgetting: every stage's last candidate is kept (the plumbing, not the choice)
    res = adapt(burst, run, method="burst", progress=False, select="last", forget_tol=1e9, **small_f2f)
    assert [r["model"] for r in res["held_out"]] == list(NAMES)
    assert "sure" in res["held_out"][0]  # too few compared samples in these small frames: held-out SURE chose
    assert res["fuse_bm3d"] == 0 and res["fusion"] == []  # and no burst signal to weigh GAT+BM3D by
    assert [r["step"] for r in res["held_out"]] == [0, 2, 4] and res["selected_step"] == 4
    assert res["verdict"] == f"adapted ({NAMES[2]})" and res["method"] == "burst"
    assert res["settings"]["burst_steps"] == 2
    stages = res["stages"]
    assert (
        stages["blindspot"]["run"] == str(run / "blindspot")
        and stages["blindspot"]["verdict"] != "kept start"
    )
    assert (run / "blindspot" / "adapt.json").is_file() and (run / "f2f" / "last.pt").is_file()
    assert [r["step"] for r in stages["f2f"]["rows"]] == [2] and stages["f2f"]["crop"] == 16
    assert json.loads((run / "adapt.json").read_text())["verdict"] == res["verdict"]
    model, _ = load_for_task(run, "raw-denoise")
    assert isinstance(model, WithFineTune) and isinstance(model.base, WithBlindSpot)
    fine, _ = load_checkpoint(run / "f2f" / "last.pt")  # the composite holds the fine-tune's average
    for k, v in fine.state_dict().items():
        assert torch.equal(model.state_dict()[f"{model.other_key}.{k}"].float(), v.float()), k
    # the commands run it
    from rawrcl.cli import main

    out = tmp_path / "d.dng"
    r = CliRunner().invoke(main, ["denoise", str(burst / "frame00.dng"), "-o", str(out), "--model", str(run)])
    assert r.exit_code == 0, r.output
    import rawpy

    with rawpy.imread(str(out)) as raw:
        assert raw.raw_image_visible.shape == (256, 256)
    # --resume of a finished run trains nothing again and gives the same choice
    again = adapt(burst, run, method="burst", progress=False, resume=True, source=small_f2f["source"])
    assert again["selected_step"] == res["selected_step"]
    assert again["stages"]["f2f"]["rows"] == stages["f2f"]["rows"]
    # a run exists: refused without --resume / --force
    with pytest.raises(Exception, match="already holds a run"):
        adapt(burst, run, method="burst", progress=False, **small_f2f)


def test_adapt_burst_reuses_an_earlier_blindspot_run(tmp_path, small_f2f, monkeypatch):
    from rawrcl.errors import RawrclError
    from rawrcl.train.adapt import adapt

    burst = _dng_burst(tmp_path / "burst")
    bs = tmp_path / "bs"
    first = adapt(
        burst,
        bs,
        method="blindspot",
        progress=False,
        **{k: v for k, v in small_f2f.items() if k != "burst_steps"},
    )
    from rawrcl.cli import main

    args = [
        "adapt",
        str(burst),
        "--out",
        str(tmp_path / "run"),
        "--method",
        "burst",
        "--blindspot-run",
        str(bs),
    ]
    args += ["--from", str(small_f2f["source"]), "--steps", "2", "--burst-steps", "2", "--batch-size", "2"]
    # the test frames are too small for MIN_SAMPLES compared samples (and their registrations land between
    # samples): the burst signal chooses all the same, comparing every sample with its nearest
    monkeypatch.setattr("rawrcl.train.adapt_burst.MIN_SAMPLES", 1)
    monkeypatch.setattr("rawrcl.train.burst_signal.EPS", 0.5)
    r = CliRunner().invoke(main, [*args, "--crop", "32", "--held-out", "4", "--forget-tol", "1e9"])
    assert r.exit_code == 0, r.output
    assert "adapted 4 files with burst (2 + 2 steps)" in r.output and "held-out burst signal" in r.output
    res = json.loads((tmp_path / "run" / "adapt.json").read_text())
    rows = res["held_out"]
    assert [r["step"] for r in rows] == [0, 2, 4] and all(r["burst_samples"] > 0 for r in rows)
    assert rows[1]["forget_from"] == "stage 1"  # the blind-spot run's check, not scored again
    assert rows[1]["forget_db"] == next(r for r in first["held_out"] if r["step"] == 2)["forget_db"]
    assert res["selected_step"] == min(rows, key=lambda r: (r["burst"], r["step"]))["step"]
    assert "delta_burst_db" in res and "delta_sure_db" not in res
    # then GAT+BM3D's weight, by the same signal: the smallest within one standard error of the best
    from rawrcl.models.loading import adapted_fusion
    from rawrcl.train.burst_signal import FUSE_GRID

    fusion = res["fusion"]
    assert [r["fuse_bm3d"] for r in fusion] == list(FUSE_GRID) and fusion[0]["burst_dmse"] == 0
    top = max(fusion, key=lambda r: r["burst_dmse"])
    bar = top["burst_dmse"] - (top["burst_dmse_se"] or 0)
    assert res["fuse_bm3d"] == min(r["fuse_bm3d"] for r in fusion if r["burst_dmse"] >= bar)
    assert adapted_fusion(tmp_path / "run") == res["fuse_bm3d"]  # what rawrcl denoise --model RUN fuses at
    assert "GAT+BM3D's weight:" in r.output
    assert res["stages"]["blindspot"]["run"] == str(bs)
    assert res["stages"]["blindspot"]["verdict"] == first["verdict"]
    assert not (tmp_path / "run" / "blindspot").exists()
    with pytest.raises(RawrclError, match="serves no other method"):
        adapt(burst, tmp_path / "x", method="sure", blindspot_run=bs, source=small_f2f["source"])
    other = _dng_burst(tmp_path / "other", n=3)
    with pytest.raises(RawrclError, match=r"other files than these \(frame03.dng, 256×256 px, only there\)"):
        adapt(other, tmp_path / "y", method="burst", blindspot_run=bs, **small_f2f)
    assert not (tmp_path / "y").exists()  # refused before anything is written: the same --out works again


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: _dng_burst(p, n=2), "at least 3 frames"),
        (lambda p: _dng_burst(p, n=4, size=192), "files of one size"),
        (lambda p: _with_copy(_dng_burst(p, n=3)), "frame09.dng is a copy of frame00.dng"),
    ],
)
def test_a_folder_that_is_not_a_burst_is_refused_in_one_line_before_training(tmp_path, make, message):
    from rawrcl.cli import main

    folder = make(tmp_path / "f")
    run = tmp_path / "run"
    r = CliRunner().invoke(main, ["adapt", str(folder), "--out", str(run), "--method", "burst"])
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output
    assert not (run / "blindspot").exists()


def _with_copy(folder):
    import shutil

    shutil.copy(folder / "frame00.dng", folder / "frame09.dng")  # the same values: no noise of its own
    return folder


def test_a_fresh_run_clears_stale_results_and_a_resume_keeps_them(tmp_path, small_f2f, monkeypatch):
    """--force (or a new run) removes a finished run's results in the run and its stage folders before it
    trains, so a stop before the end is never read as finished; --resume keeps them until replaced."""
    from rawrcl.errors import RawrclError
    from rawrcl.models.loading import checkpoint_for
    from rawrcl.train import adapt_burst
    from rawrcl.train.adapt import adapt

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    burst, run = _dng_burst(tmp_path / "burst"), tmp_path / "run"
    results = [run / "adapt.json", run / "denoise.pt", run / "blindspot" / "adapt.json"]
    results.append(run / "blindspot" / "denoise.pt")
    for p in results:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"verdict": "kept start"}))  # a finished run's (stage 1 done)
    (run / "config.json").write_text("{}")
    monkeypatch.setattr(adapt_burst, "train_f2f", stop)  # stopped in stage 2
    with pytest.raises(Stop):
        adapt(burst, run, method="burst", resume=True, progress=False, **small_f2f)
    assert all(p.exists() for p in results)
    monkeypatch.setattr(adapt_burst, "adapt_blindspot", stop)  # stopped in stage 1
    with pytest.raises(Stop):
        adapt(burst, run, method="burst", force=True, progress=False, **small_f2f)
    assert not any(p.exists() for p in results)
    with pytest.raises(RawrclError, match="has not finished .* --resume"):
        checkpoint_for(run, "raw-denoise")
    with pytest.raises(RawrclError, match="names a file"):
        adapt(burst, burst / "frame01.dng", method="burst", **small_f2f)


def test_a_blindspot_run_on_other_values_or_with_an_unreadable_model_is_refused(tmp_path, small_f2f):
    from rawrcl.data.noisy_crops import NoiseFile
    from rawrcl.errors import RawrclError
    from rawrcl.models.registry import save_checkpoint
    from rawrcl.train.adapt_burst import reuse_blindspot

    here = [NoiseFile("f0.dng", np.full((4, 8, 8), 0.5, np.float32), torch.zeros(2, 4), None, 0.0)]
    there = NoiseFile("f0.dng", np.full((4, 8, 8), 0.25, np.float32), torch.zeros(2, 4), None, 0.0)
    run, src = tmp_path / "bs", str(small_f2f["source"])
    run.mkdir()
    save_checkpoint(run / "denoise.pt", _tiny_two_stage())
    summary = {"method": "blindspot", "raw_checkpoint": str(run / "denoise.pt"), "source": src}
    for f, ok in ((there, False), (here[0], True)):
        (run / "adapt.json").write_text(json.dumps({**summary, "files": [f.describe()]}))
        if ok:
            assert reuse_blindspot(run, here, src)["run_dir"] == str(run)
        else:
            with pytest.raises(RawrclError, match="another f0.dng than this one"):
                reuse_blindspot(run, here, src)
    (run / "denoise.pt").write_bytes(b"PK\x03\x04 cut")  # read now, not after the fine-tune
    with pytest.raises(RawrclError, match="not a readable rawrcl checkpoint"):
        reuse_blindspot(run, here, src)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "sure", "--from", "{burst}/frame01.dng"], "not a readable rawrcl checkpoint"),
        (["--method", "blindspot", "--from", "{burst}/frame01.dng"], "not a readable rawrcl checkpoint"),
        (["--method", "burst", "--blindspot-run", "{burst}"], "not a finished rawrcl adapt run"),
    ],
)
def test_a_bad_start_or_first_stage_is_refused_before_the_files_are_read(tmp_path, extra, message):
    from rawrcl.cli import main

    burst = _dng_burst(tmp_path / "burst", n=3)
    args = ["adapt", str(burst), "--out", str(tmp_path / "run")] + [a.format(burst=burst) for a in extra]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output
    assert "λshot" not in r.output  # no file's noise was read or estimated


def test_frames_of_different_scenes_do_not_register(tmp_path):
    from rawrcl.io.dng import write_dng

    folder = tmp_path / "f"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):  # noise only: nothing to register
        dn = (512 + 3583 * rng.uniform(0.1, 0.9, (256, 256))).astype(np.uint16)
        write_dng(folder / f"f{k}.dng", dn, "RGGB", 512, 4095, noise_profile=(4e-3, 1e-4))
    from rawrcl.cli import main

    r = CliRunner().invoke(main, ["adapt", str(folder), "--out", str(tmp_path / "run"), "--method", "burst"])
    assert r.exit_code != 0 and "do not register" in r.output and "Traceback" not in r.output
