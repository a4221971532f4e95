"""Tiled, memory-bounded application of an image-to-image network (``tiled_apply``).

A full camera frame (12–60 MP) does not fit through a U-Net at once on a laptop, so the input is cut
into overlapping tiles that are run in small batches and blended back into one preallocated output
(in GPU memory when it fits comfortably, else on the CPU). Peak memory is bounded by
``batch_tiles × tile²`` activations plus the output, never by the image itself.

Blending
--------
Every tile is weighted by a separable window. Along a side that touches a neighbouring tile the
window is **zero on the outer quarter of the overlap** (``margin = overlap // 4``, the samples most
affected by the tile border) and rises as a **raised cosine** across the next ``overlap − 2·margin``
samples; along a side on the image border the window is 1. Weights are normalised by their sum, which
is separable too, so no weight image is stored. Consequences:

- no seams: the transition between two tiles is a smooth cross-fade;
- a network whose receptive-field *radius* is ≤ ``overlap // 4`` (in input pixels) gives exactly the
  whole-image result (up to float rounding): every output sample with a non-zero weight was computed
  from data that the tile holds in full;
- for networks with a larger receptive field (a U-Net of depth 3 sees ~±90 px) the difference to the
  whole-image result is bounded and shrinks as the overlap grows (``tests/test_infer.py`` bounds it;
  ``docs/weights.md`` gives measured numbers).

Sizes
-----
The image is first reflection-padded on the bottom/right to a multiple of the model's down-sampling
factor (``multiple``) and the output cropped back, exactly as whole-image inference does, so borders
agree too. The tile size is rounded up to that multiple. Every tile along an axis has the same length
(the last tile is shifted back to end on the border), so tiles batch without padding; each axis's tile
length is the shortest that needs no more tiles than ``tile`` does (:func:`fit_tile`), so little is
computed twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager, nullcontext

import torch
import torch.nn as nn

from rawrcl.device import resolve_device, resolve_precision, use_channels_last
from rawrcl.errors import RawrclError
from rawrcl.infer.memory import keep_freed_memory
from rawrcl.models.geometry import pad_to_multiple, size_multiple


def tile_starts(length: int, tile: int, overlap: int, multiple: int = 1) -> list[int]:
    """Start offsets of tiles of length ``tile`` covering ``[0, length)`` with at least ``overlap`` shared.

    The first tile starts at 0, the last ends at ``length``; starts are spread evenly between them and
    are multiples of ``multiple`` (``length`` and ``tile`` must be multiples of it), so every tile sees
    the same down-sampling grid as the whole image. When ``length <= tile`` there is one tile.
    """
    if length <= tile:
        return [0]
    if length % multiple or tile % multiple:
        raise ValueError("length and tile must be multiples of `multiple`")
    L, T, O = length // multiple, tile // multiple, -(-overlap // multiple)
    stride = max(T - O, 1)
    n = math.ceil((L - T) / stride) + 1
    return [multiple * ((i * (L - T)) // (n - 1)) for i in range(n)]


def fit_tile(length: int, tile: int, overlap: int, multiple: int = 1) -> int:
    """The shortest tile side (a multiple of ``multiple``, ≤ ``tile``, ≥ 2·``overlap``) that covers
    ``[0, length)`` with as few tiles as ``tile`` needs (:func:`tile_starts`): the same number of
    forward passes with less overlap computed twice, e.g. 3 tiles of 496 instead of 512 for 1416 packed rows
    (a 12 MP frame: 14 % fewer tile pixels). ``length`` and ``tile`` are multiples of ``multiple``."""
    if length <= tile:
        return length
    n = len(tile_starts(length, tile, overlap, multiple))
    need = -(-(length + (n - 1) * overlap) // n)  # n tiles of this side, each pair sharing ``overlap``
    side = max(-(-need // multiple) * multiple, -(-2 * overlap // multiple) * multiple)
    while side < tile and len(tile_starts(length, side, overlap, multiple)) > n:
        side += multiple
    return min(side, tile)


def _ramp(n: int, overlap: int, first: bool, last: bool, scale: int) -> torch.Tensor:
    """1-D window of ``n·scale`` output samples for a tile of ``n`` input samples.

    Zero on the outer ``overlap//4`` input samples of a side with a neighbour, raised-cosine across
    the next ``overlap - 2·(overlap//4)``, then 1. ``first``/``last``: the side lies on the image border.
    """
    margin = (overlap // 4) * scale
    ramp_len = max(overlap * scale - 2 * margin, 1)
    idx = torch.arange(n * scale, dtype=torch.float64)
    w = torch.ones(n * scale, dtype=torch.float64)

    def side(dist: torch.Tensor) -> torch.Tensor:
        t = ((dist - margin + 0.5) / ramp_len).clamp(0, 1)
        return torch.where(dist < margin, torch.zeros_like(t), 0.5 - 0.5 * torch.cos(math.pi * t))

    if not first:
        w = w * side(idx)
    if not last:
        w = w * side(n * scale - 1 - idx)
    return w


def whole_apply(
    model: nn.Module,
    x: torch.Tensor,
    scale: int = 1,
    multiple: int | None = None,
    device: str | torch.device | None = "cpu",
    precision: str = "fp32",
) -> torch.Tensor:
    """Run ``model`` on the whole image at once (the reference that :func:`tiled_apply` reproduces).

    Shapes: x (1, C, H, W) float → (1, C_out, scale·H, scale·W) float32 on the CPU.
    """
    dev = resolve_device(device)
    multiple = size_multiple(model) if multiple is None else multiple
    h, w = x.shape[-2:]
    dtype = resolve_precision(precision, dev)
    ctx = torch.autocast(dev.type, dtype=dtype) if dtype is not None else nullcontext()
    with torch.no_grad(), ctx, full_precision_head(model, dtype is not None):
        y = model(pad_to_multiple(x.to(dev, torch.float32), multiple))
    return y[..., : h * scale, : w * scale].float().cpu()


class _FullPrecisionHead(nn.Module):
    """Runs the wrapped output head in fp32 under autocast, so outputs keep full precision (a bf16 output
    has an 8-bit mantissa: visible steps in a 16-bit TIFF or a re-quantised DNG). The head is one conv."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return self.inner(x.float())

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)


