#!/usr/bin/env python
"""Train rawrcl's noise-aware default weights (RAW denoiser, JDD) with the engine; optionally install them.

Recipe (issue 19 §2–3; every choice fixed on synthetic data, none on the real burst):

- photos: the first 58 sorted ``cbsd68`` photos and the first 90 sorted ``urban100`` photos train;
  ``cbsd68[58:]`` + ``urban100[90:]`` are the validation split for choices; ``sunhays80`` is never read here
  (the held-out test source of ``benchmarks/real_noise.py``).
- model: noise-aware U-Net (``noise_aware=True``: packed mosaic + the σ map √(λshot·x + λread)), ``--width``
  / ``--depth``, skip to the input (denoiser) or to a bilinear demosaic (JDD).
- samples (:class:`rawrcl.train.finetuning.LabelledCrops`, a fresh draw every step): random crop + flip/rot,
  half unprocessed (Brooks et al.) and half photo values as linear RGB, 60 % darkened by a gain
  log-uniform in [0.02, 1] (low-light captures), noise from :class:`rawrcl.noise.CameraSampler` (real
  cameras' range from base ISO to phone high ISO, Poisson shot noise, 10–14-bit quantisation, 35 % clipped
  at black); ``--zoom-p P`` of the crops are a smaller window enlarged by a factor log-uniform in [1,
  ``--zoom-max``] (bicubic): full-resolution camera files are much smoother per pixel than the downsampled
  photo collections, and a model trained only on the latter stops averaging too early in flat regions;
  ``--cast-p P`` of the crops get an illuminant colour cast (red and blue × a factor log-uniform in
  [1/``--cast-max``, ``--cast-max``] each, exposed for the brightest channel): unprocessing alone gives
  only daylight ratios (R/G ≈ 0.4–0.5, B/G ≈ 0.5–0.7), real files under artificial light go far beyond;
  ``--hard-p P`` of the plain crops are the hardest of ``--hard-k`` windows for bilinear demosaicking
  (hard-example mining, as Gharbi et al. 2016 built their training set); ``--told-p P`` of the crops tell
  the model a noise level off by a log-normal factor of log-std ``--told-spread`` (level and per plane, as a
  profile or the single-image estimate errs), so that a calibration error costs less.
- training: plain L1 (a noise-balanced loss measured worse on validation; `--loss log-mse` maximises the
  mean per-crop PSNR instead), Adam, cosine learning rate,
  gradient cap 1, weight EMA 0.999 (the checkpoint holds the average); ``--distill-tta W`` adds W × the same
  loss against the starting model's 8-pass self-ensemble (``--tta``), frozen — behind a frozen first stage, of
  the JDD stage alone (:func:`rawrcl.methods.supervised.ensemble_teacher`).

Resumable: re-running the same command continues ``WORK/<task>`` from its last checkpoint (the trainer's
``--resume``). ``--install`` writes the EMA weights as float16 with a provenance record to
``rawrcl/weights/<task default>``.

Usage: ``python scripts/train_noise_aware.py --task raw-denoise --steps 20000 --work runs/na [--install]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
#: (folder, number of sorted photos that train; the rest validate)
TRAIN_SOURCES = (("cbsd68", 58), ("urban100", 90))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--task", choices=("raw-denoise", "jdd"), default="raw-denoise")
    ap.add_argument("--data", default=os.environ.get("RAWRCL_DATA", str(DATA)))
    ap.add_argument("--work", default=str(REPO / "runs" / "noise_aware"))
    ap.add_argument("--width", type=int, default=24)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--crop", type=int, default=128, help="clean-photo pixels (packed: half)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--schedule", choices=("constant", "cosine"), default="cosine")
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--init", default=None, help="start from this checkpoint (a low-lr continuation)")
    ap.add_argument(
        "--widen",
        type=int,
        default=None,
        metavar="W",
        help="widen the --init U-Net to width W first, computing the same function (rawrcl.models.widen)",
    )
    ap.add_argument(
        "--deepen",
        type=int,
        default=None,
        metavar="N",
        help="add N identity-initialised top-level residual blocks to the --init U-Net (same function)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--plane-p", type=float, default=0.0, help="share of crops with per-plane (white-balanced) noise"
    )
    ap.add_argument(
        "--plane-free-p",
        type=float,
        default=0.0,
        help="of the per-plane crops, the share whose read noise gain is independent of the shot gain",
    )
    ap.add_argument(
        "--zoom-p", type=float, default=0.0, help="share of crops enlarged (full-resolution-like smoothness)"
    )
    ap.add_argument("--zoom-max", type=float, default=4.0, help="largest enlargement factor of those crops")
    ap.add_argument(
        "--hard-p",
        type=float,
        default=0.0,
        help="share of the plain crops mined for demosaicking difficulty (the hardest of --hard-k windows)",
    )
    ap.add_argument("--hard-k", type=int, default=4, help="candidate windows per mined crop")
    ap.add_argument("--told-p", type=float, default=0.0, help="share of crops told a wrong noise level")
    ap.add_argument(
        "--told-spread", type=float, default=0.25, help="log-std of the told level's error (told_noise)"
    )
    ap.add_argument("--cast-p", type=float, default=0.0, help="share of crops with an illuminant colour cast")
    ap.add_argument(
        "--cast-max", type=float, default=4.0, help="red and blue × a factor log-uniform in [1/max, max]"
    )
    ap.add_argument(
        "--unprocess-mix",
        type=float,
        default=0.5,
        help="share of crops unprocessed to camera RGB (the others keep photo values as linear RGB)",
    )
    ap.add_argument(
        "--exposure-mix",
        type=float,
        default=0.6,
        help="share of crops darkened by a gain log-uniform in [0.02, 1] (low-light captures)",
    )
    ap.add_argument(
        "--loss",
        choices=("l1", "log-mse", "rmse"),
        default="l1",
        help="l1; log-mse: the batch mean of log10 per-crop MSE (maximises the mean PSNR over crops); rmse: "
        "the batch mean of per-crop RMS errors",
    )
    ap.add_argument(
        "--distill-tta",
        type=float,
        default=0.0,
        metavar="W",
        help="add W × the same loss against the 8-pass self-ensemble of the starting model (frozen; behind a "
        "frozen first stage only the JDD stage is ensembled): distils --tta into the network; 0: off",
    )
    ap.add_argument("--save-every", type=int, default=250)
    ap.add_argument("--install", action="store_true", help="install the result into rawrcl/weights/")
    ap.add_argument(
        "--install-only",
        nargs="+",
        metavar="RUN",
        help="no training: install the last of these stage runs (first → last) into rawrcl/weights/; an "
        "entry may be an installed checkpoint file instead of a run (its recorded stages stand for it: "
        "continue a shipped file, or re-seat its JDD stage with --two-stage)",
    )
    ap.add_argument(
        "--average-with",
        default=None,
        metavar="RUN",
        help="with --install-only: install the half/half weight average of the last entry and RUN (a stage "
        "trained from it, same architecture); RUN's stage is recorded as averaged",
    )
    ap.add_argument(
        "--blend",
        type=float,
        default=None,
        metavar="W",
        help="raw-denoise, with --install-only FILE: install the RAW default as the CFA-site blend of the "
        "two-stage JDD checkpoint FILE (e.g. rawrcl/weights/jdd_default.pt): W × its RGB at the CFA sites + "
        "(1 − W) × its first stage's output (rawrcl.models.DenoiseThenDemosaic, output 'raw')",
    )
    ap.add_argument(
        "--blend-sigma",
        type=float,
        default=0.0,
        metavar="S",
        help="with --blend: gate it by the noise, W·v/(v + S²) per pixel (v the noise variance there, "
        "[0, 1]² units): near-clean pixels keep the first stage's value; 0: W everywhere",
    )
    ap.add_argument(
        "--behind",
        default=None,
        metavar="DENOISER",
        help="jdd: train behind this frozen RAW denoiser (a checkpoint; 'default': the shipped RAW denoiser; "
        "'jdd-default': the first stage of the shipped JDD file), told λ × the two-stage residual (the run "
        "is a two-stage model)",
    )
    ap.add_argument(
        "--two-stage",
        nargs="?",
        const="default",
        default=None,
        metavar="DENOISER",
        help="jdd: install as the second stage behind a RAW denoiser (as --behind; alone: 'default', the "
        "shipped RAW denoiser) in one two-stage checkpoint (rawrcl.models.DenoiseThenDemosaic); a run "
        "trained --behind a denoiser gives its JDD stage",
    )
    return ap.parse_args(argv)


def training_photos(data: Path) -> list:
    from rawrcl.eval import load_images

    photos = []
    for name, n in TRAIN_SOURCES:
        photos += [(f"{name}/{k}", a) for k, a in load_images(data / name)[:n]]
    return photos


def _noise_name(args) -> str:
    """The run's noise sampler, as recorded in its config and the installed provenance."""
    if not args.plane_p:
        return "camera"
    free = f", plane_free_p {args.plane_free_p}" if args.plane_free_p else ""
    return f"camera (plane_p {args.plane_p}{free})"


