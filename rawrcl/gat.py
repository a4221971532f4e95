"""Classical RAW-domain denoising on packed mosaics: the generalised Anscombe transform, GAT + BM3D (the
Poisson–Gaussian gold standard) and NLM — the RAW baselines of ``rawrcl eval``/``bench`` and the classical
half of ``rawrcl denoise --fuse-bm3d`` (:mod:`rawrcl.infer.fusion`; in row bands of bounded memory,
:func:`banded_gat_bm3d`) and of the fusion weight ``rawrcl adapt --method burst`` chooses
(:mod:`rawrcl.train.burst_signal`).

Both work on a packed mosaic (4, h, w) or (B, 4, h, w) [R, G1, G2, B] in [0, 1] units with noise variance
``λshot·x + λread`` (scalars or one value per plane), and return the same shape, float32.

Generalised Anscombe transform (GAT; Mäkitalo & Foi 2013, "Optimal inversion of the generalized Anscombe
transformation for Poisson–Gaussian noise")::

    z = x/α + Gaussian, α = λshot (gain), σ² = λread/λshot²  (in "counts")
    f(y) = 2·sqrt(y/α + 3/8 + σ²)            (argument clamped at 0 for very negative y)

makes the noise ≈ N(0, 1); the denoised D is mapped back with the closed-form approximation of the *exact
unbiased* inverse (their Eq. 13 / ``GenAnscombe_inverse_closed_form``)::

    I(D) = D²/4 + ¼·√(3/2)·D⁻¹ − 11/8·D⁻² + 5/8·√(3/2)·D⁻³ − 1/8 − σ²,   x̂ = α·max(I(max(D, D*)), 0)

with D* = 0.838 the minimum of I (I(D*) = −0.241 − σ² < 0): below it the closed form rises again through
its D⁻³ term, while the exact inverse is non-decreasing and already 0 there.

With λshot → 0 the model is pure Gaussian and the transform is y/√λread (exact inverse, no bias).

Negative values (an unclipped read of a dark pixel) are fine: the forward transform clamps the square-root
argument at 0 (they all map to the same, lowest value), which is the standard GAT. Black-clipped data
(a file whose values below black were set to 0, e.g. the HDR+ burst with ≈ 16 % zeros) violates the
Poisson–Gaussian model near 0: the mean of a clipped observation is E[max(y, 0)] > x. ``black_clipped``
(default: detected — no negative value and ≥ 0.5 % exact zeros) then maps the denoised estimate of that
clipped mean back to the underlying signal by inverting m(x) = E[max(x + s(x)·ε, 0)] with s² = λshot·x +
λread (Foi 2009, "Clipped noisy images"), :func:`declip_black`.

BM3D configuration (``joint``; measured in ``docs/real_noise.md``): the ``bm3d`` package's ``np``
profile either per plane (``joint=False``) or on the four planes at once after an orthonormal colour
transform [(R+G1+G2+B)/2, (R−B)/√2, (G1−G2)/√2, (R+B−G1−G2)/2] (unit noise stays unit and white;
block matching on the first, luminance-like channel; ``joint=True``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from rawrcl.calibration.special import ndtr
from rawrcl.errors import RawrclError

PerPlane = float | Sequence[float] | np.ndarray

#: λshot below this (relative to √λread, i.e. fewer than ~1e-6 "counts" of read noise) is treated as 0:
#: the GAT degenerates and the pure-Gaussian transform y/√λread is used.
_MIN_SHOT = 1e-9

#: orthonormal 4-plane transform used by joint BM3D (rows: output channels; columns R, G1, G2, B)
_JOINT = np.array(
    [
        [0.5, 0.5, 0.5, 0.5],
        [1 / math.sqrt(2), 0.0, 0.0, -1 / math.sqrt(2)],
        [0.0, 1 / math.sqrt(2), -1 / math.sqrt(2), 0.0],
        [0.5, -0.5, -0.5, 0.5],
    ]
)

#: default joint/separate BM3D and NLM strength, chosen by ``benchmarks/raw_baselines.py --tune`` on
#: training-split photos (docs/real_noise.md)
DEFAULT_JOINT = True
DEFAULT_NLM_H = 0.6


# --------------------------------------------------------------------------------------------- helpers
def _as_packed(packed) -> tuple[np.ndarray, bool, bool]:
    """(…, 4, h, w) numpy/torch → float64 (B, 4, h, w), was_torch, had_batch."""
    is_torch = isinstance(packed, torch.Tensor)
    a = packed.detach().cpu().numpy() if is_torch else np.asarray(packed)
    if a.ndim not in (3, 4) or a.shape[-3] != 4:
        raise RawrclError(f"expected a packed mosaic (4, h, w) or (B, 4, h, w), got shape {tuple(a.shape)}")
    if not np.all(np.isfinite(a)):
        raise RawrclError("packed mosaic contains NaN or infinite values")
    batch = a.ndim == 4
    return (a if batch else a[None]).astype(np.float64), is_torch, batch


def _back(a: np.ndarray, is_torch: bool, batch: bool):
    a = a.astype(np.float32)
    a = a if batch else a[0]
    return torch.from_numpy(np.ascontiguousarray(a)) if is_torch else a


def _per_plane(v: PerPlane, name: str) -> np.ndarray:
    """λ as a (4, 1, 1) float64 array (scalar broadcast to the 4 planes)."""
    a = np.asarray(v, dtype=np.float64).ravel()
    if a.size == 1:
        a = np.repeat(a, 4)
    if a.size != 4:
        raise RawrclError(f"{name}: expected a scalar or 4 per-plane values [R, G1, G2, B], got {a.size}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise RawrclError(f"{name} must be finite and ≥ 0, got {a.tolist()}")
    return a.reshape(4, 1, 1)


def _check_lambdas(ls: np.ndarray, lr: np.ndarray) -> None:
    if np.any((ls < _MIN_SHOT) & (lr <= 0)):
        raise RawrclError("noise model with λshot = λread = 0 on some plane: nothing to denoise")


def _gat_params(lambda_shot: PerPlane, lambda_read: PerPlane):
    """(λread, gauss, α, σ²) per plane, (4, 1, 1) each: ``gauss`` where λshot ≈ 0 (plain y/√λread), the gain
    α = λshot (1 there) and σ² = λread/α² in counts."""
    ls, lr = _per_plane(lambda_shot, "lambda_shot"), _per_plane(lambda_read, "lambda_read")
    _check_lambdas(ls, lr)
    gauss = ls < _MIN_SHOT
    a = np.where(gauss, 1.0, ls)
    return lr, gauss, a, lr / a**2


# ------------------------------------------------------------------------------------------------- GAT
def gat_forward(y: np.ndarray, lambda_shot: PerPlane, lambda_read: PerPlane) -> np.ndarray:
    """Generalised Anscombe transform of packed values y (…, 4, h, w), [0, 1] units → unit-variance domain."""
    lr, gauss, a, s2 = _gat_params(lambda_shot, lambda_read)
    y = np.asarray(y, dtype=np.float64)
    arg = np.maximum(y / a + 0.375 + s2, 0.0)
    return np.where(gauss, y / np.sqrt(np.where(gauss, lr, 1.0)), 2.0 * np.sqrt(arg))


#: where the closed-form inverse below has its minimum (−0.2413 − σ², so x̂ = 0 there): D < D* is clamped to D*
_D_MIN = 0.8380810


def gat_inverse(d: np.ndarray, lambda_shot: PerPlane, lambda_read: PerPlane) -> np.ndarray:
    """Closed-form approximation of the exact unbiased inverse of :func:`gat_forward` (Mäkitalo & Foi 2013).

    ``d`` is the *denoised* transformed image (an estimate of E[f(y)]); returns x̂ ≥ 0 in [0, 1] units (the
    Gaussian limit λshot → 0 is the plain, unclamped inverse)."""
    lr, gauss, a, s2 = _gat_params(lambda_shot, lambda_read)
    d = np.asarray(d, dtype=np.float64)
    # below its minimum D* the closed form rises again (the D⁻³ term: D = 1e-3 gave 7.6e8); the exact
    # inverse is non-decreasing, and the closed form there is already ≤ 0, i.e. x̂ = 0
    dd = np.maximum(d, _D_MIN)
    inv = 0.25 * dd**2 + _inverse_tail(dd) - 0.125 - s2
    return np.where(gauss, d * np.sqrt(np.where(gauss, lr, 1.0)), a * np.maximum(inv, 0.0))


def _inverse_tail(d):
    """The closed-form exact unbiased inverse's correction terms ¼·√(3/2)·D⁻¹ − 11/8·D⁻² + 5/8·√(3/2)·D⁻³
    (numpy or torch, D ≥ D*): shared by :func:`gat_inverse` and :func:`gat_centred_inverse`."""
    c = math.sqrt(1.5)
    return 0.25 * c / d - 1.375 / d**2 + 0.625 * c / d**3


def gat_algebraic_inverse(d: np.ndarray, lambda_shot: PerPlane, lambda_read: PerPlane) -> np.ndarray:
    """The plain algebraic inverse of :func:`gat_forward` (f⁻¹(f(y)) = y for y above the clamp)."""
    lr, gauss, a, s2 = _gat_params(lambda_shot, lambda_read)
    d = np.asarray(d, dtype=np.float64)
    return np.where(gauss, d * np.sqrt(np.where(gauss, lr, 1.0)), a * ((d / 2) ** 2 - 0.375 - s2))


# ------------------------------------------------------------------------------- sliding-window DCT
#: side and step (packed pixels) of the windows of :func:`dct_wiener`: each pixel lies in (side/step)² windows
DCT_SIDE = 8
DCT_STEP = 4


def gat_centred(y: torch.Tensor, lambda_shot: torch.Tensor, lambda_read: torch.Tensor) -> torch.Tensor:
    """:func:`gat_forward` − 2·√(3/8 + σ²) in float32, for torch: the transform less its value at y = 0,
    written 2·(y/α)/(√(y/α + 3/8 + σ²) + √(3/8 + σ²)) so that float32 keeps the unit noise when σ² (read
    noise in counts) is large. ``y`` (B, 4, h, w) [0, 1] units; λ (B, 4, 1, 1), λshot > 0 on every plane."""
    a, c0 = _centred_params(lambda_shot, lambda_read)
    u = y.float() / a
    arg = (u + c0).clamp_min(0)
    # below the clamp (arg = 0) the transform is its floor, −2√c0
    return torch.where(arg > 0, 2 * u / (arg.sqrt() + c0.sqrt()), -2 * c0.sqrt())


def gat_centred_inverse(
    e: torch.Tensor, lambda_shot: torch.Tensor, lambda_read: torch.Tensor
) -> torch.Tensor:
    """:func:`gat_inverse` of D = ``e`` + 2·√(3/8 + σ²) (``e`` a denoised :func:`gat_centred` image), float32:
    D²/4 − 1/8 − σ² = √c₀·e + e²/4 + 1/4 (c₀ = 3/8 + σ²) evaluated without the cancellation. Same shapes."""
    a, c0 = _centred_params(lambda_shot, lambda_read)
    r0 = c0.sqrt()
    e = e.float().clamp_min(_D_MIN - 2 * r0)  # D ≥ D*, as gat_inverse
    inv = r0 * e + 0.25 * e * e + 0.25 + _inverse_tail(e + 2 * r0)
    return a * inv.clamp_min(0)


def _centred_params(
    lambda_shot: torch.Tensor, lambda_read: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(α = λshot, c₀ = 3/8 + λread/α²), float32, c₀ computed in float64 (σ² in counts can be ≫ 1)."""
    a = lambda_shot.double()
    return a.float(), (0.375 + lambda_read.double() / a**2).float()