@contextmanager
def full_precision_head(model: nn.Module, enabled: bool = True):
    """Temporarily wrap every ``.head`` of ``model`` and of the models it wraps (self-ensemble,
    denoise → demosaic) in :class:`_FullPrecisionHead`."""
    owners = [
        m
        for m in (model.modules() if enabled else ())
        if isinstance(getattr(m, "head", None), nn.Module) and not isinstance(m.head, _FullPrecisionHead)
    ]
    heads = [m.head for m in owners]
    for m, head in zip(owners, heads, strict=True):
        m.head = _FullPrecisionHead(head)
    try:
        yield model
    finally:
        for m, head in zip(owners, heads, strict=True):
            m.head = head


def check_tiling(tile: int, overlap: int, batch_tiles: int) -> None:
    """Refuse (one-line :class:`RawrclError`) a tile < 1, an overlap < 0 or a batch of tiles < 1 — checked
    again when the model's size multiple is known (:func:`tiled_apply`)."""
    if overlap < 0:
        raise RawrclError(f"--overlap must be ≥ 0, got {overlap}")
    if tile < 1:
        raise RawrclError(f"--tile must be ≥ 1, got {tile}")
    if batch_tiles < 1:
        raise RawrclError(f"--batch-tiles must be ≥ 1, got {batch_tiles}")


