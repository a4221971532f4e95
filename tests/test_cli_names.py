"""One name per concept on the command line: choices come from the registries, renamed options keep the
old spelling as a hidden deprecated alias (docs/architecture.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from rawrcl.cli import main

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "release_0_1_0"


def _option(command: str, name: str):
    from rawrcl.cli import LazyGroup

    cmd = LazyGroup._load(command)
    return next(p for p in cmd.params if p.name == name)


def test_choices_come_from_the_registries():
    from rawrcl.calibration.api import METHODS as CAL_METHODS

    from rawrcl.bench import BENCH_PROTOCOLS
    from rawrcl.cfa import PATTERNS
    from rawrcl.device import PRECISIONS
    from rawrcl.methods import PRETEXT_METHODS
    from rawrcl.models import ARCHS
    from rawrcl.tasks import PRETEXT_TASKS
    from rawrcl.train import FINETUNE_PROTOCOLS

    assert set(_option("pretrain", "task").type.choices) == set(PRETEXT_TASKS)
    assert set(_option("pretrain", "method").type.choices) == set(PRETEXT_METHODS)
    assert set(_option("pretrain", "arch").type.choices) == set(ARCHS) - {"encoder"}
    assert tuple(_option("pretrain", "precision").type.choices) == PRECISIONS
    assert tuple(_option("finetune", "precision").type.choices) == PRECISIONS
    assert tuple(_option("finetune", "protocol").type.choices) == FINETUNE_PROTOCOLS
    assert tuple(_option("bench", "protocol").type.choices) == tuple(BENCH_PROTOCOLS)
    assert tuple(_option("calibrate", "method").type.choices) == CAL_METHODS
    assert tuple(_option("simulate", "pattern").type.choices) == PATTERNS


def test_old_names_still_importable():
    from rawrcl.bench import BENCH_PROTOCOLS, PROTOCOLS
    from rawrcl.infer import resolve_device, resolve_precision
    from rawrcl.infer.tiling import resolve_device as tiling_resolve_device
    from rawrcl.train import FINETUNE_PROTOCOLS, select_device
    from rawrcl.train import PROTOCOLS as FT

    assert PROTOCOLS is BENCH_PROTOCOLS and FT is FINETUNE_PROTOCOLS
    assert resolve_device is tiling_resolve_device and callable(resolve_precision) and callable(select_device)


def test_precision_spelling_and_legacy_amp():
    import torch

    from rawrcl.device import normalize_precision, resolve_precision

    assert normalize_precision("off") == "fp32" and normalize_precision(None) == "auto"
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, training=True) is None
    assert resolve_precision("bf16", cpu, training=True) == torch.bfloat16


def test_deprecated_amp_and_overlap_aliases(tmp_path):
    """``pretrain --amp off --overlap 0.4`` still works: one warning line each, stored as precision fp32 and
    the pair overlap 0.4."""
    shutil.copytree(FIXTURE / "data", tmp_path / "data")
    out = tmp_path / "run"
    args = ["pretrain", str(tmp_path / "data"), "--out", str(out), "--task", "raw-denoise", "--method", "n2s"]
    args += ["--arch", "dncnn", "--width", "8", "--depth", "3", "--steps", "1", "--batch-size", "2"]
    args += ["--crop", "32", "--cache-dir", "none", "--amp", "off", "--overlap", "0.4"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert (
        "--amp is deprecated" in res.output and "--overlap (pair area fraction) is deprecated" in res.output
    )
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["precision"] == "fp32" and "amp" not in cfg
    assert cfg["data_options"]["overlap"] == 0.4


def test_bench_takes_the_noise_grammar(tmp_path, monkeypatch):
    import rawrcl.bench

    seen = {}

    def fake_run_bench(protocol, *args, overrides=None, **kwargs):
        seen.update(overrides or {})
        return {"records": [], "wall_s": 0.0}

    monkeypatch.setattr(rawrcl.bench, "run_bench", fake_run_bench)
    base = ["bench", "--train-dir", str(tmp_path), "--test-dir", str(tmp_path), "--out", str(tmp_path / "r")]
    res = CliRunner().invoke(main, [*base, "--noise", "0.01, 0.0016"])
    assert res.exit_code == 0, res.output
    assert seen["noise"] == "0.01,0.0016"
    res = CliRunner().invoke(main, [*base, "--noise", "metadata"])
    assert res.exit_code != 0 and "--noise" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
