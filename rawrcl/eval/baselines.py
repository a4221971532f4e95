"""Classical baselines of :func:`rawrcl.eval.evaluate` (and ``bench``): each is ``f(input, task, meta) ->
output`` in the task's target domain; ``meta["noise"]`` is the sample's true noise model.

- ``noisy``: identity for same-size tasks; bilinear demosaicing for RAW→RGB; bicubic for SR.
- ``bilinear``, ``malvar``, ``menon``, ``vng``, ``ea``: :func:`rawrcl.demosaic.demosaic` of the RGGB mosaic.
- ``menon+nlm``: Menon, then OpenCV ``fastNlMeansDenoisingColored`` on the 8-bit output with
  ``h = hColor = k · σ8`` (k = ``NLM_K[name]``), σ8 = 255·sqrt(λshot·mean(x) + λread) the noise std at the
  image's mean level from the *known* noise model of the sample (an oracle-noise-level baseline). ``NLM_K``
  was tuned on 6 CBSD68 images at the ``high`` preset (see ``docs/benchmarks.md``). With ``--unprocess``
  the NLM runs on the rendered 8-bit sRGB image instead (h from a blind MAD noise estimate there) and the
  result is mapped back to linear camera RGB (:func:`nlm_after_demosaic`).
- ``nlm``: RGB tasks, the same NLM on the noisy RGB input; ``raw-denoise``, RAW-domain NLM in the GAT domain
  with the true noise (:func:`rawrcl.gat.nlm_raw`).
- ``gat+bm3d`` (``raw-denoise``): generalised Anscombe transform + BM3D + exact unbiased inverse with the true
  noise (:func:`rawrcl.gat.gat_bm3d`; ≈ 1 min per megapixel).
- ``gharbi2016`` (``jdd``): Gharbi et al. 2016's released noise-aware network
  (:mod:`rawrcl.eval.gharbi2016`) with σ from the true noise; its weights are read from a folder the user
  gives (``gharbi_weights``; never shipped).
- ``gat+bm3d+menon``, ``gat+bm3d+dht`` (noisy RAW→RGB tasks): the strongest classical JDD pipeline we have —
  GAT+BM3D on the mosaic with the true noise, then Menon's or LibRaw's DHT demosaicing.
- ``libraw-ahd``, ``libraw-aahd``, ``libraw-dht`` (RAW→RGB tasks): LibRaw's own demosaicing of the mosaic,
  as a LibRaw/dcraw-based raw developer makes it (:mod:`rawrcl.eval.libraw`; linear camera RGB, no white
  balance); ``libraw-dht+fbdd`` with LibRaw's FBDD noise reduction first (its one working denoiser, fixed
  strength).
- ``bicubic``: bicubic ×2 (×4) upsampling (SR tasks; after Menon for RAW SR tasks).

For SR RAW tasks (jdemsr, jddsr) demosaicing baselines are followed by bicubic ×2 upsampling.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from rawrcl.cfa import unpack
from rawrcl.demosaic import METHODS, demosaic
from rawrcl.errors import RawrclError
from rawrcl.eval.libraw import NAMES as LIBRAW_NAMES
from rawrcl.eval.libraw import develop
from rawrcl.eval.metrics import to_uint8
from rawrcl.isp import render_srgb
from rawrcl.tasks import Task

#: NLM strength factors h = k · σ8 per baseline, tuned on CBSD68 images 0–5 (training split) at the
#: ``high`` preset (grid 0.3…1.4; see docs/benchmarks.md): Menon output 0.6, noisy RGB 0.5.
NLM_K: dict[str, float] = {"menon+nlm": 0.6, "nlm": 0.5}

Baseline = Callable[[torch.Tensor, Task, dict], torch.Tensor]

#: the classical two-step JDD baselines: GAT+BM3D (true noise), then this demosaicer (a :data:`METHODS` name
#: or a LibRaw baseline of :mod:`rawrcl.eval.libraw`)
TWO_STEP: dict[str, str] = {"gat+bm3d+menon": "menon", "gat+bm3d+dht": "libraw-dht"}


def _mosaic_np(inp: torch.Tensor) -> np.ndarray:
    """Packed RGGB (4, h, w) → mosaic (2h, 2w) float64 numpy."""
    return unpack(torch.as_tensor(inp).double(), "RGGB").numpy()


def _hwc_to_chw(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.asarray(a, dtype=np.float32).transpose(2, 0, 1)))


def _upsample(x: torch.Tensor, factor: int) -> torch.Tensor:
    if factor == 1:
        return x
    return F.interpolate(x[None], scale_factor=factor, mode="bicubic", align_corners=False)[0]


def _demosaic(name: str, inp: torch.Tensor) -> torch.Tensor:
    """Demosaic a packed RGGB (4, h, w) input → RGB (3, 2h, 2w) float32 (same value scale)."""
    return torch.from_numpy(demosaic(_mosaic_np(inp), "RGGB", name))


def _noise_params(meta: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(λshot, λread) of the sample's true noise model, each a scalar or per-channel array."""
    nm = (meta or {}).get("noise")
    if nm is None:
        raise RawrclError(f"baseline {name!r} needs the noise parameters of the test data")
    return np.asarray(nm.lambda_shot, dtype=np.float64), np.asarray(nm.lambda_read, dtype=np.float64)


