"""Full-size inference on camera files: JDD (RAW → RGB), RAW denoising (RAW → RAW), RGB denoising.

Library layer of ``rawrcl jdd`` / ``rawrcl denoise``; the CLI only parses options and calls
:func:`run_jdd` / :func:`run_denoise`.

Pipeline (RAW inputs)
---------------------
``read_raw(clip=False)`` → CFA (H, W) float32 in [0, 1] (noise below black kept, as in training) →
:func:`rawrcl.cfa.align_rggb` (reflection-pads the top/left so R is top-left) → :func:`rawrcl.cfa.pack`
(4, ⌈H'/2⌉, ⌈W'/2⌉) [R, G1, G2, B] → model, tiled (:func:`rawrcl.infer.tiling.tiled_apply`) → crop back to
exactly the input's pixel grid (every Bayer phase, odd sizes included).

- JDD (head ``"jdd"``): output (3, H, W) float32 *linear camera RGB* in the RAW's [0, 1] scale.
  Written either linear (×65535, 16-bit) or rendered to sRGB (white balance + colour matrix + gamma,
  :func:`rawrcl.isp.render_srgb`).
- RAW denoising (head ``"raw"``): output CFA (H, W) float32 in [0, 1], re-quantised to the file's
  black/white range and written as a DNG with the input's pattern and metadata (or as a 16-bit TIFF of
  the CFA in DN).
- RGB denoising (head ``"rgb"``): 8/16-bit photos (PNG/JPEG/TIFF) → same-size photo.

Tile size and overlap are in *model-input* pixels: packed pixels for RAW (a 512 tile covers
1024×1024 sensor pixels), pixels for RGB.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from rawrcl.cfa import align_rggb, pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.infer.tiling import count_tiles, resolve_device, tiled_apply
from rawrcl.io import PHOTO_EXTENSIONS, RAW_EXTENSIONS, atomic_path, read_photo_depth
from rawrcl.models.geometry import size_multiple
from rawrcl.models.loading import load_for_task


def task_model(path: str | os.PathLike | None, task: str, opts: TileOptions) -> nn.Module:
    """The model for ``task`` on ``opts.backend``: torch (:func:`rawrcl.models.load_for_task`) or ONNX Runtime
    (:func:`rawrcl.export.backend.backend_model`, which may set ``opts`` to fp32 / CPU / a static tile)."""
    if opts.backend in (None, "torch") and not str(path or "").lower().endswith(".onnx"):
        opts.backend = "torch"
        return load_for_task(path, task)[0]
    from rawrcl.export.backend import backend_model

    return backend_model(path, task, opts)


# ----------------------------------------------------------------------------------------------------
# array-level inference
# ----------------------------------------------------------------------------------------------------


@dataclass
class TileOptions:
    """How :func:`tiled_apply` runs: tile/overlap in model-input pixels, see module docstring.

    ``self_ensemble``: average the model over the 8 Bayer-phase-preserving flips/transposes
    (:class:`rawrcl.models.SelfEnsemble`; 8× the time, +0.2–0.8 dB on our held-out photos).
    """

    tile: int = 512
    overlap: int = 32
    batch_tiles: int = 4
    device: str | None = None
    precision: str = "auto"
    progress: bool = False
    self_ensemble: bool = False
    backend: str | None = None  # "torch" | "onnxruntime"; None: onnxruntime for a .onnx model, else torch

    def apply(self, model: nn.Module, x: torch.Tensor, scale: int, desc: str = "tiles") -> torch.Tensor:
        """Run ``model`` over ``x`` (B, C, h, w) tile by tile (→ (B, C_out, scale·h, scale·w))."""
        if self.self_ensemble:
            from rawrcl.models import SelfEnsemble

            model = SelfEnsemble(model)
        bar = None
        cb: Callable[[int], None] | None = None
        if self.progress:
            from tqdm.auto import tqdm

            mult = size_multiple(model)
            total = count_tiles(tuple(x.shape[-2:]), self.tile, self.overlap, mult)
            bar = tqdm(total=total, desc=desc, unit="tile", leave=False, file=sys.stderr)
            cb = bar.update
        try:
            return tiled_apply(
                model,
                x,
                tile=self.tile,
                overlap=self.overlap,
                scale=scale,
                batch_tiles=self.batch_tiles,
                device=self.device,
                precision=self.precision,
                progress=cb,
            )
        finally:
            if bar is not None:
                bar.close()


def _check_cfa(cfa: np.ndarray) -> np.ndarray:
    cfa = np.asarray(cfa)
    if cfa.ndim != 2:
        raise RawrclError(f"expected a (H, W) CFA mosaic, got shape {cfa.shape}")
    if min(cfa.shape) < 4:
        raise RawrclError(f"CFA of size {cfa.shape[0]}×{cfa.shape[1]} is too small")
    return cfa.astype(np.float32, copy=False)


def jdd_cfa(model: nn.Module, cfa: np.ndarray, pattern: str, opts: TileOptions | None = None) -> np.ndarray:
    """Joint demosaicing + denoising of one Bayer mosaic.

    Parameters
    ----------
    model : head ``"jdd"`` (packed (B, 4, h, w) → (B, 3, 2h, 2w)).
    cfa : (H, W) float32 in [0, 1], any Bayer phase ``pattern``, any H, W ≥ 4 (odd too).

    Returns
    -------
    (3, H, W) float32 linear camera RGB in the RAW's [0, 1] scale (not clipped), on exactly the CFA's
    pixel grid: ``out[:, y, x]`` is the colour at CFA pixel (y, x).
    """
    cfa = _check_cfa(cfa)
    h, w = cfa.shape
    aligned, (dy, dx) = align_rggb(cfa, pattern)
    packed = torch.from_numpy(np.ascontiguousarray(pack(aligned, "RGGB")))[None]
    out = (opts or TileOptions()).apply(model, packed, scale=2, desc="jdd tiles")
    return out[0, :, dy : dy + h, dx : dx + w].numpy()


def denoise_cfa(
    model: nn.Module, cfa: np.ndarray, pattern: str, opts: TileOptions | None = None
) -> np.ndarray:
    """Denoise a Bayer mosaic with a packed → packed model (head ``"raw"``).

    Shapes: cfa (H, W) float32 [0, 1] with phase ``pattern`` → (H, W) float32 (same grid, not clipped).
    """
    cfa = _check_cfa(cfa)
    h, w = cfa.shape
    aligned, (dy, dx) = align_rggb(cfa, pattern)
    packed = torch.from_numpy(np.ascontiguousarray(pack(aligned, "RGGB")))[None]
    out = (opts or TileOptions()).apply(model, packed, scale=1, desc="denoise tiles")
    mosaic = unpack(out[0], "RGGB", shape=aligned.shape)
    return mosaic[dy : dy + h, dx : dx + w].numpy()


def denoise_rgb(model: nn.Module, rgb: np.ndarray, opts: TileOptions | None = None) -> np.ndarray:
    """Denoise an RGB photo with a head ``"rgb"`` model.

    Shapes: (3, H, W) float [0, 1] → (3, H, W) float32.
    """
    rgb = np.asarray(rgb, dtype=np.float32)
    if rgb.ndim != 3 or rgb.shape[0] != 3:
        raise RawrclError(f"expected a (3, H, W) RGB image, got shape {rgb.shape}")
    x = torch.from_numpy(np.ascontiguousarray(rgb))[None]
    out = (opts or TileOptions()).apply(model, x, scale=1, desc="denoise tiles")
    return out[0].numpy()


# ----------------------------------------------------------------------------------------------------
# writers (atomic, never overwrite unless asked)
# ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (same suffix); on success ``os.replace`` it onto ``path``.

    Raises :class:`RawrclError` if ``path`` exists and ``overwrite`` is False. The temporary file is
    removed on failure, so an interrupted write never leaves a half-written output.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise RawrclError(f"{path}: exists (use --force to overwrite)")
    if path.is_dir():
        raise RawrclError(f"{path}: is a folder")
    with atomic_path(path, suffix=f".tmp{path.suffix}") as tmp:
        yield tmp


def to_uint(rgb: np.ndarray, bits: int) -> np.ndarray:
    """(3, H, W) float [0, 1] → (H, W, 3) uint8/uint16 (clipped, rounded)."""
    top = (1 << bits) - 1
    a = np.clip(np.asarray(rgb, dtype=np.float32), 0, 1) * top + 0.5
    return np.ascontiguousarray(a.transpose(1, 2, 0)).astype(np.uint8 if bits == 8 else np.uint16)


def write_image(path: str | os.PathLike, rgb: np.ndarray, bits: int = 16, overwrite: bool = False) -> Path:
    """Write a (3, H, W) float [0, 1] image as TIFF (``.tif``/``.tiff``, 16-bit) or PNG (8 or 16-bit).

    Atomic; refuses to overwrite unless ``overwrite``. Returns the path.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".tif", ".tiff"):
        import tifffile

        with atomic_output(path, overwrite) as tmp:
            tifffile.imwrite(tmp, to_uint(rgb, 16), photometric="rgb", compression="zlib")
    elif suffix == ".png":
        import cv2

        data = to_uint(rgb, bits)[..., ::-1]  # RGB → BGR for OpenCV
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(data))
        if not ok:
            raise RawrclError(f"{path}: PNG encoding failed")
        with atomic_output(path, overwrite) as tmp:
            tmp.write_bytes(buf.tobytes())
    else:
        raise RawrclError(f"{path}: unsupported output format {suffix!r} (use .tiff or .png)")
    return path


