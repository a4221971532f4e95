"""Self-supervised pre-training (``rawrcl pretrain``): the pretext task, the pair dataset and the run."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from rawrcl.errors import RawrclError
from rawrcl.noise import SYNTHETIC, parse_noise
from rawrcl.tasks import PRETEXT_TASKS, Task, get_task
from rawrcl.train.config import DataConfig, ModelConfig, PretrainConfig, TrainingConfig
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

    Builds a :class:`~rawrcl.train.config.PretrainConfig` from the arguments (refusing bad ones in one
    line) and runs it with :func:`run_pretrain`.

    ``skip`` (U-Net): the model adds its output to a fixed classical estimate (identity / a demosaic,
    see :func:`rawrcl.models.skip_map`); ``demosaic`` names that demosaic ("bilinear" | "malvar").
    ``method_options`` go to :func:`rawrcl.methods.make_method` (e.g. distance, tau, alpha, encoder);
    ``data_options`` are the fields of :class:`~rawrcl.train.config.DataConfig` (crop, overlap, augment,
    synthetic, noise, cache_dir, …); ``trainer_options`` those of
    :class:`~rawrcl.train.config.TrainingConfig` (steps, batch_size, lr, device, seed, …) plus ``resume``,
    ``force`` and ``progress``.
    """
    topt = dict(trainer_options or {})
    resume, force = bool(topt.pop("resume", False)), bool(topt.pop("force", False))
    progress = topt.pop("progress", None)
    config = PretrainConfig(
        data_dir=str(data_dir),
        out=str(out),
        task=task,
        method=method,
        method_options=dict(method_options or {}),
        model=ModelConfig(arch=arch, width=width, depth=depth, skip=skip, demosaic=demosaic),
        data=DataConfig(**(data_options or {})),
        training=TrainingConfig.from_options(topt),
        resume=resume,
        force=force,
    )
    return run_pretrain(config, command=command, progress=progress)


def run_pretrain(config: PretrainConfig, *, command: str | None = None, progress: bool | None = None) -> dict:
    """Run one pre-training (``rawrcl pretrain``, :func:`pretrain`, ``rawrcl bench``); returns the trainer
    summary. ``config.json`` keeps ``config`` under ``"run_config"`` beside the keys of earlier releases.
    ``progress``: a progress bar (``None``: on a terminal; else a line every 10 % of the steps)."""
    from rawrcl.methods import make_method
    from rawrcl.models import build_model

    task, method, out, data_dir = config.task, config.method, config.out, config.data_dir
    method_options = config.method_options
    m = config.model
    arch = "encoder" if method == "simclr" else m.arch
    topt = {**TRAINER_DEFAULTS, **asdict(config.training)}
    topt.update(resume=config.resume, force=config.force, progress=progress)
    seed = int(topt["seed"])
    dopt = config.data.options()
    if Path(out).is_dir() and distributed_env()[0] == 0:
        check_unlocked(out)  # refuse at once, before the data is read, when another run holds the folder
    if config.resume:
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
        model_cfg = {"arch": arch, "in_channels": in_ch, "head": head, "width": m.width, "depth": m.depth}
        model_cfg["skip"] = m.skip  # ignored by DnCNN (see rawrcl.models.model_config)
        model_cfg["demosaic"] = m.demosaic
        if arch == "encoder":
            model_cfg = {"arch": "encoder", "in_channels": in_ch, "width": m.width, "depth": m.depth}
    dataset = build_dataset(data_dir, task, seed=seed, **dopt)
    if method == "n2n" and not getattr(dataset, "has_second", False):
        raise RawrclError(
            "--method n2n needs two independent noise realisations: only synthetic data has them "
            "(photos, or --synthetic); use rcl, n2s or m2m on real RAW files"
        )
    meth = make_method(method, method_options or {})
    torch.manual_seed(seed)
    model = build_model(model_cfg)
    record = {
        **topt,
        "task": task,
        "data_dir": str(Path(data_dir).resolve()),
        "data_options": _jsonable(dopt),
        "command": command or " ".join(sys.argv),
        "run_config": _jsonable(config.to_dict()),
    }
    if config.resume:  # the run keeps the configuration it was started with
        del record["run_config"]
    return Trainer(model, meth, dataset, out, record).fit()
