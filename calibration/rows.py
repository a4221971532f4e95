"""Row noise (banding) of one RAW file, from the file alone.

Many sensors add an offset shared by every sample of a readout row (column-parallel ADCs, row-wise
reset): y = x + n + b_r with b_r ~ N(0, σ_row²) independent per mosaic row, on top of the white
Poisson–Gaussian noise n. On the packed RGGB planes [R, G1, G2, B] of shape (4, h, w), planes 0–1 share
the offset of mosaic row 2k and planes 2–3 that of row 2k + 1.

Estimator (:func:`estimate_row_noise`): per plane, the vertical second difference
d = y[k] − (y[k−1] + y[k+1])/2 removes smooth scene content and turns the row offsets into
b_k − (b_{k−1} + b_{k+1})/2, variance 1.5·σ_row². Each plane's columns are cut into ``blocks`` blocks and
the median of d along each row is taken per block (over samples clear of the clip floor and of white:
clipped samples carry no offset). The two planes of a mosaic row see the same offset, so any two block
medians of one mosaic row from *different* column blocks share 1.5·σ_row² of covariance while their white
noise and (mostly) their scene content are independent: σ_row² = mean of those cross-block products / 1.5,
over rows trimmed of outliers (edges spanning a whole block). No white-noise correction is needed, and a
file without row noise gives ≈ 0 (negative estimates are reported as 0). Units: [0, 1] after black/white
level, like λshot and λread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

#: row offsets below this fraction of the white noise's std (or within 3 standard errors of 0) are reported
#: but not used: the HDR+ burst, which has no row noise (its reference residual's row means are
#: uncorrelated across colour parities), reads 0.05–0.10 on its dark, mostly clipped frames
ROW_SIGNIFICANT = 0.2


def estimate_row_noise(
    packed: np.ndarray | torch.Tensor, noise: torch.Tensor, floor: float | None = None, blocks: int = 4
) -> dict:
    """σ_row of a packed RGGB file (4, h, w) in [0, 1] with white noise ``noise`` (2, 4) [λshot; λread]
    and clip ``floor`` (None: not clipped).

    Returns ``{"row": σ_row, "stderr": its standard error, "white": the white noise std at the file's
    median signal, "ratio": σ_row/white, "rows": mosaic rows used}``."""
    y = torch.as_tensor(np.asarray(packed), dtype=torch.float32)
    if y.ndim != 3 or y.shape[0] != 4 or y.shape[1] < 8 or y.shape[2] < 16 * blocks:
        raise ValueError(f"expected packed RGGB planes (4, h ≥ 8, w ≥ {16 * blocks}), got {tuple(y.shape)}")
    lam = torch.as_tensor(noise, dtype=torch.float32).reshape(2, 4)
    white = math.sqrt(float((lam[0] * y.median().clamp_min(0) + lam[1]).mean()))
    d = y[:, 1:-1] - 0.5 * (y[:, :-2] + y[:, 2:])  # (4, h-2, w)
    local = (y[:, :-2] + y[:, 1:-1] + y[:, 2:]) / 3
    sd = (lam[0, :, None, None] * local.clamp_min(0) + lam[1, :, None, None]).sqrt()
    ok = (local + 3 * sd) < 1.0
    if floor is not None:  # a clipped sample carries no offset: keep samples well above the floor
        ok &= (local - floor) > 3 * sd
    d = torch.where(ok, d, torch.full_like(d, math.nan))
    w = d.shape[2] // blocks * blocks
    med = torch.nanmedian(d[..., :w].reshape(4, d.shape[1], blocks, w // blocks), dim=3).values
    cnt = ok[..., :w].reshape(4, d.shape[1], blocks, w // blocks).sum(3)
    med = torch.where(cnt >= 8, med, torch.full_like(med, math.nan))  # (4, h-2, blocks)
    vals, n_rows = [], 0
    for planes in ((0, 1), (2, 3)):  # one mosaic row parity: (2 planes × blocks) readings per row
        m = med[list(planes)].permute(1, 0, 2).reshape(d.shape[1], -1)  # (rows, 2·blocks)
        m = m[torch.isfinite(m).all(1)]
        if m.shape[0] < 8:
            continue
        m = m - m.median(0).values
        scale = 1.4826 * m.abs().median(0).values.clamp_min(1e-12)
        m = m[(m.abs() <= 6 * scale).all(1)]  # rows crossed by a strong edge
        col = torch.arange(m.shape[1]) % blocks
        a, b = torch.triu_indices(m.shape[1], m.shape[1], 1)
        cross = col[a] != col[b]
        vals.append((m[:, a[cross]] * m[:, b[cross]]).mean(1))  # per row: mean cross-block product
        n_rows += m.shape[0]
    if not vals or n_rows < 16:
        return {"row": 0.0, "stderr": math.inf, "white": white, "ratio": 0.0, "rows": n_rows}
    per_row = torch.cat(vals) / 1.5
    s2 = float(per_row.mean())
    se2 = float(per_row.std()) / math.sqrt(per_row.numel())
    row = math.sqrt(max(s2, 0.0))
    stderr = se2 / (2 * row) if row > 0 else math.sqrt(max(se2, 0.0))
    ratio = row / white if white else 0.0
    return {"row": row, "stderr": stderr, "white": white, "ratio": ratio, "rows": n_rows}


def used_row_noise(
    packed: np.ndarray | torch.Tensor, noise: torch.Tensor, floor: float | None = None
) -> tuple[float, dict | None]:
    """(σ_row to use, the :func:`estimate_row_noise` result) for one packed file: the estimate where
    :func:`significant_row_noise`, else 0; ``(0.0, None)`` for a file too small to estimate."""
    try:
        est = estimate_row_noise(packed, noise, floor)
    except ValueError:
        return 0.0, None
    return significant_row_noise(est), est


def camera_row_noise(rows: Sequence[float]) -> tuple[float, float]:
    """(σ_cam, σ_min) of a banded camera from the σ_row of its files that band (> 0; at least one): the
    median, and half the smallest — a file of the camera read below σ_min is taken to have no
    banding (:func:`camera_file_rows`), as the row switch of a row-aware model does."""
    banded = sorted(float(r) for r in rows if r > 0)
    if not banded:
        raise ValueError("camera_row_noise needs at least one banded file")
    return float(np.median(banded)), 0.5 * banded[0]


def camera_file_rows(est: dict | None, camera: tuple[float, float]) -> float:
    """The σ_row to remove from one file of the banded ``camera`` = (σ_cam, σ_min) (:func:`camera_row_noise`)
    given the file's :func:`estimate_row_noise` result (None: too small to estimate): σ_cam when the estimate
    reaches σ_min, or when there is none (no usable rows: dark, clipped — measured on a banded synthetic
    camera, one test photo of ten had none and gained 2.5 dB de-banded at σ_cam), else 0. On banding-free
    held-out mosaics (sunhays80, the camera ladder) the estimates stayed below σ_min, but facade stripes
    (urban100) read in a banded camera's own range: 14 of 500 such mosaics pass, and de-banding them costs
    up to 12 dB — why ``rawrcl adapt``'s ``deband`` is off by default (docs/adaptation.md)."""
    sigma, lo = camera
    if est is None or not math.isfinite(est["stderr"]) or est["row"] >= lo:
        return float(sigma)
    return 0.0


def fixed_row_noise(setting: str) -> float | None:
    """A :func:`parse_row_noise` setting as a std: ``"off"`` → 0, a number → it, ``"auto"`` → None (estimate
    it: :func:`used_row_noise`)."""
    return None if setting == "auto" else 0.0 if setting == "off" else float(setting)


def significant_row_noise(est: dict) -> float:
    """The σ_row of an :func:`estimate_row_noise` result to use: the estimate when it is at least
    :data:`ROW_SIGNIFICANT` of the white std and 3 standard errors, else 0."""
    used = est["ratio"] >= ROW_SIGNIFICANT and est["row"] > 3 * est["stderr"]
    return float(est["row"]) if used else 0.0


def parse_row_noise(value: str | float | None, option: str = "--row-noise") -> str:
    """The one spelling of a row-noise setting: ``"off"``, ``"auto"`` or a std in [0, 1) as ``repr(float)``;
    anything else raises :class:`~rawrcl.errors.RawrclError` (one line naming ``option``)."""
    from rawrcl.errors import RawrclError

    text = str(value).strip().lower()
    if text in ("auto", "off"):
        return text
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 <= v < 1):
        raise RawrclError(f"{option} {value!r}: expected auto, off or a std in [0, 1)")
    return repr(v)
