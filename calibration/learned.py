"""A learned check on the single-image noise estimate: a small network that reads (λshot, λread) from a packed
mosaic, used to cap the estimate where fine texture makes the tile statistics read texture as noise.

Why: at base ISO on sharp content the tile estimator (:mod:`.single_image`) reads 2–8× the true noise std
(docs/calibration.md, "Limitations"), and a noise-aware denoiser told that much noise smooths the detail away
(−5 dB at the held-out 1× L1 rows). A network trained with the true noise of synthetic mosaics learns what
noise looks like beside texture; it has its own biases (it reads up to ≈ 1.8× on smooth bright content), so it
only *lowers* the estimate where it reads much less: ``told = estimate × min(1, CAP·σ_net / σ_est)`` (std;
σ_est the pooled fit's, or the per-plane fits' mean where that reads over ``PLANES_APART`` × the pooled).
Where the tile fit itself shows texture (its bins ``MISFIT_TEXTURED`` or more off the line, the tile
estimator's ``nlf_misfit``: 1.1–1.9× over-reads at mid noise on sharp content, where the network reads
0.94–1.21×) the network is trusted closer, ``CAP_TEXTURED``, as far as lowering the estimate by
``TEXTURED_MAX_LOWER`` at most (at base ISO, where both readings are far apart, the network can under-read).

Network (:class:`NoiseLevelNet`): input the 3×3 high-pass of each packed plane divided by its median absolute
value s₀, and the 3×3 local mean divided by the crop's mean signal x̄; five 3×3 convolutions (two of stride 2),
mean and max pooling, two linear layers → (a, b); λshot = eᵃ·S/x̄, λread = eᵇ·S with S = (s₀/0.6745)²·9/8 (the
variance of white noise behind that high-pass), so the outputs are ratios to what the crop shows. Trained
(``scripts/train_noise_estimator.py``) with the Gaussian negative log-likelihood of the true noise on
unclipped samples of synthetic mosaics of the training photos (the denoiser's camera ranges and readouts).
Units: [0, 1] after black/white level; λshot in [0, 1], λread in [0, 1]².
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

#: file name in ``rawrcl/weights`` of the shipped network (a state dict and its provenance, ``weights_only``)
WEIGHTS = "noise_estimator.pt"
#: the estimate is lowered only where the network reads a std below estimate / CAP
CAP = 1.5
#: from this ``nlf_misfit`` of the tile estimate on, its bins show texture: CAP_TEXTURED applies, down to a
#: factor 1 / TEXTURED_MAX_LOWER on the std (chosen on validation photos in two rounds, docs/calibration.md)
MISFIT_TEXTURED = 0.06
CAP_TEXTURED = 1.0
TEXTURED_MAX_LOWER = 2.0
#: the check reads the per-plane fits' mean instead of the pooled fit where that mean's std at the median
#: signal is more than this many times the pooled fit's (:func:`estimate_ratio`): on a textured mosaic at base
#: ISO the planes' fits can read far more than the joint fit of all four (a snow scene: 7×, told 11× the true
#: std, −8.9 dB), and the check must see what the model is told; nearer, ±8 % on the told std only moves a
#: photo's PSNR at random (stop 99: −0.22 … +0.35 dB at L1–L2), and a real burst's planes differ by 1.3× (its
#: red plane's read noise; docs/calibration.md, "The learned check reads the per-plane fits …")
PLANES_APART = 2.0
#: crop side in packed pixels, and at most this many crops (spread over the image) per mosaic
CROP = 128
MAX_CROPS = 24
#: crops with more clipped samples than this are not read: the network's input statistics (the high-pass's
#: median) collapse on flat clipped areas, and it then reads almost no noise (over-exposed: 100× too low)
MAX_CLIPPED = 0.05
#: when no crop is within MAX_CLIPPED even on the finer grid, the least clipped crop is read up to this share
MAX_CLIPPED_LAST = 0.20


class NoiseLevelNet(nn.Module):
    """(B, 4, h, w) packed mosaic, [0, 1] → (B, 2) [λshot, λread] (module docstring)."""

    def __init__(self, w: int = 32):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(8, w, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Linear(4 * w, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = F.avg_pool2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
        h = x - m
        s0 = h.flatten(1).abs().median(dim=1).values.clamp_min(1e-6)[:, None, None, None]
        xbar = m.flatten(1).clamp_min(0).mean(1).clamp_min(1e-4)[:, None, None, None]
        feat = self.f(torch.cat([h / s0, m / xbar], 1))
        p = self.head(torch.cat([feat.mean((2, 3)), feat.amax((2, 3))], 1)).clamp(-12, 6)
        var = (s0.flatten() / 0.6745) ** 2 * 9 / 8
        return torch.stack([torch.exp(p[:, 0]) * var / xbar.flatten(), torch.exp(p[:, 1]) * var], 1)


def build() -> NoiseLevelNet:
    """A freshly initialised network (for training)."""
    return NoiseLevelNet()


@lru_cache(maxsize=1)
def load(path: str | None = None):
    """The trained network (``path`` or the shipped :data:`WEIGHTS`), in eval mode; None when missing."""
    from importlib import resources

    ref = Path(path) if path else resources.files("rawrcl.weights") / WEIGHTS
    if not ref.is_file():
        return None
    with ref.open("rb") as fh:
        state = torch.load(fh, map_location="cpu", weights_only=True)
    net = NoiseLevelNet(int(state.get("width", 32)))
    net.load_state_dict(state["state_dict"])
    return net.eval()


def crops(packed: np.ndarray, side: int = CROP, most: int = MAX_CROPS) -> list[tuple[int, int]]:
    """Top-left corners of up to ``most`` non-overlapping ``side`` crops spread evenly over a (4, h, w) mosaic
    (one crop of the whole mosaic when it is smaller), leaving out crops with more than :data:`MAX_CLIPPED`
    clipped samples (:func:`rawrcl.calibration.tiles.clipped_mask`: white, or a pile-up at black); when that
    leaves none, the clip-free crops of a finer grid, else its least clipped crop (:func:`_finer_corners`: a
    bright photo whose every grid crop touches a clipped sky was not checked at all, docs/calibration.md)."""
    from .tiles import box_means, clipped_mask

    _, h, w = packed.shape
    clipped = np.stack([clipped_mask(p) for p in packed]).any(0)
    ys = list(range(0, max(h - side, 0) + 1, side))
    xs = list(range(0, max(w - side, 0) + 1, side))
    frac = box_means(clipped[None], ys, xs, min(side, h), min(side, w))[0]
    corners = [(y, x) for a, y in enumerate(ys) for b, x in enumerate(xs) if frac[a, b] <= MAX_CLIPPED]
    if not corners and (h > side or w > side):
        corners = _finer_corners(clipped, side)
    if len(corners) > most:
        corners = [corners[i] for i in np.linspace(0, len(corners) - 1, most).round().astype(int)]
    return corners


def _finer_corners(clipped: np.ndarray, side: int) -> list[tuple[int, int]]:
    """Top-left corners of non-overlapping ``side`` crops with at most :data:`MAX_CLIPPED` clipped samples,
    searched on a grid of stride ``side`` / 4 (edges included), the least clipped first — or, when there is
    none, the least clipped crop alone if within :data:`MAX_CLIPPED_LAST`: the fallback of :func:`crops`
    when every crop of its coarse grid is clipped. ``clipped`` (h, w) bool."""
    from .tiles import box_means

    h, w = clipped.shape
    sy, sx = min(side, h), min(side, w)  # a mosaic narrower than a crop: the crop as in crops()
    step = max(side // 4, 1)
    ys = sorted({*range(0, h - sy + 1, step), h - sy})
    xs = sorted({*range(0, w - sx + 1, step), w - sx})
    frac = box_means(clipped[None], ys, xs, sy, sx)[0].ravel()
    ranked = [((ys[i // len(xs)], xs[i % len(xs)]), frac[i]) for i in np.argsort(frac, kind="stable")]
    if MAX_CLIPPED < ranked[0][1] <= MAX_CLIPPED_LAST:
        return [ranked[0][0]]
    chosen: list[tuple[int, int]] = []
    for (y, x), f in ranked:
        if f > MAX_CLIPPED:
            break
        if all(abs(y - cy) >= side or abs(x - cx) >= side for cy, cx in chosen):
            chosen.append((y, x))
    return sorted(chosen)


def learned_std(packed: np.ndarray, x: float, net=None) -> float | None:
    """Median over :func:`crops` of the network's noise std at signal ``x`` ([0, 1] units) for a packed mosaic
    (4, h, w) in [0, 1]; None without weights, for a mosaic smaller than 16 packed pixels or without a crop
    :func:`crops` will read (clipped nearly everywhere)."""
    net = net if net is not None else load()
    packed = np.asarray(packed, dtype=np.float32)
    if net is None or min(packed.shape[1:]) < 16:
        return None
    side = min(CROP, *packed.shape[1:])
    corners = crops(packed, side)
    if not corners:
        return None
    batch = np.stack([packed[:, y : y + side, x0 : x0 + side] for y, x0 in corners])
    with torch.no_grad():
        lam = net(torch.from_numpy(np.ascontiguousarray(batch))).double().numpy()
    return float(np.median(np.sqrt(np.maximum(lam[:, 0] * x + lam[:, 1], 0.0))))


def lowered(pairs: dict, ratio: float) -> dict:
    """``{name: (λshot, λread)}`` with both λ × ratio² (the std × ratio)."""
    return {k: (float(s) * ratio**2, float(r) * ratio**2) for k, (s, r) in pairs.items()}


#: the log / report wording of a lowered estimate
NOTE = "lowered ×{:.2f} (std) by the learned check: fine texture read as noise"


def cap_ratio(packed: np.ndarray, shot: float, read: float, misfit: float = 0.0) -> float:
    """The factor (≤ 1, on the std) the estimate (λshot, λread) is lowered by: min(1, CAP·σ_net/σ_est) at the
    mosaic's median signal (clipped to [0.02, 0.5]); with the estimate's ``misfit`` (its ``nlf_misfit``) ≥
    MISFIT_TEXTURED also at most max(CAP_TEXTURED·σ_net/σ_est, 1/TEXTURED_MAX_LOWER); 1 when the network is
    not available."""
    x = median_signal(packed)
    est = float(np.sqrt(max(shot * x + read, 0.0)))
    net = learned_std(packed, x)
    if net is None or est <= 0:
        return 1.0
    ratio = CAP * net / est
    if misfit >= MISFIT_TEXTURED:
        ratio = min(ratio, max(CAP_TEXTURED * net / est, 1.0 / TEXTURED_MAX_LOWER))
    return float(min(1.0, ratio))


def median_signal(packed: np.ndarray) -> float:
    """The signal the check compares at: the median of a packed mosaic (4, h, w), clipped to [0.02, 0.5]."""
    return float(np.clip(np.median(packed), 0.02, 0.5))


def estimate_ratio(packed: np.ndarray, res) -> float:
    """:func:`cap_ratio` for a tile estimate ``res`` (a :class:`~rawrcl.calibration.result.CalibrationResult`
    of :func:`~rawrcl.calibration.single_image.estimate_packed` on ``packed``): its pooled λ — or, where the
    per-plane fits' mean λ (what a model is told, and what :func:`lowered` scales) reads a std more than
    :data:`PLANES_APART` × the pooled fit's at :func:`median_signal`, that mean — and its ``nlf_misfit``."""
    shot, read = res.pooled
    if (planes := res.plane_mean) is not None:
        x = median_signal(packed)
        if planes[0] * x + planes[1] > PLANES_APART**2 * max(shot * x + read, 0.0):
            shot, read = planes
    return cap_ratio(packed, shot, read, misfit=res.extra.get("nlf_misfit", 0.0))
