"""Label-free adaptation benchmark (issue 20): ``rawrcl adapt`` objectives side by side, same data and budget.

Part ``burst`` (real noise): adapt the starting model on frames 01–08 of ``../shared/data/raw/hdrplus_burst2``
(noise per file from ``file_noise(auto)``: these DNGs carry no NoiseProfile, so the single-image estimate),
score the unseen frame 00 against the registered burst reference (``rawrcl.eval.burst``, strict mask, 32-px
border: PSNR and the true-error equivalent; the loose mask, and the shadows — pixels the target keeps and
another frame clips — as PSNR and mean output − reference, ``psnr_shadows`` / ``shadow_bias``). Also frame 01
alone (a user with one photo) and the transductive case (frames 00–08). ``--runs blindspot``: the blind-spot
network with the posterior-mean step (Laine et al. 2019) trained from scratch on frames 01–08
(``--bsp-steps``; ``--bsp-frames`` frame01 or all for the one-photo and transductive cases, frames01-04 or
frames05-08 for half the folder), its own row, scored alone and beside the start with SURE weights (what
``rawrcl adapt --method blindspot`` writes).

Part ``synth`` (a camera the model never saw): 12-bit, black-clipped (black level 0) files with fixed
Poisson–Gaussian noise outside the shipped model's training range (read noise beyond the camera sampler's
cap λread ≤ 0.15·λshot; or, with ``--banding``, row noise, which the model never saw), simulated from
photos (unprocessed, phases cycling RGGB/GRBG/BGGR/GBRG):
adapt on sunhays80 photos [0, 20), score on 10 photos of another source (default cbsd68[58:68], held out of
the shipped model's training) against their clean mosaics (PSNR, CFA domain, [0, 1]); a
supervised reference (the start fine-tuned with L1 on the same noisy files' clean pairs, same steps and
crops); and a forgetting check: the same test photos with in-range noise (preset L4, 14-bit, pedestal).

For every run the held-out label-free scores (SURE, R2R) of each kept checkpoint are recorded next to the
true PSNR of that checkpoint, for the signal-vs-truth figure.

Usage: ``OMP_NUM_THREADS=1 nice python benchmarks/adapt.py --start CKPT --out DIR [--part burst,synth]
[--steps 300] [--runs r2r,r2r-noanchor,...]``; ``--figures`` redraws the figures from ``DIR/results.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rawrcl.train.adapt_blindspot import AUGMENT, CENSORED, CROSS, HELD_CROP, LEVELS, LR_SCHEDULE, WIDTH
from rawrcl.train.config import AdaptConfig

SHARED = Path(__file__).resolve().parents[2] / "shared"

#: name -> adapt() options (the objectives side by side; the default is "sure" since stop 56, "r2r" before)
RUNS: dict[str, dict] = {
    "r2r": {"method": "r2r"},
    "r2r-noanchor": {"method": "r2r", "anchor": 0.0},
    "r2r-mix": {"method": "r2r", "mix": 0.5},
    "r2r-mix-camera": {"method": "r2r", "mix": 0.5, "mix_own": 0.0},
    "r2r-lr1e-4": {"method": "r2r", "lr": 1e-4},
    "r2r-mix-lr1e-4": {"method": "r2r", "mix": 0.5, "lr": 1e-4},
    "r2r-mix1": {"method": "r2r", "mix": 1.0},
    "r2r-mix2": {"method": "r2r", "mix": 2.0},
    "r2r-bias-nomix": {"method": "r2r", "train_only": ["bias"], "lr": 1e-3, "mix": 0.0},
    "r2r-last-nomix": {"method": "r2r", "train_only": ["dec.2.", "up.2.", "head."], "mix": 0.0},
    "r2r-last": {"method": "r2r", "train_only": ["dec.2.", "up.2.", "head."]},
    "r2r-alpha0.3": {"method": "r2r", "alpha": 0.3},
    "r2r-alpha1": {"method": "r2r", "alpha": 1.0},
    "r2r-alpha1.5": {"method": "r2r", "alpha": 1.5},
    "r2r-alpha2": {"method": "r2r", "alpha": 2.0},
    "r2r-anchor1": {"method": "r2r", "anchor": 1.0},
    "r2r-mix2-camera": {"method": "r2r", "mix": 2.0, "mix_own": 0.0},
    "r2r-mix-own": {"method": "r2r", "mix": 0.5, "mix_own": 1.0},
    "r2r-mix1-own": {"method": "r2r", "mix": 1.0, "mix_own": 1.0},
    "r2r-mix1-own-lr1e-4": {"method": "r2r", "mix": 1.0, "mix_own": 1.0, "lr": 1e-4},
    "r2r-plain": {"method": "r2r-plain", "anchor": 0.0},
    "sure": {"method": "sure"},
    "n2s": {"method": "n2s"},
    "rcl": {"method": "rcl"},
}
#: burst Noise2Noise runs (``burst_n2n`` options): lr, share of the mix with the files' own noise, mix weight
N2N_RUNS: dict[str, dict] = {
    "n2n-burst": {"lr": 3e-5},
    "n2n-burst-lr1e-4": {"lr": 1e-4},
    "n2n-burst-camera": {"lr": 3e-5, "own": 0.0},
    "n2n-burst-camera-mix1": {"lr": 3e-5, "own": 0.0, "mix": 1.0},
}
#: the synthetic unseen camera: λshot, λread ([0, 1] units), 12 bits, black-clipped
CAMERA = (2e-3, 2e-3)
FORGET_PRESET = (2e-3, 8e-6)
#: ``--split``: mosaic columns left out on each side of the burst's vertical centre line (the networks' reach)
SPLIT_MARGIN = 64


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _save(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n")


def shown(row: dict) -> str:
    """A result row as one log line: JSON, floats to 4 decimals, the step left out (the line names it)."""
    return json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items() if k != "step"})


def load_start(path) -> tuple:
    """(the RAW denoiser adaptation trains, ``wrap(model)`` → what is scored): for a two-stage RAW start (the
    shipped default, the CFA-site blend) its first stage, scored inside the start's blend; else the model
    itself, scored as it is."""
    from rawrcl.models.compose import DenoiseThenDemosaic, first_stage
    from rawrcl.models.registry import load_checkpoint

    full, _ = load_checkpoint(path)
    if not (isinstance(full, DenoiseThenDemosaic) and full.output == "raw"):
        return full, lambda m: m

    return first_stage(full), lambda m: full.replace(denoiser=m)


def checkpoints(run: Path, start: dict) -> list[tuple[int, dict]]:
    """(step, state_dict) of the start, every kept checkpoint and the final trained weights."""
    from rawrcl.models.registry import read_checkpoint

    out = [(0, start)]
    ck = run / "checkpoints"
    steps = sorted(int(p.stem.split("_")[1]) for p in ck.glob("step_*.pt"))
    for s in steps:
        out.append((s, read_checkpoint(ck / f"step_{s:07d}.pt")["state_dict"]))
    last = read_checkpoint(ck / "last.pt")
    final = int(last["extra"]["step"])
    if final not in steps:
        out.append((final, last["extra"].get("train_weights", last["state_dict"])))
    return out


def run_adapt(name: str, files, out: Path, start_ckpt: str, steps: int, opts: dict, score, log) -> dict:
    """Adapt, then score every checkpoint with ``score(model) -> dict``; returns the record."""
    from rawrcl.models.conditioning import add_row_input, is_row_aware
    from rawrcl.models.registry import load_checkpoint
    from rawrcl.train.adapt import adapt

    t = time.perf_counter()
    summ = adapt(files, out, source=start_ckpt, steps=steps, force=True, progress=False, **opts)
    secs = time.perf_counter() - t
    model, _ = load_checkpoint(out / "checkpoints" / "last.pt")  # the run's architecture (row-aware?)
    start_model, wrap = load_start(start_ckpt)
    if is_row_aware(model):
        start_model = add_row_input(start_model, switch=bool(model.config.get("row_switch")))
    start = {k: v.clone() for k, v in start_model.state_dict().items()}
    rows = []
    held = {r["step"]: r for r in summ["held_out"]}
    for s, sd in checkpoints(out, start):
        model.load_state_dict(sd)
        sc = score(wrap(model).eval())
        rows.append({"step": s, **sc, **{f"held_{k}": v for k, v in held.get(s, {}).items() if k != "step"}})
        log(f"  {name} step {s}: {shown(rows[-1])}")
    return {
        "name": name,
        "options": opts,
        "seconds": round(secs, 1),
        "selected_step": summ["selected_step"],
        "verdict": summ["verdict"],
        "rows": rows,
        "n_files": len(summ["files"]),
    }


def run_case(args, part: str, name: str, files, opts: dict, score, log) -> dict:
    """One row of ``part``: :func:`run_adapt` in ``OUT/runs/<part>-<name>`` with ``--extra`` on top."""
    out = Path(args.out) / "runs" / f"{part}-{name}"
    return run_adapt(name, files, out, args.start, args.steps, {**opts, **args.extra}, score, log)


# ---------------------------------------------------------------------------------------------- burst
def part_burst(args, doc: dict, path: Path, log) -> None:
    from rawrcl.data.noisy_crops import load_noise_files
    from rawrcl.eval import burst as B
    from rawrcl.eval import burst_score as S
    from rawrcl.eval.metrics import psnr_from_mse
    from rawrcl.infer import TileOptions, denoise_cfa
    from rawrcl.models.conditioning import WithNoise

    t = time.perf_counter()
    burst = B.load_burst(args.burst, "frame00.dng")
    br = B.build_reference(burst)
    paths = list(burst.paths)
    files = load_noise_files(paths)
    log(f"burst reference + noise of {len(paths)} files in {time.perf_counter() - t:.0f} s")
    f00 = files[0]
    summ = br.summary(B.BORDER)
    doc.setdefault("burst", {})["info"] = {
        "ceiling": summ["ceiling"]["psnr"],
        "mask_fraction": summ["mask_fraction"],
        "noise": [f.describe() for f in files],
    }

    def score(model) -> dict:
        with torch.no_grad():
            out = denoise_cfa(WithNoise(model, f00.noise, 4), br.target, burst.pattern, TileOptions())
        sc = S.score_raw(br, out, B.BORDER)
        lo = S.score_raw(br, out, B.BORDER, loose)
        rec = {"psnr": sc["psnr"], "psnr_true": sc["psnr_true"], "psnr_loose": lo["psnr"]}
        # the shadows: target unclipped, another frame clipped (the reference there is biased up)
        d = np.clip(out[shadows], 0, 1) - br.reference[shadows]
        rec.update(
            psnr_shadows=psnr_from_mse(float(np.mean(d.astype(np.float64) ** 2))), shadow_bias=float(d.mean())
        )
        if args.split:  # the right half, whose content no training crop saw
            te = S.score_raw(br, out, B.BORDER, right)
            rec.update(psnr_right=te["psnr"], psnr_right_true=te["psnr_true"])
        return rec

    loose = br.valid & ~burst.clipped[0]  # as benchmarks/burst.py: keeps the shadows the strict mask drops
    # the pixels loose adds: the shadows (docs/adaptation.md, "The shadows")
    shadows = br.metric_mask(B.BORDER, loose & ~br.mask)
    cut = burst.shape[1] // 2
    right = br.mask.copy()
    right[:, : cut + SPLIT_MARGIN] = False
    if args.split:  # train only on the left half of every frame (a margin of SPLIT_MARGIN mosaic columns)
        keep = (cut - SPLIT_MARGIN) // 2
        files = [dataclasses.replace(f, packed=np.ascontiguousarray(f.packed[..., :keep])) for f in files]
        burst = B.Burst(
            burst.paths,
            [c[:, : 2 * keep] for c in burst.cfa],
            [c[:, : 2 * keep] for c in burst.clipped],
            burst.pattern,
        )
    if args.rescore:  # add the scores of the existing runs' checkpoints (e.g. a metric added later)
        for name, rec in doc["burst"].get("runs", {}).items():
            model, wrap = load_start(args.start)
            start = {k: v.clone() for k, v in model.state_dict().items()}
            run = Path(args.out) / "runs" / f"burst-{name}"
            by_step = dict(checkpoints(run, start))
            for r in rec["rows"]:
                model.load_state_dict(by_step[r["step"]])
                r.update(score(wrap(model).eval()))
            log(f"rescored {name}")
        _save(path, doc)
        return

    if "supervised" in args.runs and ("supervised" not in doc["burst"].get("runs", {}) or args.redo):
        doc["burst"].setdefault("runs", {})["supervised"] = burst_supervised(args, burst, files, score, log)
        _save(path, doc)
    for name, n2n in N2N_RUNS.items():
        if name in args.runs and (name not in doc["burst"].get("runs", {}) or args.redo):
            doc["burst"].setdefault("runs", {})[name] = burst_n2n(args, name, burst, files, score, log, **n2n)
            _save(path, doc)
    bsp_name = "blindspot" if args.bsp_frames == "others" else f"blindspot-{args.bsp_frames}"
    if "blindspot" in args.runs and (bsp_name not in doc["burst"].get("runs", {}) or args.redo):
        doc["burst"].setdefault("runs", {})[bsp_name] = burst_blindspot(args, files, score, log)
        _save(path, doc)
    cases = [(n, files[1:], o) for n, o in RUNS.items() if n in args.runs]
    if "single" in args.runs:
        cases.append(("frame01-only", files[1:2], {}))  # the default method
    if "transductive" in args.runs:
        cases.append(("transductive", files, {}))
    for name, fl, opts in cases:
        if name in doc["burst"].get("runs", {}) and not args.redo:
            continue
        doc["burst"].setdefault("runs", {})[name] = run_case(args, "burst", name, fl, opts, score, log)
        _save(path, doc)


class MaskedPairs(torch.utils.data.Dataset):
    """Paired crops (packed RGGB): noisy input, target and usable mask — a burst frame with its reference (the
    other training frames registered to it), or a synthetic file with its clean mosaic (mask all ones); a crop
    is redrawn (up to 8 times) until ≥ 20 % of it is usable."""

    keyed = True

    def __init__(self, items, crop: int, seed: int = 0) -> None:
        from rawrcl.cfa import align_rggb, pack

        self.items = []
        for noisy, ref, mask, pattern, lam in items:
            a = []
            for x in (noisy, ref, mask.astype(np.float32)):
                x = align_rggb(x, pattern)[0]
                a.append(
                    np.ascontiguousarray(pack(x[: 2 * (x.shape[0] // 2), : 2 * (x.shape[1] // 2)], "RGGB"))
                )
            self.items.append((*a, lam))
        self.c, self.seed = crop // 2, seed

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key) -> dict:
        i, s = int(key[0]), int(key[1])
        rng = np.random.default_rng([self.seed, i, s % 2**62])
        n, r, m, lam = self.items[i]
        for _ in range(8):
            y = int(rng.integers(0, n.shape[1] - self.c + 1))
            x = int(rng.integers(0, n.shape[2] - self.c + 1))
            sl = (slice(None), slice(y, y + self.c), slice(x, x + self.c))
            if m[sl].mean() >= 0.2:
                break
        return {
            "input": torch.from_numpy(n[sl].copy()),
            "target": torch.from_numpy(r[sl].copy()),
            "mask": torch.from_numpy(m[sl].copy()),
            "noise": lam,
        }


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the samples where ``mask`` is 1 (0 when none is)."""
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def masked_mse(batch: dict, model) -> dict:
    """Mean squared error over the usable samples (``batch["mask"]``): the burst reference's own noise is
    zero-mean, so the minimiser is the clean signal (as for Noise2Noise)."""
    from rawrcl.models.conditioning import call

    out = call(model, batch["input"], batch.get("noise"))
    loss = _masked_mean((out - batch["target"].to(out.dtype)).square(), batch["mask"].to(out.dtype))
    return {"loss": loss, "l1": float(loss.detach())}