def train_task(args) -> Path:
    import torch

    from rawrcl.methods.supervised import balance_for, ensemble_teacher, supervised
    from rawrcl.noise import CameraSampler
    from rawrcl.tasks import get_task
    from rawrcl.train import Trainer
    from rawrcl.train.finetuning import LabelledCrops, prepare_model

    for name in ("unprocess_mix", "exposure_mix"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise SystemExit(f"--{name.replace('_', '-')} is a share: give a value in [0, 1]")
    if not args.distill_tta >= 0:
        raise SystemExit("--distill-tta is a loss weight: give a value >= 0 (0: off)")
    task_options = {
        "unprocess_mix": args.unprocess_mix,
        "exposure": (0.02, 1.0),
        "exposure_mix": args.exposure_mix,
    }
    if args.cast_p > 0:
        task_options.update(cast=args.cast_max, cast_mix=args.cast_p)
    task = replace(get_task(args.task, unprocess=True), **task_options)
    run_dir = Path(args.work) / args.task
    resume = (run_dir / "checkpoints" / "last.pt").exists()
    source = args.init or "scratch"
    if (args.widen or args.deepen) and not args.init:
        raise SystemExit("--widen and --deepen grow the --init checkpoint: give --init")
    model, info = prepare_model(
        source, task, "full", width=args.width, depth=args.depth, seed=args.seed, noise_aware=True
    )
    from rawrcl.errors import RawrclError
    from rawrcl.models.widen import deepen, widen

    for flag, grow in (("widen", widen), ("deepen", deepen)):  # more capacity, the same function at first
        if getattr(args, flag):
            try:
                model = grow(model, getattr(args, flag))
            except RawrclError as exc:
                raise SystemExit(f"--{flag} {getattr(args, flag)}: {exc}") from None
    if args.behind:  # cascade: the JDD network trains behind a frozen RAW denoiser, as the two-stage runs
        from rawrcl.models.compose import RESIDUAL, DenoiseThenDemosaic

        if args.task != "jdd":
            raise SystemExit("--behind trains a JDD network behind a RAW denoiser: use --task jdd")
        den, _ = first_stage_denoiser(args.behind)
        for prm in den.parameters():
            prm.requires_grad_(False)
        model = DenoiseThenDemosaic(den.float(), model, RESIDUAL)
    photos = training_photos(Path(args.data))
    zoom = (args.zoom_p, args.zoom_max) if args.zoom_p > 0 else None
    hard = (args.hard_p, args.hard_k) if args.hard_p > 0 else None
    told = (args.told_p, args.told_spread) if args.told_p > 0 else None
    dataset = LabelledCrops(
        photos,
        task,
        crop=args.crop,
        seed=args.seed,
        noise=CameraSampler(plane_p=args.plane_p, plane_free_p=args.plane_free_p),
        augment=True,
        zoom=zoom,
        hard=hard,
        told=told,
    )
    cfg = {
        "method": "supervised",
        "loss": args.loss,
        "task": task.name,
        "steps": args.steps,
        "batch_size": args.batch,
        "crop": dataset.crop,
        "lr": args.lr,
        "lr_schedule": args.schedule,
        "ema": args.ema,
        "grad_clip": 1.0,
        "seed": args.seed,
        "noise": _noise_name(args),
        "source": info["source"],
        "recipe": "scripts/train_noise_aware.py",
        "train_photos": [n for n, _ in photos],
        "task_options": {k: list(v) if isinstance(v, tuple) else v for k, v in task_options.items()},
        "zoom": list(zoom) if zoom else None,
        "hard": list(hard) if hard else None,
        "told": list(told) if told else None,
        "behind": args.behind,
        "widen": args.widen,
        "deepen": args.deepen,
        "distill_tta": args.distill_tta or None,
        "model": dict(model.config),
        "save_every": args.save_every,
        "keep_every": 0,
        "log_every": 50,
        "resume": resume,
        "progress": sys.stderr.isatty(),
    }
    torch.manual_seed(args.seed)
    balance = balance_for(args.loss)
    options = {"balance": balance} if balance else {}
    if args.distill_tta > 0:
        options.update(teacher=ensemble_teacher(model), teacher_weight=args.distill_tta)
    method = partial(supervised, **options) if options else supervised
    Trainer(model, method, dataset, run_dir, cfg).fit()
    return run_dir


def _stage(run_dir: Path) -> dict:
    """What one training stage was: its settings from the run's config.json (no machine paths)."""
    cfg = json.loads((run_dir / "config.json").read_text())
    keep = (
        "task",
        "steps",
        "batch_size",
        "crop",
        "lr",
        "lr_schedule",
        "ema",
        "grad_clip",
        "seed",
        "noise",
        "zoom",
        "hard",
        "told",
        "loss",
        "distill_tta",
    )
    stage = {k: cfg.get(k) for k in keep if k != "distill_tta" or cfg.get(k)}
    behind = _spec_name(cfg.get("behind"))
    stage.update(task_options=cfg.get("task_options"), model=cfg.get("model"), behind=behind)
    stage["init"] = "scratch" if cfg.get("source") == "scratch" else "the previous stage's EMA weights"
    if cfg.get("widen"):
        stage["init"] += f", widened to width {cfg['widen']} (rawrcl.models.widen, same function)"
    if cfg.get("deepen"):
        blocks = cfg["deepen"]
        stage["init"] += f", {blocks} top-level residual blocks added (models.widen.deepen, same function)"
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    if lines:  # a stage may be stopped early (SIGTERM saves last.pt): record where it ended
        stage["steps_done"] = json.loads(lines[-1]).get("step")
    return stage


def _recorded_stages(entry: Path, prov: dict) -> list[dict]:
    """The stages an installed checkpoint file (e.g. a copy of a shipped default) stands for, from its
    provenance ``prov``."""
    if not prov.get("stages"):
        raise SystemExit(f"{entry}: not a run directory, nor a checkpoint that records its stages")
    return prov["stages"]


def _provenance(entry: Path) -> dict:
    """The provenance recorded in a checkpoint file ({} when it has none)."""
    import torch

    return torch.load(entry, map_location="cpu", weights_only=True).get("extra", {}).get("provenance") or {}


def _weights(entry: Path):
    """(config, EMA state as float32, provenance) of a run's last checkpoint (provenance None) or of a
    checkpoint file (its recorded provenance, {} when it has none)."""
    import torch

    path = entry / "checkpoints" / "last.pt" if entry.is_dir() else entry
    raw = torch.load(path, map_location="cpu", weights_only=True)
    prov = None if entry.is_dir() else raw.get("extra", {}).get("provenance") or {}
    state = {k: v.float() if v.is_floating_point() else v for k, v in raw["state_dict"].items()}
    return raw["config"], state, prov


def _spec_name(spec: str | None) -> str | None:
    """A ``--behind``/``--two-stage`` value as provenance records it: the names ``default`` and
    ``jdd-default`` as given, a checkpoint path by its file name only (no machine paths in shipped files)."""
    return spec if spec in (None, "default", "jdd-default") else Path(spec).name


def first_stage_denoiser(spec: str):
    """(frozen RAW denoiser in eval mode, provenance record) that ``spec`` names: ``"default"`` the shipped
    RAW denoiser, ``"jdd-default"`` the first stage of the shipped JDD file (a JDD stage continued behind
    the denoiser it ships with), else a checkpoint file or run directory."""
    from rawrcl.models.compose import DenoiseThenDemosaic, first_stage
    from rawrcl.models.loading import default_weights_path, load_for_task

    if spec == "jdd-default":
        jdd, _ = load_for_task(None, "jdd")
        if not isinstance(jdd, DenoiseThenDemosaic):
            raise SystemExit("--behind/--two-stage jdd-default: the shipped JDD file has no first stage")
        rec = _provenance(default_weights_path("jdd")).get("two_stage", {}).get("first_stage", {})
        return jdd.denoiser, {**rec, "weights": "the first stage of rawrcl/weights/jdd_default.pt"}
    src = None if spec == "default" else spec
    den, _ = load_for_task(src, "raw-denoise")
    den = first_stage(den)  # the shipped RAW default is the CFA-site blend of a two-stage model
    path = default_weights_path("raw-denoise") if src is None else Path(spec)
    prov = _provenance(path) if path.is_file() else {}
    name = "rawrcl/weights/raw_denoise_default.pt" if src is None else path.name
    return den, {"weights": name, **prov}


def install(
    run_dirs: list[Path],
    task: str,
    two_stage: str | bool | None = None,
    average_with: Path | None = None,
    blend: float | None = None,
    blend_sigma: float = 0.0,
) -> Path:
    """Install the last stage's EMA weights (float16) as the task's shipped default, with the provenance
    of every stage (``run_dirs``: first → last; an entry may be an installed checkpoint file, which stands
    for the stages it records). ``two_stage`` (jdd): the network becomes the second stage behind the RAW
    denoiser it names (:func:`first_stage_denoiser`; ``True``: the shipped one), told λ × ``RESIDUAL`` (one
    checkpoint of arch ``two_stage``). ``average_with``:
    a run trained from the last entry; the installed weights are the half/half average of the two (a
    weight average of two points of one basin, as the EMA is of one run) and its stage is recorded with
    ``"averaged": 0.5``. ``blend`` (raw-denoise): the last entry is a two-stage JDD checkpoint, installed
    with output ``"raw"`` (the CFA-site blend of weight ``blend``, gated by ``blend_sigma``) as the RAW
    default."""
    from rawrcl.models.compose import RESIDUAL, DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    config, state, last_prov = _weights(run_dirs[-1])
    if average_with is not None:
        other_config, other, _ = _weights(average_with)
        if other_config != config or other.keys() != state.keys():
            raise SystemExit(f"--average-with {average_with}: not the architecture of {run_dirs[-1]}")
        state = {k: (v + other[k]) / 2 if v.is_floating_point() else v for k, v in state.items()}
    if blend is not None:
        return _install_blend(run_dirs[-1], task, config, state, last_prov, blend, blend_sigma)
    trained_behind = config.get("arch") == "two_stage"  # trained --behind a denoiser: already both stages
    if trained_behind and last_prov is not None and not two_stage:
        raise SystemExit(f"{run_dirs[-1]}: a two-stage checkpoint file is installed with --two-stage")
    behind = None
    if trained_behind and last_prov is None:
        behind = json.loads((run_dirs[-1] / "config.json").read_text()).get("behind")
    behind_name = _spec_name(behind)
    if two_stage is True:
        two_stage = "default"
    first_stage = den = None
    # the denoiser a cascade run trained behind (its frozen first stage), to compare with the one installed
    frozen = {k[len("denoiser.") :]: v for k, v in state.items() if k.startswith("denoiser.")}
    if trained_behind or two_stage:
        from rawrcl.errors import RawrclError

        try:
            den, first_stage = first_stage_denoiser(two_stage or behind or "default")
        except (RawrclError, OSError) as exc:
            if two_stage:
                raise SystemExit(f"--two-stage {two_stage}: {exc}") from None
            den, first_stage = None, {}  # the denoiser trained behind is gone: its weights are in the run
    if two_stage:  # the JDD network goes behind the named denoiser, in DenoiseThenDemosaic's layout
        if task != "jdd":
            raise SystemExit("--two-stage installs a JDD network behind the RAW denoiser: use --task jdd")
        if trained_behind:  # re-seat a cascade-trained JDD stage behind the denoiser shipped now
            trained = build_model(config)
            trained.load_state_dict(state)
            config, state = trained.demosaicker.config, trained.demosaicker.state_dict()
            if last_prov is not None:  # a shipped two-stage file: its JDD stage's history goes with it
                earlier = last_prov.get("two_stage", {}).get("first_stage", {}).get("note") or ""
                notes = [n for n in earlier.split("; ") if n and n != RESEATED_UNDATED]
                first_stage["note"] = "; ".join([*notes, f"re-seated behind this one on {dt.date.today()}"])
            elif _same_weights(frozen, den):
                first_stage["note"] = (
                    f"the JDD stage was last trained behind this one (--behind {behind_name}; "
                    "each stage records its own)"
                )
            else:
                first_stage["note"] = (
                    f"the JDD stage was trained behind the denoiser of --behind {behind_name} at its "
                    "training date and re-seated behind this one"
                )
        model = DenoiseThenDemosaic(den, build_model(config), RESIDUAL)
        model.demosaicker.load_state_dict(state)
        config, state = model.config, model.state_dict()
    elif trained_behind:
        if _same_weights(frozen, den):
            was = first_stage["weights"]
            first_stage["weights"] = f"frozen during training (--behind {behind_name}: {was})"
        else:  # changed since the training: only its name is known here
            first_stage = {"weights": f"frozen during training (--behind {behind_name}; since changed)"}
    # each checkpoint-file entry is read once (the last one above, with its weights)
    provs = {d: _provenance(d) for d in run_dirs[:-1] if not d.is_dir()}
    if last_prov is not None:
        provs[run_dirs[-1]] = last_prov
    stages = [st for d in run_dirs for st in (_recorded_stages(d, provs[d]) if d in provs else [_stage(d)])]
    if average_with is not None:
        stages.append({**_stage(average_with), "averaged": 0.5})
    if run_dirs[0] in provs:
        photos = provs[run_dirs[0]].get("train_photos")
    else:
        photos = json.loads((run_dirs[0] / "config.json").read_text()).get("train_photos")
    prov = {
        "recipe": "scripts/train_noise_aware.py",
        "commit": _commit(),
        "date": dt.date.today().isoformat(),
        "stages": stages,
        "train_photos": photos,
        "held_out": ["cbsd68[58:]", "urban100[90:]", "sunhays80 (all)"],
    }
    if first_stage is not None:
        prov = {"two_stage": {"residual": RESIDUAL, "first_stage": first_stage}, **prov}
    return _write_default(task, config, state, prov)


#: the undated note earlier installs appended at each re-seat of a shipped two-stage file (dropped next time)
RESEATED_UNDATED = "re-seated again behind this one"


def _same_weights(frozen: dict, den) -> bool:
    """Whether the first stage a JDD stage was trained behind (``frozen``: its state dict) is ``den`` (up to
    the float16 rounding of installed weights)."""
    import torch

    state = den.state_dict() if den is not None else {}
    return (
        bool(state)
        and frozen.keys() == state.keys()
        and all(torch.allclose(frozen[k].float(), v.float(), atol=1e-3) for k, v in state.items())
    )


def _commit() -> str:
    """The repository's HEAD commit (for the provenance)."""
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


def _write_default(task: str, config: dict, state: dict, prov: dict) -> Path:
    """Write ``config``, ``state`` as float16 and the provenance ``prov`` as the task's shipped default
    (``rawrcl/weights/``, atomically)."""
    from rawrcl.models.registry import atomic_torch_save
    from rawrcl.tasks import get_task

    extra = {"provenance": prov, "weights_dtype": "float16"}
    state = {k: (v.half() if v.is_floating_point() else v) for k, v in state.items()}
    dst = REPO / "rawrcl" / "weights" / get_task(task).default_weights
    atomic_torch_save({"config": config, "state_dict": state, "extra": extra}, dst)
    print(f"installed {dst} ({dst.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    return dst


def _install_blend(
    entry: Path, task: str, config: dict, state: dict, prov: dict | None, blend: float, sigma: float
) -> Path:
    """Install the two-stage JDD checkpoint ``entry`` (its weights ``state``) as the RAW default, output
    ``"raw"`` with CFA-site blend ``blend`` gated by ``sigma`` (the same weights, another config); its
    provenance goes with it, plus the blend record."""
    from rawrcl.errors import RawrclError
    from rawrcl.models.registry import model_config

    if task != "raw-denoise":
        raise SystemExit("--blend installs the RAW denoiser: use --task raw-denoise")
    if config.get("arch") != "two_stage" or not config.get("demosaicker"):
        raise SystemExit(f"{entry}: --blend needs a two-stage checkpoint with a JDD network")
    try:
        config = model_config({**config, "head": "raw", "blend": blend, "blend_sigma": sigma})
    except RawrclError as exc:
        raise SystemExit(f"--blend {blend} --blend-sigma {sigma}: {exc}") from None
    record = {
        "blend": blend,
        "blend_sigma": sigma,
        "from": entry.name if entry.is_file() else str(entry),
        "commit": _commit(),
        "date": dt.date.today().isoformat(),
    }
    return _write_default(task, config, state, {"cfa_blend": record, **(prov or {})})


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.install_only:
        avg = Path(args.average_with) if args.average_with else None
        install(
            [Path(d) for d in args.install_only], args.task, args.two_stage, avg, args.blend, args.blend_sigma
        )
        return
    if args.blend is not None:
        raise SystemExit("--blend installs a blend of a shipped two-stage file: use it with --install-only")
    if args.average_with:
        raise SystemExit("--average-with installs an average: use it with --install-only")
    run_dir = train_task(args)
    if args.install:
        init = Path(args.init) if args.init else None
        stages = [init.parents[1]] if init is not None and init.parent.name == "checkpoints" else []
        install([*stages, run_dir], args.task, args.two_stage)


if __name__ == "__main__":
    from rawrcl.errors import RawrclError

    try:
        main()
    except RawrclError as exc:  # e.g. a SIGTERM'd run (TrainingInterrupted): one line, resumable, exit 130
        print(f"train_noise_aware: {exc}", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 1))
