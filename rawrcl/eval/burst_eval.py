"""``rawrcl eval MODEL|baseline --burst DIR``: one method scored on the target frame of a real burst.

The burst machinery (registration, reference, mask, measured NLF, ceiling) is :mod:`rawrcl.eval.burst`; the
scores are :mod:`rawrcl.eval.burst_score`. This module runs one method on the target and reports it beside
the noisy target, with the burst's measured noise-level function next to the single-image estimate of the
target alone (:func:`rawrcl.calibration.resolve.file_noise` with ``image``, what ``--noise auto`` uses on a
file without a NoiseProfile).

Methods
-------
- a checkpoint or run directory (``.onnx`` too): head ``raw`` → scored as a mosaic; head ``jdd`` → the
  RGB output sampled back at each pixel's own CFA colour (:func:`rawrcl.eval.burst_score.score_jdd`);
  ``default`` = the shipped weights of ``task`` (``raw-denoise`` unless told ``jdd``). Run like ``rawrcl
  denoise``/``jdd`` (tiled, :class:`rawrcl.infer.TileOptions`).
- baselines: ``noisy`` (the target itself), ``gat+bm3d`` and ``nlm`` (RAW domain,
  :mod:`rawrcl.gat`), ``gharbi2016`` (JDD; weights from ``gharbi_weights``), ``libraw-ahd``,
  ``libraw-aahd``, ``libraw-dht``, ``libraw-dht+fbdd`` (JDD: LibRaw's demosaicing of the target file's
  mosaic, :mod:`rawrcl.eval.libraw`; no noise told).

Noise (what noise-aware models and the noise-taking baselines are told): ``noise`` in the per-file grammar
(default ``auto``: the target's DNG NoiseProfile, else a matching ``noise_profile`` entry, else the
single-image estimate — burst frames usually carry no NoiseProfile) or ``burst``: the NLF measured from
the burst (per plane). ``noise_scale`` multiplies λ.

``fuse`` > 0: a RAW denoiser's output averaged with GAT+BM3D's, that weight, BM3D told the same noise — what
``rawrcl denoise --fuse-bm3d`` writes; a two-stage JDD model fused between its stages, as ``rawrcl jdd
--fuse-bm3d`` (:mod:`rawrcl.infer.fusion`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from rawrcl.burst_align import PackedGrid
from rawrcl.cfa import CHANNELS
from rawrcl.errors import RawrclError
from rawrcl.eval.burst import BORDER, RESAMPLING_WARN, BurstReference, build_reference, load_burst
from rawrcl.eval.burst_score import score_jdd, score_raw
from rawrcl.eval.libraw import NAMES as LIBRAW_NAMES
from rawrcl.eval.libraw import develop
from rawrcl.models.loading import is_shipped
from rawrcl.noise import NoiseModel
from rawrcl.noise.spec import BURST, parse_noise

#: baselines that run on a burst, with the kind of output they give
BURST_BASELINES = {
    "noisy": "raw",
    "gat+bm3d": "raw",
    "nlm": "raw",
    "gharbi2016": "jdd",
    **dict.fromkeys(LIBRAW_NAMES, "jdd"),
}


def _planes(nm: NoiseModel) -> tuple[list[float], list[float]]:
    """Per-plane (λshot, λread) lists of a noise model (scalars broadcast)."""
    p = nm.params(4).double().numpy()
    return [float(v) for v in p[0]], [float(v) for v in p[1]]


def _noise_record(nm: NoiseModel, source: str, spec: str) -> dict:
    ls, lr = _planes(nm)
    return {
        "spec": spec,
        "source": source,
        "lambda_shot": float(np.mean(ls)),
        "lambda_read": float(np.mean(lr)),
        "per_plane": {c: [ls[i], lr[i]] for i, c in enumerate(CHANNELS)},
    }


def _resolve_noise(
    spec: str, br: BurstReference, raw, path: Path, profile, scale: float, image_est
) -> tuple[NoiseModel, str]:
    """(noise model, source) for the method, per ``spec`` (module docstring)."""
    parsed = parse_noise(spec, BURST, "--noise")
    if not scale > 0:
        raise RawrclError(f"--noise-scale must be > 0, got {scale}")
    if parsed.kind == "burst":
        ls = tuple(float(br.nlf.per_plane[c][0]) * scale for c in CHANNELS)
        lr = tuple(float(br.nlf.per_plane[c][1]) * scale for c in CHANNELS)
        return NoiseModel(ls, lr), "burst NLF"
    if parsed.kind == "image" and image_est is not None and scale == 1.0:
        return image_est.model, "image estimate"
    from rawrcl.calibration.resolve import file_noise

    fn = file_noise(raw, parsed, path=path, profile=profile, scale=scale)
    return fn.model, fn.source_text


def _load_model(name: str, task: str | None, opts):
    """(model, kind) for a checkpoint / run dir / .onnx / ``default``."""
    from rawrcl.infer.pipeline import task_model

    if is_shipped(name):
        t = task or "raw-denoise"
        return task_model(None, t, opts), "raw" if t == "raw-denoise" else "jdd"
    p = Path(name)
    if not p.exists():
        raise RawrclError(
            f"{name}: no such checkpoint (or burst baseline; known: {', '.join(BURST_BASELINES)}, default)"
        )
    from rawrcl.export.backend import model_head
    from rawrcl.models.loading import checkpoint_for

    # a run directory: the file the task's command would run (an adapt run's denoise.pt / jdd.pt, else
    # last.pt; a blind-spot run's last.pt is its network alone, with no head)
    head = model_head(checkpoint_for(p, "jdd" if task == "jdd" else "raw-denoise") if p.is_dir() else p)
    if task == "jdd" and head in ("raw", "jdd"):
        return task_model(p, "jdd", opts), "jdd"
    if head == "raw":
        return task_model(p, "raw-denoise", opts), "raw"
    if head == "jdd":
        return task_model(p, "jdd", opts), "jdd"
    raise RawrclError(
        f"{name}: head {head!r}; a burst evaluation needs a RAW denoiser ('raw') or 'jdd' model"
    )


def gharbi_on_mosaic(
    net, cfa: np.ndarray, pattern: str, lambda_shot, lambda_read
) -> tuple[np.ndarray, float]:
    """Gharbi et al. 2016's JDD of a mosaic (H, W) [0, 1] of any phase, σ from the per-plane λ
    (:func:`rawrcl.eval.gharbi2016.gharbi_sigma`): ((3, H, W) RGB on the mosaic's grid, σ)."""
    from rawrcl.eval.gharbi2016 import gharbi_jdd, gharbi_sigma

    grid = PackedGrid.of(cfa.shape, pattern)
    x = torch.from_numpy(grid.pack(cfa).astype(np.float32))[None]
    sigma = gharbi_sigma(x, lambda_shot, lambda_read)
    dy, dx = grid.offset
    h, w = cfa.shape
    with torch.no_grad():
        out = gharbi_jdd(net, x, sigma)[0].numpy()[:, dy : dy + h, dx : dx + w]
    return out, float(sigma[0])


def model_output(
    model,
    kind: str,
    mosaic: np.ndarray,
    pattern: str,
    noise: NoiseModel | None,
    opts,
    shrink: bool | None = None,
) -> tuple[np.ndarray, str | None]:
    """A rawrcl model's output on ``mosaic`` (H, W) [0, 1] as ``rawrcl denoise`` (``kind`` "raw": (H, W))
    or ``rawrcl jdd`` ("jdd": (3, H, W) linear RGB) runs it: told ``noise`` (None: a blind model), the SURE
    weights per ``shrink`` (None: the command's default), tiled per ``opts``. Returns (output, the SURE
    weights' one-line summary or None)."""
    from rawrcl.infer.noise import bind_noise
    from rawrcl.infer.pipeline import denoise_cfa, jdd_cfa
    from rawrcl.models.shrink import shrink_summary

    net = bind_noise(model, noise, 4, shrink)
    out = (denoise_cfa if kind == "raw" else jdd_cfa)(net, mosaic, pattern, opts)
    return out, shrink_summary(net)


def evaluate_burst(
    method: str,
    folder: str | os.PathLike,
    *,
    target: str | None = None,
    task: str | None = None,
    noise: str | None = None,
    noise_profile: str | os.PathLike | None = None,
    noise_scale: float = 1.0,
    gharbi_weights: str | os.PathLike | None = None,
    opts=None,
    border: int = BORDER,
    plot: str | os.PathLike | None = None,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    fuse: float | None = 0.0,
    shrink: bool | None = None,
) -> dict:
    """Score ``method`` (module docstring) on the target frame of the burst in ``folder``.

    Parameters
    ----------
    target : the target frame's file name or stem (default: the first sorted file).
    task : ``jdd`` runs a RAW denoiser as denoise → bilinear demosaic, and makes ``default`` the JDD weights.
    noise, noise_profile, noise_scale : what a noise-aware model or baseline is told (module docstring).
    opts : :class:`rawrcl.infer.TileOptions` for models.
    plot : write a side-by-side PNG (noisy, method, reference crops) here.
    fuse : weight of GAT+BM3D averaged in (module docstring; 0: off; None: for a RAW denoiser the weight its
        ``rawrcl adapt --method burst`` run chose, :func:`rawrcl.models.loading.adapted_fusion`, else 0).
    shrink : the SURE weights (:mod:`rawrcl.models.shrink`; None: the command's default, as ``rawrcl
        denoise`` / ``rawrcl jdd`` run it; with ``fuse``, the network half).

    Returns
    -------
    JSON-ready dict: ``method``, ``kind`` (raw | jdd), ``psnr``, ``ssim``, ``psnr_true``, ``ceiling``,
    ``mse`` (linear [0, 1], CFA domain, ``border`` px excluded, clipped pixels masked), ``psnr_loose`` (on
    every covered pixel where the target is not clipped, as in issue 19's first table), ``noisy`` (the same
    for the target), ``noise`` (what the method was told, or None), ``nlf`` (``burst``: measured; ``image``:
    the single-image estimate of the target, with its time), ``burst`` (the reference's summary),
    ``seconds`` (the method), ``total_seconds``.

    Raises :class:`RawrclError` (one line) for a folder that is not a burst of one static scene (too few
    frames, frames that differ in size or phase, fewer than half the frames registered, motion over most of
    the image) and for unknown methods.
    """
    from rawrcl.infer.noise import camera_debanded, row_noise_for
    from rawrcl.infer.pipeline import TileOptions
    from rawrcl.io.raw import read_raw

    say = log or (lambda s: None)
    t_all = time.perf_counter()
    spec = noise if noise is not None else "auto"
    parse_noise(spec, BURST, "--noise")  # a bad --noise fails before the reference is built
    if plot is not None and Path(plot).exists() and not overwrite:
        raise RawrclError(f"{plot}: exists (use --force to overwrite)")
    is_baseline = method in BURST_BASELINES
    if is_baseline and method == "gharbi2016" and gharbi_weights is None:
        raise RawrclError(
            "baseline 'gharbi2016' needs its released weights: --gharbi-weights DIR (not shipped)"
        )
    opts = opts or TileOptions()
    model, kind = (None, BURST_BASELINES[method]) if is_baseline else _load_model(method, task, opts)
    from rawrcl.infer.fusion import check_fuse_weight, fuse_bm3d, jdd_fused, require_two_stage
    from rawrcl.models.loading import adapted_fusion

    if fuse is None:  # a rawrcl adapt --method burst run's own weight (RAW denoisers)
        fuse = adapted_fusion(method) if not is_baseline and kind == "raw" else 0.0
        if fuse > 0:
            say(f"{method}: averaged with GAT+BM3D at weight {fuse:g}, the weight its adapt run chose")
    fuse = check_fuse_weight(fuse)
    if fuse > 0 and is_baseline:
        raise RawrclError(f"--fuse-bm3d applies to rawrcl models, not to the baseline {method}")
    if fuse > 0 and kind == "jdd":
        require_two_stage(model)

    burst = load_burst(folder, target)
    br = build_reference(burst, progress=say)
    summary = br.summary(border)
    grid = PackedGrid.of(burst.shape, burst.pattern)
    raw = read_raw(burst.paths[0], clip=False)

    # the single-image estimate of the target, reported beside the burst NLF
    from rawrcl.calibration.resolve import file_noise

    t0 = time.perf_counter()
    try:
        image_est = file_noise(raw, "image", path=burst.paths[0])
        image_rec = {**_noise_record(image_est.model, "image estimate", "image")}
    except RawrclError as exc:
        image_est, image_rec = None, {"error": str(exc)}
    image_rec["seconds"] = round(time.perf_counter() - t0, 2)

    from rawrcl.models.conditioning import is_noise_aware

    needs_noise = method in ("gat+bm3d", "nlm", "gharbi2016") or (model is not None and is_noise_aware(model))
    nm, noise_rec = None, None
    if needs_noise:
        nm, source = _resolve_noise(spec, br, raw, burst.paths[0], noise_profile, noise_scale, image_est)
        noise_rec = _noise_record(nm, source, spec)
    elif noise is not None or noise_profile is not None or noise_scale != 1.0:
        import warnings

        warnings.warn(f"{method} does not take the noise level: --noise options are ignored", stacklevel=2)

    t0 = time.perf_counter()
    if method == "noisy":
        out = br.target
    elif method in ("gat+bm3d", "nlm"):
        from rawrcl.gat import gat_bm3d, nlm_raw

        ls, lr = _planes(nm)
        out = grid.unpack((gat_bm3d if method == "gat+bm3d" else nlm_raw)(grid.pack(br.target), ls, lr))
    elif method in LIBRAW_NAMES:
        out = develop(method, br.target, burst.pattern)
    elif method == "gharbi2016":
        from rawrcl.eval.gharbi2016 import load_gharbi2016

        out, sigma = gharbi_on_mosaic(load_gharbi2016(gharbi_weights), br.target, burst.pattern, *_planes(nm))
        noise_rec["gharbi_sigma"] = sigma
    else:
        target = br.target
        if nm is not None:
            nm = row_noise_for(model, br.target, burst.pattern, nm, say, Path(burst.paths[0]).name)
            target = camera_debanded(model, target, burst.pattern, nm, say, Path(burst.paths[0]).name)
        if fuse > 0 and nm is None:  # a blind model: BM3D still needs the noise
            nm, source = _resolve_noise(spec, br, raw, burst.paths[0], noise_profile, noise_scale, image_est)
            noise_rec = _noise_record(nm, source, spec)
        if fuse > 0 and kind == "jdd":
            out = jdd_fused(model, target, burst.pattern, nm, fuse, opts, say, "target")
        else:
            out, text = model_output(model, kind, target, burst.pattern, nm, opts, shrink)
            if text is not None:
                say(text)
                noise_rec["sure"] = text
        if fuse > 0 and kind == "raw":
            out = fuse_bm3d(out, target, burst.pattern, nm, fuse, say, "target")
        if fuse > 0:
            noise_rec["fuse_bm3d"] = fuse
    seconds = time.perf_counter() - t0

    scorer = score_raw if kind == "raw" else score_jdd
    res = scorer(br, out, border)
    noisy = score_raw(br, br.target, border)
    # the issue's first table: every covered pixel where the target is not clipped (the reference is
    # biased upwards where another frame clipped; for comparison only)
    loose = br.valid & ~burst.clipped[0]
    res["psnr_loose"] = scorer(br, out, border, loose)["psnr"]
    noisy["psnr_loose"] = score_raw(br, br.target, border, loose)["psnr"]
    doc = {
        "method": method,
        "kind": kind,
        **res,
        "noisy": noisy,
        "noise": noise_rec,
        "nlf": {"burst": br.nlf.to_dict(), "image": image_rec},
        "burst": summary,
        "seconds": round(seconds, 2),
        "total_seconds": round(time.perf_counter() - t_all, 2),
    }
    if plot is not None:
        from rawrcl.eval.burst_figure import render_comparison

        panels = {} if method == "noisy" else {method: (kind, out)}
        render_comparison(
            plot, br, panels, scores={"noisy": noisy["psnr"], method: res["psnr"]}, overwrite=overwrite
        )
        doc["plot"] = str(plot)
    return doc


def format_report(doc: dict) -> list[str]:
    """Human-readable lines of an :func:`evaluate_burst` result."""
    b = doc["burst"]
    lines = [
        f"burst: {b['n_frames']} frames {b['shape'][0]}×{b['shape'][1]} {b['pattern']}, target "
        f"{Path(b['target']).name}; mask {100 * b['mask_fraction']:.1f} % of the pixels "
        f"(border {b['border']}, clipped {100 * b['clipped_fraction']:.1f} %); "
        f"ceiling {b['ceiling']['psnr']:.2f} dB",
    ]
    if b.get("dropped"):
        lines.append(
            f"left out of the reference ({b['frames_used']} of {b['n_frames'] - 1} frames kept): "
            + "; ".join(f"{Path(d['path']).name} ({d['reason']})" for d in b["dropped"])
        )
    if b.get("motion_excluded_fraction", 0.0) > 0:
        excluded, masked = (100 * b[k] for k in ("motion_excluded_fraction", "motion_masked_fraction"))
        lines.append(
            f"motion: frames left out of the reference where they moved ({excluded:.1f} % of the usable "
            f"pixels), {masked:.1f} % masked (too few frames agree with the target there)"
        )
    if b.get("resampling_share", 0.0) > RESAMPLING_WARN:
        share = 100 * b["resampling_share"]
        lines.append(
            f"warning: the frames' own interpolation error is {share:.0f} % of the noise in their "
            "differences from the target (sharp, bright content): the burst NLF, the ceiling and the "
            "true-error PSNR overstate the noise, and the measured PSNR favours smoother outputs"
        )
    nb, ni = doc["nlf"]["burst"], doc["nlf"]["image"]
    bs, br = (float(np.mean([v[i] for v in nb["per_plane"].values()])) for i in (0, 1))
    line = f"noise-level function (plane means): burst λshot {bs:.3g}, λread {br:.3g}"
    if "error" in ni:
        line += f"; single-image estimate failed ({ni['error']})"
    else:
        line += (
            f"; single-image estimate λshot {ni['lambda_shot']:.3g}, λread {ni['lambda_read']:.3g} "
            f"({ni['seconds']:.1f} s)"
        )
    lines.append(line)
    if doc["noise"] is not None:
        n = doc["noise"]
        lines.append(
            f"{doc['method']} told: noise from {n['source']}: λshot {n['lambda_shot']:.3g}, "
            f"λread {n['lambda_read']:.3g} (plane mean)"
        )
    true = doc["psnr_true"]
    lines.append(
        f"{doc['method']} ({'CFA sites of the RGB output' if doc['kind'] == 'jdd' else 'CFA'}): "
        f"PSNR {doc['psnr']:.2f} dB ({doc['psnr'] - doc['noisy']['psnr']:+.2f} vs noisy "
        f"{doc['noisy']['psnr']:.2f}), SSIM {doc['ssim']:.4f}, true-error PSNR "
        f"{'—' if true is None else f'{true:.2f}'}, ceiling {doc['ceiling']:.2f} dB ({doc['seconds']:.1f} s)"
    )
    lines.append(
        f"  loose mask (target not clipped): PSNR {doc['psnr_loose']:.2f} dB, "
        f"noisy {doc['noisy']['psnr_loose']:.2f}"
    )
    lines.append(
        "  note: the reference's own resampling error is in neither the ceiling nor the true-error PSNR; it "
        "favours smoother outputs, so small margins between methods understate the sharper one's "
        "(docs/real_noise.md, 'How far the burst reference can be trusted')"
    )
    return lines
