"""Consistency terms: perceptual (paper Eq. 5) and JDD mosaic consistency (Appendix B.2, Eq. 8).

- :class:`PerceptualConsistency` — ‖φ(g_e(x)) − φ(g_e(f(x)))‖² with a frozen encoder g_e. Encoders:
  any module returning a list of feature maps — the self-supervised :class:`rawrcl.models.encoder.Encoder`
  (``rawrcl pretrain --method simclr``, via ``Encoder.features``) or :func:`resnet50_imagenet`
  (torchvision, optional; weights only from a given file or the local torch cache, never downloaded).
- :class:`MosaicConsistency` — ‖x − mosaic(T(f(x)))‖₁ on the packed RAW mosaic (RGGB geometry), with
  T ∈ {``"identity"``, ``"upsample2"``, ``"translate"``}; T is Keys cubic convolution (a = −½).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from rawrcl.cfa import mosaic_packed
from rawrcl.errors import RawrclError

__all__ = [
    "PerceptualConsistency",
    "resnet50_imagenet",
    "MosaicConsistency",
    "MOSAIC_TRANSFORMS",
    "keys_kernel",
    "keys_shift",
    "keys_upsample2",
]


# ----------------------------------------------------------------------------------------------------
# Perceptual consistency
# ----------------------------------------------------------------------------------------------------


def _select(features, layers: Sequence | None) -> list[torch.Tensor]:
    if isinstance(features, torch.Tensor):
        features = [features]
    if isinstance(features, dict):
        keys = list(features) if layers is None else list(layers)
        missing = [k for k in keys if k not in features]
        if missing:
            raise RawrclError(f"encoder has no feature layer(s) {missing}; available: {list(features)}")
        return [features[k] for k in keys]
    feats = list(features)
    if layers is None:
        return feats
    try:
        return [feats[int(i)] for i in layers]
    except (IndexError, ValueError, TypeError) as e:
        raise RawrclError(f"invalid encoder layers {list(layers)} for {len(feats)} feature maps") from e


class PerceptualConsistency(nn.Module):
    """Perceptual consistency ‖φ(g_e(x)) − φ(g_e(f(x)))‖² (Eq. 5) with a frozen encoder.

    Parameters
    ----------
    encoder : nn.Module mapping (B, C, H, W) → a feature map, a list of feature maps or a dict
        name → feature map. It is frozen here (``requires_grad_(False)``, ``eval()``); gradients still
        flow through it to f(x).
    layers : indices (list output) or names (dict output) of the maps to use; None = all.
    weights : optional per-layer weights (default 1).

    Call
    ----
    ``loss(x, fx) -> scalar``: x, fx (B, C, H, W) in the encoder's input domain/units (the same
    domain: noisy input and model output). Returns Σ_l w_l · mean((φ_l(x) − φ_l(fx))²) — the squared
    L2 norm averaged over elements so it does not scale with the crop size.
    """

    def __init__(
        self, encoder: nn.Module, layers: Sequence | None = None, weights: Sequence[float] | None = None
    ):
        super().__init__()
        self.encoder = encoder.eval().requires_grad_(False)
        self.layers = None if layers is None else list(layers)
        self.weights = None if weights is None else [float(w) for w in weights]

    def train(self, mode: bool = True):  # the encoder stays in eval mode (frozen BN statistics)
        super().train(mode)
        self.encoder.eval()
        return self

    def forward(self, x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        if x.shape != fx.shape:
            raise RawrclError(
                f"perceptual consistency needs x and f(x) of equal shape, got {tuple(x.shape)}, "
                f"{tuple(fx.shape)}"
            )
        with torch.no_grad():
            fa = _select(self.encoder(x), self.layers)
        fb = _select(self.encoder(fx), self.layers)
        w = self.weights or [1.0] * len(fa)
        if len(w) != len(fa):
            raise RawrclError(f"{len(w)} layer weights for {len(fa)} feature maps")
        return sum(wi * F.mse_loss(b, a) for wi, a, b in zip(w, fa, fb, strict=True))


class _ResNetFeatures(nn.Module):
    def __init__(self, net: nn.Module, layers: Sequence[str]) -> None:
        super().__init__()
        self.net = net
        self.layers = list(layers)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        n = self.net
        x = (x - self.mean) / self.std
        x = n.maxpool(n.relu(n.bn1(n.conv1(x))))
        out = {}
        for name in ("layer1", "layer2", "layer3", "layer4"):
            x = getattr(n, name)(x)
            if name in self.layers:
                out[name] = x
            if len(out) == len(self.layers):
                break
        return out


def resnet50_imagenet(
    weights_path: str | os.PathLike | None = None, layers: Sequence[str] = ("layer1", "layer2", "layer3")
) -> nn.Module:
    """The paper's g_e: torchvision ResNet-50 with ImageNet weights, returning a dict of feature maps.

    Input (B, 3, H, W) RGB in [0, 1] (ImageNet mean/std normalisation is applied inside).
    Weights come from ``weights_path`` or, if None, from the user's torch cache
    (``torch.hub.get_dir()/checkpoints/resnet50-*.pth``); nothing is ever downloaded.
    Raises :class:`RawrclError` when torchvision or the weights are unavailable.
    """
    try:
        import torchvision  # noqa: F401
        from torchvision.models import resnet50
    except ImportError as e:
        raise RawrclError(
            "ResNet-50 encoder needs torchvision (pip install 'rawrcl[imagenet]'); "
            "or train an encoder with `rawrcl pretrain --method simclr`"
        ) from e
    bad = [name for name in layers if name not in ("layer1", "layer2", "layer3", "layer4")]
    if bad or not layers:
        raise RawrclError(f"resnet50 layers must be among layer1..layer4, got {list(layers)}")
    if weights_path is None:
        cache = Path(torch.hub.get_dir()) / "checkpoints"
        found = sorted(cache.glob("resnet50-*.pth")) if cache.is_dir() else []
        if not found:
            raise RawrclError(
                f"no ResNet-50 ImageNet weights in {cache}; "
                "pass weights_path=FILE (a torchvision resnet50 state dict)"
            )
        weights_path = found[0]
    path = Path(weights_path)
    if not path.is_file():
        raise RawrclError(f"{path}: ResNet-50 weights file not found")
    net = resnet50(weights=None)
    try:
        net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as e:  # noqa: BLE001
        raise RawrclError(f"{path}: not a torchvision ResNet-50 state dict ({type(e).__name__})") from e
    return _ResNetFeatures(net, layers).eval().requires_grad_(False)


# ----------------------------------------------------------------------------------------------------
# Keys cubic convolution
# ----------------------------------------------------------------------------------------------------


def keys_kernel(s: torch.Tensor, a: float = -0.5) -> torch.Tensor:
    """Keys (1981) cubic convolution kernel W(s), a = −½ (third-order accurate)."""
    t = s.abs()
    t2, t3 = t * t, t * t * t
    near = (a + 2) * t3 - (a + 3) * t2 + 1
    far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
    return torch.where(t <= 1, near, torch.where(t < 2, far, torch.zeros_like(t)))


def _interp_axis(x: torch.Tensor, dim: int, base: torch.Tensor, frac: torch.Tensor) -> torch.Tensor:
    """out[..., q, ...] = Σ_{m=-1..2} W(frac[q] − m) · x[..., base[q] + m, ...] (replicate border)."""
    n = x.shape[dim]
    out = 0
    for m in (-1, 0, 1, 2):
        w = keys_kernel(frac - m).to(x.dtype)
        idx = (base + m).clamp(0, n - 1)
        shape = [1] * x.ndim
        shape[dim] = -1
        out = out + x.index_select(dim, idx) * w.view(shape)
    return out


def keys_shift(x: torch.Tensor, dy: float, dx: float) -> torch.Tensor:
    """Translate (…, H, W) by (dy, dx) pixels with Keys cubic convolution: out(q) = x(q − δ).

    Integer shifts are exact copies; the border is replicated (callers crop ``ceil(|δ|) + 2`` pixels).
    """
    for dim, d in ((x.ndim - 2, float(dy)), (x.ndim - 1, float(dx))):
        if d == 0:
            continue
        n = x.shape[dim]
        pos = torch.arange(n, device=x.device, dtype=torch.float64) - d
        base = torch.floor(pos)
        frac = (pos - base).to(x.dtype)
        x = _interp_axis(x, dim, base.long(), frac)
    return x


def keys_upsample2(x: torch.Tensor) -> torch.Tensor:
    """×2 Keys bicubic upsampling (…, h, w) → (…, 2h, 2w), pixel-centre aligned.

    Output pixel q samples the input at q/2 − 1/4 (align_corners=False geometry), border replicated.
    """
    for dim in (x.ndim - 2, x.ndim - 1):
        n = x.shape[dim]
        pos = torch.arange(2 * n, device=x.device, dtype=torch.float64) / 2 - 0.25
        base = torch.floor(pos)
        x = _interp_axis(x, dim, base.long(), (pos - base).to(x.dtype))
    return x


# ----------------------------------------------------------------------------------------------------
# Mosaic consistency (JDD)
# ----------------------------------------------------------------------------------------------------

MOSAIC_TRANSFORMS = ("identity", "upsample2", "translate")


class MosaicConsistency(nn.Module):
    """JDD consistency ‖x − mosaic(T(f(x)))‖₁ (Eq. 8) on the packed mosaic in RGGB geometry.

    Parameters
    ----------
    transform : T.
        - ``"identity"``: mosaic(f(x)) is compared with x. Only the colour sampled at each pixel is ever
          constrained — the two others are free (garbage RGB at 0 labels).
        - ``"upsample2"``: the model outputs RGB at packed resolution (B, 3, h, w); T is ×2 Keys
          bicubic upsampling to (B, 3, 2h, 2w).
        - ``"translate"`` (default): T shifts f(x) by a random δ = (dy, dx), integer part uniform in
          {−max_shift, …, max_shift} plus (``subpixel=True``) a uniform fraction in [0, 1) (so δ lies in
          [−max_shift, max_shift + 1) per axis), with Keys cubic interpolation; the colour c(q) of
          T(f(x)) at CFA site q is f(x)(q − δ)[c(q)], so every colour of every output pixel answers,
          over draws of δ, for neighbouring CFA samples of that colour with independent noise (the
          single-image analogue of Mosaic2Mosaic's burst warp).
          One δ per call (per batch); borders of ceil(|δ|) + 2 pixels (rounded up to even) are cropped.
          Default chosen from the 0-label JDD study in docs/losses.md: identity ≈ 11 dB RGB PSNR,
          upsample2 25–29 dB, translate (max_shift=1, sub-pixel) 24–27 dB, supervised 28–29 dB.
    max_shift : integer range of the translation (pixels at full resolution); default 1.
    subpixel : add a sub-pixel fraction to the translation.
    generator : torch.Generator (CPU) for δ; None uses a private generator seeded with ``seed``.
    reduction : ``"mean"`` (mean absolute error per packed sample) | ``"sum"``.

    Call
    ----
    ``loss(x_packed, rgb) -> scalar``: x_packed (B, 4, h, w) noisy mosaic [R, G1, G2, B] in RGGB
    geometry, [0, 1] units; rgb the model output, (B, 3, 2h, 2w) (or (B, 3, h, w) for ``"upsample2"``),
    same units. ``last_shift`` holds the δ used.
    """

    def __init__(
        self,
        transform: str = "translate",
        *,
        max_shift: int = 1,
        subpixel: bool = True,
        generator: torch.Generator | None = None,
        seed: int = 0,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if transform not in MOSAIC_TRANSFORMS:
            raise RawrclError(
                f"unknown mosaic transform {transform!r}; expected one of {', '.join(MOSAIC_TRANSFORMS)}"
            )
        if reduction not in ("mean", "sum"):
            raise RawrclError(f"unknown reduction {reduction!r}; expected 'mean' or 'sum'")
        if int(max_shift) < 0:
            raise RawrclError(f"max_shift must be ≥ 0, got {max_shift}")
        self.transform = transform
        self.max_shift = int(max_shift)
        self.subpixel = bool(subpixel)
        self.generator = generator if generator is not None else torch.Generator().manual_seed(int(seed))
        self.reduction = reduction
        self.last_shift: tuple[float, float] = (0.0, 0.0)

    def _draw_shift(self) -> tuple[float, float]:
        k = self.max_shift
        ints = torch.randint(-k, k + 1, (2,), generator=self.generator)
        fr = torch.rand(2, generator=self.generator) if self.subpixel else torch.zeros(2)
        return float(ints[0] + fr[0]), float(ints[1] + fr[1])

    def forward(self, x_packed: torch.Tensor, rgb: torch.Tensor) -> torch.Tensor:
        if x_packed.ndim != 4 or x_packed.shape[1] != 4:
            raise RawrclError(
                f"mosaic consistency expects packed input (B, 4, h, w), got {tuple(x_packed.shape)}"
            )
        b, _, h, w = x_packed.shape
        if self.transform == "upsample2":
            if tuple(rgb.shape) != (b, 3, h, w):
                raise RawrclError(
                    f"transform 'upsample2' expects RGB at packed resolution {(b, 3, h, w)}, "
                    f"got {tuple(rgb.shape)}"
                )
            full = keys_upsample2(rgb)
        else:
            if tuple(rgb.shape) != (b, 3, 2 * h, 2 * w):
                raise RawrclError(
                    f"transform {self.transform!r} expects full-resolution RGB {(b, 3, 2 * h, 2 * w)}, "
                    f"got {tuple(rgb.shape)}"
                )
            full = rgb
        target = x_packed
        if self.transform == "translate":
            dy, dx = self._draw_shift()
            self.last_shift = (dy, dx)
            full = keys_shift(full, dy, dx)
            m = math.ceil(max(abs(dy), abs(dx))) + 2
            m += m % 2
            p = m // 2
            if h <= 2 * p or w <= 2 * p:
                raise RawrclError(
                    f"crop {2 * h}×{2 * w} too small for translations of up to {self.max_shift}+1 px"
                )
            full = full[..., m : 2 * h - m, m : 2 * w - m]
            target = x_packed[..., p : h - p, p : w - p]
        err = (target - mosaic_packed(full, "RGGB")).abs()
        return err.mean() if self.reduction == "mean" else err.sum()
