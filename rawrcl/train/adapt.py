"""Label-free adaptation of a noise-aware RAW denoiser to a user's own noisy files (``rawrcl adapt``).

Pipeline (:func:`adapt`)
------------------------
1. Files: every RAW file of the folder (or the list given), read unclipped, RGGB-aligned and packed, each
   with its own noise from :func:`rawrcl.calibration.resolve.file_noise` (``--noise auto``: DNG
   NoiseProfile → ``--noise-profile`` → single-image estimate) and its clip floor
   (:mod:`rawrcl.data.noisy_crops`). The bottom 1/8 of every file's rows is held out.
2. Start: ``--from default`` (the shipped RAW denoiser), a checkpoint or a run directory.
3. Objective (``--method``): ``r2r`` (clipping-aware Recorrupted-to-Recorrupted for Poisson–Gaussian noise,
   :mod:`rawrcl.methods.r2r`; the default), ``r2r-plain`` (Pang et al. as published: no clip handling),
   ``n2s`` (Noise2Self masking), ``rcl`` (the paper's residual contrastive loss + residual L1 consistency).
   n2s and rcl are the library's methods given each sample's noise (:class:`NoiseBound`). Guards against
   forgetting (:class:`Guarded`): ``anchor`` μ·Σ(θ − θ₀)² towards the starting weights, and ``mix``
   synthetic supervised crops made on the fly from the photos bundled with scikit-image with the camera
   sampler (MSE normalised by the crop's noise variance, weight ``mix``).
4. Training: :class:`rawrcl.train.Trainer` (progress bar with the loss and ETA, ``--resume``, checkpoints
   every ``steps/evals`` steps kept as ``checkpoints/step_*.pt``).
5. Keep-or-discard (:func:`held_out_scores`): on fixed held-out crops, for the start and every kept
   checkpoint, (a) SURE — Stein's unbiased estimate of the true MSE at the files' own noise, on pixels
   clear of clipping (Monte-Carlo divergence), (b) the held-out clip-aware R2R loss and (c, reported only)
   the shadow-brightness check :func:`shadow_bias`. The checkpoint
   with the lowest ``select`` score wins; when no checkpoint beats the start, the run keeps the starting
   weights and says so (a warning and ``adapt.json``: ``verdict: "kept start"``). ``last.pt`` holds the
   selected weights; the trained ones stay in ``step_*.pt`` and in ``last.pt``'s ``train_weights``.

``adapt.json`` / ``last.pt`` ``extra["adapt"]``: files (name, λ per plane, noise source, clip floor),
method, settings, the held-out table, the selected step and the verdict.
"""

from __future__ import annotations

import json
import math
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
from rawrcl.methods.r2r import R2R, neighbour_mean, recorrupt, scored_mask, signal_variance
from rawrcl.models.conditioning import call, is_noise_aware
from rawrcl.models.registry import read_checkpoint, save_checkpoint, unwrap

METHOD_CHOICES = ("r2r", "r2r-plain", "n2s", "rcl")
#: defaults of ``rawrcl adapt`` (measured in docs/adaptation.md)
ADAPT_DEFAULTS: dict = {
    "steps": 400,
    "batch_size": 4,  # pairs: 8 crops per step
    "crop": 128,
    "lr": 3e-5,
    "anchor": 0.05,
    "mix": 0.0,
    "mix_own": 0.5,  # share of the mix's synthetic crops made with the files' own noise
    "evals": 4,
    "select": "sure",
    "alpha": 0.5,
}