@lru_cache(maxsize=4)
def _dct_matrix(n: int) -> torch.Tensor:
    """(n², n²) float32: rows the orthonormal 2-D DCT-II basis images (flattened), row 0 the constant (DC)."""
    k = np.arange(n)
    c = np.sqrt(2.0 / n) * np.cos(np.pi * (2 * k[None] + 1) * k[:, None] / (2 * n))
    c[0] /= np.sqrt(2.0)
    return torch.from_numpy(np.einsum("ui,vj->uvij", c, c).reshape(n * n, n * n).astype(np.float32))


#: output rows per strip of :func:`dct_wiener` (a multiple of :data:`DCT_STEP`): strips keep its ×4-sized
#: coefficient arrays in cache (2× faster than the whole image at once); the result does not depend on it
DCT_STRIP = 32


def dct_wiener(z: torch.Tensor, pilot: torch.Tensor) -> torch.Tensor:
    """Sliding-window DCT empirical Wiener filter (Yu & Sapiro 2011's sliding DCT with the Wiener shrinkage of
    BM3D's second step, without block matching) of ``z`` (B, C, h, w), noisy with unit white noise, guided
    by ``pilot`` (an estimate of the clean ``z``, same shape): every :data:`DCT_SIDE`² window at step
    :data:`DCT_STEP` (reflection-padded), each DCT coefficient c of ``z`` but the DC scaled by p²/(p² + 1), p
    the pilot's, the windows averaged back. float32, autocast off; same shape."""
    n, s = DCT_SIDE, DCT_STEP
    b, ch, h, w = z.shape
    pad = n - s
    hp, wp = h + 2 * pad + (-(h + 2 * pad - n)) % s, w + 2 * pad + (-(w + 2 * pad - n)) % s
    mode = "reflect" if min(h, w) > n else "replicate"
    with torch.autocast(z.device.type, enabled=False):
        zp, pp = (
            F.pad(t.float().reshape(b * ch, 1, h, w), (pad, wp - w - pad, pad, hp - h - pad), mode=mode)
            for t in (z, pilot)
        )
        out = z.new_empty(b * ch, h, w, dtype=torch.float32)
        mat = _dct_matrix(n).to(z.device)
        for r in range(0, h, DCT_STRIP):  # output rows r … r + DCT_STRIP: padded rows r … r + strip + 2·pad
            rows = slice(r, min(r + DCT_STRIP, h) + 2 * pad + (hp - h - 2 * pad if r + DCT_STRIP >= h else 0))
            out[:, r : r + DCT_STRIP] = _dct_wiener_padded(zp[..., rows, :], pp[..., rows, :], mat)[
                :, pad : pad + min(DCT_STRIP, h - r), pad : pad + w
            ]
    return out.reshape(b, ch, h, w)


