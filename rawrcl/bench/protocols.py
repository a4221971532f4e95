"""The bench's budgets (:data:`BENCH_PROTOCOLS`: ``quick`` on a CPU, ``paper`` at GPU scale) and its
pre-training configurations (:data:`PRETEXTS`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pretext:
    """A pre-training configuration: ``rawrcl pretrain --method METHOD [extra args]``.

    ``args`` are ``--option value`` pairs of the method (as the recorded command spells them); the bench
    runs them in-process as :attr:`method_options`."""

    key: str
    label: str
    method: str
    args: tuple[str, ...] = ()

    @property
    def method_options(self) -> dict:
        """``args`` as options of :func:`rawrcl.methods.make_method` (numbers as floats)."""
        out: dict = {}
        for flag, value in zip(self.args[::2], self.args[1::2], strict=True):
            try:
                out[flag.removeprefix("--")] = float(value)
            except ValueError:
                out[flag.removeprefix("--")] = value
        return out


PRETEXTS: dict[str, Pretext] = {
    p.key: p
    for p in (
        Pretext("rcl", "RCL-EMD (α=1e-3)", "rcl", ("--distance", "emd", "--alpha", "1e-3")),
        Pretext("rcl-a0", "consistency only (α=0)", "rcl", ("--distance", "emd", "--alpha", "0")),
        Pretext("n2s", "N2S", "n2s"),
        Pretext("n2n", "N2N", "n2n"),
        Pretext("m2m", "M2M", "m2m"),
        Pretext("rcl-bd", "RCL-BD (α=1e-3)", "rcl", ("--distance", "bd", "--alpha", "1e-3")),
        Pretext("rcl-mmd", "RCL-MMD (α=1e-3)", "rcl", ("--distance", "mmd", "--alpha", "1e-3")),
    )
}


@dataclass(frozen=True)
class Protocol:
    """Budget of a bench protocol (crop sizes in clean-photo pixels)."""

    name: str
    tasks: tuple[str, ...]
    pretexts: tuple[str, ...]
    arch: str = "unet"
    width: int = 16
    depth: int | None = None
    skip: bool = False  # the paper's plain U-Net; True adds the classical skip (docs/training.md)
    crop: int = 64
    pretrain_batch: int = 16
    pretrain_steps: int = 300
    finetune_batch: int = 8
    finetune_steps: int = 300
    labels: int = 10
    sweep: tuple[int, ...] = (2,)
    seeds: int = 3
    linear: bool = True
    noise: str = "high"
    device: str = "cpu"
    extra: dict = field(default_factory=dict)


BENCH_PROTOCOLS: dict[str, Protocol] = {
    "quick": Protocol(
        "quick",
        tasks=("jdd", "denoise"),
        pretexts=("rcl", "rcl-a0", "n2s"),
        width=16,
        crop=64,
        pretrain_batch=16,
        pretrain_steps=500,
        finetune_batch=8,
        finetune_steps=400,
        labels=10,
        sweep=(2,),
        seeds=3,
    ),
    "paper": Protocol(
        "paper",
        tasks=("denoise", "sr", "jdensr", "jdd", "jdemsr", "jddsr"),
        pretexts=("rcl", "rcl-a0", "rcl-bd", "rcl-mmd", "n2n", "n2s", "m2m"),
        width=32,
        crop=128,
        pretrain_batch=64,
        pretrain_steps=20000,
        finetune_batch=64,
        finetune_steps=2000,
        labels=10,
        sweep=(100, 1000),
        seeds=5,
        device="cuda",
    ),
}
#: old name (fine-tuning's linear/full are :data:`rawrcl.train.FINETUNE_PROTOCOLS`)
PROTOCOLS = BENCH_PROTOCOLS

#: method label of the 0-label JDD row built from a Noise2Self RAW denoiser (pre-trained on task
#: raw-denoise) followed by a bilinear demosaic (rawrcl.models.DenoiseThenDemosaic)
ZERO_LABEL_RAW = "n2s-raw+bilinear"


def _cmd(args: list[str]) -> str:
    """The recorded command line of a run (shell-quoted)."""
    return " ".join(shlex.quote(str(a)) for a in args)
