"""Shared pieces of the pretext methods: the method base class and output-domain handling."""

from __future__ import annotations

import logging

import torch

from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError
from rawrcl.losses import raw_residual, residual

log = logging.getLogger("rawrcl.methods")


class Method:
    """A training objective: ``method(batch, model) -> {"loss": scalar tensor, **float logs}``.

    Subclasses set ``name`` and ``needs`` (batch keys they read) and implement :meth:`__call__`.
    Keyword options are stored in ``self.options`` (JSON-able) for the run's config.json.
    """

    name = "method"
    needs: tuple[str, ...] = ("x_a",)

    def __init__(self, **options) -> None:
        self.options = options

    def config(self) -> dict:
        return {"method": self.name, **self.options}

    def check_batch(self, batch: dict) -> None:
        missing = [k for k in self.needs if k not in batch]
        if missing:
            raise RawrclError(
                f"method {self.name!r} needs batch keys {missing} that this dataset does not provide"
            )

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options})"


def domain(x: torch.Tensor, out: torch.Tensor) -> str:
    """ "same" when the output lies on the input's grid and format, "jdd" for packed RAW → RGB ×2."""
    if out.shape == x.shape:
        return "same"
    b, c, h, w = x.shape
    if c == 4 and tuple(out.shape) == (b, 3, 2 * h, 2 * w):
        return "jdd"
    raise RawrclError(
        f"pretext methods need a same-size head (rgb/raw) or the jdd head; model maps {tuple(x.shape)} → "
        f"{tuple(out.shape)} (fine-tune sr heads after pre-training instead)"
    )


def to_input_domain(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Model output expressed on the input's grid: identity, or ``mosaic_packed(out, "RGGB")`` for JDD."""
    return out if domain(x, out) == "same" else mosaic_packed(out, "RGGB")


def input_residual(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Residual on the input's grid (B, C, h, w), same units as ``x``: ``x − f(x)`` for same-domain heads,
    ``x − mosaic_packed(f(x), "RGGB")`` for the JDD head (App. B.2); via :mod:`rawrcl.losses`."""
    return residual(x, out) if domain(x, out) == "same" else raw_residual(x, out)
