"""``rawrcl inspect``: the paper's Fig. 2 for a run — residual EMD gaps before/after training."""

from __future__ import annotations

import click
from rawrcl.cli.common import user_errors


@click.command("inspect")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Noisy data folder (default: the run's training folder).",
)
@click.option(
    "--clean",
    "clean_dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Noise-free references named like the noisy files (e.g. `rawrcl simulate --save-clean`'s clean/).",
)
@click.option("--crop", type=int, default=None, help="Crop side in file pixels (default: the training crop).")
@click.option("--rounds", type=int, default=8, show_default=True, help="Random crop draws per image.")
@click.option("--seed", type=int, default=1234, show_default=True)
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write the density plot here."
)
@click.option("--force", is_flag=True, help="Overwrite an existing plot.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print gap_before/gap_after/gap_true (8-bit DN) as JSON."
)
@user_errors
def inspect_run(run_dir, data_dir, clean_dir, crop, rounds, seed, plot_path, force, as_json):
    """Density of EMD(negative pair) − EMD(positive pair) of the residuals for RUN_DIR's initial and current
    weights, and for the true noise with --clean. Units: 8-bit DN (residuals × 255)."""
    from rawrcl.inspect import format_report, plot_gaps, residual_gaps, result_json

    result = residual_gaps(run_dir, data_dir, clean_dir, crop=crop, rounds=rounds, seed=seed)
    if plot_path:
        plot_gaps(result, plot_path, force=force)
    click.echo(result_json(result) if as_json else format_report(result))
