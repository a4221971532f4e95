"""``rawrcl pretrain``: self-supervised pre-training on a folder of RAW files (or photos)."""

from __future__ import annotations

import json
import os
import shlex
import sys

import click
from rawrcl.cli.common import (
    DEMOSAIC_CHOICE,
    NOISE_SYNTHETIC_HELP,
    LazyChoice,
    deprecated,
    ema_option,
    train_precision_option,
    user_errors,
)


@click.command("pretrain")
@click.argument("data_dir", type=click.Path(file_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Run directory to write.")
@click.option(
    "--task",
    type=LazyChoice("rawrcl.tasks:PRETEXT_TASKS"),
    default="jdd",
    show_default=True,
    help="Downstream task: RAW tasks read RAW files, RGB tasks photos.",
)
@click.option(
    "--method",
    type=LazyChoice("rawrcl.methods:PRETEXT_METHODS"),
    default="rcl",
    show_default=True,
    help="Pretext method (simclr trains the perceptual encoder for --encoder).",
)
@click.option(
    "--distance",
    type=LazyChoice("rawrcl.losses.pairwise:DISTANCES", exclude=("bhattacharyya",)),
    default="emd",
    show_default=True,
)
@click.option(
    "--arch",
    type=LazyChoice("rawrcl.models:ARCHS", exclude=("encoder",)),
    default="unet",
    show_default=True,
)
@click.option("--width", type=int, default=None, help="Body width (U-Net default 32, DnCNN 64).")
@click.option("--depth", type=int, default=None, help="U-Net levels (default 3) / DnCNN layers (16).")
@click.option(
    "--skip/--no-skip",
    default=True,
    show_default=True,
    help="U-Net: learn a correction added to a fixed classical estimate (identity for RAW/RGB, "
    "bilinear demosaic for JDD); --no-skip is the plain U-Net of the paper.",
)
@click.option(
    "--demosaic",
    type=DEMOSAIC_CHOICE,
    default="bilinear",
    show_default=True,
    help="JDD: the demosaic in the skip (malvar = Malvar-He-Cutler, sharper on fine texture).",
)
@click.option("--steps", type=int, default=1000, show_default=True)
@click.option("--batch-size", type=int, default=64, show_default=True, help="Pairs per step (per rank).")
@click.option(
    "--crop", type=int, default=128, show_default=True, help="Crop side in file pixels (CFA pixels for RAW)."
)
@click.option(
    "--pair-overlap",
    "overlap",
    type=float,
    default=0.5,
    show_default=True,
    help="Area fraction shared by the two crops of a positive pair.",
)
@click.option("--overlap", "old_overlap", type=float, default=None, hidden=True)
@click.option(
    "--augment/--no-augment", default=False, help="Phase-correct random flips/rot90 (off as in the paper)."
)
@click.option("--lr", type=float, default=1e-3, show_default=True)
@click.option(
    "--grad-clip",
    type=float,
    default=None,
    help="cap on the global gradient norm (default: none; the norm is logged in metrics.jsonl)",
)
@ema_option
@click.option(
    "--alpha", type=float, default=1e-3, show_default=True, help="Weight of the contrastive term (rcl)."
)
@click.option("--tau", type=float, default=None, help="Contrastive temperature (default of rawrcl.losses).")
@click.option(
    "--normalize",
    type=LazyChoice("rawrcl.losses.contrastive:NORMALIZATIONS"),
    default="none",
    show_default=True,
    help="Residual normalisation before the distance (rcl; none = paper).",
)
@click.option(
    "--center/--no-center",
    default=True,
    show_default=True,
    help="Subtract each residual's per-channel mean before the distance (rcl; --no-center = paper form).",
)
@click.option(
    "--encoder", default=None, help="Perceptual encoder for RGB rcl: auto | imagenet | none | CKPT."
)
@click.option("--synthetic", is_flag=True, help="RAW tasks on photos: simulate mosaic + noise.")
@click.option("--noise", default="paper", show_default=True, help=NOISE_SYNTHETIC_HELP)
@click.option("--noise-profile", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.option(
    "--cache-dir",
    default=None,
    help="Decoded-RAW cache folder ('none' = memory only) [default: packed/ in $RAWRCL_CACHE_DIR, "
    "$XDG_CACHE_HOME/rawrcl or ~/.cache/rawrcl].",
)
@click.option("--device", default="auto", show_default=True)
@train_precision_option
@click.option("--amp", type=click.Choice(["auto", "bf16", "fp16", "off"]), default=None, hidden=True)
@click.option("--compile/--no-compile", "compile_", default=False, help="torch.compile the model.")
@click.option(
    "--workers", type=int, default=None, help="DataLoader workers (default 0 on CPU, up to 8 on CUDA)."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--log-every", type=int, default=10, show_default=True)
@click.option("--save-every", type=int, default=100, show_default=True)
@click.option("--resume", is_flag=True, help="Continue the run in --out from checkpoints/last.pt.")
@click.option("--force", is_flag=True, help="Overwrite an existing run in --out.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@user_errors
def pretrain(
    data_dir,
    out,
    task,
    method,
    distance,
    arch,
    width,
    depth,
    skip,
    demosaic,
    steps,
    batch_size,
    crop,
    overlap,
    old_overlap,
    augment,
    lr,
    grad_clip,
    ema,
    alpha,
    tau,
    normalize,
    center,
    encoder,
    synthetic,
    noise,
    noise_profile,
    cache_dir,
    device,
    precision,
    amp,
    compile_,
    workers,
    seed,
    log_every,
    save_every,
    resume,
    force,
    as_json,
):
    """Self-supervised pre-training of a U-Net/DnCNN on DATA_DIR (no clean images needed).

    DATA_DIR holds RAW/DNG files for --task jdd / raw-denoise, photos for denoise / sr / jdensr. Works under
    `torchrun --nproc_per_node N -m rawrcl.cli pretrain ...` (DDP; --batch-size is per rank).
    """
    from rawrcl.train.config import DataConfig, ModelConfig, PretrainConfig, TrainingConfig
    from rawrcl.train.pretraining import run_pretrain

    if old_overlap is not None:
        deprecated("--overlap (pair area fraction)", "--pair-overlap")
        overlap = old_overlap
    if amp is not None:
        deprecated("--amp", "--precision (off is fp32)")
        precision = "fp32" if amp == "off" else amp
    if noise_profile:
        deprecated("--noise-profile FILE", "--noise FILE")
        noise = noise_profile
    method_options: dict = {}
    if method == "rcl":
        method_options = {
            "distance": distance,
            "tau": tau,
            "alpha": alpha,
            "normalize": normalize,
            "center": center,
            "encoder": encoder,
        }
    config = PretrainConfig(
        data_dir=data_dir,
        out=out,
        task=task,
        method=method,
        method_options=method_options,
        model=ModelConfig(arch=arch, width=width, depth=depth, skip=skip, demosaic=demosaic),
        data=DataConfig(
            crop=crop,
            overlap=overlap,
            augment=augment,
            synthetic=synthetic,
            noise=noise,
            cache_dir=cache_dir or "auto",
        ),
        training=TrainingConfig(
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            grad_clip=grad_clip or None,
            ema=ema,
            seed=seed,
            device=device,
            precision=precision,
            compile=compile_,
            num_workers=workers,
            log_every=log_every,
            save_every=save_every,
        ),
        resume=resume,
        force=force,
    )
    summary = run_pretrain(config, command=shlex.join(["rawrcl", *sys.argv[1:]]))
    if int(os.environ.get("RANK", "0")) != 0:
        return
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"{summary['run_dir']}: steps {summary['start_step']}→{summary['steps']}, "
            f"loss {summary['first_loss']:.4g}"
            f" → {summary['last_loss']:.4g}, {summary['patches_per_s']:.1f} patches/s on {summary['device']}"
            if summary["first_loss"] is not None
            else f"{summary['run_dir']}: nothing to do (already at step {summary['steps']})"
        )
