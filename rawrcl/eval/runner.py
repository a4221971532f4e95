"""Evaluation: metrics (paper App. C.3), classical baselines, and :func:`evaluate`.

Metrics
-------
- ``psnr`` / ``ssim``: scikit-image defaults (``peak_signal_noise_ratio``, ``structural_similarity`` with
  ``channel_axis``; 7×7 uniform window) on **8-bit sRGB** images (H, W, 3) uint8, ``data_range=255``,
  after cropping an 8-pixel border (at output resolution; 4 px for half-resolution RAW previews).
- How outputs become 8-bit sRGB (:func:`to_srgb`): RGB tasks are already in photo (sRGB) values. RAW
  tasks built from sRGB photos *without* unprocess treat the photo values as "linear" camera RGB, so the
  linear output is shown as is (same convention as Gharbi 2016 / the paper). *With* unprocess the output
  is re-rendered by ``rawrcl.isp.render_srgb`` with the same camera parameters (white balance, colour
  matrix, gain) that unprocessed the target. Then values are clipped to [0, 1] and quantised
  ``round(255·x)`` to uint8. ``raw-denoise`` outputs (packed) are previewed as half-resolution RGB
  (R, (G1+G2)/2, B) before rendering.
- ``psnr_linear``: RAW-input tasks also get PSNR on the float target-domain values (linear camera RGB, or
  packed RAW for raw-denoise), output clipped to [0, 1], data range 1, same border crop.

Baselines (``BASELINES``; each is ``f(input, task, meta) -> output`` in the task's target domain)
------------------------------------------------------------------------------------------------
- ``noisy``: identity for same-size tasks; bilinear demosaicing for RAW→RGB; bicubic for SR.
- ``bilinear``, ``malvar``, ``menon``: colour-demosaicing's ``demosaicing_CFA_Bayer_{bilinear,
  Malvar2004,Menon2007}`` on the RGGB mosaic (negative noisy values kept; output as float).
- ``vng`` (8-bit only in OpenCV) and ``ea`` (16-bit): OpenCV ``cvtColor``; an RGGB mosaic is
  ``COLOR_BayerBG2RGB_VNG``/``_EA`` in OpenCV's naming (verified by ``tests/test_eval.py``).
- ``menon+nlm``: Menon, then OpenCV ``fastNlMeansDenoisingColored`` on the 8-bit output with
  ``h = hColor = k · σ8`` (k = ``NLM_K[name]``), σ8 = 255·sqrt(λshot·mean(x) + λread) the noise std at the
  image's mean
  level from the *known* noise model of the sample (an oracle-noise-level baseline). ``NLM_K`` was tuned
  on 6 CBSD68 images at the ``high`` preset (see ``docs/benchmarks.md``).
  With ``--unprocess`` the NLM runs on the rendered 8-bit sRGB image instead (h from a blind MAD noise
  estimate there) and the result is mapped back to linear camera RGB (:func:`_nlm_after_demosaic`).
- ``nlm``: the same NLM on the noisy RGB input (RGB denoising tasks).
- ``bicubic``: bicubic ×2 (×4) upsampling (SR tasks; after Menon for RAW SR tasks).
- ``demosaicnet``: Gharbi et al. 2016 pretrained (optional ``demosaicnet`` package; its Bayer model
  expects GRBG, so the RGGB mosaic is shifted by one column with reflection and the output cropped back).
  Absent package → :class:`RawrclError`.

For SR RAW tasks (jdemsr, jddsr) demosaicing baselines are followed by bicubic ×2 upsampling.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rawrcl.cfa import packed_to_rgb, unpack
from rawrcl.errors import RawrclError
from rawrcl.io import list_photos, read_photo
from rawrcl.isp import render_srgb
from rawrcl.models.geometry import pad_to_multiple
from rawrcl.models.loading import load_for_task
from rawrcl.noise import NoiseLike, noise_label
from rawrcl.tasks import Task, get_task

BORDER = 8
#: NLM strength factors h = k · σ8 per baseline, tuned on CBSD68 images 0–5 (training split) at the
#: ``high`` preset (grid 0.3…1.4; see docs/benchmarks.md): Menon output 0.6, noisy RGB 0.5.
NLM_K: dict[str, float] = {"menon+nlm": 0.6, "nlm": 0.5}


# ----------------------------------------------------------------------------------------------- metrics
def to_uint8(x: Any) -> np.ndarray:
    """(3, H, W) float in [0, 1] (numpy or torch) → (H, W, 3) uint8, clipped and rounded (round(255·x))."""
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    a = np.clip(a.astype(np.float64), 0.0, 1.0)
    return np.round(a * 255.0).astype(np.uint8).transpose(1, 2, 0)


def _crop(a: np.ndarray, border: int, channel_last: bool) -> np.ndarray:
    if border <= 0:
        return a
    if channel_last:
        return a[border:-border, border:-border]
    return a[..., border:-border, border:-border]


def psnr(output: np.ndarray, target: np.ndarray, border: int = BORDER, data_range: float = 255) -> float:
    """PSNR in dB, scikit-image default, on (H, W, C) images (uint8 sRGB ⇒ data_range 255)."""
    from skimage.metrics import peak_signal_noise_ratio

    o, t = _crop(output, border, True), _crop(target, border, True)
    if o.shape != t.shape:
        raise RawrclError(f"psnr: shapes differ {o.shape} vs {t.shape}")
    if np.array_equal(o, t):
        return float("inf")
    return float(peak_signal_noise_ratio(t, o, data_range=data_range))


def ssim(output: np.ndarray, target: np.ndarray, border: int = BORDER, data_range: float = 255) -> float:
    """SSIM, scikit-image defaults (7×7 uniform window), ``channel_axis=2`` on (H, W, C) images."""
    from skimage.metrics import structural_similarity

    o, t = _crop(output, border, True), _crop(target, border, True)
    return float(structural_similarity(t, o, data_range=data_range, channel_axis=2))


def psnr_float(output: Any, target: Any, border: int = BORDER) -> float:
    """PSNR (dB) of float (C, H, W) arrays in [0, 1] (output clipped), data range 1, border-cropped."""
    o = output.detach().cpu().numpy() if isinstance(output, torch.Tensor) else np.asarray(output)
    t = target.detach().cpu().numpy() if isinstance(target, torch.Tensor) else np.asarray(target)
    o, t = (
        _crop(np.clip(o, 0, 1).astype(np.float64), border, False),
        _crop(t.astype(np.float64), border, False),
    )
    mse = float(np.mean((o - t) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(1.0 / mse)


def to_srgb(x: torch.Tensor, task: Task, meta: dict | None = None) -> torch.Tensor:
    """Render a task output/target (target domain) to sRGB (3, H', W') float (not yet clipped).

    See the module docstring: identity for photo-valued data, ``rawrcl.isp.render_srgb`` with the
    sample's camera parameters when the task was unprocessed, half-res preview for packed RAW.
    """
    x = torch.as_tensor(x).float()
    if task.target_domain == "raw":
        x = packed_to_rgb(x)
    if task.target_domain in ("linear", "raw") and task.unprocess:
        isp = (meta or {}).get("isp")
        if isp is None:
            raise RawrclError("unprocessed sample without camera parameters; cannot render to sRGB")
        out = render_srgb(x.clamp(0, 1).numpy(), isp["wb"], isp["ccm"], gain=float(isp["gain"]))
        return torch.as_tensor(np.asarray(out), dtype=torch.float32)
    return x


# --------------------------------------------------------------------------------------------- baselines
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
    cfa = _mosaic_np(inp)
    if name in ("bilinear", "malvar", "menon"):
        import colour_demosaicing as cd

        fn = {
            "bilinear": cd.demosaicing_CFA_Bayer_bilinear,
            "malvar": cd.demosaicing_CFA_Bayer_Malvar2004,
            "menon": cd.demosaicing_CFA_Bayer_Menon2007,
        }[name]
        return _hwc_to_chw(fn(cfa, "RGGB"))
    if name in ("vng", "ea"):
        import cv2

        if name == "vng":  # OpenCV's VNG accepts 8-bit only
            scale, dtype, code = 255.0, np.uint8, cv2.COLOR_BayerBG2RGB_VNG
        else:
            scale, dtype, code = 65535.0, np.uint16, cv2.COLOR_BayerBG2RGB_EA
        q = np.round(np.clip(cfa, 0, 1) * scale).astype(dtype)
        return _hwc_to_chw(cv2.cvtColor(q, code).astype(np.float64) / scale)
    if name == "demosaicnet":
        return _demosaicnet(cfa)
    raise RawrclError(f"unknown demosaicing baseline {name!r}")


def _demosaicnet(cfa: np.ndarray) -> torch.Tensor:
    try:
        import demosaicnet  # type: ignore[import-not-found]
    except ImportError:
        raise RawrclError(
            "baseline 'demosaicnet' needs the optional package: pip install demosaicnet"
        ) from None
    net = demosaicnet.BayerDemosaick(pretrained=True).eval()
    # demosaicnet's Bayer model expects GRBG: shift one column (reflect) so the RGGB mosaic reads GRBG.
    # NOTE: written against demosaicnet's published API; not exercised here (package not installed).
    shifted = np.pad(cfa, ((0, 0), (1, 1)), mode="reflect")
    h, w = shifted.shape
    # GRBG layout: G at (0,0),(1,1); R at (0,1); B at (1,0)
    mask = np.zeros((3, 2, 2), np.float32)
    mask[1, 0, 0] = mask[1, 1, 1] = 1
    mask[0, 0, 1] = 1
    mask[2, 1, 0] = 1
    full = np.tile(mask, (1, h // 2 + 1, w // 2 + 1))[:, :h, :w]
    mosaic3 = shifted[None].astype(np.float32) * full
    with torch.no_grad():
        out = net(torch.from_numpy(mosaic3)[None])[0]
    # the net crops a border; resize back conservatively by centre placement
    oh, ow = out.shape[-2:]
    dy, dx = (h - oh) // 2, (w - ow) // 2
    res = torch.from_numpy(np.zeros((3, h, w), np.float32))
    res[:, dy : dy + oh, dx : dx + ow] = out
    return res[:, :, 1 : 1 + cfa.shape[1]]


def noise_sigma8(meta: dict, x: torch.Tensor) -> float:
    """Noise std in 8-bit units at the mean level of ``x`` from the sample's noise model (0 if none)."""
    nm = meta.get("noise") if meta else None
    if nm is None:
        return 0.0
    mean = float(torch.as_tensor(x).clamp(0, 1).mean())
    ls = float(np.mean(np.asarray(nm.lambda_shot)))
    lr = float(np.mean(np.asarray(nm.lambda_read)))
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


