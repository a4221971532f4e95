"""The training engine: :class:`Trainer` (any method, any model) and :func:`pretrain` (``rawrcl pretrain``).

Run directory
-------------
- ``config.json``: everything needed to reproduce the run (model config, method options, data description,
  trainer options, seed, the command line, versions).
- ``metrics.jsonl``: one JSON object per logged step: ``step`` (completed optimiser steps), ``loss`` and the
  method's other logs, ``lr``, ``patches_per_s`` (crops through the model per second, all ranks),
  ``elapsed_s``.
- ``checkpoints/init.pt`` (weights before the first step, for ``rawrcl inspect``), ``checkpoints/last.pt``
  (every ``save_every`` steps and at the end) and ``checkpoints/step_NNNNNNN.pt`` every ``keep_every`` steps.
  With ``ema`` set (a decay, e.g. 0.999) the checkpoints' ``state_dict`` is the exponential moving average
  of the weights (:class:`WeightEMA`), so every consumer — eval, inference, fine-tuning, install — gets the
  averaged model; the optimiser's own weights travel in ``extra["train_weights"]`` for ``--resume``.
  Every file is written atomically (temp file + ``os.replace``), so a run killed at any instant leaves a
  consistent ``last.pt``. On SIGINT (Ctrl-C) or SIGTERM a single-process run finishes the current step,
  writes ``last.pt`` at that step and raises :class:`TrainingInterrupted` (the CLI prints one line and
  exits 130), so no step is lost; ``--resume`` continues from there.

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
import platform
import random
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.utils import clip_grad_norm_

from rawrcl import __version__
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.models.registry import read_checkpoint, save_checkpoint, unwrap
from rawrcl.noise import SYNTHETIC, parse_noise
from rawrcl.tasks import PRETEXT_TASKS, Task, get_task
from rawrcl.train.runlock import RunLock, check_unlocked

log = logging.getLogger("rawrcl.train")


class TrainingInterrupted(RawrclError):
    """Training stopped by SIGINT/SIGTERM after ``last.pt`` was written at ``step``."""

    exit_code = 130

    def __init__(self, run_dir: Path, step: int, signum: int) -> None:
        self.run_dir, self.step, self.signum = run_dir, step, signum
        super().__init__(
            f"{run_dir}: stopped by {signal.Signals(signum).name} at step {step}; "
            "checkpoints/last.pt is saved, continue with --resume"
        )


@contextmanager
def _stop_requests(enabled: bool) -> Iterator[list[int]]:
    """Catch SIGINT/SIGTERM for the duration: the returned list receives the signal numbers instead
    of the default action (only in the main thread of a single-process run; otherwise a no-op)."""
    got: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield got
        return
    sigs = [signal.SIGINT, signal.SIGTERM]
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


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
    "amp": "auto",  # "auto" (bf16/fp16 on CUDA, off elsewhere) | "bf16" | "fp16" | "off"
    "channels_last": "auto",  # "auto": on CUDA and CPU (oneDNN: +17-25 % steps/s on 2 threads), not MPS
    "compile": False,
    "num_workers": None,  # None: 0 on CPU, min(8, cpus per rank) on CUDA
    "log_every": 10,
    "save_every": 100,
    "keep_every": 1000,
    "resume": False,
    "force": False,
    "progress": None,  # None: when stderr is a TTY
}


# ---------------------------------------------------------------------------------------------- helpers
def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    return repr(obj)


def distributed_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment (0, 1, 0 when not distributed)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    return rank, world, local


def select_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """``"auto"``: CUDA (this rank's GPU), then MPS, then CPU; otherwise ``torch.device(name)``."""
    if name in (None, "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise RawrclError(f"--device {name!r} is not a valid torch device") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RawrclError(f"--device {name}: CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    return dev


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """Seed of torch's global RNG for ``step`` on ``rank``."""
    return int(np.random.default_rng([seed, step, rank, 17]).integers(0, 2**63 - 1))


def _rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "gauss": float(np_state[4]),
        },
        "python": json.dumps(random.getstate()),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    py = json.loads(state["python"])
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


def _ema_decay(decay) -> float:
    """``decay`` as a float in (0, 1); :class:`RawrclError` otherwise."""
    if not 0.0 < float(decay) < 1.0:
        raise RawrclError(f"--ema must lie in (0, 1) (a decay such as 0.999), got {decay}")
    return float(decay)


def lr_schedule(lr: float, kind: str, steps: int) -> Callable[[int], float]:
    """Learning rate at optimiser step ``t`` (0-based) of a ``steps``-step run: ``"constant"``, or
    ``"cosine"`` — from ``lr`` down to ``lr/100`` at the last step (a pure function of the step, so a
    resumed run follows the same curve)."""
    if kind == "constant":
        return lambda t: lr
    if kind == "cosine":
        return lambda t: lr * (0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * min(t, steps) / max(steps, 1))))
    raise RawrclError(f"--lr-schedule {kind!r}: expected constant or cosine")


