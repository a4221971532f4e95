"""Full-size inference on camera files: JDD (RAW → RGB), RAW denoising (RAW → RAW), RGB denoising.

Library layer of ``rawrcl jdd`` / ``rawrcl denoise``; the CLI only parses options and calls
:func:`run_jdd` / :func:`run_denoise`. Per file: ``read_raw(clip=False)`` (noise below black kept, as in
training; X-Trans, Foveon, linear and monochrome files are refused there in one line) → the model, bound
to the file's noise when it is noise-aware (:mod:`rawrcl.infer.noise`) → :func:`~rawrcl.infer.pipeline.
jdd_cfa` / :func:`~rawrcl.infer.pipeline.denoise_cfa` → a writer (:mod:`rawrcl.infer.writers`).

- JDD: written linear (×65535, 16-bit) or rendered to sRGB (white balance + colour matrix + gamma,
  :func:`rawrcl.isp.render_srgb`).
- RAW denoising: re-quantised to the file's black/white range and written as a DNG with the input's
  pattern and metadata (or as a 16-bit TIFF of the CFA in DN).
- RGB denoising (head ``"rgb"``): 8/16-bit photos (PNG/JPEG/TIFF) → same-size photo.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch.nn as nn

from rawrcl.device import resolve_device
from rawrcl.errors import RawrclError
from rawrcl.infer.batch import BatchResult, _format_from, _prepare, expand_inputs, output_is_file, run_batch
from rawrcl.infer.fusion import check_fuse_weight, fuse_bm3d, jdd_fused, require_two_stage
from rawrcl.infer.memory import keep_freed_memory
from rawrcl.infer.noise import (
    NoiseOptions,
    deband_raw,
    file_noise_for,
    prepare_raw,
    raw_model_for,
    resolve_noise,
    rgb_model_for,
)
from rawrcl.infer.pipeline import (
    TileOptions,
    channel_clip_levels,
    denoise_cfa,
    denoise_rgb,
    jdd_cfa,
    keep_saturated,
    task_model,
)
from rawrcl.infer.writers import BAND_ROWS, write_cfa_tiff, write_denoised_dng, write_image
from rawrcl.io import PHOTO_EXTENSIONS, RAW_EXTENSIONS, read_photo_depth
from rawrcl.models.loading import adapted_fusion, is_shipped

# ----------------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------------


def _render(raw, rgb_linear: np.ndarray, render: str) -> np.ndarray:
    if render == "linear":
        return rgb_linear
    if render != "srgb":
        raise RawrclError(f"--render {render!r}: expected srgb or linear")
    from rawrcl.isp import render_srgb

    rgb = np.asarray(rgb_linear)
    wb = _display_wb(raw, rgb)
    sat = channel_clip_levels(raw.cfa, raw.pattern)  # blown highlights render white, as in LibRaw
    out = np.empty(rgb.shape, dtype=np.float32)
    for r0 in range(0, rgb.shape[1], BAND_ROWS):  # in bands of rows: no full-size temporaries
        band = np.clip(rgb[:, r0 : r0 + BAND_ROWS], 0, 1)
        out[:, r0 : r0 + BAND_ROWS] = render_srgb(band, wb, raw.ccm, clip_highlights=sat)
    return out


def jdd_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    model: nn.Module,
    render: str = "srgb",
    opts: TileOptions | None = None,
    overwrite: bool = False,
    noise: NoiseOptions | None = None,
    log: Callable[[str], None] | None = None,
    fuse: float = 0.0,
) -> Path:
    """RAW file → demosaiced, denoised image file (``.tiff`` 16-bit or ``.png``: 8-bit sRGB, 16-bit linear).

    ``render="linear"``: linear camera RGB in the RAW's [0, 1] scale ×65535 (with an ICC profile of it when
    the file has a colour matrix: :mod:`rawrcl.io.icc`); ``"srgb"`` (tagged sRGB): white balance,
    colour matrix and sRGB gamma (:func:`rawrcl.isp.render_srgb`; gray-world white balance when the file
    carries none; blown highlights clipped white, as LibRaw's default). The CFA's pixel grid, turned for
    display as the file's orientation says (LibRaw's flip, as its own rendering does). A noise-aware
    ``model`` is told the file's noise as ``noise`` says (:func:`rawrcl.infer.noise.raw_model_for`; one
    ``log`` line per file). ``fuse`` > 0: a two-stage ``model`` with GAT+BM3D fused in between its stages
    (:func:`rawrcl.infer.fusion.jdd_fused`).
    """
    from rawrcl.io.raw import read_raw, to_display

    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise RawrclError(f"{dst}: exists (use --force to overwrite)")
    fuse = check_fuse_weight(fuse)
    keep_freed_memory()  # full-size arrays reused from here on (rawrcl.infer.memory)
    raw = read_raw(src, clip=False)  # keep noise below black: models are trained unclipped
    raw, fn = prepare_raw(raw, src, noise, log)
    raw, fn = deband_raw(model, raw, src, noise, log, fn)
    if fuse > 0:
        nm = file_noise_for(model, raw, src, noise, log, resolved=fn)
        rgb = jdd_fused(model, raw.cfa, raw.pattern, nm, fuse, opts, log, Path(src).name)
    else:
        net = raw_model_for(model, raw, src, noise, log, resolved=fn)
        _log_averaged_passes(net, src, opts, log)
        rgb = jdd_cfa(net, raw.cfa, raw.pattern, opts)
        _log_shrink(net, src, log)
    # turned for display as the camera was held
    img = to_display(_render(raw, rgb, render), int(raw.extra.get("flip", 0) or 0))
    bits = 8 if (dst.suffix.lower() == ".png" and render == "srgb") else 16
    icc = _output_profile(raw, rgb, render)
    return write_image(dst, img, bits=bits, overwrite=overwrite, icc=icc, camera=(raw.make, raw.model))


def _display_wb(raw, rgb_linear: np.ndarray) -> tuple[float, float, float]:
    """The white balance an output is shown with: the file's as-shot one, or — when it carries none — gray
    world over ``rgb_linear`` (3, H, W), as a raw developer's auto white balance would."""
    from rawrcl.isp import gray_world_wb, has_white_balance

    return raw.wb if has_white_balance(raw.wb) else gray_world_wb(np.asarray(rgb_linear))


