"""How far to trust the registered burst reference: a synthetic burst with a known truth (issues 19 and 20).

``rawrcl eval --burst`` scores frame 00 against the mean of the other frames registered to it. That reference
carries noise (accounted for: the ceiling, the true-error equivalent) and a systematic error (not accounted
for): each frame is resampled by the registration's cubic warp on the half-resolution packed planes, which
blurs and aliases sharp content. This script measures both against the truth.

A montage of 4 photos (2×2, each 512×384), linear, scaled and tinted to a dark warm scene like
``hdrplus_burst2`` (mean ≈ 0.05, R:G:B gains 1 : 0.4 : 0.3) — or, with ``--scene DIR``, a real burst's own
content (its frame 00 through the JDD default: smoother than the real scene) — is moved by a random sub-pixel
translation per frame (up to ±``--shift`` px; frame 00 unmoved; quintic spline, so each frame's truth is
exact), sampled on a GRBG mosaic and given Poisson–Gaussian noise with the per-plane λ of
``hdrplus_burst2``'s single-image estimate, clipped at 0. Each method's frame-00 output is scored against the
burst reference (strict mask, 32-px border: what ``eval --burst`` reports) and against the truth (same
pixels).

Rows: the noisy frame, the shipped RAW denoiser (true λ), GAT+BM3D (true λ), the denoiser's output blurred
(a Gaussian of ``--blur`` packed px: does the reference reward smoothing?) and, with ``--n2n STEPS``, the
denoiser's first stage trained without guard on frames 01–08 against the other training frames registered to
each (``benchmarks/adapt.py``'s burst Noise2Noise: does training on such references learn their error?).

``--encode`` makes the files as ``hdrplus_burst2``'s really are: the noise drawn on 10-bit linear codes,
then Rec. 709-encoded (``docs/real_noise.md``); ``--exposure`` brightens the scene; ``--estimate`` adds the
default and GAT+BM3D told the single-image estimate (what the commands do; for an encoded file there is no
true λ); ``--jdd`` (with ``--estimate``) the JDD default and, with ``--gharbi DIR``, Gharbi et al. 2016, at
the CFA sites; ``--linearise`` (with ``--encode --estimate``) the default run on the decoded values (inverse
Rec. 709, the single-image estimate of the decoded mosaic) and re-encoded; ``--write DIR`` saves the frames as
DNGs and every frame's truth, to measure any command (``rawrcl adapt``, ``rawrcl denoise``) against the truth.

    python benchmarks/burst_truth.py [--photos DIR --first 40 --seed 0 --n2n 400 --json out.json]
    python benchmarks/burst_truth.py --encode --exposure 4 --estimate [--write DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
SHARED = Path(__file__).resolve().parents[2] / "shared"

#: hdrplus_burst2's frame-00 single-image estimate, per packed plane R, G1, G2, B ([0, 1] units)
LAMBDA_SHOT = (2.78e-3, 2.71e-3, 2.75e-3, 2.91e-3)
LAMBDA_READ = (3.9e-4, 5.6e-5, 5.6e-5, 1.0e-4)
PATTERN = "GRBG"


def photo_scene(photos: list[Path]) -> np.ndarray:
    """(H, W, 3) linear scene: a 2×2 montage of 4 photos, dark and warm like ``hdrplus_burst2``."""
    from PIL import Image

    from rawrcl.isp import srgb_to_linear

    tiles = [
        np.asarray(Image.open(p).convert("RGB").resize((512, 384)), np.float32) / 255 for p in photos[:4]
    ]
    srgb = np.concatenate([np.concatenate(tiles[:2], 1), np.concatenate(tiles[2:], 1)], 0)
    return srgb_to_linear(srgb) * np.array([1.0, 0.4, 0.3], np.float32) * 0.35


def burst_scene(folder: str) -> np.ndarray:
    """(H, W, 3) linear scene with a real burst's content: its frame 00 through the shipped JDD default (told
    the single-image estimate). Smoother than the real scene (denoising blurs fine texture), so the systematic
    error measured on it is a lower bound for that burst."""
    from rawrcl.data.noisy_crops import load_noise_files
    from rawrcl.infer import TileOptions, jdd_cfa
    from rawrcl.io.raw import read_raw
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.models.loading import load_for_task

    first = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() == ".dng")[0]
    raw = read_raw(first)
    model, _ = load_for_task(None, "jdd")
    with torch.no_grad():
        rgb = jdd_cfa(
            WithNoise(model, load_noise_files([first])[0].noise, 4), raw.cfa, raw.pattern, TileOptions()
        )
    rgb = np.moveaxis(np.asarray(rgb), 0, -1)
    h, w = (rgb.shape[0] - 64) // 2 * 2, (rgb.shape[1] - 64) // 2 * 2
    return np.clip(rgb[32 : 32 + h, 32 : 32 + w], 0, None).astype(np.float32)


#: hdrplus_burst2's quantisation step per packed plane R, G1, G2, B in its file's values (16-bit DN, in the
#: linear part of its Rec. 709 encoding: 10-bit codes times the white-balance gains, × 4.5)
CODE_STEP = (724, 306, 306, 396)


def rec709(u: np.ndarray) -> np.ndarray:
    """Rec. 709 transfer curve, linear [0, 1] → encoded: 4.5·u below 0.018, 1.099·u^0.45 − 0.099 above."""
    u = np.asarray(u, np.float64)
    return np.where(u < 0.018, 4.5 * u, 1.099 * np.maximum(u, 0.018) ** 0.45 - 0.099)


def inverse_rec709(v: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rec709`, encoded [0, 1] → linear: v / 4.5 below 0.081, ((v + 0.099) / 1.099)^(1/0.45)
    above."""
    v = np.asarray(v, np.float64)
    return np.where(v < 0.081, v / 4.5, ((np.maximum(v, 0.081) + 0.099) / 1.099) ** (1 / 0.45))


