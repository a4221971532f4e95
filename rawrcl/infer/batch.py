"""Batches of files: inputs (files, folders, globs) → planned outputs → one call per file, where a failure
is one line and the rest still run."""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rawrcl.errors import RawrclError
from rawrcl.io import folder_files


@dataclass
class BatchResult:
    """Outcome of a batch: written outputs and one error line per failed input."""

    written: list[tuple[Path, Path]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def expand_inputs(
    inputs: Sequence[str | os.PathLike], extensions: frozenset[str]
) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files, folders (non-recursive, files with ``extensions``) and globs → (sorted unique files, errors).

    Explicitly named files are kept whatever their extension (a bad one fails later, on its own).
    """
    files: list[Path] = []
    errors: list[tuple[str, str]] = []
    for item in inputs:
        s = str(item)
        p = Path(s)
        if p.is_dir():
            found = folder_files(p, extensions)
            if not found:
                errors.append((s, f"folder has no files with extensions {' '.join(sorted(extensions))}"))
            files.extend(found)
        elif p.is_file():
            files.append(p)
        elif glob.has_magic(s):
            found = sorted(Path(f) for f in glob.glob(s) if Path(f).is_file())
            if not found:
                errors.append((s, "pattern matches no file"))
            files.extend(found)
        else:
            errors.append((s, "no such file or folder"))
    seen: set[Path] = set()
    unique = []
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors


def plan_outputs(
    files: Sequence[Path],
    out: str | os.PathLike,
    suffix_for: Callable[[Path], str],
    single_target: bool,
) -> tuple[list[tuple[Path, Path]], list[tuple[str, str]]]:
    """Map inputs to output paths. ``out`` is a file when ``single_target`` (one input, OUT not a folder),
    else a folder that receives ``<stem><suffix>``. Collisions and outputs equal to an input are errors."""
    out = Path(out)
    pairs: list[tuple[Path, Path]] = []
    errors: list[tuple[str, str]] = []
    taken: dict[Path, Path] = {}
    inputs = {f.resolve() for f in files}
    for f in files:
        dst = out if single_target else out / (f.stem + suffix_for(f))
        key = dst.resolve()
        if key in inputs:
            errors.append((str(f), f"output {dst} would replace an input file; choose another -o"))
        elif key in taken:
            errors.append((str(f), f"output {dst} is also the output of {taken[key]}"))
        else:
            taken[key] = f
            pairs.append((f, dst))
    return pairs, errors


def output_is_file(
    inputs: Sequence[str | os.PathLike], files: Sequence[Path], out: str | os.PathLike
) -> bool:
    """OUT names a single file when exactly one file input is given (no folder, no glob), OUT is not an
    existing folder, does not end with a separator, and has a suffix."""
    s = str(out)
    if Path(s).is_dir() or s.endswith(("/", os.sep)) or not Path(s).suffix:
        return False
    return len(inputs) == 1 and len(files) == 1 and Path(str(inputs[0])).is_file()


def run_batch(
    pairs: Sequence[tuple[Path, Path]],
    process: Callable[[Path, Path], Path],
    result: BatchResult | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    error: Callable[[str], None] | None = None,
) -> BatchResult:
    """Run ``process(src, dst)`` on each pair; a failure is recorded (one line) and the rest still run."""
    result = result or BatchResult()
    echo = echo or (lambda s: print(s, flush=True))
    error = error or (lambda s: print(s, file=sys.stderr, flush=True))
    bar = None
    if progress and len(pairs) > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pairs), desc="files", unit="file", file=sys.stderr)
        plain_error = error

        def error(msg: str) -> None:  # print above the progress bar, not through it
            with bar.external_write_mode(file=sys.stderr):
                plain_error(msg)

    try:
        for src, dst in pairs:
            t0 = time.perf_counter()
            try:
                written = process(src, dst)
            except KeyboardInterrupt:
                raise
            except RawrclError as exc:
                msg = str(exc)
                if str(src) not in msg and src.name not in msg:
                    msg = f"{src}: {msg}"
                result.failed.append((str(src), msg))
                error(f"rawrcl: error: {msg}")
            except Exception as exc:  # noqa: BLE001 - one bad file must not stop the batch
                msg = f"{src}: {type(exc).__name__}: {exc}".splitlines()[0]
                result.failed.append((str(src), msg))
                error(f"rawrcl: error: {msg}")
            else:
                result.written.append((src, written))
                echo(f"{src} -> {written} ({time.perf_counter() - t0:.1f} s)")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return result


def _prepare(
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    extensions: frozenset[str],
    suffix_for: Callable[[Path], str],
    error: Callable[[str], None],
) -> tuple[list[tuple[Path, Path]], BatchResult]:
    if not inputs:
        raise RawrclError("no INPUT given")
    if str(out) in ("-", ""):
        raise RawrclError(f"-o {str(out)!r}: give an output file or folder (nothing is written to stdout)")
    files, errs = expand_inputs(inputs, extensions)
    single = output_is_file(inputs, files, out)
    if not single and Path(out).is_file():
        raise RawrclError(f"-o {out}: is a file, but several inputs need an output folder")
    pairs, errs2 = plan_outputs(files, out, suffix_for, single)
    result = BatchResult()
    for src, msg in errs + errs2:
        result.failed.append((src, f"{src}: {msg}"))
        error(f"rawrcl: error: {src}: {msg}")
    return pairs, result


def _format_from(
    out: str | os.PathLike, fmt: str | None, allowed: Sequence[str], default: str, single: bool
) -> str:
    suffix = Path(out).suffix.lower().lstrip(".") if single else ""
    suffix = {"tif": "tiff"}.get(suffix, suffix)
    if fmt is None:
        return suffix if suffix in allowed else default
    fmt = {"tif": "tiff"}.get(fmt.lower(), fmt.lower())
    if fmt not in allowed:
        raise RawrclError(f"--format {fmt!r}: expected one of {', '.join(allowed)}")
    if suffix in ("dng", "tiff", "png") and suffix != fmt:  # a single output file named otherwise
        raise RawrclError(f"-o {out} is a .{suffix} file but --format is {fmt}: make them agree, or drop one")
    return fmt