def _output_profile(raw, rgb_linear: np.ndarray, render: str) -> bytes | None:
    """The ICC profile an output carries. ``"srgb"``: sRGB. ``"linear"``: the profile of the file's linear
    camera RGB (white balance as ``_render`` uses it, the file's colour matrix), so colour-managed editors
    show it white-balanced in its colours; None for a file without a colour matrix."""
    from rawrcl.io.icc import camera_rgb_to_d50, linear_rgb_profile
    from rawrcl.isp import srgb_profile

    if render == "srgb":
        return srgb_profile()
    if raw.ccm is None:
        return None
    wb = _display_wb(raw, rgb_linear)
    name = " ".join(v for v in (raw.make, raw.model) if v) or "camera"
    return linear_rgb_profile(camera_rgb_to_d50(raw.ccm, wb), f"rawrcl linear RGB, {name}")


def denoise_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    model: nn.Module | Callable[[], nn.Module] | None,
    rgb_model: nn.Module | Callable[[], nn.Module] | None = None,
    opts: TileOptions | None = None,
    overwrite: bool = False,
    noise: NoiseOptions | None = None,
    log: Callable[[str], None] | None = None,
    fuse: float = 0.0,
) -> Path:
    """Denoise one file. RAW → ``.dng`` (or ``.tif[f]``: CFA in DN); RGB photo → ``.png``/``.tif[f]``.

    ``model`` (head "raw") and ``rgb_model`` (head "rgb") may be callables that load the model on first
    use, so a batch of RAW files never needs an RGB model and vice versa. Noise-aware models are told the
    file's noise as ``noise`` says (:mod:`rawrcl.infer.noise`; photos: a given λshot,λread only).
    ``fuse`` > 0 (RAW only): the output is averaged with GAT+BM3D's, that weight (:mod:`rawrcl.infer.fusion`).
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() and not overwrite:
        raise RawrclError(f"{dst}: exists (use --force to overwrite)")
    fuse = check_fuse_weight(fuse)
    if is_rgb_file(src):
        if fuse > 0:
            raise RawrclError(f"{src}: --fuse-bm3d applies to RAW files, not to RGB photos")
        if rgb_model is None:
            raise RawrclError(
                f"{src}: RGB photo, but no RGB denoising model (pass --rgb-model CKPT with head 'rgb')"
            )
        net = rgb_model() if not isinstance(rgb_model, nn.Module) else rgb_model
        net = rgb_model_for(net, src, noise, log)
        rgb, bits = read_photo_depth(src)
        out = denoise_rgb(net, rgb, opts)
        if dst.suffix.lower() in (".dng",):
            raise RawrclError(f"{src}: an RGB photo cannot be written as DNG; use --format tiff or png")
        return write_image(dst, out, bits=bits, overwrite=overwrite)
    from rawrcl.io.raw import read_raw

    if model is None:
        raise RawrclError(f"{src}: no RAW denoising model")
    net = model() if not isinstance(model, nn.Module) else model
    keep_freed_memory()  # full-size arrays reused from here on (rawrcl.infer.memory)
    raw = read_raw(src, clip=False)  # keep noise below black: models are trained unclipped
    raw, fn = prepare_raw(raw, src, noise, log)
    raw, fn = deband_raw(net, raw, src, noise, log, fn)
    if fuse > 0 and fn is None:  # GAT+BM3D is told the file's noise, whether or not the network is
        fn = resolve_noise(raw, src, noise, log)
    net = raw_model_for(net, raw, src, noise, log, resolved=fn)
    _log_averaged_passes(net, src, opts, log)
    cfa = denoise_cfa(net, raw.cfa, raw.pattern, opts)
    _log_shrink(net, src, log)
    if fuse > 0:
        cfa = fuse_bm3d(cfa, raw.cfa, raw.pattern, fn.model, fuse, log, src.name)
    cfa = keep_saturated(cfa, raw.cfa)
    suffix = dst.suffix.lower()
    if suffix == ".dng":
        return write_denoised_dng(dst, raw, cfa, overwrite)
    if suffix in (".tif", ".tiff"):
        return write_cfa_tiff(dst, raw, cfa, overwrite)
    raise RawrclError(f"{dst}: RAW denoising writes .dng or .tiff, not {suffix!r}")


def _log_averaged_passes(
    net: nn.Module, src: str | os.PathLike, opts: TileOptions | None, log: Callable[[str], None] | None
) -> None:
    """One log line when ``net`` will average a stage over several orientations by default (under the gates:
    :func:`averaged_passes`), so that the longer time is explained; on the onnxruntime backend with a
    user's ONNX file, which holds one pass, one line saying so at such noise."""
    from rawrcl.models.compose import FIRST_GATE, QUAD_GATE, SIGMA_GATE, gated_passes, mid_grey_sigma, passes
    from rawrcl.models.conditioning import WithNoise

    o = opts or TileOptions()
    if log is None or passes(o.two_pass, o.self_ensemble) is not None:
        return
    found = averaged_passes(net)
    if found is None and o.backend == "onnxruntime" and isinstance(net, WithNoise):
        if int(gated_passes(net.noise[None], "first")[0]) > 1:  # a user's ONNX file: one pass
            sigma = float(mid_grey_sigma(net.noise[None])[0])
            log(
                f"{Path(src).name}: std {sigma:.4f} at mid-grey: an ONNX graph holds one pass of "
                "each stage, where --backend torch averages a two-stage model's stages over their "
                "orientations (docs/export.md)"
            )
    if found is not None:
        sigma, first, jdd = found
        stages = "both stages run" if jdd > 1 else "the first stage runs"
        turned = "on the mosaic turned four ways" if first == 4 else "on the mosaic and its transpose"
        gate = QUAD_GATE if first == 4 else SIGMA_GATE if jdd > 1 else FIRST_GATE
        log(
            f"{Path(src).name}: noise std {sigma:.4f} at mid-grey (at most {gate:g}): {stages} {turned}, "
            "averaged (longer, better; --one-pass skips it)"
        )


