"""Shared CLI plumbing: user errors → one line on stderr and a non-zero exit."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

import click

from rawrcl.errors import RawrclError

F = TypeVar("F", bound=Callable)


def user_errors(func: F) -> F:
    """Decorate a click command so that :class:`RawrclError` (and I/O errors the user caused)
    print ``rawrcl: error: <message>`` on one line and exit with status 1 (130 for an interrupted
    training run), never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except RawrclError as exc:
            click.echo(f"rawrcl: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            click.echo(f"rawrcl: error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("rawrcl: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


#: the skip demosaics (keys of ``rawrcl.models.heads.DEMOSAICS``; spelled out so that importing the CLI
#: does not import torch)
DEMOSAIC_CHOICE = click.Choice(["bilinear", "malvar"])

#: ``--ema DECAY`` of ``pretrain`` and ``finetune`` (``rawrcl.train.WeightEMA``)
ema_option = click.option(
    "--ema",
    default=None,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Keep an exponential moving average of the weights with this decay (e.g. 0.999); checkpoints "
    "hold the average.",
)