def requantize_cfa(
    cfa: np.ndarray, pattern: str, black_level: Sequence[float], white_level: float
) -> np.ndarray:
    """[0, 1] CFA → raw DN: ``black[pos] + x·(white − black[pos])``, rounded, clipped to [0, white].

    Shapes: (H, W) float → (H, W) uint16. ``black_level`` holds 4 values, one per position of the 2×2
    tile, row-major (the :class:`~rawrcl.io.raw.RawImage` convention).
    """
    cfa = np.asarray(cfa, dtype=np.float64)
    black = np.asarray(black_level, dtype=np.float64).reshape(2, 2)
    h, w = cfa.shape
    bl = np.tile(black, ((h + 1) // 2, (w + 1) // 2))[:h, :w]
    dn = bl + cfa * (float(white_level) - bl)
    return np.clip(np.rint(dn), 0, min(float(white_level), 65535)).astype(np.uint16)


def write_denoised_dng(path: str | os.PathLike, raw, cfa: np.ndarray, overwrite: bool = False) -> Path:
    """Write a denoised CFA as a DNG carrying the source :class:`~rawrcl.io.raw.RawImage`'s pattern, size,
    black/white levels and metadata (white balance, colour matrix, ISO, noise profile, make/model).

    ``cfa``: (H, W) float [0, 1] on the source's grid; re-quantised with :func:`requantize_cfa`.
    """
    from rawrcl.io.dng import write_dng

    path = Path(path)
    if path.exists() and not overwrite:
        raise RawrclError(f"{path}: exists (use --force to overwrite)")
    if path.is_dir():
        raise RawrclError(f"{path}: is a folder")
    dn = requantize_cfa(cfa, raw.pattern, raw.black_level, raw.white_level)
    color_matrix = raw.xyz_to_cam if getattr(raw, "xyz_to_cam", None) is not None else None
    return write_dng(  # atomic itself, so a write error names the output, not a temporary file
        path,
        dn,
        raw.pattern,
        raw.black_level,
        raw.white_level,
        wb=raw.wb,
        color_matrix=color_matrix,
        iso=raw.iso,
        exposure_time=getattr(raw, "exposure_time", None),
        noise_profile=raw.noise_profile,
        make=raw.make or "rawrcl",
        model=raw.model or "rawrcl",
        overwrite=True,
    )


def write_cfa_tiff(path: str | os.PathLike, raw, cfa: np.ndarray, overwrite: bool = False) -> Path:
    """Write the denoised CFA in raw DN (black/white range of the source) as a single-channel 16-bit TIFF."""
    import tifffile

    dn = requantize_cfa(cfa, raw.pattern, raw.black_level, raw.white_level)
    with atomic_output(path, overwrite) as tmp:
        tifffile.imwrite(tmp, dn, photometric="minisblack", compression="zlib")
    return Path(path)


# ----------------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------------


def _render(raw, rgb_linear: np.ndarray, render: str) -> np.ndarray:
    if render == "linear":
        return rgb_linear
    if render != "srgb":
        raise RawrclError(f"--render {render!r}: expected srgb or linear")
    from rawrcl.isp import gray_world_wb, has_white_balance, render_srgb

    rgb = np.clip(rgb_linear, 0, 1)
    # no as-shot white balance in the file: gray world, as a raw developer's auto white balance would
    wb = raw.wb if has_white_balance(raw.wb) else gray_world_wb(rgb)
    out = render_srgb(rgb, wb, raw.ccm)
    return out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)


def jdd_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    model: nn.Module,
    render: str = "srgb",
    opts: TileOptions | None = None,
    overwrite: bool = False,
) -> Path:
    """RAW file → demosaiced, denoised image file (``.tiff`` 16-bit or ``.png``: 8-bit sRGB, 16-bit linear).

    ``render="linear"``: linear camera RGB in the RAW's [0, 1] scale ×65535; ``"srgb"``: white balance,
    colour matrix and sRGB gamma (:func:`rawrcl.isp.render_srgb`; gray-world white balance when the file
    carries none). Same pixel grid as the CFA.
    """
    from rawrcl.io.raw import read_raw

    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise RawrclError(f"{dst}: exists (use --force to overwrite)")
    raw = read_raw(src, clip=False)  # keep noise below black: models are trained unclipped
    rgb = jdd_cfa(model, raw.cfa, raw.pattern, opts)
    img = _render(raw, rgb, render)
    bits = 8 if (dst.suffix.lower() == ".png" and render == "srgb") else 16
    return write_image(dst, img, bits=bits, overwrite=overwrite)