def averaged_passes(net: nn.Module) -> tuple[float, int, int] | None:
    """For a model bound to one noise level (:class:`~rawrcl.models.conditioning.WithNoise`): the std at
    mid-grey (:func:`rawrcl.models.compose.mid_grey_sigma`) and the pass counts of the first stage and of the
    JDD stage when a two-stage model inside averages its first stage over more than one orientation by
    default (:meth:`~rawrcl.models.compose.DenoiseThenDemosaic.first_passes`,
    :meth:`~rawrcl.models.compose.DenoiseThenDemosaic.jdd_passes`), or when the onnxruntime backend runs such
    a model's gated graphs (:class:`rawrcl.export.backend.GatedOrt`); else None."""
    from rawrcl.export.backend import GatedOrt
    from rawrcl.models.compose import DenoiseThenDemosaic, mid_grey_sigma
    from rawrcl.models.conditioning import WithNoise

    for m in net.modules():
        if isinstance(m, WithNoise) and isinstance(m.model, GatedOrt):  # the gates' graph, as torch runs
            first, jdd = m.model.passes(m.noise[None])
            if first > 1:
                return float(mid_grey_sigma(m.noise[None])[0]), first, jdd
        elif isinstance(m, WithNoise):
            for d in m.model.modules():
                if isinstance(d, DenoiseThenDemosaic) and (n := int(d.first_passes(m.noise[None])[0])) > 1:
                    return float(mid_grey_sigma(m.noise[None])[0]), n, int(d.jdd_passes(m.noise[None])[0])
    return None


