"""A RAW denoiser beside a second estimate of the same file, combined by SURE weights: the form of every
label-free composite :mod:`rawrcl.train` writes.

:class:`Beside` holds the start (``base``) and gives :class:`~rawrcl.models.sure.SureShrink` two parts — the
start as ``rawrcl denoise`` runs it (with its own SURE weights) and the second estimate — which an outer
SureShrink weighs per tile (K = 2, nested; 4 × 4 probe windows): label-free, and back to the start where
the second estimate does not help. Called directly (no SURE weights, ``--no-shrink``) the model is the start
alone.
Subclasses say what the second estimate is:

- :class:`~rawrcl.models.blindspot.WithBlindSpot` (arch ``with_blindspot``): a blind-spot network trained on
  the user's files (``rawrcl adapt --method blindspot``);
- :class:`WithFineTune` (arch ``with_fine_tune``): a fine-tune of the start with its own SURE weights
  (measured with the frame-to-frame objective in ``benchmarks/burst_f2f.py``, docs/adaptation.md from
  "Stop 103"; not written by ``rawrcl adapt``).

Shapes: ``x`` (B, 4, h, w) packed [R, G1, G2, B] in [0, 1], ``noise`` (B, 2 or 3, 4) → (B, 4, h, w).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import nn

from rawrcl.models.geometry import size_multiple
from rawrcl.models.sure import SureShrink


class Beside(nn.Module):
    """The start ``base`` beside a second estimate (:meth:`second`, defined by a subclass); see the module
    docstring. ``other`` is the module behind the second estimate (for the size multiple)."""

    noise_aware = True
    raw_parts = True
    head_name = "raw"
    part_names: tuple[str, str] = ("start (its SURE weights)", "second estimate")
    #: SureShrink probes 4 × 4 windows of each tile, not 2 × 2: with 2 × 2 a blind-spot network's weight
    #: swung 0 ↔ 0.26 with the windows' placement alone (docs/adaptation.md, "The cross head, nested SURE
    #: weights …")
    sure_grid = 4

    #: the registered arch and the config key of the module behind the second estimate (set by a subclass)
    arch: str = ""
    other_key: str = ""

    def __init__(self, base: nn.Module, other: nn.Module) -> None:
        super().__init__()
        self.base = base
        self.row_aware = bool(getattr(base, "row_aware", False))
        self.deband = getattr(base, "deband", None)  # rawrcl.models.conditioning.camera_rows
        self.size_multiple = math.lcm(size_multiple(base), size_multiple(other))
        # the base with its own SURE weights; a tuple keeps it out of the module tree (no second copy of the
        # base's weights in state_dict, no second set of weights in the command's SURE log line)
        self._start = (SureShrink(base),)

    def second(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The second estimate (B, 4, h, w)."""
        raise NotImplementedError

    @property
    def config(self) -> dict:
        """The checkpoint config: ``arch``, ``base`` and the second module's under ``other_key``."""
        return {
            "arch": self.arch,
            "head": "raw",
            "in_channels": 4,
            "noise_aware": True,
            "row_aware": self.row_aware,
            "base": dict(self.base.config),
            self.other_key: dict(getattr(self, self.other_key).config),
        }

    def with_start(self, start: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], name: str) -> Beside:
        """A view (modules shared, not copied) whose first part is ``start(x, noise)`` (B, 4, h, w) instead of
        the base with its SURE weights, logged as ``name`` — for JDD, the base's first stage, which its JDD
        network is trained behind (:func:`rawrcl.models.compose.adapt`)."""
        view = copy.copy(self)
        view._start = (start,)
        view.part_names = (name, self.part_names[1])
        return view

    def parts(self, x: torch.Tensor, noise: torch.Tensor) -> list[torch.Tensor]:
        start = self._start[0](x, noise)
        return [start, self.second(x, noise).to(start.dtype)]

    def blend_parts(self, *parts: torch.Tensor) -> torch.Tensor:
        """The start's output from :meth:`parts` (the last argument is the noise)."""
        return parts[0]

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.base(x, noise)


class WithFineTune(Beside):
    """The start ``base`` (any noise-aware RAW denoiser, e.g. a ``--method blindspot`` run) beside ``fine``, a
    fine-tune of the start's RAW model with its own SURE weights (arch ``with_fine_tune``, config ``base``,
    ``fine``). Next to a clip level, where SURE cannot score, the output is the start's."""

    arch, other_key = "with_fine_tune", "fine"
    part_names = ("start (its SURE weights)", "fine-tune (its SURE weights)")
    sure_first_near_clips = True
    #: ``rawrcl jdd`` refuses it (:func:`rawrcl.models.loading.load_for_task`): no JDD path is measured for
    #: it, and a RAW denoiser's output under bilinear demosaicking is 0.8–5.4 dB below the JDD default
    raw_only = True

    def __init__(self, base: nn.Module, fine: nn.Module) -> None:
        super().__init__(base, fine)
        self.fine = fine
        self._fine = (SureShrink(fine),)  # a tuple: the weights once in state_dict, under ``fine.``

    def second(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self._fine[0](x, noise)


__all__ = ["Beside", "WithFineTune"]
