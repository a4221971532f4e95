"""``rawrcl eval MODEL --task T --clean-dir DIR`` (synthetic noise on clean photos) and ``rawrcl eval MODEL
--burst DIR`` (a real burst of one static scene): PSNR/SSIM of a checkpoint or a classical baseline."""

from __future__ import annotations

import json

import click
from rawrcl.cli.common import NOISE_SYNTHETIC_HELP, fuse_bm3d_option, user_errors


@click.command("eval")
@click.argument("model")
@click.option(
    "--task", "task", default=None, help="denoise | sr | jdensr | raw-denoise | jdd | jdemsr | jddsr"
)
@click.option("--clean-dir", type=click.Path(), help="folder of clean photos (ground truth)")
@click.option(
    "--burst",
    type=click.Path(),
    default=None,
    help="folder of RAW frames of one static scene: score MODEL on the target frame against the registered "
    "mean of the others (CFA-domain PSNR/SSIM, ceiling, burst NLF beside the single-image estimate); a frame "
    "is left out of that mean where it moved, or whole when it does not register.",
)
@click.option("--target", default=None, help="--burst: the target frame (file name or stem; default: first)")
@click.option(
    "--noise",
    default=None,
    help=NOISE_SYNTHETIC_HELP + "  [default: paper]  With --burst, what noise-aware models and baselines are "
    "told: auto (default: NoiseProfile, else the single-image estimate) | metadata | image | burst (the "
    "burst's measured NLF) | λshot,λread | PROFILE.json[:ISO].",
)
@click.option("--noise-profile", default=None, help="--burst: noise profile consulted by --noise auto.")
@click.option(
    "--noise-scale",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    help="--burst: multiply the λ the method is told.",
)
@click.option(
    "--gharbi-weights",
    type=click.Path(),
    default=None,
    help="folder of Gharbi et al. 2016's released weights (baseline gharbi2016; never shipped).",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="test-set seed (same inputs for every model)"
)
@click.option("--limit", default=None, type=int, help="evaluate on the first N photos only")
@click.option("--unprocess", is_flag=True, help="RAW tasks: unprocess photos to linear camera RGB first")
@click.option("--device", default="cpu", show_default=True)
@click.option(
    "--json",
    "json_out",
    is_flag=False,
    flag_value="-",
    default=None,
    metavar="[PATH]",
    help="print a JSON object (or write it to PATH)",
)
@click.option("--plot", default=None, help="--burst: write a side-by-side PNG (noisy, MODEL, reference)")
@click.option("--force", is_flag=True, help="overwrite --json PATH / --plot")
@click.option("--per-image", is_flag=True, help="include per-image values (with --json)")
@click.option(
    "--tta", is_flag=True, help="self-ensemble: average the model over 8 flips/transposes (8x slower)"
)
@click.option(
    "--two-pass/--one-pass",
    default=None,
    help="two-stage models: each stage also on the transposed mosaic, averaged (RAW output: the first stage "
    "only); about 1.25x the time (RAW), 1.75x (JDD). Default: as the commands run, the first stage (and "
    "a JDD stage) twice up to std at mid-grey 0.053 (the JDD stage up to 0.021), four times at <= 0.008; "
    "--one-pass never",
)
@fuse_bm3d_option(
    "--burst: average a RAW denoiser's output (two-stage JDD: the mid mosaic)", "0.3 / 0.5", adapted=True
)
@click.option(
    "--shrink/--no-shrink",
    default=None,
    help="--burst: SURE weights of the model's output(s) and the input, as denoise/jdd --shrink (default: "
    "as the commands run it, on for RAW denoising, off for JDD).",
)
@user_errors
def evaluate(
    model,
    task,
    clean_dir,
    burst,
    target,
    noise,
    noise_profile,
    noise_scale,
    gharbi_weights,
    seed,
    limit,
    unprocess,
    device,
    json_out,
    plot,
    force,
    per_image,
    tta,
    two_pass,
    fuse,
    shrink,
):
    """Evaluate MODEL (a checkpoint / run dir, or a baseline: noisy, bilinear, malvar, menon, vng, ea,
    menon+nlm, nlm, gat+bm3d, gat+bm3d+menon, gat+bm3d+dht, gharbi2016, libraw-ahd, libraw-aahd, libraw-dht,
    libraw-dht+fbdd, bicubic) on TASK with synthetic noise on --clean-dir, or on a real --burst (MODEL: a
    checkpoint, default, noisy, gat+bm3d, nlm, gharbi2016 or a libraw-* demosaicing). Synthetic: PSNR/SSIM
    scikit-image conventions on 8-bit sRGB with an 8-pixel border crop (paper App. C.3); RAW tasks also
    report linear-domain PSNR; noise-aware models and baselines are given the true noise. A RAW denoiser
    checkpoint (head 'raw') on --task jdd runs in front of the JDD stage it holds (the RAW default, a run
    adapted from it, a blind-spot composite beside it), else as denoise → bilinear demosaic."""
    from pathlib import Path

    from rawrcl.errors import RawrclError

    if json_out not in (None, "-") and Path(json_out).exists() and not force:  # before minutes of work
        raise RawrclError(f"{json_out}: exists (use --force to overwrite)")
    if burst is not None:
        if clean_dir is not None:
            raise RawrclError("--burst and --clean-dir are two kinds of evaluation: give one")
        from rawrcl.eval.burst_eval import evaluate_burst
        from rawrcl.infer import TileOptions

        doc = evaluate_burst(  # progress and the report on stderr/stdout
            model,
            burst,
            target=target,
            task=task,
            noise=noise,
            noise_profile=noise_profile,
            noise_scale=noise_scale,
            gharbi_weights=gharbi_weights,
            opts=TileOptions(device=device, self_ensemble=tta, two_pass=two_pass),
            plot=plot,
            overwrite=force,
            log=lambda s: click.echo("  " + s, err=True),
            fuse=fuse,
            shrink=shrink,
        )
    else:
        if task is None or clean_dir is None:
            raise RawrclError("give --task and --clean-dir (synthetic noise), or --burst DIR (a real burst)")
        if plot is not None or target is not None or fuse or shrink is not None:
            raise RawrclError("--plot, --target, --fuse-bm3d and --shrink apply to --burst only")
        from rawrcl.eval import evaluate as _evaluate

        doc = _evaluate(
            model,
            task,
            clean_dir,
            noise,
            seed,
            limit=limit,
            unprocess=unprocess or None,
            device=device,
            self_ensemble=tta,
            gharbi_weights=gharbi_weights,
            two_pass=two_pass,
        )
        if not per_image:
            doc.pop("per_image", None)
    if json_out is not None and json_out != "-":
        from rawrcl.io import atomic_write_bytes

        if Path(json_out).exists() and not force:  # made meanwhile
            raise RawrclError(f"{json_out}: exists (use --force to overwrite)")
        atomic_write_bytes(json_out, json.dumps(doc, indent=2).encode())
    if burst is not None:
        from rawrcl.eval.burst_eval import format_report

        for line in format_report(doc):
            click.echo(line, err=json_out == "-")
    if json_out == "-":
        click.echo(json.dumps(doc, indent=2))
        return
    if burst is not None:
        return
    line = f"{doc['model']} on {doc['task']} (noise {doc['noise']}, seed {doc['seed']}, "
    line += f"{doc['n_images']} images): "
    line += f"PSNR {doc['psnr']:.2f} dB  SSIM {doc['ssim']:.4f}"
    if "psnr_linear" in doc:
        line += f"  linear PSNR {doc['psnr_linear']:.2f} dB"
    click.echo(line)