def _log_shrink(net: nn.Module, src: str | os.PathLike, log: Callable[[str], None] | None) -> None:
    """The log lines on the SURE weights a file got (:func:`rawrcl.models.shrink.shrink_summary`) and on its
    banded tiles (:func:`rawrcl.models.row_fusion.row_fusion_summary`)."""
    from rawrcl.models.row_fusion import row_fusion_summary
    from rawrcl.models.shrink import shrink_summary

    for summary in (shrink_summary, row_fusion_summary):
        text = summary(net) if isinstance(net, nn.Module) else None
        if text is not None and log is not None:
            log(f"{Path(src).name}: {text}")


def is_rgb_file(path: str | os.PathLike) -> bool:
    """True for photo extensions (png/jpg/jpeg/tif/tiff/bmp); everything else is tried as a RAW file."""
    return Path(path).suffix.lower() in PHOTO_EXTENSIONS


def run_jdd(
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    model_path: str | os.PathLike | None = None,
    render: str = "srgb",
    fmt: str | None = None,
    opts: TileOptions | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    error: Callable[[str], None] | None = None,
    noise: NoiseOptions | None = None,
    fuse: float | None = 0.0,
) -> BatchResult:
    """``rawrcl jdd``: every RAW input → ``<OUT>/<stem>.tiff|png`` (or the file OUT for a single input).

    ``noise``: what a noise-aware model is told (default ``auto``: the DNG NoiseProfile, else a matching
    ``--noise-profile`` entry, else the single-image estimate); ignored (with one warning if given) for
    blind models. ``fuse``: ``--fuse-bm3d`` (:func:`jdd_file`; 0 or None: off — the weight a ``rawrcl adapt
    --method burst`` run chose applies to ``rawrcl denoise`` only, where it was measured)."""
    fuse = check_fuse_weight(fuse or 0.0)  # a bad weight fails before any file is read
    noise = noise or NoiseOptions()
    echo = echo or (lambda s: print(s, flush=True))
    if render not in ("srgb", "linear"):
        raise RawrclError(f"--render {render!r}: expected srgb or linear")
    opts = opts or TileOptions()
    resolve_device(opts.device)
    model = task_model(model_path, "jdd", opts)
    if fuse > 0:
        require_two_stage(model)
    error_ = error or (lambda s: print(s, file=sys.stderr, flush=True))
    files_probe, _ = expand_inputs(inputs, RAW_EXTENSIONS)
    single = output_is_file(inputs, files_probe, out)
    fmt = _format_from(out, fmt, ("tiff", "png"), "tiff", single)
    pairs, result = _prepare(inputs, out, RAW_EXTENSIONS, lambda f: f".{fmt}", error_)
    if single and pairs and pairs[0][1].suffix.lower().lstrip(".") not in ("tif", "tiff", "png"):
        raise RawrclError(f"-o {out}: jdd writes .tiff or .png files")
    return run_batch(
        pairs,
        lambda s, d: jdd_file(
            s, d, model, render=render, opts=opts, overwrite=overwrite, noise=noise, log=echo, fuse=fuse
        ),
        result,
        progress=progress,
        echo=echo,
        error=error_,
    )


