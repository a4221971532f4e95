"""``rawrcl bench --protocol quick|paper --train-dir DIR --test-dir DIR --out REPORT_DIR``."""

from __future__ import annotations

import sys

import click
from rawrcl.cli.common import NOISE_SYNTHETIC_HELP, LazyChoice, user_errors


@click.command("bench")
@click.option(
    "--protocol",
    type=LazyChoice("rawrcl.bench:BENCH_PROTOCOLS"),
    default="quick",
    show_default=True,
    help="quick: CPU budget (< 30 min on 2 cores); paper: GPU scale (crop 128, batch 64)",
)
@click.option(
    "--train-dir", required=True, type=click.Path(), help="training photos (unlabelled + label pool)"
)
@click.option("--test-dir", required=True, type=click.Path(), help="held-out test photos")
@click.option("--out", required=True, type=click.Path(), help="report directory")
@click.option("--seeds", default=None, type=int, help="number of fine-tuning seeds (default: protocol's)")
@click.option("--tasks", default=None, help="comma-separated subset of the protocol's tasks, e.g. jdd")
@click.option("--limit", default=None, type=int, help="use only the first N test photos")
@click.option("--pretrain-steps", default=None, type=int, help="override the protocol's pre-training steps")
@click.option("--finetune-steps", default=None, type=int, help="override the protocol's fine-tuning steps")
@click.option("--device", default=None, help="override the protocol's device (cpu, cuda)")
@click.option("--noise", default=None, help=NOISE_SYNTHETIC_HELP + "  [default: the protocol's, high]")
@click.option(
    "--skip/--no-skip",
    default=None,
    help="U-Net with the classical skip (bilinear demosaic / identity) for every learned model; default: "
    "the protocol's (no skip: the paper's plain U-Net)",
)
@click.option("--threads", default=None, type=int, help="torch CPU threads")
@click.option("--resume", is_flag=True, help="reuse completed runs in REPORT_DIR/runs")
@click.option("--force", is_flag=True, help="start over in an existing report directory")
@user_errors
def bench(
    protocol,
    train_dir,
    test_dir,
    out,
    seeds,
    tasks,
    limit,
    pretrain_steps,
    finetune_steps,
    device,
    noise,
    skip,
    threads,
    resume,
    force,
):
    """Run the benchmark grid (classical baselines, SL from scratch, pre-training + fine-tuning, Oracle,
    ablations) and write REPORT_DIR/report.md, results.json and figures."""
    import torch

    from rawrcl.bench import run_bench

    if threads:
        torch.set_num_threads(threads)
    overrides = {}
    if pretrain_steps is not None:
        overrides["pretrain_steps"] = pretrain_steps
    if finetune_steps is not None:
        overrides["finetune_steps"] = finetune_steps
    if device is not None:
        overrides["device"] = device
    if skip is not None:
        overrides["skip"] = skip
    if noise is not None:
        from rawrcl.noise import parse_noise

        overrides["noise"] = parse_noise(noise, option="--noise").text
    res = run_bench(
        protocol,
        train_dir,
        test_dir,
        out,
        seeds=seeds,
        limit=limit,
        resume=resume,
        force=force,
        tasks=tuple(t.strip() for t in tasks.split(",")) if tasks else None,
        overrides=overrides,
        command="rawrcl " + " ".join(sys.argv[1:]),
        log=lambda m: click.echo(m, err=True),
    )
    click.echo(f"wrote {out}/report.md ({len(res['records'])} runs, {res['wall_s'] / 60:.1f} min)")
