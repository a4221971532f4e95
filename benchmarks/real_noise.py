"""Issue 19's synthetic acceptance table: noise-aware models against the classical gold standards on a
held-out photo source, photo-valued and unprocessed mosaics, across the camera noise ladder.

Photos: ``sunhays80`` (never used to train or choose anything), every ``--every``-th sorted photo, centre
crop ``--crop`` (even); ``--zoom F`` enlarges the centre crop/F window to ``--crop`` instead (bicubic), as
smooth per pixel as a full-resolution camera file (photo collections are downsampled). Each photo *i* is
degraded with ``numpy.random.default_rng([seed, i])`` by the task (``rawrcl.tasks``: photo values as linear
RGB, or unprocessed à la Brooks et al.), noise at each level of the ladder (``L1`` … ``L7``: large sensor at
base ISO … small sensor at its highest ISO, plus ``low`` / ``high``; Gaussian heteroscedastic, not clipped —
as ``rawrcl eval``). ``--source DIR --first N`` take the photos from another folder (for validating training
choices on the training sources' held-out split, never on the test source). ``--cast R,B`` multiplies the
linear image's red and blue channels by R and B (green 1; then all three ÷ the largest, the exposure follows
the brightest channel) before the CFA: an illuminant's colour cast on the sensor (``rawrcl.tasks.Task.cast``;
e.g. ``2.5,0.5`` warm artificial light).

RAW denoising rows (PSNR dB, linear [0, 1], packed CFA, 4-px border, as ``rawrcl eval --task raw-denoise``):
``noisy``; ``gat+bm3d`` with the TRUE (λshot, λread) (Mäkitalo & Foi; ``rawrcl.gat``);
``old`` (a blind checkpoint, ``--old-raw``); ``new`` with the true parameters; ``new est`` with the
parameters the command itself would use: the single-image estimate of the noisy mosaic
(``rawrcl.calibration.resolve.file_noise(..., "image")``); with ``--fuse-bm3d W``, ``new+bm3d`` /
``est+bm3d``: the same fused with GAT+BM3D told the same λ (``rawrcl denoise --fuse-bm3d W``; JDD rows:
between the stages of the two-stage model, ``rawrcl jdd --fuse-bm3d W``); with ``--tta``, ``new tta``: the
self-ensemble of 8 flips/transposes (``--tta``), true λ; with ``--two-pass``, ``new two-pass``: a two-stage
model's stages also run on the transposed mosaic and averaged (``--two-pass``: RAW rows the first stage only),
true λ; with ``--one-pass``, ``new one-pass``: one pass of each stage, without the stages' further passes at
low noise that ``new`` runs as the commands do (``--one-pass``), true λ.

JDD rows (PSNR dB, linear RGB, 8-px border, as ``rawrcl eval --task jdd``): ``menon+nlm`` (the eval
baseline), ``gharbi2016`` (``--gharbi DIR``, σ from the true parameters), ``old`` (``--old-jdd``), ``new``
true / estimated; with ``--bm3d-jdd``, ``gat+bm3d+menon`` / ``gat+bm3d+dht`` (GAT+BM3D, true λ, then Menon or
LibRaw DHT); with ``--libraw``, LibRaw's demosaicing (``libraw-ahd``, ``libraw-aahd``, ``libraw-dht``,
``libraw-dht+fbdd``: ``rawrcl.eval.libraw``).

Usage: ``OMP_NUM_THREADS=1 nice python benchmarks/real_noise.py --raw CKPT --jdd CKPT --old-raw OLD
--old-jdd OLD [--gharbi DIR] [--levels L1,...] [--json PATH]``. GAT+BM3D costs ≈ 1 min/MP: ``--cache FILE``
keeps the scores that do not depend on ``--raw``/``--jdd`` between runs (the baselines, and ``old`` under
the sha256 of its checkpoint file, so another ``--old-*`` model is scored again).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from rawrcl.cfa import pack, unpack
from rawrcl.errors import RawrclError
from rawrcl.eval import BASELINES, load_images, model_predictor, psnr_float
from rawrcl.eval.baselines import TWO_STEP
from rawrcl.eval.libraw import NAMES as LIBRAW_NAMES
from rawrcl.gat import gat_bm3d
from rawrcl.noise import PRESETS
from rawrcl.tasks import get_task

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: methods whose scores do not depend on the new models (kept in ``--cache``)
CACHED = ("noisy", "gat+bm3d", "menon+nlm", "gharbi2016", "old", *TWO_STEP)
#: cache names of methods whose implementation changed (their earlier scores are not reused): gat+bm3d@2 =
#: the GAT inverse clamped at its minimum (2026-11-28; the earlier one blew up below it on dark pixels)
CACHE_NAMES = {"gat+bm3d": "gat+bm3d@2"}
LEVELS = ("L1", "L2", "L3", "L4", "L5", "L6", "L7", "low", "high")


def test_photos(
    data: Path, every: int, crop: int, zoom: float = 1.0, source: str = "sunhays80", first: int = 0
) -> list[tuple[str, np.ndarray]]:
    """Every ``every``-th sorted photo of ``data/source`` from index ``first``, centre ``crop``; ``zoom`` > 1:
    the centre crop/zoom window enlarged to ``crop`` (bicubic) — as smooth per pixel as a full-resolution
    camera file."""
    from rawrcl.data.labelled import zoomed_crop

    files = sorted(p for p in (data / source).iterdir() if p.suffix.lower() in (".png", ".jpg"))[first::every]
    out = []
    for name, img in load_images(files):
        if zoom > 1:
            out.append((name, zoomed_crop(img, min(crop, *img.shape[1:]) // 2 * 2, zoom)))
            continue
        _, h, w = img.shape
        c = min(crop, h, w) // 2 * 2
        y, x = (h - c) // 4 * 2, (w - c) // 4 * 2
        out.append((name, np.ascontiguousarray(img[:, y : y + c, x : x + c])))
    return out


def estimated(inp: torch.Tensor):
    """The noise ``rawrcl denoise --noise image`` would use for this packed mosaic."""
    from rawrcl.calibration.resolve import file_noise

    cfa = np.asarray(unpack(inp.numpy(), "RGGB"))
    raw = SimpleNamespace(cfa=cfa, pattern="RGGB", make="", model="", iso=None)
    return file_noise(raw, "image").model


def fused(run, noise_of, weight: float):
    """``run`` (a packed → packed predictor) fused with GAT+BM3D told ``noise_of(inp, meta)``, as ``rawrcl
    denoise --fuse-bm3d weight`` does (:func:`rawrcl.infer.fusion.fuse_bm3d` on the RGGB mosaic)."""
    from rawrcl.infer.fusion import fuse_bm3d

    def fn(inp, meta):
        y = np.asarray(unpack(torch.as_tensor(run(inp, meta)).float().numpy(), "RGGB"))
        x = np.asarray(unpack(inp.numpy(), "RGGB"))
        return torch.as_tensor(pack(fuse_bm3d(y, x, "RGGB", noise_of(inp, meta), weight), "RGGB"))

    return fn


def fused_jdd(model, noise_of, weight: float):
    """A two-stage JDD ``model`` with GAT+BM3D told ``noise_of(inp, meta)`` fused between its stages, as
    ``rawrcl jdd --fuse-bm3d weight`` runs it (:func:`rawrcl.infer.fusion.jdd_fused`)."""
    from rawrcl.infer.fusion import jdd_fused

    def fn(inp, meta):
        x = np.asarray(unpack(inp.numpy(), "RGGB"))
        return torch.as_tensor(jdd_fused(model, x, "RGGB", noise_of(inp, meta), weight))

    return fn


def predictors(
    task_name: str,
    ckpts: dict,
    gharbi: str | None,
    estimate: bool = True,
    fuse: float = 0.0,
    shrink: bool | None = None,
    libraw: bool = False,
    bm3d_jdd: bool = False,
    tta: bool = False,
    two_pass: bool = False,
    one_pass: bool = False,
) -> dict:
    from rawrcl.models.loading import load_for_task

    task = get_task(task_name)
    fns: dict = {}
    if task_name == "raw-denoise":
        fns["noisy"] = lambda inp, meta: inp
        fns["gat+bm3d"] = lambda inp, meta: torch.as_tensor(
            gat_bm3d(inp.numpy(), meta["noise"].lambda_shot, meta["noise"].lambda_read)
        )
    else:
        fns["menon+nlm"] = lambda inp, meta: BASELINES["menon+nlm"](inp, task, meta)
        for name in LIBRAW_NAMES if libraw else ():
            fns[name] = lambda inp, meta, name=name: BASELINES[name](inp, task, meta)
        for name in TWO_STEP if bm3d_jdd else ():
            fns[name] = lambda inp, meta, name=name: BASELINES[name](inp, task, meta)
        if gharbi:
            from rawrcl.eval.gharbi2016 import gharbi_jdd, gharbi_sigma, load_gharbi2016

            gnet = load_gharbi2016(gharbi)

            def run_gharbi(inp, meta):
                nm = meta["noise"]
                x = inp[None].float()
                return gharbi_jdd(gnet, x, gharbi_sigma(x, nm.lambda_shot, nm.lambda_read))[0]

            fns["gharbi2016"] = run_gharbi
    for label, path in ckpts.items():
        if not path:
            continue
        model, _ = load_for_task(path, task_name)
        if label == "old":
            run = model_predictor(model, task, multiple=8)
            fns["old"] = lambda inp, meta, run=run: run(inp, task, meta)
        else:
            est = lambda inp, meta: estimated(inp)  # noqa: E731
            run_true = model_predictor(model, task, multiple=8, shrink=shrink)
            run_est = model_predictor(model, task, multiple=8, noise_of=est, shrink=shrink)
            fns["new"] = lambda inp, meta, r=run_true: r(inp, task, meta)
            if tta:  # the self-ensemble (--tta), true λ
                run_tta = model_predictor(model, task, multiple=8, self_ensemble=True, shrink=shrink)
                fns["new tta"] = lambda inp, meta, r=run_tta: r(inp, task, meta)
            if two_pass:  # the first stage also on the transposed mosaic (--two-pass), true λ
                run_2p = model_predictor(model, task, multiple=8, shrink=shrink, two_pass=True)
                fns["new two-pass"] = lambda inp, meta, r=run_2p: r(inp, task, meta)
            if one_pass:  # without the stages' low-noise passes (--one-pass), true λ
                run_1p = model_predictor(model, task, multiple=8, shrink=shrink, two_pass=False)
                fns["new one-pass"] = lambda inp, meta, r=run_1p: r(inp, task, meta)
            if estimate:
                fns["new est"] = lambda inp, meta, r=run_est: r(inp, task, meta)
            if fuse > 0 and task_name == "raw-denoise":  # as rawrcl denoise --fuse-bm3d: the SURE output
                fns["new+bm3d"] = fused(fns["new"], lambda inp, meta: meta["noise"], fuse)
                if estimate:
                    fns["est+bm3d"] = fused(fns["new est"], est, fuse)
            elif fuse > 0:
                fns["new+bm3d"] = fused_jdd(model, lambda inp, meta: meta["noise"], fuse)
                if estimate:
                    fns["est+bm3d"] = fused_jdd(model, lambda inp, meta: estimated(inp), fuse)
    return fns


def _content_id(source: str, task_name: str) -> str:
    """First 12 hex digits of the sha256 of the checkpoint file that ``source`` loads for ``task_name``
    (the loader's own choice, :func:`rawrcl.models.loading.checkpoint_for`)."""
    from rawrcl.export.graph import file_sha256
    from rawrcl.models.loading import checkpoint_for

    return file_sha256(checkpoint_for(source, get_task(task_name)))[:12]


def _cast(text: str) -> tuple[float, float]:
    try:
        r, b = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cast takes two factors R,B, got {text!r}") from None
    if r <= 0 or b <= 0:
        raise argparse.ArgumentTypeError(f"--cast factors must be > 0, got {text!r}")
    return r, b


def measure(args) -> list[dict]:
    photos = test_photos(Path(args.data), args.every, args.crop, args.zoom, args.source, args.first)
    cache_path = Path(args.cache) if args.cache else None
    cache = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}
    # cache keys of the original test set stay as they were; other photo sets get a suffix
    photo_set = f"|z{args.zoom:g}" if args.zoom > 1 else ""
    if args.source != "sunhays80" or args.first:
        photo_set += f"|{args.source}{args.first}/{args.every}"
    if args.cast:
        photo_set += f"|cast{args.cast[0]:g},{args.cast[1]:g}"
    rows = []
    for task_name, ckpts in (
        ("raw-denoise", {"old": args.old_raw, "new": args.raw}),
        ("jdd", {"old": args.old_jdd, "new": args.jdd}),
    ):
        if task_name not in args.tasks:
            continue
        fns = predictors(
            task_name,
            ckpts,
            args.gharbi,
            not args.true_only,
            args.fuse_bm3d,
            args.shrink,
            args.libraw,
            args.bm3d_jdd,
            args.tta,
            args.two_pass,
            args.one_pass,
        )
        # the cached "old" scores belong to one checkpoint: its content names them (another --old-* file,
        # or the same path rewritten, must not read an earlier model's scores)
        old_name = f"old@{_content_id(ckpts['old'], task_name)}" if ckpts["old"] else "old"
        border = 4 if task_name == "raw-denoise" else 8
        for domain, unprocess in (("photo", False), ("unproc", True)):
            task = get_task(task_name, unprocess=unprocess)
            if args.cast:
                task = replace(task, cast=args.cast)
            for level in args.levels:
                t0 = time.perf_counter()
                per: dict[str, list[float]] = {k: [] for k in fns}
                for i, (_, img) in enumerate(photos):
                    s = task.sample(img, np.random.default_rng([args.seed, i]), PRESETS[level])
                    meta = s["meta"]
                    for k, fn in fns.items():
                        name = old_name if k == "old" else CACHE_NAMES.get(k, k)
                        key = f"{task_name}|{domain}|{level}|{i}|{args.crop}|{args.seed}{photo_set}|{name}"
                        if k in CACHED and key in cache:
                            per[k].append(cache[key])
                            continue
                        out = fn(s["input"].float(), meta)
                        per[k].append(psnr_float(torch.as_tensor(out).float(), s["target"], border))
                        if k in CACHED:
                            cache[key] = per[k][-1]
                if cache_path:  # once per row (a killed run keeps every finished row)
                    cache_path.write_text(json.dumps(cache))
                row = {"task": task_name, "domain": domain, "noise": level, "n": len(photos)}
                row.update({k: float(np.mean(v)) for k, v in per.items()})
                row["seconds"] = round(time.perf_counter() - t0, 1)
                rows.append(row)
                print_row(row, list(fns), header=len(rows) == 1 or rows[-2]["task"] != task_name)
    return rows


