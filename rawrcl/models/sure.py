"""SURE weights: a noise-aware RAW denoiser's output(s) recombined with its input by the weights that minimise
the estimated error — the estimator (:class:`SureShrink`); where the commands apply it:
:mod:`rawrcl.models.shrink`.

A network told the noise can still remove too much, most visibly at the clean end (base ISO), where the
noise is far below the scene's own fine texture: on sharp photo-valued mosaics at λshot 2e-5 the shipped
denoiser came out *below its noisy input* (docs/weights.md, "SURE weights"). For any denoiser f and
noise of known per-pixel variance v, Stein's unbiased risk estimate of out = y + w·(f(y) − y) is

    SURE(w) = w²·Σ(f − y)² − Σv + 2·Σ vᵢ·[(1 − w) + w·∂fᵢ/∂yᵢ],

minimised at w* = Σ vᵢ(1 − ∂fᵢ/∂yᵢ) / Σ(fᵢ − yᵢ)²; min(1, :data:`SLACK`·w*) is used (1: the network
unchanged). The divergence is a Monte Carlo estimate from one Rademacher probe b:
∂fᵢ/∂yᵢ ≈ bᵢ·(f(y + εb) − f(y))ᵢ / ε. v = λshot·max(f, 0) + λread per plane; samples within 2.5σ of a clip
level (black or white, where the input piles up; SURE does not hold there) are left out of both sums. One w
per call (per tile of the tiler), estimated on a few windows of the tile: ≈ 10 % more time for the
whole command. With two estimates (the two-stage RAW default: its first stage and its JDD stage) the same
estimate with cross terms gives a 2×2 quadratic over the simplex (:class:`SureShrink`). A model that asks
for it (``sure_low_band``: the CFA-site blend default) adds, for each estimate f, its high band
f − G_σ∗(f − y) (the input's low frequencies kept, :func:`low_band`), so the weights can drop an estimate's
low-frequency correction alone: on smooth, clean content (base ISO) the networks' low band is off
(docs/weights.md, "The input's low band"). A model that asks for it (``sure_classes``) gets one set of
weights per texture class instead of one per tile: the tile's pixels fall into :data:`CLASSES` equal-count
classes by the first estimate's local activity over the noise std (:func:`texture_classes`), and each
class's weights minimise SURE over that class's samples — on sharp, clean content they keep more of the
input on texture than on flat areas (docs/weights.md, "Texture classes"). A model that asks for it
(``sure_dct``: the CFA-site blend) adds a classical estimate, a sliding-DCT Wiener filter in the GAT domain
with the first estimate as pilot (:func:`dct_estimate`), on tiles whose noise is small beside their signal
(:func:`dct_gate`), its weight dropped where it would lose were the noise :data:`DCT_VETO` × smaller than told
(docs/weights.md, "A sliding-DCT estimate among the SURE candidates"). No clean data is used: it needs only
the noise the model is told.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn as nn
import torch.nn.functional as F

from rawrcl.gat import gat_dct_wiener
from rawrcl.models.geometry import size_multiple
from rawrcl.noise.maps import local_mean, variance_map

#: side of each probe window, packed pixels; the outer ``MARGIN`` of it is not scored (border effects)
WINDOW = 64
MARGIN = 8
#: probe step ε as a fraction of the window's mean noise std
PROBE = 0.05
#: w* scales with the told variance, which is itself uncertain (a single-image estimate's std is good to
#: ≈ 10 %, the variance to ≈ 20 %; real noise is only roughly Poisson–Gaussian): the weight used is
#: min(1, SLACK·w*), so only a shrinkage beyond that uncertainty is applied. Added after the first form
#: (SLACK 1) lost 0.09 dB on the HDR+ burst, where it read w* ≈ 0.95 (docs/weights.md, "SURE weights").
SLACK = 1.2
#: σ (packed pixels) of the Gaussian low band that an estimate's high-band version leaves as the input's
#: (:func:`low_band`; models with ``sure_low_band``); 0 turns the high-band estimates off. Chosen among 0.5,
#: 0.75, 1, 1.5, 3 on the validation rows (docs/weights.md, "The input's low band").
LOW_BAND = 1.0
#: texture classes of the weights, for models with ``sure_classes`` (:func:`texture_classes`); 1: one set of
#: weights per tile. Chosen between 3 and 5 on the validation rows (docs/weights.md, "Texture classes").
CLASSES = 5
#: a class with fewer scorable samples than this in the probe windows takes the tile's weights
MIN_CLASS_SAMPLES = 1024
#: models with ``sure_dct``: a tile gets the sliding-DCT estimate (:func:`dct_estimate`) only where its noise
#: std at its median signal is at most this share of that signal (:func:`dct_gate`); dark, noisy tiles
#: (where it lost, told more noise than there was) keep the networks alone (docs/weights.md, "A sliding-DCT
#: estimate among the SURE candidates")
DCT_MAX_REL_NOISE = 0.3
#: the DCT estimate's weight is vetoed (its tile or class weighed without it) where the weights with it would
#: lose to those without it were the noise this many times smaller in std than told: SURE trusts the told
#: variance, and a camera profile or single-image estimate can over-read it (same section)
DCT_VETO = 1.5


class SureShrink(nn.Module):
    """A noise-aware RAW denoiser's output(s) recombined with the input by SURE-optimal weights.

    ``model``: a noise-aware packed → packed RAW denoiser, called ``model(x, noise)``. One estimate f:
    ``y + w·(f − y)``, ``w`` ∈ [0, 1]. A model whose output combines K estimates (``raw_parts``: its
    ``parts(x, noise)`` and ``blend_parts(*parts, noise)``) gives K: the CFA-site blend default
    (:class:`~rawrcl.models.compose.DenoiseThenDemosaic`) its first stage a and its JDD stage at the CFA
    sites b, ``y + w₁(a − y) + w₂(b − y)`` with w ≥ 0, Σw ≤ 1 minimising SURE in place of the fixed blend;
    :class:`~rawrcl.models.blindspot.WithBlindSpot` its start with its own SURE weights and a blind-spot
    network's estimate (K = 2, nested) — the same estimate with the cross terms: minimise wᵀMw − 2wᵀr,
    M_jk = Σ(f_j − y)(f_k − y), r_j = Σ v(1 − div f_j) (:func:`best_weights`).
    Weights: one set per sample of the batch (per tile of the tiler). Shapes: ``x`` (B, 4, h, w) [R, G1,
    G2, B] in [0, 1] units, ``noise`` (B, 2 or 3, 4) [λshot; λread (; σ_row²)] → (B, 4, h, w). Inputs up to
    2 windows a side are probed whole (one more pass); larger ones on a g × g grid of windows of
    :data:`WINDOW` packed pixels spread over the input (two passes of those windows; g = 2, or the model's
    ``sure_grid``: :attr:`grid`). A sample told row (banding) noise, or with
    under 5 % of scorable samples, or whose every estimate equals the input where SURE scores, gets the
    model's own output (an estimate equal to the input gets weight 0, the others theirs without it). The
    weights of the last call are in :attr:`last_weights` (B, K), every set so far in :attr:`seen` (for logs
    and tests).
    """

    noise_aware = True

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        #: the model's output combines several estimates (``raw_parts``: ``parts``, ``blend_parts``)
        self.multi_part = bool(getattr(model, "raw_parts", False))
        self.row_aware = bool(getattr(model, "row_aware", False))
        self.deband = getattr(model, "deband", None)  # rawrcl.models.conditioning.camera_rows
        self.size_multiple = size_multiple(model)
        #: probe windows per side: 2 (4 windows), or the model's ``sure_grid`` (a blind-spot composite: 4,
        #: i.e. 16 windows; 4 gave its network's weight too much variance, docs/adaptation.md)
        self.grid = int(getattr(model, "sure_grid", 2))
        #: the weighed output only where SURE could score it (:func:`scorable`), the first part elsewhere: a
        #: blind-spot composite's network is unchecked next to a clip level (:meth:`first_near_clips`)
        self.first_near_clips = bool(getattr(model, "sure_first_near_clips", False))
        #: add each estimate's high band (:meth:`with_bands`): the model asks for it (``sure_low_band``)
        self.bands = bool(getattr(model, "sure_low_band", False))
        #: weights per texture class (:func:`texture_classes`): the model asks for it (``sure_classes``)
        self.classes = CLASSES if getattr(model, "sure_classes", False) else 1
        #: add the sliding-DCT estimate (:func:`dct_estimate`): the model asks for it (``sure_dct``)
        self.dct = bool(getattr(model, "sure_dct", False))
        self.last_weights: torch.Tensor | None = None
        self.seen: list[list[float]] = []

    @property
    def head_name(self) -> str:
        return getattr(self.model, "head_name", "raw")

    def parts(self, x: torch.Tensor, noise: torch.Tensor) -> list[torch.Tensor]:
        """The estimates the output combines with ``x``: [f], or the model's ``parts`` (K of them)."""
        return list(self.model.parts(x, noise)) if self.multi_part else [self.model(x, noise)]

    def own(self, parts: list[torch.Tensor], noise: torch.Tensor) -> torch.Tensor:
        """What the model itself outputs from its ``parts``."""
        return self.model.blend_parts(*parts, noise) if self.multi_part else parts[0]

    def with_bands(self, parts: list[torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
        """The estimates the weights choose among: ``parts``, then (with :attr:`bands`, :data:`LOW_BAND` > 0
        and at most 2 parts) each part's high band p − :func:`low_band` (p − x): its correction without its
        low frequencies. Weighing p by w and its high band by u gives p's correction the weight w + u in the
        high band and w in the low band. ``x`` (B, 4, h, w), the input; parts the same shape."""
        if not self._banded(len(parts)):
            return parts
        xs = x.to(parts[0].dtype)
        return parts + [p - low_band(p - xs, LOW_BAND) for p in parts]

    def _banded(self, k: int) -> bool:
        """Whether K estimates get their high bands too (:meth:`with_bands`; ≤ 4 weights in all)."""
        return self.bands and LOW_BAND > 0 and k <= 2

    def candidates(
        self, parts: list[torch.Tensor], x: torch.Tensor, noise: torch.Tensor, gate: torch.Tensor | None
    ) -> list[torch.Tensor]:
        """Every estimate the weights choose among, float32: :meth:`with_bands` of ``parts``, then (with
        :attr:`dct`) :func:`dct_estimate` of ``x`` with the first part as pilot, on the tiles ``gate`` (B,)
        allows (:func:`dct_gate`, decided once per tile)."""
        out = self.with_bands([p.float() for p in parts], x)
        if self.dct:
            out.append(dct_estimate(x, out[0], noise, gate))
        return out

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the weights (:attr:`last_weights` columns), for logs."""
        base = tuple(getattr(self.model, "part_names", ())) if self.multi_part else ("network",)
        if self._banded(len(base)):
            base = base + tuple(f"{n} (high band)" for n in base)
        return base + (("sliding DCT",) if self.dct else ())

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        parts = self.parts(x, noise)
        with torch.no_grad():
            gate = dct_gate(parts[0], noise) if self.dct else None
            dct = dct_estimate(x, parts[0], noise, gate) if self.dct else None
            w, keep, cls = self.weights(x, noise, parts, dct, gate)
        xs = x.to(parts[0].dtype)
        d = [p - xs for p in parts]
        if cls is None:  # (B, K′) → (B, K′, 1, 1, 1): one set per tile
            wf = w.to(xs.dtype)[..., None, None, None]
            mean_w = w
        else:  # (B, classes, K′) → (B, K′, 1, h, w): each pixel its class's set
            b, _, h, wd = cls.shape
            wt = w.transpose(1, 2).to(xs.dtype)
            wf = wt.gather(2, cls.flatten(1)[:, None].expand(-1, wt.shape[1], -1)).view(b, -1, 1, h, wd)
            mean_w = wf.float().mean(dim=(2, 3, 4))
        self.last_weights = torch.where(keep[:, None], torch.nan, mean_w).cpu()
        self.seen += self.last_weights.tolist()
        # the high bands' weights u (columns K…, none without bands): p's correction gets w + u, minus u of
        # its low band (with_bands) — one low-pass of Σ u·(p − x) per tile with one set of weights (of each
        # u·(p − x) with per-pixel weights), none when every u is 0
        n_bands = len(d) if self._banded(len(d)) else 0
        w_all, u = wf[:, : len(d)], wf[:, len(d) : len(d) + n_bands]
        if u.shape[1]:
            w_all = w_all + u
        out = xs + sum(w_all[:, i] * di for i, di in enumerate(d))
        if dct is not None:  # the last column: the sliding-DCT estimate's weight
            out = out + wf[:, -1] * (dct.to(xs.dtype) - xs)
        if bool((u > 0).any()):
            if cls is None:
                out = out - low_band(sum(u[:, i] * di for i, di in enumerate(d)), LOW_BAND)
            else:
                used = [i for i in range(len(d)) if bool((u[:, i] > 0).any())]
                out = out - sum(u[:, i] * low_band(d[i], LOW_BAND) for i in used)
        if bool(keep.any()):
            out = torch.where(keep[:, None, None, None], self.own(parts, noise), out)
        if self.first_near_clips:
            out = near_clips_to(parts[0].to(out.dtype), out, x, noise)
        return out

    def _windows(self, h: int, w: int) -> list[tuple[int, int, int]] | None:
        """(top, left, side) of the probe windows; None: probe the whole input."""
        if h <= 2 * WINDOW or w <= 2 * WINDOW:
            return None
        # window centres at the middles of a g × g grid of cells (g = 2: the quarter points), inside the input
        g = self.grid
        rows = [min(max(0, (2 * i + 1) * h // (2 * g) - WINDOW // 2), h - WINDOW) for i in range(g)]
        cols = [min(max(0, (2 * j + 1) * w // (2 * g) - WINDOW // 2), w - WINDOW) for j in range(g)]
        return [(t, lft, WINDOW) for t in rows for lft in cols]

    def weights(
        self,
        x: torch.Tensor,
        noise: torch.Tensor,
        full: list[torch.Tensor],
        dct: torch.Tensor | None = None,
        gate: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(SURE-optimal weights, (B,) bool: keep the model's own output, class map) for input ``x`` whose
        full-size parts are ``full`` (float32 maths); K′ weights count the high bands too
        (:meth:`with_bands`) and, with :attr:`dct`, last, the full-size sliding-DCT estimate ``dct`` (on the
        tiles ``gate`` allows; :meth:`candidates`), its weight vetoed by :data:`DCT_VETO`. One set per tile:
        weights (B, K′), class map None; with :attr:`classes` > 1: weights (B, classes, K′) and the
        (B, 1, h, w) long class of every pixel (:func:`texture_classes`); a class with under
        :data:`MIN_CLASS_SAMPLES` scorable samples gets the tile's set."""
        b, c, h, w = x.shape
        k = len(full) * (2 if self._banded(len(full)) else 1) + (1 if self.dct else 0)
        x, noise = x.float(), noise.float()
        wins = self._windows(h, w)
        levels = clip_levels(x)
        n_cls = self.classes
        cls_full = None
        if n_cls > 1:
            f = full[0].float()
            cls_full = texture_classes(f, variance_map(f, noise).clamp_min(0), n_cls)
        gram = x.new_zeros(b, n_cls, k, k, dtype=torch.float64)
        rhs = x.new_zeros(b, n_cls, k, dtype=torch.float64)
        cnt = x.new_zeros(b)
        cnt_cls = x.new_zeros(b, n_cls)
        total = 0.0
        gen = torch.Generator(device=x.device).manual_seed(0)  # the same file gives the same output
        with torch.autocast(x.device.type, enabled=False):
            if wins is None:
                f_all = self.with_bands([p.float() for p in full], x)
                pieces = [(x, f_all + ([dct.float()] if self.dct else []), 0, cls_full)]
            else:
                pieces = [
                    (
                        x[..., t : t + s, lft : lft + s],
                        None,
                        MARGIN,
                        None if cls_full is None else cls_full[..., t : t + s, lft : lft + s],
                    )
                    for t, lft, s in wins
                ]
            for y, f0, m, cl in pieces:
                if f0 is None:
                    f0 = self.candidates(self.parts(y, noise), y, noise, gate)
                v = variance_map(f0[0], noise).clamp_min(0)
                sd = v.sqrt()
                eps = PROBE * sd.mean(dim=(1, 2, 3), keepdim=True).clamp_min(1e-6)
                probe = torch.randint(0, 2, y.shape, generator=gen, device=y.device).to(y.dtype) * 2 - 1
                yp = y + eps * probe
                f1 = self.candidates(self.parts(yp, noise), yp, noise, gate)
                inner = (slice(None), slice(None), slice(m, y.shape[-2] - m), slice(m, y.shape[-1] - m))
                ok = scorable(levels, f0[0], sd)[inner]
                res = [(p - y)[inner] for p in f0]
                # (B, classes, C, h, w) the scorable samples of each class (one class: all of them)
                okc = ok[:, None] if cl is None else ok[:, None] * _one_hot_classes(cl[inner], n_cls)
                for i in range(k):
                    div = (probe * (f1[i] - f0[i]) / eps)[inner]
                    rhs[:, :, i] += (okc * (v[inner] * (1 - div))[:, None]).sum(dim=(2, 3, 4)).double()
                    for j in range(i, k):
                        gram[:, :, i, j] += (okc * (res[i] * res[j])[:, None]).sum(dim=(2, 3, 4)).double()
                        gram[:, :, j, i] = gram[:, :, i, j]
                cnt += ok.sum(dim=(1, 2, 3))
                cnt_cls += okc.sum(dim=(2, 3, 4))
                total += ok[0].numel()
        gram_tile = gram.sum(1)
        tile = self._solve_vetoed(gram_tile, rhs.sum(1))
        # the model's own output only when every part equals the input where SURE scores (_solve)
        keep = (cnt < 0.05 * total) | (gram_tile.diagonal(dim1=1, dim2=2) <= 0).all(dim=1)
        if noise.shape[1] > 2:
            keep |= (noise[:, 2] > 0).any(dim=1)
        if cls_full is None:
            return tile.float(), keep, None
        per = self._solve_vetoed(gram.flatten(0, 1), rhs.flatten(0, 1)).view(b, n_cls, k)
        per = torch.where((cnt_cls >= MIN_CLASS_SAMPLES)[..., None], per, tile[:, None])
        return per.float(), keep, cls_full

    def _solve_vetoed(self, gram: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
        """:func:`_solve`; with :attr:`dct` (the last of the K estimates), where the weights with the DCT
        estimate have a larger SURE risk than those without it were the noise variance 1/:data:`DCT_VETO`²
        of the told one (rhs scales with it), the weights without it (N, K) → (N, K)."""
        w = _solve(gram, rhs)
        if not self.dct:
            return w
        w0 = F.pad(_solve(gram[:, :-1, :-1], rhs[:, :-1]), (0, 1))
        low = rhs / DCT_VETO**2
        return torch.where((_risk(w, gram, low) > _risk(w0, gram, low))[:, None], w0, w)


def _risk(w: torch.Tensor, gram: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """wᵀ·gram·w − 2·wᵀ·rhs (SURE up to a term free of w): (N, K), (N, K, K), (N, K) → (N,)."""
    w = w.to(gram.dtype)
    return torch.einsum("ni,nij,nj->n", w, gram, w) - 2 * (w * rhs).sum(-1)


def dct_gate(f: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the tiles whose noise std at their median signal is at most :data:`DCT_MAX_REL_NOISE` of
    that signal (the median of the estimate ``f`` (B, 4, h, w) over its planes; std √(λshot·m + λread) with
    the planes' mean λ; ``noise`` (B, ≥ 2, 4)), and with shot noise on every plane (the GAT needs it)."""
    med = f.float().flatten(1).median(1).values
    nz = noise.float()[:, :2]
    sd = variance_map(med.view(-1, 1, 1, 1).expand(-1, nz.shape[-1], 1, 1), nz).mean((1, 2, 3)).sqrt()
    return (med > 0) & (sd <= DCT_MAX_REL_NOISE * med) & (nz[:, 0] > 0).all(1)


def dct_estimate(
    x: torch.Tensor, pilot: torch.Tensor, noise: torch.Tensor, gate: torch.Tensor | None
) -> torch.Tensor:
    """The sliding-DCT Wiener estimate of ``x`` (B, 4, h, w) in the GAT domain with ``pilot`` (the first
    estimate) as its Wiener pilot (:func:`rawrcl.gat.gat_dct_wiener`, ``noise`` (B, ≥ 2, 4) [λshot; λread]
    per plane) on the tiles ``gate`` (B,) allows; ``x`` itself on the others (an estimate equal to the input
    gets weight 0). float32, outside autocast (in bf16 the GAT values' rounding exceeds the unit noise)."""
    out = x.float().clone()
    if gate is None or not bool(gate.any()):
        return out
    with torch.autocast(x.device.type, enabled=False):
        nz = noise[gate].float()
        out[gate] = gat_dct_wiener(
            x[gate].float(), pilot[gate].float(), nz[:, 0, :, None, None], nz[:, 1, :, None, None]
        )
    return out


def low_band(d: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian low-pass (std ``sigma`` packed pixels, truncated at 3σ) of each plane of ``d`` (B, C, h, w),
    separable, reflection-padded (replicated where a side is too short to reflect): same shape and dtype."""
    r = max(1, math.ceil(3 * sigma))
    t = torch.arange(-r, r + 1, device=d.device, dtype=torch.float32)
    k = torch.exp(-(t**2) / (2 * sigma * sigma))
    k = (k / k.sum()).to(d.dtype)
    c = d.shape[1]
    mode = "reflect" if min(d.shape[-2:]) > r else "replicate"
    d = F.pad(d.contiguous(), (r, r, r, r), mode=mode)
    d = F.conv2d(d, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(d, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def _solve(gram: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """:func:`best_weights` with :data:`SLACK`: gram (N, K, K), rhs (N, K) → (N, K) float64. A part equal to
    the input where SURE scores (e.g. a start whose own SURE weights chose the input) changes nothing: weight
    0, the others weighed without it."""
    dead = gram.diagonal(dim1=1, dim2=2) <= 0
    return best_weights(gram, SLACK * rhs.masked_fill(dead, 0)).masked_fill(dead, 0)


def texture_classes(f: torch.Tensor, v: torch.Tensor, n: int) -> torch.Tensor:
    """(B, 1, h, w) long class in [0, n) of each pixel of the estimate ``f`` (B, C, h, w), by its local
    activity over the noise: the rms of the plane mean's 3×3 high-pass over a 5×5 window, divided by the mean
    noise std √``v`` (``v`` the (B, C, h, w) variance map); the class bounds are the activity's quantiles
    over the tile (equal-count classes, per batch sample)."""
    g = f.mean(1, keepdim=True)
    hp = g - local_mean(g, 3)
    act = local_mean(hp * hp, 5).sqrt() / v.mean(1, keepdim=True).sqrt().clamp_min(1e-8)
    qs = torch.linspace(0, 1, n + 1, device=f.device)[1:-1]
    out = []
    for a in act:
        flat = a.flatten()
        sample = flat[:: max(1, flat.numel() // 65536)]  # torch.quantile's input is bounded
        out.append(torch.bucketize(a, torch.quantile(sample, qs).contiguous()))
    return torch.stack(out)


def _one_hot_classes(cls: torch.Tensor, n: int) -> torch.Tensor:
    """(B, 1, h, w) long classes → (B, n, 1, h, w) float one-hot masks."""
    return F.one_hot(cls[:, 0], n).permute(0, 3, 1, 2)[:, :, None].float()


def best_weights(gram: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """argmin wᵀ·gram·w − 2·wᵀ·rhs over w ≥ 0, Σw ≤ 1, per batch row: gram (B, K, K), rhs (B, K) → (B, K).

    The objective is convex (gram is a Gram matrix), so its minimum over the simplex lies in the relative
    interior of one face: for every non-empty subset S of the estimates, the stationary point on S with the
    others at 0, either free (Σw < 1) or on Σw = 1 (a Lagrange multiplier); the best feasible candidate, or
    w = 0, wins (the first of equal ones, subsets in binary order, free before bound). All 2·(2^K − 1)
    candidates are solved at once, batched: K ≤ 6."""
    b, k = rhs.shape
    if k == 1:
        return (rhs / gram[:, 0].clamp_min(1e-300)).clamp(0, 1)
    if not 1 <= k <= 6:
        raise ValueError(f"best_weights takes 1 to 6 estimates, got {k}")
    g, r = gram.double(), rhs.double()
    sel = _faces(k).to(g.device)
    n_sub = sel.shape[0]
    # on S: G_S·w_S = r_S; off S: w = 0 (identity rows)
    a_mat = (sel[:, :, None] * sel[:, None, :])[None] * g[:, None] + torch.diag_embed(1 - sel)[None]
    r_sub = sel[None] * r[:, None]
    kkt = g.new_zeros(b, n_sub, k + 1, k + 1)  # [[G_S, 1_S], [1_Sᵀ, 0]]·[w; μ] = [r_S; 1]
    kkt[..., :k, :k] = a_mat
    kkt[..., :k, k] = sel
    kkt[..., k, :k] = sel
    free, ok_free = _solved(a_mat, r_sub)
    bound, ok_bound = _solved(kkt, torch.cat([r_sub, r_sub.new_ones(b, n_sub, 1)], -1))
    cand = torch.stack([free, bound[..., :k]], 2).flatten(1, 2)  # (B, 2·subsets, K) in the loop's order
    ok = torch.stack([ok_free, ok_bound], 2).flatten(1, 2)
    ok &= (cand.min(-1).values >= -1e-12) & (cand.sum(-1) <= 1 + 1e-12)
    cand = cand.clamp_min(0).nan_to_num(0.0)
    f = torch.einsum("bsi,bij,bsj->bs", cand, g, cand) - 2 * torch.einsum("bsi,bi->bs", cand, r)
    f = torch.where(ok, f, torch.inf)
    best = f.argmin(1)
    out = torch.where((f.gather(1, best[:, None]) < 0), cand[torch.arange(b), best], 0.0)
    return out.to(rhs.dtype)


@lru_cache(maxsize=8)
def _faces(k: int) -> torch.Tensor:
    """(2^k − 1, k) float64 0/1 rows: the non-empty subsets of k estimates in binary order (bit i:
    estimate i)."""
    return torch.tensor([[m >> i & 1 for i in range(k)] for m in range(1, 2**k)], dtype=torch.float64)


def _solved(mat: torch.Tensor, rhs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(solutions, solvable) of the batched systems mat·x = rhs: (…, n, n), (…, n) → (…, n), (…) bool; a
    numerically singular system is not solvable (the default test of ``torch.linalg.matrix_rank``: the
    smallest singular value at most n·eps times the largest)."""
    x, info = torch.linalg.solve_ex(mat, rhs)
    sv = torch.linalg.svdvals(mat)
    tol = sv[..., 0] * mat.shape[-1] * torch.finfo(mat.dtype).eps
    ok = (info == 0) & (sv[..., -1] > tol) & torch.isfinite(x).all(-1)
    return x, ok


#: how close (in [0, 1] units) a sample must sit to a clip level to count as clipped there: far below a
#: 16-bit step (1.5e-5), above float32 rounding near 1 (6e-8); one value for SURE, the blind-spot likelihood
#: and its posterior
CLIP_TOL = 1e-7


def clip_levels(y: torch.Tensor, share: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) black and white clip levels of the samples ``y`` (B, C, h, w): the minimum (maximum) where at
    least ``share`` of the samples, and at least two, pile up on it, else −inf (+inf) — an unclipped file
    keeps its noise below black, so its minimum is a lone noisy sample (and in fewer than 1/``share``
    samples one sample is already that share)."""
    flat = y.flatten(1)
    lo, hi = flat.amin(1), flat.amax(1)
    need = max(2.0, share * flat.shape[1])
    at_lo = (flat <= lo[:, None] + CLIP_TOL).sum(1) >= need
    at_hi = (flat >= hi[:, None] - CLIP_TOL).sum(1) >= need
    inf = torch.full_like(lo, float("inf"))
    return torch.where(at_lo, lo, -inf), torch.where(at_hi, hi, inf)


def near_clips_to(
    first: torch.Tensor, out: torch.Tensor, x: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """``out`` where ``first`` (the first estimate) lies ≥ 3.5 noise std from the input ``x``'s clip levels,
    ``first`` within 1.5 std of them, a linear ramp between: SURE cannot score the samples near a clip (its
    mask, :func:`scorable`, keeps those ≥ 2.5 std away), so there its weights are unchecked. Measured on
    ``hdrplus_burst2`` (stop 69): a blind-spot network beside the shipped model lifted the shadows where other
    frames clip, 0.8–4.2 dB below the shipped model there (docs/adaptation.md). Shapes (B, 4, h, w);
    ``noise`` (B, ≥ 2, 4)."""
    lo, hi = (v.view(-1, 1, 1, 1) for v in clip_levels(x.float()))
    f = first.float()
    sd = variance_map(f, noise.float()).clamp_min(0).sqrt().clamp_min(1e-8)
    dist = torch.minimum((f - lo) / sd, (hi - f) / sd)  # +inf without clipping
    m = ((dist - 1.5) / 2).clamp(0, 1).to(out.dtype)
    return first + m * (out - first)


def scorable(levels: tuple[torch.Tensor, torch.Tensor], f: torch.Tensor, sd: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) float mask of the samples SURE may score: the estimate ``f`` at least 2.5 noise std
    ``sd`` away from the input's clip ``levels`` (:func:`clip_levels`), where the noise is not
    Gaussian-like any more."""
    lo, hi = (v.view(-1, 1, 1, 1) for v in levels)
    return ((f - 2.5 * sd > lo) & (f + 2.5 * sd < hi)).float()


__all__ = [
    "CLASSES",
    "DCT_MAX_REL_NOISE",
    "DCT_VETO",
    "LOW_BAND",
    "MARGIN",
    "PROBE",
    "SLACK",
    "WINDOW",
    "SureShrink",
    "best_weights",
    "clip_levels",
    "dct_estimate",
    "dct_gate",
    "low_band",
    "near_clips_to",
    "scorable",
    "texture_classes",
]
