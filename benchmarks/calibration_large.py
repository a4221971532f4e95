"""Single-image estimate on large mosaics: speed at 12 MP and the accuracy cost of the tile subsample.

``--speed``: wall and CPU time of ``estimate_mosaic`` (default settings, bootstrap included) on a
generated 4000×3000 mosaic (scikit-image's astronaut, bilinearly enlarged — smooth, optics-limited
content — inverse gamma and white balance, N(0, 2e-3·x + 2e-5), 14-bit), and on a dark, black-clipped
version of it (exposure ×0.1, Poisson–Gaussian 4.5e-3·x + 6.5e-5, clipped at 0), ``--threads``
torch/BLAS threads, median of ``--repeats`` runs.

``--montage``: accuracy of the speed settings (how many tiles the estimate uses, ``max_tiles`` per
plane, 0 = all; how many centres fit the predictors, ``fit_samples``): mosaics of ``--grid``×``--grid``
central 320×320 crops of the photos (CBSD68 by default: 6×6 → 1920×1920, ≈ 14 000 tiles and 920 000
centres per site), noise from the paper sampler (σ ∈ [0, 20] 8-bit), relative error of the
plane-average std at x = 0.1 and 0.5 per setting on the *same* noisy mosaics, plus the median absolute
difference to the first setting (the reference: all tiles, 200 000 centres — the estimator before the
speed work).

Usage: ``python benchmarks/calibration_large.py --speed [--threads 2] [--repeats 3]`` /
``python benchmarks/calibration_large.py --montage [--settings "max_tiles=0;;max_tiles=4096"]``
(settings separated by ";", an empty one = the defaults)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rawrcl.calibration import estimate_mosaic, noisy_mosaic

from calibration import clean_mosaic, load_photos
from rawrcl.noise import NoiseModel, PaperSampler

#: noise of the speed mosaics: (λshot, λread), normal and dark
SPEED_NLF = {False: (2e-3, 2e-5), True: (4.5e-3, 6.5e-5)}


def speed_mosaic(seed: int = 0, dark: bool = False) -> np.ndarray:
    """The generated 12 MP test mosaic (3000, 4000) float32 in [0, 1]: λshot 2e-3, λread 2e-5, clipped at
    white; ``dark``: exposure ×0.1, Poisson λshot 4.5e-3, λread 6.5e-5, clipped at 0 (black-clipped)."""
    from scipy.ndimage import zoom
    from skimage import data

    clean = clean_mosaic(zoom(data.astronaut(), (3000 / 512, 4000 / 512, 1), order=1))
    ls, lr = SPEED_NLF[dark]
    if dark:
        return noisy_mosaic(
            0.1 * clean, NoiseModel(ls, lr, poisson=True), np.random.default_rng(seed), clip="both"
        )
    return noisy_mosaic(clean, NoiseModel(ls, lr), np.random.default_rng(seed))


def speed(threads: int, repeats: int, dark: bool = False, **settings) -> None:
    import torch

    torch.set_num_threads(threads)
    m = speed_mosaic(dark=dark)
    ls, lr = SPEED_NLF[dark]
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        r = estimate_mosaic(m, "RGGB", **settings)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    xs = (0.01, 0.1) if dark else (0.1, 0.5)
    err = [r.std_at(x) / np.sqrt(ls * x + lr) - 1 for x in xs]
    print(
        f"12 MP {'dark black-clipped ' if dark else ''}mosaic, {threads} threads, {settings or 'defaults'}: "
        f"wall median {np.median(walls):.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}), CPU median "
        f"{np.median(cpus):.2f} s; std error "
        + ", ".join(f"x={x} {100 * e:+.2f} %" for x, e in zip(xs, err, strict=True))
    )


def parse_settings(text: str) -> dict:
    """ "max_tiles=0,fit_samples=200000" → {"max_tiles": 0, "fit_samples": 200000} ("" → {})."""
    return {k.strip(): int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv.strip())}


def montages(photos, grid: int, count: int, seed: int) -> list[np.ndarray]:
    """``count`` (grid·320, grid·320, 3) uint8 montages of central 320×320 crops, photos drawn at random."""
    rng = np.random.default_rng(seed)
    crops = []
    for _, ph in photos:
        h, w = ph.shape[:2]
        crops.append(ph[(h - 320) // 2 : (h - 320) // 2 + 320, (w - 320) // 2 : (w - 320) // 2 + 320])
    out = []
    for _ in range(count):
        pick = rng.choice(len(crops), grid * grid, replace=len(crops) < grid * grid)
        rows = [
            np.concatenate([crops[k] for k in pick[r * grid : (r + 1) * grid]], axis=1) for r in range(grid)
        ]
        out.append(np.concatenate(rows, axis=0))
    return out


def montage_table(
    photos, grid: int, count: int, draws: int, prefilter: float, settings: list[str], seed: int
):
    rng = np.random.default_rng(seed)
    caps = settings
    errs = {c: [] for c in caps}
    secs = {c: [] for c in caps}
    for mont in montages(photos, grid, count, seed):
        clean = clean_mosaic(mont, prefilter)
        for _ in range(draws):
            nm = PaperSampler(0, 20)(rng)
            noisy = noisy_mosaic(clean, nm, rng)
            true = np.array([np.sqrt(nm.lambda_shot * x + nm.lambda_read) for x in (0.1, 0.5)])
            for c in caps:
                t = time.perf_counter()
                r = estimate_mosaic(noisy, "RGGB", bootstrap=0, **parse_settings(c))
                secs[c].append(time.perf_counter() - t)
                errs[c].append(np.array([r.std_at(x) for x in (0.1, 0.5)]) / true - 1)
    print(f"\n{grid}×{grid} montages of 320² crops, prefilter {prefilter:g}: {count} × {draws} draws")
    print("settings".ljust(34) + "x    median|e|  p90|e|   bias  median|Δ vs ref|  s/estimate")
    ref = np.array(errs[caps[0]])
    for c in caps:
        e = np.array(errs[c])
        for k, x in enumerate((0.1, 0.5)):
            d = np.median(np.abs((1 + e[:, k]) / (1 + ref[:, k]) - 1))
            cells = (
                f"{(c or 'defaults') if k == 0 else '':<34}{x:<4} {100 * np.median(np.abs(e[:, k])):>8.1f}% "
            )
            cells += f"{100 * np.quantile(np.abs(e[:, k]), 0.9):>7.1f}% {100 * np.median(e[:, k]):>+6.1f}% "
            cells += f"{100 * d:>14.2f}%  " + (f"{np.median(secs[c]):>10.2f}" if k == 0 else "")
            print(cells)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--montage", action="store_true")
    ap.add_argument("--photos", help="photo folder or 'skimage' (default: CBSD68 beside the checkout)")
    ap.add_argument("--grid", type=int, default=6)
    ap.add_argument("--montages", type=int, default=8)
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--prefilter", default="0,1")
    ap.add_argument(
        "--settings",
        default="max_tiles=0,fit_samples=200000;;max_tiles=4096",
        help="';'-separated estimator settings, one row each ('' = defaults); the first is the reference",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.speed:
        speed(args.threads, args.repeats)
        speed(args.threads, args.repeats, dark=True)
    if args.montage:
        import torch

        torch.set_num_threads(1)
        photos = load_photos(args.photos, None)
        rows = args.settings.split(";")
        for pf in (float(v) for v in args.prefilter.split(",")):
            montage_table(photos, args.grid, args.montages, args.draws, pf, rows, args.seed)
    if not (args.speed or args.montage):
        ap.error("give --speed and/or --montage")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
