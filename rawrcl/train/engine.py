"""The training engine: :class:`Trainer` (any method, any model).

The run directory it writes (``config.json``, ``metrics.jsonl``, checkpoints) is described and handled in
:mod:`rawrcl.train.rundir`; the learning-rate schedule, EMA and RNG states in :mod:`rawrcl.train.schedule`;
stopping on a signal in :mod:`rawrcl.train.signals`; ``rawrcl pretrain`` in :mod:`rawrcl.train.pretraining`.


Determinism and resume
----------------------
Batch ``s`` is a pure function of ``(seed, s)`` (:class:`rawrcl.data.PairBatchSampler`), and torch's global
RNG is re-seeded from ``(seed, s, rank)`` before every step (so masks, dropout etc. do not depend on history).
``last.pt`` holds model, optimiser (and AMP scaler) state, the step, the RNG states and the sampler state.
Resuming therefore reproduces the uninterrupted run's subsequent losses exactly on CPU (same thread count);
``metrics.jsonl`` lines written after the last checkpoint by a killed run are dropped on resume.

Distributed
-----------
Launched by ``torchrun`` (env ``WORLD_SIZE`` > 1), the trainer initialises the process group (NCCL on CUDA,
gloo on CPU), wraps the model in DistributedDataParallel, gives every rank a disjoint slice of each global
batch (so ``batch_size`` is per rank), and only rank 0 writes files.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.utils import clip_grad_norm_

from rawrcl.device import autocast, normalize_precision, resolve_precision, select_device, use_channels_last
from rawrcl.errors import RawrclError
from rawrcl.models.registry import read_checkpoint, unwrap
from rawrcl.train.config import check_numbers
from rawrcl.train.progress import Progress, progress_mode
from rawrcl.train.rundir import RunDirectory
from rawrcl.train.runlock import RunLock
from rawrcl.train.schedule import (
    WeightEMA,
    _ema_decay,
    _set_rng_state,
    lr_schedule,
    step_seed,
)
from rawrcl.train.signals import TrainingInterrupted, _stop_requests

log = logging.getLogger("rawrcl.train")


TRAINER_DEFAULTS: dict = {
    "steps": 1000,
    "batch_size": 64,
    "lr": 1e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-7,
    "grad_clip": None,  # max global gradient norm (None: no clipping); the norm is logged either way
    "ema": None,  # decay of an exponential moving average of the weights (e.g. 0.999); None: off
    "lr_schedule": "constant",  # "constant" | "cosine" (lr·(0.01 + 0.99·(1 + cos(π·step/steps))/2))
    "seed": 0,
    "device": "auto",
    # autocast: "auto" (bf16/fp16 on CUDA, fp32 elsewhere) | "fp32" | "bf16" | "fp16" (rawrcl.device); the
    # key "amp" of earlier releases (with "off" for fp32) is still read when "precision" is not given
    "precision": None,
    "channels_last": "auto",  # "auto": rawrcl.device.use_channels_last (CUDA; CPUs with AVX-512)
    "compile": False,
    "num_workers": None,  # None: 0 on CPU, min(8, cpus per rank) on CUDA
    "log_every": 10,
    "save_every": 100,
    "keep_every": 1000,
    "resume": False,
    "force": False,
    "progress": None,  # None: a bar when stderr is a TTY, else a line every 10 % of the steps
}


def distributed_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment (0, 1, 0 when not distributed)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    return rank, world, local


def _to_device(batch, device: torch.device, channels_last: bool):
    if isinstance(batch, torch.Tensor):
        t = batch.to(device, non_blocking=True)
        if channels_last and t.ndim == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t
    if isinstance(batch, dict):
        return {k: _to_device(v, device, channels_last) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device, channels_last) for v in batch)
    return batch


def _precision(cfg: dict) -> str:
    """The run's precision: ``precision``, else the ``amp`` of earlier releases, else ``auto``."""
    return normalize_precision(cfg.get("precision") or cfg.get("amp"))