# ----------------------------------------------------------------------------------------- objectives
class NoiseBound(nn.Module):
    """``model(x)`` → ``model(x, noise)`` with per-sample ``noise`` (B, 2, C) fixed; for methods that call the
    model with one argument. The batch of ``x`` must be a multiple of the noise's (crops are repeated)."""

    def __init__(self, model: nn.Module, noise: torch.Tensor) -> None:
        super().__init__()
        self.model, self.noise = model, noise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.noise
        if x.shape[0] != n.shape[0]:
            if x.shape[0] % n.shape[0]:
                raise RawrclError(f"batch of {x.shape[0]} crops with noise for {n.shape[0]}")
            n = n.repeat(x.shape[0] // n.shape[0], 1, 1)
        return call(self.model, x, n.to(x.device, x.dtype))


class Guarded:
    """``method`` + ``anchor``·Σ(θ − θ₀)² (θ₀ the starting weights) + ``mix``·(normalised supervised MSE on
    the batch's synthetic crops). n2s / rcl get each sample's noise through :class:`NoiseBound`."""

    def __init__(
        self, name: str, method: Callable, start: dict[str, torch.Tensor], anchor: float, mix: float
    ):
        self.name, self.method = name, method
        self.start = {k: v.detach().clone().float() for k, v in start.items()}
        self.anchor, self.mix = float(anchor), float(mix)
        self.bind = name in ("n2s", "rcl")

    def config(self) -> dict:
        inner = self.method.config() if hasattr(self.method, "config") else {"method": self.name}
        return {**inner, "method": self.name, "anchor": self.anchor, "mix": self.mix}

    def __call__(self, batch: dict, model: nn.Module) -> dict:
        net = NoiseBound(model, batch["noise"]) if self.bind and is_noise_aware(model) else model
        out = dict(self.method(batch, net))
        loss = out["loss"]
        if self.anchor > 0:
            pen = 0.0
            for name, p in unwrap(model).named_parameters():
                if p.requires_grad and name in self.start:
                    ref = self.start[name]
                    if ref.device != p.device:
                        ref = self.start[name] = ref.to(p.device)
                    pen = pen + ((p - ref) ** 2).sum()
            loss = loss + self.anchor * pen
            out["anchor"] = float(pen.detach()) if torch.is_tensor(pen) else 0.0
        if self.mix > 0 and "input" in batch:
            pred = call(model, batch["input"].float(), batch["sup_noise"].float()).float()
            tgt = batch["target"].float()
            n = batch["sup_noise"].float()
            var = (n[:, 0, :, None, None] * tgt.clamp_min(0) + n[:, 1, :, None, None]).mean()
            sup = ((pred - tgt) ** 2).mean() / var.clamp_min(1e-10)
            loss = loss + self.mix * sup
            out["sup"] = float(sup.detach())
        out["loss"] = loss
        return out


def make_objective(name: str, alpha: float = 0.5) -> Callable:
    """The self-supervised objective ``name`` (:data:`METHOD_CHOICES`)."""
    if name == "r2r":
        return R2R(alpha=alpha, clip_aware=True)
    if name == "r2r-plain":
        return R2R(alpha=alpha, clip_aware=False)
    if name in ("n2s", "rcl"):
        from rawrcl.methods import make_method

        return make_method(name)
    raise RawrclError(f"--method {name!r}: expected one of {', '.join(METHOD_CHOICES)}")


def synthetic_mix(
    crop: int, files: Sequence[NoiseFile] = (), own: float = 0.5, photos: int = 8
) -> Callable[[np.random.Generator], dict]:
    """Synthetic supervised packed-RAW samples from the photos bundled with scikit-image:
    ``f(rng) -> {"input", "target", "noise"}``. With probability ``own`` the noise is one of ``files``' own
    (its per-plane λ, Poisson shot noise, clipped at 0 when the file is black-clipped, else a pedestal: the
    user's camera, including the shadows the clip-aware objective cannot score), otherwise a draw of the
    camera sampler the shipped model was trained with (what it already does well: the forgetting guard)."""
    from dataclasses import replace

    from rawrcl.noise import CameraSampler, NoiseModel, Readout
    from rawrcl.sample_data import bundled_photos
    from rawrcl.tasks import get_task
    from rawrcl.train.finetuning import LabelledCrops

    camera = CameraSampler(plane_p=0.5)
    own_models = [
        NoiseModel(
            tuple(float(v) for v in f.noise[0]),
            tuple(float(v) for v in f.noise[1]),
            poisson=True,
            readout=Readout(14, 0.0 if f.floor is not None else 0.06),
        )
        for f in files
    ]

    def noise(rng: np.random.Generator):
        if own_models and rng.random() < own:
            return own_models[int(rng.integers(0, len(own_models)))]
        return camera(rng)

    task = replace(
        get_task("raw-denoise", unprocess=True), unprocess_mix=0.5, exposure=(0.02, 1.0), exposure_mix=0.6
    )
    imgs = [(n, np.moveaxis(a, -1, 0).astype(np.float32) / 255.0) for n, a in bundled_photos(photos)]
    ds = LabelledCrops(imgs, task, crop=crop, noise=noise, augment=True)

    def sample(rng: np.random.Generator) -> dict:
        it = ds[(int(rng.integers(0, len(ds))), int(rng.integers(0, 2**62)))]
        return {"input": it["input"], "target": it["target"], "noise": it["noise"]}

    return sample


# ------------------------------------------------------------------------------------ held-out signal
def censored_mean(x: torch.Tensor, var: torch.Tensor, floor: float) -> torch.Tensor:
    """E[max(x + n, floor)] for n ~ N(0, var): what a file clipped at ``floor`` stores on average."""
    sd = var.clamp_min(1e-12).sqrt()
    u = (x - floor) / sd
    normal = torch.distributions.Normal(0.0, 1.0)
    return floor + (x - floor) * normal.cdf(u) + sd * normal.log_prob(u).exp()


def shadow_bias(
    fy: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    floor: float,
    xhat: torch.Tensor,
    var: torch.Tensor,
) -> tuple[float, float]:
    """(sum, count) over the shadow pixels (local signal < 2.5σ above ``floor``) of
    (E[max(f(y) + n, floor)] − y)/σ: 0 on average when the model's output is the clean signal; > 0 when it
    brightens the shadows (what a clipping-biased objective teaches), < 0 when it darkens them. SURE does not
    score these pixels; this is the label-free check that does."""
    dark = (xhat - floor) < 2.5 * var.sqrt()
    if not bool(dark.any()):
        return 0.0, 0.0
    v_out = signal_variance(fy, noise)
    r = (censored_mean(fy, v_out, floor) - y) / v_out.sqrt()
    return float(r[dark].sum()), float(dark.sum())


@torch.no_grad()
def held_out_scores(
    model: nn.Module, crops: Sequence[dict], alpha: float = 0.5, draws: int = 2, seed: int = 0
) -> dict:
    """Label-free scores of ``model`` on fixed crops (lower is better), common random numbers across models.

    ``sure``: mean over scored pixels of (f(y) − y)² − v + 2v·∂fᵢ/∂yᵢ (Stein's unbiased risk estimate of
    the true MSE at the files' noise, Gaussian approximation, per-pixel variance v from the neighbours;
    divergence by ``draws`` Rademacher probes, ε = 0.05·σ); ``sure_psnr`` = −10·log10(sure) (dB, [0, 1]);
    ``r2r``: the clip-aware R2R loss averaged over ``draws`` recorruptions; ``shadow``: mean of
    :func:`shadow_bias` over the pixels near a clip level (reported, not used to choose: it separated a
    clipping-biased model too little, docs/adaptation.md); ``scored``: fraction of pixels clear of
    clipping. Pixels within 2.5σ of a clip level are not scored by SURE/R2R (the estimates assume unclipped
    Gaussian noise)."""
    model = model.eval()
    tot = {"sure": 0.0, "r2r": 0.0, "n": 0.0, "var": 0.0}
    for k, c in enumerate(crops):
        y = c["x"][None].float()
        noise = c["noise"][None].float()
        floor = torch.tensor([float(c["floor"])])
        xhat = neighbour_mean(y)
        var = signal_variance(xhat, noise)
        w = scored_mask(xhat, var, floor, 2.5)
        n = float(w.sum())
        if n < 1:
            continue
        g = torch.Generator().manual_seed(int(seed) * 100003 + k)
        fy = call(model, y, noise).float()
        eps = 0.05 * float(var.mean().sqrt())
        div = torch.zeros_like(y)
        for _ in range(draws):
            b = torch.randint(0, 2, y.shape, generator=g).float() * 2 - 1
            div += b * (call(model, y + eps * b, noise).float() - fy) / eps
        div /= draws
        sure = ((fy - y) ** 2 - var + 2 * var * div) * w
        r2r = 0.0
        for _ in range(draws):
            r = recorrupt(y, noise, floor, alpha, True, 2.5, generator=g)
            out = call(model, r["input"], r["noise"]).float()
            r2r += float((((out - r["target"]) ** 2) * w).sum()) / draws
        if float(c["floor"]) > -0.5:  # shadows of a clipped file: censored-mean consistency
            b, nd = shadow_bias(fy, y, noise, float(c["floor"]), xhat, var)
            tot["shadow"] = tot.get("shadow", 0.0) + b
            tot["shadow_n"] = tot.get("shadow_n", 0.0) + nd
        tot["sure"] += float(sure.sum())
        tot["r2r"] += r2r
        tot["n"] += n
        tot["var"] += float((var * w).sum())
        tot.setdefault("px", 0.0)
        tot["px"] += float(w.numel())
    if tot["n"] < 1:
        return {"sure": math.nan, "sure_psnr": math.nan, "r2r": math.nan, "scored": 0.0}
    sure = tot["sure"] / tot["n"]
    shadow = tot["shadow"] / tot["shadow_n"] if tot.get("shadow_n", 0) >= 1 else 0.0
    r2r = tot["r2r"] / tot["n"] / ((1 + 1 / alpha**2) * tot["var"] / tot["n"])
    return {
        "sure": sure,
        "sure_psnr": -10 * math.log10(sure) if sure > 0 else math.inf,
        "r2r": r2r,
        "shadow": shadow,
        "scored": tot["n"] / tot["px"],
    }


# ------------------------------------------------------------------------------------------- the entry
def find_raw_files(folder: str | os.PathLike) -> list[Path]:
    """The RAW files of ``folder`` (sorted, by extension); one-line errors for a missing/empty folder."""
    from rawrcl.io import RAW_EXTENSIONS

    root = Path(folder)
    if not root.exists():
        raise RawrclError(f"{folder}: no such folder")
    if root.is_file():
        files = [root]
    else:
        files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in RAW_EXTENSIONS)
    if not files:
        raise RawrclError(f"{folder}: no RAW files (expected {', '.join(sorted(RAW_EXTENSIONS))})")
    return files


