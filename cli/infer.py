"""``rawrcl jdd`` and ``rawrcl denoise``: full-size tiled inference on camera files.

The algorithm lives in :mod:`rawrcl.infer`; this module only parses options."""

from __future__ import annotations

import sys

import click
from rawrcl.cli.common import fuse_bm3d_option, user_errors


def _tile_options(func):
    opts = [
        click.option(
            "--tile",
            type=int,
            default=768,
            show_default=True,
            help="Tile side in model-input pixels (packed pixels for RAW: 768 covers 1536² sensor pixels).",
        ),
        click.option(
            "--overlap",
            type=int,
            default=32,
            show_default=True,
            help="Pixels shared by neighbouring tiles (model-input pixels); larger = closer to whole-image.",
        ),
        click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N."),
        click.option(
            "--batch-tiles",
            type=int,
            default=1,
            show_default=True,
            help="Tiles per forward pass (more can help a GPU; memory grows with it).",
        ),
        click.option(
            "--precision",
            type=click.Choice(["auto", "fp32", "bf16", "fp16"]),
            default="auto",
            show_default=True,
            help="Autocast precision; auto = bf16 on CUDA and on CPUs with native bf16, else fp32.",
        ),
        click.option(
            "--backend",
            type=click.Choice(["torch", "onnxruntime"]),
            default=None,
            help="Inference engine (same tiler): torch, or onnxruntime (fp32, CPU; needs rawrcl[onnx]; a "
            "checkpoint is exported once and cached). Default: torch, onnxruntime for a .onnx --model.",
        ),
        click.option(
            "--tta",
            is_flag=True,
            help="Self-ensemble: average the model over 8 flips/transposes (Bayer phase kept); "
            "8x slower, a little better (docs/weights.md).",
        ),
        click.option(
            "--two-pass/--one-pass",
            default=None,
            help="Two-stage models (the defaults, runs adapted from them): run each stage also on the "
            "transposed mosaic and average (denoise: the first stage only); about 1.25x the time for "
            "denoise, +0.05-0.3 dB, 1.75x for jdd, +0.02-0.35 dB. Default: unless the noise is high (std at "
            "mid-grey <= 0.053) the first stage (both commands) runs twice, and jdd's JDD stage too when "
            "it is low (<= 0.021); both four times, the mosaic turned four ways, at base ISO (<= 0.008); "
            "longer (1.3x, up to about 2x for denoise and 3.5x for jdd at base ISO), +0.05-0.4 dB; "
            "--one-pass never (docs/weights.md).",
        ),
        click.option("--force", is_flag=True, help="Overwrite existing outputs."),
        click.option("--quiet", "-q", is_flag=True, help="No progress bars or per-file lines."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _noise_options(func):
    opts = [
        click.option(
            "--noise",
            "noise_spec",
            default=None,
            metavar="SPEC",
            help="Noise a noise-aware model is told, per file: auto (default: the DNG NoiseProfile, else a "
            "--noise-profile entry for the camera and ISO, else estimated from the image) | metadata | image "
            "| λshot,λread | a preset | PROFILE.json[:ISO]. Ignored (with a warning) for blind models, which "
            "do not take the noise level; RGB photos take λshot,λread only.",
        ),
        click.option(
            "--noise-profile",
            type=click.Path(dir_okay=False),
            default=None,
            help="Noise profile file (rawrcl calibrate --save-profile) that --noise auto consults before the "
            "image estimate.",
        ),
        click.option(
            "--noise-scale",
            type=click.FloatRange(0, min_open=True),
            default=1.0,
            show_default=True,
            help="Multiply λshot and λread by this (> 1: smoother, < 1: keeps more grain).",
        ),
        click.option(
            "--hot-pixels",
            is_flag=True,
            default=False,
            help="Replace isolated hot/dead pixels (far beyond all 8 same-colour neighbours for the file's "
            "noise) by their neighbours' median before inference; the log says how many.",
        ),
        click.option(
            "--row-noise",
            default=None,
            metavar="auto|off|STD",
            help="Row (banding) noise, for a sensor that bands: auto (estimated per file, used where "
            "significant) or its std in [0, 1] units. The row offsets are removed before the model; a model "
            "adapted with row noise (rawrcl adapt --row-noise) is told it instead (and estimates it unless "
            "'off'); one adapted on de-banded files removes its camera's unless 'off'. Default: off, "
            "except for such adapted models.",
        ),
        click.option(
            "--shrink/--no-shrink",
            default=None,
            help="SURE weights (noise-aware models, RAW files): recombine the input and the model's output "
            "(the default's first and JDD stages) per tile with the weights that minimise Stein's unbiased "
            "estimate of the error for the told noise; keeps fine detail at low noise (≈ 10 % more time). "
            "Default: on for denoise, off for jdd (there: its first stage).",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _run(
    runner_name: str,
    inputs,
    out,
    *,
    force,
    quiet,
    tile,
    overlap,
    batch_tiles,
    device,
    precision,
    tta,
    two_pass,
    backend,
    noise_spec=None,
    noise_profile=None,
    noise_scale=1.0,
    hot_pixels=False,
    row_noise=None,
    shrink=None,
    **kw,
) -> None:
    """Call ``rawrcl.infer.<runner_name>`` with the options of :func:`_tile_options` (tiling, device,
    progress, ``--force``) and the command's own ``kw``; exit 1 when any input failed (the others are
    still written)."""
    from rawrcl import infer

    noise = infer.NoiseOptions(noise_spec, noise_profile, noise_scale, hot_pixels, row_noise, shrink)
    opts = infer.TileOptions(
        tile,
        overlap,
        batch_tiles,
        device,
        precision,
        progress=not quiet,
        self_ensemble=tta,
        two_pass=two_pass,
        backend=backend,
    )
    result = getattr(infer, runner_name)(
        inputs,
        out,
        opts=opts,
        overwrite=force,
        progress=not quiet,
        echo=(lambda s: None) if quiet else click.echo,
        error=lambda s: click.echo(s, err=True),
        noise=noise,
        **kw,
    )
    n_ok, n_bad = len(result.written), len(result.failed)
    if n_bad:
        click.echo(f"rawrcl: {n_ok} written, {n_bad} failed", err=True)
        sys.exit(1)


OUT_HELP = (
    "Output file (one input, a name with a suffix) or folder (several inputs, or a name without a suffix)."
)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--out", required=True, help=OUT_HELP)
@click.option(
    "--model",
    "model_path",
    default=None,
    help="Checkpoint (or run directory) with head 'jdd' (default, or 'default': shipped weights); a RAW "
    "denoiser (head 'raw') runs in front of the JDD stage it holds (the RAW default, a run adapted from it), "
    "else as denoise → bilinear demosaic. A .onnx file (rawrcl export) runs on onnxruntime.",
)
@click.option(
    "--render",
    type=click.Choice(["srgb", "linear"]),
    default="srgb",
    show_default=True,
    help="srgb: white balance + colour matrix + gamma; linear: camera RGB in RAW units ×65535 (16-bit).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tiff", "png"]),
    default=None,
    help="tiff (16-bit) or png (8-bit sRGB / 16-bit linear); default from -o's suffix, else tiff.",
)
@fuse_bm3d_option("Two-stage models (the default): average the denoised mosaic between the stages", "0.5")
@_noise_options
@_tile_options
@user_errors
def jdd(inputs, out, model_path, render, fmt, fuse, **common):
    """Joint demosaicing + denoising: RAW files (files, folders, globs) → RGB on the CFA's pixel grid."""
    _run("run_jdd", inputs, out, model_path=model_path, render=render, fmt=fmt, fuse=fuse, **common)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--out", required=True, help=OUT_HELP)
@click.option(
    "--model",
    "model_path",
    default=None,
    help="Checkpoint, run directory or .onnx export with head 'raw' (default, or 'default': shipped "
    "weights), or head 'rgb' for photos.",
)
@click.option(
    "--rgb-model", "rgb_model_path", default=None, help="Checkpoint with head 'rgb' for RGB photos."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["dng", "tiff", "png"]),
    default=None,
    help="RAW: dng (default) or tiff (CFA in raw DN); photos: png (default) or tiff.",
)
@fuse_bm3d_option("RAW files: average the output", "0.3", adapted=True)
@_noise_options
@_tile_options
@user_errors
def denoise(inputs, out, model_path, rgb_model_path, fmt, fuse, **common):
    """Denoise RAW files → DNG (same pattern, levels and metadata), or RGB photos → photos."""
    _run(
        "run_denoise",
        inputs,
        out,
        model_path=model_path,
        rgb_model_path=rgb_model_path,
        fmt=fmt,
        fuse=fuse,
        **common,
    )
