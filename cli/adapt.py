"""``rawrcl adapt DNG_DIR --out RUN``: label-free fine-tuning of the RAW denoiser on noisy files."""

from __future__ import annotations

import json

import click
from rawrcl.cli.common import LazyChoice, ema_option, user_errors


@click.command("adapt")
@click.argument("dng_dir", type=click.Path())
@click.option("--out", default=None, type=click.Path(), help="run directory to create  [required]")
@click.option(
    "--from",
    "source",
    default="default",
    show_default=True,
    help="starting model: 'default' (the shipped noise-aware RAW denoiser; for --task jdd the shipped JDD "
    "model's), a checkpoint or a run directory",
)
@click.option(
    "--task",
    default="raw-denoise",
    show_default=True,
    type=click.Choice(["raw-denoise", "jdd"]),
    help="jdd: adapt the RAW denoiser of the two-stage JDD model (--from) and also write RUN/jdd.pt, "
    "which rawrcl jdd --model RUN runs",
)
@click.option(
    "--method",
    default=None,
    type=LazyChoice("rawrcl.train.config:ADAPT_METHODS"),
    help="r2r: clipping-aware Recorrupted-to-Recorrupted; r2r-plain: as published; sure: Stein's unbiased "
    "risk estimate at the files' own noise; n2s: Noise2Self; rcl: the paper's residual contrastive loss; "
    "blindspot: a blind-spot network trained from scratch, run beside the start with SURE weights "
    "(6000 steps: ≈ 45 min to 2 h on 2 cores, by machine; docs/adaptation.md compares them); burst: for a "
    "burst (frames of one static scene), the blindspot composite beside a frame-to-frame fine-tune of the "
    "start, chosen by their error against the other frames' samples, which also sets the weight of GAT+BM3D "
    "that rawrcl denoise --model RUN averages in (eight 1 MP frames: ≈ 75 min on a fast machine, its "
    "first stage alone ≈ 2 h on a slow one)  "
    "[default: sure]",
)
@click.option(
    "--steps", default=None, type=int, help="optimiser steps  [default: 400; blindspot and burst 6000]"
)
@click.option(
    "--burst-steps",
    default=None,
    type=int,
    help="--method burst: steps of the frame-to-frame fine-tune  [default: 1200]",
)
@click.option(
    "--blindspot-run",
    default=None,
    type=click.Path(),
    help="--method burst: an earlier --method blindspot run on these files, used as the first stage",
)
@click.option(
    "--noise",
    default="auto",
    show_default=True,
    help="each file's noise: auto (DNG NoiseProfile → --noise-profile → single-image estimate), metadata, "
    "image, a preset, λshot,λread, PROFILE.json[:ISO]",
)
@click.option("--noise-profile", default=None, type=click.Path(), help="noise profile consulted by auto")
@click.option("--noise-scale", default=1.0, show_default=True, type=float, help="multiplies both λ")
@click.option(
    "--batch-size", default=None, type=int, help="crop pairs per step  [default: 4, = 8 crops; blindspot 16]"
)
@click.option(
    "--crop", default=None, type=int, help="crop side in mosaic pixels  [default: 128; blindspot 64]"
)
@click.option("--lr", default=None, type=float, help="learning rate  [default: 3e-5; blindspot 1e-3, cosine]")
@click.option(
    "--anchor", default=None, type=float, help="weight of Σ(θ − θ₀)² towards the start  [default: 0.05]"
)
@click.option(
    "--mix",
    default=None,
    type=float,
    help="weight of synthetic supervised crops (scikit-image photos; half with the files' own noise and "
    "clipping, half with the training cameras')  [default: 0.5; 0 = off]",
)
@click.option(
    "--select",
    default=None,
    type=click.Choice(["sure", "r2r", "last"]),
    help="held-out score that picks the kept checkpoint (the start when none beats it; --method burst: its "
    "burst signal, unless the frames give too few compared samples)  [default: sure]",
)
@click.option(
    "--evals",
    default=None,
    type=int,
    help="checkpoints scored on the held-out crops [default: 4; blindspot 1]",
)
@click.option(
    "--held-out",
    "held_out",
    default=None,
    type=int,
    help="held-out crops that score the checkpoints (more: a surer choice, slower)  [default: 128]",
)
@click.option(
    "--forget-tol",
    default=None,
    type=float,
    help="dB a kept checkpoint may lose on any condition of the forgetting check  [default: 0.1]",
)
@click.option(
    "--noise-slack",
    default=None,
    type=float,
    help="uncertainty of the told noise variance: with --select sure a checkpoint is kept only if it beats "
    "the start for every variance within ×[1/S, S] of the told one (e.g. 1.2 for an image estimate)  "
    "[default: 1, trust it]",
)
@click.option(
    "--row-noise",
    default=None,
    help="row (banding) noise std in [0, 1] units: off, auto (estimated per file, used where "
    "significant; for a camera with visible banding), or a number  [default: off]",
)
@ema_option
@click.option("--seed", default=None, type=int, help="random seed  [default: 0]")
@click.option("--resume", is_flag=True, help="continue the run in --out")
@click.option("--force", is_flag=True, help="overwrite an existing run directory")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@user_errors
def adapt(
    dng_dir,
    out,
    source,
    task,
    method,
    steps,
    burst_steps,
    blindspot_run,
    noise,
    noise_profile,
    noise_scale,
    batch_size,
    crop,
    lr,
    anchor,
    mix,
    select,
    evals,
    held_out,
    forget_tol,
    noise_slack,
    row_noise,
    ema,
    seed,
    resume,
    force,
    as_json,
):
    """Fine-tune a noise-aware RAW denoiser on DNG_DIR's noisy files, with no clean reference.

    The options not given keep their defaults (with --resume: the run's saved configuration, which
    RUN/config.json holds as run_config). Each file's noise comes from --noise (per file: folders
    mixing ISOs work). The bottom 1/8 of every file is held out; the run keeps, among the checkpoints
    within --forget-tol on the forgetting check whose held-out gain holds within --noise-slack of the
    told noise, the one with the best held-out label-free score, or the starting weights (RUN/adapt.json
    says which). Use the result with ``rawrcl denoise --model RUN`` (and with --task jdd, ``rawrcl jdd
    --model RUN``).
    """
    from rawrcl.errors import RawrclError
    from rawrcl.train.adapt import adapt as _adapt

    if not out:
        raise RawrclError("--out RUN is required: the run directory to create (or to --resume)")

    res = _adapt(
        dng_dir,
        out,
        source=source,
        task=task,
        method=method,
        steps=steps,
        burst_steps=burst_steps,
        blindspot_run=blindspot_run,
        noise=noise,
        noise_profile=noise_profile,
        noise_scale=noise_scale,
        batch_size=batch_size,
        crop=crop,
        lr=lr,
        anchor=anchor,
        mix=mix,
        evals=evals,
        held_out=held_out,
        select=select,
        forget_tol=forget_tol,
        noise_slack=noise_slack,
        row_noise=row_noise,
        ema=ema,
        seed=seed,
        resume=resume,
        force=force,
        progress=None if not as_json else False,
        log=None if as_json else (lambda m: click.echo(m, err=True)),
    )
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    base, best = res["held_out"][0], next(r for r in res["held_out"] if r["step"] == res["selected_step"])
    steps = f"{res['steps']}" + (f" + {res['stages']['f2f']['steps']}" if "stages" in res else "")
    if "burst" in best:  # --method burst's burst signal chose
        score = _burst_text(best)
    else:
        score = f"held-out SURE {base['sure_psnr']:.2f} → {best['sure_psnr']:.2f} dB{_gain(base, best)}"
    click.echo(
        f"adapted {len(res['files'])} files with {res['method']} ({steps} steps): {res['verdict']}; {score}, "
        f"forgetting check {best['forget_db']:+.2f} dB ({best['forget_at']}) → "
        f"{res.get('raw_checkpoint') or res.get('jdd_checkpoint') or res['checkpoint']}"
    )


def _burst_text(row: dict) -> str:
    """The kept row's burst signal in words (``rawrcl adapt --method burst``)."""
    if not row["step"]:
        return "held-out burst signal: the start scored best"
    gain, se = row.get("burst_gain_db"), row.get("burst_gain_se_db")
    if gain is None:
        return "held-out burst signal better than the start (no dB scale: the told noise exceeds the error)"
    return (
        f"held-out burst signal {gain:+.3f}" + (f" ± {se:.3f}" if se is not None else "") + " dB vs the start"
    )


def _gain(base: dict, row: dict) -> str:
    """' (+0.05 ± 0.02)': a kept checkpoint's held-out gain over the start and its standard error (dB)."""
    se = row.get("sure_gain_se_db")
    if not row["step"] or se is None:
        return ""
    return f" ({row['sure_psnr'] - base['sure_psnr']:+.2f} ± {se:.2f})"
