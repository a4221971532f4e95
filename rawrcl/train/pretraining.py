"""Self-supervised pre-training (``rawrcl pretrain``): the pretext task, the pair dataset and the run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from rawrcl.errors import RawrclError
from rawrcl.noise import SYNTHETIC, parse_noise
from rawrcl.tasks import PRETEXT_TASKS, Task, get_task
from rawrcl.train.engine import TRAINER_DEFAULTS, Trainer, distributed_env
from rawrcl.train.rundir import _jsonable, load_resume_config
from rawrcl.train.runlock import check_unlocked


def pretext_task(name: str) -> Task:
    """The task ``rawrcl pretrain --task name`` pre-trains for (one with a pretext head)."""
    if name not in PRETEXT_TASKS:
        raise RawrclError(f"unknown --task {name!r}; expected one of {', '.join(PRETEXT_TASKS)}")
    return get_task(name)


def build_dataset(
    data_dir: str | os.PathLike,
    task: str,
    *,
    crop: int = 128,
    overlap: float = 0.5,
    augment: bool = False,
    seed: int = 0,
    synthetic: bool = False,
    noise: str = "paper",
    noise_profile: str | os.PathLike | None = None,
    unprocess: bool = False,
    cache_dir: str | os.PathLike | None = None,
    clean_dir: str | os.PathLike | None = None,
):
    """The pair dataset for ``task`` from ``data_dir`` (RAW files for RAW tasks, photos for RGB tasks;
    ``synthetic=True`` makes RAW tasks use photos with simulated mosaic + noise). ``noise``: the synthetic
    noise, the :data:`~rawrcl.noise.SYNTHETIC` kinds of the ``--noise`` grammar. ``noise_profile`` is the
    spelling of run folders written before the one grammar (a profile file, the same as ``noise=FILE``)."""
    noise = parse_noise(noise_profile if noise_profile else noise, SYNTHETIC)
    from rawrcl.data import PhotoFolderDataset, RawFolderDataset, folder_kind

    domain = pretext_task(task).domain
    kind = folder_kind(data_dir)
    if kind == "empty":
        raise RawrclError(f"{data_dir}: no RAW files or photos found")
    if domain == "raw":
        if kind == "raw" and not synthetic:
            return RawFolderDataset(
                data_dir,
                crop=crop,
                overlap=overlap,
                augment=augment,
                cache_dir=cache_dir,
                clean_dir=clean_dir,
                seed=seed,
            )
        if kind == "photo" and synthetic:
            return PhotoFolderDataset(
                data_dir,
                crop=crop,
                overlap=overlap,
                mode="raw",
                noise=noise,
                unprocess=unprocess,
                augment=augment,
                seed=seed,
            )
        if kind == "photo":
            raise RawrclError(
                f"{data_dir}: --task {task} needs RAW/DNG files but the folder holds photos; make DNGs with "
                "`rawrcl simulate`, pass --synthetic to simulate the mosaic and noise, or use --task denoise"
            )
        raise RawrclError(f"{data_dir}: --synthetic needs photos, but the folder holds RAW files")
    if kind == "raw":
        raise RawrclError(
            f"{data_dir}: --task {task} works on photos but the folder holds RAW files; "
            "use --task jdd or raw-denoise"
        )
    return PhotoFolderDataset(
        data_dir,
        crop=crop,
        overlap=overlap,
        mode="rgb",
        noise=noise,
        augment=augment,
        seed=seed,
    )


def pretrain(
    data_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    task: str = "jdd",
    method: str = "rcl",
    arch: str = "unet",
    width: int | None = None,
    depth: int | None = None,
    skip: bool = True,
    demosaic: str = "bilinear",
    method_options: dict | None = None,
    data_options: dict | None = None,
    trainer_options: dict | None = None,
    command: str | None = None,
) -> dict:
    """Self-supervised pre-training (``rawrcl pretrain``). Returns the trainer summary.

    ``skip`` (U-Net): the model adds its output to a fixed classical estimate (identity / a demosaic,
    see :func:`rawrcl.models.skip_map`); ``demosaic`` names that demosaic ("bilinear" | "malvar").
    ``method_options`` go to :func:`rawrcl.methods.make_method` (e.g. distance, tau, alpha, encoder);
    ``data_options`` to :func:`build_dataset` (crop, overlap, augment, synthetic, noise, cache_dir, …);
    ``trainer_options`` to :class:`Trainer` (steps, batch_size, lr, device, seed, resume, force, …).
    """
    from rawrcl.methods import make_method
    from rawrcl.models import build_model

    topt = {**TRAINER_DEFAULTS, **(trainer_options or {})}
    seed = int(topt["seed"])
    dopt = dict(data_options or {})
    if method == "simclr":
        arch = "encoder"
    if method == "m2m" and task != "jdd":
        raise RawrclError("--method m2m is a JDD method: use --task jdd")
    if Path(out).is_dir() and distributed_env()[0] == 0:
        check_unlocked(out)  # refuse at once, before the data is read, when another run holds the folder
    if topt.get("resume"):
        old = load_resume_config(out)
        model_cfg = old["model"]
        task = old.get("task", task)
        method = old.get("method", {}).get("method", method)
        method_options = {k: v for k, v in old.get("method", {}).items() if k != "method"}
        dopt = {**old.get("data_options", {}), **{k: v for k, v in dopt.items() if k in ("cache_dir",)}}
        seed = int(old.get("seed", seed))
        topt["seed"] = seed
        for k in ("batch_size", "lr", "ema"):
            if k in old:
                topt[k] = old[k]
        data_dir = old.get("data_dir", data_dir)
    else:
        t = pretext_task(task)
        in_ch, head = t.in_channels, t.pretext_head
        model_cfg = {"arch": arch, "in_channels": in_ch, "head": head, "width": width, "depth": depth}
        model_cfg["skip"] = skip  # ignored by DnCNN (see rawrcl.models.model_config)
        model_cfg["demosaic"] = demosaic
        if arch == "encoder":
            model_cfg = {"arch": "encoder", "in_channels": in_ch, "width": width, "depth": depth}
    dataset = build_dataset(data_dir, task, seed=seed, **dopt)
    if method == "n2n" and not getattr(dataset, "has_second", False):
        raise RawrclError(
            "--method n2n needs two independent noise realisations: only synthetic data has them "
            "(photos, or --synthetic); use rcl, n2s or m2m on real RAW files"
        )
    meth = make_method(method, method_options or {})
    torch.manual_seed(seed)
    model = build_model(model_cfg)
    config = {
        **topt,
        "task": task,
        "data_dir": str(Path(data_dir).resolve()),
        "data_options": _jsonable(dopt),
        "command": command or " ".join(sys.argv),
    }
    return Trainer(model, meth, dataset, out, config).fit()