def _check_numbers(cfg: dict) -> None:
    """Refuse a learning rate or gradient cap that is not a finite number ≥ 0 (e.g. ``--lr nan``)."""
    for key, option in (("lr", "--lr"), ("grad_clip", "--grad-clip")):
        value = cfg.get(key)
        if value is None and key == "grad_clip":
            continue
        try:
            ok = math.isfinite(float(value)) and float(value) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise RawrclError(f"{option} must be a finite number ≥ 0, got {value!r}")


class WeightEMA:
    """Exponential moving average of a model's floating-point parameters and buffers.

    After optimiser step ``t`` (1-based, counted over the whole run) the average moves by
    ``ema ← d·ema + (1−d)·w`` with ``d = min(decay, (1 + t) / (10 + t))``: the warm-up keeps the average
    from being dominated by the initial weights in short runs. Non-float entries are copied.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = _ema_decay(decay)
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        """Fold in the weights after optimiser step ``step`` (1-based)."""
        d = min(self.decay, (1.0 + step) / (10.0 + step))
        floats_e, floats_w = [], []
        for k, w in model.state_dict().items():
            e = self.state[k]
            if e.is_floating_point():
                floats_e.append(e)
                floats_w.append(w.detach())
            else:
                e.copy_(w)
        if floats_e:
            torch._foreach_lerp_(floats_e, floats_w, 1.0 - d)


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
class Trainer:
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
        self.rank, self.world, self.local_rank = distributed_env()
        self.history: list[dict] = []
        self._restart = False  # --resume of a run that has no last.pt yet: started again

    # -- paths
    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _prepare_run_dir(self) -> dict | None:
        """Check/clear the run dir; returns the checkpoint to resume from (or None)."""
        cfg = self.config
        existing = (self.run_dir / "config.json").exists() or (self.ckpt_dir / "last.pt").exists()
        if cfg["resume"]:
            last = self.ckpt_dir / "last.pt"
            if last.exists():
                return read_checkpoint(last)
            if not (self.run_dir / "config.json").exists():
                raise RawrclError(
                    f"{self.run_dir}: --resume given but there is no run to resume "
                    "(no config.json, no checkpoints/last.pt)"
                )
            # stopped before its first last.pt (killed early, NaN loss, full disk): start it again
            self._restart = True
            if self.is_main:
                warnings.warn(
                    f"{self.run_dir}: no checkpoints/last.pt yet; starting the run again from its saved "
                    "configuration"
                    + (" and checkpoints/init.pt" if (self.ckpt_dir / "init.pt").exists() else ""),
                    stacklevel=3,
                )
                (self.run_dir / "metrics.jsonl").unlink(missing_ok=True)
            return None
        if existing and not cfg["force"]:
            raise RawrclError(
                f"{self.run_dir}: run directory already holds a run; use --resume to continue or --force "
                "to overwrite"
            )
        if existing and cfg["force"] and self.is_main:
            for name in ("config.json", "metrics.jsonl"):
                (self.run_dir / name).unlink(missing_ok=True)
            shutil.rmtree(self.ckpt_dir, ignore_errors=True)
        return None

    def _write_config(self, extra: dict) -> None:
        if not self.is_main:
            return
        record = {k: v for k, v in self.config.items() if k not in ("resume", "force", "progress")}
        record.update(extra)
        record.setdefault("command", " ".join(sys.argv))
        record["versions"] = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
        }
        record["versions"]["rawrcl"] = __version__
        atomic_write_text(self.run_dir / "config.json", json.dumps(_jsonable(record), indent=2) + "\n")

    def _truncate_metrics(self, step: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not self.is_main or not path.exists():
            return
        keep = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line)
            except json.JSONDecodeError:
                break  # a torn last line from a killed run
        atomic_write_text(path, "".join(x + "\n" for x in keep))

    def _save(self, path: Path, step: int, opt, scaler, ema: WeightEMA | None = None) -> None:
        extra = {
            "step": step,
            "optimizer": opt.state_dict(),
            "rng": _rng_state(),
            "sampler": {"seed": int(self.config["seed"]), "step": step},
            "world_size": self.world,
        }
        if scaler is not None:
            extra["scaler"] = scaler.state_dict()
        bare = unwrap(self.model)
        if ema is None:
            save_checkpoint(path, bare, getattr(bare, "config", None), extra)
            return
        # one CPU copy (never a view of the model) serves as the saved and the restored weights
        trained = {k: v.detach().to("cpu", copy=True) for k, v in bare.state_dict().items()}
        extra["train_weights"] = trained
        extra["ema"] = ema.decay
        try:  # the checkpoint's state_dict is the average; the optimiser's weights go back afterwards
            bare.load_state_dict(ema.state)
            save_checkpoint(path, bare, getattr(bare, "config", None), extra)
        finally:
            bare.load_state_dict(trained)

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
        _check_numbers(cfg)
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
            cfg["channels_last"] == "auto" and device.type in ("cuda", "cpu")
        )
        if channels_last:
            bare.to(memory_format=torch.channels_last)
        params = [p for p in bare.parameters() if p.requires_grad]
        if not params:
            raise RawrclError("the model has no trainable parameters")
        opt = torch.optim.Adam(params, lr=float(cfg["lr"]), betas=tuple(cfg["betas"]), eps=float(cfg["eps"]))
        amp = cfg["amp"]
        if amp == "auto":
            amp = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if device.type == "cuda" else "off"
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
        scaler = torch.amp.GradScaler("cuda") if amp == "fp16" and device.type == "cuda" else None

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

        progress = cfg["progress"]
        if progress is None:
            progress = sys.stderr.isatty()
        bar = None
        if progress and self.is_main and steps > start:
            from tqdm import tqdm

            bar = tqdm(total=steps, initial=start, desc="train", dynamic_ncols=True)

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
                ctx = nullcontext() if amp_dtype is None else torch.autocast(device.type, dtype=amp_dtype)
                with ctx:
                    out = self.method(batch, model)
                loss = out["loss"]
                if not torch.isfinite(loss.detach()):
                    if bar is not None:
                        bar.close()
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
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss_value:.4g}")
                if stop and step < steps:
                    if self.is_main and step % save_every != 0:
                        self._save(self.ckpt_dir / "last.pt", step, opt, scaler, ema)
                    if bar is not None:
                        bar.close()
                    raise TrainingInterrupted(self.run_dir, step, stop[0])
        if bar is not None:
            bar.close()
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

    def _append_metrics(self, path: Path, rec: dict) -> None:
        """Append one line to ``metrics.jsonl``; a failed write (disk full) ends the run with one line."""
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")
        except OSError as exc:
            raise RawrclError(
                f"{path}: cannot write ({exc.strerror or exc}); stopped at step {rec['step']}, continue with "
                "--resume once there is space (checkpoints/last.pt is intact)"
            ) from None

    def _diverged(self, loss: float, step: int, save_every: int, opt, scaler, ema) -> RawrclError:
        """The error for a non-finite loss at step ``step + 1``. The weights after ``step`` steps are saved as
        ``last.pt`` first when they are finite and not saved yet, so the run can be resumed from there."""
        last = self.ckpt_dir / "last.pt"
        weights = unwrap(self.model).parameters()
        if self.is_main and step % save_every and all(bool(torch.isfinite(p).all()) for p in weights):
            self._save(last, step, opt, scaler, ema)
        if last.exists():
            held = read_checkpoint(last).get("extra", {}).get("step", "?")
            where = f"checkpoints/last.pt (step {held}) is the last good state"
        else:
            where = "no checkpoint after init.pt; --resume starts again"
        return RawrclError(
            f"{self.run_dir}: loss became {loss} at step {step + 1}; stopped, {where} (try a lower --lr)"
        )

    def _record(self) -> dict:
        """What config.json records besides the trainer options."""
        rec: dict = {"world_size": self.world}
        bare = unwrap(self.model)
        if hasattr(bare, "config"):
            rec["model"] = bare.config
        if hasattr(self.method, "config") and callable(self.method.config):
            rec["method"] = self.method.config()
        if hasattr(self.dataset, "describe"):
            rec["data"] = self.dataset.describe()
        return rec


def load_resume_config(run_dir: str | os.PathLike) -> dict:
    """The ``config.json`` of an existing run (RawrclError when missing)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise RawrclError(f"{run_dir}: not a rawrcl run directory (no config.json)")
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------- pretrain
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