def _dct_wiener_padded(zp: torch.Tensor, pp: torch.Tensor, mat: torch.Tensor) -> torch.Tensor:
    """:func:`dct_wiener` of a padded (N, 1, H, W) float32 strip (H, W ≡ :data:`DCT_SIDE` mod
    :data:`DCT_STEP`), every window inside it, ``mat`` the (n², n²) DCT basis (:func:`_dct_matrix`) on the
    strip's device: (N, H, W), exact where (n/step)² windows cover a pixel (all but the outer
    :data:`DCT_SIDE` − :data:`DCT_STEP` rows and columns)."""
    n, s = DCT_SIDE, DCT_STEP
    c = F.conv2d(zp, mat.view(n * n, 1, n, n), stride=s)
    p = F.conv2d(pp, mat.view(n * n, 1, n, n), stride=s).square_()
    gain = p.div_(p + 1.0)
    gain[:, 0] = 1.0
    win = torch.einsum("kq,bkyx->bqyx", mat, c.mul_(gain))  # each window's pixels (N, n², ny, nx)
    big, ny, nx = n // s, win.shape[-2], win.shape[-1]
    win = win.view(-1, big, s, big, s, ny, nx)
    out = win.new_zeros(win.shape[0], s, s, ny + big - 1, nx + big - 1)
    for i in range(big):  # overlap-add: window (Y, X)'s pixel (i·s + r, j·s + q) is (Y + i, X + j)'s (r, q)
        for j in range(big):
            out[..., i : i + ny, j : j + nx] += win[:, i, :, j]
    out = out.permute(0, 3, 1, 4, 2).reshape(win.shape[0], (ny + big - 1) * s, (nx + big - 1) * s)
    return out / big**2