def start_model(
    source: str | os.PathLike | nn.Module | None, task: str = "raw-denoise"
) -> tuple[nn.Module, str]:
    """(model in train mode, description). ``None``/``"default"``: the shipped weights of ``task``."""
    from rawrcl.models.loading import checkpoint_file, default_weights_path
    from rawrcl.models.registry import load_checkpoint

    if isinstance(source, nn.Module):
        return source, type(source).__name__
    path = default_weights_path(task) if source in (None, "default") else checkpoint_file(source)
    model, cfg = load_checkpoint(path)
    if cfg.get("head") != "raw" or int(cfg.get("in_channels", 4)) != 4:
        raise RawrclError(
            f"{path}: adapt needs a RAW denoiser (head 'raw', packed input); got head {cfg.get('head')!r}"
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
    method: str = "r2r",
    steps: int | None = None,
    noise: str = "auto",
    noise_profile: str | os.PathLike | None = None,
    noise_scale: float = 1.0,
    batch_size: int | None = None,
    crop: int | None = None,
    lr: float | None = None,
    anchor: float | None = None,
    mix: float | None = None,
    mix_own: float | None = None,
    alpha: float | None = None,
    evals: int | None = None,
    select: str | None = None,
    ema: float | None = None,
    seed: int = 0,
    resume: bool = False,
    force: bool = False,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Adapt ``source`` to the noisy files; returns the summary written to ``out/adapt.json``."""
    from rawrcl.train import Trainer

    d = ADAPT_DEFAULTS
    steps = d["steps"] if steps is None else int(steps)
    batch_size = d["batch_size"] if batch_size is None else int(batch_size)
    crop = d["crop"] if crop is None else int(crop)
    lr = d["lr"] if lr is None else float(lr)
    anchor = d["anchor"] if anchor is None else float(anchor)
    mix = d["mix"] if mix is None else float(mix)
    mix_own = d["mix_own"] if mix_own is None else float(mix_own)
    alpha = d["alpha"] if alpha is None else float(alpha)
    evals = d["evals"] if evals is None else max(1, int(evals))
    select = d["select"] if select is None else select
    say = log or (lambda m: None)
    if task != "raw-denoise":
        raise RawrclError(
            f"--task {task}: adapt supports raw-denoise (JDD: adapt the RAW denoiser and run it as "
            "denoise → demosaic)"
        )
    if select not in ("sure", "r2r", "last"):
        raise RawrclError(f"--select {select!r}: expected sure, r2r or last")
    if method not in METHOD_CHOICES:
        raise RawrclError(f"--method {method!r}: expected one of {', '.join(METHOD_CHOICES)}")
    if steps < 1:
        raise RawrclError("--steps must be ≥ 1")
    out = Path(out)
    if resume and not (out / "config.json").exists():
        raise RawrclError(f"{out}: --resume given but there is no run to resume")
    if not resume and not force and (out / "config.json").exists():
        raise RawrclError(f"{out}: run directory already holds a run; use --resume to continue or --force")

    if isinstance(files, (list, tuple)) and files and isinstance(files[0], NoiseFile):
        nfiles = list(files)
    else:
        paths = find_raw_files(files) if isinstance(files, (str, os.PathLike)) else [Path(p) for p in files]
        nfiles = load_noise_files(paths, noise, profile=noise_profile, scale=noise_scale)
    for f in nfiles:
        say(
            f"{f.name}: λshot {float(f.noise[0].mean()):.3g}, λread {float(f.noise[1].mean()):.3g} "
            f"({f.source})"
            + (f", clipped at {f.floor:.3g} ({100 * f.clipped:.1f} %)" if f.floor is not None else "")
        )
    model, src = start_model(source, task)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = NoisyCrops(
        nfiles, crop=crop, seed=seed, mix=synthetic_mix(crop, nfiles, mix_own) if mix > 0 else None
    )
    held = data.held_out()
    objective = Guarded(method, make_objective(method, alpha), start, anchor, mix)
    keep = max(1, steps // evals)
    cfg = {
        "task": task,
        "steps": steps,
        "batch_size": batch_size,
        "crop": data.crop,
        "lr": lr,
        "lr_schedule": "constant",
        "seed": seed,
        "grad_clip": 1.0,
        "ema": ema,
        "noise": noise,
        "source": src,
        "adapt": {
            "method": method,
            "anchor": anchor,
            "mix": mix,
            "mix_own": mix_own,
            "alpha": alpha,
            "select": select,
        },
        "save_every": keep,
        "keep_every": keep,
        "log_every": 10,
        "resume": bool(resume),
        "force": bool(force),
        "progress": progress,
    }
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    fit = Trainer(model, objective, data, out, cfg).fit()

    # -- keep or discard
    ck = out / "checkpoints"
    cands: list[tuple[int, Path | None]] = [(0, None)]
    cands += sorted((int(p.stem.split("_")[1]), p) for p in ck.glob("step_*.pt"))
    if steps not in [s for s, _ in cands]:
        cands.append((steps, None))  # the trained weights (in last.pt's train_weights or state_dict)
    last = read_checkpoint(ck / "last.pt")
    trained = last["extra"].get("train_weights", last["state_dict"])
    table = []
    for s, p in cands:
        if s == 0:
            sd = start
        elif p is None:
            sd = trained
        else:
            sd = read_checkpoint(p)["state_dict"]
        model.load_state_dict(sd)
        sc = held_out_scores(model, held, alpha=alpha, seed=seed)
        table.append({"step": s, **{k: round(v, 8) for k, v in sc.items()}})
        say(f"held-out step {s}: SURE {sc['sure']:.4g} ({sc['sure_psnr']:.2f} dB), R2R {sc['r2r']:.4f}")
    base = table[0]
    if select == "last":
        best = table[-1]
    else:
        best = min(table, key=lambda r: (r[select] if math.isfinite(r[select]) else math.inf, r["step"]))
    final = table[-1]
    worse = final[select if select != "last" else "sure"] > base[select if select != "last" else "sure"]
    verdict = "kept start" if best["step"] == 0 else f"adapted (step {best['step']})"
    summary = {
        "run_dir": str(out),
        "checkpoint": str(ck / "last.pt"),
        "source": src,
        "method": method,
        "steps": steps,
        "settings": {k: cfg[k] for k in ("batch_size", "crop", "lr", "seed", "ema")} | cfg["adapt"],
        "files": [f.describe() for f in nfiles],
        "held_out_crops": len(held),
        "held_out": table,
        "selected_step": best["step"],
        "verdict": verdict,
        "final_worse_than_start": bool(worse),
        "delta_sure_db": round(best["sure_psnr"] - base["sure_psnr"], 4),
        "train": {k: fit.get(k) for k in ("first_loss", "last_loss", "elapsed_s")},
    }
    if worse:
        msg = (
            f"adaptation made the held-out {select} score worse at the end (start {base[select]:.4g}, "
            f"final {final[select]:.4g}); "
            + ("kept the starting weights" if best["step"] == 0 else f"kept step {best['step']}")
        )
        warnings.warn(msg, stacklevel=2)
        summary["warning"] = msg
    # last.pt: the selected weights; the trained ones stay in train_weights for --resume
    chosen = start if best["step"] == 0 else (trained if best["step"] == steps else None)
    if chosen is None:
        chosen = read_checkpoint(ck / f"step_{best['step']:07d}.pt")["state_dict"]
    model.load_state_dict(chosen)
    extra = dict(last["extra"])
    extra.setdefault("train_weights", {k: v.clone() for k, v in trained.items()})
    extra["adapt"] = {k: v for k, v in summary.items() if k not in ("run_dir", "checkpoint")}
    save_checkpoint(ck / "last.pt", model, None, extra)
    atomic_write_text(out / "adapt.json", json.dumps(summary, indent=2) + "\n")
    return summary
