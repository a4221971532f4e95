"""Where the SURE weights (the estimator :class:`rawrcl.models.sure.SureShrink`) apply: :func:`with_shrink`
wraps the models they serve, :data:`DEFAULTS` says which command uses them by default, :func:`shrink_summary`
is the commands' log phrase."""

from __future__ import annotations

import torch.nn as nn

from rawrcl.models.sure import SureShrink


def with_shrink(model: nn.Module) -> nn.Module:
    """``model`` with :class:`SureShrink` where it applies: around a noise-aware RAW denoiser (head
    ``"raw"``, e.g. the CFA-site blend default), around the first stage of a two-stage JDD model; any other
    model (blind, RGB, already shrunk) is returned unchanged."""
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.conditioning import is_noise_aware

    if isinstance(model, SureShrink) or not is_noise_aware(model):
        return model
    if isinstance(model, DenoiseThenDemosaic) and model.output == "jdd":
        if isinstance(model.denoiser, SureShrink) or not getattr(model.denoiser, "noise_aware", False):
            return model
        return model.replace(denoiser=SureShrink(model.denoiser))
    return SureShrink(model) if _head(model) == "raw" else model


def _head(model: nn.Module) -> str | None:
    """The output head of ``model`` (``head_name``, else its config's ``head``)."""
    return getattr(model, "head_name", None) or getattr(model, "config", {}).get("head")


#: whether each command uses SURE weights by default, by the model's output head: on for RAW denoising
#: (validation rows: +0.10 dB mean, +0.28 at base ISO, none below −0.001; burst +0.04), off for JDD (its first
#: stage alone: +0.03, below the +0.05 bar it was held to; ``--shrink`` turns it on) — docs/weights.md,
#: "SURE weights"
DEFAULTS = {"raw": True, "jdd": False}


def maybe_shrink(model: nn.Module, shrink: bool | None = None) -> nn.Module:
    """:func:`with_shrink` of ``model`` when ``shrink`` is True, or when None and the model's head
    defaults to it (:data:`DEFAULTS`); ``model`` itself otherwise."""
    if shrink is None:
        shrink = DEFAULTS.get(_head(model), False)
    return with_shrink(model) if shrink else model


def shrink_summary(model: nn.Module) -> str | None:
    """One log phrase on the SURE weights a bound model used (e.g. ``"SURE weights over 12 tiles: first
    stage 0.05, JDD stage 0.93, input 0.02 (mean)"``), or None when it has no :class:`SureShrink` or never
    changed the model's output."""
    found = [m for m in model.modules() if isinstance(m, SureShrink)]
    seen = [w for m in found for w in m.seen if w and w[0] == w[0]]  # NaN: the model's own output
    if not seen:
        return None
    seen = [w for w in seen if len(w) == len(seen[0])]
    mean = [sum(c) / len(seen) for c in zip(*seen, strict=True)]
    tiles = f"{len(seen)} tile{'s' * (len(seen) != 1)}"
    if len(mean) == 1:
        if min(w[0] for w in seen) >= 1:
            return None
        return f"SURE shrinkage towards the input over {tiles}: weight {mean[0]:.2f} mean"
    names = next((m.names for m in found if len(m.names) == len(mean)), None)
    names = names or tuple(f"estimate {i + 1}" for i in range(len(mean)))
    each = ", ".join(f"{n} {w:.2f}" for n, w in zip(names, mean, strict=True))
    return f"SURE weights over {tiles}: {each}, input {1 - sum(mean):.2f} (mean)"
