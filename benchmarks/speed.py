"""Speed of full-size inference (megapixels/s), beside classical demosaicing, measured in one run.

    python benchmarks/speed.py                       # 24 MP, CPU (+ CUDA when present)
    python benchmarks/speed.py --mp 4 --threads 2    # smaller frame on a busy machine
    python benchmarks/speed.py --json out.json
    python benchmarks/speed.py --tta                 # also the 8-pass self-ensemble rows

Rows (all on the same synthetic Bayer frame, RGGB, values in [0, 1]):

- ``rawrcl jdd`` / ``rawrcl denoise`` with the shipped default models, told one noise level (λshot 2e-3,
  λread 5e-5; the single-image estimate is not timed: ``benchmarks/command_speed.py`` times whole commands)
  with the commands' SURE weights (or a randomly initialised model of the same configuration when the weights
  are absent: the speed is the same), through the real
  tiled path (:func:`rawrcl.infer.jdd_cfa` / :func:`rawrcl.infer.denoise_cfa`), on the CPU in fp32 and
  bf16 autocast, and on CUDA (bf16 autocast, channels-last, batched tiles) when available;
- ``colour-demosaicing Menon2007`` (DDFAPD) on the same CFA (CPU, numpy);
- ``rawpy/LibRaw AHD postprocess`` of the same frame written as a DNG (read + demosaic + render).

MP/s counts sensor pixels (H·W of the CFA) per second of wall time, one timed run after a warm-up on a
1024×1024 crop (on CUDA also one full-size warm-up; none for the classical rows). Prints a Markdown
table. On a shared machine, run it twice and compare: other processes' load shows up directly.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch


def synthetic_cfa(mp: float, seed: int = 0, noise: tuple[float, float] | None = None) -> np.ndarray:
    """A (H, W) float32 RGGB mosaic of ``mp`` megapixels (3:2), made from tiled bundled photos + noise
    (λshot, λread in [0, 1] units; default the ``high`` preset, :data:`rawrcl.noise.PRESETS`)."""
    from skimage import data

    from rawrcl.noise import PRESETS

    noise = PRESETS["high"] if noise is None else noise

    w = int(round(np.sqrt(mp * 1e6 * 1.5) / 2)) * 2
    h = int(round(mp * 1e6 / w / 2)) * 2
    photo = data.astronaut().astype(np.float32) / 255.0  # (512, 512, 3)
    reps = (-(-h // photo.shape[0]), -(-w // photo.shape[1]), 1)
    rgb = np.tile(photo, reps)[:h, :w].transpose(2, 0, 1) ** 2.2
    cfa = np.empty((h, w), np.float32)
    cfa[0::2, 0::2] = rgb[0, 0::2, 0::2]
    cfa[0::2, 1::2] = rgb[1, 0::2, 1::2]
    cfa[1::2, 0::2] = rgb[1, 1::2, 0::2]
    cfa[1::2, 1::2] = rgb[2, 1::2, 1::2]
    rng = np.random.default_rng(seed)
    cfa += rng.standard_normal(cfa.shape, dtype=np.float32) * np.sqrt(noise[0] * cfa + noise[1])
    return np.clip(cfa, 0, 1)


def _model(task: str, width: int | None):
    from rawrcl.infer.noise import bind_noise
    from rawrcl.models import build_model
    from rawrcl.models.loading import load_for_task
    from rawrcl.noise import NoiseModel
    from rawrcl.tasks import get_task

    try:
        if width is None:
            # noise-aware defaults run told one noise level (the single-image estimate is not timed here;
            # benchmarks/command_speed.py times whole commands) and with the commands' SURE weights
            model = bind_noise(load_for_task(None, task)[0], NoiseModel(2e-3, 5e-5), 4, shrink=None)
            return model, "shipped"
    except Exception as exc:  # noqa: BLE001 - fall back to a random model of the default size
        print(f"[speed] {task}: {exc}; timing a random U-Net of width 24 instead", file=sys.stderr)
    head = get_task(task).head
    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "head": head, "width": width or 24, "depth": 3}
    return build_model(cfg).eval(), f"random w{cfg['width']}"


def _timed(fn, warmup: bool, sync=None) -> float:
    if warmup:
        fn()
    if sync:
        sync()
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mp", type=float, default=24.0, help="frame size in megapixels (default 24)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--tile", type=int, default=512, help="tile side in packed pixels (CPU)")
    ap.add_argument("--gpu-tile", type=int, default=512, help="tile side in packed pixels (CUDA)")
    ap.add_argument("--gpu-batch", type=int, default=8, help="tiles per batch on CUDA")
    ap.add_argument("--overlap", type=int, default=32)
    ap.add_argument("--width", type=int, default=None, help="time a random U-Net of this width instead")
    ap.add_argument("--tta", action="store_true", help="also time the self-ensemble (--tta) rows")
    ap.add_argument("--skip", default="", help="comma list of rows to skip: cpu-bf16,menon,libraw,cpu,gpu")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))

    from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa

    cfa = synthetic_cfa(args.mp)
    h, w = cfa.shape
    mpx = h * w / 1e6
    print(
        f"frame {w}×{h} ({mpx:.1f} MP), torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
        f"{platform.processor() or platform.machine()}",
        file=sys.stderr,
    )
    rows: list[dict] = []

    def add(name: str, device: str, precision: str, seconds: float, note: str = "") -> None:
        rows.append(
            {
                "method": name,
                "device": device,
                "precision": precision,
                "seconds": round(seconds, 3),
                "mp_per_s": round(mpx / seconds, 3),
                "note": note,
            }
        )
        print(
            f"[speed] {name:34s} {device:5s} {precision:5s} {seconds:8.2f} s  {mpx / seconds:8.2f} MP/s",
            file=sys.stderr,
        )

    models = {task: _model(task, args.width) for task in ("jdd", "raw-denoise")}
    devices = [] if "cpu" in skip else [("cpu", "fp32")]
    if "cpu-bf16" not in skip and "cpu" not in skip:
        devices.append(("cpu", "bf16"))
    if torch.cuda.is_available() and "gpu" not in skip:
        devices.append(("cuda", "bf16"))
    for device, precision in devices:
        cuda = device == "cuda"
        opts = TileOptions(
            tile=args.gpu_tile if cuda else args.tile,
            overlap=args.overlap,
            batch_tiles=args.gpu_batch if cuda else 1,
            device=device,
            precision=precision,
        )
        sync = torch.cuda.synchronize if cuda else None
        runs = [(t, fn, False) for t, fn in (("jdd", jdd_cfa), ("raw-denoise", denoise_cfa))]
        runs += [(t, fn, True) for t, fn, _ in runs] if args.tta else []
        for task, fn, tta in runs:
            model, kind = models[task]
            name = ("rawrcl jdd" if task == "jdd" else "rawrcl denoise") + (" --tta" if tta else "")
            opts = replace(opts, self_ensemble=tta)
            fn(model, cfa[:1024, :1024], "RGGB", opts)  # warm-up: allocator, oneDNN/cuDNN kernels
            sec = _timed(
                lambda fn=fn, model=model, opts=opts: fn(model, cfa, "RGGB", opts), warmup=cuda, sync=sync
            )
            add(name, device, precision, sec, f"U-Net {kind}, tile {opts.tile}, batch {opts.batch_tiles}")
            model.cpu()
    if "menon" not in skip:
        from rawrcl.demosaic import demosaic

        sec = _timed(lambda: demosaic(cfa, "RGGB", "menon"), warmup=False)
        add("colour-demosaicing Menon2007", "cpu", "fp64", sec, "demosaic only, no denoising")
    if "libraw" not in skip:
        import rawpy

        from rawrcl.io.dng import write_dng

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "frame.dng"
            write_dng(path, np.round(cfa * 4095).astype(np.uint16), "RGGB", 0, 4095)

            def libraw() -> None:
                with rawpy.imread(str(path)) as raw:
                    raw.postprocess(
                        demosaic_algorithm=rawpy.DemosaicAlgorithm.AHD,
                        output_bps=16,
                        no_auto_bright=True,
                        use_camera_wb=True,
                    )

            sec = _timed(libraw, warmup=False)
            add("rawpy/LibRaw AHD postprocess", "cpu", "int16", sec, "read + AHD + render, no denoising")

    print("\n| method | device | precision | seconds | MP/s | note |\n|---|---|---|---|---|---|")
    for r in rows:
        cells = [r["method"], r["device"], r["precision"], r["seconds"], r["mp_per_s"], r["note"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    if args.json:
        meta = {
            "frame": [h, w],
            "threads": torch.get_num_threads(),
            "cpu": platform.processor(),
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(meta, indent=2))
    return rows


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
