"""Validate Gharbi et al. 2016's noise-aware network (``rawrcl.eval.gharbi2016``) beside ``rawrcl eval``'s
numbers.

Same test set as ``rawrcl eval --task jdd --clean-dir <last 10 of cbsd68> --noise low|high`` (photo-valued
mosaics, photo *i* degraded with ``default_rng([seed, i])``), same metrics (PSNR/SSIM on 8-bit sRGB, 8-px
border; PSNR linear). The network gets σ = sqrt(λshot·mean(x) + λread), x the noisy input clipped to [0, 1].
Rows beside it: ``menon+nlm``, bilinear (``noisy``) and the shipped ``rawrcl/weights/jdd_default.pt``, all
through ``rawrcl.eval.evaluate``. ``--unprocess`` evaluates on unprocessed (linear camera RGB) mosaics
instead — outside the 2016 network's training domain (it was trained on gamma-encoded photos).

Usage: ``python benchmarks/gharbi2016.py [--weights DIR] [--photos DIR] [--noise low high] [--unprocess]``
(defaults: ``../shared/models/gharbi2016_bayer_noise`` and ``../shared/data/cbsd68``, last 10 photos).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rawrcl.errors import RawrclError
from rawrcl.eval import evaluate, load_images, psnr, psnr_float, ssim, to_srgb, to_uint8
from rawrcl.eval.gharbi2016 import gharbi_jdd, gharbi_sigma, load_gharbi2016
from rawrcl.models.loading import default_weights_path
from rawrcl.tasks import get_task

SHARED = Path(__file__).resolve().parents[2] / "shared"


def eval_gharbi(model, images, noise: str, unprocess: bool, seed: int = 0) -> dict:
    """Mean PSNR/SSIM (8-bit sRGB, 8-px border) and PSNR linear of the network on the jdd test set."""
    task = get_task("jdd", unprocess=unprocess)
    per = []
    for i, (_, img) in enumerate(images):
        s = task.sample(img, np.random.default_rng([seed, i]), noise)
        nm = s["meta"]["noise"]
        x = s["input"][None]
        out = gharbi_jdd(model, x, gharbi_sigma(x, nm.lambda_shot, nm.lambda_read))[0]
        o8, t8 = to_uint8(to_srgb(out, task, s["meta"])), to_uint8(to_srgb(s["target"], task, s["meta"]))
        per.append((psnr(o8, t8), ssim(o8, t8), psnr_float(out, s["target"])))
    a = np.asarray(per)
    return {"psnr": a[:, 0].mean(), "ssim": a[:, 1].mean(), "psnr_linear": a[:, 2].mean()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default=str(SHARED / "models" / "gharbi2016_bayer_noise"))
    ap.add_argument("--photos", default=str(SHARED / "data" / "cbsd68"))
    ap.add_argument("--last", type=int, default=10, help="use the last N sorted photos (held-out split)")
    ap.add_argument("--noise", nargs="+", default=["low", "high"])
    ap.add_argument("--unprocess", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model = load_gharbi2016(args.weights)
        files = sorted(p for p in Path(args.photos).iterdir() if p.suffix.lower() == ".png")[-args.last :]
        if not files:
            raise RawrclError(f"{args.photos}: no PNG photos")
        images = load_images(files)
    except (RawrclError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    domain = "unprocessed" if args.unprocess else "photo-valued"
    print(
        f"{len(images)} photos ({files[0].name} … {files[-1].name}), {domain}; "
        "PSNR sRGB 8-bit / SSIM / PSNR lin"
    )
    print("| noise | method | PSNR | SSIM | PSNR linear | s |")
    print("|---|---|---|---|---|---|")
    for noise in args.noise:
        t0 = time.perf_counter()
        r = eval_gharbi(model, images, noise, args.unprocess)
        rows = [("gharbi2016", r, time.perf_counter() - t0)]
        for name in ("menon+nlm", "noisy", str(default_weights_path("jdd"))):
            t0 = time.perf_counter()
            res = evaluate(name, "jdd", images, noise, unprocess=args.unprocess)
            label = "jdd_default.pt" if name.endswith(".pt") else ("bilinear" if name == "noisy" else name)
            rows.append((label, res, time.perf_counter() - t0))
        for label, res, sec in rows:
            print(
                f"| {noise} | {label} | {res['psnr']:.2f} | {res['ssim']:.4f} | {res['psnr_linear']:.2f} "
                f"| {sec:.0f} |"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