def noise_sigma8(meta: dict, x: torch.Tensor) -> float:
    """Noise std in 8-bit units at the mean level of ``x`` from the sample's noise model (0 if none)."""
    nm = meta.get("noise") if meta else None
    if nm is None:
        return 0.0
    mean = float(torch.as_tensor(x).clamp(0, 1).mean())
    ls, lr = (float(np.mean(v)) for v in _noise_params(meta, "nlm"))
    return 255.0 * math.sqrt(max(ls * mean + lr, 0.0))


def nlm_rgb(x: torch.Tensor, sigma8: float, k: float | None = None) -> torch.Tensor:
    """OpenCV non-local means on an RGB (3, H, W) [0, 1] image quantised to 8 bits; h = hColor = k·σ8
    (k defaults to ``NLM_K["nlm"]``); template 7, search window 21 (OpenCV defaults)."""
    import cv2

    k = NLM_K["nlm"] if k is None else k
    if sigma8 <= 0:
        return x
    u8 = to_uint8(x)
    h = float(k * sigma8)
    out = cv2.fastNlMeansDenoisingColored(np.ascontiguousarray(u8[..., ::-1]), None, h, h, 7, 21)
    return _hwc_to_chw(out[..., ::-1].astype(np.float64) / 255.0)


def nlm_after_demosaic(rgb: torch.Tensor, meta: dict) -> torch.Tensor:
    """NLM for the ``menon+nlm`` pipeline, in the domain a camera pipeline denoises: the 8-bit display image.

    Photo-valued samples are already display-referred: NLM with h from the known noise level. Unprocessed
    (linear camera RGB) samples are rendered with the sample's own camera first — 8-bit quantisation of
    dark linear values would otherwise destroy the shadows — denoised there with h from a blind MAD
    estimate of the rendered noise (white balance, colour matrix and gamma change its level), and mapped
    back to linear camera RGB with the same camera (so the evaluation's rendering reproduces it).
    """
    isp_meta = (meta or {}).get("isp")
    if isp_meta is None:
        return nlm_rgb(rgb, noise_sigma8(meta, rgb), NLM_K["menon+nlm"])
    from rawrcl.isp import unprocess
    from rawrcl.losses import estimate_noise_std

    shown = render_srgb(
        rgb.clamp(0, 1).numpy(), isp_meta["wb"], isp_meta["ccm"], gain=float(isp_meta["gain"])
    )
    shown = torch.as_tensor(np.asarray(shown), dtype=torch.float32).clamp(0, 1)
    sigma8 = 255.0 * float(estimate_noise_std(shown[None]).mean())
    den = nlm_rgb(shown, sigma8, NLM_K["menon+nlm"])
    lin, _ = unprocess(den.numpy(), np.random.default_rng(0), camera=isp_meta, clip=False)
    return torch.as_tensor(np.asarray(lin), dtype=torch.float32)


def _libraw(name: str, inp: torch.Tensor) -> torch.Tensor:
    """``libraw-ALGO[+fbdd]`` on a packed RGGB (4, h, w) input → RGB (3, 2h, 2w) float32."""
    return torch.from_numpy(develop(name, _mosaic_np(inp), "RGGB"))


def _raw_denoiser(name: str, inp: torch.Tensor, meta: dict) -> torch.Tensor:
    from rawrcl.gat import gat_bm3d, nlm_raw

    ls, lr = _noise_params(meta, name)
    fn = gat_bm3d if name == "gat+bm3d" else nlm_raw
    return fn(inp, ls, lr)