def print_row(row: dict, names: list[str], header: bool) -> None:
    ref = "gat+bm3d" if row["task"] == "raw-denoise" else "menon+nlm"
    if header:
        print(f"\n{row['task']}\n| domain | noise | " + " | ".join(names) + f" | new − {ref} | est − {ref} |")
        print("|---" * (len(names) + 4) + "|")
    vals = " | ".join(f"{row[k]:.2f}" for k in names)
    d1 = row.get("new", float("nan")) - row[ref]
    d2 = row.get("new est", float("nan")) - row[ref]
    print(f"| {row['domain']} | {row['noise']} | {vals} | {d1:+.2f} | {d2:+.2f} |")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder holding sunhays80/")
    ap.add_argument("--raw", help="new (noise-aware) RAW denoiser checkpoint or run")
    ap.add_argument("--jdd", help="new (noise-aware) JDD checkpoint or run")
    ap.add_argument("--old-raw", help="previous default RAW denoiser (blind)")
    ap.add_argument("--old-jdd", help="previous default JDD model (blind)")
    ap.add_argument("--gharbi", help="folder of Gharbi et al. 2016's released weights")
    ap.add_argument("--tasks", default="raw-denoise,jdd")
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--every", type=int, default=8, help="every N-th sorted photo")
    ap.add_argument(
        "--source", default="sunhays80", help="photo folder (another one only for the validation of choices)"
    )
    ap.add_argument("--first", type=int, default=0, help="first sorted photo index")
    ap.add_argument("--crop", type=int, default=384, help="centre crop (photo pixels)")
    ap.add_argument(
        "--zoom", type=float, default=1.0, help="enlarge each test window by this factor (smooth content)"
    )
    ap.add_argument(
        "--cast",
        type=_cast,
        default=None,
        help="R,B: an illuminant colour cast, red and blue × these factors (green 1) before the CFA",
    )
    ap.add_argument("--libraw", action="store_true", help="JDD rows: also LibRaw's demosaicing baselines")
    ap.add_argument("--tta", action="store_true", help="also 'new tta': the self-ensemble (--tta), true λ")
    ap.add_argument(
        "--two-pass",
        action="store_true",
        help="also 'new two-pass': each stage run twice (--two-pass; RAW: the first stage), true λ",
    )
    ap.add_argument(
        "--one-pass",
        action="store_true",
        help="also 'new one-pass': one pass of each stage (--one-pass: no further low-noise passes), true λ",
    )
    ap.add_argument(
        "--bm3d-jdd", action="store_true", help="JDD rows: also GAT+BM3D then Menon / LibRaw DHT demosaicing"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--true-only",
        action="store_true",
        help="no 'new est' rows (for crops where the single-image estimate refuses, e.g. mostly white)",
    )
    ap.add_argument("--cache", default=None, help="JSON file keeping the baselines' scores between runs")
    ap.add_argument(
        "--fuse-bm3d",
        type=float,
        default=0.0,
        metavar="W",
        help="also the new model fused with GAT+BM3D (true λ; and the estimate, as rawrcl denoise/jdd do)",
    )
    ap.add_argument(
        "--shrink",
        choices=["auto", "on", "off"],
        default="auto",
        help="SURE shrinkage of the new models (auto: as the commands run them — on for RAW, off for JDD)",
    )
    args = ap.parse_args(argv)
    args.shrink = {"auto": None, "on": True, "off": False}[args.shrink]
    args.tasks = args.tasks.split(",")
    args.levels = args.levels.split(",")
    torch.set_num_threads(args.threads)
    try:
        rows = measure(args)
    except RawrclError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
