"""``--backend torch|onnxruntime`` for ``rawrcl jdd`` / ``rawrcl denoise``: which engine runs the model.

- ``torch``: the checkpoint as today (:func:`rawrcl.models.load_for_task`).
- ``onnxruntime``: a ``.onnx`` file runs as it is; a checkpoint (or the shipped weights) is exported on
  the fly to a dynamic-shape graph of exactly the module ``load_for_task`` would run (a RAW denoiser asked
  for JDD included) and cached under ``$RAWRCL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/rawrcl`` or
  ``~/.cache/rawrcl``) in ``onnx/``, keyed by the checkpoint's sha256, the task and the export version; for
  a noise-aware two-stage checkpoint also its two- and four-pass graphs, when a file's noise first needs
  them (:class:`GatedOrt`: each file runs the graph of its gate, as the torch model averages its stages).

Both engines go through the same tiler (:func:`rawrcl.infer.tiling.tiled_apply`). ONNX Runtime runs fp32 on
the CPU only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.io import cache_root
from rawrcl.tasks import get_task

BACKENDS = ("torch", "onnxruntime")
#: bump when the exported graph of the same checkpoint changes (invalidates the cache)
EXPORT_VERSION = 2


def is_onnx(path: str | os.PathLike | None) -> bool:
    return path is not None and str(path).lower().endswith(".onnx")


def resolve_backend(backend: str | None, model_path: str | os.PathLike | None) -> str:
    """``None`` → ``onnxruntime`` for a ``.onnx`` model, else ``torch``; refuses a mismatch in one line."""
    if backend is None:
        return "onnxruntime" if is_onnx(model_path) else "torch"
    if backend not in BACKENDS:
        raise RawrclError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "torch" and is_onnx(model_path):
        raise RawrclError(f"--model {model_path}: an ONNX file runs with --backend onnxruntime")
    return backend


def cache_dir() -> Path:
    """Folder of on-the-fly exports (``onnx`` in :func:`rawrcl.io.cache_root`), created if needed."""
    d = cache_root() / "onnx"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cached_export(model_path: str | os.PathLike | None, task: str, passes: tuple[int, int] = (1, 1)) -> Path:
    """Dynamic-shape ONNX export of what ``load_for_task(model_path, task)`` runs (made when not cached);
    a noise-aware two-stage model's graph holds ``passes`` = (first stage, JDD stage) orientations
    (:func:`rawrcl.export.build.prepare`)."""
    from rawrcl.export.build import export_prepared, prepare
    from rawrcl.export.graph import OPSET, file_sha256
    from rawrcl.models import load_checkpoint
    from rawrcl.models.loading import checkpoint_for, load_for_task

    load_for_task(model_path, task)  # the head / input checks and their messages, as with --backend torch
    ckpt = checkpoint_for(model_path, task)
    sha = file_sha256(ckpt)
    each = f"-p{passes[0]}x{passes[1]}" if max(passes) > 1 else ""
    target = cache_dir() / f"{sha[:24]}-{task}-op{OPSET}-v{EXPORT_VERSION}{each}.onnx"
    if not target.is_file():
        model, cfg = load_checkpoint(ckpt)
        # noise-aware: a noise input
        prep = prepare(model, cfg, head=get_task(task).head, name=str(ckpt), passes=passes)
        export_prepared(prep, target, tile=None, checkpoint=ckpt, name=str(ckpt))
    return target


def onnx_model(path: str | os.PathLike, task: str):
    """An :class:`rawrcl.export.ort.OrtModel` for ``task``; refuses a graph of the wrong kind (one line)."""
    from rawrcl.export.ort import OrtModel

    m = OrtModel(path)
    want = get_task(task).head
    ok = m.head_name == want or (task == "jdd" and m.head_name is None and (m.in_channels, m.scale) == (4, 2))
    if not ok:
        raise RawrclError(
            f"{path}: ONNX graph is {m.head_name or 'unknown'} ({m.in_channels} channels in, "
            f"scale {m.scale}); "
            f"{task!r} needs head {want!r}"
        )
    return m


def model_head(path: str | os.PathLike) -> str | None:
    """Head of a checkpoint or ONNX file, or of the file a run directory gives RAW denoising
    (:func:`rawrcl.models.loading.checkpoint_for`; for ``rawrcl denoise`` choosing RAW vs photo models)."""
    if is_onnx(path):
        from rawrcl.export.ort import OrtModel

        return OrtModel(path).head_name
    from rawrcl.models import read_checkpoint
    from rawrcl.models.loading import checkpoint_for

    return read_checkpoint(checkpoint_for(path, "raw-denoise"))["config"].get("head")


def backend_model(model_path: str | os.PathLike | None, task: str, opts) -> nn.Module:
    """The model ``task`` runs on ``opts.backend`` (a :class:`rawrcl.infer.TileOptions`).

    For ``onnxruntime`` this also fixes ``opts``: precision fp32 (bf16/fp16 refused), CPU only, and the
    tile of a static graph.
    """
    from rawrcl.device import resolve_device
    from rawrcl.models.loading import load_for_task

    backend = resolve_backend(getattr(opts, "backend", None), model_path)
    opts.backend = backend
    if backend == "torch":
        return load_for_task(model_path, task)[0]
    from rawrcl.export.ort import require_onnxruntime

    require_onnxruntime()
    if opts.precision in ("bf16", "fp16"):
        raise RawrclError(f"--precision {opts.precision}: the onnxruntime backend runs fp32 only")
    if opts.device not in (None, "auto") and resolve_device(opts.device).type != "cpu":
        raise RawrclError(f"--device {opts.device}: the onnxruntime backend runs on the CPU only")
    opts.precision, opts.device = "fp32", "cpu"
    path = model_path if is_onnx(model_path) else cached_export(model_path, task)
    m = onnx_model(path, task)
    if m.static_tile is not None:
        opts.tile = m.static_tile
    if not is_onnx(model_path) and m.noise_input and _gated(m, opts):
        return GatedOrt(m, lambda n: onnx_model(cached_export(model_path, task, n), task))
    return m


def _gated(graph: nn.Module, opts) -> bool:
    """Whether the torch backend would average a stage over orientations at low noise for this run: the
    exported model (its config in the graph's ``source`` metadata) is two-stage, without ``--one-pass`` /
    ``--tta`` (:func:`rawrcl.models.compose.passes`)."""
    from rawrcl.models.compose import passes

    if passes(opts.two_pass, opts.self_ensemble) is not None:
        return False
    source = json.loads(graph.info["metadata"].get("source") or "{}")
    return source.get("config", {}).get("arch") == "two_stage"


class GatedOrt(nn.Module):
    """The onnxruntime backend's model for a noise-aware two-stage checkpoint: each call runs the graph
    holding as many orientations of each stage as the torch model's gates give the told noise
    (:func:`rawrcl.models.compose.gated_passes`; one, two or four — exported and cached when first
    needed), so that ``--backend onnxruntime`` gives ``--backend torch``'s output. Shapes and attributes
    as the one-pass :class:`~rawrcl.export.ort.OrtModel` ``one``; ``graph((first, jdd))`` gives the model
    with those pass counts (a RAW output's JDD stage runs once)."""

    #: the attributes the tiler and the noise binding read, taken from the one-pass graph
    SHARED = ("head_name", "in_channels", "out_channels", "scale", "size_multiple", "static_tile",
              "static_batch", "noise_input", "noise_aware", "any_size", "noise", "path", "info")  # fmt: skip

    def __init__(self, one: nn.Module, graph: Callable[[tuple[int, int]], nn.Module]) -> None:
        super().__init__()
        for name in self.SHARED:
            setattr(self, name, getattr(one, name))
        self._graphs = {(1, 1): one}
        self._graph = graph

    def passes(self, noise: torch.Tensor) -> tuple[int, int]:
        """(first stage, JDD stage) pass counts for ``noise`` (B, K, planes): the largest of its samples'
        gates (the JDD stage one for the RAW output)."""
        from rawrcl.models.compose import gated_passes

        jdd = int(gated_passes(noise, "jdd").max()) if self.head_name == "jdd" else 1
        return int(gated_passes(noise, "first").max()), jdd

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        n = self.passes(noise)
        if n not in self._graphs:
            self._graphs[n] = self._graph(n)
        return self._graphs[n](x, noise)
