"""``rawrcl eval MODEL --task T --clean-dir DIR``: PSNR/SSIM of a checkpoint or a classical baseline."""

from __future__ import annotations

import json

import click
from rawrcl.cli.common import NOISE_SYNTHETIC_HELP, user_errors


@click.command("eval")
@click.argument("model")
@click.option(
    "--task", "task", required=True, help="denoise | sr | jdensr | raw-denoise | jdd | jdemsr | jddsr"
)
@click.option("--clean-dir", required=True, type=click.Path(), help="folder of clean photos (ground truth)")
@click.option("--noise", default=None, help=NOISE_SYNTHETIC_HELP + "  [default: paper]")
@click.option(
    "--seed", default=0, show_default=True, type=int, help="test-set seed (same inputs for every model)"
)
@click.option("--limit", default=None, type=int, help="evaluate on the first N photos only")
@click.option("--unprocess", is_flag=True, help="RAW tasks: unprocess photos to linear camera RGB first")
@click.option("--device", default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print a JSON object")
@click.option("--per-image", is_flag=True, help="include per-image values (with --json)")
@click.option(
    "--tta", is_flag=True, help="self-ensemble: average the model over 8 flips/transposes (8x slower)"
)
@user_errors
def evaluate(model, task, clean_dir, noise, seed, limit, unprocess, device, as_json, per_image, tta):
    """Evaluate MODEL (a checkpoint / run dir, or a baseline: noisy, bilinear, malvar, menon, vng, ea,
    menon+nlm, nlm, bicubic, demosaicnet) on TASK. PSNR/SSIM: scikit-image defaults on 8-bit sRGB with an
    8-pixel border crop (paper App. C.3); RAW tasks also report linear-domain PSNR. A RAW denoiser
    checkpoint (head 'raw') on --task jdd is scored as denoise → bilinear demosaic."""
    from rawrcl.eval import evaluate as _evaluate

    res = _evaluate(
        model,
        task,
        clean_dir,
        noise,
        seed,
        limit=limit,
        unprocess=unprocess or None,
        device=device,
        self_ensemble=tta,
    )
    if not per_image:
        res.pop("per_image", None)
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    line = f"{res['model']} on {res['task']} (noise {res['noise']}, seed {res['seed']}, "
    line += f"{res['n_images']} images): "
    line += f"PSNR {res['psnr']:.2f} dB  SSIM {res['ssim']:.4f}"
    if "psnr_linear" in res:
        line += f"  linear PSNR {res['psnr_linear']:.2f} dB"
    click.echo(line)
