"""Export rawrcl models to ONNX, run them with ONNX Runtime, and package them for darktable.

Modules (import them directly; nothing here imports onnx/onnxruntime until used):

- :mod:`rawrcl.export.graph` — ONNX export, checker, metadata, external-data safety;
- :mod:`rawrcl.export.build` — wrapping a model for its target, checks, verification against torch;
- :mod:`rawrcl.export.noise` — baking a camera noise-level function into a noise-aware model;
- :mod:`rawrcl.export.ort` — :class:`~rawrcl.export.ort.OrtModel`, ONNX Runtime as an ``nn.Module``;
- :mod:`rawrcl.export.backend` — ``--backend torch|onnxruntime`` for ``rawrcl jdd/denoise`` (cached export);
- :mod:`rawrcl.export.darktable` — the darktable 5.6 raw-denoise package (``.dtmodel``) and manifest;
- :mod:`rawrcl.export.card` — the package's model card;
- :mod:`rawrcl.export.dt_emulate` — darktable's Bayer raw-denoise path re-implemented, to test packages.
"""