def _nlm_after_demosaic(rgb: torch.Tensor, meta: dict) -> torch.Tensor:
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


def _baseline(name: str) -> Callable[[torch.Tensor, Task, dict], torch.Tensor]:
    def run(inp: torch.Tensor, task: Task, meta: dict) -> torch.Tensor:
        inp = torch.as_tensor(inp).float()
        if task.raw_input and task.head == "raw":
            if name == "noisy":
                return inp
            raise RawrclError(f"baseline {name!r} does not apply to task {task.name!r} (try noisy)")
        if task.raw_input:
            demosaicer = {"noisy": "bilinear", "menon+nlm": "menon", "bicubic": "menon"}.get(name, name)
            if demosaicer not in ("bilinear", "malvar", "menon", "vng", "ea", "demosaicnet"):
                raise RawrclError(f"baseline {name!r} does not apply to RAW task {task.name!r}")
            rgb = _demosaic(demosaicer, inp)
            if name == "menon+nlm":
                rgb = _nlm_after_demosaic(rgb, meta)
            return _upsample(rgb, task.scale // 2)
        # RGB-input tasks
        if name in ("noisy", "bicubic"):
            return _upsample(inp, task.scale)
        if name == "nlm":
            return _upsample(nlm_rgb(inp, noise_sigma8(meta, inp), NLM_K["nlm"]), task.scale)
        raise RawrclError(f"baseline {name!r} does not apply to RGB task {task.name!r}")

    run.__name__ = name
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
    "bicubic",
    "demosaicnet",
)
BASELINES: dict[str, Callable[[torch.Tensor, Task, dict], torch.Tensor]] = {
    n: _baseline(n) for n in BASELINE_NAMES
}


