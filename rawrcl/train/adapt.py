"""Label-free adaptation of a noise-aware RAW denoiser to a user's own noisy files (``rawrcl adapt``).

``task="jdd"`` adapts the first stage (the RAW denoiser) of a two-stage JDD model (the shipped JDD default
unless ``source`` is another) the same way, and also writes ``RUN/jdd.pt``: the kept denoiser in front of
that model's JDD stage (:func:`write_jdd`), which ``rawrcl jdd --model RUN`` runs
(:func:`rawrcl.models.loading.checkpoint_for`); no JDD objective is trained (R2R needs the output on the
input's grid). ``rawrcl denoise --model RUN`` runs the denoiser alone — or, when the start was a two-stage
RAW denoiser (the shipped default, the CFA-site blend), ``RUN/denoise.pt``: the kept denoiser in its first
stage's place (:func:`write_raw`).

Pipeline (:func:`adapt`)
------------------------
1. Files: every RAW file of the folder (or the list given), read unclipped, RGGB-aligned and packed, each
   with its own noise from :func:`rawrcl.calibration.resolve.file_noise` (``--noise auto``: DNG
   NoiseProfile → ``--noise-profile`` → single-image estimate) and its clip floor
   (:mod:`rawrcl.data.noisy_crops`), and its row (banding) noise (``row_noise``: estimated by
   :mod:`rawrcl.calibration.rows` and used where significant; R2R, SURE and the mix then include it).
   The bottom 1/8 of every file's rows is held out. With row noise the model is made row-aware
   (:func:`rawrcl.models.conditioning.add_row_input`): it is told σ_row, 0 for files without banding, so
   what it learns for banded files does not leak into the others. With ``deband`` (API-only, off) the
   camera's σ_row — the median of the banded files' — is removed from the files instead
   (:func:`deband_files`) and recorded in the model (:func:`rawrcl.models.conditioning.set_camera_rows`), so
   the commands de-band that camera's files the same way before the model runs: 87–105 % of a banded
   synthetic camera's supervised gap where the row-aware network closes 79 %, but a banding-free file
   whose horizontal scene edges read as banding loses up to 12 dB (docs/adaptation.md).
2. Start: ``--from default`` (the shipped RAW denoiser), a checkpoint or a run directory.
3. Objective (``--method``): ``sure`` (Stein's unbiased risk estimate of the MSE at the files' own noise,
   :mod:`rawrcl.methods.sure`; the default since stop 56), ``r2r`` (clipping-aware Recorrupted-to-Recorrupted
   for Poisson–Gaussian noise, :mod:`rawrcl.methods.r2r`; the same clip mask), ``r2r-plain`` (Pang et al.
   as published: no clip handling), ``n2s`` (Noise2Self masking), ``rcl`` (the paper's residual contrastive
   loss + residual L1 consistency); ``blindspot`` is not a fine-tune: a new network trained beside the start
   (:mod:`rawrcl.train.adapt_blindspot`, which takes over after step 1); ``burst``, for a folder of frames of
   one static scene, that network's composite beside a frame-to-frame fine-tune of the start
   (:mod:`rawrcl.train.adapt_burst`, which takes over after step 1).
   n2s and rcl are the library's methods given each sample's noise (:class:`NoiseBound`). Guards against
   forgetting (:class:`Guarded`): ``anchor`` μ·Σ(θ − θ₀)² towards the starting weights, and ``mix``
   (default 0.5): synthetic supervised crops made on the fly from the photos bundled with scikit-image,
   half with the files' own noise, half with the camera sampler the shipped model was trained with (MSE
   normalised by each crop's noise variance, weight ``mix``). Without it adaptation on the HDR+ burst lost
   up to 6 dB on base-ISO photos (docs/adaptation.md).
4. Training: :class:`rawrcl.train.Trainer` (progress bar with the loss and ETA, ``--resume``, checkpoints
   every ``steps/evals`` steps kept as ``checkpoints/step_*.pt``).
5. Keep-or-discard, for the start and every kept checkpoint: (a) does it help on the user's camera —
   :func:`rawrcl.train.adapt_signal.held_out_scores` on fixed held-out crops of the files: SURE (Stein's
   unbiased estimate of the true MSE at the files' own noise, on pixels clear of clipping), the held-out
   clip-aware R2R loss, the shadow check (reported only); (b) did it forget — PSNR on the forgetting
   check's synthetic mosaics (:func:`~rawrcl.train.adapt_signal.check_crops`: bundled photos never mixed
   in, the camera noise ladder, photo-valued and unprocessed). Among the checkpoints that lose at most
   ``forget_tol`` dB (0.1) on every check condition — and, selecting by SURE with ``noise_slack`` > 1, whose
   gain holds for every true noise variance within ×``noise_slack`` of the told one
   (:func:`~rawrcl.train.adapt_signal.sure_scale_range`) — the one with the lowest ``select`` score wins; the
   start when none beats it (a warning and ``adapt.json``: ``verdict: "kept start"``). ``last.pt`` holds
   the selected weights; the trained ones stay in ``step_*.pt`` and in ``last.pt``'s ``train_weights``.

``adapt.json`` / ``last.pt`` ``extra["adapt"]``: files (name, λ per plane, noise source, clip floor),
method, settings, the held-out table (with each checkpoint's worst forgetting-check loss), the selected step
and the verdict. The objective and its guards live in :mod:`rawrcl.train.adapt_objective`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from rawrcl.data.noisy_crops import NoiseFile, NoisyCrops, load_noise_files
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_write_text
from rawrcl.methods import OWN_MODEL
from rawrcl.models.conditioning import (
    add_row_input,
    camera_rows,
    is_noise_aware,
    is_row_aware,
    set_camera_rows,
)
from rawrcl.models.loading import RUN_JDD, RUN_RAW, is_shipped
from rawrcl.models.registry import read_checkpoint, save_checkpoint
from rawrcl.train.adapt_objective import Guarded, make_objective, synthetic_mix
from rawrcl.train.adapt_signal import adapt_summary, clear_results, keep_or_discard
from rawrcl.train.config import AdaptConfig


# ------------------------------------------------------------------------------------------- the entry
def find_raw_files(folder: str | os.PathLike) -> list[Path]:
    """The RAW files of ``folder`` (sorted, by extension); one-line errors for a missing/empty folder."""
    from rawrcl.io import RAW_EXTENSIONS, folder_files

    root = Path(folder)
    if not root.exists():
        raise RawrclError(f"{folder}: no such folder")
    if root.is_file():
        files = [root]
    else:
        files = folder_files(root, RAW_EXTENSIONS)
    if not files:
        raise RawrclError(f"{folder}: no RAW files (expected {', '.join(sorted(RAW_EXTENSIONS))})")
    return files


def set_row_noise(f: NoiseFile, setting: str) -> str:
    """Set ``f.row`` from ``setting`` (:class:`~rawrcl.train.config.AdaptConfig` ``row_noise``: ``auto`` —
    estimated, used when ≥ :data:`~rawrcl.calibration.rows.ROW_SIGNIFICANT` of the white std and 3
    standard errors —, ``off``, or a std); returns the log fragment."""
    from rawrcl.calibration.rows import fixed_row_noise, used_row_noise

    given = fixed_row_noise(setting)
    if given is not None:
        f.row = given
        return f", row noise {f.row:.3g} (given)" if given > 0 else ""
    f.row, est = used_row_noise(f.packed, f.noise, f.floor)
    return f", row noise {f.row:.3g} ({est['ratio']:.2f} of the white std, estimated)" if f.row > 0 else ""


def deband_files(nfiles: Sequence[NoiseFile]) -> tuple[float, float]:
    """Remove the camera's row offsets from the files, in place: (σ_cam, σ_min) of the files' σ_row
    (:func:`rawrcl.calibration.rows.camera_row_noise`; at least one file > 0), then each file's ``packed``
    de-banded at σ_cam unless its estimate is below σ_min (:func:`~rawrcl.calibration.rows.
    camera_file_rows`, what the commands do with the adapted model), ``debanded`` set and ``row`` 0: the
    training, the held-out scores and the mix see a camera without banding. Clip floors stay as read."""
    from rawrcl.banding import remove_row_offsets
    from rawrcl.calibration.rows import camera_file_rows, camera_row_noise, estimate_row_noise
    from rawrcl.cfa import pack, unpack

    camera = camera_row_noise([f.row for f in nfiles])
    for f in nfiles:
        row = camera[0]
        if f.row == 0:  # not significant at load: is it clearly free of the camera's banding?
            try:
                est = estimate_row_noise(f.packed, f.noise, f.floor)
            except ValueError:
                est = None
            row = camera_file_rows(est, camera)
        if row > 0:
            cfa = remove_row_offsets(unpack(f.packed, "RGGB"), row)
            f.packed = np.ascontiguousarray(pack(cfa, "RGGB"), dtype=np.float32)
            f.debanded = row
        f.row = 0.0
    return camera


def load_adapt_files(
    files: str | os.PathLike | Sequence[str | os.PathLike] | Sequence[NoiseFile],
    row_noise: str,
    noise: str = "auto",
    noise_profile: str | os.PathLike | None = None,
    noise_scale: float = 1.0,
    say: Callable[[str], None] = lambda m: None,
) -> list[NoiseFile]:
    """The user's files (a folder, a list of paths, or :class:`NoiseFile` already read), each with its noise
    and row noise (``row_noise``: :func:`set_row_noise`), one log line each; a warning when a file's noise
    estimate is uncertain (the held-out scores trust it)."""
    if isinstance(files, (list, tuple)) and files and isinstance(files[0], NoiseFile):
        nfiles = list(files)
    else:
        paths = find_raw_files(files) if isinstance(files, (str, os.PathLike)) else [Path(p) for p in files]
        nfiles = load_noise_files(paths, noise, profile=noise_profile, scale=noise_scale)
    for f in nfiles:
        note = set_row_noise(f, row_noise)
        say(
            f"{f.name}: λshot {float(f.noise[0].mean()):.3g}, λread {float(f.noise[1].mean()):.3g} "
            f"({f.source})"
            + (f", clipped at {f.floor:.3g} ({100 * f.clipped:.1f} %)" if f.floor is not None else "")
            + note
            + (f" — {f.note}" if f.note else "")
        )
    if uncertain := [f.name for f in nfiles if f.note]:
        names = ", ".join(uncertain[:3]) + (", …" if len(uncertain) > 3 else "")
        warnings.warn(
            f"the noise of {len(uncertain)} file(s) ({names}) is uncertain: the held-out SURE and R2R scores "
            "trust it and can call a worse model better (on an encoded camera they did, docs/adaptation.md); "
            "the forgetting check still guards; --noise with the camera's values is safer",
            stacklevel=3,
        )
    return nfiles


def start_model(
    source: str | os.PathLike | nn.Module | None, task: str = "raw-denoise"
) -> tuple[nn.Module, str]:
    """(RAW denoiser to adapt, in train mode; description). ``None``/``"default"``: the shipped weights of
    ``task``; of a two-stage JDD checkpoint (e.g. the shipped JDD default), its first stage."""
    from rawrcl.models.loading import checkpoint_file, default_weights_path
    from rawrcl.models.registry import load_checkpoint

    if isinstance(source, nn.Module):
        return source, type(source).__name__
    path = default_weights_path(task) if is_shipped(source) else checkpoint_file(source)
    model, cfg = load_checkpoint(path)
    if cfg.get("arch") == "two_stage":
        model, cfg = model.denoiser, cfg["denoiser"]
    if cfg.get("head") != "raw" or int(cfg.get("in_channels", 4)) != 4:
        raise RawrclError(
            f"{path}: adapt needs a RAW denoiser or a two-stage JDD model (head 'raw', packed input); got "
            f"head {cfg.get('head')!r}"
        )
    model = model.float()
    if not is_noise_aware(model):
        warnings.warn(
            f"{path}: the model is not noise-aware; adaptation cannot tell it the files' noise "
            "(the recorrupted level differs from the files' own)",
            stacklevel=2,
        )
    return model, str(path)


def adapt(
    files: str | os.PathLike | Sequence[str | os.PathLike] | Sequence[NoiseFile],
    out: str | os.PathLike,
    *,
    source: str | os.PathLike | nn.Module | None = "default",
    task: str = "raw-denoise",
    noise: str = "auto",
    noise_profile: str | os.PathLike | None = None,
    noise_scale: float = 1.0,
    config: AdaptConfig | None = None,
    resume: bool = False,
    force: bool = False,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    blindspot_run: str | os.PathLike | None = None,
    **options,
) -> dict:
    """Adapt ``source`` to the noisy files; returns the summary written to ``out/adapt.json``.

    The run's settings are ``config`` (default: the defaults) with ``options`` (the
    :class:`~rawrcl.train.config.AdaptConfig` fields, e.g. ``steps=800, mix=2``; None = keep) on top; with
    ``resume`` the saved configuration is the base. Saved as ``run_config`` in ``config.json``.
    ``blindspot_run`` (``method="burst"`` only): an earlier ``--method blindspot`` run on these files, used as
    the first stage (:func:`rawrcl.train.adapt_burst.adapt_burst`)."""
    from rawrcl.train import Trainer

    say = log or (lambda m: None)
    if task not in ("raw-denoise", "jdd"):
        raise RawrclError(f"--task {task}: adapt supports raw-denoise and jdd")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RawrclError(f"{out}: --out names a file, not a run directory")
    if resume and not (out / "config.json").exists():
        raise RawrclError(f"{out}: --resume given but there is no run to resume")
    if not resume and not force and (out / "config.json").exists():
        raise RawrclError(f"{out}: run directory already holds a run; use --resume to continue or --force")
    if resume and config is None:
        saved = json.loads((out / "config.json").read_text()).get("run_config")
        config = AdaptConfig(**saved) if saved else None
    c = AdaptConfig.from_options(config, **options)
    method, steps, crop, alpha, seed = c.method, c.steps, c.crop, c.alpha, c.seed
    if c.method in OWN_MODEL and task != "raw-denoise":  # before the files are read and estimated
        raise RawrclError(
            f"--method {c.method} adapts the RAW denoiser only (--task raw-denoise); "
            "`rawrcl jdd --model RUN` then runs it in front of the start's JDD stage"
        )

    if blindspot_run is not None and c.method != "burst":
        raise RawrclError("--blindspot-run is the first stage of --method burst; it serves no other method")
    if c.method in OWN_MODEL:  # the start read (refused in one line) before the files are read and estimated
        from rawrcl.train.adapt_blindspot import start_raw_model

        start_raw_model(source)
    else:
        model, src = start_model(source, task)
    if blindspot_run is not None:
        from rawrcl.train.adapt_burst import blindspot_summary

        blindspot_summary(blindspot_run)
    nfiles = load_adapt_files(files, c.row_noise, noise, noise_profile, noise_scale, say)
    if c.method == "burst":  # the blind-spot composite beside a frame-to-frame fine-tune
        from rawrcl.train.adapt_burst import adapt_burst

        return adapt_burst(nfiles, out, c, source, resume, force, progress, say, blindspot_run)
    if c.method in OWN_MODEL:  # its own architecture beside the start: rawrcl.train.adapt_blindspot
        from rawrcl.train.adapt_blindspot import adapt_blindspot

        return adapt_blindspot(nfiles, out, c, source, resume, force, progress, say)
    banded = any(f.row > 0 for f in nfiles) and is_noise_aware(model) and not is_row_aware(model)
    if banded and c.deband:
        n_banded = sum(1 for f in nfiles if f.row > 0)
        row, row_min = deband_files(nfiles)
        model = set_camera_rows(model, row, row_min)
        done = sum(1 for f in nfiles if f.debanded > 0)
        say(
            f"row noise: the camera bands (σ_row {row:.3g}, the median of {n_banded} files); its row offsets "
            f"removed from {done} of {len(nfiles)} files, and the adapted model removes them from the "
            "camera's files before it runs (--row-noise off there: not)"
        )
    elif banded:
        # zero weights on the new input: the same model until trained; with the switch, files read below half
        # the faintest banding of this folder stay with the start
        row_min = 0.5 * min(f.row for f in nfiles if f.row > 0)
        model = add_row_input(model, switch=c.row_switch, row_min=row_min)
        say(
            "row noise: the model gets a σ_row input (row-aware; files without banding are told 0"
            + (", and keep the starting weights)" if c.row_switch else ")")
        )
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # with a row switch the start serves every file told no banding: all synthetic crops get the files' noise
    if c.mix_own is None:  # resolved here, and recorded so (run config, adapt.json, --resume)
        c = dataclasses.replace(c, mix_own=1.0 if getattr(model, "row_switch", False) else 0.5)
    if c.train_only:  # adapt only the parameters whose names contain one of these strings
        for name, prm in model.named_parameters():  # (never the frozen start of a row switch)
            prm.requires_grad_(any(t in name for t in c.train_only) and not name.startswith("plain."))
        if not any(prm.requires_grad for prm in model.parameters()):
            raise RawrclError(f"train_only {list(c.train_only)}: matches no parameter of the model")
    data = NoisyCrops(
        nfiles,
        crop=crop,
        seed=seed,
        mix=synthetic_mix(crop, nfiles, c.mix_own, zoom=c.mix_zoom) if c.mix > 0 else None,
    )
    held = data.held_out(c.held_out)
    teacher = copy.deepcopy(model) if c.distill > 0 else None
    objective = Guarded(method, make_objective(method, alpha), start, c.anchor, c.mix, c.distill, teacher)
    cfg = c.trainer_config(data.crop, src, resume, force, progress, task=task, noise=noise)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:  # written again at the end from the kept weights
        clear_results(out)
    torch.manual_seed(seed)
    fit = Trainer(model, objective, data, out, cfg).fit()
    run_cfg = json.loads((out / "config.json").read_text())
    if run_cfg.get("run_config") != c.to_dict():  # a resume with new options: record what ran
        run_cfg["run_config"] = c.to_dict()
        atomic_write_text(out / "config.json", json.dumps(run_cfg, indent=2) + "\n")

    # -- keep or discard
    ck = out / "checkpoints"
    cands: list[tuple[int, Path | None]] = [(0, None)]
    cands += sorted((int(p.stem.split("_")[1]), p) for p in ck.glob("step_*.pt"))
    if steps not in [s for s, _ in cands]:
        cands.append((steps, None))  # the trained weights (in last.pt's train_weights or state_dict)
    last = read_checkpoint(ck / "last.pt")
    trained = last["extra"].get("train_weights", last["state_dict"])
    weights: dict[int, dict] = {}  # step → state dict, read once

    def model_at(step: int, path: Path | None) -> nn.Module:
        sd = weights[step] = (
            start if step == 0 else (trained if path is None else read_checkpoint(path)["state_dict"])
        )
        model.load_state_dict(sd)
        return model

    table, best = keep_or_discard(cands, model_at, held, c, say)
    summary = adapt_summary(out, ck / "last.pt", src, c, nfiles, len(held), table, best, fit)
    if (camera := camera_rows(model)) is not None:
        summary["deband"] = {"row": camera[0], "row_min": camera[1]}
        say(
            f"the adapted model removes the camera's row offsets (σ_row {camera[0]:.3g}) from its files "
            f"before it runs, with the {'starting' if best['step'] == 0 else 'kept'} weights"
        )
    # last.pt: the selected weights; the trained ones stay in train_weights for --resume
    model.load_state_dict(weights[best["step"]])
    extra = dict(last["extra"])
    extra.setdefault("train_weights", {k: v.clone() for k, v in trained.items()})
    extra["adapt"] = {k: v for k, v in summary.items() if k not in ("run_dir", "checkpoint")}
    save_checkpoint(ck / "last.pt", model, None, extra)
    if task == "jdd":
        summary["jdd_checkpoint"] = str(write_jdd(out, source))
        say(f"JDD model: {summary['jdd_checkpoint']} (the kept denoiser, then the JDD stage)")
    elif (raw := write_raw(out, source)) is not None:
        summary["raw_checkpoint"] = str(raw)
        say(f"RAW denoiser: {raw} (the kept denoiser in the starting model's CFA-site blend)")
    atomic_write_text(out / "adapt.json", json.dumps(summary, indent=2) + "\n")
    return summary


def write_raw(run: Path, source: str | os.PathLike | nn.Module | None) -> Path | None:
    """``run/denoise.pt`` (:data:`~rawrcl.models.loading.RUN_RAW`) when ``source`` (None: the shipped RAW
    default) is a two-stage RAW denoiser (the CFA-site blend): the run's kept denoiser as its first stage,
    the same JDD stage, residual, blend and gate. None (nothing written) for a plain denoiser."""
    from rawrcl.models.loading import checkpoint_for, save_two_stage

    if isinstance(source, nn.Module):
        return None
    path = checkpoint_for(source, "raw-denoise")
    cfg = read_checkpoint(path)["config"]
    if cfg.get("arch") != "two_stage" or cfg.get("head") != "raw":
        return None
    blend = {"blend": cfg["blend"], "blend_sigma": cfg.get("blend_sigma", 0.0)}
    return save_two_stage(run, path, run / RUN_RAW, cfg["residual"], output="raw", **blend)


def write_jdd(run: Path, source: str | os.PathLike | nn.Module | None) -> Path:
    """``run/jdd.pt`` (:data:`~rawrcl.models.loading.RUN_JDD`): the run's kept RAW denoiser in front of the
    second stage of ``source`` when it is a two-stage JDD checkpoint, else of the shipped JDD default,
    told λ × that model's residual (:func:`rawrcl.models.loading.save_two_stage`)."""
    from rawrcl.models.compose import RESIDUAL
    from rawrcl.models.loading import checkpoint_for, save_two_stage

    second = None  # the shipped JDD default
    if not is_shipped(source) and not isinstance(source, nn.Module):
        second = checkpoint_for(source, "jdd")
    cfg = read_checkpoint(checkpoint_for(second, "jdd"))["config"]
    if not cfg.get("demosaicker"):  # not a two-stage model with a JDD network: the shipped one
        second, cfg = None, read_checkpoint(checkpoint_for(None, "jdd"))["config"]
    residual = float(cfg.get("residual", RESIDUAL)) if cfg.get("arch") == "two_stage" else RESIDUAL
    return save_two_stage(run, second, run / RUN_JDD, residual)
