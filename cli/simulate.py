"""``rawrcl simulate SRC OUT``: noisy Bayer DNGs from a folder of RGB photos."""

from __future__ import annotations

import click
from rawrcl.cli.common import NOISE_SYNTHETIC_HELP, LazyChoice, deprecated, user_errors


@click.command("simulate")
@click.argument("src", type=click.Path(path_type=str))
@click.argument("out", type=click.Path(file_okay=False, path_type=str))
@click.option("--noise", default=None, help=NOISE_SYNTHETIC_HELP + " Drawn per photo.  [default: paper]")
@click.option("--sampler", default=None, hidden=True)
@click.option("--sigma-range", nargs=2, type=float, default=None, hidden=True)
@click.option("--lambda-shot", type=float, default=None, hidden=True)
@click.option("--lambda-read", type=float, default=None, hidden=True)
@click.option(
    "--pattern",
    type=LazyChoice("rawrcl.cfa:PATTERNS", case_sensitive=False),
    default="RGGB",
    show_default=True,
    help="Bayer phase of the output mosaics.",
)
@click.option(
    "--unprocess/--no-unprocess",
    default=True,
    show_default=True,
    help="Invert a random camera ISP (Brooks 2019) first; off: photo values are linear camera RGB.",
)
@click.option("--white-level", type=int, default=16383, show_default=True, help="Sensor white level, DN.")
@click.option("--black-level", type=int, default=512, show_default=True, help="Sensor black level, DN.")
@click.option("--seed", type=int, default=0, show_default=True, help="Base seed (photo i uses [seed, i]).")
@click.option(
    "--save-clean",
    is_flag=True,
    help="Also write OUT/clean/<stem>.dng (noise-free mosaic) and <stem>.tiff (linear RGB 16-bit).",
)
@click.option("--force", is_flag=True, help="Overwrite existing outputs (otherwise they are kept).")
@user_errors
def simulate(
    src,
    out,
    noise,
    sampler,
    sigma_range,
    lambda_shot,
    lambda_read,
    pattern,
    unprocess,
    white_level,
    black_level,
    seed,
    save_clean,
    force,
) -> None:
    """Turn the RGB photos in SRC into noisy Bayer DNGs in OUT (noise drawn per photo by --noise).

    Each DNG's NoiseProfile holds the (λshot, λread) used, in [0,1] units after black/white level
    (variance = λshot·x + λread). OUT/manifest.json lists every file with its parameters.
    """
    from rawrcl.errors import RawrclError
    from rawrcl.simulate import simulate_folder

    old = legacy_noise(sampler, sigma_range, lambda_shot, lambda_read)
    if old is not None:
        if noise is not None:
            raise RawrclError(
                "--noise and the old --sampler/--sigma-range/--lambda-* options exclude each other"
            )
        from rawrcl.noise import parse_noise

        parse_noise(old)  # a bad old spelling is one error line, not a warning and an error
        deprecated("--sampler/--sigma-range/--lambda-shot/--lambda-read", f"--noise {old}")
    report = simulate_folder(
        src,
        out,
        noise=noise or old or "paper",
        pattern=pattern.upper(),
        do_unprocess=unprocess,
        white_level=white_level,
        black_level=black_level,
        seed=seed,
        save_clean=save_clean,
        force=force,
        progress=None,
    )
    click.echo(f"wrote {len(report.written)} DNG(s) to {report.out_dir} (manifest: {report.manifest})")
    if report.kept:
        click.echo(
            f"kept {len(report.kept)} existing output(s) (use --force to overwrite): "
            + ", ".join(report.kept[:5])
            + (" …" if len(report.kept) > 5 else "")
        )
    if report.kept_differ:
        diff = ", ".join(f"{k} {theirs} (not {ours})" for k, (theirs, ours) in report.kept_differ.items())
        click.echo(
            f"warning: kept outputs were made with other settings: {diff}; the manifest records each "
            "file's own settings; use --force to remake them",
            err=True,
        )
    clipped = [e for e in report.written if e["clipped_low_fraction"] > 0.01]
    if clipped:
        click.echo(
            f"warning: {len(clipped)} image(s) have >1% of pixels clipped at 0 DN (read noise larger "
            "than the black level); consider a higher --black-level",
            err=True,
        )
    for path, reason in report.failed:
        click.echo(f"rawrcl: skipped {reason if reason.startswith(path) else path + ': ' + reason}", err=True)
    if report.failed:
        total = len(report.failed) + len(report.written) + len(report.kept)
        raise RawrclError(f"{len(report.failed)} of {total} photo(s) failed")


def legacy_noise(sampler, sigma_range, lambda_shot, lambda_read) -> str | None:
    """The ``--noise`` spelling of the old ``--sampler/--sigma-range/--lambda-*`` options (None if unused)."""
    from rawrcl.errors import RawrclError

    if sampler is None and sigma_range is None and lambda_shot is None and lambda_read is None:
        return None
    sampler = sampler or "paper"
    if sampler == "fixed":
        if lambda_shot is None or lambda_read is None:
            raise RawrclError("--sampler fixed needs --lambda-shot and --lambda-read ([0,1] units)")
        return f"{lambda_shot:g},{lambda_read:g}"
    if lambda_shot is not None or lambda_read is not None:
        raise RawrclError("--lambda-shot/--lambda-read need --sampler fixed")
    if sampler == "paper" and sigma_range is not None:
        return f"paper:{sigma_range[0]:g}-{sigma_range[1]:g}"
    if sigma_range is not None:
        raise RawrclError("--sigma-range applies to --sampler paper")
    return sampler
