"""The one way to get a model for a task: a checkpoint file, a run directory, or the shipped weights.

:func:`load_for_task` is what inference, evaluation and export use; fine-tuning opens the checkpoint with
:func:`open_checkpoint` and then fits its head itself. Every refusal is a one-line
:class:`~rawrcl.errors.RawrclError` naming the checkpoint.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.models.compose import BLEND, RESIDUAL, DenoiseThenDemosaic, adapt, first_stage, serves
from rawrcl.models.registry import load_checkpoint, read_checkpoint, save_checkpoint
from rawrcl.tasks import TASKS, Task, get_task

#: the name that stands for a task's shipped weights wherever a model is asked for (``--model``, ``adapt
#: --from``, ``eval MODEL``); None means the same in the API
SHIPPED = "default"


def is_shipped(source: object) -> bool:
    """True for None and :data:`SHIPPED`: the task's shipped weights, not a path."""
    return source is None or source == SHIPPED


def default_weights_path(task: str | Task) -> Path:
    """The shipped checkpoint of ``task`` (``rawrcl/weights/<task.default_weights>``).

    Raises :class:`RawrclError` when the task has none or the package does not ship the file.
    """
    t = get_task(task)
    shipped = [n for n, x in TASKS.items() if x.default_weights]
    if t.default_weights is None:
        raise RawrclError(f"no default model for task {t.name!r}; expected one of {', '.join(shipped)}")
    ref = resources.files("rawrcl.weights") / t.default_weights
    if not ref.is_file():
        hint = " (no default RGB denoiser ships with rawrcl)" if t.name == "denoise" else ""
        raise RawrclError(
            f"default weights rawrcl/weights/{t.default_weights} are missing{hint}; pass --model CKPT "
            "(train one with rawrcl pretrain + finetune)"
        )
    return Path(str(ref))


def checkpoint_file(source: str | os.PathLike) -> Path:
    """The checkpoint file behind ``source``: itself, or ``checkpoints/last.pt`` of a run directory."""
    p = Path(source)
    if p.is_dir():
        if not (p / "checkpoints" / "last.pt").is_file() and (p / "config.json").is_file():
            raise RawrclError(
                f"{source}: a run that has not finished (no model in it yet); continue it with --resume"
            )
        p = p / "checkpoints" / "last.pt"
    if not p.is_file():
        raise RawrclError(f"{source}: no such checkpoint (a .pt file or a run directory)")
    return p


#: In a run directory of ``rawrcl adapt --task jdd``: the two-stage JDD checkpoint (the adapted RAW
#: denoiser in front of the starting JDD model's second stage) that JDD uses instead of ``last.pt``.
RUN_JDD = "jdd.pt"

#: In a run directory of ``rawrcl adapt`` started from a two-stage RAW denoiser (the shipped default, the
#: CFA-site blend): the same with the adapted first stage, which RAW denoising uses instead of ``last.pt``.
RUN_RAW = "denoise.pt"


def checkpoint_for(source: str | os.PathLike | None, task: str | Task) -> Path:
    """The checkpoint file ``source`` gives for ``task``: the shipped weights (:func:`is_shipped`), the file
    itself, or a run directory's ``checkpoints/last.pt`` — for JDD its :data:`RUN_JDD`, else its
    :data:`RUN_RAW` (a two-stage RAW denoiser, whose JDD stage then demosaics:
    :func:`rawrcl.models.compose.adapt`), for RAW denoising its :data:`RUN_RAW`, when the run has them."""
    t = get_task(task)
    if is_shipped(source):
        return default_weights_path(t)
    p = Path(source)
    own = {"jdd": (RUN_JDD, RUN_RAW), "raw": (RUN_RAW,)}.get(t.head, ())
    for name in own if p.is_dir() else ():
        if (p / name).is_file():
            return p / name
    return checkpoint_file(p)


def export_checkpoint(source: str | os.PathLike, jdd: bool = False) -> Path:
    """The checkpoint file ``rawrcl export`` takes from ``source`` (a file or a run directory): what RAW
    denoising runs (:func:`checkpoint_for`: a run's :data:`RUN_RAW`, else ``last.pt``) — with ``jdd`` (a JDD
    target: ``--head jdd``, a darktable package) a run's :data:`RUN_JDD` first, when it has one."""
    p = Path(source)
    if jdd and p.is_dir() and (p / RUN_JDD).is_file():
        return p / RUN_JDD
    return checkpoint_for(source, "raw-denoise")


def open_checkpoint(source: str | os.PathLike, device: str = "cpu") -> tuple[nn.Module, dict]:
    """(model in eval mode, config) rebuilt from a checkpoint file or run directory."""
    return load_checkpoint(checkpoint_file(source), map_location=device)


