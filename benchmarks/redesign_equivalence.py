"""Do the shipped default weights give the same outputs before and after the redesign (issue 18)?

Runs ``rawrcl jdd``'s and ``rawrcl denoise``'s library path (``jdd_cfa`` / ``denoise_cfa``, ``--precision
fp32``, the default tiling and small tiles (96, overlap 24) so that tiling and blending are exercised
too) with the default weights of the *old* release on

- a synthetic mosaic (smooth gradients + texture + noise, 256×384, RGGB, seeded), and
- ``../shared/data/raw/kodak_dc50.kdc`` (a real Kodak DC50 file, if present),

once with the old release's code and once with this tree's code, and prints the largest absolute difference
per output (the issue's bar: ≤ 1e-6). Each side runs in its own Python process; the old one imports the
old worktree's ``rawrcl`` (``PYTHONPATH``), so the two share the installed dependencies.

    git worktree add --detach ../wt-old 030fc77
    python benchmarks/redesign_equivalence.py ../wt-old [--kodak PATH] [--old-python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
KODAK = HERE.parent / "shared" / "data" / "raw" / "kodak_dc50.kdc"


def synthetic_mosaic(seed: int = 0) -> np.ndarray:
    """(256, 384) float32 in [0, 1]: gradients, a sine texture and heteroscedastic noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:256, 0:384].astype(np.float32)
    clean = 0.15 + 0.6 * (x / 384) * (0.5 + 0.5 * np.sin(y / 9.0) * np.cos(x / 13.0))
    noisy = clean + rng.normal(0, 1, clean.shape) * np.sqrt(0.004 * clean + 2e-4)
    return np.clip(noisy, 0, 1).astype(np.float32)


WORKER = r"""
import json, sys
import numpy as np
args = json.loads(sys.argv[1])
import rawrcl
if args["expect_root"] and not rawrcl.__file__.startswith(args["expect_root"]):
    raise SystemExit(f"imported {rawrcl.__file__}, expected a module under {args['expect_root']}")
if args["side"] == "old":
    from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa, load_model
    from rawrcl.raw import read_raw
    load = lambda path, task: load_model(path, task)
else:
    from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa
    from rawrcl.io.raw import read_raw
    from rawrcl.models.loading import load_for_task
    load = lambda path, task: load_for_task(path, task)[0]
import torch
torch.set_num_threads(args["threads"])
settings = {"": TileOptions(precision="fp32", device="cpu"),
            " tiled 96/24": TileOptions(tile=96, overlap=24, precision="fp32", device="cpu")}
models = {"jdd": load(args["jdd"], "jdd"), "raw-denoise": load(args["raw"], "raw-denoise")}
out = {}
inputs = [("synthetic", np.load(args["synthetic"]), "RGGB")]
if args["kodak"]:
    r = read_raw(args["kodak"])
    inputs.append(("kodak_dc50", r.cfa, r.pattern))
for name, cfa, pattern in inputs:
    for label, opts in settings.items():
        out[f"{name}/jdd{label}"] = jdd_cfa(models["jdd"], cfa, pattern, opts)
        out[f"{name}/raw-denoise{label}"] = denoise_cfa(models["raw-denoise"], cfa, pattern, opts)
np.savez(args["out"], **out)
print(rawrcl.__file__)
"""


def run_side(side: str, python: str, root: Path | None, args: dict, tmp: Path) -> dict[str, np.ndarray]:
    env = dict(os.environ)
    cwd = None
    if root is not None:
        env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
        cwd = str(root)
    out = tmp / f"{side}.npz"
    payload = {**args, "side": side, "out": str(out), "expect_root": str(root) if root else ""}
    proc = subprocess.run(
        [python, "-c", WORKER, json.dumps(payload)], env=env, cwd=cwd, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{side} side failed:\n{proc.stderr[-2000:]}")
    print(f"{side}: rawrcl from {proc.stdout.strip().splitlines()[-1]}")
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="worktree of the release before the redesign (e.g. 030fc77)")
    ap.add_argument("--kodak", type=Path, default=KODAK, help=f"a real RAW file (default {KODAK})")
    ap.add_argument("--old-python", default=sys.executable, help="Python for the old side")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    old = a.old.resolve()
    weights = old / "rawrcl" / "weights"
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        np.save(tmp / "synthetic.npy", synthetic_mosaic())
        common = {
            "jdd": str(weights / "jdd_default.pt"),
            "raw": str(weights / "raw_denoise_default.pt"),
            "synthetic": str(tmp / "synthetic.npy"),
            "kodak": str(a.kodak) if a.kodak.exists() else "",
            "threads": a.threads,
        }
        before = run_side("old", a.old_python, old, common, tmp)
        after = run_side("new", sys.executable, None, common, tmp)
    print("\n| input / output | shape | max abs diff (fp32) |\n|---|---|---|")
    worst = 0.0
    for key in before:
        d = float(np.max(np.abs(before[key].astype(np.float64) - after[key].astype(np.float64))))
        worst = max(worst, d)
        print(f"| {key} | {tuple(before[key].shape)} | {d:.3g} |")
    print(f"\nlargest difference {worst:.3g} ({'within' if worst <= 1e-6 else 'OVER'} the 1e-6 bar)")
    sys.exit(0 if worst <= 1e-6 else 1)


if __name__ == "__main__":
    main()
