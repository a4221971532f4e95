"""RAW-domain baselines on synthetic mosaics: noisy input, GAT+BM3D (true noise parameters), the shipped RAW
denoiser (told the same true parameters; SURE weights as the commands run it) — PSNR linear on the packed
CFA, exactly as ``rawrcl eval --task raw-denoise`` computes ``psnr_linear`` (output clipped to [0, 1], data
range 1, 4-packed-pixel border).

Test photos (default): the last 10 (sorted) of ``cbsd68`` (the project's held-out split) and every 8th of the
sorted ``sunhays80`` (10 photos), each photo-valued (photo values taken as linear camera RGB) and unprocessed
(``get_task("raw-denoise", unprocess=True)``, Brooks et al.). Noise: presets ``low``/``high`` plus the
``--pairs`` given. Photo *i* of a set uses ``numpy.random.default_rng([seed, i])`` like ``rawrcl eval``, so
the noisy inputs are those ``rawrcl eval`` makes for that folder.

``--clip-black`` clips the noisy input at 0 (what a black-clipped file such as the HDR+ burst holds) and adds
GAT+BM3D without the declipping step (``black_clipped=False``).

``--tune`` instead measures the design choices of ``rawrcl.gat`` (joint vs per-plane BM3D, NLM
strength h; the ``refilter`` profile fails on multichannel input in bm3d 4.0.3) on 4 *training-split* CBSD68
photos (indices 0, 15, 30, 45), never on the test photos.

BM3D costs ≈ 1 min per megapixel; each row (10 photos) took 2.5–5 min on a loaded 2-core VM, the default
run (2 sets × 2 domains × 2 presets) ≈ 30 min.
Run it with ``OMP_NUM_THREADS=1 nice -n 10``.

Usage: ``python benchmarks/raw_baselines.py [--data DIR] [--pairs 0.001,1e-5 0.02,1e-3] [--no-shipped]
[--clip-black] [--tune] [--limit N] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rawrcl.errors import RawrclError
from rawrcl.eval import load_images, model_predictor, psnr_float
from rawrcl.gat import gat_bm3d, nlm_raw
from rawrcl.tasks import get_task

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
BORDER = 4  # packed pixels, as rawrcl eval (8 // 2 for the raw target domain)


def photo_sets(data: Path, limit: int | None) -> dict[str, list[tuple[str, np.ndarray]]]:
    cb = sorted(p for p in (data / "cbsd68").iterdir() if p.suffix.lower() == ".png")
    sh = sorted(p for p in (data / "sunhays80").iterdir() if p.suffix.lower() == ".png")
    if not cb or not sh:
        raise RawrclError(f"{data}: needs cbsd68/ and sunhays80/ photo folders")
    sets = {"cbsd68[-10:]": cb[-10:], "sunhays80[::8]": sh[::8][:10]}
    return {k: load_images(v, limit) for k, v in sets.items()}


def noise_specs(pairs: list[str]) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [("low", "low"), ("high", "high")]
    for p in pairs:
        ls, lr = (float(v) for v in p.split(","))
        out.append((f"{ls:g},{lr:g}", (ls, lr)))
    return out


def run_methods(sample: dict, methods: dict) -> dict[str, float]:
    nm = sample["meta"]["noise"]
    ls, lr = nm.lambda_shot, nm.lambda_read
    res = {}
    for name, fn in methods.items():
        out = fn(sample["input"], ls, lr)
        res[name] = psnr_float(torch.as_tensor(out), sample["target"], BORDER)
    return res


def measure(args) -> list[dict]:
    sets = photo_sets(Path(args.data), args.limit)
    methods: dict = {"noisy": lambda x, ls, lr: x, "gat+bm3d": lambda x, ls, lr: gat_bm3d(x, ls, lr)}
    if args.clip_black:
        methods["gat+bm3d (no declip)"] = lambda x, ls, lr: gat_bm3d(x, ls, lr, black_clipped=False)
    if not args.no_shipped:
        from rawrcl.models.loading import load_for_task
        from rawrcl.noise import NoiseModel

        run = model_predictor(load_for_task(None, "raw-denoise")[0], get_task("raw-denoise"))
        # told the true noise parameters, as GAT+BM3D is (and as `rawrcl eval` tells noise-aware models)
        methods["shipped raw denoiser"] = lambda x, ls, lr: run(x, None, {"noise": NoiseModel(ls, lr)})
    rows = []
    for domain, unprocess in (("photo-valued", False), ("unprocessed", True)):
        task = get_task("raw-denoise", unprocess=unprocess)
        for set_name, images in sets.items():
            for label, spec in noise_specs(args.pairs):
                t0 = time.perf_counter()
                per = []
                for i, (_, img) in enumerate(images):
                    s = task.sample(img, np.random.default_rng([args.seed, i]), spec)
                    if args.clip_black:
                        s["input"] = s["input"].clamp_min(0)
                    per.append(run_methods(s, methods))
                row = {"domain": domain, "photos": set_name, "noise": label, "n": len(per)}
                row.update({m: float(np.mean([p[m] for p in per])) for m in methods})
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print_row(row, list(methods), header=len(rows) == 1)
    return rows


def print_row(row: dict, methods: list[str], header: bool) -> None:
    if header:
        print("| domain | photos | noise | " + " | ".join(methods) + " | gain of gat+bm3d | s |")
        print("|---" * (len(methods) + 5) + "|")
    gain = row["gat+bm3d"] - row["noisy"]
    vals = " | ".join(f"{row[m]:.2f}" for m in methods)
    print(f"| {row['domain']} | {row['photos']} | {row['noise']} | {vals} | {gain:+.2f} | {row['seconds']} |")
    sys.stdout.flush()


def tune(args) -> list[dict]:
    """Design choices on 4 training-split CBSD68 photos (never the test photos)."""
    cb = sorted(p for p in (Path(args.data) / "cbsd68").iterdir() if p.suffix.lower() == ".png")
    images = load_images([cb[i] for i in (0, 15, 30, 45)])
    variants = {
        "bm3d sep np": lambda x, ls, lr: gat_bm3d(x, ls, lr, joint=False),
        "bm3d joint np": lambda x, ls, lr: gat_bm3d(x, ls, lr, joint=True),
    }
    for h in (0.4, 0.6, 0.8, 1.0):
        variants[f"nlm h={h}"] = lambda x, ls, lr, h=h: nlm_raw(x, ls, lr, h=h)
    rows = []
    for domain, unprocess in (("photo-valued", False), ("unprocessed", True)):
        task = get_task("raw-denoise", unprocess=unprocess)
        for label, spec in noise_specs([]):
            per = []
            for i, (_, img) in enumerate(images):
                s = task.sample(img, np.random.default_rng([1000 + args.seed, i]), spec)
                per.append(run_methods(s, {"noisy": lambda x, ls, lr: x, **variants}))
            row = {
                "domain": domain,
                "noise": label,
                **{k: float(np.mean([p[k] for p in per])) for k in per[0]},
            }
            rows.append(row)
            if len(rows) == 1:
                print("| domain | noise | " + " | ".join(per[0]) + " |")
                print("|---" * (len(per[0]) + 2) + "|")
            print(f"| {domain} | {label} | " + " | ".join(f"{row[k]:.2f}" for k in per[0]) + " |")
            sys.stdout.flush()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder holding cbsd68/ and sunhays80/")
    ap.add_argument("--pairs", nargs="*", default=[], help="extra noise levels 'λshot,λread' ([0,1] units)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="photos per set (default all 10)")
    ap.add_argument("--no-shipped", action="store_true", help="skip the shipped RAW denoiser")
    ap.add_argument(
        "--clip-black", action="store_true", help="clip the noisy input at 0 (black-clipped file)"
    )
    ap.add_argument("--tune", action="store_true", help="measure the design choices on training photos")
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not Path(args.data).is_dir():
        print(f"{args.data}: no such folder (pass --data)", file=sys.stderr)
        return 1
    try:
        rows = tune(args) if args.tune else measure(args)
    except RawrclError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