def baseline_applies(name: str, task: Task) -> bool:
    """Whether classical baseline ``name`` is meaningful for ``task``."""
    if task.raw_input and task.head == "raw":
        return name == "noisy"
    if task.raw_input:
        if name == "nlm":
            return False
        if name == "menon+nlm" and not task.noisy:
            return False
        if name == "demosaicnet":
            try:
                import demosaicnet  # type: ignore[import-not-found]  # noqa: F401
            except ImportError:
                return False
        return name != "bicubic" or task.scale == 4
    if name == "nlm":
        return task.noisy
    return name in ("noisy", "bicubic") and (name == "noisy" or task.scale > 1)


# ----------------------------------------------------------------------------------------- model runner
def model_predictor(
    model: torch.nn.Module,
    task: Task,
    device: str = "cpu",
    multiple: int = 1,
    self_ensemble: bool = False,
    noise_of: Callable[[torch.Tensor, dict], Any] | None = None,
):
    """Wrap a model as ``f(input (C, h, w), task, meta) -> output`` with reflection padding to
    ``multiple`` (in the input grid; packed RAW stays RGGB-phased) and output cropping (× task.scale).

    A noise-aware model gets the sample's noise parameters: ``noise_of(input, meta)`` (a
    :class:`~rawrcl.noise.NoiseModel` or (2, C) tensor), by default the true ones (``meta["noise"]``).
    ``self_ensemble`` averages over the 8 flips/transposes (:class:`rawrcl.models.SelfEnsemble`)."""
    from rawrcl.models import SelfEnsemble
    from rawrcl.models.conditioning import WithNoise, is_noise_aware

    model = model.to(device).eval()
    aware = is_noise_aware(model)
    noise_of = noise_of or (lambda inp, meta: meta.get("noise"))

    def run(inp: torch.Tensor, task_: Task, meta: dict) -> torch.Tensor:
        x0 = torch.as_tensor(inp).float()[None].to(device)
        h, w = x0.shape[-2:]
        x = pad_to_multiple(x0, multiple)
        net = model
        if aware:
            noise = noise_of(torch.as_tensor(inp), meta)
            if noise is None:
                raise RawrclError("a noise-aware model needs the noise parameters of the test data")
            net = WithNoise(model, noise, x.shape[1]).to(device)
        if self_ensemble:
            net = SelfEnsemble(net)
        with torch.no_grad():
            y = net(x)[0]
        s = y.shape[-1] // x.shape[-1]
        return y[:, : h * s, : w * s].float().cpu()

    return run