def _baseline(name: str) -> Baseline:
    def run(inp: torch.Tensor, task: Task, meta: dict) -> torch.Tensor:
        inp = torch.as_tensor(inp).float()
        if task.raw_input and task.head == "raw":
            if name == "noisy":
                return inp
            if name in ("gat+bm3d", "nlm"):
                return _raw_denoiser(name, inp, meta)
            raise RawrclError(f"baseline {name!r} does not apply to task {task.name!r} (try noisy)")
        if task.raw_input:
            if name in TWO_STEP:  # GAT+BM3D, then the demosaicer below
                inp = torch.as_tensor(_raw_denoiser("gat+bm3d", inp, meta)).float()
            step = TWO_STEP.get(name, name)
            if step in LIBRAW_NAMES:
                return _upsample(_libraw(step, inp), task.scale // 2)
            demosaicer = {"noisy": "bilinear", "menon+nlm": "menon", "bicubic": "menon"}.get(step, step)
            if demosaicer not in METHODS:
                raise RawrclError(f"baseline {name!r} does not apply to RAW task {task.name!r}")
            rgb = _demosaic(demosaicer, inp)
            if name == "menon+nlm":
                rgb = nlm_after_demosaic(rgb, meta)
            return _upsample(rgb, task.scale // 2)
        # RGB-input tasks
        if name in ("noisy", "bicubic"):
            return _upsample(inp, task.scale)
        if name == "nlm":
            return _upsample(nlm_rgb(inp, noise_sigma8(meta, inp), NLM_K["nlm"]), task.scale)
        raise RawrclError(f"baseline {name!r} does not apply to RGB task {task.name!r}")

    run.__name__ = name
    return run


def gharbi_baseline(weights: str | os.PathLike) -> Baseline:
    """The ``gharbi2016`` baseline with the released weights in ``weights`` (``jdd`` only; σ from the
    sample's true noise, :func:`rawrcl.eval.gharbi2016.gharbi_sigma`)."""
    from rawrcl.eval.gharbi2016 import gharbi_jdd, gharbi_sigma, load_gharbi2016

    net = load_gharbi2016(weights)

    def run(inp: torch.Tensor, task: Task, meta: dict) -> torch.Tensor:
        if task.name != "jdd":
            raise RawrclError(f"baseline 'gharbi2016' applies to task jdd only, not {task.name!r}")
        x = torch.as_tensor(inp).float()[None]
        ls, lr = _noise_params(meta, "gharbi2016")
        return gharbi_jdd(net, x, gharbi_sigma(x, ls, lr))[0]

    run.__name__ = "gharbi2016"
    return run


BASELINE_NAMES = (
    "noisy",
    "bilinear",
    "malvar",
    "menon",
    "vng",
    "ea",
    "menon+nlm",
    "nlm",
    "gat+bm3d",
    *TWO_STEP,
    "gharbi2016",
    *LIBRAW_NAMES,
    "bicubic",
)
#: the baselines that need nothing but the sample (``gharbi2016`` needs its weights: :func:`make_baseline`)
BASELINES: dict[str, Baseline] = {n: _baseline(n) for n in BASELINE_NAMES if n != "gharbi2016"}


def make_baseline(name: str, gharbi_weights: str | os.PathLike | None = None) -> Baseline:
    """The baseline ``name``; ``gharbi2016`` is loaded from ``gharbi_weights`` (a folder of the released
    ``<layer>_0.npy``/``<layer>_1.npy`` files)."""
    if name == "gharbi2016":
        if gharbi_weights is None:
            raise RawrclError(
                "baseline 'gharbi2016' needs its released weights: --gharbi-weights DIR (not shipped with "
                "rawrcl; see rawrcl/eval/gharbi2016.py)"
            )
        return gharbi_baseline(gharbi_weights)
    if name not in BASELINES:
        raise RawrclError(f"unknown baseline {name!r}; known: {', '.join(BASELINE_NAMES)}")
    return BASELINES[name]


def baseline_applies(name: str, task: Task, gharbi_weights: str | os.PathLike | None = None) -> bool:
    """Whether classical baseline ``name`` is meaningful for ``task`` (``gharbi2016``: only when its weights
    are given)."""
    if name == "gharbi2016":
        return task.name == "jdd" and gharbi_weights is not None
    if task.raw_input and task.head == "raw":
        return name == "noisy" or (name in ("gat+bm3d", "nlm") and task.noisy)
    if name == "gat+bm3d":
        return False
    if name in TWO_STEP:
        return task.raw_input and task.noisy
    if task.raw_input:
        if name == "nlm":
            return False
        if name in LIBRAW_NAMES:
            return True
        if name == "menon+nlm" and not task.noisy:
            return False
        return name != "bicubic" or task.scale == 4
    if name == "nlm":
        return task.noisy
    return name in ("noisy", "bicubic") and (name == "noisy" or task.scale > 1)
