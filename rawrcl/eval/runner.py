"""Evaluation on synthetic test sets: :func:`evaluate` a checkpoint, a model or a classical baseline; metrics
in :mod:`rawrcl.eval.metrics`, baselines in :mod:`rawrcl.eval.baselines`, real bursts in
:mod:`rawrcl.eval.burst_eval`.

Noise-aware models are told each sample's true noise parameters (``meta["noise"]``) unless ``noise_of``
says otherwise; baselines that take a noise level (``menon+nlm``, ``nlm``, ``gat+bm3d``, ``gharbi2016``) get
the true one too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rawrcl.cfa import packed_to_rgb
from rawrcl.errors import RawrclError
from rawrcl.eval.baselines import BASELINE_NAMES, baseline_applies, make_baseline
from rawrcl.eval.metrics import BORDER, psnr, psnr_float, ssim, to_srgb, to_uint8
from rawrcl.io import load_images
from rawrcl.models.compose import passes, two_pass_stages
from rawrcl.models.geometry import pad_to_multiple
from rawrcl.models.loading import is_shipped, load_for_task
from rawrcl.noise import NoiseLike, noise_label
from rawrcl.tasks import Task, get_task


def model_predictor(
    model: torch.nn.Module,
    task: Task,
    device: str = "cpu",
    multiple: int = 1,
    self_ensemble: bool = False,
    noise_of: Callable[[torch.Tensor, dict], Any] | None = None,
    shrink: bool | None = None,
    two_pass: bool | None = None,
):
    """Wrap a model as ``f(input (C, h, w), task, meta) -> output`` with reflection padding to
    ``multiple`` (in the input grid; packed RAW stays RGGB-phased) and output cropping (× task.scale).

    A noise-aware model gets the sample's noise parameters: ``noise_of(input, meta)`` (a
    :class:`~rawrcl.noise.NoiseModel` or (2, C) tensor), by default the true ones (``meta["noise"]``).
    ``self_ensemble`` averages over the 8 flips/transposes (:class:`rawrcl.models.SelfEnsemble`);
    ``two_pass`` runs a two-stage model's stages twice (``--two-pass``; ``None``, as the commands: both
    stages twice at low noise, four times at the lowest; ``False`` one pass;
    :func:`rawrcl.models.compose.two_pass_stages`).
    ``shrink``: the SURE weights of a packed-RAW noise-aware model
    (:func:`rawrcl.models.shrink.maybe_shrink`; None: as the commands run it — on for RAW denoising, off
    for JDD)."""
    from rawrcl.cfa import pack, unpack
    from rawrcl.infer.noise import camera_debanded, row_noise_for
    from rawrcl.models import SelfEnsemble
    from rawrcl.models.conditioning import WithNoise, camera_rows, is_noise_aware, is_row_aware
    from rawrcl.models.row_fusion import with_row_fusion
    from rawrcl.models.shrink import maybe_shrink
    from rawrcl.noise import NoiseModel

    model = model.to(device).eval()
    aware = is_noise_aware(model)
    shrunk = with_row_fusion(maybe_shrink(model, shrink))  # as `rawrcl denoise` binds it
    noise_of = noise_of or (lambda inp, meta: meta.get("noise"))

    def run(inp: torch.Tensor, task_: Task, meta: dict) -> torch.Tensor:
        x0 = torch.as_tensor(inp).float()[None].to(device)
        h, w = x0.shape[-2:]
        x = pad_to_multiple(x0, multiple)
        net = model
        if aware:
            noise = noise_of(torch.as_tensor(inp), meta)
            if noise is None:
                raise RawrclError("a noise-aware model needs the noise parameters of the test data")
            if x.shape[1] == 4 and isinstance(noise, NoiseModel) and is_row_aware(model):
                noise = row_noise_for(model, x0[0].cpu(), None, noise)  # as `rawrcl denoise` does
            if x.shape[1] == 4 and isinstance(noise, NoiseModel) and camera_rows(model) is not None:
                cfa = camera_debanded(model, unpack(x0[0].cpu().numpy(), "RGGB"), "RGGB", noise)
                x = pad_to_multiple(torch.as_tensor(pack(cfa, "RGGB"))[None].to(device), multiple)
            net = WithNoise(shrunk if x.shape[1] == 4 else model, noise, x.shape[1]).to(device)
        if self_ensemble:
            net = SelfEnsemble(net)
        with torch.no_grad(), two_pass_stages(net, passes(two_pass, self_ensemble)):
            y = net(x)[0]
        s = y.shape[-1] // x.shape[-1]
        return y[:, : h * s, : w * s].float().cpu()

    return run


def evaluate(
    model_or_baseline: str | Path | torch.nn.Module,
    task: str | Task,
    clean: str | Path | Sequence,
    noise: NoiseLike = None,
    seed: int = 0,
    *,
    limit: int | None = None,
    border: int = BORDER,
    unprocess: bool | None = None,
    device: str = "cpu",
    keep_samples: int = 0,
    self_ensemble: bool = False,
    noise_of: Callable[[torch.Tensor, dict], Any] | None = None,
    gharbi_weights: str | os.PathLike | None = None,
    two_pass: bool | None = None,
) -> dict:
    """Evaluate a checkpoint / model / classical baseline on a task.

    Parameters
    ----------
    model_or_baseline : a baseline name (see ``BASELINES``), ``"default"`` (the task's shipped weights), a
        checkpoint path or run dir, or an ``nn.Module`` taking the task's input (B, C, h, w) and returning
        its target shape.
    task : task name or :class:`~rawrcl.tasks.Task`.
    clean : folder of clean photos, or a list of arrays/paths (see :func:`load_images`).
    noise : noise specification (default: the task's, i.e. the paper sampler); ``"high"`` etc.
    seed : test-set seed. Image ``i`` (sorted order) is degraded with ``default_rng([seed, i])``, so every
        method sees the same noisy inputs.
    keep_samples : keep (input preview, output, target) sRGB arrays of the first k images under
        ``"samples"`` (not JSON-serialisable; for figures).
    self_ensemble : run a model as :class:`rawrcl.models.SelfEnsemble` (8 flips/transposes averaged;
        8× the time). Not for baselines.
    two_pass : a two-stage model's stages run on their input and on the transposed mosaic, averaged (the
        RAW output: the first stage only; ``--two-pass``); ``None`` as the commands run it (both stages
        twice at low noise, four times at the lowest), ``False`` one pass (``--one-pass``;
        :func:`rawrcl.models.compose.two_pass_stages`).
    noise_of : for noise-aware models, ``f(noisy input, meta) -> NoiseModel`` giving the noise parameters
        the model is told (default: the true ones the sample was made with).
    gharbi_weights : folder of Gharbi et al. 2016's released weights (baseline ``gharbi2016``).

    Returns
    -------
    dict with ``psnr``, ``ssim`` (means over images, 8-bit sRGB, border crop), ``psnr_linear`` (RAW-input
    tasks), ``n_images``, ``task``, ``model``, ``noise``, ``seed``, ``border``, ``seconds``, ``per_image``.
    """
    t = get_task(task, unprocess=unprocess)
    images = load_images(clean, limit)
    if not images:
        raise RawrclError("no test images")
    if isinstance(model_or_baseline, str) and model_or_baseline in BASELINE_NAMES:
        if self_ensemble:
            raise RawrclError("the self-ensemble (--tta) applies to models, not to classical baselines")
        runner = make_baseline(model_or_baseline, gharbi_weights)
        if not baseline_applies(model_or_baseline, t, gharbi_weights):
            raise RawrclError(f"baseline {model_or_baseline!r} does not apply to task {t.name!r}")
        label = model_or_baseline
    else:
        if isinstance(model_or_baseline, torch.nn.Module):
            model, label = model_or_baseline, type(model_or_baseline).__name__
        elif is_shipped(model_or_baseline):  # the task's shipped weights, as `--burst default`
            model, _ = load_for_task(None, t, device)
            label = "default"
        else:
            if not Path(model_or_baseline).exists():
                raise RawrclError(
                    f"{model_or_baseline}: no such checkpoint (or baseline name; known: "
                    f"{', '.join(BASELINE_NAMES)}, default)"
                )
            model, _ = load_for_task(model_or_baseline, t, device)
            label = str(model_or_baseline)
        if self_ensemble:
            label = f"{label} (self-ensemble)"
        if two_pass is not None:
            label = f"{label} ({'two' if two_pass else 'one'}-pass)"
        runner = model_predictor(
            model, t, device, self_ensemble=self_ensemble, noise_of=noise_of, two_pass=two_pass
        )
    per_image, samples = [], []
    t0 = time.perf_counter()
    for i, (name, img) in enumerate(images):
        rng = np.random.default_rng([int(seed), i])
        s = t.sample(img, rng, noise)
        out = runner(s["input"], t, s["meta"])
        if tuple(out.shape) != tuple(s["target"].shape):
            raise RawrclError(
                f"{label}: output shape {tuple(out.shape)} ≠ target {tuple(s['target'].shape)} on {name}"
            )
        b = border // 2 if t.target_domain == "raw" else border
        o8, t8 = to_uint8(to_srgb(out, t, s["meta"])), to_uint8(to_srgb(s["target"], t, s["meta"]))
        rec = {"name": name, "psnr": psnr(o8, t8, b), "ssim": ssim(o8, t8, b)}
        if t.raw_input:
            rec["psnr_linear"] = psnr_float(out, s["target"], b)
        per_image.append(rec)
        if i < keep_samples:
            samples.append(
                {"name": name, "output": o8, "target": t8, "input": _input_preview(s["input"], t, s)}
            )
    res: dict[str, Any] = {
        "task": t.name,
        "model": label,
        "noise": noise_label(noise if noise is not None else t.noise) if t.noisy else "none",
        "seed": int(seed),
        "n_images": len(per_image),
        "border": border,
        "psnr": float(np.mean([r["psnr"] for r in per_image])),
        "ssim": float(np.mean([r["ssim"] for r in per_image])),
    }
    if t.raw_input:
        res["psnr_linear"] = float(np.mean([r["psnr_linear"] for r in per_image]))
    res["seconds"] = round(time.perf_counter() - t0, 3)
    res["per_image"] = per_image
    if keep_samples:
        res["samples"] = samples
    return res


def _input_preview(inp: torch.Tensor, task: Task, s: dict) -> np.ndarray:
    """8-bit preview of a task input at target resolution (packed → half-res RGB, nearest upsampling)."""
    x = packed_to_rgb(inp) if task.raw_input else inp
    f = s["target"].shape[-1] // x.shape[-1] if task.target_domain != "raw" else 1
    if f > 1:
        x = x.repeat_interleave(f, dim=-2).repeat_interleave(f, dim=-1)
    return to_uint8(x)