# ------------------------------------------------------------------------------------------------- data
def load_images(source: str | Path | Sequence, limit: int | None = None) -> list[tuple[str, np.ndarray]]:
    """Photos as ``[(name, (3, H, W) float32 [0, 1])]`` from a folder, a list of paths, or a list of
    arrays / (name, array) pairs (uint8 (H, W, 3) arrays are converted). Sorted by name for folders."""
    if isinstance(source, str | Path):
        files = list_photos(source)
        if limit is not None:
            files = files[:limit]
        return [(f.name, read_photo(f)) for f in files]
    out: list[tuple[str, np.ndarray]] = []
    for i, item in enumerate(source):
        if isinstance(item, str | Path):
            out.append((Path(item).name, read_photo(item)))
            continue
        name, arr = item if isinstance(item, tuple) else (f"image{i:03d}", item)
        a = np.asarray(arr)
        if a.dtype == np.uint8:
            a = a.astype(np.float32) / 255.0
        if a.ndim == 3 and a.shape[-1] == 3 and a.shape[0] != 3:
            a = a.transpose(2, 0, 1)
        out.append((str(name), np.ascontiguousarray(a, dtype=np.float32)))
    return out[:limit] if limit is not None else out


# --------------------------------------------------------------------------------------------- evaluate
def evaluate(
    model_or_baseline: str | Path | torch.nn.Module,
    task: str | Task,
    clean: str | Path | Sequence,
    noise: NoiseLike = None,
    seed: int = 0,
    *,
    limit: int | None = None,
    border: int = BORDER,
    unprocess: bool | None = None,
    device: str = "cpu",
    keep_samples: int = 0,
    self_ensemble: bool = False,
    noise_of: Callable[[torch.Tensor, dict], Any] | None = None,
) -> dict:
    """Evaluate a checkpoint / model / classical baseline on a task.

    Parameters
    ----------
    model_or_baseline : a baseline name (see ``BASELINES``), a checkpoint path or run dir, or an
        ``nn.Module`` taking the task's input (B, C, h, w) and returning its target shape.
    task : task name or :class:`~rawrcl.tasks.Task`.
    clean : folder of clean photos, or a list of arrays/paths (see :func:`load_images`).
    noise : noise specification (default: the task's, i.e. the paper sampler); ``"high"`` etc.
    seed : test-set seed. Image ``i`` (sorted order) is degraded with ``default_rng([seed, i])``, so every
        method sees the same noisy inputs.
    keep_samples : keep (input preview, output, target) sRGB arrays of the first k images under
        ``"samples"`` (not JSON-serialisable; for figures).
    self_ensemble : run a model as :class:`rawrcl.models.SelfEnsemble` (8 flips/transposes averaged;
        8× the time). Not for baselines.
    noise_of : for noise-aware models, ``f(noisy input, meta) -> NoiseModel`` giving the noise parameters
        the model is told (default: the true ones the sample was made with).

    Returns
    -------
    dict with ``psnr``, ``ssim`` (means over images, 8-bit sRGB, border crop), ``psnr_linear`` (RAW-input
    tasks), ``n_images``, ``task``, ``model``, ``noise``, ``seed``, ``border``, ``seconds``, ``per_image``.
    """
    t = get_task(task, unprocess=unprocess)
    images = load_images(clean, limit)
    if not images:
        raise RawrclError("no test images")
    if isinstance(model_or_baseline, str) and model_or_baseline in BASELINES:
        if self_ensemble:
            raise RawrclError("the self-ensemble (--tta) applies to models, not to classical baselines")
        if not baseline_applies(model_or_baseline, t):
            raise RawrclError(f"baseline {model_or_baseline!r} does not apply to task {t.name!r}")
        runner, label = BASELINES[model_or_baseline], model_or_baseline
    else:
        if isinstance(model_or_baseline, torch.nn.Module):
            model, label = model_or_baseline, type(model_or_baseline).__name__
        else:
            if not Path(model_or_baseline).exists():
                raise RawrclError(
                    f"{model_or_baseline}: no such checkpoint (or baseline name; known: "
                    f"{', '.join(BASELINE_NAMES)})"
                )
            model, _ = load_for_task(model_or_baseline, t, device)
            label = str(model_or_baseline)
        if self_ensemble:
            label = f"{label} (self-ensemble)"
        runner = model_predictor(model, t, device, self_ensemble=self_ensemble, noise_of=noise_of)
    per_image, samples = [], []
    t0 = time.perf_counter()
    for i, (name, img) in enumerate(images):
        rng = np.random.default_rng([int(seed), i])
        s = t.sample(img, rng, noise)
        out = runner(s["input"], t, s["meta"])
        if tuple(out.shape) != tuple(s["target"].shape):
            raise RawrclError(
                f"{label}: output shape {tuple(out.shape)} ≠ target {tuple(s['target'].shape)} on {name}"
            )
        b = border // 2 if t.target_domain == "raw" else border
        o8, t8 = to_uint8(to_srgb(out, t, s["meta"])), to_uint8(to_srgb(s["target"], t, s["meta"]))
        rec = {"name": name, "psnr": psnr(o8, t8, b), "ssim": ssim(o8, t8, b)}
        if t.raw_input:
            rec["psnr_linear"] = psnr_float(out, s["target"], b)
        per_image.append(rec)
        if i < keep_samples:
            samples.append(
                {"name": name, "output": o8, "target": t8, "input": _input_preview(s["input"], t, s)}
            )
    res: dict[str, Any] = {
        "task": t.name,
        "model": label,
        "noise": noise_label(noise if noise is not None else t.noise) if t.noisy else "none",
        "seed": int(seed),
        "n_images": len(per_image),
        "border": border,
        "psnr": float(np.mean([r["psnr"] for r in per_image])),
        "ssim": float(np.mean([r["ssim"] for r in per_image])),
    }
    if t.raw_input:
        res["psnr_linear"] = float(np.mean([r["psnr_linear"] for r in per_image]))
    res["seconds"] = round(time.perf_counter() - t0, 3)
    res["per_image"] = per_image
    if keep_samples:
        res["samples"] = samples
    return res


def _input_preview(inp: torch.Tensor, task: Task, s: dict) -> np.ndarray:
    """8-bit preview of a task input at target resolution (packed → half-res RGB, nearest upsampling)."""
    x = packed_to_rgb(inp) if task.raw_input else inp
    f = s["target"].shape[-1] // x.shape[-1] if task.target_domain != "raw" else 1
    if f > 1:
        x = x.repeat_interleave(f, dim=-2).repeat_interleave(f, dim=-1)
    return to_uint8(x)
