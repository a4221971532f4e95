"""Dark, black-clipped captures — the low-light phone case — for ``benchmarks/calibration.py --dark``,
and the estimate on the real burst for reference (``python benchmarks/calibration_dark.py --burst``).

Simulation: sRGB photo → random camera (Brooks et al. unprocessing) and a dark exposure (99th percentile
of the linear image at 0.1–0.3; ``rawrcl.calibration.dark_mosaic``) → RGGB mosaic → Poisson–Gaussian
noise with :func:`dark_sampler` → clip at 0 (black level already subtracted) → 12-bit quantisation.
Scored by the relative error of the predicted plane-average noise std at x = 0.01, 0.03, 0.1 (where
such images have their pixels) and 0.5 (an extrapolation for them).

``--burst``: the single-image estimate of the real low-light burst ``../shared/data/raw/hdrplus_burst2``
(black-clipped, GRBG) against the noise-level function measured on the burst from frame differences
by others (λshot 4.5e-3, λread 6.5e-5). A report, never a tuning target.

Usage: ``python benchmarks/calibration_dark.py [--photos DIR|skimage] [--limit N] [--draws 2] [--burst]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from rawrcl.calibration import noisy_mosaic

from calibration import load_photos
from rawrcl.noise import NoiseModel

BURST = Path(__file__).resolve().parents[2] / "shared" / "data" / "raw" / "hdrplus_burst2"
BURST_NLF = (4.5e-3, 6.5e-5)


DARK_X = (0.01, 0.03, 0.1, 0.5)


def dark_sampler(rng: np.random.Generator) -> NoiseModel:
    """Low-light phone noise: λshot log-uniform in [1e-3, 1.2e-2], λread log-uniform in [1e-5, 2e-4]
    (independently), Poisson shot noise."""
    ls = float(np.exp(rng.uniform(np.log(1e-3), np.log(1.2e-2))))
    lr = float(np.exp(rng.uniform(np.log(1e-5), np.log(2e-4))))
    return NoiseModel(ls, lr, poisson=True)


def dark_table(photos, draws: int, seed: int, estimate=None, bits: int = 12) -> dict:
    """Dark, black-clipped captures (``rawrcl.calibration.dark_mosaic``: random camera, 99th percentile
    of the linear image at 0.1–0.3; :func:`dark_sampler` noise; clipped at 0, ``bits``-bit): relative
    error of the predicted std at x = 0.01, 0.03, 0.1, 0.5 (a failed estimate counts as infinite).
    ``estimate(noisy) -> (λshot, λread)`` replaces the library's default estimator (e.g. another
    version of it, to compare)."""
    from rawrcl.calibration import dark_mosaic, estimate_mosaic

    rng = np.random.default_rng(seed)
    errs, zeros, fails, t0 = [], [], 0, time.perf_counter()
    for _, ph in photos:
        clean = dark_mosaic(ph, rng)
        for _ in range(draws):
            nm = dark_sampler(rng)
            noisy = noisy_mosaic(clean, nm, rng, bits=bits, clip="both")
            zeros.append(float(np.mean(noisy == 0)))
            true = np.sqrt(nm.lambda_shot * np.array(DARK_X) + nm.lambda_read)
            try:
                if estimate is None:
                    r = estimate_mosaic(noisy, "RGGB", bootstrap=0)
                    lam = (r.lambda_shot, r.lambda_read)
                else:
                    lam = estimate(noisy)
                errs.append(np.sqrt(lam[0] * np.array(DARK_X) + lam[1]) / true - 1)
            except Exception as exc:  # counted as a failure (infinite error)
                fails += 1
                errs.append(np.full(len(DARK_X), np.inf))
                print(f"  estimate failed: {exc}")
    e = np.array(errs)
    return {
        "n": len(errs),
        "fails": fails,
        "errors": e,
        "zeros": np.median(zeros),
        "seconds": time.perf_counter() - t0,
    }


def print_dark(rows: list[tuple[str, dict]]) -> None:
    print("\nDark, black-clipped captures: relative error of the predicted noise std (plane average)")
    hdr = "setting".ljust(34) + "n".rjust(5) + "fails".rjust(6) + "zeros".rjust(7) + "x".rjust(6)
    hdr += "median|e|".rjust(10) + "p90|e|".rjust(8) + "≤10%".rjust(6) + "≤25%".rjust(6) + "bias".rjust(8)
    print(hdr)
    print("-" * len(hdr))
    for name, t in rows:
        e = t["errors"]
        for k, x in enumerate(DARK_X):
            a = np.abs(e[:, k])
            bias = (
                np.median(np.where(np.isfinite(e[:, k]), e[:, k], np.nan))
                if np.isfinite(e[:, k]).any()
                else np.nan
            )
            first = k == 0
            cells = (name if first else "").ljust(34) + (str(t["n"]) if first else "").rjust(5)
            cells += (str(t["fails"]) if first else "").rjust(6) + (
                f"{100 * t['zeros']:.0f}%" if first else ""
            ).rjust(7)
            cells += f"{x:>6}{100 * np.median(a):>9.1f}%{100 * np.quantile(a, 0.9):>7.1f}%"
            cells += f"{100 * np.mean(a <= 0.1):>5.0f}%{100 * np.mean(a <= 0.25):>5.0f}%{100 * bias:>+7.1f}%"
            print(cells)
    print(
        "(photo → random camera, dark exposure → RGGB mosaic → Poisson–Gaussian noise, λshot ∈ [1e-3, "
        "1.2e-2], λread ∈ [1e-5, 2e-4] log-uniform → clip at 0 → 12-bit; zeros: median fraction at 0)"
    )


def burst_report(frames: list[str]) -> None:
    """The estimate on frames of the real burst against its frame-difference NLF (a report only)."""
    from rawrcl.calibration import estimate_mosaic

    from rawrcl.io.raw import read_raw

    xs = (0.01, 0.03, 0.1)
    true = np.sqrt(BURST_NLF[0] * np.array(xs) + BURST_NLF[1])
    print(f"\nReal burst {BURST} against λshot {BURST_NLF[0]:g}, λread {BURST_NLF[1]:g} (frame differences)")
    for f in frames:
        raw = read_raw(BURST / f"{f}.dng", clip=False)
        t = time.perf_counter()
        r = estimate_mosaic(raw.cfa, raw.pattern)
        dt = time.perf_counter() - t
        e = [r.std_at(x) / s - 1 for x, s in zip(xs, true, strict=True)]
        avg = np.mean([v for v in r.per_plane.values()], axis=0)
        e_avg = [np.sqrt(avg[0] * x + avg[1]) / s - 1 for x, s in zip(xs, true, strict=True)]
        print(
            f"{f}: λshot {r.lambda_shot:.3g}, λread {r.lambda_read:.3g} (joint fit; {dt:.1f} s), std error "
            + ", ".join(f"x={x}: {100 * v:+.0f}%" for x, v in zip(xs, e, strict=True))
            + f"; mean of the per-plane fits λ ({avg[0]:.3g}, {avg[1]:.3g}): "
            + ", ".join(f"{100 * v:+.0f}%" for v in e_avg)
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--photos", help="photo folder or 'skimage' (default: CBSD68 beside the checkout)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--burst", action="store_true", help="also report the estimate on the real burst")
    ap.add_argument("--frames", default="frame00", help="comma-separated burst frames (with --burst)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    photos = load_photos(args.photos, args.limit)
    print(f"{len(photos)} photos × {args.draws} noise draws")
    print_dark([("dark, clipped at 0, 12-bit", dark_table(photos, args.draws, args.seed + 2))])
    if args.burst:
        if not BURST.is_dir():
            print(f"(no burst at {BURST})")
        else:
            burst_report(args.frames.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
