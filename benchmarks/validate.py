"""The validation rows that decide whether a training stage is kept (``docs/weights.md``, the stage rules).

    python benchmarks/validate.py raw-denoise REF.pt NEW.pt [OTHER.pt ...]      # every group, ≈ 1 min a model
    python benchmarks/validate.py jdd rawrcl/weights/jdd_default.pt runs/x/jdd.pt --groups U,C --json v.json
    python benchmarks/validate.py raw-denoise default --groups U --told 0.7,0.85,1.2,1.4  # wrong noise level

Photos: 6 held out of training *and* of the test source — ``urban100[90::4][:3]`` and ``cbsd68[58::4][:3]``
(sorted names; the training recipes use cbsd68[:58] and urban100[:90] with sunhays80 kept for testing) —
384-px centre crops (``--crop``), or the centre crop/4 window enlarged ×4 (bicubic) for the ``4×`` rows, as
smooth per pixel as a full-resolution camera file. Each photo *i* of each row is degraded with
``numpy.random.default_rng([seed, i])``; models are told the TRUE noise (validation measures the network, the
estimator has its own benchmark); ``--shrink`` (default ``auto``): with the SURE weights where the commands
use them (RAW denoising, since 2026-11-28). PSNR dB, linear [0, 1]: packed CFA with a 4-px border
(raw-denoise) or RGB with an 8-px border (jdd), as ``rawrcl eval``.

Groups (16 rows each, B 8; ``{photo, unproc}`` = photo values as linear RGB / unprocessed à la Brooks et al.):

- ``U`` uncast: {photo, unproc} × {1×, 4×} × {L2, L4, L6, high} (the noise ladder, ``rawrcl.noise.PRESETS``);
- ``B`` base ISO (8 rows, added 2026-11-28): the same at L1 and L3, the clean end U leaves out;
- ``C`` colour casts (``rawrcl.tasks.Task.cast``): warm R×2.5 B×0.5 and cool R×0.5 B×2 × {photo, unproc} ×
  {1×, 4×} × {L4, high};
- ``P`` per-plane noise (camera profiles whose planes differ; per plane [R, G1, G2, B] shot and read
  multipliers): P1 R shot ×2 read ×1.2, B ×2.9 / ×1.3; P2 R ×0.4 / ×4, B ×1.6 / ×0.5 × {photo, unproc} ×
  {1×, 4×} × {L4, high}.

Output: a Markdown table (one row per condition: the first model's PSNR, then every other model's change
against it) and per group the mean, min and max change — the numbers a stage rule is written in. ``--json``
keeps every score. Needs ``../shared/data`` (``--data``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from rawrcl.eval import model_predictor, psnr_float
from rawrcl.noise import PRESETS, NoiseModel
from rawrcl.tasks import get_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_noise import test_photos  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: (source folder, first sorted index, step, count): the validation photos
PHOTOS = (("urban100", 90, 4, 3), ("cbsd68", 58, 4, 3))
CASTS = {"warm": (2.5, 0.5), "cool": (0.5, 2.0)}
#: the uncast groups' noise levels: U the ladder, B the clean end (base ISO) U leaves out
UNCAST = {"U": ("L2", "L4", "L6", "high"), "B": ("L1", "L3")}
#: per-plane (shot, read) multipliers of [R, G1, G2, B]
PROFILES = {
    "P1": ((2.0, 1.0, 1.0, 2.9), (1.2, 1.0, 1.0, 1.3)),
    "P2": ((0.4, 1.0, 1.0, 1.6), (4.0, 1.0, 1.0, 0.5)),
}
DOMAINS = (("photo", False), ("unproc", True))
ZOOMS = (1, 4)


def photos(data: Path, crop: int, zoom: int) -> list[np.ndarray]:
    """The validation photos (3, crop, crop) float32 [0, 1]: centre crops, or centre windows of crop/zoom
    enlarged ×zoom (:func:`real_noise.test_photos`, the held-out table's own cropping)."""
    return [
        img
        for source, first, step, count in PHOTOS
        for _, img in test_photos(data, step, crop, zoom, source, first)[:count]
    ]


def conditions(groups: str) -> list[dict]:
    """Every row of the chosen groups (dicts: group, domain, zoom, level and, for C and P, the variant)."""
    rows = []
    for group in groups.split(","):
        if group not in ("U", "B", "C", "P"):
            raise SystemExit(f"unknown group {group!r}: expected U, B, C, P")
        for domain, _ in DOMAINS:
            for zoom in ZOOMS:
                if group in UNCAST:
                    rows += [dict(group=group, domain=domain, zoom=zoom, level=lv) for lv in UNCAST[group]]
                    continue
                variants = CASTS if group == "C" else PROFILES
                for name in variants:
                    for lv in ("L4", "high"):
                        rows.append(dict(group=group, domain=domain, zoom=zoom, level=lv, variant=name))
    return rows


def noise_of(row: dict) -> NoiseModel:
    """The row's true noise: the preset, per plane scaled by its profile (group P)."""
    shot, read = PRESETS[row["level"]]
    if row["group"] != "P":
        return NoiseModel(shot, read)
    ks, kr = PROFILES[row["variant"]]
    return NoiseModel(tuple(shot * k for k in ks), tuple(read * k for k in kr))


def score(
    task_name: str,
    models: dict[str, str],
    data: Path,
    crop: int,
    seed: int,
    groups: str,
    told: tuple[float, ...] = (),
    shrink: bool | None = None,
) -> list[dict]:
    """Per condition, each model's mean PSNR over the validation photos; with ``told``, each model also
    told λ × s for every s (labels ``"<model> ×s"``: the cost of a wrong noise level)."""
    from rawrcl.models.loading import load_for_task

    border = 4 if task_name == "raw-denoise" else 8
    preds = {}
    for label, path in models.items():
        model, _ = load_for_task(None if path == "default" else path, task_name)
        preds[label] = model_predictor(model, get_task(task_name), multiple=8, shrink=shrink)
        for s in told:
            preds[f"{label} ×{s:g}"] = model_predictor(
                model,
                get_task(task_name),
                multiple=8,
                noise_of=lambda inp, meta, s=s: meta["noise"].scaled(s),
                shrink=shrink,
            )
    cache = {z: photos(data, crop, z) for z in ZOOMS}
    out = []
    for row in conditions(groups):
        t0 = time.perf_counter()
        task = get_task(task_name, unprocess=dict(DOMAINS)[row["domain"]])
        if row["group"] == "C":
            task = replace(task, cast=CASTS[row["variant"]])
        noise = noise_of(row)
        per: dict[str, list[float]] = {k: [] for k in preds}
        for i, img in enumerate(cache[row["zoom"]]):
            s = task.sample(img, np.random.default_rng([seed, i]), noise)
            for label, run in preds.items():
                y = run(s["input"].float(), task, s["meta"])
                per[label].append(psnr_float(torch.as_tensor(y).float(), s["target"], border))
        out.append(
            {**row, **{k: float(np.mean(v)) for k, v in per.items()}, "seconds": time.perf_counter() - t0}
        )
    return out


def report(rows: list[dict], labels: list[str]) -> dict:
    """Print the table and the per-group summary; return the summary {group: {label: (mean, min, max)}}."""
    ref, others = labels[0], labels[1:]
    print(
        f"| group | domain | zoom | noise | variant | {ref} (dB) | "
        + " | ".join(f"Δ {k}" for k in others)
        + " |"
    )
    print("|---|---|---|---|---|---|" + "---|" * len(others))
    for r in rows:
        deltas = " | ".join(f"{r[k] - r[ref]:+.3f}" for k in others)
        print(
            f"| {r['group']} | {r['domain']} | {r['zoom']}× | {r['level']} | {r.get('variant', '')} "
            f"| {r[ref]:.2f} | {deltas} |"
        )
    summary: dict[str, dict] = {}
    print()
    for group in dict.fromkeys(r["group"] for r in rows):
        sel = [r for r in rows if r["group"] == group]
        summary[group] = {}
        for k in others:
            d = np.array([r[k] - r[ref] for r in sel])
            summary[group][k] = (float(d.mean()), float(d.min()), float(d.max()))
            print(
                f"group {group} ({len(sel)} rows), {k} vs {ref}: mean {d.mean():+.3f} dB "
                f"(min {d.min():+.3f}, max {d.max():+.3f})"
            )
    return summary


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", choices=["raw-denoise", "jdd"])
    ap.add_argument(
        "models", nargs="+", help="checkpoints (or run dirs / 'default'); the first is the reference"
    )
    ap.add_argument("--groups", default="U,C,P")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--crop", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--told",
        default="",
        metavar="S,S,…",
        help="also score each model told λ × S (true noise unchanged): what a wrong noise level costs",
    )
    ap.add_argument(
        "--shrink",
        choices=["auto", "on", "off"],
        default="auto",
        help="SURE weights (rawrcl.models.shrink; auto: as the commands run the model, on for RAW "
        "denoising and off for JDD; off: the network alone, as stage rules before 2026-11-28 measured it)",
    )
    a = ap.parse_args(argv)
    shrink = {"auto": None, "on": True, "off": False}[a.shrink]
    data = Path(a.data)
    if not (data / "urban100").is_dir() or not (data / "cbsd68").is_dir():
        raise SystemExit(f"{data}: needs urban100/ and cbsd68/ (--data)")
    labels = [f"{i}:{Path(m).name}" for i, m in enumerate(a.models)]
    torch.manual_seed(0)
    told = tuple(float(v) for v in a.told.split(",") if v)
    if any(s <= 0 for s in told):
        raise SystemExit(f"--told {a.told}: factors must be > 0")
    models = dict(zip(labels, a.models, strict=True))
    rows = score(a.task, models, data, a.crop, a.seed, a.groups, told, shrink)
    labels += [f"{label} ×{s:g}" for label in labels for s in told]
    summary = report(rows, labels)
    if a.json:
        Path(a.json).write_text(
            json.dumps({"task": a.task, "models": a.models, "rows": rows, "summary": summary}, indent=1)
        )
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
