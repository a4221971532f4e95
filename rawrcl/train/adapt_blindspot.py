"""``rawrcl adapt --method blindspot``: a blind-spot network trained from scratch on the user's noisy files,
run beside the start and combined with it by SURE weights.

A blind-spot network cannot be a fine-tune of the shipped model (it needs its own architecture, one that never
sees the pixel it predicts: :mod:`rawrcl.models.blindspot`), so it is trained from nothing on crops of the
files with :class:`rawrcl.methods.blindspot.BlindSpotNLL` (each file told its own noise; no synthetic mix, no
anchor: there is no start in it to forget). Alone it stays below the shipped model on the measured burst
(docs/adaptation.md); its errors are unlike the shipped model's, so the adapted model is
:class:`~rawrcl.models.blindspot.WithBlindSpot` — the start's estimates and the blind-spot posterior mean,
re-weighted per tile by Stein's estimate (:class:`~rawrcl.models.sure.SureShrink` over the start as
``rawrcl denoise`` runs it and the network), which falls back to the start where the new network does not
help. The network's head reads each packed pixel's other CFA samples (``cross``, :data:`CROSS`); its
training crops are flipped at random (:data:`AUGMENT`); clipped samples are scored by the censored likelihood
(:data:`CENSORED`).

``--from`` an earlier blind-spot run continues its network (a fresh cosine schedule; measured: a second 6000
steps at lr 3e-4, docs/adaptation.md). Pipeline: files and noise as every ``adapt``
(:func:`rawrcl.train.adapt.load_adapt_files`; row noise is not modelled: the blind spot assumes independent
pixels); training with a cosine learning rate and weight averaging
(:data:`rawrcl.train.config.ADAPT_METHOD_DEFAULTS`: 6000 steps of 16 pairs of 64-px crops, lr 1e-3, EMA 0.999;
held-out crops of :data:`HELD_CROP` px); the start and the kept checkpoints beside it scored by the same
keep-or-discard as every ``adapt`` (:func:`rawrcl.train.adapt_signal.keep_or_discard`: held-out SURE, the
forgetting check), each as ``rawrcl denoise`` runs it (with SURE weights). Output: ``RUN/denoise.pt``
(:data:`~rawrcl.models.loading.RUN_RAW`) — the combination, or a copy of the start when the start is kept —
which ``rawrcl denoise --model RUN`` and ``rawrcl eval RUN --burst`` run; ``RUN/checkpoints/`` hold the
blind-spot network alone (``--resume``).
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn as nn

from rawrcl.data.noisy_crops import NoiseFile, NoisyCrops
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.methods.blindspot import BlindSpotNLL
from rawrcl.models.blindspot import BlindSpotDenoiser, WithBlindSpot
from rawrcl.models.conditioning import is_noise_aware
from rawrcl.models.loading import RUN_RAW, checkpoint_for
from rawrcl.models.registry import load_checkpoint, read_checkpoint, save_checkpoint
from rawrcl.models.shrink import maybe_shrink
from rawrcl.train.adapt_signal import adapt_summary, clear_results, keep_or_discard
from rawrcl.train.config import AdaptConfig

#: features per rotation of the blind-spot U-Net (the measured rows of docs/adaptation.md)
WIDTH = 32
#: the head reads the other CFA samples of each packed pixel (:class:`~rawrcl.models.blindspot.BlindSpotNet`;
#: since stop 60: alone +0.27 dB on the burst's unseen frame at the default 6000 steps; docs/adaptation.md)
CROSS = True
#: the network's learning-rate schedule (from ``--lr`` down to 0 over ``--steps``)
LR_SCHEDULE = "cosine"
#: poolings of each rotation's U-Net (:class:`~rawrcl.models.blindspot.BlindSpotNet`)
LEVELS = 2
#: each training crop pair flipped left-right/up-down at random, phase-corrected (``NoisyCrops(augment=…)``;
#: since stop 63: less memorisation of small folders — adapt's held-out SURE higher on one frame and on eight
#: than without; rotations, which swap G1/G2 and rows/columns, failed on eight in stop 62; docs/adaptation.md)
AUGMENT = "flips"
#: mosaic px of the held-out crops that choose among the checkpoints, whatever the training crop (64 since
#: stop 67): the size adapt's held-out signal was measured at (stop 64); on files too small for them the
#: training crop's
HELD_CROP = 128
#: the censored (Tobit) likelihood for clipped samples instead of leaving those near a clip unscored
#: (:class:`~rawrcl.methods.blindspot.BlindSpotNLL`; since stop 71: on a black-clipped burst the old mask left
#: 72–80 % of the samples out; adapt's held-out gain +0.200 / +0.136 on eight frames / one against +0.109 /
#: +0.128; docs/adaptation.md, "The censored likelihood")
CENSORED = True


def blindspot_crops(
    files: Sequence[NoiseFile],
    crop: int,
    seed: int = 0,
    augment: str = AUGMENT,
    held_crop: int = HELD_CROP,
) -> NoisyCrops:
    """The blind-spot network's training crops of ``files`` (``crop`` mosaic px, ``augment`` as
    :class:`NoisyCrops`'s) with held-out crops of ``held_crop`` px — of the training crop's size when the
    files are too small for those."""
    try:
        return NoisyCrops(files, crop=crop, seed=seed, augment=augment, held_crop=held_crop)
    except RawrclError:
        return NoisyCrops(files, crop=crop, seed=seed, augment=augment)


def start_raw_model(
    source: str | os.PathLike | nn.Module | None,
) -> tuple[nn.Module, nn.Module, BlindSpotDenoiser | None, str]:
    """(the starting model in eval mode, the RAW denoiser a blind-spot network goes beside — for the shipped
    default its CFA-site blend —, a copy of the blind-spot network to continue training or None,
    description). A ``with_blindspot`` source (an earlier ``--method blindspot`` run) is the start as a whole,
    its base the model beside, and its network is trained on (a fresh schedule, e.g. at a lower ``--lr``).
    Refused in one line unless noise-aware with a RAW head."""
    if isinstance(source, nn.Module):
        model, src = source, type(source).__name__
    else:
        path = checkpoint_for(source, "raw-denoise")
        model, _ = load_checkpoint(path)
        src = str(path)
    model = model.float().eval()
    base, net = model, None
    if isinstance(model, WithBlindSpot):
        base, net = model.base, copy.deepcopy(model.blindspot)
    head = getattr(base, "head_name", getattr(base, "config", {}).get("head"))
    if head != "raw" or not is_noise_aware(base) or isinstance(base, BlindSpotDenoiser):
        raise RawrclError(f"{src}: --method blindspot needs a noise-aware RAW denoiser to start from")
    return model, base, net, src


def adapt_blindspot(
    nfiles: list[NoiseFile],
    out: Path,
    c: AdaptConfig,
    source: str | os.PathLike | nn.Module | None,
    resume: bool,
    force: bool,
    progress: bool | None,
    say: Callable[[str], None],
) -> dict:
    """Train the blind-spot network on ``nfiles``, choose between the start and start + network, write
    ``out/denoise.pt`` and ``out/adapt.json``; returns the summary (the same keys as
    :func:`rawrcl.train.adapt.adapt`'s)."""
    from rawrcl.train import Trainer

    if any(f.row > 0 for f in nfiles):
        warnings.warn(
            "--method blindspot does not model row (banding) noise (a row's samples share its offset, which "
            "breaks the blind spot); the files' row noise is ignored",
            stacklevel=3,
        )
    start, base, net, src = start_raw_model(source)
    torch.manual_seed(c.seed)
    if net is None:
        net = BlindSpotDenoiser(width=WIDTH, cross=CROSS, levels=LEVELS)
    else:
        say(f"continuing the blind-spot network of {src}")
        net = net.float().train()
    objective = BlindSpotNLL(censored=CENSORED)
    net.censored = objective.censored  # its training likelihood (a composite's shadow guard follows it)
    data = blindspot_crops(nfiles, c.crop, c.seed)
    held = data.held_out(c.held_out)
    cfg = c.trainer_config(
        data.crop,
        src,
        resume,
        force,
        progress,
        task="raw-denoise",
        lr_schedule=LR_SCHEDULE,
        method="blindspot",
    )
    out.mkdir(parents=True, exist_ok=True)
    if not resume:  # written again at the end
        clear_results(out)
    fit = Trainer(net, objective, data, out, cfg).fit()

    ck = out / "checkpoints"
    cands: list[tuple[int, Path | None]] = [(0, None)]
    cands += sorted((int(p.stem.split("_")[1]), p) for p in ck.glob("step_*.pt"))
    if c.steps not in [s for s, _ in cands]:
        cands.append((c.steps, ck / "last.pt"))
    paths = dict(cands)

    def model_at(step: int, path: Path | None) -> nn.Module:
        """What ``rawrcl denoise`` runs: the start, or the start beside this checkpoint, with SURE weights."""
        if step == 0:
            return maybe_shrink(start, True)
        net.load_state_dict(read_checkpoint(path)["state_dict"])
        return maybe_shrink(WithBlindSpot(base, net.eval()), True)

    table, best = keep_or_discard(cands, model_at, held, c, say)
    summary = adapt_summary(out, out / RUN_RAW, src, c, nfiles, len(held), table, best, fit)
    summary["objective"] = objective.config()  # e.g. censored: which likelihood trained the network
    extra = {"adapt": {k: v for k, v in summary.items() if k not in ("run_dir", "checkpoint")}}
    if best["step"] == 0:
        save_checkpoint(out / RUN_RAW, start, None, extra)
        say(f"RAW denoiser: {out / RUN_RAW} (the start, kept)")
    else:
        net.load_state_dict(read_checkpoint(paths[best["step"]])["state_dict"])
        save_checkpoint(out / RUN_RAW, WithBlindSpot(base, net), None, extra)
        say(f"RAW denoiser: {out / RUN_RAW} (the start beside the blind-spot network, SURE weights)")
    summary["raw_checkpoint"] = str(out / RUN_RAW)
    atomic_write_text(out / "adapt.json", json.dumps(summary, indent=2) + "\n")
    return summary
