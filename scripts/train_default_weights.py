#!/usr/bin/env python
"""Reproduce rawrcl's shipped default weights (``rawrcl/weights/{jdd,raw_denoise}_default.pt``).

One recorded command (the numbers used for the shipped files are in ``docs/weights.md``)::

    nice -n 10 python scripts/train_default_weights.py --data ../shared/data/cbsd68 \
        --work runs/default_weights --pretrain-steps 2000 --finetune-steps 20000 --install

Stages (each is skipped or resumed when its outputs exist, so re-running the same command after an
interruption continues where it stopped; raise ``--finetune-steps`` / ``--pretrain-steps`` to train more):

1. split: the sorted photos of ``--data``; the last ``--heldout`` are held out for evaluation
   (``WORK/heldout``), the rest are the training photos (``WORK/train``), as symbolic links.
2. simulate: ``rawrcl simulate WORK/train WORK/sim --sampler paper --sigma-range 0 SMAX [--no-unprocess]``:
   one noisy Bayer DNG per training photo (the unlabelled data a user would have).
3. pretrain: ``rawrcl pretrain WORK/sim --task jdd --method rcl …`` (self-supervised RCL, ``--resume``
   when a run exists).
4. finetune, per task (jdd, raw-denoise): ``rawrcl.train.finetuning.finetune`` (the library behind ``rawrcl
   finetune``) with every training photo as a label, in ``--chunks`` chunks whose learning rate is
   multiplied by ``--lr-decay`` each time (a step schedule; each chunk starts from the previous one's
   checkpoint). The library call is used instead of the CLI only to pass a noise sampler that spans the
   eval presets: the paper sampler with σ ∈ [0, SMAX] (8-bit units) — ``rawrcl finetune --noise``
   accepts low/high/paper(0–20)/fixed pairs only, and ``high`` (λshot = 0.01) lies outside paper(0–20).
5. install (``--install``): the final checkpoints, weights stored as float16 (≈ half the size), with a
   ``provenance`` record in ``extra``, to ``rawrcl/weights/``.
6. eval: ``rawrcl eval`` on the held-out photos, noise presets low and high, for the new models and
   the baselines (menon+nlm for jdd, the noisy input for raw-denoise); ``WORK/report.json`` and a
   Markdown table on stdout.

Environment overrides: ``RAWRCL_PRETRAIN_STEPS``, ``RAWRCL_FINETUNE_STEPS``, ``RAWRCL_DEVICE``,
``RAWRCL_WIDTH``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASK_FILES = {"jdd": "jdd_default.pt", "raw-denoise": "raw_denoise_default.pt"}
BASELINE = {"jdd": "menon+nlm", "raw-denoise": "noisy"}
PHOTO_EXT = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp"}


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--data", default=os.environ.get("RAWRCL_DATA", str(REPO.parent / "shared/data/cbsd68")))
    ap.add_argument("--work", default=str(REPO / "runs" / "default_weights"))
    ap.add_argument("--heldout", type=int, default=10, help="last N sorted photos held out for eval")
    ap.add_argument("--tasks", default="jdd,raw-denoise")
    ap.add_argument("--width", type=int, default=_env_int("RAWRCL_WIDTH", 24))
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument(
        "--skip",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="U-Net adds its output to a bilinear demosaic (JDD) / the input (denoise); see pretrain --skip",
    )
    ap.add_argument(
        "--demosaic",
        choices=("bilinear", "malvar"),
        default="bilinear",
        help="demosaic in the JDD skip (with --init: the checkpoint's weights are kept, its skip switched)",
    )
    ap.add_argument("--sigma-max", type=float, default=40.0, help="paper sampler σ max (8-bit units)")
    ap.add_argument("--unprocess", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--pretrain-steps", type=int, default=_env_int("RAWRCL_PRETRAIN_STEPS", 2000))
    ap.add_argument("--pretrain-batch", type=int, default=16)
    ap.add_argument("--pretrain-crop", type=int, default=128)
    ap.add_argument("--finetune-steps", type=int, default=_env_int("RAWRCL_FINETUNE_STEPS", 20000))
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--crop", type=int, default=128, help="fine-tuning crop, clean-photo pixels")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-decay", type=float, default=0.5)
    ap.add_argument("--device", default=os.environ.get("RAWRCL_DEVICE", "auto"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mix",
        type=float,
        default=None,
        help="after the chunks, a JDD continuation where each sample is unprocessed with this probability "
        "(the others keep photo values): a model for both domains",
    )
    ap.add_argument("--mix-steps", type=int, default=700)
    ap.add_argument(
        "--augment",
        action="store_true",
        help="random flips/rotations of the clean crops while fine-tuning (finetune --augment)",
    )
    ap.add_argument("--mix-lr", type=float, default=2.5e-4)
    ap.add_argument(
        "--balance-noise",
        action="store_true",
        help="fine-tune with the noise-balanced L1 (finetune --balance-noise)",
    )
    ap.add_argument(
        "--ema",
        type=float,
        default=None,
        help="fine-tuning keeps an exponential moving average of the weights with this decay (e.g. 0.999)",
    )
    ap.add_argument(
        "--init",
        default=None,
        help="continue from this checkpoint (e.g. the shipped weights) instead of simulate + pretrain; its "
        "provenance is kept under provenance['init']; with --finetune-steps 0 only the --mix stage runs",
    )
    ap.add_argument("--install", action="store_true", help="copy the results into rawrcl/weights/")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--eval-limit", type=int, default=None)
    return ap.parse_args(argv)


def log(msg: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


def run(cmd: list[str], record: list[str]) -> str:
    """Run a rawrcl CLI command, echo and record it; return its stdout."""
    line = shlex.join(cmd)
    record.append(line)
    log(f"$ {line}")
    exe = [sys.executable, "-m", "rawrcl.cli", *cmd[1:]] if cmd[0] == "rawrcl" else cmd
    res = subprocess.run(exe, stdout=subprocess.PIPE, text=True, cwd=REPO)
    if res.returncode != 0:
        raise SystemExit(f"command failed ({res.returncode}): {line}")
    return res.stdout


def init_record(ckpt: Path, torch) -> dict:
    """Provenance of an ``--init`` checkpoint: its own ``extra["provenance"]`` (installed weights), else the
    ``report.json`` of the run of this script that wrote it (``WORK/finetune_<task>/<stage>/checkpoints/
    last.pt``); every ``init`` link further back that was recorded without provenance is looked up again
    the same way, so a chain of continuations stays reproducible."""
    extra = torch.load(ckpt, map_location="cpu", weights_only=True).get("extra", {})
    prov = extra.get("provenance")
    report = ckpt.parents[3] / "report.json" if len(ckpt.parents) > 3 else None
    if prov is None and report is not None and report.is_file():
        prov = json.loads(report.read_text()).get("provenance")
    return {"checkpoint": str(ckpt), "provenance": _repair(prov, torch)}


def _repair(prov: dict | None, torch) -> dict | None:
    """``prov`` with every link of its ``init`` chain that lacks provenance looked up again
    (:func:`init_record`)."""
    init = (prov or {}).get("init")
    if not init:
        return prov
    if init.get("provenance") is None:
        if not Path(init["checkpoint"]).is_file():
            return prov
        return {**prov, "init": init_record(Path(init["checkpoint"]).resolve(), torch)}
    return {**prov, "init": {**init, "provenance": _repair(init["provenance"], torch)}}


def with_demosaic(ckpt: Path, demosaic: str, work: Path, provenance: dict, record: list[str]) -> Path:
    """``ckpt`` itself, or (when its skip uses another demosaic) ``WORK/init_<demosaic>.pt``: the same
    weights with the skip's demosaic switched, carrying ``ckpt``'s provenance."""
    from rawrcl.models import build_model, read_checkpoint, save_checkpoint

    raw = read_checkpoint(ckpt)
    if raw["config"].get("demosaic", "bilinear") == demosaic:
        return ckpt
    model = build_model({**raw["config"], "demosaic": demosaic})
    model.load_state_dict(raw["state_dict"])  # float16 installed weights are copied into float32
    dst = work / f"init_{demosaic}.pt"
    note = f"weights of {ckpt} with the skip's demosaic switched to {demosaic!r}"
    save_checkpoint(dst, model, extra={"provenance": {"note": note, "init": provenance}})
    record.append(f"# {note} -> {dst}")
    log(note)
    return dst


def split(data: Path, work: Path, heldout: int) -> tuple[Path, Path, list[str], list[str]]:
    photos = sorted(p for p in data.iterdir() if p.suffix.lower() in PHOTO_EXT)
    if len(photos) <= heldout:
        raise SystemExit(f"{data}: {len(photos)} photos, need more than --heldout {heldout}")
    train, test = photos[:-heldout] if heldout else photos, photos[-heldout:] if heldout else []
    dirs = []
    for name, group in (("train", train), ("heldout", test)):
        d = work / name
        d.mkdir(parents=True, exist_ok=True)
        for p in group:
            link = d / p.name
            if not link.exists():
                link.symlink_to(p.resolve())
        dirs.append(d)
    return dirs[0], dirs[1], [p.name for p in train], [p.name for p in test]


def finetune_task(args, task: str, source: Path, train_dir: Path, work: Path, record: list[str]) -> Path:
    from rawrcl.noise import PaperSampler
    from rawrcl.train.finetuning import finetune

    steps = max(args.finetune_steps // args.chunks, 1)
    ckpt = source
    for c in range(args.chunks if args.finetune_steps > 0 else 0):
        out = work / f"finetune_{task}" / f"chunk{c}"
        lr = args.lr * args.lr_decay**c
        call = (
            f"rawrcl.train.finetuning.finetune({str(ckpt)!r}, {task!r}, {str(train_dir)!r}, {str(out)!r}, "
            f"labels='all', protocol='full', steps={steps}, batch_size={args.batch_size}, crop={args.crop}, "
            f"lr={lr:g}, noise=PaperSampler(0, {args.sigma_max:g}), unprocess={args.unprocess}, "
            f"seed={args.seed + c + 1}, device={args.device!r}, augment={args.augment}, ema={args.ema}, "
            f"balance_noise={args.balance_noise})"
        )
        record.append(call)
        done = out / "finetune.json"
        if done.exists() and json.loads(done.read_text()).get("steps") == steps:
            log(f"finetune {task} chunk {c}: done before, skipped")
        else:
            log(f"finetune {task} chunk {c}/{args.chunks}: {steps} steps, lr {lr:g}")
            t0 = time.time()
            finetune(
                str(ckpt),
                task,
                str(train_dir),
                out,
                labels="all",
                protocol="full",
                steps=steps,
                batch_size=args.batch_size,
                crop=args.crop,
                lr=lr,
                noise=PaperSampler(0.0, args.sigma_max),
                unprocess=args.unprocess,
                seed=args.seed + c + 1,
                device=None if args.device == "auto" else args.device,
                force=True,
                progress=sys.stderr.isatty(),
                augment=args.augment,
                ema=args.ema,
                balance_noise=args.balance_noise,
            )
            log(f"finetune {task} chunk {c}: {time.time() - t0:.0f} s")
        ckpt = out / "checkpoints" / "last.pt"
    if args.mix is not None and task == "jdd":
        ckpt = mix_stage(args, task, ckpt, train_dir, work, record)
    return ckpt


def mix_stage(args, task: str, ckpt: Path, train_dir: Path, work: Path, record: list[str]) -> Path:
    """Continue fine-tuning with ``unprocess_mix = args.mix`` (both linear-camera and photo-valued data)."""
    from dataclasses import replace

    from rawrcl.noise import PaperSampler
    from rawrcl.tasks import get_task
    from rawrcl.train.finetuning import finetune

    out = work / f"finetune_{task}" / "mix"
    seed = args.seed + 11
    record.append(
        f"rawrcl.train.finetuning.finetune({str(ckpt)!r}, replace(get_task({task!r}, unprocess=True), "
        f"unprocess_mix={args.mix:g}), {str(train_dir)!r}, {str(out)!r}, labels='all', protocol='full', "
        f"steps={args.mix_steps}, batch_size={args.batch_size}, crop={args.crop}, lr={args.mix_lr:g}, "
        f"noise=PaperSampler(0, {args.sigma_max:g}), seed={seed}, device={args.device!r}, "
        f"augment={args.augment}, ema={args.ema}, balance_noise={args.balance_noise})"
    )
    done = out / "finetune.json"
    if done.exists() and json.loads(done.read_text()).get("steps") == args.mix_steps:
        log(f"finetune {task} mix: done before, skipped")
    else:
        log(f"finetune {task} mix {args.mix:g}: {args.mix_steps} steps, lr {args.mix_lr:g}")
        finetune(
            str(ckpt),
            replace(get_task(task, unprocess=True), unprocess_mix=args.mix),
            str(train_dir),
            out,
            labels="all",
            protocol="full",
            steps=args.mix_steps,
            batch_size=args.batch_size,
            crop=args.crop,
            lr=args.mix_lr,
            noise=PaperSampler(0.0, args.sigma_max),
            seed=seed,
            device=None if args.device == "auto" else args.device,
            force=True,
            progress=sys.stderr.isatty(),
            augment=args.augment,
            ema=args.ema,
            balance_noise=args.balance_noise,
        )
    return out / "checkpoints" / "last.pt"


def portable(obj):
    """``obj`` (JSON-like) with this checkout's absolute path and the interpreter's path removed from every
    string, so the shipped provenance names repository-relative paths only."""
    if isinstance(obj, dict):
        return {k: portable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v) for v in obj]
    if isinstance(obj, str):
        return obj.replace(sys.executable, "python").replace(str(REPO) + os.sep, "")
    return obj


def install(ckpt: Path, task: str, provenance: dict) -> Path:
    import torch

    from rawrcl.models import read_checkpoint
    from rawrcl.models.registry import atomic_torch_save

    raw = read_checkpoint(ckpt)
    state = {k: (v.half() if v.is_floating_point() else v) for k, v in raw["state_dict"].items()}
    dst = REPO / "rawrcl" / "weights" / TASK_FILES[task]
    prov = portable(json.loads(json.dumps(provenance, default=str)))
    extra = {"provenance": prov, "weights_dtype": "float16"}
    atomic_torch_save({"config": raw["config"], "state_dict": state, "extra": extra}, dst)
    os.chmod(dst, 0o644)  # package data: readable by everyone (the temporary file was 0600)
    torch.load(dst, weights_only=True)  # must load under the safe loader
    log(f"installed {dst} ({dst.stat().st_size / 1e6:.2f} MB)")
    return dst


def evaluate(args, models: dict[str, Path], heldout: Path, record: list[str]) -> list[dict]:
    rows = []
    for task, ckpt in models.items():
        for noise in ("low", "high"):
            for name in (str(ckpt), BASELINE[task]):
                cmd = ["rawrcl", "eval", name, "--task", task, "--clean-dir", str(heldout), "--noise", noise]
                cmd += ["--json"] + (["--unprocess"] if args.unprocess else [])
                if args.eval_limit:
                    cmd += ["--limit", str(args.eval_limit)]
                res = json.loads(run(cmd, record))
                rows.append(
                    {
                        "task": task,
                        "noise": noise,
                        "model": "default" if name == str(ckpt) else name,
                        "psnr": round(res["psnr"], 2),
                        "ssim": round(res["ssim"], 4),
                        "psnr_linear": round(res.get("psnr_linear", float("nan")), 2),
                        "n_images": res["n_images"],
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    record: list[str] = [shlex.join([sys.executable, *sys.argv])]
    t_start = time.time()
    train_dir, heldout_dir, train_names, heldout_names = split(Path(args.data), work, args.heldout)
    log(f"{len(train_names)} training photos, {len(heldout_names)} held out")

    init_provenance = None
    if args.init:
        import torch

        pre_ckpt = Path(args.init).resolve()
        init_provenance = init_record(pre_ckpt, torch)
        log(f"continuing from {pre_ckpt} (no simulate / pretrain)")
        pre_ckpt = with_demosaic(pre_ckpt, args.demosaic, work, init_provenance, record)
    else:
        sim = work / "sim"
        cmd = ["rawrcl", "simulate", str(train_dir), str(sim), "--sampler", "paper"]
        cmd += [
            "--sigma-range",
            "0",
            f"{args.sigma_max:g}",
            "--seed",
            str(args.seed),
            "--black-level",
            "2048",
        ]
        cmd += [] if args.unprocess else ["--no-unprocess"]
        run(cmd, record)

        pre = work / "pretrain"
        cmd = ["rawrcl", "pretrain", str(sim), "--out", str(pre), "--task", "jdd", "--method", "rcl"]
        cmd += ["--width", str(args.width), "--depth", str(args.depth), "--steps", str(args.pretrain_steps)]
        cmd += ["--skip" if args.skip else "--no-skip", "--demosaic", args.demosaic]
        cmd += ["--batch-size", str(args.pretrain_batch), "--crop", str(args.pretrain_crop)]
        cmd += ["--device", args.device, "--seed", str(args.seed), "--cache-dir", "none"]
        cmd += ["--resume"] if (pre / "checkpoints" / "last.pt").exists() else []
        run(cmd, record)
        pre_ckpt = pre / "checkpoints" / "last.pt"

    tasks = [t for t in args.tasks.split(",") if t]
    models = {t: finetune_task(args, t, pre_ckpt, train_dir, work, record) for t in tasks}

    provenance = {
        "data": {
            "source": str(Path(args.data)),
            "dataset": "CBSD68 (BSD68 test split, colour), as distributed in the FFDNet repository's "
            "testsets/CBSD68",
            "train_photos": train_names,
            "heldout_photos": heldout_names,
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("install", "no_eval")},
        "commands": record,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "init": init_provenance,
        "train_seconds": round(time.time() - t_start),
    }
    if args.install:
        models = {t: install(p, t, {**provenance, "task": t}) for t, p in models.items()}
    report: dict = {"provenance": provenance, "checkpoints": {t: str(p) for t, p in models.items()}}
    if not args.no_eval:
        rows = evaluate(args, models, heldout_dir, record)
        report["eval"] = rows
        print("\n| task | noise | model | PSNR (sRGB, dB) | SSIM | PSNR linear (dB) |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            cells = [r["task"], r["noise"], r["model"], r["psnr"], r["ssim"], r["psnr_linear"]]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    (work / "report.json").write_text(json.dumps(report, indent=2, default=str))
    log(f"report: {work / 'report.json'}")


if __name__ == "__main__":
    main()
