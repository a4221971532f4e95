"""ONNX Runtime as a second CPU inference engine: an ``nn.Module`` adapter the shared tiler can drive.

:class:`OrtModel` wraps an ``onnxruntime.InferenceSession`` of a rawrcl graph (or any graph with one
float32 NCHW input and one NCHW output) so that :func:`rawrcl.infer.tiling.tiled_apply` and
:class:`rawrcl.models.SelfEnsemble` use it exactly like a torch model: same tiles, same blending. It runs
fp32 on the CPU execution provider with ``torch.get_num_threads()`` intra-op threads (so a torch/ORT
comparison uses the same thread budget).

Sizes: a static graph [1, C, T, T] takes one tile at a time; smaller inputs are padded (reflection,
bottom/right, as the U-Net pads itself) up to T and the output cropped. A dynamic rawrcl graph (metadata
``any_size``) pads itself exactly as the torch model does and takes any size; other dynamic graphs get
inputs padded to their size multiple.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.errors import RawrclError
from rawrcl.export.graph import INPUT, NOISE_INPUT, check_external_data, graph_info


def require_onnxruntime():
    """Import ``onnxruntime`` or raise a one-line :class:`RawrclError` naming the extra."""
    try:
        import onnxruntime
    except ImportError:
        raise RawrclError("--backend onnxruntime needs the onnx extra: pip install 'rawrcl[onnx]'") from None
    return onnxruntime


def _pad(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    ph, pw = h - x.shape[-2], w - x.shape[-1]
    if not (ph or pw):
        return x
    mode = "reflect" if (ph < x.shape[-2] and pw < x.shape[-1]) else "replicate"
    return F.pad(x, (0, pw, 0, ph), mode=mode)


class OrtModel(nn.Module):
    """An ONNX file run by ONNX Runtime, callable like a rawrcl model.

    Shapes: (B, in_channels, h, w) float → (B, C_out, scale·h, scale·w) float32 (on the input's device,
    CPU). Attributes: ``head_name`` (``jdd`` | ``raw`` | ``rgb`` | None), ``in_channels``, ``out_channels``,
    ``scale``, ``size_multiple``, ``static_tile`` (T or None), ``path``, ``info`` (:func:`graph_info`).
    Refuses files whose external data leave their folder (:func:`check_external_data`).
    """

    def __init__(self, path: str | os.PathLike, threads: int | None = None) -> None:
        super().__init__()
        ort = require_onnxruntime()
        self.path = Path(path)
        if not self.path.is_file():
            raise RawrclError(f"{self.path}: ONNX model not found")
        check_external_data(self.path)
        info = graph_info(self.path)
        self.info = info
        meta = info["metadata"]
        ins = {name: dims for name, dims, _ in info["inputs"]}
        if INPUT in ins:
            in_name = INPUT
        elif len(info["inputs"]) == 1:
            in_name = info["inputs"][0][0]
        else:
            raise RawrclError(f"{self.path}: expected one image input named {INPUT!r}, got {sorted(ins)}")
        dims = ins[in_name]
        out_dims = info["outputs"][0][1] if info["outputs"] else []
        if len(dims) != 4 or len(out_dims) != 4 or not isinstance(dims[1], int):
            raise RawrclError(f"{self.path}: expected NCHW input and output, got {dims} → {out_dims}")
        for name, _, elem in info["inputs"] + info["outputs"]:
            if elem != "FLOAT":
                raise RawrclError(
                    f"{self.path}: tensor {name!r} is {elem}; only float32 graphs are supported"
                )
        self.in_name, self.out_name = in_name, info["outputs"][0][0]
        self.noise_input = NOISE_INPUT in ins
        # a graph with a noise input is a noise-aware model: inference binds each file's noise to it
        self.noise_aware = self.noise_input
        self.in_channels = int(dims[1])
        self.out_channels = int(out_dims[1]) if isinstance(out_dims[1], int) else None
        static = all(isinstance(d, int) and d > 0 for d in dims[2:])
        self.static_tile = int(dims[2]) if static and dims[2] == dims[3] else None
        if static and self.static_tile is None:
            raise RawrclError(f"{self.path}: static input {dims} is not square; rawrcl tiles are square")
        self.static_batch = isinstance(dims[0], int) and dims[0] > 0
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(threads or torch.get_num_threads())
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(self.path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types for bad graphs
            raise RawrclError(
                f"{self.path}: ONNX Runtime cannot load it ({str(exc).splitlines()[0]})"
            ) from None
        self.size_multiple = int(meta.get("size_multiple", 1) or 1)
        self.any_size = meta.get("any_size") == "true"  # the graph pads itself, as the torch model does
        if "scale" in meta:
            self.scale = int(meta["scale"])
        elif static and all(isinstance(d, int) for d in out_dims[2:]):
            self.scale = int(out_dims[2]) // int(dims[2])
        else:
            self.scale = self._probe_scale()
        self.head_name = meta.get("head") or self._guess_head()
        self.noise = json.loads(meta["noise"]) if meta.get("noise") else None

    def _probe_scale(self) -> int:
        side = max(self.size_multiple, 8) * 2
        y = self._run(np.zeros((1, self.in_channels, side, side), np.float32), None)
        self.out_channels = y.shape[1]
        return int(y.shape[-1] // side)

    def _guess_head(self) -> str | None:
        c_in, c_out, s = self.in_channels, self.out_channels, self.scale
        return {(4, 3, 2): "jdd", (4, 4, 1): "raw", (3, 3, 1): "rgb"}.get((c_in, c_out, s))

    def _run(self, x: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        feed = {self.in_name: x}
        if self.noise_input:
            if noise is None:
                raise RawrclError(f"{self.path}: this graph needs a noise input (λshot, λread per plane)")
            feed[NOISE_INPUT] = noise
        return self.session.run([self.out_name], feed)[0]

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise RawrclError(f"{self.path}: expected (B, {self.in_channels}, h, w), got {tuple(x.shape)}")
        h, w = x.shape[-2:]
        if self.static_tile is not None:
            t = self.static_tile
            if h > t or w > t:
                raise RawrclError(f"{self.path}: static graph takes tiles of at most {t}, got {h}×{w}")
            H, W = t, t
        elif self.any_size and min(h, w) >= self.size_multiple:
            H, W = h, w
        else:
            m = self.size_multiple
            H, W = -(-h // m) * m, -(-w // m) * m
        xp = _pad(x.detach().float().cpu(), H, W).contiguous().numpy()
        nz = None if noise is None else noise.detach().float().cpu().contiguous().numpy()
        if self.static_batch and xp.shape[0] > 1:
            outs = [
                self._run(xp[i : i + 1], None if nz is None else nz[i : i + 1]) for i in range(xp.shape[0])
            ]
            y = np.concatenate(outs)
        else:
            y = self._run(xp, nz)
        s = self.scale
        return torch.from_numpy(np.ascontiguousarray(y[..., : h * s, : w * s])).to(x.device)

    def extra_repr(self) -> str:
        return f"path={str(self.path)!r}, head={self.head_name!r}, static_tile={self.static_tile}"
