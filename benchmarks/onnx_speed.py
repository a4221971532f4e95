"""torch vs ONNX Runtime on the same tiler: full-frame JDD and RAW denoising speed, CPU, fp32.

    nice -n 10 python benchmarks/onnx_speed.py                    # 12 MP, 2 threads, both tasks
    python benchmarks/onnx_speed.py --mp 4 --threads 1 --json out.json

Both engines run through :func:`rawrcl.infer.jdd_cfa` / :func:`rawrcl.infer.denoise_cfa` with the same
:class:`rawrcl.infer.TileOptions` (tile 512 packed pixels, overlap 32, one tile per pass, fp32, CPU):

- ``torch``: the shipped checkpoint (channels-last, the default CPU path of ``rawrcl jdd``);
- ``onnxruntime``: the same checkpoint exported on the fly (dynamic shapes; what ``--backend
  onnxruntime`` runs), ``intra_op_num_threads`` = the torch thread count;
- ``onnxruntime static 512``: the darktable-package graph ([1, 4, 512, 512]), JDD only.

Each row: a warm-up on a 1024×1024 crop, then ``--repeats`` timed full-frame runs interleaved between
engines; the best is reported (and all runs), with MP/s = sensor pixels per second. The frame is
:func:`benchmarks.speed.synthetic_cfa` (tiled bundled photo + noise). Also prints the largest
|torch − onnxruntime| over the frame. The load average before and after shows how quiet the machine was.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _synthetic_cfa(mp: float) -> np.ndarray:
    spec = importlib.util.spec_from_file_location("_speed", Path(__file__).with_name("speed.py"))
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod.synthetic_cfa(mp)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mp", type=float, default=12.0, help="frame size in megapixels (default 12)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both engines (default 2)")
    ap.add_argument("--tile", type=int, default=512)
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per row (best reported)")
    ap.add_argument("--tasks", default="jdd,raw-denoise")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cache = None  # unless the caller set one: a fresh export cache, removed when main returns
    if "RAWRCL_CACHE_DIR" not in os.environ:
        cache = tempfile.TemporaryDirectory(prefix="rawrcl-onnx-speed-")
        os.environ["RAWRCL_CACHE_DIR"] = cache.name

    import onnxruntime

    from rawrcl.export.backend import cached_export
    from rawrcl.export.build import prepare
    from rawrcl.export.darktable import write_package
    from rawrcl.export.noise import BakedNLF
    from rawrcl.export.ort import OrtModel
    from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa
    from rawrcl.infer.noise import bind_noise
    from rawrcl.models import load_checkpoint
    from rawrcl.models.loading import default_weights_path, load_for_task
    from rawrcl.noise import NoiseModel

    cfa = _synthetic_cfa(args.mp)
    h, w = cfa.shape
    mpx = h * w / 1e6
    load0 = os.getloadavg()
    print(
        f"frame {w}×{h} ({mpx:.1f} MP), {args.threads} threads, torch {torch.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {platform.processor() or platform.machine()}, load {load0[0]:.2f}",
        file=sys.stderr,
    )
    opts = TileOptions(tile=args.tile, overlap=args.overlap, batch_tiles=1, device="cpu", precision="fp32")
    rows: list[dict] = []
    for task in args.tasks.split(","):
        fn = jdd_cfa if task == "jdd" else denoise_cfa
        engines = {"torch": load_for_task(None, task)[0], "onnxruntime": OrtModel(cached_export(None, task))}
        # noise-aware models (the shipped RAW denoiser) run bound to one level, as `rawrcl denoise` does
        engines = {k: bind_noise(m, NoiseModel(2e-3, 5e-5)) for k, m in engines.items()}
        if task == "jdd":
            model, cfg = load_checkpoint(default_weights_path("jdd"))
            baked = BakedNLF((2e-3,) * 4, (5e-5,) * 4)  # a darktable graph has one input: the level baked in
            prep = prepare(model, cfg, head="jdd", noise=baked if cfg.get("noise_aware") else None)
            with tempfile.TemporaryDirectory(prefix="rawrcl-dt-") as tmp:  # read once into a session
                info = write_package(prep, tmp, "rawdenoise-speed", tile=args.tile)
                engines["onnxruntime static 512"] = OrtModel(Path(info["path"]) / "model_bayer.onnx")
        outs, times = {}, {k: [] for k in engines}
        for m in engines.values():
            fn(m, cfa[:1024, :1024], "RGGB", opts)  # warm-up
        for r in range(args.repeats):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                t0 = time.perf_counter()
                outs[name] = fn(engines[name], cfa, "RGGB", opts)
                times[name].append(time.perf_counter() - t0)
                print(f"[onnx_speed] {task:11s} {name:24s} {times[name][-1]:7.2f} s", file=sys.stderr)
        for name, ts in times.items():
            diff = float(np.abs(outs[name] - outs["torch"]).max())
            rows.append(
                {
                    "task": task,
                    "engine": name,
                    "seconds": round(min(ts), 2),
                    "all_seconds": [round(t, 2) for t in ts],
                    "mp_per_s": round(mpx / min(ts), 3),
                    "max_abs_diff_vs_torch": diff,
                }
            )
    load1 = os.getloadavg()
    print(f"\nload average before {load0[0]:.2f}, after {load1[0]:.2f}")
    print("| task | engine | best s | runs (s) | MP/s | max abs diff vs torch |\n|---|---|---|---|---|---|")
    for r in rows:
        runs = ", ".join(f"{t:.2f}" for t in r["all_seconds"])
        print(
            f"| {r['task']} | {r['engine']} | {r['seconds']:.2f} | {runs} | {r['mp_per_s']:.2f} | "
            f"{r['max_abs_diff_vs_torch']:.1e} |"
        )
    if args.json:
        meta = {"frame": [h, w], "threads": args.threads, "load": [load0, load1], "rows": rows}
        Path(args.json).write_text(json.dumps(meta, indent=2))
    if cache is not None:
        del os.environ["RAWRCL_CACHE_DIR"]
        cache.cleanup()
    return rows


if __name__ == "__main__":
    main()
