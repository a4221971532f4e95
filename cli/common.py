"""Shared CLI plumbing: user errors → one line on stderr and a non-zero exit."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import TypeVar

import click

from rawrcl.errors import RawrclError

F = TypeVar("F", bound=Callable)


def _one_line(text: object) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as ``rawrcl: warning: <message>`` on one line (not Python's two-line source display)."""
    click.echo(f"rawrcl: warning: {_one_line(message)}", err=True)


def user_errors(func: F) -> F:
    """Decorate a click command so that :class:`RawrclError` (and the errors the environment causes:
    I/O errors such as a full disk, running out of memory) print ``rawrcl: error: <message>`` on one line
    and exit with status 1 (130 for an interrupted training run), never a traceback. Warnings print as
    one line ``rawrcl: warning: <message>`` while the command runs."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return func(*args, **kwargs)
        except RawrclError as exc:
            click.echo(f"rawrcl: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:  # disk full, permissions, a vanished file: the environment, not a bug
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"rawrcl: error: {where}{exc.strerror or _one_line(exc)}", err=True)
            sys.exit(1)
        except MemoryError:
            click.echo("rawrcl: error: out of memory (try smaller --batch-size, --crop or --tile)", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("rawrcl: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


class LazyChoice(click.Choice):
    """A :class:`click.Choice` whose names come from a library registry, read when first needed (parsing
    or ``--help`` of the command), so that ``rawrcl --help`` does not import torch.

    ``source``: ``"module:attribute"`` of a mapping or sequence of names; ``exclude``: names not offered."""

    def __init__(self, source: str, exclude: tuple[str, ...] = (), case_sensitive: bool = True) -> None:
        self._source, self._exclude, self._names = source, exclude, None
        self.case_sensitive = case_sensitive

    @property
    def choices(self):  # type: ignore[override]
        if self._names is None:
            import importlib

            module, attr = self._source.split(":")
            names = getattr(importlib.import_module(module), attr)
            self._names = tuple(n for n in names if n not in self._exclude)
        return self._names

    @choices.setter
    def choices(self, value) -> None:  # click may assign; keep the registry's names
        self._names = tuple(value)


#: the skip demosaics (keys of ``rawrcl.models.heads.DEMOSAICS``)
DEMOSAIC_CHOICE = LazyChoice("rawrcl.models.heads:DEMOSAICS")

#: ``--precision`` of every command that runs a model (rawrcl.device; "off" of the old --amp is "fp32")
PRECISION_CHOICE = LazyChoice("rawrcl.device:PRECISIONS")

#: ``--precision`` of the training commands (pretrain, finetune)
train_precision_option = click.option(
    "--precision",
    type=PRECISION_CHOICE,
    default="auto",
    show_default=True,
    help="Autocast precision of training; auto = bf16/fp16 on CUDA, else fp32.",
)

#: ``--ema DECAY`` of ``pretrain``, ``finetune`` and ``adapt`` (``rawrcl.train.WeightEMA``)
ema_option = click.option(
    "--ema",
    default=None,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Keep an exponential moving average of the weights with this decay (e.g. 0.999); checkpoints "
    "hold the average.",
)


def deprecated(old: str, new: str) -> None:
    """One-line warning for an old option spelling that still works (issue: one name per concept)."""
    click.echo(f"rawrcl: warning: {old} is deprecated; use {new}", err=True)


#: help text of ``--noise`` for data rawrcl synthesises (the SYNTHETIC kinds of rawrcl.noise.spec)
NOISE_SYNTHETIC_HELP = (
    "Synthetic noise (one grammar, [0,1] units): none | low | high | L1…L7 (camera ladder) | λshot,λread | "
    "paper[:LO-HI] (σ range, 8-bit) | brooks | camera | PROFILE.json[:ISO]."
)


def fuse_bm3d_option(what: str, best: str, adapted: bool = False):
    """``--fuse-bm3d W`` (→ ``fuse``): the weight of GAT+BM3D averaged into a network's output
    (:mod:`rawrcl.infer.fusion`); ``what`` starts the help (what is averaged, for which inputs), ``best`` is
    the command's measured best weight (``FUSE_WEIGHTS``; a test checks the help against it). Default 0
    (off); with ``adapted`` None: the weight a ``rawrcl adapt --method burst`` run chose, else off."""
    default = "default: the weight an adapt --method burst run chose, else 0: off" if adapted else "0: off"
    return click.option(
        "--fuse-bm3d",
        "fuse",
        type=float,
        default=None if adapted else 0.0,
        metavar="W",
        help=f"{what} with GAT+BM3D's, weight W ({best} measured best; {default}). Better (+0.1 to +0.3 dB "
        "measured) and slower: BM3D adds about 13 s per megapixel on 2 threads (12 MP: 2.9 min, 2.1 GB).",
    )