class BurstPairs(torch.utils.data.Dataset):
    """Guarded burst Noise2Noise data: ``x_a`` a crop of a training frame, ``ref``/``ref_mask`` the same
    crop of its burst reference (the other training frames registered to it) and usable mask, plus
    ``adapt``'s synthetic mix sample (``input``/``target``/``sup_noise``) when ``mix`` is given."""

    keyed = True

    def __init__(self, pairs: MaskedPairs, mix=None) -> None:
        self.pairs, self.mix = pairs, mix

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key) -> dict:
        it = self.pairs[key]
        item = {"x_a": it["input"], "ref": it["target"], "ref_mask": it["mask"], "noise": it["noise"]}
        if self.mix is not None:
            rng = np.random.default_rng([self.pairs.seed, 104729, int(key[0]), int(key[1]) % 2**62])
            s_ = self.mix(rng)
            item["input"], item["target"] = s_["input"].float(), s_["target"].float()
            item["sup_noise"] = s_["noise"].float()
        return item


def n2n_burst(batch: dict, model) -> dict:
    """Masked MSE of ``model(x_a)`` against the burst reference crop, normalised (as R2R's) by the input's
    mean noise variance over the scored samples, so that ``adapt``'s mix weight means the same."""
    from rawrcl.methods.r2r import signal_variance
    from rawrcl.models.conditioning import call

    noise, ref, m = batch["noise"].float(), batch["ref"].float(), batch["ref_mask"].float()
    out = call(model, batch["x_a"].float(), noise).float()
    mse = _masked_mean((out - ref) ** 2, m)
    var = _masked_mean(signal_variance(ref, noise), m)
    return {"loss": mse / var.detach().clamp_min(1e-12), "n2n_mse": float(mse.detach())}


