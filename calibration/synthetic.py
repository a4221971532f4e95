"""Synthetic data with known noise: flat/dark frame series for photon transfer, and the ADC readout
(quantisation, clipping) of noisy mosaics.

Clean mosaics come from ``rawrcl.isp`` (``unprocess``, ``srgb_to_linear``) and ``rawrcl.cfa.mosaic``,
noise from ``rawrcl.noise.NoiseModel.sample``. Used by the unit tests and
``benchmarks/calibration.py``; also handy to try the CLI without a camera.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rawrcl.cfa import check_pattern
from rawrcl.errors import RawrclError
from rawrcl.noise import NoiseModel


def readout(noisy: np.ndarray, *, bits: int | None = 14, clip: str = "white") -> np.ndarray:
    """What an ADC makes of a noisy signal ([0, 1] units, any shape): quantised to ``bits`` bits over
    [0, 1] (None: not quantised) and clipped — ``"white"`` at the white level 1 only (a sensor with a
    black-level pedestal, read with ``read_raw(path, clip=False)``), ``"both"`` to [0, 1] (black
    already subtracted and clipped at 0, as many phone DNGs, or ``read_raw``'s default), ``"none"``.
    Returns float32."""
    if clip not in ("white", "both", "none"):
        raise RawrclError(f"clip must be 'white', 'both' or 'none', got {clip!r}")
    x = np.asarray(noisy, dtype=np.float64)
    if bits is not None:
        q = float(2**bits - 1)
        x = np.round(x * q) / q
    if clip == "white":
        x = np.minimum(x, 1.0)
    elif clip == "both":
        x = np.clip(x, 0.0, 1.0)
    return x.astype(np.float32)


def noisy_mosaic(
    clean: np.ndarray,
    noise: NoiseModel,
    rng: np.random.Generator,
    *,
    bits: int | None = 14,
    clip: str = "white",
) -> np.ndarray:
    """A noisy capture of a clean mosaic (H, W) in [0, 1]: ``noise.sample`` (seeded from ``rng``;
    scalar λ, or per packed plane when given 4 values — then ``clean`` is taken as RGGB), then
    :func:`readout`. Returns (H, W) float32."""
    import torch

    from rawrcl.cfa import pack, unpack

    gen = torch.Generator().manual_seed(int(rng.integers(0, 2**63 - 1)))
    x = torch.from_numpy(np.asarray(clean, dtype=np.float64))
    if np.ndim(noise.lambda_shot) or np.ndim(noise.lambda_read):
        out = unpack(noise.sample(pack(x, "RGGB"), gen), "RGGB", tuple(x.shape)).numpy()
    else:
        out = noise.sample(x[None], gen)[0].numpy()
    return readout(out, bits=bits, clip=clip)


def dark_mosaic(
    photo: np.ndarray,
    rng: np.random.Generator,
    *,
    level: tuple[float, float] = (0.1, 0.3),
    pattern: str = "RGGB",
) -> np.ndarray:
    """Clean mosaic of a dark capture of an sRGB photo (H, W, 3) (uint8 or float in [0, 1]): Brooks et al.
    unprocessing with a random camera (``rawrcl.isp.unprocess``), exposure scaled so that the 99th
    percentile of the linear image lands at U(``level``), Bayer sampling (``rawrcl.cfa.mosaic``). Give it
    Poisson–Gaussian noise and clip at 0 (``noisy_mosaic(..., NoiseModel(ls, lr, poisson=True),
    clip="both")``) for the black-clipped files of phones. Returns (H, W) float64 in [0, 1]."""
    from rawrcl.cfa import mosaic
    from rawrcl.isp import unprocess

    p = np.asarray(photo)
    srgb = (p.astype(np.float64) / 255.0 if p.dtype == np.uint8 else p.astype(np.float64)).transpose(2, 0, 1)
    lin, _ = unprocess(srgb, rng)
    gain = rng.uniform(*level) / max(float(np.quantile(lin, 0.99)), 1e-3)
    return mosaic(lin * gain, check_pattern(pattern))[0]


def flat_series(
    lambda_shot: float | tuple[float, float, float, float],
    lambda_read: float | tuple[float, float, float, float],
    *,
    levels: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9, 1.05, 1.2),
    shape: tuple[int, int] = (128, 128),
    prnu: float = 0.01,
    dsnu: float = 0.002,
    pattern: str = "RGGB",
    n_darks: int = 2,
    full_well: float = 1.0,
    vignetting: float = 0.1,
    bits: int | None = 14,
    seed: int = 0,
) -> dict:
    """Synthetic photon-transfer series: two flat frames per exposure level plus dark frames.

    The same fixed-pattern noise is applied to every frame: PRNU (relative gain, std ``prnu``) and
    DSNU (offset, std ``dsnu`` in [0, 1] units); a smooth vignetting falloff (fraction at the corner)
    makes the flats non-uniform, as real ones are. Noise is Gaussian with variance λshot·x + λread
    per CFA plane (λ given as one value or 4 values for the canonical planes R, G1, G2, B), then the
    signal saturates at ``full_well`` (levels above it give saturated frames, as an exposure series
    normally ends) and is quantised to ``bits`` bits. Values are *not* clipped at 0: like a real
    sensor with a black-level pedestal, the dark noise stays symmetric (read such files with
    ``read_raw(path, clip=False)``).

    Returns a dict with ``flats`` (list of (frame_a, frame_b) float32 (H, W) pairs), ``darks`` (list of
    (H, W)), ``levels``, ``pattern`` and the truth ``lambda_shot``, ``lambda_read`` (4-lists, [0, 1]
    units).
    """
    from rawrcl.cfa import unpack

    pattern = check_pattern(pattern)
    rng = np.random.default_rng(seed)
    h, w = shape
    ls = np.broadcast_to(np.asarray(lambda_shot, dtype=np.float64), (4,))
    lr = np.broadcast_to(np.asarray(lambda_read, dtype=np.float64), (4,))
    ls_map = unpack(np.broadcast_to(ls[:, None, None], (4, h // 2, w // 2)).copy(), pattern, (h, w))
    lr_map = unpack(np.broadcast_to(lr[:, None, None], (4, h // 2, w // 2)).copy(), pattern, (h, w))
    gain = 1.0 + prnu * rng.standard_normal((h, w))
    offset = dsnu * rng.standard_normal((h, w))
    yy, xx = np.mgrid[0:h, 0:w]
    r2 = ((yy - h / 2) / (h / 2)) ** 2 + ((xx - w / 2) / (w / 2)) ** 2
    vig = 1.0 - vignetting * r2 / 2.0

    def frame(level: float) -> np.ndarray:
        x = level * vig * gain
        n = x + offset + rng.standard_normal((h, w)) * np.sqrt(ls_map * np.clip(x, 0, None) + lr_map)
        n = np.minimum(n, full_well)
        if bits is not None:
            q = float(2**bits - 1)
            n = np.round(n * q) / q
        return n.astype(np.float32)

    flats = [(frame(lv), frame(lv)) for lv in levels]
    darks = [frame(0.0) for _ in range(n_darks)]
    return {
        "flats": flats,
        "darks": darks,
        "levels": list(levels),
        "pattern": pattern,
        "lambda_shot": [float(v) for v in ls],
        "lambda_read": [float(v) for v in lr],
    }


def write_series_dngs(
    series: dict,
    flats_dir: str | Path,
    darks_dir: str | Path,
    *,
    black_level: int = 512,
    white_level: int = 16383,
    iso: float | None = 100,
    make: str = "rawrcl",
    model: str = "synthetic",
) -> tuple[list[Path], list[Path]]:
    """Write a :func:`flat_series` as DNG files (``rawrcl.io.dng.write_dng``): flats as
    ``flat_<level>_<a|b>.dng`` in ``flats_dir``, darks as ``dark_<i>.dng`` in ``darks_dir``."""
    from rawrcl.io.dng import write_dng

    flats_dir, darks_dir = Path(flats_dir), Path(darks_dir)
    flats_dir.mkdir(parents=True, exist_ok=True)
    darks_dir.mkdir(parents=True, exist_ok=True)

    def to_dn(f: np.ndarray) -> np.ndarray:
        return np.round(black_level + f.astype(np.float64) * (white_level - black_level)).astype(np.uint16)

    kw = dict(iso=iso, make=make, model=model)
    fpaths, dpaths = [], []
    for i, (a, b) in enumerate(series["flats"]):
        for tag, f in (("a", a), ("b", b)):
            p = flats_dir / f"flat_{i:02d}_{tag}.dng"
            write_dng(p, to_dn(f), series["pattern"], black_level, white_level, **kw)
            fpaths.append(p)
    for i, d in enumerate(series["darks"]):
        p = darks_dir / f"dark_{i:02d}.dng"
        write_dng(p, to_dn(d), series["pattern"], black_level, white_level, **kw)
        dpaths.append(p)
    return fpaths, dpaths