def gat_dct_wiener(
    packed: torch.Tensor, pilot: torch.Tensor, lambda_shot: torch.Tensor, lambda_read: torch.Tensor
) -> torch.Tensor:
    """:func:`dct_wiener` in the GAT domain of a packed mosaic (:func:`gat_centred` of ``packed`` and of
    ``pilot``, a denoised estimate of it; the filter; the exact unbiased inverse). ``packed``, ``pilot``
    (B, 4, h, w), [0, 1] units; λ (B, 4, 1, 1) tensors, λshot > 0 (the noise variance λshot·x + λread per
    plane) → (B, 4, h, w) float32 ≥ 0. No black-clipping correction (:func:`declip_black`)."""
    z = gat_centred(packed, lambda_shot, lambda_read)
    p = gat_centred(pilot, lambda_shot, lambda_read)
    return gat_centred_inverse(dct_wiener(z, p), lambda_shot, lambda_read)


# -------------------------------------------------------------------------------------- black clipping
def is_black_clipped(packed: np.ndarray, min_zero_fraction: float = 0.005) -> bool:
    """True when a mosaic looks black-clipped: no negative value, ≥ ``min_zero_fraction`` exact zeros."""
    a = np.asarray(packed)
    return bool(a.min() >= 0 and np.mean(a == 0) >= min_zero_fraction)


