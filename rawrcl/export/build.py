"""What gets exported: the model wrapped for its target, checked, traced and verified against torch.

- ``head="jdd"`` models export as they are (packed (B, 4, h, w) → camera RGB (B, 3, 2h, 2w));
- a RAW denoiser (``head="raw"``) asked for as JDD — darktable's Bayer contract wants RGB at 2× — is
  wrapped in :class:`rawrcl.models.DenoiseThenDemosaic`: its packed output lands unchanged on the CFA sites
  of the 2× output (the only values darktable keeps), a bilinear demosaic fills the other two colours;
- noise-aware models get their NLF baked in (:class:`rawrcl.models.conditioning.WithNoise`), or — plain ONNX
  only — a second graph input ``noise`` (B, 2, 4).

Every export is checked before it is written (finite output on an input with values below 0, as darktable
feeds unclipped data; the expected output shape) and verified after (``onnx.checker``; ONNX Runtime output
within :data:`VERIFY_TOL` of torch's in fp32 on that input).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.export.graph import check_graph, export_onnx, graph_info, source_metadata
from rawrcl.export.noise import BakedNLF
from rawrcl.models.compose import DenoiseThenDemosaic
from rawrcl.models.conditioning import WithNoise, camera_rows
from rawrcl.models.heads import HEADS

#: max |ONNX Runtime − torch| accepted when verifying an export (fp32, [0, 1] units)
VERIFY_TOL = 1e-4


@dataclass
class Prepared:
    """A module ready for tracing and what the graph will declare."""

    module: nn.Module
    head: str
    in_channels: int
    scale: int
    size_multiple: int
    noise_input: bool
    noise: BakedNLF | None
    config: dict
    pad_multiple: int = 1  # the bare model's own padding multiple (2**depth for a U-Net)
    #: over how many orientations the graph averages a two-stage model's JDD stage and its first stage (as
    #: ``rawrcl jdd`` / ``rawrcl denoise`` do for the baked noise; 1 without baked noise or with ``one_pass``)
    jdd_passes: int = 1
    first_passes: int = 1


def averaged_stages(jdd_passes: int, first_passes: int) -> str | None:
    """What a graph's passes say in words (the export's line and the package card), e.g. "both stages are
    averaged over 4 orientations"; None for one pass of each."""
    n = max(jdd_passes, first_passes)
    if n == 1:
        return None
    return f"{'both stages are' if jdd_passes > 1 else 'the first stage is'} averaged over {n} orientations"


def _multiple(model: nn.Module) -> int:
    from rawrcl.models.geometry import size_multiple

    return size_multiple(model)


def prepare(
    model: nn.Module,
    config: dict,
    head: str | None = None,
    noise: BakedNLF | None = None,
    allow_noise_input: bool = True,
    name: str = "model",
    one_pass: bool = False,
    passes: tuple[int, int] = (1, 1),
) -> Prepared:
    """Wrap ``model`` (config ``config``) to output ``head`` (default: its own) with ``noise`` baked in.

    A two-stage model's stages are averaged over the orientations the commands run for the baked noise
    (:meth:`~rawrcl.models.DenoiseThenDemosaic.first_passes`,
    :meth:`~rawrcl.models.DenoiseThenDemosaic.jdd_passes`, by the gates of :mod:`rawrcl.models.compose`);
    with a noise input it holds ``passes`` = (first stage, JDD stage) orientations
    (:attr:`~rawrcl.models.DenoiseThenDemosaic.fixed_passes`: the onnxruntime backend's graph for one gate);
    a blind model, and any graph with ``one_pass``, one pass of each.

    Raises :class:`RawrclError` (one line, naming ``name``) for a head that cannot serve ``head``, noise
    options given to a blind model, or a noise-aware model with no NLF where no noise input is allowed.
    """
    from rawrcl.models import adapt, serves

    own = getattr(model, "head_name", None) or config.get("head")
    want = head or own
    if own not in HEADS or not serves(own, want):
        need = "'jdd' or 'raw'" if want == "jdd" else repr(want)
        raise RawrclError(f"{name}: model has head {own!r}; this export needs head {need}")
    in_ch = int(config.get("in_channels", 4))
    noise_aware = bool(config.get("noise_aware", False))
    if noise is not None and not noise_aware:
        raise RawrclError(
            f"{name}: model is not noise-aware (config noise_aware is false); drop --noise/--iso"
        )
    if config.get("arch") == "with_fine_tune":
        raise RawrclError(
            f"{name}: model is a start beside a fine-tune, combined by per-tile SURE weights, which an "
            "exported graph cannot hold yet (it would be the start alone); export the fine-tune or the start"
        )
    if config.get("arch") == "with_blindspot":
        raise RawrclError(
            f"{name}: model is the start beside a blind-spot network (rawrcl adapt --method blindspot), "
            "combined by per-tile SURE weights, which an exported graph cannot hold yet (it would be the "
            "start alone); export the start, or a run of another --method"
        )
    if config.get("row_aware"):
        raise RawrclError(
            f"{name}: model is row-aware (adapted to a camera with banding); export cannot give it each "
            "file's row noise yet — adapt with --row-noise off to export"
        )
    if camera_rows(model) is not None:
        raise RawrclError(
            f"{name}: model was adapted to a banded camera and removes its row offsets from each whole file "
            "before it runs, which an exported graph cannot do; adapt with --row-noise off to export"
        )
    module: nn.Module = model.eval()
    baked = noise_aware and noise is not None and not one_pass
    fixed = noise_aware and noise is None and not one_pass and max(passes) > 1
    told = noise.tensor()[None] if baked else None
    jdd = first = 1
    for m in module.modules():  # the baked noise (or ``passes``) fixes the stages' passes; else one of each
        if isinstance(m, DenoiseThenDemosaic):
            m.two_pass = None if baked or fixed else False
            m.fixed_passes = passes if fixed else None
            if baked or fixed:
                jdd = max(jdd, int(m.jdd_passes(told).max()))
                first = max(first, int(m.first_passes(told).max()))
    noise_input = False
    if noise_aware and noise is not None:
        module = WithNoise(module, noise.tensor(), channels=4)
    elif noise_aware:
        if not allow_noise_input or want != own:
            raise RawrclError(
                f"{name}: noise-aware model and the target has no noise input; bake the camera's noise with "
                "--noise λshot,λread or --noise PROFILE.json --iso N"
            )
        noise_input = True
    module = adapt(module, own, want)
    _, scale = HEADS[want]
    # the multiple the tiler uses for this module on torch, so both backends tile a frame identically
    return Prepared(
        module.eval(),
        want,
        in_ch,
        scale,
        _multiple(module),
        noise_input,
        noise,
        dict(config),
        pad_multiple=_multiple(model),
        jdd_passes=jdd,
        first_passes=first,
    )


