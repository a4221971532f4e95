"""Whole-command CPU speed of ``rawrcl jdd`` and ``rawrcl denoise`` on a 12 MP DNG (issue 19's speed target).

    python benchmarks/command_speed.py                           # defaults, fp32, 2 threads, 3 runs each
    python benchmarks/command_speed.py --variant "tile512=--tile 512 --batch-tiles 4" \\
        --variant "glibc-malloc=RAWRCL_MALLOC=default"           # side by side, runs interleaved
    git worktree add ../before HEAD~3 && python benchmarks/command_speed.py --tree before=../before

What the target counts: the whole process — start-up and imports, reading the file, the single-image noise
estimate (the DNG carries no NoiseProfile, as most cameras' files), both networks, rendering and writing —
on a 12 MP (4240 × 2828) GRBG 12-bit DNG with an as-shot white balance, made from the bundled photos
with Poisson–Gaussian noise (``--level``, default ``high``; :func:`benchmarks.speed.synthetic_cfa`),
``--precision fp32``, torch on ``--threads`` threads (``OMP_NUM_THREADS``). Each row is the median wall
time of ``--runs`` runs after one warm-up, with the peak resident memory of the process (``wait4``); variants
run interleaved with the defaults (A B A B …) so that a drifting machine affects them alike. MP/s counts
sensor pixels. Quote the figures for an otherwise idle machine only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import synthetic_cfa  # noqa: E402


def make_dng(path: Path, mp: float = 12.0, level: str = "high") -> tuple[int, int]:
    """A GRBG 12-bit DNG (black 64, white 4095, as-shot WB, no NoiseProfile) of ``mp`` megapixels with the
    noise of preset ``level`` (:data:`rawrcl.noise.PRESETS`)."""
    from rawrcl.io.dng import write_dng
    from rawrcl.noise import PRESETS

    cfa = synthetic_cfa(mp, seed=1, noise=PRESETS[level])[:, 1:-1]  # RGGB → GRBG by dropping the first column
    dn = np.round(cfa * (4095 - 64) + 64).astype(np.uint16)
    write_dng(path, dn, "GRBG", 64, 4095, wb=(2.0, 1.0, 1.6), overwrite=True)
    return dn.shape


def timed(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one run of ``cmd`` in ``cwd``; raises if it fails."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            text = err.read().decode(errors="replace").strip()[-500:]
            raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}): {text}")
    return wall, usage.ru_maxrss / 1024


def package_of(tree: Path, dest: Path) -> Path:
    """A ``PYTHONPATH`` entry that imports the whole of checkout ``tree``: ``dest/rawrcl`` links every entry
    of ``tree/rawrcl`` plus ``calibration`` and ``cli`` (installed as ``rawrcl.calibration`` and
    ``rawrcl.cli``). ``PYTHONPATH=tree`` alone is not enough: under an editable install of another checkout
    those two subpackages would still come from that checkout."""
    if not (tree / "rawrcl" / "__init__.py").is_file():
        raise SystemExit(f"--tree {tree}: not a rawrcl checkout")
    pkg = dest / "rawrcl"
    pkg.mkdir(parents=True)
    for entry in (tree / "rawrcl").iterdir():
        (pkg / entry.name).symlink_to(entry.resolve())
    for sub in ("calibration", "cli"):
        (pkg / sub).symlink_to((tree / sub).resolve())
    return dest


def parse_variant(text: str) -> tuple[str, list[str], dict[str, str]]:
    """``NAME=ARGS``: extra command-line options and ``KEY=VALUE`` environment settings, space-separated."""
    name, _, rest = text.partition("=")
    args, env = [], {}
    for tok in shlex.split(rest):
        key, eq, value = tok.partition("=")
        if eq and key.isupper():
            env[key] = value
        else:
            args.append(tok)
    return name, args, env


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mp", type=float, default=12.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--commands", default="jdd,denoise")
    ap.add_argument(
        "--level",
        default="high",
        help="the file's noise (a preset: L1 base ISO … L7, low, high; default high, the target's file). "
        "At L1–L2 both commands average their first stage over four orientations (jdd its JDD stage too), "
        "at L3–L4 over two; at `low`, L5 and L6 the first stage over two (docs/weights.md)",
    )
    ap.add_argument("--variant", action="append", default=[], help="NAME=ARGS (options and KEY=VALUE env)")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another checkout of rawrcl (e.g. a git worktree of an older commit) as a variant",
    )
    a = ap.parse_args(argv)
    exe = [sys.executable, "-m", "rawrcl.cli"]
    env0 = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    variants = [("default", [], {})] + [parse_variant(v) for v in a.variant]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.tree:
            name, _, tree = spec.partition("=")
            path = package_of(Path(tree), Path(tmp) / f"tree-{name}")
            variants.append((name, [], {"PYTHONPATH": str(path)}))
        src = Path(tmp) / "frame.dng"
        h, w = make_dng(src, a.mp, a.level)
        mp = h * w / 1e6
        for command in a.commands.split(","):
            out = Path(tmp) / ("out.tiff" if command == "jdd" else "out.dng")
            base = exe + [command, str(src), "-o", str(out), "--precision", "fp32", "--force", "-q"]
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in variants}
            for i in range(a.runs + 1):  # the first round warms the file cache and is not counted
                for name, args, env in variants:
                    # run outside any checkout: `python -m` puts the working directory first on sys.path
                    t = timed(base + args, {**env0, **env}, cwd=tmp)
                    if i:
                        runs[name].append(t)
            for name, args, env in variants:
                wall = statistics.median(t for t, _ in runs[name])
                peak = max(m for _, m in runs[name])
                rows.append(
                    {
                        "command": f"rawrcl {command}",
                        "variant": name,
                        "extra": shlex.join(args),
                        "env": env,
                        "wall_s": round(wall, 2),
                        "runs_s": [round(t, 2) for t, _ in runs[name]],
                        "mp_per_s": round(mp / wall, 3),
                        "peak_mib": round(peak),
                    }
                )
    print(
        f"{mp:.2f} MP GRBG DNG, noise {a.level}, fp32, {a.threads} threads, median of {a.runs} "
        "(after one warm-up)\n"
    )
    print("| command | variant | s (median) | runs | MP/s | peak MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['command']} | {r['variant']} | {r['wall_s']} | {', '.join(map(str, r['runs_s']))} "
            f"| {r['mp_per_s']} | {r['peak_mib']} |"
        )
    return rows


if __name__ == "__main__":
    main()