def denoise_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    model: nn.Module | Callable[[], nn.Module] | None,
    rgb_model: nn.Module | Callable[[], nn.Module] | None = None,
    opts: TileOptions | None = None,
    overwrite: bool = False,
) -> Path:
    """Denoise one file. RAW → ``.dng`` (or ``.tif[f]``: CFA in DN); RGB photo → ``.png``/``.tif[f]``.

    ``model`` (head "raw") and ``rgb_model`` (head "rgb") may be callables that load the model on first
    use, so a batch of RAW files never needs an RGB model and vice versa.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() and not overwrite:
        raise RawrclError(f"{dst}: exists (use --force to overwrite)")
    if is_rgb_file(src):
        if rgb_model is None:
            raise RawrclError(
                f"{src}: RGB photo, but no RGB denoising model (pass --rgb-model CKPT with head 'rgb')"
            )
        net = rgb_model() if not isinstance(rgb_model, nn.Module) else rgb_model
        rgb, bits = read_photo_depth(src)
        out = denoise_rgb(net, rgb, opts)
        if dst.suffix.lower() in (".dng",):
            raise RawrclError(f"{src}: an RGB photo cannot be written as DNG; use --format tiff or png")
        return write_image(dst, out, bits=bits, overwrite=overwrite)
    from rawrcl.io.raw import read_raw

    if model is None:
        raise RawrclError(f"{src}: no RAW denoising model")
    net = model() if not isinstance(model, nn.Module) else model
    raw = read_raw(src, clip=False)  # keep noise below black: models are trained unclipped
    cfa = denoise_cfa(net, raw.cfa, raw.pattern, opts)
    suffix = dst.suffix.lower()
    if suffix == ".dng":
        return write_denoised_dng(dst, raw, cfa, overwrite)
    if suffix in (".tif", ".tiff"):
        return write_cfa_tiff(dst, raw, cfa, overwrite)
    raise RawrclError(f"{dst}: RAW denoising writes .dng or .tiff, not {suffix!r}")


def is_rgb_file(path: str | os.PathLike) -> bool:
    """True for photo extensions (png/jpg/jpeg/tif/tiff/bmp); everything else is tried as a RAW file."""
    return Path(path).suffix.lower() in PHOTO_EXTENSIONS


# ----------------------------------------------------------------------------------------------------
# batches
# ----------------------------------------------------------------------------------------------------


@dataclass
class BatchResult:
    """Outcome of a batch: written outputs and one error line per failed input."""

    written: list[tuple[Path, Path]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def expand_inputs(
    inputs: Sequence[str | os.PathLike], extensions: frozenset[str]
) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files, folders (non-recursive, files with ``extensions``) and globs → (sorted unique files, errors).

    Explicitly named files are kept whatever their extension (a bad one fails later, on its own).
    """
    files: list[Path] = []
    errors: list[tuple[str, str]] = []
    for item in inputs:
        s = str(item)
        p = Path(s)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in extensions)
            if not found:
                errors.append((s, f"folder has no files with extensions {' '.join(sorted(extensions))}"))
            files.extend(found)
        elif p.is_file():
            files.append(p)
        elif glob.has_magic(s):
            found = sorted(Path(f) for f in glob.glob(s) if Path(f).is_file())
            if not found:
                errors.append((s, "pattern matches no file"))
            files.extend(found)
        else:
            errors.append((s, "no such file or folder"))
    seen: set[Path] = set()
    unique = []
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors


