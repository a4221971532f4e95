"""``rawrcl demo``: an end-to-end run on a fresh machine, with no data of the user's.

1. writes a few of scikit-image's bundled photos as PNGs (``OUT/photos``);
2. turns them into noisy Bayer DNGs with :func:`rawrcl.simulate.simulate_folder` (unprocessed to linear
   camera RGB, the ``high`` noise preset, GRBG phase, noise-free references in ``OUT/dngs/clean``);
3. optionally (``pretrain=True``) pre-trains a small U-Net with RCL on those noisy DNGs for a few
   steps (self-supervised: the clean references are not used);
4. runs JDD and RAW denoising on one DNG with the shipped default weights (and the pre-trained
   model), writing ``OUT/outputs/<stem>_jdd.png`` (sRGB), ``<stem>_jdd_linear.tiff`` (16-bit linear)
   and ``<stem>_denoised.dng``;
5. reports PSNR against the clean reference, beside bilinear, Menon (2007) and LibRaw's (AHD; DHT with its
   FBDD noise reduction) demosaicing of the noisy mosaic, Menon + NLM, the noisy mosaic itself and GAT+BM3D
   (the classical gold standard for RAW denoising, told the same noise as the model).

PSNR is computed in the RAW's linear [0, 1] scale (peak 1), over the whole frame.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError

MARKER = ".rawrcl-demo"


def psnr01(x: np.ndarray, ref: np.ndarray) -> float:
    """PSNR in dB of ``x`` against ``ref``, both in [0, 1] (``x`` clipped to [0, 1] first), peak 1."""
    from rawrcl.eval.metrics import psnr_from_mse

    return psnr_from_mse(
        np.mean((np.clip(np.asarray(x, np.float64), 0, 1) - np.asarray(ref, np.float64)) ** 2)
    )


def _write_photos(directory: Path, n: int, size: int | None) -> list[Path]:
    import cv2

    from rawrcl.sample_data import bundled_photos

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, img in bundled_photos(n):
        if size is not None:
            h, w = img.shape[:2]
            s = min(size, h, w)
            y, x = (h - s) // 2, (w - s) // 2
            img = img[y : y + s, x : x + s]
        path = directory / f"{name}.png"
        if not cv2.imwrite(str(path), np.ascontiguousarray(img[..., ::-1])):
            raise RawrclError(f"{path}: could not write PNG")
        paths.append(path)
    return paths


def _clean_linear(path: Path) -> np.ndarray:
    import tifffile

    a = tifffile.imread(path)
    return np.ascontiguousarray(a.transpose(2, 0, 1)).astype(np.float32) / 65535.0


def _classical(cfa: np.ndarray, pattern: str) -> dict[str, np.ndarray]:
    """Demosaicings of the noisy mosaic: bilinear, Menon and LibRaw's (what dcraw-based developers do)."""
    from rawrcl.demosaic import demosaic
    from rawrcl.eval.libraw import libraw_demosaic

    out = {name: demosaic(cfa, pattern, name) for name in ("bilinear", "menon")}
    out["LibRaw AHD"] = libraw_demosaic(cfa, pattern, "ahd")
    out["LibRaw DHT + FBDD"] = libraw_demosaic(cfa, pattern, "dht", fbdd=True)
    return out


def _gat_bm3d(raw, nm) -> np.ndarray:
    """GAT+BM3D of the file's mosaic with its noise ``nm`` (a NoiseModel, as ``rawrcl denoise`` uses)."""
    from rawrcl.cfa import pack, unpack
    from rawrcl.gat import gat_bm3d

    den = gat_bm3d(pack(raw.cfa, raw.pattern), nm.lambda_shot, nm.lambda_read)
    return np.asarray(unpack(den, raw.pattern, raw.cfa.shape))


def _menon_nlm(raw, nm) -> np.ndarray:
    """Menon demosaicing + NLM in the rendered image (the eval's ``menon+nlm``), with the file's own
    white balance and colour matrix and its noise ``nm``: (3, H, W) linear camera RGB."""
    import torch

    from rawrcl.demosaic import demosaic
    from rawrcl.eval.baselines import nlm_after_demosaic

    rgb = torch.from_numpy(demosaic(np.clip(raw.cfa, 0, 1), raw.pattern, "menon"))
    meta = {"noise": nm}
    if raw.wb is not None and raw.ccm is not None:
        meta["isp"] = {"wb": raw.wb, "ccm": raw.ccm, "gain": 1.0}
    return nlm_after_demosaic(rgb, meta).numpy()


