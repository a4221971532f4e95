"""The bench's pre-training runs and residual-gap figures, as library calls (``rawrcl.train.pretrain``,
``rawrcl.inspect``); each records the equivalent ``rawrcl`` command line. ``bench`` is the
:class:`rawrcl.bench.runner.Bench` they run for (not imported here: the runner imports this module)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from rawrcl.bench.protocols import PRETEXTS, _cmd
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.tasks import TASKS
from rawrcl.train.config import DataConfig, ModelConfig, PretrainConfig, TrainingConfig
from rawrcl.train.pretraining import run_pretrain


def pretrain_run(bench: Any, pretext: str, task: str) -> tuple[Path | None, dict]:
    """One ``rawrcl pretrain --task TASK`` run (RAW tasks on synthetic noisy mosaics)."""
    pt = PRETEXTS[pretext]
    raw = TASKS[task].raw_input
    run = bench.runs_dir / f"pretrain__{task}__{pretext}{bench._skip_tag}"
    args = [
        "rawrcl",
        "pretrain",
        str(bench.train_dir),
        "--out",
        str(run),
        "--task",
        task,
        "--method",
        pt.method,
        *pt.args,
        "--arch",
        bench.p.arch,
        "--width",
        str(bench.p.width),
        bench._skip_flag,
        "--steps",
        str(bench.p.pretrain_steps),
        "--batch-size",
        str(bench.p.pretrain_batch),
        "--crop",
        str(bench.p.crop),
        "--seed",
        "0",
        "--device",
        bench.p.device,
        "--noise",
        bench.p.noise,
    ]
    if raw:
        args.append("--synthetic")
    if bench.p.depth:
        args += ["--depth", str(bench.p.depth)]
    if bench.p.extra.get("pretrain_args"):
        raise RawrclError(
            "Protocol.extra['pretrain_args'] is no longer read: the bench pre-trains in-process"
        )
    info = {"pretext": pretext, "task": task, "command": _cmd(args), "ok": False}
    ckpt = run / "checkpoints" / "last.pt"
    done = run / "bench_done.json"
    if bench.resume and done.exists():
        prev = json.loads(done.read_text())
        if prev.get("command") == info["command"]:  # same budget and options: reuse
            return ckpt, prev
    if run.exists():
        shutil.rmtree(run)
    t0 = time.perf_counter()
    try:  # the library call behind the recorded command (same options and defaults as the CLI)
        config = PretrainConfig(
            data_dir=str(bench.train_dir),
            out=str(run),
            task=task,
            method=pt.method,
            method_options=pt.method_options,
            model=ModelConfig(
                arch=bench.p.arch, width=bench.p.width, depth=bench.p.depth or None, skip=bench.p.skip
            ),
            data=DataConfig(crop=bench.p.crop, synthetic=raw, noise=bench.p.noise, cache_dir="auto"),
            training=TrainingConfig(
                steps=bench.p.pretrain_steps, batch_size=bench.p.pretrain_batch, seed=0, device=bench.p.device
            ),
        )
        run_pretrain(config, command=info["command"], progress=False)
    except RawrclError as exc:
        info["error"] = str(exc)
    info["wall_s"] = round(time.perf_counter() - t0, 1)
    if "error" in info or not ckpt.exists():
        info.setdefault("error", f"{ckpt} was not written")
        bench.log(f"[bench] pretrain {pretext} ({task}) FAILED: {info['error']}")
        return None, info
    info["ok"] = True
    atomic_write_text(done, json.dumps(info, indent=2))
    bench.log(f"[bench] pretrain {pretext} ({task}) done in {info['wall_s']} s")
    return ckpt, info


def density_run(bench: Any, ckpt: Path, name: str) -> dict:
    """Residual-EMD density (paper Fig. 2) through the engine's ``rawrcl inspect``, if it exists."""
    run = ckpt.parent.parent
    plot = bench.out / f"fig_density_{name}.png"
    args = ["rawrcl", "inspect", str(run), "--plot", str(plot), "--json", "--force"]
    from rawrcl.inspect import plot_gaps, residual_gaps, result_json

    result = error = None
    try:  # the library calls behind the recorded command
        result = residual_gaps(run, None, None, crop=None, rounds=8, seed=1234)
        plot_gaps(result, plot, force=True)
    except RawrclError as exc:
        error = str(exc)
    info: dict[str, Any] = {"command": _cmd(args), "plot": plot.name if plot.exists() else None}
    if error is None:
        info["result"] = json.loads(result_json(result))
    else:
        info["error"] = error
    return info