def plan_outputs(
    files: Sequence[Path],
    out: str | os.PathLike,
    suffix_for: Callable[[Path], str],
    single_target: bool,
) -> tuple[list[tuple[Path, Path]], list[tuple[str, str]]]:
    """Map inputs to output paths. ``out`` is a file when ``single_target`` (one input, OUT not a folder),
    else a folder that receives ``<stem><suffix>``. Collisions and outputs equal to an input are errors."""
    out = Path(out)
    pairs: list[tuple[Path, Path]] = []
    errors: list[tuple[str, str]] = []
    taken: dict[Path, Path] = {}
    inputs = {f.resolve() for f in files}
    for f in files:
        dst = out if single_target else out / (f.stem + suffix_for(f))
        key = dst.resolve()
        if key in inputs:
            errors.append((str(f), f"output {dst} would replace an input file; choose another -o"))
        elif key in taken:
            errors.append((str(f), f"output {dst} is also the output of {taken[key]}"))
        else:
            taken[key] = f
            pairs.append((f, dst))
    return pairs, errors


def output_is_file(
    inputs: Sequence[str | os.PathLike], files: Sequence[Path], out: str | os.PathLike
) -> bool:
    """OUT names a single file when exactly one file input is given (no folder, no glob), OUT is not an
    existing folder, does not end with a separator, and has a suffix."""
    s = str(out)
    if Path(s).is_dir() or s.endswith(("/", os.sep)) or not Path(s).suffix:
        return False
    return len(inputs) == 1 and len(files) == 1 and Path(str(inputs[0])).is_file()


