"""What a training step depends on besides the batch: the learning-rate schedule, the weight EMA, the
per-step seeds and the saved RNG states (so a resumed run continues the uninterrupted one exactly)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import numpy as np
import torch
import torch.nn as nn

from rawrcl.errors import RawrclError


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