def clipped_mean(x: np.ndarray, lambda_shot: PerPlane, lambda_read: PerPlane) -> np.ndarray:
    """E[max(x + s·ε, 0)], s² = λshot·max(x, 0) + λread, ε ~ N(0, 1): the mean of a black-clipped reading."""
    ls, lr = _per_plane(lambda_shot, "lambda_shot"), _per_plane(lambda_read, "lambda_read")
    x = np.asarray(x, dtype=np.float64)
    s = np.sqrt(np.maximum(ls * np.maximum(x, 0) + lr, 1e-30))
    t = x / s
    return x * ndtr(t) + s * np.exp(-0.5 * t**2) / math.sqrt(2 * math.pi)


def declip_black(m: np.ndarray, lambda_shot: PerPlane, lambda_read: PerPlane, iters: int = 40) -> np.ndarray:
    """Invert :func:`clipped_mean`: the signal x ≥ 0 whose black-clipped reading has mean ``m`` (…, 4, h, w).

    m(x) is increasing in x; bisection on [0, max(m, 0)] (m(x) ≥ x). Values of m below m(0) = √λread/√(2π)
    (impossible for a clipped mean, they come from estimation error) map to 0.
    """
    m = np.asarray(m, dtype=np.float64)
    lo = np.zeros_like(m)
    hi = np.maximum(m, 0.0)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        above = clipped_mean(mid, lambda_shot, lambda_read) > m
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return 0.5 * (lo + hi)


# ----------------------------------------------------------------------------------------------- BM3D
def _bm3d_unit(t: np.ndarray, joint: bool, profile: str) -> np.ndarray:
    """BM3D of one (4, h, w) image with unit noise std."""
    import bm3d

    if joint:
        c = np.einsum("ij,jhw->ihw", _JOINT, t)
        out = bm3d.bm3d(np.ascontiguousarray(c.transpose(1, 2, 0)), [1.0] * 4, profile=profile)
        return np.einsum("ji,jhw->ihw", _JOINT, np.asarray(out).transpose(2, 0, 1))
    return np.stack([np.asarray(bm3d.bm3d(p, 1.0, profile=profile)) for p in t])


