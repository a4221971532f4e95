"""How well ``rawrcl adapt --method burst``'s selection signal ranks its candidates (issue 20;
docs/adaptation.md, "Stop 109").

On the held-out bands of a burst's training frames, for the candidates of a finished ``--method burst`` run —
the start, its blind-spot composite A, its frame-to-frame fine-tune F′ alone, A beside F′; each with SURE
weights, scored as the command scores them (one pass per stage) — three estimates of each candidate's MSE gain
over the start (dB of the start's MSE):

- ``burst``: the command's signal (:mod:`rawrcl.train.burst_signal`), against the other frames' native
  samples where the registration lands within ``EPS`` of one, in dB of its own estimate of the start's MSE;
- ``mean``: against the mean of the other training frames registered to each frame (Keys cubic, as ``rawrcl
  eval --burst`` builds its reference) on the band's samples all of them cover, unclipped;
- ``truth``: with every frame's truth beside the frames (``truthNN.npy`` beside ``frameNN.dng``, what
  ``benchmarks/burst_truth.py --write`` writes), the true error on each estimate's own samples; the estimates
  are then also given in dB of the start's true MSE there (``*_on_truth``), which separates a wrong ranking
  from a wrong scale.

    python benchmarks/burst_signal.py --frames FRAMES_DIR --run RUN [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch


def mean_reference(packed, warps, bands, i):
    """(reference (4, band, w), covered (4, band, w)): the other frames warped onto frame i's band, averaged
    where all of them cover it unclipped (a sample at the clip floor 0 counts as clipped)."""
    from rawrcl.burst_align import Registration, full_res_affine, warp_plane
    from rawrcl.cfa import CHANNELS

    top = bands[i]
    tot = np.zeros((4, packed[i].shape[1] - top, packed[i].shape[2]))
    ok_all = np.ones(tot.shape, bool)
    for j, other in enumerate(packed):
        if j == i:
            continue
        reg = Registration("", warps[i][j], full_res_affine(warps[i][j]), 1.0, 0.0)
        for c, name in enumerate(CHANNELS):
            plane = other[c].astype(np.float64)
            v, ok, cl, _ = warp_plane(plane, plane <= 0, np.ones(plane.shape, bool), reg.plane_warp(name))
            tot[c] += v[top:]
            ok_all[c] &= ok[top:] & ~cl[top:]
    return tot / (len(packed) - 1), ok_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", required=True, help="the run's training frames (DNGs)")
    ap.add_argument("--run", required=True, help="a finished rawrcl adapt --method burst run on them")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from rawrcl.data.frame_pairs import pairwise_warps
    from rawrcl.data.noisy_crops import load_noise_files, pack_file
    from rawrcl.io.raw import read_raw
    from rawrcl.models.beside import WithFineTune
    from rawrcl.models.loading import load_for_task
    from rawrcl.models.registry import load_checkpoint
    from rawrcl.models.shrink import maybe_shrink
    from rawrcl.train.adapt_blindspot import blindspot_crops
    from rawrcl.train.adapt_signal import for_scoring
    from rawrcl.train.burst_signal import EDGE, band_output, burst_errors, burst_gain, native_pairs

    run = Path(args.run)
    summary = json.loads((run / "adapt.json").read_text())
    if summary.get("method") != "burst":
        print(f"error: {run}: not a rawrcl adapt --method burst run", file=sys.stderr)
        return 2
    paths = sorted(p for p in Path(args.frames).iterdir() if p.suffix.lower() == ".dng")
    files = load_noise_files(paths)
    packed = [np.ascontiguousarray(f.packed, np.float32) for f in files]
    noise = [f.noise for f in files]
    settings = summary["settings"]
    bands = blindspot_crops(files, settings["crop"], settings["seed"]).bands
    warps = pairwise_warps(packed)
    truths = []
    for p in paths:
        t = p.resolve().parent / (p.stem.replace("frame", "truth") + ".npy")
        if not t.is_file():
            truths = []
            break
        truths.append(pack_file(p.name, np.load(t), read_raw(p).pattern, torch.zeros(2, 4)).packed)

    start, _ = load_checkpoint(summary["source"])
    a_model = load_for_task(summary["stages"]["blindspot"]["run"], "raw-denoise")[0]
    fine, _ = load_checkpoint(run / "f2f" / "last.pt")
    cands = {"start": start, "A": a_model, "F'": fine, "A+F'": WithFineTune(a_model.float(), fine.float())}
    outs = {}
    for name, m in cands.items():
        m = for_scoring(maybe_shrink(m.float().eval(), True))
        outs[name] = [band_output(m, f, n, b) for f, n, b in zip(packed, noise, bands, strict=True)]
        print(f"denoised the held-out bands: {name}", flush=True)

    pairs = native_pairs(packed, noise, warps, bands, outs["start"])
    errs = {k: burst_errors(v, pairs) for k, v in outs.items()}
    rows = {k: burst_gain(errs["start"], e, pairs) for k, e in errs.items()}
    n = rows["start"]["burst_samples"]

    def on_samples(target, name):
        """Σ squared error of candidate ``name`` against ``target`` (per frame (4, band, w)) on the signal's
        samples, each counted once per comparison."""
        se = 0.0
        for i, fp in enumerate(pairs):
            for c, p, *_ in fp.entries:
                se += float(((outs[name][i][c].reshape(-1)[p] - target[i][c].reshape(-1)[p]) ** 2).sum())
        return se

    # the registered-mean reference on the bands
    mean_se = dict.fromkeys(cands, 0.0)
    truth_mean_se = dict.fromkeys(cands, 0.0)
    count_mean = 0
    for i, f in enumerate(packed):
        ref, ok = mean_reference(packed, warps, bands, i)
        top, (h, w) = bands[i], f.shape[1:]
        level = outs["start"][i]
        lam = noise[i].double().numpy()
        sd = np.sqrt(lam[0][:, None, None] * np.clip(level, 0, None) + lam[1][:, None, None])
        m = ok & (level > 3 * sd) & (level < 0.9) & (f[:, top:] > 0)
        m[:, h - top - min(EDGE, (h - top) // 4) :] = False
        m[:, :, :EDGE] = m[:, :, w - EDGE :] = False
        count_mean += int(m.sum())
        for k in cands:
            mean_se[k] += float(((outs[k][i] - ref)[m] ** 2).sum())
            if truths:
                truth_mean_se[k] += float(((outs[k][i] - truths[i][:, top:])[m] ** 2).sum())

    def db(base, cand):
        return 10 * math.log10(base / cand) if base > 0 and cand > 0 else math.nan

    table = {}
    for k in cands:
        r = {
            "burst_db": rows[k]["burst_gain_db"],
            "burst_se_db": rows[k]["burst_gain_se_db"],
            "burst_dmse": rows[k]["burst_dmse"],
            "mean_dmse": (mean_se["start"] - mean_se[k]) / count_mean,
        }
        if truths:
            bands_truth = [t[:, b:] for t, b in zip(truths, bands, strict=True)]
            t0, tk = on_samples(bands_truth, "start") / n, on_samples(bands_truth, k) / n
            m0, mk = truth_mean_se["start"] / count_mean, truth_mean_se[k] / count_mean
            r.update(
                {
                    "truth_db": db(t0, tk),
                    "burst_on_truth_db": db(t0, t0 - r["burst_dmse"]),
                    "truth_mean_db": db(m0, mk),
                    "mean_on_truth_db": db(m0, m0 - r["mean_dmse"]),
                }
            )
        table[k] = r
        print(k, {a: round(b, 4) if "db" in a else float(f"{b:.4g}") for a, b in r.items()}, flush=True)
    doc = {
        "frames": str(args.frames),
        "run": str(run),
        "samples": {"burst": n, "mean": count_mean},
        "rows": table,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
