"""The frame-to-frame fine-tune of a two-stage RAW model on a burst (:mod:`rawrcl.methods.f2f` on
:class:`rawrcl.data.frame_pairs.FramePairs`): the training loop of ``rawrcl adapt --method burst``'s second
stage (:mod:`rawrcl.train.adapt_burst`) and of ``benchmarks/burst_f2f.py``.

Both stages of the model are trained through its JDD output, with ``rawrcl adapt``'s guards (``anchor``,
``mix``: :class:`rawrcl.train.adapt_objective.Guarded`), Adam at a constant learning rate and, with ``ema``,
a weight average (what is scored and kept). With a run directory the loop writes ``last.pt`` atomically every
``save_every`` steps, at the end and when SIGINT/SIGTERM stops it (:class:`TrainingInterrupted`): the
average's weights as an ordinary model file (``state_dict``), and in ``extra`` the optimiser's own weights,
Adam's state, the step and the random states, so ``resume`` continues where it stopped. Values in [0, 1]
after black/white level.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from rawrcl.data.frame_pairs import FramePairs, colour_map
from rawrcl.errors import RawrclError
from rawrcl.methods.f2f import f2f_loss, predict_samples
from rawrcl.models.registry import read_checkpoint, save_checkpoint
from rawrcl.train.adapt_objective import Guarded
from rawrcl.train.progress import Progress
from rawrcl.train.signals import TrainingInterrupted, _stop_requests

#: the file of a frame-to-frame run directory
LAST = "last.pt"


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def train_f2f(
    full: nn.Module,
    data: FramePairs,
    steps: int,
    *,
    lr: float = 3e-5,
    batch: int = 4,
    ema: float = 0.0,
    anchor: float = 0.0,
    mix: float = 0.0,
    mix_fn: Callable[[np.random.Generator], dict] | None = None,
    near: float = 0.5,
    seed: int = 0,
    run: str | Path | None = None,
    save_every: int = 100,
    resume: bool = False,
    score: Callable[[], dict] | None = None,
    every: int = 50,
    progress: str = "off",
    log: Callable[[str], None] = lambda m: None,
) -> list[dict]:
    """Fine-tune ``full`` (a two-stage RAW model, :class:`rawrcl.models.compose.DenoiseThenDemosaic` with a
    JDD stage; trained in place, on its device) for ``steps`` steps of ``batch`` frame pairs of ``data``.

    Loss per input crop: :func:`f2f_loss` of its JDD RGB at the other frames' samples (``near`` as there),
    divided by the targets' mean noise variance when guarded (``anchor`` or ``mix`` > 0; else by 1e-3);
    guards: ``anchor``·Σ(θ − θ₀)² (θ₀: ``full``'s weights on entry) and ``mix``·(the RAW output's MSE on
    ``batch`` crops of ``mix_fn``, each normalised by its mean noise variance). Gradients clipped at norm 1.
    ``ema`` > 0: a weight average with that decay; ``full`` ends holding it. ``run``: checkpoints (module
    docstring); ``resume`` continues its ``last.pt``. ``score()`` (of the average) at step 0, every ``every``
    steps and at the end gives the rows' scores (None: no scoring). ``progress``: ``"bar"``, ``"lines"``,
    ``"off"`` (:class:`rawrcl.train.progress.Progress`).
    Returns rows (every ``every`` steps with ``score``, else every ``save_every``; a resumed run's earlier
    rows first): step, loss and mask share (means since the last row), seconds since the loop began in this
    process, scores."""
    device = next(full.parameters()).device
    jdd = full.with_output("jdd")
    named = [(n, p) for n, p in full.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    opt = torch.optim.Adam(params, lr=lr)
    avg = [p.detach().clone() for p in params]
    col = colour_map(data.crop).to(device)
    guarded = anchor > 0 or mix > 0
    guard = (
        Guarded("f2f", lambda b, _: {"loss": b["f2f"]}, full.state_dict(), anchor, mix) if guarded else None
    )
    rng = np.random.default_rng(seed + 1)  # the mix crops' draws
    run = Path(run) if run is not None else None
    step0, rows, sums = 0, [], [0.0, 0.0, 0]
    if resume and run is not None and (run / LAST).is_file():
        ck = read_checkpoint(run / LAST)
        ex = ck["extra"]["f2f"]
        full.load_state_dict(ex["train_weights"])
        for (n, _), e in zip(named, avg, strict=True):
            e.copy_(ck["state_dict"][n])
        opt.load_state_dict(ex["optimizer"])
        data.rng.bit_generator.state = json.loads(ex["data_rng"])
        rng.bit_generator.state = json.loads(ex["mix_rng"])
        torch.set_rng_state(ex["torch_rng"])
        step0, rows = int(ex["step"]), json.loads(ex["rows"])
        if step0 > steps:  # its weights have trained further than this run would record
            raise RawrclError(
                f"{run}: the frame-to-frame fine-tune is at step {step0}, beyond --burst-steps {steps}; give "
                f"at least {step0}, or start again with --force"
            )
        sums = json.loads(ex.get("sums", "[0, 0, 0]"))  # the running row since the last one written
        log(f"frame-to-frame: resuming at step {step0} of {steps}")

    def swap() -> None:
        for p, e in zip(params, avg, strict=True):
            tmp = p.detach().clone()
            p.data.copy_(e)
            e.copy_(tmp)

    def scored() -> dict:
        if score is None:
            return {}
        full.eval()
        if ema > 0:
            swap()
        r = score()
        if ema > 0:
            swap()
        return r

    def save(step: int) -> None:
        if run is None:
            return
        trained = {k: v.detach().clone() for k, v in full.state_dict().items()}
        shown = dict(trained)
        if ema > 0:
            shown.update({n: e.detach().clone() for (n, _), e in zip(named, avg, strict=True)})
        extra = {
            "f2f": {
                "step": step,
                "steps": steps,
                "train_weights": trained,
                "optimizer": opt.state_dict(),
                "data_rng": json.dumps(data.rng.bit_generator.state),
                "mix_rng": json.dumps(rng.bit_generator.state),
                "torch_rng": torch.get_rng_state(),
                "rows": json.dumps(rows),
                "sums": json.dumps([acc, share, n_acc]),
            }
        }
        full.load_state_dict(shown)
        try:
            save_checkpoint(run / LAST, full, None, extra)
        finally:
            full.load_state_dict(trained)

    if step0 == 0:
        rows = [{"step": 0, **scored()}] if score is not None else []
        if rows:
            log(f"step 0: {rows[-1]}")
    if run is not None:
        run.mkdir(parents=True, exist_ok=True)
    bar = Progress(progress, steps, step0, desc="frame-to-frame")
    t, (acc, share, n_acc) = time.perf_counter(), sums
    with _stop_requests(run is not None) as stop:
        for s in range(step0 + 1, steps + 1):
            jdd.train()
            loss = torch.zeros((), device=device)
            for _ in range(batch):
                b = _to(data.draw(), device)
                rgb = jdd(b["input"][None], b["noise"][None])
                lo, sh, var = f2f_loss(predict_samples(rgb, b["grid"], col), b, col, near=near)
                lo = lo / max(var, 1e-10) if guarded else lo / 1e-3  # guarded: in noise variances, as the mix
                loss, share = loss + lo / batch, share + sh / batch
            if guard is not None:
                crops = {"f2f": loss}
                if mix > 0 and mix_fn is not None:
                    sup = [mix_fn(rng) for _ in range(batch)]
                    for key, name in (("input", "input"), ("target", "target"), ("noise", "sup_noise")):
                        crops[name] = torch.stack([torch.as_tensor(c[key]).float() for c in sup]).to(device)
                loss = guard(crops, full)["loss"]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            with torch.no_grad():
                for p, e in zip(params, avg, strict=True):
                    e.mul_(ema).add_(p.detach(), alpha=1 - ema)
            acc, n_acc = acc + float(loss.detach()), n_acc + 1
            bar.update(s, float(loss.detach()))
            if s % (every if score is not None else save_every) == 0 or s == steps:
                row = {"step": s, "loss": round(acc / n_acc, 4), "mask": round(share / n_acc, 3)}
                rows.append({**row, "secs": round(time.perf_counter() - t, 1), **scored()})
                acc = share = 0.0
                n_acc = 0
                if score is not None:
                    log(f"step {s}: {rows[-1]}")
            if s % save_every == 0 or s == steps or stop:
                save(s)
            if stop:
                bar.close()
                raise TrainingInterrupted(run, s, stop[0], saved=run / LAST)
    bar.close()
    if ema > 0:  # end holding the average
        swap()
    return rows


__all__ = ["LAST", "train_f2f"]
