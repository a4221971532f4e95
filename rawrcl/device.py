"""Device and precision: the one place that turns ``--device`` and ``--precision`` into torch objects.

Used by inference (:mod:`rawrcl.infer.tiling`, ``jdd``/``denoise``/``eval``), the trainer
(:class:`rawrcl.train.Trainer`, ``pretrain``/``finetune``) and the export backends.

Precision names (one spelling everywhere): ``auto`` | ``fp32`` | ``bf16`` | ``fp16``. ``fp32`` means no
autocast. The training runs of earlier releases said ``off`` for ``fp32`` (``--amp off``, ``"amp"`` in a
run's ``config.json``); :func:`normalize_precision` maps it.

``auto`` differs on purpose between the two uses, as before the merge of the two implementations:

- inference: bf16 on CUDA (fp16 where bf16 is unsupported); on the CPU bf16 when the CPU has native bf16
  instructions (AVX512-BF16/AMX, measured ≈2× faster than fp32 for the default U-Net with a PSNR change
  below 0.01 dB, ``docs/weights.md``), else fp32;
- training: bf16/fp16 on CUDA, fp32 elsewhere (mixed-precision training on the CPU is not measured).

Memory format (:func:`use_channels_last`, ``channels_last="auto"``): channels-last on CUDA and for CPU
inference; for CPU training only where the CPU has AVX-512 (``docs/training.md``, "Trainer").
"""

from __future__ import annotations

import torch

from rawrcl.errors import RawrclError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")

#: the spellings of earlier releases (``--amp``) → the one spelling
_LEGACY = {"off": "fp32"}


def normalize_precision(precision: str | None) -> str:
    """``precision`` in the one spelling (``None`` → ``auto``; the old ``off`` → ``fp32``)."""
    if precision is None:
        return "auto"
    p = _LEGACY.get(str(precision), str(precision))
    if p not in PRECISIONS:
        raise RawrclError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    return p


def cpu_has_fast_bf16() -> bool:
    """True when the CPU has native bf16 matrix instructions (AVX512-BF16 or AMX)."""
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        fn = getattr(torch.cpu, probe, None)
        try:
            if fn is not None and fn():
                return True
        except Exception:  # noqa: BLE001 - private probes; absence means "no"
            pass
    return False


def use_channels_last(device: torch.device, *, training: bool = False) -> bool:
    """Whether ``channels_last="auto"`` puts models and batches in channels-last (NHWC) memory format on
    ``device``: on CUDA, yes; on the CPU for inference, yes (oneDNN's NHWC convolutions: the U-Nets run
    1.35–1.7× faster on AVX-512, 1.36× on an AVX2-only CPU; 2 threads); on the CPU for training, only when
    the CPU has AVX-512 (there +17–25 % steps/s; on an AVX2-only CPU the backward pass is slower in NHWC and
    a step of ``rawrcl adapt``'s default took 1.10 s contiguous against 1.07–1.40 s); elsewhere (MPS) no."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    return not training or torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def resolve_precision(precision: str, device: torch.device, *, training: bool = False) -> torch.dtype | None:
    """Autocast dtype for ``precision`` on ``device`` (None = plain fp32).

    ``training=False`` (inference): ``auto`` as described in the module docstring; ``fp16`` on the CPU is
    refused. ``training=True``: ``auto`` is bf16/fp16 on CUDA and fp32 elsewhere; an explicit choice is
    taken as given (as ``--amp`` always did).
    """
    p = normalize_precision(precision)
    if p == "fp32":
        return None
    if p == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if training:
            return None
        return torch.bfloat16 if cpu_has_fast_bf16() else None
    if p == "fp16" and device.type == "cpu" and not training:
        raise RawrclError("--precision fp16 is only supported on CUDA; use bf16 or fp32 on the CPU")
    return torch.bfloat16 if p == "bf16" else torch.float16


def resolve_device(
    device: str | torch.device | None = "auto", *, local_rank: int | None = None, mps: bool = False
) -> torch.device:
    """``--device`` as a :class:`torch.device`.

    ``None``/``"auto"``: CUDA when available (GPU ``local_rank`` modulo the count when given, for DDP
    ranks), then Apple MPS if ``mps`` (the trainer asks for it; inference does not), else the CPU.
    Otherwise ``torch.device(device)``; a bare ``cuda`` gets the rank's GPU when ``local_rank`` is given.
    Raises RawrclError for a name torch does not know or CUDA on a machine without it.
    """
    if device is None or device == "auto":
        if torch.cuda.is_available():
            if local_rank is None:
                return torch.device("cuda")
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        if mps and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise RawrclError(f"--device {device!r} is not a valid torch device ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RawrclError(f"--device {device}: CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is None and local_rank is not None:
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    return dev


def select_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """The trainer's device: :func:`resolve_device` with this rank's GPU and MPS allowed."""
    return resolve_device(name, local_rank=local_rank, mps=True)


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``, or a no-op context for plain fp32 (``None``)."""
    from contextlib import nullcontext

    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)