def run_batch(
    pairs: Sequence[tuple[Path, Path]],
    process: Callable[[Path, Path], Path],
    result: BatchResult | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    error: Callable[[str], None] | None = None,
) -> BatchResult:
    """Run ``process(src, dst)`` on each pair; a failure is recorded (one line) and the rest still run."""
    result = result or BatchResult()
    echo = echo or (lambda s: print(s, flush=True))
    error = error or (lambda s: print(s, file=sys.stderr, flush=True))
    bar = None
    if progress and len(pairs) > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pairs), desc="files", unit="file", file=sys.stderr)
        plain_error = error

        def error(msg: str) -> None:  # print above the progress bar, not through it
            with bar.external_write_mode(file=sys.stderr):
                plain_error(msg)

    try:
        for src, dst in pairs:
            t0 = time.perf_counter()
            try:
                written = process(src, dst)
            except KeyboardInterrupt:
                raise
            except RawrclError as exc:
                msg = str(exc)
                if str(src) not in msg and src.name not in msg:
                    msg = f"{src}: {msg}"
                result.failed.append((str(src), msg))
                error(f"rawrcl: error: {msg}")
            except Exception as exc:  # noqa: BLE001 - one bad file must not stop the batch
                msg = f"{src}: {type(exc).__name__}: {exc}".splitlines()[0]
                result.failed.append((str(src), msg))
                error(f"rawrcl: error: {msg}")
            else:
                result.written.append((src, written))
                echo(f"{src} -> {written} ({time.perf_counter() - t0:.1f} s)")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return result