def gat_bm3d(
    packed,
    lambda_shot: PerPlane,
    lambda_read: PerPlane,
    *,
    joint: bool = DEFAULT_JOINT,
    profile: str = "np",
    black_clipped: bool | None = None,
):
    """GAT + BM3D + exact unbiased inverse on a packed mosaic.

    Parameters
    ----------
    packed : (4, h, w) or (B, 4, h, w) [R, G1, G2, B], [0, 1] units, numpy or torch (negative values kept).
    lambda_shot, lambda_read : noise variance λshot·x + λread, scalars or 4 per-plane values.
    joint : BM3D on the 4 planes jointly (orthonormal colour transform) or per plane (module docstring).
    profile : ``bm3d`` profile name (``np`` default; ``refilter``, ``vn``, ``high`` …).
    black_clipped : undo the bias of a black-clipped input (:func:`declip_black`); None = detect.

    Returns
    -------
    Same shape and type as ``packed``, float32, [0, 1] units (≥ 0). BM3D costs ≈ 1 min per megapixel.
    """
    a, is_torch, batch = _as_packed(packed)
    out = np.empty_like(a)
    for i, img in enumerate(a):
        clipped = is_black_clipped(img) if black_clipped is None else black_clipped
        d = _bm3d_unit(gat_forward(img, lambda_shot, lambda_read), joint, profile)
        x = gat_inverse(d, lambda_shot, lambda_read)
        out[i] = declip_black(x, lambda_shot, lambda_read) if clipped else x
    return _back(out, is_torch, batch)


#: BM3D runs in bands of this many packed rows, neighbours overlapping by BAND_OVERLAP rows (cross-faded):
#: its memory follows the band, not the frame (whole 12 MP frame: 4 GB)
BAND, BAND_OVERLAP = 512, 32


def banded_gat_bm3d(
    packed: np.ndarray, lambda_shot, lambda_read, band: int = 0, overlap: int = 0
) -> np.ndarray:
    """:func:`rawrcl.gat.gat_bm3d` of a packed mosaic (4, h, w) in bands of ``band`` rows (default
    :data:`BAND`) overlapping by ``overlap`` (:data:`BAND_OVERLAP`), linearly cross-faded → (4, h, w)
    float32. Black clipping is judged once, on the whole mosaic."""
    band, overlap = band or BAND, overlap or BAND_OVERLAP
    clipped = is_black_clipped(packed)
    h = packed.shape[-2]
    if h <= band:
        return gat_bm3d(packed, lambda_shot, lambda_read, black_clipped=clipped)
    out = np.zeros(packed.shape, dtype=np.float64)
    total = np.zeros(h)
    ramp = np.linspace(0.0, 1.0, overlap + 2)[1:-1]  # > 0 everywhere: every row keeps some weight
    for y0 in [*range(0, h - band, band - overlap), h - band]:
        w = np.ones(band)
        if y0 > 0:
            w[:overlap] = ramp
        if y0 + band < h:
            w[-overlap:] = ramp[::-1]
        part = gat_bm3d(packed[:, y0 : y0 + band], lambda_shot, lambda_read, black_clipped=clipped)
        out[:, y0 : y0 + band] += part * w[:, None]
        total[y0 : y0 + band] += w
    return (out / total[:, None]).astype(np.float32)


# ------------------------------------------------------------------------------------------------ NLM
def nlm_raw(
    packed,
    lambda_shot: PerPlane,
    lambda_read: PerPlane,
    *,
    h: float = DEFAULT_NLM_H,
    patch_size: int = 5,
    patch_distance: int = 6,
    black_clipped: bool | None = None,
):
    """Non-local means (scikit-image, fast mode) of the 4 planes jointly in the GAT domain (unit noise).

    ``h`` is the filtering strength in units of the (unit) noise std; patches of ``patch_size`` packed
    pixels, search radius ``patch_distance``. Same shapes, units and clipping treatment as :func:`gat_bm3d`;
    a cheap baseline (≈ 1 s per megapixel of mosaic).
    """
    from skimage.restoration import denoise_nl_means

    a, is_torch, batch = _as_packed(packed)
    out = np.empty_like(a)
    for i, img in enumerate(a):
        clipped = is_black_clipped(img) if black_clipped is None else black_clipped
        t = gat_forward(img, lambda_shot, lambda_read)
        d = denoise_nl_means(
            np.ascontiguousarray(t.transpose(1, 2, 0)),
            h=h,
            sigma=1.0,
            patch_size=patch_size,
            patch_distance=patch_distance,
            fast_mode=True,
            channel_axis=-1,
        ).transpose(2, 0, 1)
        x = gat_inverse(d, lambda_shot, lambda_read)
        out[i] = declip_black(x, lambda_shot, lambda_read) if clipped else x
    return _back(out, is_torch, batch)