def make_burst(
    lin: np.ndarray,
    seed: int,
    frames: int = 9,
    shift: float = 3.0,
    border: int = 16,
    encode: bool = False,
):
    """(mosaics (frames × (H, W)) noisy [0, 1], their truths) of the linear scene ``lin`` (H, W, 3): frame 0
    unmoved, the others translated. ``encode``: like ``hdrplus_burst2``'s files — the noise is drawn on the
    linear signal lin / 4.5 (λshot / 4.5, λread / 4.5², so the dark part matches the plain burst), quantised
    to 10-bit codes per plane (:data:`CODE_STEP`), then the values and the truth are Rec. 709-encoded."""
    from scipy.ndimage import shift as nd_shift

    from rawrcl.cfa import mosaic, positions

    rng = np.random.default_rng(seed)
    pos = positions(PATTERN)  # letter → (y, x) of the 2×2 tile
    plane = {"R": 0, "G1": 1, "G2": 2, "B": 3}
    noisy, truth = [], []
    for k in range(frames):
        dy, dx = (0.0, 0.0) if k == 0 else tuple(rng.uniform(-shift, shift, 2))
        img = np.stack([nd_shift(lin[..., c], (dy, dx), order=5, mode="reflect") for c in range(3)])
        clean = np.clip(mosaic(img[:, border:-border, border:-border], PATTERN)[0], 0, None)
        shot, read = np.empty_like(clean), np.empty_like(clean)
        for name, (y, x) in pos.items():
            shot[y::2, x::2], read[y::2, x::2] = LAMBDA_SHOT[plane[name]], LAMBDA_READ[plane[name]]
        if encode:
            clean, shot, read = clean / 4.5, shot / 4.5, read / 4.5**2
        y = rng.poisson(clean / shot) * shot + rng.normal(0.0, 1.0, clean.shape) * np.sqrt(read)
        if encode:
            step = np.empty_like(clean)
            for name, (yy, xx) in pos.items():
                step[yy::2, xx::2] = CODE_STEP[plane[name]] / 4.5 / 65535
            y, clean = rec709(np.round(np.clip(y, 0, 1) / step) * step), rec709(clean)
        noisy.append(np.clip(y, 0, 1).astype(np.float32))
        truth.append(clean.astype(np.float32))
    return noisy, truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", default=str(SHARED / "data" / "sunhays80"))
    ap.add_argument("--first", type=int, default=40, help="first of the 4 photos (sorted names)")
    ap.add_argument(
        "--scene", default=None, help="a real burst folder: its frame-00 reference, demosaiced, is the scene"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exposure", type=float, default=1.0, help="scene brightness factor (photo scenes)")
    ap.add_argument(
        "--encode", action="store_true", help="Rec. 709-encoded 10-bit files like hdrplus_burst2 (make_burst)"
    )
    ap.add_argument(
        "--estimate", action="store_true", help="also the default and GAT+BM3D told the single-image estimate"
    )
    ap.add_argument(
        "--linearise",
        action="store_true",
        help="with --encode --estimate: also the default on the decoded (inverse Rec. 709) values",
    )
    ap.add_argument(
        "--jdd",
        action="store_true",
        help="with --estimate: also the JDD default (and --gharbi) at the CFA sites, told the estimate",
    )
    ap.add_argument("--gharbi", default=None, help="Gharbi et al. 2016's weights (a folder; not shipped)")
    ap.add_argument("--shift", type=float, default=3.0, help="largest translation of a frame (px)")
    ap.add_argument("--model", default=None, help="RAW denoiser (default: the shipped one)")
    ap.add_argument("--blur", type=float, default=0.5, help="Gaussian std (packed px) of the blurred row")
    ap.add_argument("--no-bm3d", action="store_true")
    ap.add_argument("--n2n", type=int, default=0, help="steps of unguarded burst Noise2Noise (0: skip)")
    ap.add_argument("--out", default="runs/burst_truth", help="run folder of the --n2n training")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--write",
        default=None,
        help="also write the frames as 16-bit DNGs (no NoiseProfile, like hdrplus_burst2) and every frame's "
        "truth (truthNN.npy beside frameNN.dng, (H, W) [0, 1]) to this folder, to measure any command "
        "against the truth",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from scipy.ndimage import gaussian_filter

    from rawrcl.burst_align import PackedGrid
    from rawrcl.eval import burst as B
    from rawrcl.eval import burst_score as S
    from rawrcl.eval.metrics import psnr_from_mse
    from rawrcl.infer import TileOptions, denoise_cfa
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.models.loading import default_weights_path

    if args.scene:
        lin, source = burst_scene(args.scene), [f"{Path(args.scene).name} (frame 00, JDD default)"]
    else:
        photos = sorted(
            p for p in Path(args.photos).iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg")
        )
        photos = photos[args.first : args.first + 4]
        lin, source = photo_scene(photos) * args.exposure, [p.name for p in photos]
    noisy, truth = make_burst(lin, args.seed, shift=args.shift, encode=args.encode)
    if args.write:
        from rawrcl.io.dng import write_dng

        folder = Path(args.write)
        folder.mkdir(parents=True, exist_ok=True)
        for k, f in enumerate(noisy):
            write_dng(folder / f"frame{k:02d}.dng", np.round(f * 65535).astype(np.uint16), PATTERN, 0, 65535)
        for k, t in enumerate(truth):
            np.save(folder / f"truth{k:02d}.npy", t)
    burst = B.burst_from_arrays(noisy, PATTERN)
    br = B.build_reference(burst)
    mask = br.metric_mask(B.BORDER)
    t0 = truth[0]
    noise = torch.tensor([LAMBDA_SHOT, LAMBDA_READ], dtype=torch.float32)
    grid = PackedGrid.of(t0.shape, PATTERN)

    def vs_truth(out: np.ndarray) -> float:
        return psnr_from_mse(float(np.mean((np.clip(out, 0, 1)[mask] - t0[mask]) ** 2)))

    doc = {
        "scene": source,
        "seed": args.seed,
        "mask_fraction": float(mask.mean()),
        "clipped_fraction": float(np.mean(noisy[0] == 0)),
        "ceiling": br.ceiling(B.BORDER)["psnr"],
        "reference_vs_truth": vs_truth(br.reference),
        "rows": {},
    }
    print(
        f"scene {doc['scene']}, seed {args.seed}: mask {100 * doc['mask_fraction']:.1f} %, "
        f"{100 * doc['clipped_fraction']:.1f} % clipped; "
        f"reference vs truth {doc['reference_vs_truth']:.2f} dB "
        f"(its noise alone: {doc['ceiling']:.2f} dB)"
    )

    def row(name: str, out: np.ndarray) -> None:
        sc = S.score_raw(br, out, B.BORDER)
        r = {"vs_reference": sc["psnr"], "true_error_equivalent": sc["psnr_true"], "vs_truth": vs_truth(out)}
        doc["rows"][name] = r
        print(
            f"{name:34s} vs reference {r['vs_reference']:7.3f}  (true-error equivalent "
            f"{r['true_error_equivalent'] or float('nan'):6.2f})  vs truth {r['vs_truth']:7.3f}",
            flush=True,
        )

    from adapt import burst_supervised, load_start  # the sibling benchmark script

    model, wrap = load_start(args.model or default_weights_path("raw-denoise"))

    def run(m) -> np.ndarray:
        with torch.no_grad():
            return denoise_cfa(WithNoise(m, noise, 4), br.target, PATTERN, TileOptions())

    row("noisy", noisy[0])
    out = run(wrap(model).eval())
    row("RAW denoiser (true λ)", out)
    blurred = grid.unpack(np.stack([gaussian_filter(p, args.blur) for p in grid.pack(out)]))
    row(f"RAW denoiser, blurred σ {args.blur:g} packed px", blurred)
    if not args.no_bm3d:
        from rawrcl.gat import gat_bm3d

        den = gat_bm3d(grid.pack(np.clip(br.target, 0, 1)).astype(np.float32), LAMBDA_SHOT, LAMBDA_READ)
        row("GAT+BM3D (true λ)", grid.unpack(np.asarray(den)))
    if args.estimate:
        from rawrcl.calibration.resolve import file_noise

        from rawrcl.infer.noise import bind_noise
        from rawrcl.infer.pipeline import task_model

        denoiser = task_model(args.model, "raw-denoise", TileOptions())

        def estimate_and_denoise(cfa: np.ndarray) -> tuple:
            """(the RAW default's output told the single-image estimate of ``cfa``, that estimate)."""
            raw = types.SimpleNamespace(cfa=cfa, pattern=PATTERN, make="", model="", iso=None)
            est = file_noise(raw, "image").model
            with torch.no_grad():
                return denoise_cfa(bind_noise(denoiser, est, 4, None), cfa, PATTERN, TileOptions()), est

        out, est = estimate_and_denoise(br.target)
        row("rawrcl denoise (image estimate)", out)
        if args.linearise:  # decode, estimate and denoise in linear values, re-encode (docs/real_noise.md)
            out, _ = estimate_and_denoise(inverse_rec709(br.target).astype(np.float32))
            row("rawrcl denoise, linearised (image estimate)", rec709(out))
        if not args.no_bm3d:
            ls, lr = (v.tolist() for v in est.params(4).numpy())
            den = gat_bm3d(grid.pack(np.clip(br.target, 0, 1)).astype(np.float32), ls, lr)
            row("GAT+BM3D (image estimate)", grid.unpack(np.asarray(den)))
        if args.jdd:  # JDD outputs sampled at each pixel's own CFA colour (as eval --burst scores them)
            from rawrcl.eval.burst_score import jdd_to_mosaic
            from rawrcl.infer.pipeline import jdd_cfa

            jdd = bind_noise(task_model(None, "jdd", TileOptions()), est, 4, None)
            with torch.no_grad():
                rgb = jdd_cfa(jdd, br.target, PATTERN, TileOptions())
            row("rawrcl jdd (image estimate), CFA sites", jdd_to_mosaic(rgb, PATTERN))
            if args.gharbi:
                from rawrcl.eval.burst_eval import gharbi_on_mosaic
                from rawrcl.eval.gharbi2016 import load_gharbi2016

                ls, lr = (v.tolist() for v in est.params(4).numpy())
                out, _ = gharbi_on_mosaic(load_gharbi2016(args.gharbi), br.target, PATTERN, ls, lr)
                row("gharbi2016 (image estimate), CFA sites", jdd_to_mosaic(out, PATTERN))
    if args.n2n > 0:
        ns = types.SimpleNamespace(
            start=args.model or str(default_weights_path("raw-denoise")),
            out=args.out,
            steps=args.n2n,
            sup_lr=1e-4,
        )
        files = [types.SimpleNamespace(noise=noise) for _ in noisy]

        def score(m) -> dict:
            o = run(m)
            return {"psnr": S.score_raw(br, o, B.BORDER)["psnr"], "psnr_truth": vs_truth(o)}

        rec = burst_supervised(ns, burst, files, score, print)
        doc["n2n"] = rec["rows"]
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
