"""The ``rawrcl`` command-line app: one click group; each command lives in its own module.

Commands are imported lazily so that ``rawrcl --help`` and light commands start fast (torch is
only imported by the commands that need it). ``python -m rawrcl.cli`` works too (for torchrun).
"""

from __future__ import annotations

import contextlib
import importlib
import sys

import click

# command name -> "module:function" (module relative to rawrcl.cli)
COMMANDS: dict[str, str] = {
    "info": "info:info",
    "simulate": "simulate:simulate",
    "calibrate": "calibrate:calibrate",
    "pretrain": "pretrain:pretrain",
    "inspect": "inspect_run:inspect_run",
    "finetune": "finetune:finetune",
    "eval": "evaluate:evaluate",
    "jdd": "infer:jdd",
    "denoise": "infer:denoise",
    "bench": "bench:bench",
    "export": "export:export",
    "demo": "demo:demo",
    "adapt": "adapt:adapt",
}


class LazyGroup(click.Group):
    """A click group that imports a command's module only when the command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(f"rawrcl.cli.{module_name}"), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rawrcl")
def main() -> None:
    """rawrcl: RAW-first camera pipeline with Residual Contrastive Learning.

    RAW values are normalised to [0, 1] after black and white level; noise parameters
    λshot, λread are in those units (variance = λshot·x + λread).
    """
    # file names are bytes on POSIX: one that is not valid UTF-8 is printed back as the same bytes
    # instead of failing the whole command with UnicodeEncodeError
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        with contextlib.suppress(Exception):
            sys.stdout.reconfigure(errors="surrogateescape")
