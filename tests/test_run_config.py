"""One validated configuration per pre-training run (rawrcl.train.config), built alike by the CLI and the
Python API and saved in config.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rawrcl.errors import RawrclError
from rawrcl.train.config import DataConfig, ModelConfig, PretrainConfig, TrainingConfig

DATA = Path(__file__).resolve().parent / "fixtures" / "release_0_1_0" / "data"


def test_roundtrip_and_defaults():
    cfg = PretrainConfig("d", "o", task="raw-denoise", method="n2s", data=DataConfig(crop=32))
    again = PretrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.training.precision == "auto"
    assert TrainingConfig.from_options({"amp": "off"}).precision == "fp32"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PretrainConfig("d", "o", task="jdemsr"), "--task"),
        (lambda: PretrainConfig("d", "o", method="nope"), "--method"),
        (lambda: PretrainConfig("d", "o", task="denoise", method="m2m"), "m2m"),
        (lambda: PretrainConfig("d", "o", method="r2r"), "rawrcl adapt"),  # needs per-file noise: adapt only
        (lambda: PretrainConfig("d", "o", method="sure"), "rawrcl adapt"),
        (lambda: PretrainConfig("d", "o", resume=True, force=True), "exclude"),
        (lambda: ModelConfig(arch="resnet"), "--arch"),
        (lambda: DataConfig(noise="auto"), "noise"),
        (lambda: TrainingConfig(lr=float("nan")), "--lr"),
        (lambda: TrainingConfig(batch_size=0), "--batch-size"),
        (lambda: TrainingConfig(ema=1.5), "--ema"),
        (lambda: TrainingConfig(precision="fp8"), "--precision"),
        (lambda: TrainingConfig.from_options({"stepz": 3}), "stepz"),
    ],
)
def test_bad_options_are_refused_in_one_line(build, message):
    with pytest.raises(RawrclError, match=message):
        build()


def test_cli_and_api_save_the_same_run_config(tmp_path):
    from rawrcl.cli import main

    from rawrcl.train import pretrain

    shutil.copytree(DATA, tmp_path / "data")
    common = dict(task="raw-denoise", method="n2s", arch="dncnn", width=8, depth=3)
    args = ["pretrain", str(tmp_path / "data"), "--out", str(tmp_path / "cli"), "--task", "raw-denoise"]
    args += ["--method", "n2s", "--arch", "dncnn", "--width", "8", "--depth", "3", "--steps", "1"]
    args += ["--batch-size", "2", "--crop", "32", "--cache-dir", "none"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    pretrain(
        tmp_path / "data",
        tmp_path / "api",
        **common,
        data_options={"crop": 32, "cache_dir": "none"},
        trainer_options={"steps": 1, "batch_size": 2, "progress": False},
    )
    saved = {k: json.loads((tmp_path / k / "config.json").read_text())["run_config"] for k in ("cli", "api")}
    for d in saved.values():
        d.pop("out")
    assert saved["cli"] == saved["api"]
    cfg = PretrainConfig.from_dict({**saved["cli"], "out": str(tmp_path / "cli")})
    assert cfg.model.arch == "dncnn" and cfg.data.crop == 32 and cfg.training.steps == 1
