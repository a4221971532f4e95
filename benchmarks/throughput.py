"""Training throughput of rawrcl pretraining (patches/s), CPU always, GPU when CUDA is present.

Runs the real :class:`rawrcl.train.Trainer` (DataLoader, method, optimiser, checkpointing) on synthetic RAW
pairs made from scikit-image's bundled photos, and reports the steady-state throughput measured over the
second half of the steps (crops through the model per second; a pair is 2 patches). On CUDA the GPU
utilisation is sampled with ``nvidia-smi`` every 0.2 s during the measured half.

    python benchmarks/throughput.py                  # CPU (and GPU if present), default settings
    python benchmarks/throughput.py --json out.json  # also write the table as JSON

Not run by the unit tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import threading
import time

import torch

from rawrcl.data import PhotoFolderDataset
from rawrcl.methods import make_method
from rawrcl.models import build_model
from rawrcl.sample_data import bundled_photos
from rawrcl.train import Trainer


class GpuSampler(threading.Thread):
    """Samples GPU utilisation (%) with nvidia-smi (or torch.cuda.utilization) until stopped."""

    def __init__(self, index: int = 0, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.index, self.period, self.values, self._stop = index, period, [], threading.Event()

    def _read(self) -> float | None:
        try:
            out = subprocess.run(
                [
                    "nvidia-smi",
                    "-i",
                    str(self.index),
                    "--query-gpu=utilization.gpu",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=2,
            )
            return float(out.stdout.strip().splitlines()[0])
        except Exception:  # noqa: BLE001
            try:
                return float(torch.cuda.utilization(self.index))
            except Exception:  # noqa: BLE001
                return None

    def run(self) -> None:
        while not self._stop.is_set():
            v = self._read()
            if v is not None:
                self.values.append(v)
            time.sleep(self.period)

    def stop(self) -> float | None:
        self._stop.set()
        self.join(2)
        return sum(self.values) / len(self.values) if self.values else None


def bench(
    device: str,
    method: str,
    arch: str,
    width: int,
    batch: int,
    crop: int,
    steps: int,
    workers: int,
    amp: str = "auto",
    compile_: bool = False,
) -> dict:
    photos = [img for _, img in bundled_photos()]
    ds = PhotoFolderDataset(images=photos, crop=crop, mode="raw", seed=0)
    torch.manual_seed(0)
    model = build_model({"arch": arch, "in_channels": 4, "head": "jdd", "width": width})
    half = max(steps // 2, 1)
    tmp = tempfile.mkdtemp(prefix="rawrcl-bench-")
    sampler = None
    try:
        cfg = {
            "steps": steps,
            "batch_size": batch,
            "device": device,
            "num_workers": workers,
            "log_every": half,
            "save_every": 10**9,
            "keep_every": 0,
            "precision": amp,  # the trainer reads the old "off" as fp32
            "compile": compile_,
            "progress": False,
        }
        trainer = Trainer(model, make_method(method), ds, tmp, cfg)
        if device.startswith("cuda"):
            # sample utilisation from the moment the first half is logged
            def _watch():
                while not trainer.history:
                    time.sleep(0.05)
                nonlocal sampler
                sampler = GpuSampler(torch.device(device).index or 0)
                sampler.start()

            threading.Thread(target=_watch, daemon=True).start()
        summary = trainer.fit()
        util = sampler.stop() if sampler is not None else None
        last = trainer.history[-1]
        return {
            "device": summary["device"],
            "method": method,
            "arch": arch,
            "width": width,
            "batch": batch,
            "crop": crop,
            "steps": steps,
            "workers": workers,
            "amp": amp,
            "patches_per_s": round(last["patches_per_s"], 1),
            "gpu_util_percent": util,
            "loss_first": round(summary["first_loss"], 4),
            "loss_last": round(summary["last_loss"], 4),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="rcl,n2s,m2m")
    ap.add_argument("--arch", default="unet")
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--crop", type=int, default=128)
    ap.add_argument("--cpu-batch", type=int, default=8)
    ap.add_argument("--cpu-steps", type=int, default=8)
    ap.add_argument("--cpu-threads", type=int, default=0, help="torch threads on CPU (0: torch default)")
    ap.add_argument("--gpu-batch", type=int, default=64)
    ap.add_argument("--gpu-steps", type=int, default=60)
    ap.add_argument("--gpu-workers", type=int, default=8)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    rows = []
    for method in args.methods.split(","):
        if not args.no_cpu:
            rows.append(
                bench("cpu", method, args.arch, args.width, args.cpu_batch, args.crop, args.cpu_steps, 0)
            )
            print(json.dumps(rows[-1]), flush=True)
        if torch.cuda.is_available():
            rows.append(
                bench(
                    "cuda",
                    method,
                    args.arch,
                    args.width,
                    args.gpu_batch,
                    args.crop,
                    args.gpu_steps,
                    args.gpu_workers,
                    compile_=args.compile,
                )
            )
            print(json.dumps(rows[-1]), flush=True)
    print()
    print("| device | method | batch | crop | patches/s | GPU util % |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        util = "-" if r["gpu_util_percent"] is None else f"{r['gpu_util_percent']:.0f}"
        print(
            f"| {r['device']} | {r['method']} | {r['batch']} | {r['crop']} | {r['patches_per_s']} | {util} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
