"""ONNX graphs of rawrcl models: export, contract checks, metadata and safe loading.

Export uses torch's TorchScript-based exporter (``dynamo=False``; the dynamo exporter needs onnxscript,
which rawrcl does not depend on) at opset 20, the opset darktable's published raw models use.

Two shape modes:

- **static** (``tile=T``): input ``input`` float32 [1, C, T, T], output ``output`` float32
  [1, C_out, s·T, s·T] — what darktable's raw denoise expects (T = 512 packed pixels);
- **dynamic** (``tile=None``): batch, height and width symbolic. The U-Net pads its input to a multiple of
  ``2**depth`` in Python; tracing records that padding only when the traced input needs it, so dynamic
  graphs are traced on an input whose sides are *not* multiples (``trace_hw``): the recorded pad amounts are
  then computed from the input's shape and the graph takes any H, W ≥ the multiple, exactly as torch does
  (metadata ``any_size``).

Metadata (``metadata_props``, all strings, prefix ``rawrcl.``): ``head`` (``jdd`` | ``raw`` | ``rgb``),
``in_channels``, ``scale``, ``size_multiple``, ``noise`` (JSON of the baked NLF, if any) and with it
``jdd_passes`` / ``first_passes`` (over how many orientations the JDD stage / the first stage is
averaged), ``source`` (JSON: checkpoint path, sha256, config).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import torch
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path

OPSET = 20
INPUT, OUTPUT, NOISE_INPUT = "input", "output", "noise"


def require_onnx():
    """Import ``onnx`` or raise a one-line :class:`RawrclError` naming the extra to install."""
    try:
        import onnx
    except ImportError:
        raise RawrclError("ONNX export needs the onnx extra: pip install 'rawrcl[onnx]'") from None
    return onnx


def export_onnx(
    module: nn.Module,
    path: str | os.PathLike,
    in_channels: int,
    tile: int | None = None,
    noise_input: bool = False,
    metadata: dict[str, str] | None = None,
    opset: int = OPSET,
    trace_hw: tuple[int, int] = (61, 67),
) -> Path:
    """Trace ``module`` (eval mode, CPU, fp32) to an ONNX file at ``path`` (atomic write).

    ``module`` maps (B, in_channels, h, w) → (B, C_out, s·h, s·w) (and takes a second (B, 2, 4) noise
    argument when ``noise_input``). ``tile``: static square side, else dynamic axes traced at ``trace_hw``
    (see module docstring: not multiples of the model's size multiple). Returns the path.
    """
    onnx = require_onnx()
    module = module.eval().float().cpu()
    hw = (tile, tile) if tile is not None else trace_hw
    x = torch.rand(1, in_channels, *hw, generator=torch.Generator().manual_seed(0))
    args: tuple = (x,)
    names = [INPUT]
    dyn: dict | None = None
    if noise_input:
        args = (x, torch.full((1, 2, 4), 1e-4))
        names.append(NOISE_INPUT)
    if tile is None:
        dyn = {
            INPUT: {0: "batch", 2: "height", 3: "width"},
            OUTPUT: {0: "batch", 2: "out_height", 3: "out_width"},
        }
        if noise_input:
            dyn[NOISE_INPUT] = {0: "batch"}
    path = Path(path)
    with atomic_path(path, suffix=".tmp.onnx") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings on the U-Net's Python-side size checks
        with torch.no_grad():
            torch.onnx.export(
                module,
                args,
                str(tmp),
                input_names=names,
                output_names=[OUTPUT],
                dynamic_axes=dyn,
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
        proto = onnx.load(str(tmp))
        if tile is not None:  # a static graph declares its output size (the tracer can leave it symbolic)
            with torch.no_grad():
                shape = tuple(module(*args).shape)
            for d, n in zip(proto.graph.output[0].type.tensor_type.shape.dim, shape, strict=True):
                d.dim_value = int(n)
        for k, v in (metadata or {}).items():
            entry = proto.metadata_props.add()
            entry.key, entry.value = f"rawrcl.{k}", str(v)
        proto.producer_name = "rawrcl"
        onnx.save(proto, str(tmp))
    return path


def _dims(value_info) -> list[int | str]:
    return [d.dim_param if d.dim_param else d.dim_value for d in value_info.type.tensor_type.shape.dim]


def graph_info(path: str | os.PathLike) -> dict:
    """Inputs/outputs (name, dims, elem type), opset and ``rawrcl.*`` metadata of an ONNX file.

    Dims are ints for static sizes and strings for symbolic ones. Does not load external data.
    """
    onnx = require_onnx()
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - a corrupt file is a user error
        raise RawrclError(f"{path}: not a readable ONNX file ({type(exc).__name__}: {exc})") from None
    elem = onnx.TensorProto.DataType.Name
    return {
        "inputs": [(i.name, _dims(i), elem(i.type.tensor_type.elem_type)) for i in proto.graph.input],
        "outputs": [(o.name, _dims(o), elem(o.type.tensor_type.elem_type)) for o in proto.graph.output],
        "opset": max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0),
        "metadata": {
            p.key[len("rawrcl.") :]: p.value for p in proto.metadata_props if p.key.startswith("rawrcl.")
        },
    }


def check_graph(path: str | os.PathLike) -> None:
    """``onnx.checker.check_model`` with full shape inference; :class:`RawrclError` when it fails."""
    onnx = require_onnx()
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # noqa: BLE001
        raise RawrclError(f"{path}: ONNX checker failed ({str(exc).splitlines()[0]})") from None


def _tensors(graph):
    """Every TensorProto of a graph: initializers, sparse initializers and node attributes, subgraphs too."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for g in attr.graphs:
                yield from _tensors(g)


def check_external_data(path: str | os.PathLike) -> list[str]:
    """Refuse an ONNX file whose external-data ``location`` escapes its own folder.

    Absolute locations, ``..`` components and symlinks resolving outside the folder are all refused
    (:class:`RawrclError`, one line). Returns the external files it references (relative, may be empty).
    """
    onnx = require_onnx()
    path = Path(path)
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001
        raise RawrclError(f"{path}: not a readable ONNX file ({type(exc).__name__}: {exc})") from None
    folder = path.resolve().parent
    found: list[str] = []
    for t in _tensors(proto.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        target = (folder / loc).resolve()
        if not loc or Path(loc).is_absolute() or ".." in Path(loc).parts or not target.is_relative_to(folder):
            raise RawrclError(
                f"{path}: external data {loc!r} of tensor {t.name!r} points outside the model's folder; "
                "refused"
            )
        found.append(loc)
    return sorted(set(found))


def source_metadata(checkpoint: str | os.PathLike | None, config: dict) -> str:
    """JSON for ``rawrcl.source``: checkpoint file name, its sha256 and the model config."""
    info: dict = {"config": config}
    if checkpoint is not None:
        p = Path(checkpoint)
        if p.is_dir():
            p = p / "checkpoints" / "last.pt"
        info["checkpoint"] = p.name
        info["sha256"] = file_sha256(p)
    return json.dumps(info, sort_keys=True)


def file_sha256(path: str | os.PathLike) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
