"""Model registry: ``build_model(config)``, checkpoints that rebuild their own model.

Config keys (JSON-able dict; missing keys get defaults, see :func:`model_config`):

- ``arch``: ``"unet"`` | ``"dncnn"`` (or ``"encoder"``, the perceptual encoder of
  :mod:`rawrcl.models.encoder`; or ``"two_stage"``: a RAW denoiser then a demosaic,
  :class:`rawrcl.models.compose.DenoiseThenDemosaic`, config keys ``denoiser``, ``demosaicker``,
  ``residual``, each stage's config as below; with ``head`` ``"raw"`` and ``blend`` a RAW denoiser;
  ``"blindspot"``: :class:`rawrcl.models.blindspot.BlindSpotDenoiser`, keys ``width``, ``channels``;
  ``"with_blindspot"``: a noise-aware RAW denoiser ``base`` beside a ``blindspot`` model, the output of
  ``rawrcl adapt --method blindspot``, :class:`rawrcl.models.blindspot.WithBlindSpot`; ``"with_fine_tune"``:
  a noise-aware RAW denoiser ``base`` (e.g. a ``with_blindspot`` model) beside ``fine``, a fine-tune of a
  RAW model, :class:`rawrcl.models.beside.WithFineTune`).
- ``in_channels``: 3 (RGB) | 4 (packed RAW [R, G1, G2, B] in RGGB geometry).
- ``head``: ``"rgb"`` | ``"raw"`` | ``"jdd"`` | ``"sr2"`` | ``"sr4"`` (see :mod:`rawrcl.models.heads`).
- ``width``, ``depth``: body size (U-Net default 32/3; DnCNN default 64/16).
- ``skip`` (U-Net only; default ``False``, so older checkpoints load unchanged): add the fixed baseline
  ``skip_map(x)`` (identity, bilinear demosaic for ``jdd``, bilinear up-scaling) to the head's output,
  so the network learns a correction of a classical estimate. DnCNN always has its skip.
- ``noise_aware`` (default ``False``, so older checkpoints load unchanged): the model is called
  ``model(x, noise)`` with the noise parameters (B, 2, in_channels) and its body also sees the per-pixel
  noise std map (:func:`rawrcl.noise.std_map`), so one model serves every noise level and camera.
- ``row_aware`` (default ``False``; needs ``noise_aware``): the body also sees a map of the row (banding)
  noise std (``ROW_GAIN``·σ_row), from an optional third row σ_row² of ``noise`` (B, 3, in_channels)
  (absent: 0). Made by :func:`rawrcl.models.conditioning.add_row_input` from a noise-aware model (zero
  weights on the new input, so the model is unchanged until trained), which ``rawrcl adapt`` does for
  banded files.
- ``row_switch`` (default off, stored only when on; needs ``row_aware``) and ``row_min`` (σ_row, [0, 1]
  units, default 0): the model also holds the frozen starting model (``plain.*``), which every sample told
  σ_row ≤ ``row_min`` goes through, so the adapted weights serve banded files only
  (:func:`rawrcl.models.conditioning.add_row_input` with ``switch=True``; ``rawrcl adapt`` sets ``row_min``
  to half the smallest σ_row of its banded files, so a file read as faintly banded, e.g. a scene's
  horizontal edges at base ISO, stays with the start).
- ``deband_row`` and ``deband_min`` (σ_row, [0, 1] units; stored only when set): the model was adapted to
  a banded camera whose files ``rawrcl adapt`` de-banded first (:func:`rawrcl.banding.remove_row_offsets` at
  the camera's σ_row ``deband_row``), so the commands de-band its files the same way before it runs, each
  file unless its own estimate is below ``deband_min`` (:func:`rawrcl.infer.noise.deband_raw`;
  :func:`rawrcl.models.conditioning.set_camera_rows` sets them). Exposed as the attribute ``deband``.
- ``refine`` (U-Net only; default 0, stored only when > 0): residual blocks at the input resolution after
  the decoder (:class:`rawrcl.models.unet.UNetBody`), added to a trained model by
  :func:`rawrcl.models.widen.deepen`.
- ``demosaic``: the demosaic inside that skip for packed RAW → RGB heads, ``"bilinear"`` (default, so
  older checkpoints load unchanged) or ``"malvar"`` (Malvar–He–Cutler, sharper;
  :data:`rawrcl.models.heads.DEMOSAICS`).

Output convention: every restoration model outputs an estimate of the *clean* signal on the head's
grid. DnCNN internally predicts the noise and returns ``skip_map(x) − noise`` (identity skip for
same-size heads), so the paper's residual ``x − f(x)`` is the predicted noise.

Checkpoint file = ``torch.save({"config": dict, "state_dict": dict, "extra": dict})``; loaded with
``weights_only=True`` only. ``extra`` may hold tensors, numbers, strings, lists and dicts.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path, write_error
from rawrcl.models.beside import WithFineTune
from rawrcl.models.blindspot import BlindSpotDenoiser, WithBlindSpot
from rawrcl.models.compose import BLEND, OUTPUTS, RESIDUAL, DenoiseThenDemosaic
from rawrcl.models.dncnn import DnCNNBody
from rawrcl.models.encoder import Encoder
from rawrcl.models.heads import DEMOSAICS, Head, head_spec, skip_map
from rawrcl.models.unet import UNetBody
from rawrcl.noise import std_map

#: a row-aware body sees ROW_GAIN·σ_row: O(1) for the banding of real sensors (σ_row 0.001–0.03 in [0, 1]
#: units), so that the new input's weights, which start at 0, can matter within a short adaptation (measured:
#: gain 1 → no effect in 400 steps, 100 → the check's worst −0.15 dB, 300 → −0.10; docs/adaptation.md)
ROW_GAIN = 300.0

DEFAULTS: dict[str, dict] = {
    "unet": {"width": 32, "depth": 3},
    "dncnn": {"width": 64, "depth": 16},
}


class RestorationModel(nn.Module):
    """``body`` (features at input resolution) + named replaceable ``head``.

    Shapes: (B, in_channels, h, w) → (B, C_out, s·h, s·w) with (C_out, s) given by the head
    (:data:`rawrcl.models.heads.HEADS`). Values in the input's units ([0, 1]).
    """

    def __init__(self, config: dict) -> None:
        super().__init__()
        cfg = model_config(config)
        self.config = cfg
        self.noise_aware = cfg["noise_aware"]
        self.row_aware = cfg["row_aware"]
        body_in = cfg["in_channels"] * (1 + self.noise_aware + self.row_aware)
        if cfg["arch"] == "unet":
            self.body = UNetBody(body_in, cfg["width"], cfg["depth"], cfg.get("refine", 0))
        else:
            self.body = DnCNNBody(body_in, cfg["width"], cfg["depth"])
        self.residual = cfg["arch"] == "dncnn"
        self.demosaic = cfg["demosaic"]
        self.skip = cfg["arch"] == "unet" and cfg["skip"]
        self.head = Head(cfg["head"], self.body.out_channels)
        self.size_multiple = int(getattr(self.body, "size_multiple", 1))
        self.deband = (cfg["deband_row"], cfg["deband_min"]) if "deband_row" in cfg else None
        self.row_switch = bool(cfg.get("row_switch", False))
        if self.row_switch:  # the starting model, frozen: what samples told σ_row ≤ row_min go through
            self.row_min = cfg["row_min"]
            plain = {k: v for k, v in cfg.items() if k not in ("row_switch", "row_min")}
            self.plain = RestorationModel(plain | {"row_aware": False})
            self.plain.requires_grad_(False)

    @property
    def head_name(self) -> str:
        return self.head.name

    @property
    def scale(self) -> int:
        return self.head.scale

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` (B, in_channels, h, w); ``noise`` (B, 2, in_channels) [λshot; λread] per channel (or
        (B, 3, in_channels) with σ_row², used by a row-aware model, ignored otherwise), required by (and only
        by) a noise-aware model, whose body also sees the noise-std map (:func:`rawrcl.noise.std_map`).
        With ``row_switch`` the samples told σ_row ≤ ``row_min`` (or no row) go through the frozen starting
        model ``plain`` instead: an adapted banded camera's model is exactly the start on every other file."""
        if self.row_switch and noise is not None:
            noise = noise.to(x.device)
            if noise.shape[1] < 3:  # no row noise told: the start
                return self.plain(x, noise)
            banded = (noise[:, 2] > self.row_min**2).any(dim=1)
            if not bool(banded.any()):
                return self.plain(x, noise[:, :2])
            if not bool(banded.all()):
                out_b = self._forward(x[banded], noise[banded])
                out = out_b.new_empty((len(x), *out_b.shape[1:]))
                out[banded] = out_b
                out[~banded] = self.plain(x[~banded], noise[~banded, :2]).to(out_b.dtype)
                return out
        return self._forward(x, noise)

    def _forward(self, x: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        if self.noise_aware:
            if noise is None:
                raise RawrclError("this model is noise-aware: it needs the noise parameters (λshot, λread)")
            noise = noise.to(x.device)
            maps = [x, std_map(x, noise)]
            if self.row_aware:
                r = (
                    ROW_GAIN * noise[:, 2].to(x.dtype).clamp_min(0).sqrt()
                    if noise.shape[1] > 2
                    else x.new_zeros(noise[:, 0].shape)
                )
                maps.append(r[:, :, None, None].expand_as(x))
            feats = self.body(torch.cat(maps, dim=1))
        elif noise is not None:
            raise RawrclError("this model is blind to the noise level: do not pass noise parameters")
        else:
            feats = self.body(x)
        out = self.head(feats)
        if self.residual:
            out = skip_map(x, self.head.name, self.demosaic).to(out.dtype) - out
        elif self.skip:
            with torch.autocast(x.device.type, enabled=False):  # the baseline keeps fp32 precision
                base = skip_map(x.float(), self.head.name, self.demosaic)
            out = base + out  # fp32 (type promotion) even when the body ran under bf16/fp16 autocast
        return out

    def replace_head(self, name: str | None = None) -> nn.Module:
        """Install a freshly initialised head ``name`` (default: the current head's name).

        Updates ``self.config["head"]``; returns the new head (on the body's device/dtype).
        """
        name = name or self.head.name
        head_spec(name)
        if name == "raw" and self.config["in_channels"] != 4 and (self.residual or self.skip):
            raise RawrclError("a 'raw' head on a model with a skip needs packed RAW input")
        p = next(self.body.parameters())
        self.head = Head(name, self.body.out_channels).to(device=p.device, dtype=p.dtype)
        self.config = {**self.config, "head": name}
        return self.head

    def freeze_body(self, frozen: bool = True) -> None:
        """Freeze (or unfreeze) every body parameter: the proxy protocol's linear fine-tuning."""
        for p in self.body.parameters():
            p.requires_grad_(not frozen)


def _two_stage(config: dict) -> nn.Module:
    """A :class:`DenoiseThenDemosaic` built from its (validated) config: arch ``two_stage``."""
    dem = config.get("demosaicker")
    return DenoiseThenDemosaic(
        build_model(config["denoiser"]),
        None if dem is None else build_model(dem),
        config["residual"],
        output=config["head"],
        blend=config.get("blend", BLEND),
        blend_sigma=config.get("blend_sigma", 0.0),
    )


def _blindspot(config: dict) -> nn.Module:
    """A :class:`~rawrcl.models.blindspot.BlindSpotDenoiser`: arch ``blindspot`` (``config`` validated by
    :func:`_blindspot_config`, which fills the keys older checkpoints lack)."""
    c = config
    return BlindSpotDenoiser(
        c["channels"], c["width"], cross=c["cross"], levels=c["levels"], censored=c["censored"]
    )


def _with_blindspot(config: dict) -> nn.Module:
    """A start beside a blind-spot network (:class:`~rawrcl.models.blindspot.WithBlindSpot`): arch
    ``with_blindspot``."""
    return WithBlindSpot(build_model(config["base"]), _blindspot(config["blindspot"]))


def _with_fine_tune(config: dict) -> nn.Module:
    """A start beside a fine-tune (:class:`~rawrcl.models.beside.WithFineTune`): arch ``with_fine_tune``."""
    return WithFineTune(build_model(config["base"]), build_model(config["fine"]))


#: arch name -> builder(config)
ARCHS: dict[str, Callable[[dict], nn.Module]] = {
    "unet": RestorationModel,
    "dncnn": RestorationModel,
    "encoder": Encoder,
    "two_stage": _two_stage,
    "blindspot": _blindspot,
    "with_blindspot": _with_blindspot,
    "with_fine_tune": _with_fine_tune,
}


def _blindspot_config(cfg: dict) -> dict:
    """Validate a ``blindspot`` config: ``channels`` (4, packed RAW), ``width`` (32) ≥ 1, ``cross`` and
    ``censored`` (bools; False when absent, as in checkpoints written before them) and ``levels`` (poolings,
    2 when absent)."""
    channels, width, cross = cfg.get("channels", 4), cfg.get("width", 32), cfg.get("cross", False)
    levels, censored = cfg.get("levels", 2), cfg.get("censored", False)
    for name, flag in (("cross", cross), ("censored", censored)):
        if not isinstance(flag, bool):
            raise RawrclError(f"a blind-spot model's {name} must be true or false, got {flag!r}")
    for name, v in (("channels", channels), ("width", width), ("levels", levels)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RawrclError(f"a blind-spot model's {name} must be a whole number ≥ 1, got {v!r}")
    if channels != 4:
        raise RawrclError(f"a blind-spot model takes packed RAW (channels 4), got {channels}")
    return {
        "arch": "blindspot",
        "head": "raw",
        "in_channels": 4,
        "noise_aware": True,
        "channels": 4,
        "width": width,
        "cross": cross,
        "levels": levels,
        "censored": censored,
    }


def _with_blindspot_config(cfg: dict) -> dict:
    """Validate a ``with_blindspot`` config: ``base`` a noise-aware RAW denoiser config (head ``raw``),
    ``blindspot`` a ``blindspot`` config."""
    base, bsp = cfg.get("base"), cfg.get("blindspot")
    if not isinstance(base, dict) or not isinstance(bsp, dict):
        raise RawrclError("a with_blindspot model needs 'base' and 'blindspot' configs")
    base = model_config(base)
    if (
        base.get("head") != "raw"
        or not base.get("noise_aware")
        or base["arch"] in ("blindspot", "with_blindspot")
    ):
        raise RawrclError("a with_blindspot model's base must be a noise-aware RAW denoiser (head 'raw')")
    bsp = _blindspot_config({**bsp, "arch": "blindspot"})
    return _beside_config("with_blindspot", base, "blindspot", bsp)


def _beside_config(arch: str, base: dict, key: str, other: dict) -> dict:
    """The config of a start beside a second estimate (:class:`~rawrcl.models.beside.Beside`): validated
    ``base``, and ``other`` under ``key``."""
    return {
        "arch": arch,
        "head": "raw",
        "in_channels": 4,
        "noise_aware": True,
        "row_aware": bool(base.get("row_aware", False)),
        "base": base,
        key: other,
    }


def _raw_config(cfg: object, what: str, composite: bool) -> dict:
    """Validate ``cfg`` as a noise-aware RAW denoiser's config (head ``raw``, not a blind-spot network alone;
    a composite beside its start only if ``composite``)."""
    if not isinstance(cfg, dict):
        raise RawrclError(f"a with_fine_tune model needs a {what!r} config")
    out = model_config(cfg)
    if (
        out.get("head") != "raw"
        or not out.get("noise_aware")
        or out["arch"] == "blindspot"
        or (not composite and out["arch"] in ("with_blindspot", "with_fine_tune"))
    ):
        raise RawrclError(f"a with_fine_tune model's {what} must be a noise-aware RAW denoiser (head 'raw')")
    return out


def _with_fine_tune_config(cfg: dict) -> dict:
    """Validate a ``with_fine_tune`` config: ``base`` a noise-aware RAW denoiser config (a composite such as
    ``with_blindspot`` allowed), ``fine`` a noise-aware RAW denoiser config (not a composite)."""
    base = _raw_config(cfg.get("base"), "base", composite=True)
    fine = _raw_config(cfg.get("fine"), "fine", composite=False)
    return _beside_config("with_fine_tune", base, "fine", fine)


def _two_stage_config(cfg: dict) -> dict:
    """Validate a ``two_stage`` config: a RAW denoiser (``denoiser``, head ``raw``), then ``demosaicker``
    (None: bilinear, or a JDD model) told λ × ``residual`` ∈ (0, 1]; ``head`` ``"jdd"`` (RGB out, the default)
    or ``"raw"`` (the CFA-site blend, weight ``blend`` ∈ (0, 1]; needs a JDD model)."""
    den = cfg.get("denoiser")
    dem = cfg.get("demosaicker")
    den = model_config(den) if isinstance(den, dict) else {}
    if den.get("head") != "raw":
        raise RawrclError("a two-stage model needs a RAW denoiser config ('denoiser', head 'raw')")
    if dem is not None:
        dem = model_config(dem) if isinstance(dem, dict) else {}
        if dem.get("head") != "jdd":
            raise RawrclError("a two-stage model's 'demosaicker' must be a JDD model config (head 'jdd')")
    residual = float(cfg.get("residual", RESIDUAL))
    if not 0 < residual <= 1:
        raise RawrclError(f"two-stage residual must be in (0, 1], got {residual}")
    aware = den["noise_aware"] or bool(dem and dem["noise_aware"])
    head = cfg.get("head") or "jdd"
    if head not in OUTPUTS:
        raise RawrclError(f"a two-stage model's head must be one of {', '.join(OUTPUTS)}, got {head!r}")
    out = {k: v for k, v in cfg.items() if k not in ("blend", "blend_sigma")}
    if head == "raw":
        if dem is None:
            raise RawrclError("a two-stage RAW denoiser (head 'raw') needs a JDD model ('demosaicker')")
        blend, sigma = float(cfg.get("blend", BLEND)), float(cfg.get("blend_sigma", 0.0))
        if not 0 < blend <= 1:
            raise RawrclError(f"two-stage blend must be in (0, 1], got {blend}")
        if not (math.isfinite(sigma) and sigma >= 0):
            raise RawrclError(f"two-stage blend_sigma must be a finite std ≥ 0, got {sigma}")
        out["blend"], out["blend_sigma"] = blend, sigma
    return {
        **out,
        "head": head,
        "in_channels": 4,
        "noise_aware": aware,
        "row_aware": bool(den["row_aware"]),
        "denoiser": den,
        "demosaicker": dem,
        "residual": residual,
    }


def model_config(config: dict) -> dict:
    """Fill defaults and validate a model config; returns a new JSON-able dict."""
    cfg = dict(config)
    arch = cfg.setdefault("arch", "unet")
    if arch not in ARCHS:
        raise RawrclError(f"unknown arch {arch!r}; expected one of {', '.join(sorted(ARCHS))}")
    if arch in DEFAULTS:
        for k, v in DEFAULTS[arch].items():
            if cfg.get(k) is None:
                cfg[k] = v
        cfg.setdefault("in_channels", 4)
        cfg.setdefault("head", "jdd" if cfg["in_channels"] == 4 else "rgb")
        if cfg["in_channels"] not in (3, 4):
            raise RawrclError(f"in_channels must be 3 (RGB) or 4 (packed RAW), got {cfg['in_channels']}")
        head_spec(cfg["head"])
        if cfg["head"] in ("raw", "jdd") and cfg["in_channels"] != 4:
            raise RawrclError(f"head {cfg['head']!r} needs packed RAW input (in_channels=4)")
        cfg["width"], cfg["depth"], cfg["in_channels"] = (
            int(cfg["width"]),
            int(cfg["depth"]),
            int(cfg["in_channels"]),
        )
        if cfg["width"] < 1 or cfg["depth"] < 1:
            raise RawrclError(
                f"--width and --depth must be ≥ 1, got width {cfg['width']}, depth {cfg['depth']}"
            )
        cfg["demosaic"] = str(cfg.get("demosaic") or "bilinear")
        if cfg["demosaic"] not in DEMOSAICS:
            raise RawrclError(f"unknown demosaic {cfg['demosaic']!r}; expected one of {', '.join(DEMOSAICS)}")
        cfg["noise_aware"] = bool(cfg.get("noise_aware", False))
        cfg["row_aware"] = bool(cfg.get("row_aware", False))
        if cfg["row_aware"] and not cfg["noise_aware"]:
            raise RawrclError("row_aware needs a noise-aware model")
        if cfg.get("row_switch"):  # only stored when on, so other configs stay as they were
            if not cfg["row_aware"]:
                raise RawrclError("row_switch needs a row-aware model")
            cfg["row_switch"] = True
            cfg["row_min"] = float(cfg.get("row_min", 0.0))
            if not (math.isfinite(cfg["row_min"]) and cfg["row_min"] >= 0):
                raise RawrclError(f"row_min must be a finite σ_row ≥ 0, got {cfg['row_min']}")
        else:
            cfg.pop("row_switch", None)
            cfg.pop("row_min", None)
        if cfg.get("deband_row"):  # only stored when set, so other configs stay as they were
            row, lo = float(cfg["deband_row"]), float(cfg.get("deband_min", 0.0))
            if not (math.isfinite(row) and 0 < row < 1 and math.isfinite(lo) and 0 <= lo <= row):
                raise RawrclError(
                    f"deband_row / deband_min must be σ_row values 0 ≤ min ≤ row < 1, got {row}, {lo}"
                )
            cfg["deband_row"], cfg["deband_min"] = row, lo
        else:
            cfg.pop("deband_row", None)
            cfg.pop("deband_min", None)
        if arch == "unet":
            cfg["skip"] = bool(cfg.get("skip", False))
            refine = cfg.pop("refine", 0) or 0
            if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
                raise RawrclError(f"refine must be a whole number ≥ 0 of residual blocks, got {refine!r}")
            if refine:  # stored only when used, so other configs stay as they were
                cfg["refine"] = refine
        else:
            cfg.pop("skip", None)  # DnCNN always has its own skip; the option is U-Net only
            cfg.pop("refine", None)
    elif arch == "two_stage":
        cfg = _two_stage_config(cfg)
    elif arch == "blindspot":
        cfg = _blindspot_config(cfg)
    elif arch == "with_blindspot":
        cfg = _with_blindspot_config(cfg)
    elif arch == "with_fine_tune":
        cfg = _with_fine_tune_config(cfg)
    return cfg


def build_model(config: dict) -> nn.Module:
    """Build a model from its config dict (see module docstring). Random init from torch's global RNG."""
    cfg = model_config(config)
    return ARCHS[cfg["arch"]](cfg)


def unwrap(model: nn.Module) -> nn.Module:
    """The bare module behind DistributedDataParallel / torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` atomically and fsync'ed (:func:`rawrcl.io.atomic_path`). A failed write
    (disk full, file-size limit) raises a one-line :class:`RawrclError` and leaves ``path`` untouched."""
    with atomic_path(path, fsync=True) as tmp:
        try:
            torch.save(obj, tmp)
        except RuntimeError as exc:  # torch's writer reports I/O failures as RuntimeError
            raise write_error(path, exc) from None


def save_checkpoint(
    path: str | os.PathLike, model: nn.Module, config: dict | None = None, extra: dict | None = None
) -> None:
    """Write ``{"config", "state_dict", "extra"}`` atomically.

    ``config`` defaults to ``model.config``; the head actually installed wins over a stale config.
    """
    bare = unwrap(model)
    cfg = dict(config if config is not None else getattr(bare, "config", {}))
    if hasattr(bare, "config"):
        cfg = {**cfg, **bare.config}
    state = {k: v.detach().cpu() for k, v in bare.state_dict().items()}
    atomic_torch_save({"config": cfg, "state_dict": state, "extra": extra or {}}, path)


def _load_failure(exc: Exception) -> str:
    """One line on why ``torch.load(weights_only=True)`` refused a file. PyTorch's own message spans
    several lines and suggests ``weights_only=False``, which rawrcl never does (it would run the file's code).
    """
    text = str(exc)
    found = re.search(r"GLOBAL (\S+)", text)
    if found:
        return f"it holds Python objects ({found.group(1)}) that rawrcl never unpickles, not only tensors"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # drop PyTorch's boilerplate (the weights_only advice, the documentation link, the issue request)
    useful = [
        ln
        for ln in lines
        if "weights_only" not in ln and "documentation" not in ln and "file an issue" not in ln.lower()
    ]
    reason = (useful or [type(exc).__name__])[0].split(". ")[0].rstrip(".")
    return f"{type(exc).__name__}: {reason}"


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load the raw checkpoint dict (weights_only=True); :class:`RawrclError` if unreadable.

    ``path`` may also be a run directory (its ``checkpoints/last.pt`` is read)."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    if not path.is_file():
        raise RawrclError(f"{path}: checkpoint not found")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file for the user
        raise RawrclError(f"{path}: not a readable rawrcl checkpoint ({_load_failure(exc)})") from None
    if not isinstance(ckpt, dict) or "config" not in ckpt or "state_dict" not in ckpt:
        raise RawrclError(f"{path}: not a rawrcl checkpoint (needs 'config' and 'state_dict')")
    return ckpt


def load_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> tuple[nn.Module, dict]:
    """Rebuild the model stored in ``path`` and load its weights. Returns (model in eval mode, config)."""
    ckpt = read_checkpoint(path, map_location)
    cfg = dict(ckpt["config"])
    model = build_model(cfg)
    try:
        model.load_state_dict(ckpt["state_dict"])
    except RuntimeError as exc:
        raise RawrclError(
            f"{path}: weights do not match the stored config ({str(exc).splitlines()[0]})"
        ) from None
    model.eval()
    return model, cfg
