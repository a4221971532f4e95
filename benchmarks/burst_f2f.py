"""Frame-to-frame fine-tuning on a burst through the JDD output (issue 20; ``rawrcl adapt --method burst``'s
second stage, here with its scoring against frame 00).

The objective is :mod:`rawrcl.methods.f2f` (a frame's JDD RGB, resampled at another frame's native mosaic
samples, predicts them) on the frame pairs of :mod:`rawrcl.data.frame_pairs`; the training loop (both stages
of the start fine-tuned, with ``rawrcl adapt``'s guards) is :func:`rawrcl.train.adapt_f2f.train_f2f`; this
script holds the scoring.
Frame 00 (the target of ``rawrcl eval --burst``) is never used; each checkpoint is scored on it against the
burst reference (strict mask) and, for a folder written by ``benchmarks/burst_truth.py --write``, against its
truth. ``--check`` then runs ``rawrcl adapt``'s forgetting check (start against the fine-tune); ``--beside``
scores the fine-tune beside the unchanged start (:class:`~rawrcl.models.beside.WithFineTune`, nested SURE
weights) on frame 00 and, with ``--check``, on that check; ``--beside-model RUN`` puts another model in the
start's slot (e.g. a ``rawrcl adapt --method blindspot`` run, as ``rawrcl denoise --model RUN`` runs it; the
check stays against the start); ``--save-beside FILE`` writes that composite as a model file, which
``rawrcl denoise --model FILE`` and ``rawrcl eval FILE --burst`` run. ``--fine FILE`` scores a fine-tune saved
by ``--save`` instead of training one.

    python benchmarks/burst_f2f.py --burst DIR [--steps 400 --lr 3e-5 --ema 0.995 --every 50 --json out.json]
    python benchmarks/burst_f2f.py --burst DIR --steps 1200 --every 400 --ema 0.995 --anchor 0.05 --mix 0.5 \
        --mix-zoom 0.5 --check --beside          # docs/adaptation.md, "Stop 104"
    python benchmarks/burst_f2f.py --burst DIR --fine F.pt --beside --beside-model RUN --check  # "Stop 106"
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch

from rawrcl.data.frame_pairs import FramePairs, pairwise_warps
from rawrcl.train.adapt_f2f import train_f2f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--burst", required=True, help="a burst folder; frame00.dng is the scored (never used) frame"
    )
    ap.add_argument("--model", default=None, help="two-stage RAW start (default: the shipped RAW denoiser)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument(
        "--batch", type=int, default=4, help="input crops per step (each against every other frame)"
    )
    ap.add_argument("--crop", type=int, default=96, help="target block, mosaic px (even)")
    ap.add_argument("--ema", type=float, default=0.0, help="weight average (0: none); scored on it")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--anchor", type=float, default=0.0, help="guard: weight of Σ(θ − θ₀)² (adapt: 0.05)")
    ap.add_argument(
        "--mix", type=float, default=0.0, help="guard: weight of synthetic supervised crops (adapt: 0.5)"
    )
    ap.add_argument(
        "--mix-zoom",
        type=float,
        default=0.0,
        help="share of the mix crops enlarged up to 8× (adapt's mix_zoom)",
    )
    ap.add_argument(
        "--near",
        type=float,
        default=0.5,
        help="score only target samples within this many px of an input pixel centre (0.5: all)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save", default=None, help="write the last scored weights as a RAW model file here")
    ap.add_argument("--check", action="store_true", help="then adapt's forgetting check, start against them")
    ap.add_argument(
        "--beside",
        action="store_true",
        help="then score the fine-tune beside the start (WithFineTune; with --check, its check too)",
    )
    ap.add_argument(
        "--beside-model",
        default=None,
        help="with --beside: this RAW model or run in the start's slot (as rawrcl denoise --model runs it)",
    )
    ap.add_argument(
        "--save-beside",
        default=None,
        help="with --beside: write the composite (arch with_fine_tune) as a RAW model file here",
    )
    ap.add_argument(
        "--fine",
        default=None,
        help="score this fine-tune (a --save file of the same start); no training (training options unused)",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.save_beside and not args.beside:
        print("error: --save-beside needs --beside", file=sys.stderr)
        return 2
    if args.fine and args.save:
        print("error: --fine scores a saved fine-tune; --save is for a training run", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from rawrcl.data.noisy_crops import load_noise_files
    from rawrcl.eval import burst as B
    from rawrcl.eval import burst_score as S
    from rawrcl.eval.metrics import psnr_from_mse
    from rawrcl.infer import TileOptions, denoise_cfa
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.models.loading import default_weights_path
    from rawrcl.models.registry import load_checkpoint
    from rawrcl.models.shrink import maybe_shrink

    folder = Path(args.burst)
    burst = B.load_burst(folder, "frame00.dng")
    br = B.build_reference(burst)
    files = load_noise_files(list(burst.paths))
    truth = np.load(folder / "truth00.npy") if (folder / "truth00.npy").exists() else None
    mask = br.metric_mask(B.BORDER)
    full, _ = load_checkpoint(args.model or default_weights_path("raw-denoise"))
    if not (isinstance(full, DenoiseThenDemosaic) and full.output == "raw" and full.demosaicker is not None):
        print(
            "error: --model must be a two-stage RAW model (the shipped RAW denoiser's kind)", file=sys.stderr
        )
        return 2
    full = full.float()
    # the start as it was, for --check and --beside (taken before training changes ``full`` in place)
    start = copy.deepcopy(full).eval() if args.check or args.beside else None
    if args.fine:  # a saved fine-tune of this start, scored as if just trained
        from rawrcl.errors import RawrclError

        try:
            fine_model, _ = load_checkpoint(args.fine)
            if type(fine_model) is not type(full) or getattr(fine_model, "output", None) != full.output:
                out = getattr(fine_model, "output", None)
                raise RawrclError(f"a {type(fine_model).__name__} with output {out!r}")
            full.load_state_dict(fine_model.float().state_dict())
        except (RawrclError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"error: --fine {args.fine}: not a fine-tune of this start ({first})", file=sys.stderr)
            return 2
    shipped = maybe_shrink(full, True)  # as rawrcl denoise runs it (SURE weights)

    def score(model: torch.nn.Module | None = None) -> dict:
        """frame 00 through ``model`` (default: the fine-tune as ``rawrcl denoise`` runs it)"""
        with torch.no_grad():
            out = denoise_cfa(
                WithNoise(model or shipped, files[0].noise, 4), br.target, burst.pattern, TileOptions()
            )
        sc = S.score_raw(br, out, B.BORDER)
        r = {"psnr": round(sc["psnr"], 4), "psnr_true": round(sc["psnr_true"] or 0.0, 3)}
        if truth is not None:
            r["truth"] = round(
                psnr_from_mse(float(np.mean((np.clip(out, 0, 1)[mask] - truth[mask]) ** 2))), 4
            )
        return r

    if args.fine:  # nothing to train: no frame pairs to register, no mix crops
        rows = [{"step": 0, **score()}]
    else:
        train_files = files[1:]
        packed = [f.packed.astype(np.float32) for f in train_files]
        data = FramePairs(
            packed, [f.noise for f in train_files], pairwise_warps(packed, print), crop=args.crop
        )
        mix_fn = None
        if args.mix > 0:
            from rawrcl.train.adapt_objective import synthetic_mix

            mix_fn = synthetic_mix(args.crop, train_files, 0.5, zoom=args.mix_zoom)
        opts = {k: getattr(args, k) for k in ("lr", "batch", "ema", "every", "anchor", "mix", "near")}
        rows = train_f2f(full, data, args.steps, score=score, mix_fn=mix_fn, log=print, **opts)
    doc = {"args": vars(args), "rows": rows}
    if args.save or args.beside:
        from rawrcl.models.registry import read_checkpoint

        ck = read_checkpoint(args.model or default_weights_path("raw-denoise"))
        state = full.state_dict()
        # the fine-tune as a model file holds it (the start's dtype: the shipped file is float16)
        ck["state_dict"] = {k: state[k].detach().to(v.dtype) for k, v in ck["state_dict"].items()}
    if args.save and not args.fine:
        from rawrcl.models.registry import atomic_torch_save

        ck["extra"] = {**ck.get("extra", {}), "burst_f2f": {"burst": str(folder), **vars(args)}}
        atomic_torch_save(ck, args.save)
    if args.check:
        from rawrcl.train.adapt_signal import check_crops, check_scores

        checks = check_crops()
        base = check_scores(start, checks)
        drop = {k: v - base[k] for k, v in check_scores(full, checks).items()}
        worst = min(drop, key=drop.get)
        doc["forgetting"] = {"drop_db": drop, "worst": [worst, drop[worst]]}
        print(
            f"forgetting check: worst {worst} {drop[worst]:+.3f} dB, mean {np.mean(list(drop.values())):+.3f}"
        )
    if args.beside:
        from rawrcl.models.beside import WithFineTune
        from rawrcl.models.sure import SureShrink

        fine = copy.deepcopy(start)
        fine.load_state_dict({k: v.float() for k, v in ck["state_dict"].items()})
        slot = start
        if args.beside_model:
            from rawrcl.models.loading import load_for_task

            slot = load_for_task(args.beside_model, "raw-denoise")[0].float().eval()
        start_sure, beside = SureShrink(start), SureShrink(WithFineTune(slot, fine))
        doc["beside"] = {"start": score(start_sure), "beside": score(beside)}
        if args.beside_model:
            doc["beside"]["slot"] = score(SureShrink(slot))
        if args.save_beside:
            from rawrcl.models.registry import save_checkpoint

            extra = {"burst_f2f": {"burst": str(folder), **vars(args)}}
            save_checkpoint(args.save_beside, WithFineTune(slot, fine), None, extra)
        # the outer (K = 2) weights of frame 00's tiles; NaN where a tile kept the slot's own output
        doc["beside"]["outer_weights"] = [round(float(v), 3) for v in np.nanmean(np.array(beside.seen), 0)]
        print(f"frame 00, start (SURE weights) {doc['beside']['start']}, beside it {doc['beside']['beside']}")
        if args.check:
            with torch.no_grad():
                base = check_scores(start_sure, checks)
                drop = {k: v - base[k] for k, v in check_scores(beside, checks).items()}
            worst = min(drop, key=drop.get)
            below = sum(v < -0.1 for v in drop.values())
            doc["beside"]["forgetting"] = {"drop_db": drop, "worst": [worst, drop[worst]], "below_0.1": below}
            print(
                f"beside, forgetting check (against the start, both with SURE weights): worst {worst} "
                f"{drop[worst]:+.3f} dB, mean {np.mean(list(drop.values())):+.3f}, {below} below -0.1"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
