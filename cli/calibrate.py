"""``rawrcl calibrate``: noise parameters (λshot, λread) from metadata, one image, or flats/darks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rawrcl.cli.common import LazyChoice, user_errors


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.4g}"


def _text(d: dict) -> str:
    head = f"{d['path']}  [{d['method']}, {d['status']}]  ISO {_fmt(d['iso'])}"
    if d["lambda_shot"] is None:
        return (
            head
            + "\n  no noise parameters"
            + (f" ({d['extra'].get('note')})" if d["extra"].get("note") else "")
        )
    lines = [head, f"  plane-average  λshot {_fmt(d['lambda_shot'])}  λread {_fmt(d['lambda_read'])}"]
    for c, (ls, lr) in d["per_plane"].items():
        err = d["per_plane_err"].get(c)
        e = f"  (± {_fmt(err[0])}, ± {_fmt(err[1])})" if err and any(err) else ""
        lines.append(f"  {c:<3} λshot {_fmt(ls)}  λread {_fmt(lr)}{e}")
    ex = d["extra"]
    if "linear_range" in ex:
        lr_ = ex["linear_range"]
        fw = {c: (f"{v:.3f}" if v is not None else "not reached") for c, v in ex["full_well"].items()}
        lines.append("  linear range " + ", ".join(f"{c} [{a:.3f}, {b:.3f}]" for c, (a, b) in lr_.items()))
        lines.append("  full well    " + ", ".join(f"{c} {v}" for c, v in fw.items()))
    if "signal_range" in ex:
        a, b = ex["signal_range"]
        lines.append(f"  fitted on signal levels x ∈ [{a:.3f}, {b:.3f}]; outside: extrapolated")
    if "black_floor" in ex:
        lines.append(f"  clipped at black (x = {ex['black_floor']:.4g}): fitted through the censored model")
    if ex.get("pixels_unread"):
        lines.append(f"  from the tags alone: the pixels were not read ({ex['pixels_unread']})")
    if ex.get("fallback"):
        lines.append("  (no NoiseProfile in the file: single-image estimate)")
    if ex.get("learned_check", 1.0) < 1.0:
        t = ex["tile_estimate"]["pooled"]
        lines.append(f"  {ex['note']} (tile estimate λshot {_fmt(t[0])}  λread {_fmt(t[1])})")
    lines.append("  units: [0,1] after black/white level; variance = λshot·x + λread")
    return "\n".join(lines)


def _plot_path(base: Path, n: int, i: int, src: str | None) -> Path:
    if n == 1:
        return base
    stem = Path(src).stem if src else str(i)
    return base.with_name(f"{base.stem}_{i:02d}_{stem}{base.suffix or '.png'}")


@click.command("calibrate")
@click.argument("files", nargs=-1, type=click.Path(path_type=str))
@click.option(
    "--method",
    type=LazyChoice("rawrcl.calibration.api:METHODS"),
    default="auto",
    show_default=True,
    help="metadata: DNG NoiseProfile; image: estimate from the noisy image itself; "
    "auto: metadata when present, else image.",
)
@click.option("--estimator", type=click.Choice(["tiles", "pca"]), hidden=True, help="Deprecated.")
@click.option("--detail", type=click.Choice(["cfa", "plane"]), hidden=True, help="Deprecated.")
@click.option(
    "--flats",
    type=click.Path(file_okay=False, path_type=str),
    help="Folder of flat frames (two per exposure level) for photon transfer.",
)
@click.option("--darks", type=click.Path(file_okay=False, path_type=str), help="Folder of dark frames.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per file.")
@click.option(
    "--plot",
    "plot",
    type=click.Path(dir_okay=False, path_type=str),
    help="Write a PNG of the noise level function (one per file: PATH_<n>_<name>.png when several).",
)
@click.option(
    "--save-profile",
    type=click.Path(dir_okay=False, path_type=str),
    help="Add the results to a JSON camera noise profile (per make/model and ISO).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Overwrite an existing plot, or replace an existing camera/ISO entry of the profile.",
)
@user_errors
def calibrate(
    files: tuple[str, ...],
    method: str,
    estimator: str | None,
    detail: str | None,
    flats: str | None,
    darks: str | None,
    as_json: bool,
    plot: str | None,
    save_profile: str | None,
    force: bool,
) -> None:
    """Noise parameters (λshot, λread) of RAW FILES, per CFA plane, in [0,1] units
    (variance = λshot·x + λread), from the DNG NoiseProfile or estimated from the image; or, with
    --flats DIR --darks DIR, from a photon-transfer series (EMVA 1288 style).

    Files that fail (unreadable, not Bayer, too small, saturated) are reported one line each on
    stderr; the exit status is then 1.
    """
    from rawrcl.calibration import calibrate_file, calibrate_flats, plot_nlf
    from rawrcl.calibration import save_profile as save

    from rawrcl.errors import RawrclError

    for opt, value, default in (("--estimator", estimator, "tiles"), ("--detail", detail, "cfa")):
        if value is None:
            continue
        if value != default:
            raise RawrclError(
                f"{opt} {value}: the experimental single-image variants moved to "
                "benchmarks/calibration_variants.py (python benchmarks/calibration_variants.py FILE)"
            )
        click.echo(
            f"rawrcl: warning: {opt} is deprecated ({value} is the only single-image estimator)", err=True
        )

    if (flats is None) != (darks is None):
        raise RawrclError("--flats and --darks go together (photon transfer needs both)")
    if flats is None and not files:
        raise RawrclError("give RAW FILES, or --flats DIR --darks DIR")
    if flats is not None and files:
        raise RawrclError("give either RAW FILES or --flats/--darks, not both")
    n_out = 1 if flats is not None else len(files)
    if plot:
        for i, f in enumerate(files or (flats,)):
            pp = _plot_path(Path(plot), n_out, i, f)
            if pp.exists() and not force:
                raise RawrclError(f"{pp}: already exists (use --force to overwrite)")

    results, errors = [], {}
    if flats is not None:
        results.append(calibrate_flats(flats, darks))
    else:
        for path in files:
            try:
                results.append(calibrate_file(path, method))
            except RawrclError as exc:
                errors[len(results)] = str(exc)
                click.echo(f"rawrcl: error: {exc}", err=True)
                results.append(None)
    failed = len(errors)

    good = [r for r in results if r is not None]
    if save_profile and good:
        usable = [r for r in good if r.per_plane]
        if usable:
            save(save_profile, usable, replace=force)
        skipped = len(good) - len(usable)
        if skipped:
            click.echo(
                f"rawrcl: note: {skipped} result(s) without noise parameters not saved to {save_profile}",
                err=True,
            )
    if plot:
        for i, r in enumerate(results):
            if r is not None:
                plot_nlf(r, _plot_path(Path(plot), n_out, i, r.path))

    dicts = []
    for i, (path, r) in enumerate(zip(files or (flats,), results, strict=True)):
        if r is None:
            dicts.append(
                {
                    "path": path,
                    "method": method,
                    "status": "error",
                    "lambda_shot": None,
                    "lambda_read": None,
                    "per_plane": {},
                    "iso": None,
                    "error": errors[i],
                }
            )
        else:
            dicts.append(r.to_dict())
    if as_json:
        click.echo(json.dumps(dicts, indent=2))
    else:
        text = "\n".join(_text(d) for d in dicts if d["status"] != "error")
        if text:
            click.echo(text)
    if failed:
        sys.stdout.flush()
        if len(files) == 1:
            sys.exit(1)  # its one-line message is already on stderr
        raise RawrclError(f"{failed} of {len(files)} files could not be calibrated")
