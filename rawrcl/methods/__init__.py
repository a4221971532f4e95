"""Training objectives, one file each, all called ``method(batch, model) -> {"loss": tensor, **float logs}``.

``METHODS[name]`` gives the method with default options; :func:`make_method` builds a configured one.

| name       | module        | data it needs                                   |
|------------|---------------|-------------------------------------------------|
| rcl        | rcl.py        | x_a, x_b (two overlapping crops)                |
| n2n        | n2n.py        | x_a, x_b + x_a2, x_b2 (second noise realisation) |
| n2s        | n2s.py        | x_a, x_b                                        |
| m2m        | m2m.py        | x_a, x_b packed RAW, JDD head                   |
| simclr     | encoder.py    | x_a, x_b (trains the perceptual encoder)        |
| supervised | supervised.py | input, target (fine-tuning; tasks engineer)     |
| r2r        | r2r.py        | x_a (+x_b), noise, floor (rawrcl adapt)         |
| sure       | sure.py       | x_a (+x_b), noise, floor (rawrcl adapt)         |
| blindspot  | blindspot.py  | x_a (+x_b), noise, floor; a BlindSpotDenoiser   |
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping

from rawrcl.errors import RawrclError

#: name -> "module:attribute" (a Method class, or a plain function for "supervised")
_REGISTRY: dict[str, str] = {
    "rcl": "rcl:RCL",
    "n2n": "n2n:N2N",
    "n2s": "n2s:N2S",
    "m2m": "m2m:M2M",
    "simclr": "encoder:SimCLR",
    "supervised": "supervised:supervised",
    "r2r": "r2r:R2R",
    "sure": "sure:SURE",
    "blindspot": "blindspot:BlindSpotNLL",
}


#: objectives that need each sample's per-plane noise model and clip floor: ``rawrcl adapt``'s data only
ADAPT_ONLY: tuple[str, ...] = ("r2r", "sure")

#: objectives of their own architecture (``blindspot``: a BlindSpotDenoiser trained from scratch on adapt's
#: data): not pretext methods; ``rawrcl adapt --method blindspot`` trains one beside the start
#: (rawrcl.train.adapt_blindspot); ``burst`` puts that network's composite beside a frame-to-frame fine-tune
#: (rawrcl.train.adapt_burst)
OWN_MODEL: tuple[str, ...] = ("blindspot", "burst")

#: the self-supervised methods of ``rawrcl pretrain --method`` (all but the supervised L1 of finetune and
#: the adapt-only objectives)
PRETEXT_METHODS: tuple[str, ...] = tuple(
    n for n in _REGISTRY if n != "supervised" and n not in ADAPT_ONLY + OWN_MODEL
)


def _target(name: str):
    if name not in _REGISTRY:
        raise RawrclError(f"unknown method {name!r}; expected one of {', '.join(_REGISTRY)}")
    mod, attr = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(f"rawrcl.methods.{mod}"), attr)


def make_method(name: str, config: dict | None = None) -> Callable:
    """A configured method: ``make_method("rcl", {"distance": "emd", "alpha": 1e-3})``.

    Options a method does not know are ignored when it is a plain function (``supervised``).
    """
    target = _target(name)
    if isinstance(target, type):
        return target(**(config or {}))
    return target


class _Methods(Mapping):
    """Lazy name → default method mapping (imports a method's module on first use)."""

    def __init__(self) -> None:
        self._cache: dict[str, Callable] = {}

    def __getitem__(self, name: str) -> Callable:
        if name not in self._cache:
            if name not in _REGISTRY:
                raise KeyError(name)
            self._cache[name] = make_method(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTRY)

    def __len__(self) -> int:
        return len(_REGISTRY)


METHODS: Mapping[str, Callable] = _Methods()

__all__ = ["ADAPT_ONLY", "METHODS", "make_method", "OWN_MODEL", "PRETEXT_METHODS"]