def trace_size(multiple: int) -> tuple[int, int]:
    """Dynamic graphs are traced at (4m + 5, 4m + 3): both sides need padding to a multiple m > 5 (and
    m = 2, 4), so the U-Net's padding is recorded in the graph."""
    return 4 * multiple + 5, 4 * multiple + 3


def probe_input(prep: Prepared, side: int | tuple[int, int]) -> tuple:
    """A fixed input like real unclipped tiles: values in [−0.1, 1.1] (below black, above white) and a dark
    band whose local mean is below 0 (where a noise map without a clamp takes the root of a negative)."""
    h, w = (side, side) if isinstance(side, int) else side
    g = torch.Generator().manual_seed(1234)
    x = torch.rand(1, prep.in_channels, h, w, generator=g) * 1.2 - 0.1
    x[..., : h // 4, :] = torch.rand(1, prep.in_channels, h // 4, w, generator=g) * 0.08 - 0.06
    if prep.noise_input:
        return (x, torch.tensor([[[4e-3] * 4, [6e-5] * 4]]))
    return (x,)


def check_module(prep: Prepared, side: int | tuple[int, int], name: str = "model") -> torch.Tensor:
    """Run the wrapped module once; shape and finiteness checks. Returns the output (reference)."""
    args = probe_input(prep, side)
    h, w = args[0].shape[-2:]
    with torch.no_grad():
        y = prep.module(*args).float()
    want = (1, HEADS[prep.head][0], prep.scale * h, prep.scale * w)
    if tuple(y.shape) != want:
        raise RawrclError(
            f"{name}: output shape {tuple(y.shape)} for input {tuple(args[0].shape)}, expected {want}"
        )
    if not torch.isfinite(y).all():
        raise RawrclError(
            f"{name}: non-finite output on an input with values below 0 (darktable feeds unclipped data); "
            "a noise map must clamp before its square root"
        )
    return y


def export_prepared(
    prep: Prepared,
    path: str | os.PathLike,
    tile: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    verify: bool = True,
    name: str = "model",
) -> dict:
    """Trace ``prep`` to ``path`` (static ``tile`` or dynamic), check and verify it; returns its
    :func:`graph_info` plus ``max_abs_diff`` (ORT vs torch on the probe input, when ``verify``)."""
    if tile is not None and (tile < 8 or tile % prep.size_multiple):
        raise RawrclError(
            f"--tile {tile}: must be a multiple of the model's size multiple {prep.size_multiple}"
        )
    m = max(prep.size_multiple, prep.pad_multiple)
    # probes: the static tile; for dynamic graphs a multiple of m and a size that is not one
    sides: list = [tile] if tile is not None else [8 * m, (4 * m + 9, 4 * m + 7)]
    refs = [check_module(prep, s, name) for s in sides]
    meta = {
        "head": prep.head,
        "in_channels": str(prep.in_channels),
        "scale": str(prep.scale),
        "size_multiple": str(prep.size_multiple),
        "any_size": "true" if tile is None else "false",
        "source": source_metadata(checkpoint, prep.config),
    }
    if prep.noise is not None:
        meta["noise"] = json.dumps(prep.noise.as_dict(), sort_keys=True)
    if prep.noise is not None or max(prep.jdd_passes, prep.first_passes) > 1:
        meta["jdd_passes"] = str(prep.jdd_passes)
        meta["first_passes"] = str(prep.first_passes)
    export_onnx(prep.module, path, prep.in_channels, tile, prep.noise_input, meta, trace_hw=trace_size(m))
    check_graph(path)
    info = graph_info(path)
    if verify:
        from rawrcl.export.ort import OrtModel

        ort_model = OrtModel(path)
        diff = 0.0
        for s, ref in zip(sides, refs, strict=True):
            got = ort_model(*probe_input(prep, s))
            diff = max(diff, float((got - ref).abs().max()))
        info["max_abs_diff"] = diff
        if not diff <= VERIFY_TOL:
            Path(path).unlink(missing_ok=True)
            raise RawrclError(
                f"{name}: ONNX Runtime output differs from torch by {diff:.2e} (> {VERIFY_TOL:g})"
            )
    return info
