"""Residual statistics of a run (the paper's Fig. 2): the library behind ``rawrcl inspect``.

For each image of a folder, two overlapping crops are taken (the positive pair, exactly as in training) and
every other image's second crop serves as a negative. With d = EMD of the residual value distributions,
the *gap* of an anchor j against a negative i is

    gap(j, i) = d(r_a[j], r_b[i]) − d(r_a[j], r_b[j])          (negative pair − positive pair)

collected over all ordered pairs i ≠ j and several random crop draws. Residuals are
``x − f(x)`` (same-domain heads) or ``x − mosaic(f(x))`` (JDD, App. B.2), for the run's initial weights
(``checkpoints/init.pt``) and its current weights (``checkpoints/last.pt``), and — when noise-free references
are given — the true noise ``x − clean``. Units: EMD of residuals multiplied by 255, i.e. 8-bit steps of the
[0, 1] signal scale ("8-bit DN").

At random initialisation the residual is mostly image content, so negatives differ strongly and the gap is
large; the paper's claim is that training moves the residual statistics towards the true noise's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path
from rawrcl.losses import pairwise
from rawrcl.methods.base import input_residual

UNIT = "8-bit DN (EMD between residual value distributions, residuals x255)"


def gaps_from_residuals(r_a: torch.Tensor, r_b: torch.Tensor, scale: float = 255.0) -> np.ndarray:
    """All gap(j, i), i ≠ j, for one batch of residual pairs (N, C, h, w) × (N, C, h, w) → (N·(N−1),)."""
    d = pairwise(r_a.float() * scale, r_b.float() * scale, "emd").double()
    pos = torch.diagonal(d)
    diff = d - pos[:, None]
    mask = ~torch.eye(d.shape[0], dtype=torch.bool)
    return diff[mask].numpy()


def _summary(g: np.ndarray) -> dict:
    return {
        "mean": float(np.mean(g)),
        "median": float(np.median(g)),
        "std": float(np.std(g)),
        "frac_positive": float(np.mean(g > 0)),
    }


def residual_gaps(
    run_dir: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    clean_dir: str | os.PathLike | None = None,
    *,
    crop: int | None = None,
    rounds: int = 8,
    seed: int = 1234,
    before: str | os.PathLike | None = None,
    after: str | os.PathLike | None = None,
    device: str = "cpu",
) -> dict:
    """Gap statistics of a run's residuals (see module docstring).

    Parameters
    ----------
    run_dir : a ``rawrcl pretrain`` run directory.
    data_dir : noisy data (default: the run's training folder).
    clean_dir : noise-free references named like the noisy files (``rawrcl simulate --save-clean``'s
        ``clean/``); for photo data the clean crops are known and used automatically.
    crop : crop side in file pixels (default: the run's training crop).
    rounds : random crop draws per image (each gives N·(N−1) gaps for N images).
    before, after : checkpoints (default ``checkpoints/init.pt`` and ``checkpoints/last.pt``).

    Returns
    -------
    dict with ``gap_before``, ``gap_after``, ``gap_true`` (means, or None without references), ``unit``,
    per-set summaries (mean, median, std, frac_positive) and the raw ``samples`` (lists of floats).
    """
    from rawrcl.models import load_checkpoint
    from rawrcl.train import build_dataset, load_resume_config

    run_dir = Path(run_dir)
    cfg = load_resume_config(run_dir)
    if cfg.get("model", {}).get("arch") == "encoder":
        raise RawrclError(f"{run_dir}: an encoder run has no residuals to inspect")
    before = Path(before) if before else run_dir / "checkpoints" / "init.pt"
    after = Path(after) if after else run_dir / "checkpoints" / "last.pt"
    dopt = dict(cfg.get("data_options", {}))
    dopt.pop("clean_dir", None)
    dopt["augment"] = False
    if crop is not None:
        dopt["crop"] = int(crop)
    data = data_dir if data_dir is not None else cfg.get("data_dir")
    if data is None:
        raise RawrclError(f"{run_dir}: the run does not record its data folder; pass --data DIR")
    task = cfg.get("task", "jdd")
    if data_dir is not None and task in ("jdd", "raw-denoise"):
        from rawrcl.data import folder_kind

        # photos given for a RAW run: simulate the mosaic and noise as in training
        dopt["synthetic"] = folder_kind(data_dir) == "photo"
    ds = build_dataset(
        data, task, seed=seed, clean_dir=clean_dir, **{k: v for k, v in dopt.items() if k != "seed"}
    )
    n = len(ds)
    if n < 2:
        raise RawrclError(f"{data}: inspect needs at least 2 images (negatives come from other images)")
    models = {}
    for name, path in (("before", before), ("after", after)):
        m, _ = load_checkpoint(path, map_location=device)
        models[name] = m.to(device).eval()
    has_true = bool(getattr(ds, "has_clean", False))
    samples: dict[str, list[np.ndarray]] = {"before": [], "after": [], "true": []}
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _ in range(rounds):
            items = [ds[(i, int(rng.integers(0, 2**62)))] for i in range(n)]
            xa = torch.stack([it["x_a"] for it in items]).to(device)
            xb = torch.stack([it["x_b"] for it in items]).to(device)
            x = torch.cat([xa, xb])
            for name, m in models.items():
                r = input_residual(x, m(x).float()).cpu()
                samples[name].append(gaps_from_residuals(r[:n], r[n:]))
            if has_true:
                ca = torch.stack([it["clean_a"] for it in items])
                cb = torch.stack([it["clean_b"] for it in items])
                samples["true"].append(gaps_from_residuals(xa.cpu() - ca, xb.cpu() - cb))
    out: dict = {
        "unit": UNIT,
        "run_dir": str(run_dir),
        "data_dir": str(data),
        "images": n,
        "rounds": rounds,
        "crop": dopt.get("crop"),
        "checkpoint_before": str(before),
        "checkpoint_after": str(after),
    }
    for name in ("before", "after", "true"):
        if samples[name]:
            g = np.concatenate(samples[name])
            out[f"gap_{name}"] = float(np.mean(g))
            out[name] = _summary(g)
            out.setdefault("samples", {})[name] = [round(float(v), 5) for v in g]
        else:
            out[f"gap_{name}"] = None
    if out["gap_true"] is not None:
        out["closer_to_true"] = abs(out["gap_after"] - out["gap_true"]) < abs(
            out["gap_before"] - out["gap_true"]
        )
    return out


def plot_gaps(result: dict, path: str | os.PathLike, *, force: bool = True) -> Path:
    """Density plot (Gaussian KDE) of the gap samples of :func:`residual_gaps`.

    Written atomically; the format follows the suffix (PNG/PDF/SVG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    path = Path(path)
    if path.exists() and not force:
        raise RawrclError(f"{path}: exists (use --force to overwrite)")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    labels = {"before": "initial weights", "after": "trained weights", "true": "true noise"}
    for name, colour in (("before", "tab:gray"), ("after", "tab:blue"), ("true", "tab:green")):
        g = np.asarray(result.get("samples", {}).get(name, []), dtype=float)
        if g.size < 2:
            continue
        lo, hi = np.percentile(g, [0.5, 99.5])
        pad = 0.1 * (hi - lo + 1e-9)
        grid = np.linspace(lo - pad, hi + pad, 400)
        if np.std(g) > 0:
            ax.plot(
                grid, gaussian_kde(g)(grid), color=colour, label=f"{labels[name]} (mean {np.mean(g):.2f})"
            )
        ax.axvline(np.mean(g), color=colour, ls=":", lw=1)
    ax.set_xlabel("EMD(negative) − EMD(positive)  [8-bit DN]")
    ax.set_ylabel("density")
    ax.set_title("Residual contrast before/after training (paper Fig. 2)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        with atomic_path(path, suffix=path.suffix or ".png") as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
    return path


def format_report(result: dict) -> str:
    """Human-readable summary of :func:`residual_gaps`."""
    lines = [
        f"{result['run_dir']}: {result['images']} images × {result['rounds']} crop draws, "
        f"unit: {result['unit']}"
    ]
    for name in ("before", "after", "true"):
        s = result.get(name)
        if s:
            lines.append(
                f"  gap_{name:<6} mean {s['mean']:8.3f}  median {s['median']:8.3f}  "
                f"P(neg > pos) {s['frac_positive']:.2f}"
            )
    if "closer_to_true" in result:
        lines.append(
            f"  trained residuals {'are' if result['closer_to_true'] else 'are NOT'} closer to the "
            "true noise's gap"
        )
    return "\n".join(lines)


def result_json(result: dict, with_samples: bool = False) -> str:
    r = dict(result)
    if not with_samples:
        r.pop("samples", None)
    return json.dumps(r, indent=2)
