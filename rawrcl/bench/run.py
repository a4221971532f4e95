"""``rawrcl bench`` as one call: :func:`run_bench` runs the grid and writes ``results.json``,
``report.md`` and the figures."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from rawrcl.bench.protocols import BENCH_PROTOCOLS, Protocol
from rawrcl.bench.report import write_report
from rawrcl.bench.runner import Bench
from rawrcl.bench.summary import _plots, summarise
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text, list_photos
from rawrcl.tasks import TASKS


def run_bench(
    protocol: str | Protocol,
    train_dir: str | Path,
    test_dir: str | Path,
    out: str | Path,
    *,
    seeds: int | None = None,
    limit: int | None = None,
    resume: bool = False,
    force: bool = False,
    tasks: tuple[str, ...] | None = None,
    overrides: dict | None = None,
    command: str = "",
    log=print,
) -> dict:
    """Run a bench protocol and write ``report.md``, ``results.json`` and figures into ``out``.

    ``overrides`` replaces Protocol fields (e.g. ``{"finetune_steps": 100}``); ``tasks`` restricts tasks.
    Returns the results dict (also written to ``results.json``).
    """
    from dataclasses import replace

    if isinstance(protocol, str):
        if protocol not in BENCH_PROTOCOLS:
            raise RawrclError(f"--protocol {protocol!r}: expected one of {', '.join(BENCH_PROTOCOLS)}")
        proto = BENCH_PROTOCOLS[protocol]
    else:
        proto = protocol
    if tasks:
        bad = [t for t in tasks if t not in TASKS]
        if bad:
            raise RawrclError(f"--tasks: unknown task {bad[0]!r}")
        proto = replace(proto, tasks=tuple(tasks))
    if overrides:
        proto = replace(proto, **overrides)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (resume or force):
        raise RawrclError(f"{out}: report directory exists and is not empty (use --resume or --force)")
    if force and out.exists() and not resume:
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    train_dir, test_dir = Path(train_dir).resolve(), Path(test_dir).resolve()
    if train_dir == test_dir:
        raise RawrclError("--train-dir and --test-dir must differ (held-out test photos)")
    overlap = {f.name for f in list_photos(train_dir)} & {f.name for f in list_photos(test_dir)}
    if overlap:
        log(f"[bench] warning: {len(overlap)} file names appear in both train and test folders")
    t0 = time.perf_counter()
    bench = Bench(
        proto,
        train_dir,
        test_dir,
        out,
        seeds=seeds if seeds is not None else proto.seeds,
        limit=limit,
        resume=resume,
        log=log,
    )
    extra = bench.run()
    summary = summarise(bench.records, proto)
    figures = _plots(out, bench.records, proto, bench.samples)
    figures += [info["plot"] for info in extra["density"].values() if info.get("plot")]
    wall = time.perf_counter() - t0
    results = {
        "protocol": asdict(proto),
        "train_dir": str(train_dir),
        "test_dir": str(test_dir),
        "train_files": bench.train_files,
        "test_files": [n for n, _ in bench.test_images],
        "seeds": bench.seeds,
        "wall_s": round(wall, 1),
        "records": bench.records,
        "summary": summary,
        "pretrain": extra["pretrain"],
        "density": extra["density"],
        "command": command,
    }
    atomic_write_text(out / "results.json", json.dumps(results, indent=2, default=str))
    report = write_report(out, proto, bench, extra, summary, figures, wall, command)
    atomic_write_text(out / "report.md", report)
    return results
