"""Downstream tasks: (input, target) pairs synthesised from a clean RGB photo (paper Sec. 4–5, App. D).

Every task has the same interface (:class:`Task`)::

    inp, target = TASKS["jdd"].degrade(clean, rng)          # clean: (3, H, W) float32 in [0, 1]

Conventions
-----------
- ``clean`` is an RGB photo, (3, H, W), float32 in [0, 1] (numpy or torch). It is first cropped at the
  bottom/right to a multiple of the task's ``multiple`` (2 or 4) so that every output grid lines up.
- ``input`` and ``target`` are float32 torch tensors on the CPU (no batch dimension):

  =========== ============ ==================== ===================== ===== ============= ======= ===========
  task        in_channels  input                target                head  target_domain pretext weights
  =========== ============ ==================== ===================== ===== ============= ======= ===========
  denoise     3            noisy (3, H, W)      (3, H, W)             rgb   srgb          rgb     (none ships)
  sr          3            bicubic↓2 (3,H/2,W/2) (3, H, W)            sr2   srgb          rgb
  jdensr      3            noisy bicubic↓2      (3, H, W)             sr2   srgb          rgb
  raw-denoise 4            noisy packed         packed (4, H/2, W/2)  raw   raw           raw     raw_denoise
  jdd         4            noisy packed         (3, H, W)             jdd   linear        jdd     jdd
  jdemsr      4            packed of ↓2 (H/4)   (3, H, W)             sr4   linear        —
  jddsr       4            noisy packed of ↓2   (3, H, W)             sr4   linear        —
  =========== ============ ==================== ===================== ===== ============= ======= ===========

  ``pretext``: the head a self-supervised pre-training run for the task trains (``rawrcl pretrain
  --task``; — = not a pre-training task); ``weights``: the checkpoint shipped in ``rawrcl/weights``
  (``<name>_default.pt``) that ``rawrcl jdd`` / ``denoise`` use without ``--model``. The data domain is
  "raw" (RAW files / simulated mosaics) for packed-input tasks and "rgb" (photos) otherwise;
  :data:`DOMAIN_PRETEXT` names the pre-training task whose run serves a whole domain in ``rawrcl bench``.

  Packed RAW is (4, h, w) channels [R, G1, G2, B] in RGGB geometry (``rawrcl.cfa.mosaic_packed``).
- Noise: heteroscedastic Gaussian, variance = λshot·x + λread, [0, 1] units (``rawrcl.noise``). For RGB
  tasks it is added to the photo values (paper Sec. 4); for RAW tasks to the mosaic. The default noise
  of every noisy task is the paper's App. C.1 sampler (σ ∈ [0, 20] 8-bit), one draw per image; pass
  ``noise=`` (the ``--noise`` grammar of :mod:`rawrcl.noise.spec`, ``(λshot, λread)``, a
  :class:`~rawrcl.noise.NoiseModel` or a sampler ``rng -> NoiseModel``) to override.
- RAW tasks without ``unprocess`` treat the photo values as linear camera RGB (the convention of
  Gharbi 2016 / the paper's App. C.2). With ``unprocess=True`` the photo is first inverted to linear
  camera RGB by ``rawrcl.isp.unprocess`` and the target is that linear image; ``meta`` then carries
  the camera parameters needed to re-render it (``rawrcl.eval.to_srgb``).
- Randomness only through the ``numpy.random.Generator`` passed in (noise draws use a
  ``torch.Generator`` seeded from it), so a fixed seed gives identical test sets for every method.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rawrcl import isp
from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError
from rawrcl.noise import NoiseLike, NoiseModel, noise_sampler


def _to_tensor(clean: Any) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(clean) if not isinstance(clean, torch.Tensor) else clean)
    if t.ndim != 3 or t.shape[0] != 3:
        raise RawrclError(f"clean image must be (3, H, W) RGB, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise RawrclError("clean image must be float in [0, 1] (convert uint8 with /255)")
    return t.float()


def downscale(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Bicubic (antialiased) downscaling by an integer factor, (C, H, W) → (C, H/f, W/f), clipped [0, 1]."""
    y = F.interpolate(x[None], scale_factor=1.0 / factor, mode="bicubic", antialias=True, align_corners=False)
    return y[0].clamp(0, 1)


def _torch_gen(rng: np.random.Generator) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(rng.integers(0, 2**62)))
    return g


