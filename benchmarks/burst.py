"""Real-noise table on a burst (issue 19 §1): frame 00 of ``../shared/data/raw/hdrplus_burst2`` (default)
against the registered mean of the other frames (``rawrcl.eval.burst``; method, mask and ceiling in its
docstring).

Rows: the noisy target; GAT+BM3D with the burst's measured per-plane NLF; GAT+BM3D with ``rawrcl
calibrate``'s single-image estimate of the target (``calibrate_file(path, "image")``, per plane);
``nlm_raw`` (burst NLF); the shipped RAW denoiser as ``rawrcl denoise`` runs it (``--noise auto``: these DNGs
carry no NoiseProfile, so the single-image estimate; SURE weights; tiled defaults; ``model_output``) with and
without the self-ensemble (``TileOptions(self_ensemble=True)``, = ``--tta``); the shipped JDD default the same
way and Gharbi et al. 2016 (``--gharbi DIR``; σ = sqrt(mean over planes of
λshot·mean + λread), burst NLF) as JDD, scored at each pixel's own CFA colour.

Columns: PSNR (dB, linear [0, 1], CFA domain, 32-px border, strict mask: pixels every frame covers and no
frame clips), SSIM (per packed plane, masked), the true-error equivalent (MSE − reference noise), and — for
comparison with the issue's numbers — PSNR on a loose mask (every covered pixel where the target is not
clipped; there the reference is biased upwards wherever another frame clipped).

Usage: ``python benchmarks/burst.py [--burst DIR] [--target NAME] [--gharbi DIR] [--figure PNG] [--json PATH]
[--skip bm3d,...]``. BM3D takes ≈ 1 min per run on the 1 MP burst; run with ``OMP_NUM_THREADS=1 nice -n 10``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rawrcl import burst_align as A
from rawrcl.cfa import CHANNELS, align_rggb, pack
from rawrcl.errors import RawrclError
from rawrcl.eval import burst as B
from rawrcl.eval import burst_score as S

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _fmt(v: float | None, nd: int = 2) -> str:
    return "—" if v is None else f"{v:.{nd}f}"


def nlf_line(label: str, per_plane: dict, pooled: tuple | None) -> str:
    parts = [f"{c} {per_plane[c][0]:.3g}/{per_plane[c][1]:.3g}" for c in CHANNELS]
    pool = "" if pooled is None else f"; pooled {pooled[0]:.3g}/{pooled[1]:.3g}"
    return f"{label}: λshot/λread per plane " + ", ".join(parts) + pool


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burst", default=str(SHARED / "data" / "raw" / "hdrplus_burst2"))
    ap.add_argument("--target", default=None, help="target frame name (default: first sorted)")
    ap.add_argument("--gharbi", default=str(SHARED / "models" / "gharbi2016_bayer_noise"))
    ap.add_argument("--border", type=int, default=B.BORDER)
    ap.add_argument("--figure", default=None, help="write a side-by-side PNG here")
    ap.add_argument("--json", default=None, help="write the table and the burst summary as JSON")
    ap.add_argument(
        "--skip", default="", help="comma list of rows to skip: bm3d,calib,nlm,raw,tta,jdd,gharbi"
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="overwrite --figure / --json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    try:
        return run(args, skip)
    except RawrclError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def run(args, skip: set[str]) -> int:
    from rawrcl.calibration.resolve import file_noise

    from rawrcl.eval.burst_eval import model_output
    from rawrcl.gat import gat_bm3d, nlm_raw
    from rawrcl.infer import TileOptions
    from rawrcl.infer.noise import row_noise_for
    from rawrcl.io.raw import read_raw
    from rawrcl.models.conditioning import is_noise_aware
    from rawrcl.models.loading import load_for_task

    for out in (args.figure, args.json):
        if out and Path(out).exists() and not args.force:
            raise RawrclError(f"{out}: exists (use --force to overwrite)")
    t0 = time.perf_counter()
    burst = B.load_burst(args.burst, args.target)
    br = B.build_reference(burst, progress=lambda m: print("  " + m, file=sys.stderr))
    print(
        f"burst {args.burst}: {burst.n} frames {burst.shape[0]}×{burst.shape[1]} {burst.pattern}, target "
        f"{burst.paths[0].name}; reference built in {time.perf_counter() - t0:.0f} s"
    )
    summ = br.summary(args.border)
    nlf = br.nlf
    print(
        nlf_line("burst NLF (measured)", nlf.per_plane, nlf.pooled)
        + f"; fitted x range {nlf.x_range[0]:.3f}–{nlf.x_range[1]:.3f}"
    )
    grid = A.PackedGrid.of(burst.shape, burst.pattern)
    packed = grid.pack(br.target)
    ls = [nlf.per_plane[c][0] for c in CHANNELS]
    lr = [nlf.per_plane[c][1] for c in CHANNELS]

    calib = None
    if "calib" not in skip:
        from rawrcl.calibration.api import calibrate_file

        t = time.perf_counter()
        calib = calibrate_file(burst.paths[0], "image")
        print(
            nlf_line(
                f"calibrate --method image (frame {burst.paths[0].name}, {time.perf_counter() - t:.1f} s)",
                calib.per_plane,
                calib.pooled,
            )
        )
        for x in (0.02, 0.05, 0.1):
            ratio = [
                math.sqrt(calib.per_plane[c][0] * x + calib.per_plane[c][1])
                / math.sqrt(nlf.per_plane[c][0] * x + nlf.per_plane[c][1])
                for c in CHANNELS
            ]
            print(
                f"  single-image / burst noise std at x = {x}: "
                + ", ".join(f"{c} {r:.2f}" for c, r in zip(CHANNELS, ratio, strict=True))
            )
    ex = S.noisy_excess(br, args.border)
    print(
        f"mask: {100 * summ['mask_fraction']:.1f} % of the pixels (border {args.border}); clipped "
        f"{100 * summ['clipped_fraction']:.1f} %; mean reference noise gain c = {summ['mean_ref_gain']:.4f} "
        f"(1/(frames in the reference) = {1 / br.frames_used:.4f})"
    )
    print(
        f"ceiling: {summ['ceiling']['psnr']:.2f} dB (binned NLF), "
        f"{summ['ceiling_linear_nlf']['psnr']:.2f} dB (linear NLF fit); noisy-frame consistency: "
        f"measured MSE {ex['mse']:.3g} = NLF noise {ex['predicted_noise']:.3g} "
        f"+ reference noise {ex['ref_noise']:.3g} + excess {ex['excess_mse']:.2g}"
    )
    for r in br.registrations:
        print(f"  {Path(r.path).name}: cc {r.cc:.3f}, max shift {r.max_shift:.2f} px")

    loose = br.valid & ~burst.clipped[0]
    rows: list[dict] = []
    panels: dict[str, tuple[str, np.ndarray]] = {}

    def add(name: str, kind: str, out: np.ndarray, seconds: float) -> None:
        sc = S.score_raw(br, out, args.border) if kind == "raw" else S.score_jdd(br, out, args.border)
        lo = (
            S.score_raw(br, out, args.border, loose)
            if kind == "raw"
            else S.score_jdd(br, out, args.border, loose)
        )
        row = {"method": name, "kind": kind, "seconds": round(seconds, 1), **sc, "psnr_loose": lo["psnr"]}
        rows.append(row)
        if name != "noisy":
            panels[name] = (kind, out)
        base = rows[0]
        print(
            f"| {name} | {sc['psnr']:.2f} | {sc['psnr'] - base['psnr']:+.2f} | {sc['ssim']:.4f} | "
            f"{_fmt(sc['psnr_true'])} | {lo['psnr']:.2f} | {seconds:.0f} |"
        )
        sys.stdout.flush()

    print(f"\n| on {burst.paths[0].name} | PSNR | vs noisy | SSIM | true-error PSNR | PSNR loose mask | s |")
    print("|---|---|---|---|---|---|---|")
    add("noisy", "raw", br.target, 0.0)

    def timed(fn):
        t = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t

    if "bm3d" not in skip:
        out, s = timed(lambda: grid.unpack(gat_bm3d(packed, ls, lr)))
        add("GAT+BM3D (burst NLF)", "raw", out, s)
    if calib is not None and "bm3d" not in skip:
        cls = [calib.per_plane[c][0] for c in CHANNELS]
        clr = [calib.per_plane[c][1] for c in CHANNELS]
        out, s = timed(lambda: grid.unpack(gat_bm3d(packed, cls, clr)))
        add("GAT+BM3D (calibrate image NLF)", "raw", out, s)
    if "nlm" not in skip:
        out, s = timed(lambda: grid.unpack(nlm_raw(packed, ls, lr)))
        add("nlm_raw (burst NLF)", "raw", out, s)
    told = None  # what `rawrcl denoise` / `rawrcl jdd` tell a noise-aware model: --noise auto

    models: dict = {}  # each default read once (the RAW one serves two rows)

    def shipped(task: str, opts: TileOptions) -> np.ndarray:
        nonlocal told
        if task not in models:
            models[task] = load_for_task(None, task)[0]
        model = models[task]
        nm = None
        if is_noise_aware(model):
            if told is None:
                told = file_noise(read_raw(burst.paths[0], clip=False), "auto", path=burst.paths[0])
                print(f"  models told --noise auto: {told.source_text}", file=sys.stderr)
            nm = row_noise_for(model, br.target, burst.pattern, told.model)
        return model_output(
            model, "raw" if task == "raw-denoise" else "jdd", br.target, burst.pattern, nm, opts
        )[0]

    if "raw" not in skip:
        out, s = timed(lambda: shipped("raw-denoise", TileOptions()))
        add("shipped RAW denoiser", "raw", out, s)
        if "tta" not in skip:
            out, s = timed(lambda: shipped("raw-denoise", TileOptions(self_ensemble=True)))
            add("shipped RAW denoiser --tta", "raw", out, s)
    if "jdd" not in skip:
        out, s = timed(lambda: shipped("jdd", TileOptions()))
        add("shipped JDD (CFA sites)", "jdd", out, s)
    if "gharbi" not in skip and Path(args.gharbi).is_dir():
        from rawrcl.eval.gharbi2016 import gharbi_jdd, load_gharbi2016

        net = load_gharbi2016(args.gharbi)
        means = np.clip(packed, 0, 1).mean(axis=(1, 2))
        sigma = math.sqrt(float(np.mean([ls[c] * means[c] + lr[c] for c in range(4)])))

        def run_gharbi() -> np.ndarray:
            aligned, (dy, dx) = align_rggb(br.target, burst.pattern)
            rgb = gharbi_jdd(net, torch.from_numpy(np.ascontiguousarray(pack(aligned, "RGGB"))), sigma)
            h, w = br.target.shape
            return rgb.numpy()[:, dy : dy + h, dx : dx + w]

        out, s = timed(run_gharbi)
        add(f"gharbi2016 (CFA sites, σ {sigma:.4f})", "jdd", out, s)
    print(f"\nceiling {summ['ceiling']['psnr']:.2f} dB; total {time.perf_counter() - t0:.0f} s")

    if args.figure:
        from rawrcl.eval.burst_figure import render_comparison

        scores = {r["method"]: r["psnr"] for r in rows}
        render_comparison(args.figure, br, panels, scores=scores, overwrite=args.force)
        print(f"figure: {args.figure}")
    if args.json:
        from rawrcl.io import atomic_write_bytes

        doc = {
            "burst": summ,
            "calibrate_image": None if calib is None else calib.to_dict(),
            "rows": rows,
            "noisy_consistency": ex,
        }
        atomic_write_bytes(args.json, json.dumps(doc, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