def adapted_fusion(source: str | os.PathLike | None) -> float:
    """The weight of GAT+BM3D that a ``rawrcl adapt --method burst`` run chose to average into its RAW
    denoiser's output (the checkpoint's ``extra["adapt"]["fuse_bm3d"]``; ``source`` a run directory or its
    checkpoint, as :func:`checkpoint_for` reads it for RAW denoising), else 0 — what ``rawrcl denoise`` and
    ``rawrcl eval --burst`` fuse at unless told ``--fuse-bm3d``. Shipped weights and ONNX files: 0."""
    if source is None or is_shipped(source) or str(source).lower().endswith(".onnx"):
        return 0.0
    path = checkpoint_for(source, "raw-denoise")
    if path.suffix.lower() == ".onnx":
        return 0.0
    extra = read_checkpoint(path).get("extra") or {}
    adapt_ = extra.get("adapt") if isinstance(extra, dict) else None
    w = adapt_.get("fuse_bm3d") if isinstance(adapt_, dict) else None
    return float(w) if isinstance(w, (int, float)) and 0.0 <= w <= 1.0 else 0.0


def load_for_task(
    source: str | os.PathLike | None, task: str | Task, device: str = "cpu"
) -> tuple[nn.Module, dict]:
    """A model that runs ``task``, in eval mode on ``device``, and its checkpoint config.

    ``source``: a checkpoint file, a run directory, or None for the task's shipped weights. The model must
    take the task's input channels and have a head that serves it (:func:`rawrcl.models.serves`): its own
    head, or a RAW denoiser for JDD, which then runs as denoise → bilinear demosaic
    (:class:`rawrcl.models.DenoiseThenDemosaic`). Which file: :func:`checkpoint_for`.
    """
    t = get_task(task)
    path = checkpoint_for(source, t)
    model, cfg = load_checkpoint(path, map_location=device)
    head = getattr(model, "head_name", cfg.get("head"))
    in_ch = cfg.get("in_channels")
    if not serves(head, t.head) or (in_ch is not None and int(in_ch) != t.in_channels):
        raise RawrclError(
            f"{path}: model has head {head!r} with {in_ch} input channels; task {t.name!r} needs head "
            f"{t.head!r} with {t.in_channels} (fine-tune one with rawrcl finetune --task {t.name})"
        )
    if getattr(model, "raw_only", False) and t.head != "raw":
        raise RawrclError(
            f"{path}: a {cfg.get('arch')} model runs as a RAW denoiser only (rawrcl denoise); its JDD path "
            "is not measured — use its start for this task"
        )
    return adapt(model, head, t.head).eval(), cfg


def save_two_stage(
    denoiser: str | os.PathLike | None,
    demosaicker: str | os.PathLike | None,
    out: str | os.PathLike,
    residual: float = RESIDUAL,
    extra: dict | None = None,
    output: str = "jdd",
    blend: float = BLEND,
    blend_sigma: float = 0.0,
) -> Path:
    """Write one checkpoint (arch ``two_stage``) that runs the RAW denoiser ``denoiser`` and then the
    JDD model ``demosaicker`` told λ × ``residual`` (:class:`rawrcl.models.DenoiseThenDemosaic`): a JDD
    model, or with ``output="raw"`` a RAW denoiser (the CFA-site blend, weight ``blend``, gated by noise std
    ``blend_sigma``).

    Each source: a checkpoint file, a run directory, or None for the shipped weights of its task; a
    two-stage ``denoiser`` (e.g. the shipped RAW default) gives its first stage, a two-stage
    ``demosaicker`` (e.g. the shipped JDD default) its second — so ``save_two_stage("runs/mycam", None,
    "mycam_jdd.pt")`` puts an adapted denoiser in front of the shipped JDD network. The stages' own
    provenance goes into ``extra["stages"]``; ``out`` is written atomically.
    """
    den, _ = load_for_task(denoiser, "raw-denoise")
    den = first_stage(den)
    dem, _ = load_for_task(demosaicker, "jdd")
    if isinstance(dem, DenoiseThenDemosaic) and dem.demosaicker is not None:
        dem = dem.demosaicker
    if not hasattr(dem, "head") or getattr(dem, "head_name", None) != "jdd":
        raise RawrclError(f"{demosaicker}: the second stage must be a JDD network (head 'jdd')")
    model = DenoiseThenDemosaic(den, dem, residual, output, blend, blend_sigma)
    stages = {}
    for name, src, task in (("denoiser", denoiser, "raw-denoise"), ("demosaicker", demosaicker, "jdd")):
        path = default_weights_path(task) if src is None else checkpoint_file(src)
        prov = read_checkpoint(path).get("extra", {}).get("provenance")
        stages[name] = {"source": "shipped" if src is None else str(src), "provenance": prov}
    save_checkpoint(out, model, extra={**(extra or {}), "stages": stages})
    return Path(out)
