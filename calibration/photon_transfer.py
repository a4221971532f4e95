"""Photon transfer (EMVA 1288 style): (λshot, λread) from pairs of flat-field frames and dark frames.

For each exposure level with two flat frames a, b (and the mean dark frame D):

- mean signal  μ = mean((a + b)/2 − D)  over a CFA plane;
- temporal variance  σ² = var(a − b)/2  over the same plane — the difference removes every
  fixed pattern (PRNU, DSNU, vignetting, dust), so only the temporal noise remains; it equals
  λshot·μ + λread because the noise variance is linear in the local signal;
- the darks give the point (0, var(d₁ − d₂)/2) when there are at least two.

The photon-transfer line var = λshot·μ + λread is fitted per plane (weighted NNLS, weights from the
variance of a sample variance, 2σ⁴/N) on the *linear range*: levels with essentially no saturated
pixels (≤ 0.1 % at or above the saturation value) and below the variance peak. The saturation
(full-well) signal is reported as the mean at the variance maximum when the series reaches it.

Units: frames are mosaics normalised to [0, 1] after black/white level — read them with
``read_raw(path, clip=False)`` so that the dark noise is not clipped at 0. λ in [0, 1] units.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rawrcl.cfa import CHANNELS, check_pattern, pack
from rawrcl.errors import RawrclError
from rawrcl.io import folder_files

from .nlf_fit import fit_nlf
from .result import CalibrationResult, PlaneBins

SAT_FRACTION = 1e-3


def photon_transfer(
    flats: Sequence[tuple[np.ndarray, np.ndarray]],
    darks: Sequence[np.ndarray],
    pattern: str,
    *,
    saturation: float = 1.0,
    path: str | None = None,
) -> CalibrationResult:
    """Fit the photon-transfer line per CFA plane.

    Parameters
    ----------
    flats : pairs (a, b) of flat frames, each (H, W) float mosaic in [0, 1] units (values may be
        slightly negative near black), one pair per exposure level (levels may repeat).
    darks : dark frames (H, W), same units; at least one (two or more also give a dark variance point).
    pattern : Bayer phase of the frames.
    saturation : the normalised value at which the sensor/ADC clips (1.0 = white level).

    Returns
    -------
    :class:`CalibrationResult` with method ``"flats"``, per-plane λ, their 1-σ fit uncertainty, the
    per-level points in ``bins`` (``used`` marks the linear range) and in ``extra``: ``linear_range``
    (plane → [μmin, μmax]), ``full_well`` (plane → μ at the variance peak, or None if never reached),
    ``levels`` and ``dark_mean``.
    """
    pattern = check_pattern(pattern)
    if len(flats) < 2:
        raise RawrclError("photon transfer needs flat-frame pairs at two or more exposure levels")
    if len(darks) < 1:
        raise RawrclError("photon transfer needs at least one dark frame")
    shape = np.shape(darks[0])
    for f in [*darks, *(x for pair in flats for x in pair)]:
        if np.shape(f) != shape:
            raise RawrclError(
                f"all flat and dark frames must have the same size, got {np.shape(f)} and {shape}"
            )
    dk = np.stack([pack(np.asarray(d, dtype=np.float64), pattern) for d in darks])  # (n, 4, h, w)
    dark_mean = dk.mean(axis=0)
    n_pix = dark_mean.shape[-1] * dark_mean.shape[-2]
    res = CalibrationResult(path=path, method="flats")
    res.extra.update({"linear_range": {}, "full_well": {}, "levels": len(flats), "dark_mean": {}})
    pts = {c: ([], [], [], []) for c in CHANNELS}  # mean, var, count, in-linear-range
    if dk.shape[0] >= 2:
        for i, c in enumerate(CHANNELS):
            diffs = [np.var(dk[j, i] - dk[j + 1, i]) / 2 for j in range(0, dk.shape[0] - 1, 2)]
            pts[c][0].append(0.0)
            pts[c][1].append(float(np.mean(diffs)))
            pts[c][2].append(n_pix * len(diffs))
            pts[c][3].append(True)
    for i, c in enumerate(CHANNELS):
        res.extra["dark_mean"][c] = float(dark_mean[i].mean())
    for a, b in flats:
        pa = pack(np.asarray(a, dtype=np.float64), pattern)
        pb = pack(np.asarray(b, dtype=np.float64), pattern)
        for i, c in enumerate(CHANNELS):
            sat = max(
                float(np.mean(pa[i] >= saturation * (1 - 1e-6))),
                float(np.mean(pb[i] >= saturation * (1 - 1e-6))),
            )
            mu = float(((pa[i] + pb[i]) / 2 - dark_mean[i]).mean())
            var = float(np.var(pa[i] - pb[i]) / 2)
            pts[c][0].append(mu)
            pts[c][1].append(var)
            pts[c][2].append(n_pix)
            pts[c][3].append(sat <= SAT_FRACTION)
    for c in CHANNELS:
        mean, var, cnt, ok = (np.asarray(v, dtype=np.float64) for v in pts[c])
        ok = ok.astype(bool)
        order = np.argsort(mean, kind="stable")
        mean, var, cnt, ok = mean[order], var[order], cnt[order], ok[order]
        # the variance peak marks full well: beyond it the variance falls as pixels saturate
        peak = int(np.argmax(var))
        full_well = float(mean[peak]) if peak < len(var) - 1 and not ok[peak + 1 :].all() else None
        if full_well is not None:
            ok &= np.arange(len(mean)) < peak
        if ok.sum() < 2:
            raise RawrclError(
                f"plane {c}: fewer than two unsaturated exposure levels; add darker flats "
                "(the brightest usable flat should stay below saturation)"
            )
        ls, lr, rob = fit_nlf(mean[ok], var[ok], cnt[ok], robust=False)
        # 1-σ uncertainty from the weighted least-squares covariance
        a_mat = np.stack([mean[ok], np.ones(int(ok.sum()))], axis=1)
        model = np.maximum(a_mat @ np.array([ls, lr]), 1e-20)
        w = cnt[ok] / (2 * model**2)
        cov = np.linalg.pinv(a_mat.T @ (a_mat * w[:, None]))
        chi2 = float(np.sum(w * (var[ok] - model) ** 2)) / max(int(ok.sum()) - 2, 1)
        cov *= max(chi2, 1.0)
        res.per_plane[c] = (ls, lr)
        res.per_plane_err[c] = (float(np.sqrt(cov[0, 0])), float(np.sqrt(cov[1, 1])))
        res.bins[c] = PlaneBins(mean=mean, var=var, count=cnt.astype(int), used=ok)
        res.extra["linear_range"][c] = [float(mean[ok].min()), float(mean[ok].max())]
        res.extra["full_well"][c] = full_well
    return res


def _frame_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise RawrclError(f"{folder}: not a folder")
    files = folder_files(folder)
    if not files:
        raise RawrclError(f"{folder}: no files")
    return files


def calibrate_flats(flats_dir: str | Path, darks_dir: str | Path) -> CalibrationResult:
    """Photon transfer from RAW files: ``flats_dir`` holds two (or more) flats per exposure level,
    ``darks_dir`` the dark frames (any format ``read_raw`` reads).

    Flats are grouped by exposure time when every file has one, else by mean signal, and paired
    consecutively within a group; a pair whose means differ by more than 10 % is refused.
    Returns the :class:`CalibrationResult` of :func:`photon_transfer` (with make/model/iso).
    """
    from rawrcl.io.raw import read_raw

    fpaths, dpaths = _frame_files(Path(flats_dir)), _frame_files(Path(darks_dir))
    frames = [read_raw(p, clip=False) for p in fpaths]
    darks = [read_raw(p, clip=False) for p in dpaths]
    pattern = frames[0].pattern
    for r in [*frames, *darks]:
        if r.pattern != pattern or r.cfa.shape != frames[0].cfa.shape:
            raise RawrclError(f"{r.path}: size or Bayer phase differs from {frames[0].path}")
    means = [float(np.mean(r.cfa)) for r in frames]
    if all(r.exposure_time for r in frames):
        order = sorted(range(len(frames)), key=lambda i: (frames[i].exposure_time, means[i]))
    else:
        order = sorted(range(len(frames)), key=lambda i: means[i])
    if len(order) % 2:
        order = order[:-1]
    pairs = []
    for i, j in zip(order[0::2], order[1::2], strict=True):
        if abs(means[i] - means[j]) > 0.1 * max(means[i], means[j], 1e-3) + 1e-3:
            raise RawrclError(
                f"{frames[i].path} and {frames[j].path}: flats paired by exposure have different means "
                f"({means[i]:.4f}, {means[j]:.4f}); put two flats per exposure level in {flats_dir}"
            )
        pairs.append((frames[i].cfa, frames[j].cfa))
    res = photon_transfer(pairs, [d.cfa for d in darks], pattern, path=str(flats_dir))
    res.iso, res.make, res.model = frames[0].iso, frames[0].make, frames[0].model
    res.extra["flats"] = [str(p) for p in fpaths]
    res.extra["darks"] = [str(p) for p in dpaths]
    return res
