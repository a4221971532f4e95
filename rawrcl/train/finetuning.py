"""Few-label fine-tuning (the paper's proxy evaluation, Sec. 4) and supervised learning from scratch ("SL").

- :class:`LabelledCrops`: an (input, target) dataset made by a task's ``degrade`` from N clean photos;
  item ``i`` is a deterministic function of ``(seed, i)`` (image, RGGB-phased crop offset, noise draw).
- :func:`select_labels`: the N labelled photos, chosen by a seeded permutation of the sorted file list.
- :func:`prepare_model`: protocols ``linear`` (freeze everything but the head; the head is *replaced* by a
  fresh task head: the paper's linear protocol), ``full`` (all weights train; the head is replaced only
  when the checkpoint's head does not fit the task), and ``scratch`` (a new model from ``arch``/``width``).
- :func:`finetune`: builds all of that and trains with the engine's ``rawrcl.train.Trainer`` and the
  ``supervised`` (L1) method; the run dir holds ``config.json``, ``metrics.jsonl``,
  ``checkpoints/last.pt`` and ``finetune.json`` (labels used, protocol, source checkpoint).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from rawrcl.data.labelled import LabelledCrops  # (its old home; kept importable from here)
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text, load_images
from rawrcl.methods.supervised import LOSS_NAMES, balance_for, supervised
from rawrcl.noise import NoiseLike, noise_label
from rawrcl.tasks import Task, get_task
from rawrcl.train.engine import Trainer
from rawrcl.train.runlock import check_unlocked

FINETUNE_PROTOCOLS = ("linear", "full")
#: old name (``rawrcl.bench`` has its own budgets, :data:`rawrcl.bench.BENCH_PROTOCOLS`)
PROTOCOLS = FINETUNE_PROTOCOLS


def select_labels(
    images: Sequence[tuple[str, np.ndarray]], labels: int | str | None, seed: int
) -> list[tuple[str, np.ndarray]]:
    """The ``labels`` photos used for fine-tuning: ``permutation(seed)[:N]`` of the sorted list
    (``None``/``"all"`` = every photo). Same seed ⇒ same photos for every method."""
    if labels is None or labels == "all":
        return list(images)
    n = int(labels)
    if n < 1:
        raise RawrclError(f"--labels must be ≥ 1 (or 'all'), got {labels}")
    if n > len(images):
        raise RawrclError(f"--labels {n}: only {len(images)} photos available")
    order = np.random.default_rng(int(seed)).permutation(len(images))[:n]
    return [images[int(i)] for i in sorted(order)]


def prepare_model(
    ckpt: str | Path | torch.nn.Module,
    task: Task,
    protocol: str,
    *,
    arch: str = "unet",
    width: int | None = None,
    depth: int | None = None,
    skip: bool = True,
    demosaic: str = "bilinear",
    seed: int = 0,
    noise_aware: bool = False,
) -> tuple[torch.nn.Module, dict]:
    """Model ready for fine-tuning on ``task``; returns (model, info).

    ``ckpt == "scratch"`` builds a new model (``arch``, ``width``, ``depth``, U-Net ``skip``, the skip's
    ``demosaic``, ``noise_aware``) with the task's head, seeded.
    Otherwise the checkpoint (path, run dir, or module) is loaded; ``linear`` replaces its head by a fresh
    ``task.head`` and freezes every other parameter; ``full`` keeps all weights trainable (head replaced
    only if it does not fit the task).
    """
    from rawrcl.models import build_model, load_checkpoint

    if protocol not in FINETUNE_PROTOCOLS:
        raise RawrclError(f"--protocol {protocol!r}: expected linear or full")
    torch.manual_seed(int(seed))
    if isinstance(ckpt, str) and ckpt == "scratch":
        cfg = {
            "arch": arch,
            "in_channels": task.in_channels,
            "head": task.head,
            "width": width,
            "depth": depth,
            "skip": skip,
            "demosaic": demosaic,
            "noise_aware": noise_aware,
        }
        model = build_model({k: v for k, v in cfg.items() if v is not None})
        info = {"source": "scratch", "protocol": "scratch", "head_replaced": False}
        for p in model.parameters():
            p.requires_grad_(True)
        return model, info
    if isinstance(ckpt, torch.nn.Module):
        model, src = ckpt, type(ckpt).__name__
    else:
        p = Path(ckpt)
        if p.is_dir():
            p = p / "checkpoints" / "last.pt"
        if not p.exists():
            raise RawrclError(
                f"{ckpt}: no such checkpoint (use 'scratch' for supervised learning from scratch)"
            )
        model, _ = load_checkpoint(p)
        src = str(ckpt)
    if getattr(model, "config", {}).get("arch") == "two_stage":
        raise RawrclError(
            f"{ckpt}: a two-stage model (RAW denoiser → JDD) is not fine-tuned as one; fine-tune each stage "
            "and compose them (rawrcl.models.loading.save_two_stage)"
        )
    in_ch = getattr(model, "config", {}).get("in_channels", task.in_channels)
    if int(in_ch) != task.in_channels:
        raise RawrclError(
            f"{ckpt}: model takes {in_ch} input channels but task {task.name!r} needs {task.in_channels}"
        )
    current = getattr(getattr(model, "head", None), "name", None)
    replace = protocol == "linear" or current != task.head
    if replace:
        model.replace_head(task.head)
    for prm in model.parameters():
        prm.requires_grad_(protocol == "full")
    if protocol == "linear":
        for prm in model.head.parameters():
            prm.requires_grad_(True)
    model.train()
    return model, {"source": src, "protocol": protocol, "head_replaced": bool(replace)}


def _prepare_out(out: str | Path, force: bool) -> Path:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not force:
            raise RawrclError(f"{out}: output run directory exists and is not empty (use --force)")
        check_unlocked(out)  # never delete the folder of a run that is still going
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def finetune(
    ckpt: str | Path | torch.nn.Module,
    task: str | Task,
    clean: str | Path | Sequence,
    out: str | Path,
    *,
    labels: int | str | None = 10,
    protocol: str = "full",
    steps: int = 400,
    arch: str = "unet",
    width: int | None = None,
    depth: int | None = None,
    skip: bool = True,
    demosaic: str = "bilinear",
    seed: int = 0,
    batch_size: int = 8,
    crop: int = 64,
    lr: float = 1e-3,
    noise: NoiseLike = None,
    unprocess: bool | None = None,
    device: str | None = None,
    precision: str | None = None,
    force: bool = False,
    progress: bool | None = False,
    augment: bool = False,
    zoom: tuple[float, float] | None = None,
    grad_clip: float | None = 1.0,
    ema: float | None = None,
    balance_noise: bool | str = False,
    loss: str | None = None,
    noise_aware: bool = False,
    lr_schedule: str = "constant",
    cast: tuple[float, float] | None = None,
) -> dict:
    """Fine-tune (or train from scratch) on N labelled photos; returns a summary dict.

    ``clean`` is a folder of clean photos or a list of arrays; the N labels are :func:`select_labels`
    (``seed``). Training uses the engine's Trainer (Adam β=(0.9, 0.999), ε=1e-7, constant ``lr``) with the
    L1 ``supervised`` method, ``steps`` steps of ``batch_size`` crops of ``crop`` clean pixels;
    ``augment`` adds random flips/rotations of the clean crops (:class:`LabelledCrops`); ``zoom`` = (p,
    max) makes a share p of the crops a smaller window enlarged by a factor log-uniform in [1, max]
    (full-resolution camera files are smoother per pixel than downsampled photo collections); ``cast`` =
    (p, max) gives a share p of the RAW crops an illuminant colour cast (red and blue × a factor
    log-uniform in [1/max, max], :attr:`rawrcl.tasks.Task.cast`). ``grad_clip``
    caps the global gradient norm (None: off); logged L1 norms stay within 0.03–0.7, so 1.0 only catches
    spikes (one diverged an lr-1e-3 run at step 900 without it). ``ema`` (a decay such as 0.999) makes the
    checkpoint hold an exponential moving average of the weights (:class:`rawrcl.train.WeightEMA`).
    ``balance_noise`` (True or ``"crop"``) weights each sample's L1 by its noise level (``supervised(...,
    balance=...)``, see
    :mod:`rawrcl.methods.supervised`), so low-noise samples are not drowned out by high-noise ones.
    ``loss`` names the loss instead (a value of :data:`rawrcl.methods.supervised.LOSS_NAMES`: ``"l1"``,
    ``"l1-noise-balanced"``, ``"l1-crop-balanced"``, ``"log-mse"``, ``"rmse"``); give one of the two.

    Returns ``{"run_dir", "checkpoint", "labels": [names], "n_labels", "protocol", "task", "source",
    "steps", "seed", "final_loss"}``; ``finetune.json`` in the run dir holds the same.
    """
    if loss is not None:
        if balance_noise:
            raise RawrclError(f"give the loss once: loss={loss!r} or balance_noise={balance_noise!r}")
        balance_noise = balance_for(loss)
    t = get_task(task, unprocess=unprocess)
    if cast is not None:
        p_cast, cast_max = (float(v) for v in cast)
        if not t.raw_input:
            raise RawrclError(f"task {t.name!r}: a colour cast applies to RAW tasks only")
        if not 0 < p_cast <= 1:
            raise RawrclError(f"cast share must be in (0, 1], got {cast}")
        t = replace(t, cast=cast_max, cast_mix=p_cast)  # the Task checks the factor
    images = load_images(clean)
    chosen = select_labels(images, labels, seed)
    model, info = prepare_model(
        ckpt,
        t,
        protocol,
        arch=arch,
        width=width,
        depth=depth,
        skip=skip,
        demosaic=demosaic,
        seed=seed,
        noise_aware=noise_aware,
    )
    dataset = LabelledCrops(chosen, t, crop=crop, seed=seed, noise=noise, augment=augment, zoom=zoom)
    run_dir = _prepare_out(out, force)  # after every check, so a refused call leaves an old run intact
    cfg = {
        "method": "supervised",
        "task": t.name,
        "steps": int(steps),
        "batch_size": int(batch_size),
        "crop": int(dataset.crop),
        "lr": float(lr),
        "lr_schedule": lr_schedule,
        "seed": int(seed),
        "noise": noise_label(noise if noise is not None else t.noise) if t.noisy else "none",
        "protocol": info["protocol"],
        "source": info["source"],
        "n_labels": len(chosen),
        "augment": bool(augment),
        "zoom": None if zoom is None else [float(zoom[0]), float(zoom[1])],
        "cast": None if cast is None else [float(cast[0]), float(cast[1])],
        "grad_clip": None if grad_clip is None else float(grad_clip),
        "ema": None if ema is None else float(ema),
        "loss": LOSS_NAMES[balance_noise],
        "model": dict(getattr(model, "config", {})),
    }
    if device:
        cfg["device"] = device
    if precision:
        cfg["precision"] = precision
    method = partial(supervised, balance=balance_noise) if balance_noise else supervised
    final = _fit(model, method, dataset, run_dir, cfg, progress=progress)
    summary = {
        "run_dir": str(run_dir),
        "checkpoint": str(run_dir / "checkpoints" / "last.pt"),
        "labels": [n for n, _ in chosen],
        **{k: cfg[k] for k in ("n_labels", "protocol", "task", "source", "steps", "seed", "noise")},
        "final_loss": final,
    }
    atomic_write_text(run_dir / "finetune.json", json.dumps(summary, indent=2, default=str))
    return summary


def _fit(
    model: torch.nn.Module,
    method: Callable,
    dataset: LabelledCrops,
    run_dir: Path,
    cfg: dict,
    progress: bool | None,
) -> float | None:
    """Train with ``rawrcl.train.Trainer`` (the engine); returns the last logged loss if available."""
    tcfg = {**cfg, "progress": progress, "save_every": max(int(cfg["steps"]), 1), "keep_every": 0}
    tcfg["log_every"] = 20
    Trainer(model, method, dataset, run_dir, tcfg).fit()
    return _last_loss(run_dir)


def _last_loss(run_dir: Path) -> float | None:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    last = None
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "loss" in rec:
            last = float(rec["loss"])
    return last
