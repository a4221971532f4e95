"""A darktable package on a real RAW file: darktable's Bayer path (emulated) against ``rawrcl jdd``.

    nice -n 10 python benchmarks/darktable_emulation.py                       # ../shared hdrplus frame 00
    python benchmarks/darktable_emulation.py --raw photo.dng --checkpoint runs/x/checkpoints/last.pt

Exports the model (default: shipped JDD weights) as a darktable package (512 tiles), runs
:func:`rawrcl.export.dt_emulate.restore_raw_bayer` on the file with ``output_scale: absolute`` (what
rawrcl writes) and with ``match_gain`` (darktable's default), and compares each pixel's own CFA colour
with ``rawrcl jdd`` run whole-frame (fp32) on (a) the file as rawrcl reads it and (b) its crop to the R
origin (darktable's packing grid). A noise-aware model (the shipped default) gets the file's ``--noise auto``
baked into the package and is compared with the same network told the same noise (without the SURE weights
``rawrcl jdd`` adds by default: the package holds the network only). Prints a Markdown table in [0, 1]
units: max / mean / p99.9 |diff| over pixels owned by one darktable tile and ≥ 100 px from the border, over
seams, over the border band; and the per-tile match_gain factors.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--raw", default=str(ROOT.parent / "shared" / "data" / "raw" / "hdrplus_burst2" / "frame00.dng")
    )
    ap.add_argument("--checkpoint", default=None, help="default: the shipped JDD weights")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not Path(args.raw).is_file():
        sys.exit(f"{args.raw}: not found (pass --raw FILE)")

    from rawrcl.calibration.resolve import file_noise

    from rawrcl.export.build import prepare
    from rawrcl.export.darktable import write_package
    from rawrcl.export.dt_emulate import load_bayer_variant, ort_runner, restore_raw_bayer
    from rawrcl.export.noise import BakedNLF
    from rawrcl.infer import TileOptions, jdd_cfa
    from rawrcl.infer.noise import bind_noise
    from rawrcl.io.raw import read_raw
    from rawrcl.models import adapt, load_checkpoint
    from rawrcl.models.loading import default_weights_path

    ckpt = Path(args.checkpoint) if args.checkpoint else default_weights_path("jdd")
    model, cfg = load_checkpoint(ckpt)
    raw = read_raw(args.raw, clip=False)
    cfa, pattern = raw.cfa, raw.pattern
    black = tuple(float(b) for b in np.asarray(raw.black_level).reshape(4))
    white = float(raw.white_level)
    h, w = cfa.shape
    site_black = np.tile(np.asarray(black).reshape(2, 2), (h // 2 + 1, w // 2 + 1))[:h, :w]
    site_rng = white - site_black
    dn = site_black + cfa * site_rng  # the file's DN: rawrcl reads (DN - black) / (white - black)
    print(f"{args.raw}: {w}×{h} {pattern}, black {black}, white {white:g}", file=sys.stderr)
    net = adapt(model, cfg.get("head"), "jdd")
    baked = None  # a noise-aware model (the shipped default): the file's noise baked into the package
    if cfg.get("noise_aware"):
        told = file_noise(raw, "auto", path=args.raw)
        shot, read = (tuple(float(v) for v in row) for row in told.model.params(4).double().numpy())
        baked = BakedNLF(shot, read, {"source": told.source_text})
        net = bind_noise(net, baked.model(), 4, shrink=False)  # the package's network: no SURE weights
        print(f"noise baked in ({told.source_text}): λshot {shot}, λread {read}", file=sys.stderr)
    package = prepare(model, cfg, head="jdd", noise=baked)
    with tempfile.TemporaryDirectory(prefix="rawrcl-dt-") as tmp:  # read once into a session, then removed
        info = write_package(package, tmp, "rawdenoise-bench", checkpoint=ckpt)
        variant = load_bayer_variant(info["path"])
        run = ort_runner(variant.onnx)
    colour = {"R": 0, "G": 1, "B": 2}
    y0, x0 = divmod(pattern.index("R"), 2)
    opts = TileOptions(tile=4096, overlap=0, precision="fp32", device="cpu")

    def own(rgb: np.ndarray, pat: str) -> np.ndarray:
        ch = np.array([colour[c] for c in pat]).reshape(2, 2)
        ii, jj = np.indices(rgb.shape[1:])
        return rgb[ch[ii % 2, jj % 2], ii, jj]

    t0 = time.perf_counter()
    ref_file = own(jdd_cfa(net, cfa, pattern, opts), pattern)
    ref_crop = np.full(cfa.shape, np.nan)
    ref_crop[y0:, x0:] = own(jdd_cfa(net, cfa[y0:, x0:], "RGGB", opts), "RGGB")
    print(f"rawrcl references: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print("| output_scale | compared with | region | max | mean | p99.9 |\n|---|---|---|---|---|---|")
    inner = np.zeros(cfa.shape, bool)
    inner[100:-100, 100:-100] = True
    for scale in ("absolute", "match_gain"):
        variant.output_scale = scale
        t0 = time.perf_counter()
        _, value, st = restore_raw_bayer(variant, run, dn, pattern, black, white)
        print(f"emulation ({scale}): {st['tiles']} tiles, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        got = (value - site_black) / site_rng
        regions = {
            "one tile, ≥100 px from border": (st["weight"] == 1) & inner,
            "seams": (st["weight"] < 1) & (st["weight"] > 0) & inner,
            "100-px border band": ~inner,
        }
        for ref_name, ref in (("rawrcl jdd (file)", ref_file), ("rawrcl jdd (R-origin crop)", ref_crop)):
            d = np.abs(got - ref)
            for rname, m in regions.items():
                v = d[m & np.isfinite(d)]
                if v.size == 0:  # e.g. no seams: a frame inside one tile
                    print(f"| {scale} | {ref_name} | {rname} | – | – | – |")
                    continue
                p999 = np.percentile(v, 99.9)
                print(f"| {scale} | {ref_name} | {rname} | {v.max():.2e} | {v.mean():.2e} | {p999:.2e} |")
        if scale == "match_gain":
            g = np.array(st["gains"])
            stats = f"min {g.min():.4f}, max {g.max():.4f}, mean {g.mean():.4f}, std {g.std():.4f}"
            print(f"\nmatch_gain per-tile factors ({g.size} tiles): {stats}")


if __name__ == "__main__":
    main()
