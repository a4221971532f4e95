"""``rawrcl finetune CKPT --task T --clean-dir DIR --labels N --protocol linear|full --steps S --out RUN``."""

from __future__ import annotations

import json

import click
from rawrcl.cli.common import (
    DEMOSAIC_CHOICE,
    NOISE_SYNTHETIC_HELP,
    LazyChoice,
    ema_option,
    train_precision_option,
    user_errors,
)


@click.command("finetune")
@click.argument("ckpt")
@click.option(
    "--task", "task", required=True, help="denoise | sr | jdensr | raw-denoise | jdd | jdemsr | jddsr"
)
@click.option("--clean-dir", required=True, type=click.Path(), help="folder of clean photos (labels)")
@click.option("--labels", default="10", show_default=True, help="number of labelled photos, or 'all'")
@click.option(
    "--protocol",
    type=LazyChoice("rawrcl.train.finetuning:FINETUNE_PROTOCOLS"),
    default="full",
    show_default=True,
    help="linear: freeze all but a fresh task head (paper's proxy protocol); full: all weights",
)
@click.option("--steps", default=400, show_default=True, type=int)
@click.option("--out", required=True, type=click.Path(), help="run directory to create")
@click.option("--arch", default="unet", show_default=True, help="with CKPT=scratch: unet | dncnn")
@click.option("--width", default=None, type=int, help="with CKPT=scratch: body width")
@click.option("--depth", default=None, type=int, help="with CKPT=scratch: body depth")
@click.option(
    "--skip/--no-skip",
    default=True,
    show_default=True,
    help="with CKPT=scratch (U-Net): learn a correction of a fixed classical estimate (bilinear demosaic "
    "for jdd, identity for denoising); --no-skip: plain U-Net",
)
@click.option(
    "--demosaic",
    type=DEMOSAIC_CHOICE,
    default="bilinear",
    show_default=True,
    help="with CKPT=scratch, jdd: the demosaic in the skip (malvar = Malvar-He-Cutler).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="label choice, init and crop sampling")
@click.option("--batch-size", default=8, show_default=True, type=int)
@click.option("--crop", default=64, show_default=True, type=int, help="crop side in clean-photo pixels")
@click.option("--lr", default=1e-3, show_default=True, type=float)
@click.option("--noise", default=None, help=NOISE_SYNTHETIC_HELP + "  [default: paper]")
@click.option("--unprocess", is_flag=True, help="RAW tasks: unprocess photos to linear camera RGB first")
@click.option(
    "--augment", is_flag=True, help="random flips/rotations of the clean crops (off: the paper's protocol)"
)
@click.option(
    "--zoom",
    default=None,
    metavar="P:MAX",
    help="a share P of the crops is a smaller window enlarged by a factor log-uniform in [1, MAX] "
    "(full-resolution-like smoothness; the shipped RAW denoiser used 0.8:8)",
)
@click.option(
    "--cast",
    default=None,
    metavar="P:MAX",
    help="RAW tasks: a share P of the crops gets an illuminant colour cast, red and blue × a factor "
    "log-uniform in [1/MAX, MAX] (the shipped RAW denoiser's last stage used 0.5:4)",
)
@click.option(
    "--grad-clip",
    default=1.0,
    show_default=True,
    type=float,
    help="cap on the global gradient norm (catches loss spikes; 0 disables)",
)
@click.option(
    "--loss",
    default=None,
    metavar="NAME",
    help="training loss [default: l1]: l1, l1-noise-balanced, l1-crop-balanced, log-mse or rmse; "
    "l1-noise-balanced weights each crop's L1 by 1/(σ + 2/255), σ its "
    "noise std at 0.5 ([0,1] units); l1-crop-balanced by its own noise level; log-mse maximises the mean "
    "per-crop PSNR; rmse is the mean per-crop RMS error (the shipped RAW denoiser's last stage)",
)
@click.option("--balance-noise", is_flag=True, help="the same as --loss l1-noise-balanced")
@ema_option
@click.option("--device", default=None)
@train_precision_option
@click.option("--force", is_flag=True, help="overwrite an existing run directory")
@click.option("--json", "as_json", is_flag=True)
@user_errors
def finetune(
    ckpt,
    task,
    clean_dir,
    labels,
    protocol,
    steps,
    out,
    arch,
    width,
    depth,
    skip,
    demosaic,
    seed,
    batch_size,
    crop,
    lr,
    noise,
    unprocess,
    augment,
    zoom,
    cast,
    grad_clip,
    loss,
    balance_noise,
    ema,
    device,
    precision,
    force,
    as_json,
):
    """Fine-tune checkpoint CKPT (or 'scratch' = supervised learning from scratch, the paper's SL) on N
    labelled photos (L1 loss unless --loss); writes RUN/checkpoints/last.pt and RUN/finetune.json."""
    from rawrcl.errors import RawrclError
    from rawrcl.train.finetuning import finetune as _finetune

    if labels != "all":
        try:
            labels = int(labels)
        except ValueError:
            raise RawrclError(f"--labels {labels!r}: expected an integer or 'all'") from None
    zoom = _share_max("--zoom", zoom, "0.8:8")
    cast = _share_max("--cast", cast, "0.5:4")
    res = _finetune(
        ckpt,
        task,
        clean_dir,
        out,
        labels=labels,
        protocol=protocol,
        steps=steps,
        arch=arch,
        width=width,
        depth=depth,
        skip=skip,
        demosaic=demosaic,
        seed=seed,
        batch_size=batch_size,
        crop=crop,
        lr=lr,
        noise=noise,
        unprocess=unprocess or None,
        device=device,
        precision=precision,
        force=force,
        progress=False if as_json else None,
        augment=augment,
        zoom=zoom,
        cast=cast,
        grad_clip=grad_clip or None,
        ema=ema,
        balance_noise=balance_noise,
        loss=loss,
    )
    if as_json:
        click.echo(json.dumps(res, indent=2))
    else:
        click.echo(
            f"fine-tuned {res['source']} ({res['protocol']}, {res['n_labels']} labels, {res['steps']} steps)"
            f" → {res['checkpoint']}"
        )


def _share_max(option: str, text: str | None, example: str) -> tuple[float, float] | None:
    """``P:MAX`` → (P, MAX) (range checks are the library's), None → None; a clear error otherwise."""
    from rawrcl.errors import RawrclError

    if text is None:
        return None
    try:
        p, top = (float(v) for v in text.split(":"))
    except ValueError:
        raise RawrclError(f"{option} {text!r}: expected P:MAX, e.g. {example}") from None
    return p, top