def run_denoise(
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    model_path: str | os.PathLike | None = None,
    rgb_model_path: str | os.PathLike | None = None,
    fmt: str | None = None,
    opts: TileOptions | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    error: Callable[[str], None] | None = None,
    noise: NoiseOptions | None = None,
    fuse: float | None = None,
) -> BatchResult:
    """``rawrcl denoise``: RAW → ``.dng`` (default) or ``.tiff`` (CFA in DN); RGB photos → ``.png``/``.tiff``.

    ``model_path``: head "raw" checkpoint (None or ``"default"``: shipped ``raw_denoise_default.pt``);
    ``rgb_model_path``: head "rgb" checkpoint for photos (no default ships). A checkpoint given as
    ``model_path`` with head "rgb" is used for photos instead. ``noise``: as :func:`run_jdd`. ``fuse``:
    ``--fuse-bm3d``, the weight of GAT+BM3D averaged into RAW outputs (0: off; :mod:`rawrcl.infer.fusion`;
    None: the weight a ``rawrcl adapt --method burst`` run chose,
    :func:`rawrcl.models.loading.adapted_fusion`, else 0).
    """
    if fuse is not None:
        fuse = check_fuse_weight(fuse)  # a bad weight fails before any file is read
    noise = noise or NoiseOptions()
    echo = echo or (lambda s: print(s, flush=True))
    opts = opts or TileOptions()
    resolve_device(opts.device)
    error_ = error or (lambda s: print(s, file=sys.stderr, flush=True))
    raw_model: nn.Module | None = None
    rgb_model: nn.Module | None = None
    if is_shipped(model_path):
        model_path = None
    if model_path is not None:
        from rawrcl.export.backend import model_head

        head = model_head(model_path)
        if head == "rgb" and rgb_model_path is None:
            rgb_model_path, model_path = model_path, None

    def get_raw() -> nn.Module:
        nonlocal raw_model
        if raw_model is None:
            raw_model = task_model(model_path, "raw-denoise", opts)
        return raw_model

    def get_rgb() -> nn.Module:
        nonlocal rgb_model
        if rgb_model is None:
            rgb_model = task_model(rgb_model_path, "denoise", opts)
        return rgb_model

    if model_path is not None:
        get_raw()  # a bad --model is an error for the whole command, not per file
    if fuse is None:
        fuse = adapted_fusion(model_path)
        if fuse > 0:
            echo(
                f"{model_path}: averaged with GAT+BM3D at weight {fuse:g}, the weight its adapt run chose "
                "(--fuse-bm3d 0: off)"
            )
    if rgb_model_path is not None:
        get_rgb()
    exts = RAW_EXTENSIONS | frozenset(PHOTO_EXTENSIONS)
    files_probe, _ = expand_inputs(inputs, exts)
    single = output_is_file(inputs, files_probe, out)
    fmt_ = _format_from(out, fmt, ("dng", "tiff", "png"), "dng", single)

    def suffix_for(f: Path) -> str:
        if is_rgb_file(f):
            return ".tiff" if fmt_ == "tiff" else ".png"
        if fmt_ == "png":
            raise RawrclError("--format png applies to RGB photos only; RAW files are written as dng or tiff")
        return f".{fmt_}"

    def safe_suffix(f: Path) -> str:
        try:
            return suffix_for(f)
        except RawrclError:
            return ".invalid-format"

    pairs, result = _prepare(inputs, out, exts, safe_suffix, error_)

    def process(src: Path, dst: Path) -> Path:
        if not single:
            suffix_for(src)
        return denoise_file(
            src, dst, get_raw, get_rgb, opts=opts, overwrite=overwrite, noise=noise, log=echo, fuse=fuse
        )

    return run_batch(pairs, process, result, progress=progress, echo=echo, error=error_)
