"""The run directory of a training run: what :class:`rawrcl.train.Trainer` writes and reads back.

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
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from rawrcl import __version__
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.models.registry import read_checkpoint, save_checkpoint, unwrap
from rawrcl.train.schedule import WeightEMA, _rng_state


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


def load_resume_config(run_dir: str | os.PathLike) -> dict:
    """The ``config.json`` of an existing run (RawrclError when missing)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise RawrclError(f"{run_dir}: not a rawrcl run directory (no config.json)")
    return json.loads(path.read_text(encoding="utf-8"))


class RunDirectory:
    """The run-directory half of :class:`~rawrcl.train.Trainer` (a mixin): checking/clearing the folder,
    ``config.json``, ``metrics.jsonl`` and the checkpoints. Expects ``run_dir``, ``config``, ``model``,
    ``method``, ``dataset``, ``rank``, ``world`` and ``_restart`` on the instance."""

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
