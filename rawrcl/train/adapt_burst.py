"""``rawrcl adapt --method burst``: for a folder that is a burst (frames of one static scene), the blind-spot
composite of ``--method blindspot`` beside a frame-to-frame fine-tune of the start, with nested SURE weights.

Stages (each resumable; docs/adaptation.md, "Stop 106", "Stop 107" measured them):

1. ``RUN/blindspot/``: :func:`rawrcl.train.adapt_blindspot.adapt_blindspot` on the files as they are — its
   own run, kept composite A (or the start, when its keep-or-discard kept the start). ``blindspot_run``: an
   earlier ``--method blindspot`` run on the same files from the same start is used instead.
2. ``RUN/f2f/``: the start (a two-stage RAW model: both stages) fine-tuned with the frame-to-frame objective
   (:func:`rawrcl.train.adapt_f2f.train_f2f` on :class:`rawrcl.data.frame_pairs.FramePairs`; the frames
   registered by ECC, refused in one line when they do not register) at the settings :data:`F2F`, for
   ``burst_steps`` steps; the held-out bands of stage 1 are cut off every frame, so no held-out sample
   trains it. Its weight average F′.
3. Keep-or-discard over the start, A and :class:`~rawrcl.models.beside.WithFineTune` (A, F′) — each as
   ``rawrcl denoise`` runs it, with SURE weights — by the burst signal (:mod:`rawrcl.train.burst_signal`: each
   candidate's output on every frame's held-out band against the other frames' native samples; it ranked the
   candidates of a synthetic burst as their truth did, where held-out SURE did not: docs/adaptation.md, "Stop
   109") among those within ``forget_tol`` on the forgetting check (A's from stage 1); by held-out SURE
   (:func:`rawrcl.train.adapt_signal.keep_or_discard`) when the burst gives fewer than
   :data:`~rawrcl.train.burst_signal.MIN_SAMPLES` compared samples. The winner is ``RUN/denoise.pt``
   (:data:`~rawrcl.models.loading.RUN_RAW`), which ``rawrcl denoise --model RUN`` and ``rawrcl eval RUN
   --burst`` run, and ``RUN/adapt.json`` the summary. F′ alone is not a candidate: it forgets (stop 107's
   check, worst −0.35 dB), the composite's outer SURE weights drop it where it does.

   Then the weight of GAT+BM3D averaged into the kept model's output, by the same signal
   (:func:`fusion_stage`; 0 when the signal had too few samples or the files have row noise). It is
   ``adapt.json``'s ``fuse_bm3d``, stored in the checkpoint: ``rawrcl denoise --model RUN`` and ``rawrcl eval
   RUN --burst`` fuse at it unless told ``--fuse-bm3d`` (docs/adaptation.md, "Stop 110").
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch.nn as nn

from rawrcl.data.frame_pairs import FramePairs, pairwise_warps
from rawrcl.data.noisy_crops import NoiseFile
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.models.beside import WithFineTune
from rawrcl.models.loading import RUN_RAW
from rawrcl.models.registry import load_checkpoint, read_checkpoint, save_checkpoint
from rawrcl.models.shrink import maybe_shrink
from rawrcl.noise import with_row_variance
from rawrcl.train.adapt_blindspot import adapt_blindspot, blindspot_crops, start_raw_model
from rawrcl.train.adapt_f2f import LAST, train_f2f
from rawrcl.train.adapt_signal import (
    adapt_summary,
    check_crops,
    check_scores,
    clear_results,
    for_scoring,
    forget_row,
    keep_or_discard,
)
from rawrcl.train.burst_signal import (
    FUSE_GRID,
    MIN_SAMPLES,
    NativePairs,
    burst_scores,
    choose_fusion,
    fusion_scores,
)
from rawrcl.train.config import AdaptConfig
from rawrcl.train.signals import TrainingInterrupted

#: the frame-to-frame fine-tune's settings (stop 106's F′, docs/adaptation.md): Adam lr, input crops per step
#: (each against every other frame), target block (mosaic px), weight average, the guards (``anchor``, ``mix``
#: with ``mix_zoom`` of the mix crops enlarged, ``mix_own`` of them with the files' own noise)
F2F = {
    "lr": 3e-5,
    "batch": 4,
    "crop": 96,
    "ema": 0.995,
    "anchor": 0.05,
    "mix": 1.0,
    "mix_zoom": 0.8,
    "mix_own": 0.5,
}
#: frames a burst needs at least (the frame-to-frame objective pairs each with the others)
MIN_FRAMES = 3
#: the run folder's stage folders: stage 1's blind-spot run, stage 2's fine-tune (its ``last.pt``)
BLINDSPOT_DIR, F2F_DIR = "blindspot", "f2f"
#: steps between two ``RUN/f2f/last.pt``
F2F_SAVE_EVERY = 100
#: the three candidates of stage 3, by the row order of the keep-or-discard table
NAMES = ("start", "blind-spot composite", "blind-spot composite + frame-to-frame fine-tune")


def burst_pairs(nfiles: list[NoiseFile], bands: list[int], crop: int, seed: int, say: Callable) -> FramePairs:
    """The frame pairs of a burst folder: every file registered to the first (ECC affine on the packed
    greens), each cut at its first held-out packed row ``bands[i]``. Refused in one line when the folder
    has fewer than :data:`MIN_FRAMES` files, files of different sizes, copies of one frame, or a frame that
    does not register."""
    if len(nfiles) < MIN_FRAMES:
        raise RawrclError(
            f"--method burst needs a burst: at least {MIN_FRAMES} frames of one static scene, "
            f"got {len(nfiles)}"
        )
    shapes = {f.packed.shape for f in nfiles}
    if len(shapes) > 1:
        raise RawrclError(
            f"--method burst needs a burst: files of one size, got {len(shapes)} sizes "
            f"({', '.join(f'{2 * s[1]}×{2 * s[2]}' for s in sorted(shapes))})"
        )
    seen: dict[str, str] = {}
    for f in nfiles:
        if f.digest in seen:  # its noise is the other's: no independent draw to learn or score with
            raise RawrclError(
                f"--method burst: {f.name} is a copy of {seen[f.digest]} (the same values); a burst's "
                "frames each carry their own noise"
            )
        seen[f.digest] = f.name
    packed = [np.ascontiguousarray(f.packed, dtype=np.float32) for f in nfiles]
    say(f"registering {len(packed)} frames to {nfiles[0].name} (ECC affine on the packed greens)")
    try:
        warps = pairwise_warps(packed, say)
    except RawrclError as e:
        raise RawrclError(f"--method burst: the files do not register as one static scene ({e})") from None
    cut = [p[:, :b] for p, b in zip(packed, bands, strict=True)]
    return FramePairs(cut, [f.noise for f in nfiles], warps, crop=crop, seed=seed)


@contextmanager
def _resumed_here(out: Path) -> Iterator[None]:
    """A stage stopped by SIGINT/SIGTERM names the run to resume, ``out``, not its stage folder."""
    try:
        yield
    except TrainingInterrupted as e:
        raise TrainingInterrupted(out, e.step, e.signum, saved=e.saved) from None


def two_stage_start(start: nn.Module, src: str) -> nn.Module:
    """A float32 train-mode copy of ``start`` to fine-tune, refused in one line unless a two-stage RAW model
    with a JDD stage (the shipped RAW default's kind): the objective reads its JDD output."""
    from rawrcl.models.compose import DenoiseThenDemosaic

    if not (
        isinstance(start, DenoiseThenDemosaic) and start.output == "raw" and start.demosaicker is not None
    ):
        raise RawrclError(
            f"{src}: --method burst fine-tunes a two-stage RAW model through its JDD output (the shipped RAW "
            "default's kind)"
        )
    return copy.deepcopy(start).float().train().requires_grad_(True)


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    pa, pb = Path(a), Path(b)
    if not (pa.is_file() and pb.is_file()):
        return False
    if pa.resolve() == pb.resolve():
        return True
    return hashlib.sha256(pa.read_bytes()).digest() == hashlib.sha256(pb.read_bytes()).digest()


def blindspot_summary(run: str | os.PathLike) -> dict:
    """``run/adapt.json`` of a finished ``--method blindspot`` run, refused in one line if it is not one."""
    path = Path(run) / "adapt.json"
    if not path.is_file():
        raise RawrclError(f"{run}: not a finished rawrcl adapt run (no adapt.json)")
    s = json.loads(path.read_text())
    if s.get("method") != "blindspot" or not s.get("raw_checkpoint"):
        raise RawrclError(f"{run}: not a --method blindspot run (method {s.get('method')!r})")
    return s


def reuse_blindspot(run: str | os.PathLike, nfiles: list[NoiseFile], src: str) -> dict:
    """The summary of an earlier ``--method blindspot`` run to serve as stage 1, refused in one line unless
    it finished, on these files (names and sizes; and values, where the run recorded their digests), from
    the same start, with a readable checkpoint (read now, not after the fine-tune)."""
    s = blindspot_summary(run)
    theirs = sorted((f["file"], tuple(f["shape"])) for f in s.get("files", []))
    ours = sorted((f.name, tuple(f.packed.shape)) for f in nfiles)
    if theirs != ours:
        odd = sorted(set(theirs) ^ set(ours))[0]
        size = f"{2 * odd[1][1]}×{2 * odd[1][2]} px"
        where = "only there" if odd in theirs else "only here"
        raise RawrclError(f"{run}: adapted to other files than these ({odd[0]}, {size}, {where})")
    digests = {f["file"]: f["digest"] for f in s.get("files", []) if f.get("digest")}
    for f in nfiles:  # runs written before stop 114 record no digests: names and sizes only
        if f.name in digests and digests[f.name] != f.digest:
            raise RawrclError(f"{run}: adapted to another {f.name} than this one (its values differ)")
    if not _same_file(s.get("source", ""), src):
        raise RawrclError(f"{run}: adapted from {s.get('source')}, not from {src}")
    ck = Path(s["raw_checkpoint"])
    if not ck.is_file():  # the run folder was moved: its own denoise.pt
        ck = Path(run) / RUN_RAW
    read_checkpoint(ck)  # refused in one line now when unreadable
    return {**s, "raw_checkpoint": str(ck), "run_dir": str(run)}


def stage_row(a_sum: dict) -> dict:
    """The forgetting check of stage 1's kept composite, from its summary's keep-or-discard table (scored
    there against the same start on the same check: not scored again)."""
    row = next(r for r in a_sum["held_out"] if r["step"] == a_sum["selected_step"])
    return {"forget_db": row["forget_db"], "forget_at": row["forget_at"], "forget_from": "stage 1"}


def choose_by_burst(
    models: Sequence[nn.Module],
    signal: Sequence[dict],
    labels: Sequence[int],
    a_row: dict | None,
    c: AdaptConfig,
    say: Callable[[str], None],
) -> tuple[list[dict], dict]:
    """Stage 3's table and choice: each candidate's burst signal (:func:`rawrcl.train.burst_signal.burst_gain`
    rows ``signal``, the start first) and forgetting check against the start (the blind-spot composite's
    ``a_row`` from stage 1 when given, the others scored here, the last in full); the lowest ``burst`` among
    the start and the candidates within ``c.forget_tol`` dB on the check."""
    checks = check_crops()
    base = check_scores(models[0], checks)
    table = []
    for k, (model, sig, step) in enumerate(zip(models, signal, labels, strict=True)):
        row = {"step": step, **{key: _rounded(v) for key, v in sig.items()}}
        if k == 0:
            row.update(forget_row(base, base))
        elif k == 1 and a_row is not None:
            row.update(a_row)
        else:
            last = k == len(models) - 1
            row.update(forget_row(check_scores(model, checks, None if last else base, c.forget_tol), base))
        table.append(row)
        gain = f", {sig['burst_gain_db']:+.3f} ± {sig['burst_gain_se_db']:.3f} dB vs start" if k else ""
        say(
            f"burst signal step {step}: {sig['burst']:.4g}{gain}; forgetting check: worst "
            f"{row['forget_db']:+.2f} dB ({row['forget_at']})"
        )
    allowed = [r for r in table if r["step"] == 0 or r["forget_db"] >= -c.forget_tol]
    return table, min(allowed, key=lambda r: (r["burst"], r["step"]))


def fusion_stage(
    kept: nn.Module,
    start: nn.Module,
    nfiles: Sequence[NoiseFile],
    packed: Sequence[np.ndarray],
    noise: Sequence,
    warps: Sequence[Sequence[np.ndarray]],
    bands: Sequence[int],
    say: Callable[[str], None],
    outputs: Sequence[np.ndarray] | None = None,
    pairs: Sequence[NativePairs] | None = None,
) -> tuple[float, list[dict]]:
    """(the weight of GAT+BM3D to average into ``kept``'s output, the burst signal's rows per weight): the
    rows of :func:`rawrcl.train.burst_signal.fusion_scores` on the frames' held-out bands (``start`` picks the
    samples, as in stage 3's choice; ``packed`` the files' packed frames; ``outputs`` ``kept``'s band
    outputs and ``pairs`` the compared samples when stage 3 made them), the weight
    :func:`~rawrcl.train.burst_signal.choose_fusion`'s. Files
    with row noise get 0: their network runs on de-banded rows, GAT+BM3D would not."""
    if any(f.row > 0 for f in nfiles):
        say("GAT+BM3D's weight: 0 (files with row noise: the model runs on de-banded rows, BM3D would not)")
        return 0.0, []
    grid = ", ".join(f"{w:g}" for w in FUSE_GRID)
    say(f"GAT+BM3D's weight: the burst signal of the kept model averaged with GAT+BM3D, weights {grid}")
    rows = fusion_scores(kept, start, packed, noise, warps, bands, outputs=outputs, pairs=pairs)
    for r in rows[1:]:
        gain, se = r["burst_gain_db"], r["burst_gain_se_db"]
        text = f"{gain:+.3f} ± {se:.3f} dB vs none" if math.isfinite(gain) else "no dB scale"
        say(f"  weight {r['fuse_bm3d']:g}: {text}")
    w = choose_fusion(rows)["fuse_bm3d"]
    say(
        f"GAT+BM3D's weight: {w:g} (the smallest within one standard error of the best); rawrcl denoise "
        "--model RUN fuses at it, --fuse-bm3d 0 turns it off"
    )
    return w, [{k: _rounded(v) for k, v in r.items()} for r in rows]


def _rounded(v: float | int) -> float | int | None:
    if isinstance(v, int):
        return v
    return float(f"{v:.6g}") if math.isfinite(v) else None


def adapt_burst(
    nfiles: list[NoiseFile],
    out: Path,
    c: AdaptConfig,
    source: str | os.PathLike | nn.Module | None,
    resume: bool,
    force: bool,
    progress: bool | None,
    say: Callable[[str], None],
    blindspot_run: str | os.PathLike | None = None,
) -> dict:
    """The three stages (module docstring) on the burst ``nfiles`` into ``out``; returns the summary written
    to ``out/adapt.json`` (the keys of :func:`rawrcl.train.adapt.adapt`'s, with ``stages``)."""
    from rawrcl.train.adapt_objective import synthetic_mix
    from rawrcl.train.progress import progress_mode
    from rawrcl.train.runlock import RunLock

    start, _, _, src = start_raw_model(source)
    fine = two_stage_start(start, src)
    crops = blindspot_crops(nfiles, c.crop, c.seed)  # stage 1's: its held-out bands and crops
    pairs = burst_pairs(nfiles, crops.bands, F2F["crop"], c.seed, say)  # refuses before any training
    if resume and blindspot_run is None and (out / "config.json").is_file():
        blindspot_run = json.loads((out / "config.json").read_text()).get("blindspot_run")
    reused = reuse_blindspot(blindspot_run, nfiles, src) if blindspot_run is not None else None
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out), _resumed_here(out):
        cfg = {"run_config": c.to_dict(), "method": "burst", "source": src, "f2f": F2F}
        if blindspot_run is not None:
            cfg["blindspot_run"] = str(blindspot_run)
        if not resume:  # the results written again at the end; a reused run in this folder keeps its own
            (out / F2F_DIR / LAST).unlink(missing_ok=True)
            inside = reused is not None and Path(blindspot_run).resolve() == (out / BLINDSPOT_DIR).resolve()
            clear_results(out, () if inside else (BLINDSPOT_DIR,))
        atomic_write_text(out / "config.json", json.dumps(cfg, indent=2) + "\n")

        # -- stage 1: the blind-spot composite
        one = out / BLINDSPOT_DIR
        if reused is not None:
            a_sum = reused
            say(f"stage 1 of 3: the blind-spot run {blindspot_run} ({a_sum['verdict']})")
        elif resume and (one / "adapt.json").is_file():
            a_sum = json.loads((one / "adapt.json").read_text())
            say(f"stage 1 of 3: done ({a_sum['verdict']})")
        else:
            say("stage 1 of 3: the blind-spot network (--method blindspot)")
            bs = dataclasses.replace(c, method="blindspot")
            again = resume and (one / "config.json").is_file()
            a_sum = adapt_blindspot(nfiles, one, bs, source, again, force and not again, progress, say)

        # -- stage 2: the frame-to-frame fine-tune of the start
        say(f"stage 2 of 3: the frame-to-frame fine-tune of the start ({c.burst_steps} steps)")
        mix_fn = synthetic_mix(F2F["crop"], nfiles, F2F["mix_own"], zoom=F2F["mix_zoom"])
        opts = {k: F2F[k] for k in ("lr", "batch", "ema", "anchor", "mix")}
        rows = train_f2f(
            fine,
            pairs,
            c.burst_steps,
            mix_fn=mix_fn,
            seed=c.seed,
            run=out / F2F_DIR,
            save_every=F2F_SAVE_EVERY,
            resume=resume,
            progress=progress_mode(progress),
            log=say,
            **opts,
        )
        fine.eval()

        # -- stage 3: keep or discard among the start, A and A beside F'
        held: list[dict] = []  # held-out SURE's crops, only for the fallback
        a_kept = a_sum["selected_step"] != 0
        slot = load_checkpoint(a_sum["raw_checkpoint"])[0].float().eval() if a_kept else start
        models = [start] + ([slot] if a_kept else []) + [WithFineTune(slot, fine)]
        names = list(NAMES) if a_kept else [NAMES[0], NAMES[2]]
        labels = [0] + ([c.steps] if a_kept else []) + [c.steps + c.burst_steps]
        say("stage 3 of 3: the burst signal on every frame's held-out band (docs/adaptation.md, Stop 109)")
        scored = [for_scoring(maybe_shrink(m, True)) for m in models]
        packed = [np.ascontiguousarray(f.packed, dtype=np.float32) for f in nfiles]
        # each file told its noise as the held-out scores tell it (row noise as a third row when estimated)
        noise = [with_row_variance(f.noise[None], f.row)[0] if f.row > 0 else f.noise for f in nfiles]
        outs: list[list[np.ndarray]] = []  # each candidate's band outputs, again for the fusion stage
        compared: list[NativePairs] = []  # and the samples they were compared with
        signal = burst_scores(
            scored, packed, noise, pairs.warps, crops.bands, say, names, MIN_SAMPLES, outs, compared
        )
        if len(signal) == len(models):
            a_row = stage_row(a_sum) if a_kept else None
            table, best = choose_by_burst(scored, signal, labels, a_row, c, say)
        else:
            say(
                f"burst signal: {signal[0]['burst_samples']} samples, fewer than {MIN_SAMPLES} (the frames' "
                "registrations land near one another's samples too rarely); choosing by held-out SURE"
            )
            cands = [(s, None) for s in labels]
            held = crops.held_out(c.held_out)

            def model_at(step: int, _: Path | None) -> nn.Module:
                return scored[labels.index(step)]

            table, best = keep_or_discard(cands, model_at, held, c, say)
        for row, name in zip(table, names, strict=True):
            row["model"] = name
        kept = models[labels.index(best["step"])]
        fuse, fusion = 0.0, []
        if len(signal) == len(models):
            k = labels.index(best["step"])
            fuse, fusion = fusion_stage(
                scored[k], scored[0], nfiles, packed, noise, pairs.warps, crops.bands, say, outs[k], compared
            )
        fit = {
            "first_loss": rows[0]["loss"] if rows else None,
            "last_loss": rows[-1]["loss"] if rows else None,
            "elapsed_s": rows[-1].get("secs") if rows else None,  # since this process began the loop
        }
        summary = adapt_summary(out, out / RUN_RAW, src, c, nfiles, len(held), table, best, fit)
        won = names[labels.index(best["step"])]
        summary["verdict"] = "kept start" if best["step"] == 0 else f"adapted ({won})"
        if fuse > 0:
            summary["verdict"] += f", GAT+BM3D weight {fuse:g}"
        summary["fuse_bm3d"] = fuse
        summary["fusion"] = fusion
        summary["stages"] = {
            "blindspot": {
                "run": a_sum.get("run_dir", str(one)),
                "verdict": a_sum["verdict"],
                "delta_sure_db": a_sum.get("delta_sure_db"),
            },
            "f2f": {"steps": c.burst_steps, **F2F, "checkpoint": str(out / F2F_DIR / LAST), "rows": rows},
        }
        extra = {"adapt": {k: v for k, v in summary.items() if k not in ("run_dir", "checkpoint")}}
        save_checkpoint(out / RUN_RAW, kept, None, extra)
        say(f"RAW denoiser: {out / RUN_RAW} ({won}, SURE weights)")
        summary["raw_checkpoint"] = str(out / RUN_RAW)
        atomic_write_text(out / "adapt.json", json.dumps(summary, indent=2) + "\n")
    return summary


__all__ = [
    "F2F",
    "MIN_FRAMES",
    "adapt_burst",
    "blindspot_summary",
    "burst_pairs",
    "fusion_stage",
    "reuse_blindspot",
    "two_stage_start",
]