@dataclass(frozen=True)
class Task:
    """A downstream task (see the module docstring for the table of shapes).

    Attributes
    ----------
    name : registry name.
    in_channels : 3 (RGB input) or 4 (packed RAW input).
    head : model head name for ``rawrcl.models.build_model`` (``rgb``, ``raw``, ``jdd``, ``sr2``, ``sr4``).
    target_domain : ``"srgb"`` (photo values), ``"linear"`` (linear camera RGB; equal to the photo values
        unless ``unprocess``), or ``"raw"`` (packed linear RAW).
    noisy : whether noise is added to the input.
    down : bicubic down-scaling factor applied before mosaicking / as the SR degradation (1 = none).
    raw_input : input is a packed RGGB mosaic.
    noise : default noise (the grammar of :mod:`rawrcl.noise.spec`, a pair, a NoiseModel or a sampler;
        None = the paper sampler).
    unprocess : invert the photo to linear camera RGB first (RAW tasks only; needs ``rawrcl.isp``).
    unprocess_mix : with ``unprocess``, the probability that a sample is unprocessed (the others keep the
        photo values as linear RGB). 1 = always (evaluation); < 1 trains a model for both domains.
    pretext_head : head trained by self-supervised pre-training for this task (None: not a pre-training
        task).
    default_weights : file name in ``rawrcl/weights`` of the shipped checkpoint for this task, or None.
    exposure : optional (lo, hi): RAW tasks multiply the linear image by a gain drawn log-uniformly in
        [lo, hi] (under-exposed and low-light captures, where real files keep most pixels), with
        probability ``exposure_mix`` per sample; None = photo brightness as is.
    cast : optional max factor c > 1: RAW tasks multiply the red and the blue channel of the linear image
        (relative to green) each by a factor drawn log-uniformly in [1/c, c] — or by the fixed pair
        (red, blue) — and then all three by 1 / the largest of (red, 1, blue) (the exposure follows the
        brightest channel, so the cast clips nothing new), with probability ``cast_mix`` per sample: the
        illuminant's colour cast on the sensor (tungsten, sodium and LED light, shade), far wider in real
        files than the daylight white balance of ``rawrcl.isp.random_camera``; None = no cast.
    """

    name: str
    in_channels: int
    head: str
    target_domain: str
    noisy: bool
    down: int = 1
    raw_input: bool = False
    noise: NoiseLike = None
    unprocess: bool = False
    unprocess_mix: float = 1.0
    exposure: tuple[float, float] | None = None
    exposure_mix: float = 1.0
    cast: float | tuple[float, float] | None = None
    cast_mix: float = 1.0
    pretext_head: str | None = None
    default_weights: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        c = self.cast
        ok = c is None or (c > 1 if not isinstance(c, tuple) else len(c) == 2 and min(c) > 0)
        if not ok:
            raise RawrclError(
                f"task {self.name!r}: cast must be a max factor > 1 or a (red, blue) pair > 0, got {c}"
            )

    @property
    def domain(self) -> str:
        """ "raw" (packed RAW input: RAW files or simulated mosaics) or "rgb" (photos)."""
        return "raw" if self.raw_input else "rgb"

    @property
    def multiple(self) -> int:
        """Clean images are cropped to a multiple of this (so packed and down-scaled grids line up)."""
        return 2 * self.down if self.raw_input else self.down

    @property
    def scale(self) -> int:
        """Output size / input size along each axis (1 denoise, 2 jdd/sr, 4 jdemsr/jddsr)."""
        return {"rgb": 1, "raw": 1, "jdd": 2, "sr2": 2, "sr4": 4}[self.head]

    def with_options(self, *, noise: NoiseLike = None, unprocess: bool | None = None) -> Task:
        """A copy with another default noise and/or unprocess setting."""
        t = self
        if noise is not None:
            t = replace(t, noise=noise)
        if unprocess is not None:
            if unprocess and not self.raw_input:
                raise RawrclError(f"task {self.name!r}: unprocess applies to RAW tasks only")
            t = replace(t, unprocess=bool(unprocess))
        return t

    def crop_clean(self, clean: Any) -> torch.Tensor:
        """(3, H, W) → (3, H', W') cropped bottom/right to a multiple of :attr:`multiple`."""
        x = _to_tensor(clean)
        m = self.multiple
        h, w = (x.shape[1] // m) * m, (x.shape[2] // m) * m
        if h < 2 * m or w < 2 * m:
            raise RawrclError(f"image of size {x.shape[1]}×{x.shape[2]} too small for task {self.name!r}")
        return x[:, :h, :w]

    def sample(self, clean: Any, rng: np.random.Generator, noise: NoiseLike = None) -> dict:
        """Synthesise one example.

        Returns
        -------
        dict with ``input`` and ``target`` (float32 tensors, shapes as in the module table) and ``meta``:
        ``noise`` (the :class:`NoiseModel` drawn, or None), ``clean_srgb`` (the cropped photo (3, H, W)),
        and, with unprocess, ``isp`` (the camera parameters returned by ``rawrcl.isp.unprocess``).
        """
        x = self.crop_clean(clean)
        meta: dict[str, Any] = {"clean_srgb": x, "noise": None, "isp": None}
        # the extra draw happens only for a mix, so test sets (mix = 1) stay identical across versions
        if self.unprocess and (self.unprocess_mix >= 1 or rng.random() < self.unprocess_mix):
            lin, isp_meta = isp.unprocess(x.numpy(), rng)
            x = torch.as_tensor(np.asarray(lin), dtype=torch.float32)
            meta["isp"] = isp_meta
        if self.exposure is not None and self.raw_input and rng.random() < self.exposure_mix:
            lo, hi = self.exposure
            gain = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            x = x * gain
            meta["exposure"] = gain
        if self.cast is not None and self.raw_input and (self.cast_mix >= 1 or rng.random() < self.cast_mix):
            if isinstance(self.cast, tuple):
                rb = np.asarray(self.cast, dtype=np.float64)
            else:
                rb = np.exp(rng.uniform(-np.log(self.cast), np.log(self.cast), size=2))
            gains = torch.tensor([rb[0], 1.0, rb[1]], dtype=x.dtype) / float(max(rb.max(), 1.0))
            x = (x * gains.view(3, 1, 1)).clamp_(0.0, 1.0)
            meta["cast"] = (float(rb[0]), float(rb[1]))
        target = x
        src = downscale(x, self.down) if self.down > 1 else x
        inp = mosaic_packed(src, "RGGB") if self.raw_input else src
        if self.head == "raw":
            target = inp.clone()
        if self.noisy:
            draw = noise_sampler(noise if noise is not None else self.noise)
            model = draw(rng) if draw is not None else NoiseModel(0.0, 0.0)
            meta["noise"] = model
            inp = model.sample(inp, generator=_torch_gen(rng))
        return {"input": inp.contiguous().float(), "target": target.contiguous().float(), "meta": meta}

    def degrade(self, clean: Any, rng: np.random.Generator, noise: NoiseLike = None) -> tuple:
        """``(input, target)`` for a clean photo (3, H, W) in [0, 1]; see :meth:`sample`."""
        s = self.sample(clean, rng, noise)
        return s["input"], s["target"]


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "denoise",
            3,
            "rgb",
            "srgb",
            noisy=True,
            pretext_head="rgb",
            default_weights="rgb_denoise_default.pt",
            description="RGB denoising",
        ),
        Task(
            "sr",
            3,
            "sr2",
            "srgb",
            noisy=False,
            down=2,
            pretext_head="rgb",
            description="×2 super-resolution (bicubic)",
        ),
        Task(
            "jdensr",
            3,
            "sr2",
            "srgb",
            noisy=True,
            down=2,
            pretext_head="rgb",
            description="joint denoising + ×2 SR",
        ),
        Task(
            "raw-denoise",
            4,
            "raw",
            "raw",
            noisy=True,
            raw_input=True,
            pretext_head="raw",
            default_weights="raw_denoise_default.pt",
            description="packed RAW denoising",
        ),
        Task(
            "jdd",
            4,
            "jdd",
            "linear",
            noisy=True,
            raw_input=True,
            pretext_head="jdd",
            default_weights="jdd_default.pt",
            description="joint demosaic + denoise",
        ),
        Task(
            "jdemsr",
            4,
            "sr4",
            "linear",
            noisy=False,
            down=2,
            raw_input=True,
            description="joint demosaic + ×2 SR",
        ),
        Task(
            "jddsr",
            4,
            "sr4",
            "linear",
            noisy=True,
            down=2,
            raw_input=True,
            description="joint demosaic + denoise + ×2 SR",
        ),
    )
}


#: data domain → the pre-training task whose run serves every task of that domain in ``rawrcl bench``
DOMAIN_PRETEXT: dict[str, str] = {"raw": "jdd", "rgb": "denoise"}

#: the tasks ``rawrcl pretrain --task`` accepts (those with a pretext head)
PRETEXT_TASKS: tuple[str, ...] = tuple(n for n, t in TASKS.items() if t.pretext_head is not None)


def get_task(name: str | Task, *, noise: NoiseLike = None, unprocess: bool | None = None) -> Task:
    """Look a task up by name (``RawrclError`` for an unknown one) and apply option overrides."""
    if isinstance(name, Task):
        task = name
    else:
        if name not in TASKS:
            raise RawrclError(f"--task {name!r}: unknown task; expected one of {', '.join(TASKS)}")
        task = TASKS[name]
    return task.with_options(noise=noise, unprocess=unprocess)
