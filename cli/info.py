"""``rawrcl info FILE... [--json]``: RAW metadata (pattern, levels, ISO, NoiseProfile)."""

from __future__ import annotations

import json
import sys

import click
from rawrcl.cli.common import user_errors


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _text(s: dict) -> str:
    lines = [
        f"{s['path']}",
        f"  camera        {' '.join(x for x in (s['make'], s['model']) if x) or '?'}",
        f"  size          {s['width']}×{s['height']}  pattern {s['pattern']}",
        f"  black level   {_fmt(s['black_level'])} DN (per 2×2 position)",
        f"  white level   {_fmt(s['white_level'])} DN",
        f"  ISO           {_fmt(s['iso'])}   exposure {_fmt(s['exposure_time'])} s",
        f"  white balance {_fmt(s['wb'])}",
        f"  noise profile {_fmt(s['noise_profile'])}  ([0,1] units: variance = S·x + O)",
    ]
    return "\n".join(lines)


@click.command("info")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects instead of text.")
@user_errors
def info(files: tuple[str, ...], as_json: bool) -> None:
    """Show the metadata of RAW FILES: Bayer pattern, size, black/white levels (DN), ISO, exposure,
    white balance and the DNG NoiseProfile ([0,1] units).

    Files that cannot be read (not Bayer, truncated, not a RAW file) are reported one line each on
    stderr; the others are still shown, and the exit status is 1 if any failed.
    """
    from tqdm import tqdm

    from rawrcl.errors import RawrclError
    from rawrcl.io.raw import raw_summary, read_raw

    summaries, failed = [], 0
    for path in tqdm(files, desc="info", unit="file", disable=None if len(files) > 1 else True):
        try:
            summaries.append(raw_summary(read_raw(path)))
        except RawrclError as exc:
            failed += 1
            tqdm.write(f"rawrcl: error: {exc}", file=sys.stderr)
    if as_json:
        click.echo(json.dumps(summaries, indent=2))
    else:
        click.echo("\n".join(_text(s) for s in summaries))
    if failed:
        raise RawrclError(f"{failed} of {len(files)} file(s) could not be read")