def burst_references(burst, log) -> list:
    """Per training frame k (frames 1…n−1 of ``burst``): (frame k [0, 1], the mean of the other training
    frames registered to it, its usable mask) — frame 0 is never used."""
    from rawrcl.eval import burst as B

    out = []
    for k in range(1, burst.n):
        order = [k, *[j for j in range(1, burst.n) if j != k]]
        b = B.Burst(
            [burst.paths[j] for j in order],
            [burst.cfa[j] for j in order],
            [burst.clipped[j] for j in order],
            burst.pattern,
        )
        br = B.build_reference(b)
        out.append((np.clip(burst.cfa[k], 0, 1), br.reference, br.mask))
        log(f"  reference for {burst.paths[k].name}: {100 * br.mask.mean():.1f} % usable")
    return out


def _burst_training(args, name: str, objective_for, data, cfg: dict, score, log, check: bool) -> dict:
    """Train the start's first stage with ``objective_for(start state dict)`` on ``data`` (``cfg``: the
    Trainer's settings on top of a forced, quiet run) in ``OUT/runs/burst-<name>``, then score every kept
    checkpoint with ``score`` and, with ``check``, ``adapt``'s built-in forgetting check (``forget_db``,
    ``forget_at``: its worst condition)."""
    from rawrcl.train import Trainer
    from rawrcl.train.adapt_signal import check_crops, check_scores

    model, wrap = load_start(args.start)
    model = model.float().train()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    run = Path(args.out) / "runs" / f"burst-{name}"
    t = time.perf_counter()
    Trainer(model, objective_for(start), data, run, {**cfg, "force": True, "progress": False}).fit()
    secs = time.perf_counter() - t
    checks = check_crops() if check else None
    rows, base = [], None
    for s, sd in checkpoints(run, start):
        model.load_state_dict(sd)
        row = {"step": s, **score(wrap(model).eval())}
        if checks is not None:
            fc = check_scores(model, checks)
            base = base or fc
            drop = {k: fc[k] - base[k] for k in fc}
            worst = min(drop, key=drop.get)
            row.update(forget_db=drop[worst], forget_at=worst)
        rows.append(row)
        log(f"  {name} step {s}: {shown(row)}")
    return {"name": name, "seconds": round(secs, 1), "rows": rows}