def run_demo(
    out: str | Path = "rawrcl-demo",
    *,
    quick: bool = False,
    pretrain: bool = False,
    steps: int = 150,
    n_photos: int | None = None,
    size: int | None = None,
    jdd_model: str | Path | None = None,
    denoise_model: str | Path | None = None,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> dict:
    """Run the demo (see module docstring); returns a JSON-able summary (also ``OUT/summary.json``).

    Parameters
    ----------
    out : demo folder; created. An existing non-empty folder that is not a previous demo is refused
        unless ``force``.
    quick : 2 photos cropped to 256×256 (the default: 3 full photos).
    pretrain : also pre-train a width-16 U-Net with RCL for ``steps`` steps on the noisy DNGs.
    n_photos, size : override the number of photos and their centre-crop size (pixels).
    jdd_model, denoise_model : checkpoints to use instead of the shipped default weights.
    """
    from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa, write_denoised_dng, write_image
    from rawrcl.infer.noise import raw_model_for, resolve_noise
    from rawrcl.io.raw import read_raw
    from rawrcl.isp import render_srgb, srgb_profile
    from rawrcl.models.loading import load_for_task
    from rawrcl.simulate import simulate_folder

    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists() and not force:
        raise RawrclError(f"{out}: exists and is not a rawrcl demo folder (use --force or another --out)")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("rawrcl demo output folder\n")
    n = n_photos if n_photos is not None else (2 if quick else 3)
    size = size if size is not None else (256 if quick else None)

    photos = _write_photos(out / "photos", n, size)
    echo(f"[1/4] {len(photos)} bundled photos → {out / 'photos'}")
    dng_dir = out / "dngs"
    rep = simulate_folder(
        out / "photos", dng_dir, noise="high", pattern="GRBG", do_unprocess=True, seed=0, save_clean=True,
        force=True, progress=False,
    )  # fmt: skip
    if rep.failed:
        raise RawrclError(f"simulate failed: {rep.failed[0][0]}: {rep.failed[0][1]}")
    stem = photos[0].stem
    dng = dng_dir / f"{stem}.dng"
    echo(f"[2/4] noisy DNGs (noise preset 'high': λshot 0.01, λread 0.0016, GRBG) → {dng_dir}")

    models = {"default": (load_for_task(jdd_model, "jdd")[0], load_for_task(denoise_model, "raw-denoise")[0])}
    if pretrain:
        from rawrcl.train import pretrain as _pretrain

        run_dir = out / "pretrain"
        t1 = time.perf_counter()
        _pretrain(
            dng_dir, run_dir, task="jdd", method="rcl", width=16, depth=3,
            data_options={"crop": 64, "cache_dir": None},
            trainer_options={"steps": int(steps), "batch_size": 8, "device": "cpu", "force": True, "seed": 0,
                             "log_every": 10, "save_every": 0},
        )  # fmt: skip
        models["pretrained (RCL, self-supervised)"] = (
            load_for_task(run_dir / "checkpoints" / "last.pt", "jdd")[0],
            None,
        )
        echo(
            f"[3/4] RCL pre-training, {steps} steps on the noisy DNGs: "
            f"{time.perf_counter() - t1:.0f} s → {run_dir}"
        )
    else:
        echo("[3/4] using the shipped default weights (add --pretrain to also pre-train with RCL here)")

    raw = read_raw(dng, clip=False)
    clean_rgb = _clean_linear(dng_dir / "clean" / f"{stem}.tiff")
    clean_cfa = read_raw(dng_dir / "clean" / f"{stem}.dng").cfa
    opts = TileOptions(tile=256, overlap=32, device="cpu", precision="fp32")
    res_dir = out / "outputs"
    results: dict[str, dict[str, float]] = {"jdd": {}, "raw-denoise": {}}
    outputs: list[str] = []
    # the file's noise, resolved once as `rawrcl jdd/denoise` do (--noise auto), for models and baselines
    fn = resolve_noise(raw, dng, None, echo)
    for label, (m_jdd, m_den) in models.items():
        m_jdd = raw_model_for(m_jdd, raw, dng, None, resolved=fn)
        m_den = None if m_den is None else raw_model_for(m_den, raw, dng, None, resolved=fn)
        rgb = jdd_cfa(m_jdd, raw.cfa, raw.pattern, opts)
        results["jdd"][f"rawrcl jdd ({label})"] = psnr01(rgb, clean_rgb)
        tag = "" if label == "default" else "_pretrained"
        srgb = render_srgb(np.clip(rgb, 0, 1), raw.wb, raw.ccm, clip_highlights=True)
        png = res_dir / f"{stem}_jdd{tag}.png"
        outputs.append(str(write_image(png, srgb, bits=8, overwrite=True, icc=srgb_profile())))
        outputs.append(
            str(write_image(res_dir / f"{stem}_jdd{tag}_linear.tiff", np.clip(rgb, 0, 1), overwrite=True))
        )
        if m_den is not None:
            den = denoise_cfa(m_den, raw.cfa, raw.pattern, opts)
            results["raw-denoise"][f"rawrcl denoise ({label})"] = psnr01(den, clean_cfa)
            outputs.append(
                str(write_denoised_dng(res_dir / f"{stem}_denoised{tag}.dng", raw, den, overwrite=True))
            )
    for name, rgb in _classical(np.clip(raw.cfa, 0, 1), raw.pattern).items():
        results["jdd"][f"{name} demosaic of the noisy mosaic"] = psnr01(rgb, clean_rgb)
    results["jdd"]["Menon + NLM (classical pipeline)"] = psnr01(_menon_nlm(raw, fn.model), clean_rgb)
    results["raw-denoise"]["noisy input"] = psnr01(raw.cfa, clean_cfa)
    results["raw-denoise"]["GAT+BM3D (classical gold standard)"] = psnr01(_gat_bm3d(raw, fn.model), clean_cfa)
    echo(f"[4/4] jdd + denoise on {dng.name} ({raw.width}×{raw.height}):")
    for task, rows in results.items():
        echo(f"  {task}: PSNR against the clean reference (linear, dB)")
        for name, v in sorted(rows.items(), key=lambda kv: -kv[1]):
            echo(f"    {v:6.2f}  {name}")
    echo("outputs:")
    for p in outputs:
        echo(f"  {p}")
    summary = {
        "input": str(dng),
        "clean_reference": str(dng_dir / "clean"),
        "psnr_db": {k: {n: round(v, 3) for n, v in rows.items()} for k, rows in results.items()},
        "outputs": outputs,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    echo(f"done in {summary['seconds']:.0f} s; summary: {out / 'summary.json'}")
    return summary
