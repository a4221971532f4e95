"""A run folder and checkpoint written by rawrcl 0.1.0 before the redesign still load and resume
(fixture: tests/fixtures/release_0_1_0, how it was made in its README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch
from click.testing import CliRunner

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "release_0_1_0"


def _copy(tmp_path: Path) -> Path:
    """The fixture in ``tmp_path`` with ``data_dir`` pointing at its copied DNGs."""
    shutil.copytree(FIXTURE, tmp_path / "old")
    run = tmp_path / "old" / "run"
    cfg = json.loads((run / "config.json").read_text())
    cfg["data_dir"] = str(tmp_path / "old" / "data")
    (run / "config.json").write_text(json.dumps(cfg, indent=2))
    return run


def test_old_checkpoint_loads_for_inference(tmp_path):
    from rawrcl.infer import denoise_cfa
    from rawrcl.infer.tiling import tiled_apply
    from rawrcl.models.loading import load_for_task

    model, _ = load_for_task(FIXTURE / "run" / "checkpoints" / "last.pt", "raw-denoise")
    x = torch.rand(1, 4, 24, 24, generator=torch.Generator().manual_seed(0))
    y = tiled_apply(model, x, tile=16, overlap=4, precision="fp32")
    assert y.shape == x.shape and torch.isfinite(y).all()
    cfa = np.random.default_rng(0).random((48, 48), dtype=np.float32)
    from rawrcl.infer import TileOptions

    out = denoise_cfa(model, cfa, "RGGB", TileOptions(tile=32, overlap=8, precision="fp32"))
    assert out.shape == cfa.shape and np.isfinite(out).all()


def test_old_run_resumes_one_more_step(tmp_path):
    from rawrcl.cli import main

    run = _copy(tmp_path)
    res = CliRunner().invoke(
        main, ["pretrain", str(run.parent / "data"), "--out", str(run), "--resume", "--steps", "5", "--json"]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output[res.output.index("{") :])
    assert summary["start_step"] == 4 and summary["steps"] == 5
    ckpt = torch.load(run / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
    assert ckpt["extra"]["step"] == 5
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["resumed_from_step"] == 4 and cfg["model"]["arch"] == "dncnn"