def _burst_items(burst, files, log) -> list:
    """:class:`MaskedPairs` items of the training frames (1…n−1) against their references."""
    refs = burst_references(burst, log)
    return [(n, r, m, burst.pattern, f.noise) for (n, r, m), f in zip(refs, files[1:], strict=True)]


def burst_n2n(
    args, name: str, burst, files, score, log, lr: float, own: float = 0.5, mix: float | None = None
) -> dict:
    """Guarded burst Noise2Noise (label-free: every target is made of noisy training frames): ``adapt``'s
    defaults (anchor, mix of synthetic supervised crops, batch, crop, steps) with :func:`n2n_burst` as the
    method; each kept checkpoint scored on frame 00 and on ``adapt``'s built-in forgetting check."""
    from rawrcl.train.adapt_objective import Guarded, synthetic_mix
    from rawrcl.train.config import AdaptConfig

    c = AdaptConfig()
    pairs = MaskedPairs(_burst_items(burst, files, log), c.crop, seed=c.seed)
    mix = c.mix if mix is None else mix
    data = BurstPairs(pairs, synthetic_mix(c.crop, files[1:], own) if mix > 0 else None)
    keep = max(1, args.steps // 4)
    cfg = {
        "steps": args.steps,
        "batch_size": c.batch_size,
        "lr": lr,
        "seed": c.seed,
        "grad_clip": 1.0,
        "save_every": keep,
        "keep_every": keep,
        "method": "n2n-burst",
    }
    guarded = lambda start: Guarded("n2n-burst", n2n_burst, start, c.anchor, mix)  # noqa: E731
    rec = _burst_training(args, name, guarded, data, cfg, score, log, check=True)
    # selected on frame 00 itself among the checkpoints that pass the check: an upper bound, not what a
    # label-free run could pick
    ok = [r for r in rec["rows"] if r["forget_db"] >= -c.forget_tol]
    sel = max(ok, key=lambda r: r["psnr"]) if ok else rec["rows"][0]
    return {
        **rec,
        "selected_step": sel["step"],
        "verdict": "best passing checkpoint on frame 00 (upper bound)",
    }


def burst_supervised(args, burst, files, score, log) -> dict:
    """Unguarded burst Noise2Noise (``supervised`` in ``--runs``): the start's first stage fine-tuned with
    :func:`masked_mse` on frames 01–08, each against the mean of the other seven registered to it (frame 00
    never used), lr ``--sup-lr``, 2× ``adapt``'s batch; every 100 steps scored on frame 00. The targets carry
    the burst reference's resampling error, which the training learns to imitate: gains against frame 00's
    reference overstate true ones (``benchmarks/burst_truth.py``, docs/real_noise.md)."""
    from rawrcl.train.config import AdaptConfig

    t = time.perf_counter()
    items = _burst_items(burst, files, log)
    prep = time.perf_counter() - t
    defaults = AdaptConfig()
    cfg = {
        "steps": args.steps,
        "batch_size": 2 * defaults.batch_size,
        "lr": args.sup_lr,
        "grad_clip": 1.0,
        "save_every": 100,
        "keep_every": 100,
        "method": "supervised-masked-mse",
    }
    data = MaskedPairs(items, defaults.crop)
    rec = _burst_training(args, "supervised", lambda start: masked_mse, data, cfg, score, log, check=False)
    return {**rec, "prep_seconds": round(prep, 1)}


#: the blind-spot row (Laine et al. 2019): its own architecture, trained from scratch on frames 01–08 with the
#: likelihood objective — by default as ``rawrcl adapt --method blindspot`` trains it (``--extra`` overrides
#: these; ``--bsp-steps`` the length; before stop 64 the row defaulted to a constant lr, no EMA, no flips)
_ADAPT_BSP = AdaptConfig(method="blindspot")
BLINDSPOT = {
    "width": WIDTH,
    "crop": _ADAPT_BSP.crop,  # 64 px, 16 pairs since stop 67: earlier rows add '{"crop":128,"batch_size":4}'
    "batch_size": _ADAPT_BSP.batch_size,
    "lr": _ADAPT_BSP.lr,
    "ema": _ADAPT_BSP.ema,
    "lr_schedule": LR_SCHEDULE,
    "init": None,  # a blind-spot checkpoint to continue from (a fresh schedule), else from scratch
    "cross": CROSS,  # the head reads each packed pixel's other CFA samples (false: before stop 60)
    "levels": LEVELS,  # poolings of each rotation's U-Net (2 until stop 65)
    "augment": AUGMENT,  # NoisyCrops(augment=…): "off", "flips" (4 flips) or "all" (8 flips/rotations)
    "censored": CENSORED,  # the censored likelihood for clipped samples (False: those near a clip unscored)
    "held_out": _ADAPT_BSP.held_out,  # adapt's held-out crops that choose among the checkpoints
    "held_crop": HELD_CROP,  # their size (mosaic px; as adapt: the training crop's on files too small for it)
}


def burst_blindspot(args, files, score, log) -> dict:
    """:class:`rawrcl.models.blindspot.BlindSpotDenoiser` trained from scratch with
    :class:`rawrcl.methods.blindspot.BlindSpotNLL` on crops of frames 01–08 (``adapt``'s data, no mix, no
    anchor: there is no start to forget), each file told its own noise; every kept checkpoint scored on frame
    00 with the posterior-mean step (``psnr``) and without it (``psnr_prior``: the blind-spot mean alone),
    and beside the start as ``adapt`` writes it (``psnr_beside``, ``psnr_true_beside``). Row 0 is the shipped
    start, so the Δ columns read against it. ``selected_step``: ``adapt``'s label-free choice by held-out SURE
    (``held_sure_psnr``, the gain's standard error ``held_gain_se_db``; the training files' held-out bands,
    :func:`rawrcl.train.adapt_signal.held_out_scores`) — without the forgetting check, which ``adapt`` also
    runs (≈ 10–25 CPU min per composite)."""
    from rawrcl.methods.blindspot import BlindSpotNLL
    from rawrcl.models.blindspot import BlindSpotDenoiser, WithBlindSpot
    from rawrcl.models.registry import read_checkpoint
    from rawrcl.models.shrink import maybe_shrink
    from rawrcl.train import Trainer
    from rawrcl.train.adapt_blindspot import blindspot_crops
    from rawrcl.train.adapt_signal import gain_se_db, held_out_scores

    o = {**BLINDSPOT, **{k: v for k, v in args.extra.items() if k in BLINDSPOT}}
    start, wrap = load_start(args.start)
    full = wrap(start.float()).eval()  # the whole start
    rows = [{"step": 0, **score(full)}]
    shipped = maybe_shrink(full, True)  # the start as rawrcl denoise runs it
    s_ship = score(shipped)
    rows[0]["psnr_shipped"] = rows[0]["psnr_beside"] = s_ship["psnr"]
    rows[0]["psnr_true_beside"] = s_ship.get("psnr_true")
    rows[0]["psnr_shadows_beside"] = s_ship.get("psnr_shadows")
    log(f"  blindspot: the start {shown(rows[0])}")
    torch.manual_seed(0)
    model = BlindSpotDenoiser(
        width=int(o["width"]), cross=bool(o["cross"]), levels=int(o["levels"]), censored=bool(o["censored"])
    )
    if o["init"]:
        model.load_state_dict(read_checkpoint(o["init"])["state_dict"])
    train = files[BSP_FRAMES[args.bsp_frames]]
    data = blindspot_crops(train, int(o["crop"]), augment=o["augment"], held_crop=int(o["held_crop"]))
    keep = max(1, args.bsp_steps // 4)
    run = (
        Path(args.out)
        / "runs"
        / ("burst-blindspot" + ("" if args.bsp_frames == "others" else f"-{args.bsp_frames}"))
    )
    cfg = {
        "steps": args.bsp_steps,
        "batch_size": int(o["batch_size"]),
        "lr": float(o["lr"]),
        "lr_schedule": o["lr_schedule"],
        "ema": o["ema"],
        "seed": 0,
        "grad_clip": 1.0,
        "save_every": keep,
        "keep_every": keep,
        "method": "blindspot",
        "force": True,
        "progress": False,
    }
    t = time.perf_counter()
    Trainer(model, BlindSpotNLL(censored=model.censored), data, run, cfg).fit()
    secs = time.perf_counter() - t
    held = data.held_out(int(o["held_out"]))
    h0 = held_out_scores(shipped, held)
    rows[0]["held_sure_psnr"] = h0["sure_psnr"]
    ck = run / "checkpoints"
    for s in sorted(int(p.stem.split("_")[1]) for p in ck.glob("step_*.pt")):
        model.load_state_dict(read_checkpoint(ck / f"step_{s:07d}.pt")["state_dict"])
        model.eval()
        model.posterior = True
        row = {"step": s, **score(model)}
        model.posterior = False
        row["psnr_prior"] = score(model)["psnr"]
        model.posterior = True
        beside = maybe_shrink(WithBlindSpot(full, model), True)  # what rawrcl adapt --method blindspot writes
        sb = score(beside)
        row["psnr_beside"], row["psnr_true_beside"] = sb["psnr"], sb.get("psnr_true")
        row["psnr_shadows_beside"] = sb.get("psnr_shadows")
        row["weights_beside"] = [round(w, 3) for w in beside.seen[-1]]
        h = held_out_scores(beside, held)
        row["held_sure_psnr"] = h["sure_psnr"]
        row["held_gain_se_db"] = round(gain_se_db(h0["crop_sure"], h["crop_sure"]), 4)
        rows.append(row)
        log(f"  blindspot step {s}: {shown(row)}")
    best = max(rows, key=lambda r: (r["held_sure_psnr"], -r["step"]))  # adapt: the start unless beaten
    kept = f"step {best['step']}" if best["step"] else "the start"
    return {
        "name": "blindspot",
        "options": {**o, "steps": args.bsp_steps},
        "seconds": round(secs, 1),
        "held_out_crops": len(held),
        "rows": rows,
        "selected_step": best["step"],  # as adapt --evals 4 chooses; at its default (--evals 1): last or 0
        "default_step": rows[-1]["step"] if rows[-1]["held_sure_psnr"] > rows[0]["held_sure_psnr"] else 0,
        "verdict": f"held-out SURE keeps {kept} (forgetting check not run here)",
    }


#: which of the burst files (frame 00 first) a blind-spot row trains on, by --bsp-frames
BSP_FRAMES = {
    "others": slice(1, None),
    "frame01": slice(1, 2),
    "all": slice(None),
    "frames01-04": slice(1, 5),
    "frames05-08": slice(5, 9),
}


# ------------------------------------------------------------------------------------------ synthetic
def simulate(photos, noise, seed: int, offset: int = 0):
    """[(name, noisy cfa [0, 1], clean cfa [0, 1], pattern, black level DN)] with ``noise`` (+ readout)."""
    from rawrcl.simulate import simulate_image

    out = []
    for i, (name, img) in enumerate(photos):
        pattern = ("RGGB", "GRBG", "BGGR", "GBRG")[(i + offset) % 4]
        rng = np.random.default_rng([seed, i + offset])
        s = simulate_image(img, rng, lambda r: noise, pattern=pattern)
        scale = float(s["white_level"] - s["black_level"])
        noisy = (s["noisy"].astype(np.float32) - s["black_level"]) / scale
        clean = (s["clean"].astype(np.float32) - s["black_level"]) / scale
        out.append((name, noisy, clean, pattern))
    return out


def psnr_cfa(model, items, lam: torch.Tensor) -> float:
    from rawrcl.infer import TileOptions, denoise_cfa
    from rawrcl.infer.noise import camera_debanded, row_noise_for
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.models.row_fusion import with_row_fusion
    from rawrcl.noise import NoiseModel

    nm = NoiseModel(tuple(lam[0].tolist()), tuple(lam[1].tolist()))
    vals = []
    with torch.no_grad():
        for _, noisy, clean, pattern in items:
            noisy = camera_debanded(model, noisy, pattern, nm)  # a banded camera's model: as the commands do
            # row-aware: σ_row estimated, banded files fused as the commands do (shrink off, as before)
            net = WithNoise(with_row_fusion(model), row_noise_for(model, noisy, pattern, nm), 4)
            out = denoise_cfa(net, noisy, pattern, TileOptions())
            mse = float(np.mean((np.clip(out, 0, 1) - clean) ** 2))
            vals.append(-10 * math.log10(max(mse, 1e-12)))
    return float(np.mean(vals))


def part_synth(args, doc: dict, path: Path, log) -> None:
    from rawrcl.data.noisy_crops import pack_file
    from rawrcl.eval import load_images
    from rawrcl.methods.supervised import supervised
    from rawrcl.noise import NoiseModel, Readout
    from rawrcl.train import Trainer
    from rawrcl.train.config import AdaptConfig

    photos = load_images(Path(args.sunhays))
    test_photos = load_images(Path(args.test_dir))[args.test_from : args.test_from + 10]
    test_name = f"{Path(args.test_dir).name}[{args.test_from}:{args.test_from + 10}]"
    camera = tuple(float(v) for v in args.camera.split(","))
    cam = NoiseModel(*camera, poisson=True, readout=Readout(12, 0.0), row=args.banding)
    lam = cam.params(4)
    train = simulate(photos[:20], cam, 1)
    test = simulate(test_photos, cam, 2)
    forget_nm = NoiseModel(*FORGET_PRESET, poisson=True, readout=Readout(14, 0.06))
    forget = simulate(test_photos, forget_nm, 3)
    flam = forget_nm.params(4)
    files = [pack_file(n, noisy, p, lam, "given") for n, noisy, _, p in train]
    clipped = float(np.mean([np.mean(x[1] == 0) for x in train]))
    doc.setdefault("synth", {})["info"] = {
        "camera": {
            "lambda_shot": camera[0],
            "lambda_read": camera[1],
            "row_noise": args.banding,
            "bits": 12,
            "black": 0,
        },
        "clipped_fraction": clipped,
        "adapt_photos": "sunhays80[0:20]",
        "test_photos": test_name,
        "forget_noise": {"lambda_shot": FORGET_PRESET[0], "lambda_read": FORGET_PRESET[1], "bits": 14},
    }
    log(
        f"synthetic camera λ {camera}, row noise {args.banding:g}, 12-bit, black-clipped: "
        f"{100 * clipped:.1f} % zeros"
    )

    def score(model) -> dict:
        return {"psnr": psnr_cfa(model, test, lam), "psnr_forget": psnr_cfa(model, forget, flam)}

    for name, opts in RUNS.items():
        if name not in args.runs or (name in doc["synth"].get("runs", {}) and not args.redo):
            continue
        if args.banding > 0:  # a banded camera: the user asks for the row-noise estimate
            opts = {"row_noise": "auto", **opts}
        doc["synth"].setdefault("runs", {})[name] = run_case(args, "synth", name, files, opts, score, log)
        _save(path, doc)
    if "supervised" in args.runs and ("supervised" not in doc["synth"].get("runs", {}) or args.redo):
        from rawrcl.models.conditioning import add_row_input
        from rawrcl.noise import with_row_variance

        model, wrap = load_start(args.start)  # a two-stage start: its first stage is trained
        model = model.float().train()
        sup_lam = lam
        if args.banding > 0:  # the reference is told the true row noise (row-aware, like adapted models)
            model = add_row_input(model).train()
            sup_lam = with_row_variance(lam[None], args.banding)[0]
        run = Path(args.out) / "runs" / "synth-supervised"
        defaults = AdaptConfig()
        # clean pairs: every sample usable
        items = [(noisy, clean, np.ones(noisy.shape, bool), pat, sup_lam) for _, noisy, clean, pat in train]
        data = MaskedPairs(items, defaults.crop)
        cfg = {
            "steps": args.steps,
            "batch_size": 2 * defaults.batch_size,
            "lr": args.sup_lr,
            "grad_clip": 1.0,
            "save_every": args.steps,
            "keep_every": 0,
            "force": True,
            "progress": False,
            "method": "supervised",
        }
        t = time.perf_counter()
        Trainer(model, supervised, data, run, cfg).fit()
        rec = {
            "name": "supervised",
            "seconds": round(time.perf_counter() - t, 1),
            "rows": [{"step": args.steps, **score(wrap(model).eval())}],
        }
        log(f"  supervised: {rec['rows'][0]}")
        doc["synth"].setdefault("runs", {})["supervised"] = rec
        _save(path, doc)


# ---------------------------------------------------------------------------------------------- speed
def part_speed(args, doc: dict, path: Path, log) -> None:
    """Wall time of ``adapt`` at the default settings on 10 generated 12 MP DNGs (4000×3000, 12-bit, with
    a NoiseProfile), in this process's thread count."""
    from rawrcl.io.dng import write_dng
    from rawrcl.train.adapt import adapt

    d = Path(args.out) / "speed_dngs"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:3000, 0:4000].astype(np.float32) / 4000
    for i in range(10):
        p = d / f"img_{i:02d}.dng"
        if p.exists():
            continue
        clean = 0.2 + 0.15 * np.sin(20 * xx + i) * np.cos(13 * yy)
        noisy = clean + rng.standard_normal(clean.shape, dtype=np.float32) * np.sqrt(4e-3 * clean + 2e-4)
        dn = np.clip(np.rint(noisy * 4095), 0, 4095).astype(np.uint16)
        write_dng(p, dn, "RGGB", 0, 4095, iso=3200, noise_profile=[(4e-3, 2e-4)] * 3)
    t = time.perf_counter()
    summ = adapt(d, Path(args.out) / "runs" / "speed", source=args.start, force=True, progress=False)
    secs = time.perf_counter() - t
    doc["speed"] = {
        "files": 10,
        "megapixels": 12,
        "seconds": round(secs, 1),
        "train_seconds": summ["train"]["elapsed_s"],
        "steps": summ["steps"],
        "threads": torch.get_num_threads(),
    }
    log(f"speed: {doc['speed']}")
    _save(path, doc)


# -------------------------------------------------------------------------------------------- figures
def figures(doc: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for part, key in (("burst", "psnr"), ("synth", "psnr")):
        runs = doc.get(part, {}).get("runs", {})
        runs = {k: v for k, v in runs.items() if k != "supervised"}
        if not runs:
            continue
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        for name, rec in runs.items():
            rows = rec["rows"]
            base = rows[0][key]
            ax[0].plot([r["step"] for r in rows], [r[key] - base for r in rows], marker="o", label=name)
            xs = [r.get("held_sure_psnr", math.nan) - rows[0].get("held_sure_psnr", math.nan) for r in rows]
            ax[1].scatter(xs, [r[key] - base for r in rows], label=name)
        low = [
            (n, min(r[key] - rec["rows"][0][key] for r in rec["rows"]))
            for n, rec in runs.items()
            if min(r[key] - rec["rows"][0][key] for r in rec["rows"]) < -1.0
        ]
        if low:  # keep the scale on the runs that matter; name the collapsed ones
            for a in ax:
                a.set_ylim(-1.0, None)
            note = ", ".join(f"{n}: {v:+.1f} dB" for n, v in low)
            ax[0].text(0.02, 0.02, f"off scale: {note}", transform=ax[0].transAxes, fontsize=8)
            ax[1].set_xlim(-0.5, None)
        ax[0].axhline(0, color="k", lw=0.5)
        ax[0].set_xlabel("step")
        ax[0].set_ylabel(f"Δ true {key} vs start (dB)")
        ax[0].set_title(f"{part}: test PSNR change during adaptation")
        ax[0].legend(fontsize=7)
        ax[1].axhline(0, color="k", lw=0.5)
        ax[1].axvline(0, color="k", lw=0.5)
        ax[1].set_xlabel("Δ held-out SURE PSNR (dB, label-free)")
        ax[1].set_ylabel("Δ true PSNR (dB)")
        ax[1].set_title("label-free signal vs truth (every kept checkpoint)")
        fig.tight_layout()
        p = out / f"adapt_{part}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    return made


def table(doc: dict) -> str:
    lines = []
    for part in ("burst", "synth"):
        runs = doc.get(part, {}).get("runs", {})
        if not runs:
            continue
        extra = " | forget Δ" if part == "synth" else " | true-error Δ"
        lines.append(f"\n{part}: | run | start | final Δ | best Δ (step) | selected Δ (step){extra} | s |")
        for name, rec in runs.items():
            rows = rec["rows"]
            b = rows[0]
            if name == "supervised" and part == "burst":  # unguarded burst N2N: its rows start at step 0
                best = max(rows, key=lambda r: r["psnr"])
                lines.append(
                    f"| supervised (unguarded) | {b['psnr']:.2f} | {rows[-1]['psnr'] - b['psnr']:+.2f} | "
                    f"{best['psnr'] - b['psnr']:+.2f} ({best['step']}) | | "
                    f"{rows[-1]['psnr_true'] - b['psnr_true']:+.2f} | {rec['seconds']} |"
                )
                continue
            if name == "supervised":
                others = [r for n, r in doc[part]["runs"].items() if n != "supervised" and r.get("rows")]
                start = others[0]["rows"][0] if others else {}  # every adapted run starts from the same model
                d = rows[-1]["psnr"] - start.get("psnr", math.nan)
                df = rows[-1]["psnr_forget"] - start.get("psnr_forget", math.nan)
                p0 = start.get("psnr", math.nan)
                lines.append(f"| supervised | {p0:.2f} | {d:+.2f} | | | {df:+.2f} | {rec['seconds']} |")
                continue
            key = "psnr_beside" if "psnr_beside" in b else "psnr"  # blind-spot rows: as adapt writes them
            best = max(rows, key=lambda r: r[key])
            sel = next(r for r in rows if r["step"] == rec["selected_step"])
            col = "psnr_forget" if part == "synth" else ("psnr_true_beside" if key != "psnr" else "psnr_true")
            lines.append(
                f"| {name} | {b[key]:.2f} | {rows[-1][key] - b[key]:+.2f} | "
                f"{best[key] - b[key]:+.2f} ({best['step']}) | "
                f"{sel[key] - b[key]:+.2f} ({sel['step']}) | "
                f"{sel.get(col, math.nan) - b.get(col, math.nan):+.2f} | {rec['seconds']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", help="starting checkpoint (noise-aware RAW denoiser)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--part", default="burst,synth")
    ap.add_argument("--runs", default=",".join([*RUNS, "single", "transductive", "supervised"]))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--camera", default=",".join(map(str, CAMERA)), help="synth: λshot,λread of the camera")
    ap.add_argument("--banding", type=float, default=0.0, help="synth: row-noise std of the camera ([0, 1])")
    ap.add_argument("--extra", default="{}", help="adapt options added to every run, e.g. '{\"alpha\": 1}'")
    ap.add_argument("--sup-lr", type=float, default=1e-4)
    ap.add_argument("--bsp-steps", type=int, default=3000, help="burst: steps of the blindspot row")
    ap.add_argument(
        "--bsp-frames",
        default="others",
        choices=tuple(BSP_FRAMES),
        help="burst: blindspot's files (frames01-04 / frames05-08: one half of the eight: cross-fitting)",
    )
    ap.add_argument("--burst", default=str(SHARED / "data" / "raw" / "hdrplus_burst2"))
    ap.add_argument("--sunhays", default=str(SHARED / "data" / "sunhays80"))
    ap.add_argument(
        "--test-dir", default=str(SHARED / "data" / "cbsd68"), help="synth: test photos (another source)"
    )
    ap.add_argument("--test-from", type=int, default=58, help="synth: first of the 10 test photos (sorted)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--redo", action="store_true", help="rerun runs already in results.json")
    ap.add_argument(
        "--split",
        action="store_true",
        help="burst: adapt (and train the supervised reference) on the left half of the frames only, and "
        "also score frame 00's right half (psnr_right): content no training crop saw",
    )
    ap.add_argument("--rescore", action="store_true", help="burst: rescore the existing runs' checkpoints")
    ap.add_argument("--figures", action="store_true", help="only redraw figures / table from results.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    doc = _load(path)
    args.runs = set(args.runs.split(","))
    args.extra = json.loads(args.extra)

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    if not args.figures:
        doc.setdefault("settings", {}).update({"start": args.start, "steps": args.steps})
        if "burst" in args.part:
            part_burst(args, doc, path, log)
        if "synth" in args.part:
            part_synth(args, doc, path, log)
        if "speed" in args.part:
            part_speed(args, doc, path, log)
    for p in figures(doc, out):
        log(f"figure: {p}")
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