def _prepare(
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    extensions: frozenset[str],
    suffix_for: Callable[[Path], str],
    error: Callable[[str], None],
) -> tuple[list[tuple[Path, Path]], BatchResult]:
    if not inputs:
        raise RawrclError("no INPUT given")
    files, errs = expand_inputs(inputs, extensions)
    single = output_is_file(inputs, files, out)
    if not single and Path(out).is_file():
        raise RawrclError(f"-o {out}: is a file, but several inputs need an output folder")
    pairs, errs2 = plan_outputs(files, out, suffix_for, single)
    result = BatchResult()
    for src, msg in errs + errs2:
        result.failed.append((src, f"{src}: {msg}"))
        error(f"rawrcl: error: {src}: {msg}")
    return pairs, result


def _format_from(
    out: str | os.PathLike, fmt: str | None, allowed: Sequence[str], default: str, single: bool
) -> str:
    suffix = Path(out).suffix.lower().lstrip(".") if single else ""
    suffix = {"tif": "tiff"}.get(suffix, suffix)
    if fmt is None:
        return suffix if suffix in allowed else default
    fmt = {"tif": "tiff"}.get(fmt.lower(), fmt.lower())
    if fmt not in allowed:
        raise RawrclError(f"--format {fmt!r}: expected one of {', '.join(allowed)}")
    return fmt


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
) -> BatchResult:
    """``rawrcl jdd``: every RAW input → ``<OUT>/<stem>.tiff|png`` (or the file OUT for a single input)."""
    if render not in ("srgb", "linear"):
        raise RawrclError(f"--render {render!r}: expected srgb or linear")
    opts = opts or TileOptions()
    resolve_device(opts.device)
    model = task_model(model_path, "jdd", opts)
    error_ = error or (lambda s: print(s, file=sys.stderr, flush=True))
    files_probe, _ = expand_inputs(inputs, RAW_EXTENSIONS)
    single = output_is_file(inputs, files_probe, out)
    fmt = _format_from(out, fmt, ("tiff", "png"), "tiff", single)
    pairs, result = _prepare(inputs, out, RAW_EXTENSIONS, lambda f: f".{fmt}", error_)
    if single and pairs and pairs[0][1].suffix.lower().lstrip(".") not in ("tif", "tiff", "png"):
        raise RawrclError(f"-o {out}: jdd writes .tiff or .png files")
    return run_batch(
        pairs,
        lambda s, d: jdd_file(s, d, model, render=render, opts=opts, overwrite=overwrite),
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
) -> BatchResult:
    """``rawrcl denoise``: RAW → ``.dng`` (default) or ``.tiff`` (CFA in DN); RGB photos → ``.png``/``.tiff``.

    ``model_path``: head "raw" checkpoint (default: shipped ``raw_denoise_default.pt``);
    ``rgb_model_path``: head "rgb" checkpoint for photos (no default ships). A checkpoint given as
    ``model_path`` with head "rgb" is used for photos instead.
    """
    opts = opts or TileOptions()
    resolve_device(opts.device)
    error_ = error or (lambda s: print(s, file=sys.stderr, flush=True))
    raw_model: nn.Module | None = None
    rgb_model: nn.Module | None = None
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
        return denoise_file(src, dst, get_raw, get_rgb, opts=opts, overwrite=overwrite)

    return run_batch(pairs, process, result, progress=progress, echo=echo, error=error_)