class _KeyedIndices(torch.utils.data.Sampler):
    """Adapts a :class:`PairBatchSampler` to datasets that take plain int indices."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __iter__(self):
        for keys in self.inner:
            yield [k[0] for k in keys]

    def __len__(self) -> int:
        return len(self.inner)


# ---------------------------------------------------------------------------------------------- trainer
class Trainer(RunDirectory):
    """Train ``model`` with ``method`` on ``dataset``, writing ``run_dir``.

    Parameters
    ----------
    model : any ``nn.Module`` (``model.config`` is stored in checkpoints when present).
    method : callable ``method(batch, model) -> {"loss": tensor, **float logs}`` (see :mod:`rawrcl.methods`).
    dataset : map-style dataset. Datasets with ``keyed = True`` (all :mod:`rawrcl.data` datasets) receive keys
        ``(image index, sample seed)``; others receive int indices. Items are dicts of tensors.
    run_dir : output folder.
    config : trainer options (:data:`TRAINER_DEFAULTS`) plus anything to record in ``config.json``
        (e.g. ``model``, ``method``, ``data``, ``command``).
    """

    def __init__(
        self,
        model: nn.Module,
        method: Callable,
        dataset,
        run_dir: str | os.PathLike,
        config: dict | None = None,
    ) -> None:
        self.model, self.method, self.dataset = model, method, dataset
        self.run_dir = Path(run_dir)
        self.config = {**TRAINER_DEFAULTS, **(config or {})}
        self.config["precision"] = _precision(self.config)  # one spelling (the old "amp" key is read)
        self.config.pop("amp", None)
        self.rank, self.world, self.local_rank = distributed_env()
        self.history: list[dict] = []
        self._restart = False  # --resume of a run that has no last.pt yet: started again

    # -- main loop
    def fit(self) -> dict:
        """Train to ``config["steps"]``; returns a summary dict (first/last loss, steps, throughput)."""
        cfg = self.config
        if self.world > 1 and not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and cfg["device"] in ("auto", "cuda") else "gloo"
            dist.init_process_group(backend)
            self._own_process_group = True
        device = select_device(cfg["device"], self.local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        steps, bs, seed = int(cfg["steps"]), int(cfg["batch_size"]), int(cfg["seed"])
        if steps < 0 or bs < 1:
            raise RawrclError("--steps must be ≥ 0 and --batch-size ≥ 1")
        if cfg.get("ema") is not None:
            _ema_decay(cfg["ema"])  # refused before the run directory is touched
        check_numbers(cfg)
        _precision(cfg)
        lr_schedule(float(cfg["lr"]), cfg.get("lr_schedule") or "constant", steps)  # refused early too

        lock = RunLock(self.run_dir) if self.is_main else None
        if lock is not None:
            lock.acquire()
        try:
            return self._fit(device, steps, bs, seed)
        finally:
            if lock is not None:
                lock.release()

    def _fit(self, device: torch.device, steps: int, bs: int, seed: int) -> dict:
        """:meth:`fit` once the options are checked and (on rank 0) the run directory is locked."""
        from rawrcl.data import PairBatchSampler, make_loader

        cfg = self.config
        resume = self._prepare_run_dir()
        if self.world > 1:
            dist.barrier()
        bare = unwrap(self.model)
        bare.to(device)
        channels_last = cfg["channels_last"] is True or (
            cfg["channels_last"] == "auto" and use_channels_last(device, training=True)
        )
        if channels_last:
            bare.to(memory_format=torch.channels_last)
        params = [p for p in bare.parameters() if p.requires_grad]
        if not params:
            raise RawrclError("the model has no trainable parameters")
        opt = torch.optim.Adam(params, lr=float(cfg["lr"]), betas=tuple(cfg["betas"]), eps=float(cfg["eps"]))
        amp_dtype = resolve_precision(_precision(cfg), device, training=True)
        scaler = (
            torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 and device.type == "cuda" else None
        )

        start = 0
        ema = None
        if resume is not None:
            ex = resume.get("extra", {})
            if cfg.get("ema") is not None and "train_weights" in ex:
                bare.load_state_dict(resume["state_dict"])  # the average, then the optimiser's weights
                ema = WeightEMA(bare, float(cfg["ema"]))
                bare.load_state_dict(ex["train_weights"])
            else:
                bare.load_state_dict(ex.get("train_weights", resume["state_dict"]))
            opt.load_state_dict(ex["optimizer"])
            if scaler is not None and "scaler" in ex:
                scaler.load_state_dict(ex["scaler"])
            start = int(ex["step"])
            if start > steps:  # its weights have trained further than this run would record
                raise RawrclError(
                    f"{self.run_dir}: the run is at step {start}, beyond --steps {steps}; give at least "
                    f"{start}, or start again with --force"
                )
            if int(ex.get("world_size", 1)) != self.world and self.is_main:
                log.warning(
                    "resuming a %s-rank run on %s ranks: batches differ from the original run",
                    ex.get("world_size", 1),
                    self.world,
                )
            _set_rng_state(ex["rng"])
            self._truncate_metrics(start)
            old = {}
            if (self.run_dir / "config.json").exists():
                old = json.loads((self.run_dir / "config.json").read_text(encoding="utf-8"))
            self._write_config({**old, "steps": steps, "resumed_from_step": start, **self._record()})
        else:
            init = self.ckpt_dir / "init.pt"
            if self._restart and init.exists():  # the restarted run begins from the very same weights
                bare.load_state_dict(read_checkpoint(init)["state_dict"])
            self._write_config(self._record())
            if self.is_main:
                self._save(init, 0, opt, scaler)
        if ema is None and cfg.get("ema") is not None:
            ema = WeightEMA(bare, float(cfg["ema"]))

        model: nn.Module = bare
        if cfg["compile"]:
            model = torch.compile(model)
        if self.world > 1:
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )

        sampler = PairBatchSampler(len(self.dataset), bs, seed, steps, start, self.rank, self.world)
        workers = cfg["num_workers"]
        if workers is None:
            workers = min(8, max((os.cpu_count() or 1) // self.world - 1, 0)) if device.type == "cuda" else 0
        batches = sampler if getattr(self.dataset, "keyed", False) else _KeyedIndices(sampler)
        loader = make_loader(
            self.dataset, batches, num_workers=int(workers), pin_memory=device.type == "cuda"
        )

        mode = progress_mode(cfg["progress"]) if self.is_main else "off"
        progress = Progress(mode, steps, start)

        metrics_path = self.run_dir / "metrics.jsonl"
        log_every, save_every, keep_every = (
            int(cfg["log_every"]),
            int(cfg["save_every"]),
            int(cfg["keep_every"]),
        )
        # 0 (or less) means "only at the end": logging and last.pt then happen at the final step only
        log_every = log_every if log_every > 0 else max(steps, 1)
        save_every = save_every if save_every > 0 else max(steps, 1)
        lr_at = lr_schedule(float(cfg["lr"]), cfg.get("lr_schedule") or "constant", steps)
        lr = lr_at(start)
        grad_clip = math.inf if cfg.get("grad_clip") is None else float(cfg["grad_clip"])
        t0 = time.perf_counter()
        t_last, n_last = t0, 0
        patches = 0
        first_loss = last_loss = None
        model.train()
        step = start
        with _stop_requests(self.world == 1) as stop:
            for batch in loader:
                torch.manual_seed(step_seed(seed, step, self.rank))
                batch = _to_device(batch, device, channels_last)
                with autocast(device, amp_dtype):
                    out = self.method(batch, model)
                loss = out["loss"]
                if not torch.isfinite(loss.detach()):
                    progress.close()
                    raise self._diverged(float(loss.detach()), step, save_every, opt, scaler, ema)
                lr = lr_at(step)
                for group in opt.param_groups:
                    group["lr"] = lr
                opt.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.unscale_(opt)
                    grad_norm = clip_grad_norm_(params, grad_clip)
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    grad_norm = clip_grad_norm_(params, grad_clip)
                    opt.step()
                step += 1
                if ema is not None:
                    ema.update(bare, step)
                n_crops = 2 * bs * self.world
                patches += n_crops
                n_last += n_crops
                loss_value = float(loss.detach())
                if first_loss is None:
                    first_loss = loss_value
                last_loss = loss_value
                if step % log_every == 0 or step == steps:
                    if self.world > 1:
                        t = torch.tensor([loss_value], device=device)
                        dist.all_reduce(t)
                        loss_mean = float(t) / self.world
                    now = time.perf_counter()
                    rec = {"step": step, "loss": loss_value, "grad_norm": float(grad_norm)}
                    rec.update({k: float(v) for k, v in out.items() if k != "loss"})
                    if self.world > 1:
                        rec["loss_all_ranks"] = loss_mean
                    rec.update(lr=lr, patches_per_s=n_last / max(now - t_last, 1e-9), elapsed_s=now - t0)
                    t_last, n_last = now, 0
                    self.history.append(rec)
                    if self.is_main:
                        self._append_metrics(metrics_path, rec)
                if self.is_main:
                    if step % save_every == 0 or step == steps:
                        self._save(self.ckpt_dir / "last.pt", step, opt, scaler, ema)
                    if keep_every and step % keep_every == 0:
                        self._save(self.ckpt_dir / f"step_{step:07d}.pt", step, opt, scaler, ema)
                progress.update(step, loss_value)
                if stop and step < steps:
                    if self.is_main and step % save_every != 0:
                        self._save(self.ckpt_dir / "last.pt", step, opt, scaler, ema)
                    progress.close()
                    raise TrainingInterrupted(self.run_dir, step, stop[0])
        progress.close()
        if self.world > 1:
            dist.barrier()
            if getattr(self, "_own_process_group", False):
                dist.destroy_process_group()
        elapsed = time.perf_counter() - t0
        return {
            "run_dir": str(self.run_dir),
            "steps": step,
            "start_step": start,
            "first_loss": first_loss,
            "last_loss": last_loss,
            "patches_per_s": patches / elapsed if elapsed > 0 else math.nan,
            "elapsed_s": elapsed,
            "device": str(device),
        }