def tiled_apply(
    model: nn.Module,
    x: torch.Tensor,
    tile: int = 256,
    overlap: int = 32,
    scale: int = 1,
    batch_tiles: int = 4,
    device: str | torch.device | None = None,
    precision: str = "auto",
    channels_last: bool | None = None,
    multiple: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Apply ``model`` to a large image tile by tile, with overlap and smooth blending.

    Parameters
    ----------
    model : ``nn.Module`` mapping (B, C, h, w) → (B, C_out, scale·h, scale·w); put in eval mode by the
        caller. It is moved to ``device``.
    x : (1, C, H, W) float tensor on the CPU, e.g. packed RAW (4 channels, [0, 1] units) or RGB.
    tile : tile side in *input* pixels (packed pixels for RAW: a 256 tile covers 512×512 sensor
        pixels); rounded up to ``multiple``.
    overlap : input pixels shared by neighbouring tiles (≤ tile/2). The outer quarter is
        discarded, the middle half cross-faded (see module docstring).
    scale : output/input size ratio (1 for denoising heads, 2 for JDD: packed in → full-res out).
    batch_tiles : tiles per forward pass.
    device : "cpu", "cuda", "cuda:1", None/"auto" (CUDA when available).
    precision : "auto" | "fp32" | "bf16" | "fp16" (autocast dtype; see :func:`resolve_precision`).
    channels_last : use channels-last memory format (default :func:`rawrcl.device.use_channels_last`: on
        CUDA and CPU, off elsewhere).
    multiple : the model's size multiple (default :func:`rawrcl.models.size_multiple`).
    progress : called with the number of tiles just finished (e.g. ``tqdm.update``).

    Returns
    -------
    (1, C_out, scale·H, scale·W) float32 tensor on the CPU.
    """
    if x.ndim != 4 or x.shape[0] != 1:
        raise RawrclError(f"tiled_apply expects a (1, C, H, W) tensor, got shape {tuple(x.shape)}")
    dev = resolve_device(device)
    if dev.type == "cpu":
        keep_freed_memory()  # large activations reused, not page-faulted in per layer (rawrcl.infer.memory)
    multiple = size_multiple(model) if multiple is None else int(multiple)
    check_tiling(tile, overlap, batch_tiles)
    asked, tile = tile, int(math.ceil(tile / multiple) * multiple)
    if tile < 2 * overlap:
        rounded = f" (rounded up to {tile}, a multiple of {multiple})" if tile != asked else ""
        raise RawrclError(f"--tile {asked}{rounded} must be at least twice --overlap {overlap}")
    dtype = resolve_precision(precision, dev)
    if channels_last is None:
        channels_last = use_channels_last(dev)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model.to(dev, memory_format=fmt)

    h0, w0 = x.shape[-2:]
    xp = pad_to_multiple(x.float(), multiple)
    H, W = xp.shape[-2:]
    th, tw = fit_tile(H, tile, overlap, multiple), fit_tile(W, tile, overlap, multiple)
    ys, xs = tile_starts(H, th, overlap, multiple), tile_starts(W, tw, overlap, multiple)
    wy = [_ramp(th, overlap, i == 0, i == len(ys) - 1, scale) for i in range(len(ys))]
    wx = [_ramp(tw, overlap, j == 0, j == len(xs) - 1, scale) for j in range(len(xs))]
    norm_y = torch.zeros(H * scale, dtype=torch.float64)
    norm_x = torch.zeros(W * scale, dtype=torch.float64)
    for y0, w_ in zip(ys, wy, strict=True):
        norm_y[y0 * scale : (y0 + th) * scale] += w_
    for x0, w_ in zip(xs, wx, strict=True):
        norm_x[x0 * scale : (x0 + tw) * scale] += w_
    coords = [(i, j) for i in range(len(ys)) for j in range(len(xs))]

    # Accumulate on the GPU when the output fits comfortably (CPU-side blending would cap throughput),
    # else in CPU memory; either way one preallocated output, never all tiles at once.
    acc = torch.device("cpu")
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        c_guess = 4 * (xp.shape[1] + 4)  # bytes per output pixel, generous
        if c_guess * H * W * scale * scale < 0.3 * free:
            acc = dev
            xp = xp.to(dev)
    out: torch.Tensor | None = None
    wins_y = [w_.float().to(acc) for w_ in wy]
    wins_x = [w_.float().to(acc) for w_ in wx]
    ctx = torch.autocast(dev.type, dtype=dtype) if dtype is not None else nullcontext()
    with torch.no_grad(), full_precision_head(model, dtype is not None):
        for b0 in range(0, len(coords), batch_tiles):
            group = coords[b0 : b0 + batch_tiles]
            batch = torch.cat([xp[:, :, ys[i] : ys[i] + th, xs[j] : xs[j] + tw] for i, j in group])
            batch = batch.to(dev, non_blocking=True).contiguous(memory_format=fmt)
            with ctx:
                pred = model(batch)
            if pred.shape[-2:] != (th * scale, tw * scale):
                raise RawrclError(
                    f"model output {tuple(pred.shape[-2:])} does not match tile {th}×{tw} at scale {scale}"
                )
            pred = pred.float().to(acc)
            if out is None:
                out = torch.zeros(1, pred.shape[1], H * scale, W * scale, dtype=torch.float32, device=acc)
            for k, (i, j) in enumerate(group):
                win = wins_y[i][:, None] * wins_x[j][None, :]
                oy, ox = ys[i] * scale, xs[j] * scale
                out[0, :, oy : oy + th * scale, ox : ox + tw * scale].addcmul_(pred[k], win)
            if progress is not None:
                progress(len(group))
    assert out is not None
    out /= (norm_y[:, None] * norm_x[None, :]).float().to(acc)
    return out[..., : h0 * scale, : w0 * scale].cpu().contiguous()


def count_tiles(shape: tuple[int, int], tile: int, overlap: int, multiple: int = 1) -> int:
    """Number of tiles :func:`tiled_apply` uses for an input of (H, W) (for progress bars)."""
    tile = int(math.ceil(tile / multiple) * multiple)
    H = int(math.ceil(shape[0] / multiple) * multiple)
    W = int(math.ceil(shape[1] / multiple) * multiple)
    return len(tile_starts(H, min(tile, H), overlap, multiple)) * len(
        tile_starts(W, min(tile, W), overlap, multiple)
    )
