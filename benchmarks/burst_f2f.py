"""Frame-to-frame fine-tuning on a burst through the JDD output (issue 20; measured, not in ``rawrcl adapt``).

A label-free objective for a folder that is a handheld burst of one static scene (Ehret et al. 2019's idea for
burst JDD): the start's two stages are fine-tuned so that the JDD RGB of a crop of a native frame i, resampled
at the positions of another frame j's mosaic samples (the affine registration mapped into frame i; bicubic,
full resolution) and read in each sample's CFA colour, predicts frame j's *native* noisy samples — every other
training frame j at once. Nothing is resampled on the target side, so, unlike Noise2Noise against registered
means (``benchmarks/adapt.py --runs n2n-burst``), the targets carry no resampling error for the network to
imitate; and what is resampled is a full-resolution RGB estimate, not one aliased packed plane (a first form
that resampled both frames' packed planes to their midpoint learnt to blur: docs/adaptation.md, "Stop 102").

Loss: masked MSE over the samples where the prediction (detached: it reads frame i only) is > 3 noise std and
< 0.9, so that frame j is almost never clipped there and the mask does not read frame j's noise. Frame 00 (the
target of ``rawrcl eval --burst``) is never used; each checkpoint is scored on it against the burst reference
(strict mask) and, for a folder written by ``benchmarks/burst_truth.py --write``, against its truth.
``--check`` then runs ``rawrcl adapt``'s forgetting check (start against the fine-tune); ``--beside`` scores
the fine-tune beside the unchanged start (:class:`BesideStart`, nested SURE weights) on frame 00 and, with
``--check``, on that check; ``--beside-model RUN`` puts another model in the start's slot (e.g. a
``rawrcl adapt --method blindspot`` run, as ``rawrcl denoise --model RUN`` runs it; the check stays against
the start).
``--fine FILE`` scores a fine-tune saved by ``--save`` instead of training one.

    python benchmarks/burst_f2f.py --burst DIR [--steps 400 --lr 3e-5 --ema 0.995 --every 50 --json out.json]
    python benchmarks/burst_f2f.py --burst DIR --steps 1200 --every 400 --ema 0.995 --anchor 0.05 --mix 0.5 \
        --mix-zoom 0.5 --check --beside          # docs/adaptation.md, "Stop 104"
    python benchmarks/burst_f2f.py --burst DIR --fine F.pt --beside --beside-model RUN --check  # "Stop 106"
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

#: colour index (0 R, 1 G, 2 B) of the four sites of an RGGB-aligned 2×2 tile
TILE_COLOUR = ((0, 1), (1, 2))


def _affine3(a: np.ndarray) -> np.ndarray:
    return np.vstack([a, [0.0, 0.0, 1.0]])


def pairwise_warps(
    packed: Sequence[np.ndarray], log: Callable[[str], None] = print
) -> list[list[np.ndarray]]:
    """``warps[i][j]``: 2×3 affine, frame i → frame j in packed-green coordinates (ECC affine on the packed
    greens, :func:`rawrcl.eval.burst_align.register_frame`), for frames ``packed`` (each (4, h, w) RGGB);
    every frame is registered to the first and the pairs composed."""
    from rawrcl.eval.burst_align import green_image, register_frame

    to = [np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])]  # frame 0 → frame k
    g0 = green_image(packed[0])
    for k in range(1, len(packed)):
        w, cc = register_frame(g0, green_image(packed[k]), name=f"training frame {k}")
        log(f"  training frame {k} → 0: cc {cc:.3f}, shift {np.round(w[:, 2], 2).tolist()} packed px")
        to.append(w)
    return [
        [(_affine3(to[j]) @ np.linalg.inv(_affine3(to[i])))[:2] for j in range(len(packed))]
        for i in range(len(packed))
    ]


def colour_map(size: int) -> torch.Tensor:
    """(size, size) int64 colour index of each site of an RGGB-aligned mosaic crop at an even origin."""
    col = np.empty((size, size), np.int64)
    for dy in (0, 1):
        for dx in (0, 1):
            col[dy::2, dx::2] = TILE_COLOUR[dy][dx]
    return torch.from_numpy(col)


class FramePairs:
    """Training samples: a crop of frame i (packed, with a margin for the networks' reach) and, for every
    other frame j, a ``crop`` × ``crop`` block of frame j's native mosaic samples around the same scene point,
    with the positions of those samples in the crop's full-resolution RGB (``grid``, grid_sample's [−1, 1]
    units).

    ``packed``: frames (4, h, w) RGGB [0, 1]; ``noise``: each frame's (2, 4) [λshot; λread]; ``warps`` from
    :func:`pairwise_warps`; ``crop``/``margin`` in mosaic px (even)."""

    def __init__(self, packed, noise, warps, crop: int = 96, margin: int = 24, seed: int = 0) -> None:
        self.packed, self.noise, self.warps = packed, noise, warps
        self.crop, self.margin = crop, margin
        self.rng = np.random.default_rng(seed)

    def draw(self, i: int | None = None) -> dict:
        """``input`` (4, S/2, S/2) of frame i at mosaic origin ``origin`` (x, y); ``grid`` (K, c, c, 2);
        ``target`` (K, c, c) frame j's samples; ``noise`` (2, 4) of frame i, ``noise_j`` (K, 2, 4); ``frac``
        (K, c, c) how far each sample's position lies from a full-resolution pixel centre of the input (px,
        the larger of the two axes: 0 … 0.5)."""
        from rawrcl.eval.burst_align import full_res_affine

        n, c = len(self.packed), self.crop
        i = int(self.rng.integers(n)) if i is None else i
        _, h, w = self.packed[i].shape
        big = c + 2 * self.margin + 16  # mosaic px of the input crop (even)
        lo = big // 2 + 16
        rx = 2 * int(self.rng.integers(lo // 2, w - lo // 2)) - big // 2
        ry = 2 * int(self.rng.integers(lo // 2, h - lo // 2)) - big // 2
        rx, ry = rx - rx % 2, ry - ry % 2
        cx, cy = rx + big / 2, ry + big / 2
        grids, targets, lams, fracs = [], [], [], []
        for j in range(n):
            if j == i:
                continue
            fwd, back = full_res_affine(self.warps[i][j]), full_res_affine(self.warps[j][i])
            qx = fwd[0, 0] * cx + fwd[0, 1] * cy + fwd[0, 2] - c / 2
            qy = fwd[1, 0] * cx + fwd[1, 1] * cy + fwd[1, 2] - c / 2
            qx0, qy0 = 2 * int(round(qx / 2)), 2 * int(round(qy / 2))
            block = self.packed[j][:, qy0 // 2 : qy0 // 2 + c // 2, qx0 // 2 : qx0 // 2 + c // 2]
            if qx0 < 0 or qy0 < 0 or block.shape[1:] != (c // 2, c // 2):
                continue
            ys, xs = np.mgrid[qy0 : qy0 + c, qx0 : qx0 + c].astype(np.float64)
            px = back[0, 0] * xs + back[0, 1] * ys + back[0, 2]
            py = back[1, 0] * xs + back[1, 1] * ys + back[1, 2]
            grids.append(np.stack([2 * (px - rx) / (big - 1) - 1, 2 * (py - ry) / (big - 1) - 1], -1))
            fracs.append(np.maximum(np.abs(px - np.round(px)), np.abs(py - np.round(py))))
            t = np.empty((c, c), np.float32)
            t[0::2, 0::2], t[0::2, 1::2], t[1::2, 0::2], t[1::2, 1::2] = block
            targets.append(t)
            lams.append(torch.as_tensor(self.noise[j]).float())
        if not targets:  # every other frame's block fell outside it (a frame barely larger than a crop)
            return self.draw()
        inp = self.packed[i][:, ry // 2 : ry // 2 + big // 2, rx // 2 : rx // 2 + big // 2]
        return {
            "input": torch.from_numpy(np.ascontiguousarray(inp)).float(),
            "origin": (rx, ry),
            "grid": torch.from_numpy(np.stack(grids)).float(),
            "target": torch.from_numpy(np.stack(targets)),
            "noise": torch.as_tensor(self.noise[i]).float(),
            "noise_j": torch.stack(lams),
            "frac": torch.from_numpy(np.stack(fracs)).float(),
        }


def predict_samples(rgb: torch.Tensor, grid: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """``rgb`` (1, 3, S, S) resampled (bicubic) at ``grid`` (K, c, c, 2), each sample in its colour ``col``
    (c, c) → (K, c, c)."""
    k = grid.shape[0]
    smp = F.grid_sample(
        rgb.expand(k, -1, -1, -1), grid, mode="bicubic", padding_mode="border", align_corners=True
    )
    return smp.gather(1, col[None, None].expand(k, 1, -1, -1))[:, 0]


def f2f_loss(
    pred: torch.Tensor, batch: dict, col: torch.Tensor, k_std: float = 3.0, near: float = 0.5
) -> tuple[torch.Tensor, float, float]:
    """(masked MSE of ``pred`` (K, c, c) against ``batch["target"]``, the scored share, the mean noise
    variance there): samples where the detached prediction is above ``k_std`` noise std of frame j (its λ in
    that colour; G1's for green) and below 0.9, and whose position lies within ``near`` px of a pixel centre
    of the input (``batch["frac"]``; 0.5: every sample), where bicubic resampling is ≈ identity (measured in
    stop 103: it does not change the forgetting, docs/adaptation.md)."""
    lam = batch["noise_j"]  # (K, 2, 4)
    shot = torch.stack([lam[:, 0, 0], lam[:, 0, 1], lam[:, 0, 3]], -1)[:, col]
    read = torch.stack([lam[:, 1, 0], lam[:, 1, 1], lam[:, 1, 3]], -1)[:, col]
    level = pred.detach()
    var = shot * level.clamp_min(0) + read
    m = (level > k_std * var.sqrt()) & (level < 0.9)
    if near < 0.5:
        m = m & (batch["frac"] <= near)
    m = m.to(pred.dtype)
    n = m.sum().clamp_min(1)
    return ((pred - batch["target"]) ** 2 * m).sum() / n, float(m.mean()), float((var * m).sum() / n)


def train(
    full,
    data: FramePairs,
    steps: int,
    score: Callable[[], dict],
    *,
    lr: float = 3e-5,
    batch: int = 4,
    ema: float = 0.0,
    every: int = 50,
    anchor: float = 0.0,
    mix: float = 0.0,
    mix_fn: Callable[[np.random.Generator], dict] | None = None,
    near: float = 0.5,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Fine-tune both stages of ``full`` (a two-stage RAW model) with :func:`f2f_loss` through its JDD output;
    every ``every`` steps ``score()`` (of the weight average with ``ema`` > 0). Guards as ``rawrcl adapt``'s:
    ``anchor``·Σ(θ − θ₀)² and ``mix``·(the RAW output's MSE on ``batch`` synthetic supervised crops of
    ``mix_fn``, each normalised by its mean noise variance); the frame-to-frame term is then normalised by
    the targets' mean noise variance too; ``near`` as :func:`f2f_loss`'s. With ``ema`` > 0 ``full`` ends
    holding the weight average.
    Rows: step, loss (÷ 1e-3 unguarded), mask share, seconds, scores."""
    from rawrcl.train.adapt_objective import Guarded

    jdd = full.with_output("jdd")
    params = [p for p in full.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    avg = [p.detach().clone() for p in params]
    col = colour_map(data.crop)
    guarded = anchor > 0 or mix > 0
    # adapt's guards around the frame-to-frame term (passed in as the batch's "f2f")
    guard = (
        Guarded("f2f", lambda b, _: {"loss": b["f2f"]}, full.state_dict(), anchor, mix) if guarded else None
    )
    rng = np.random.default_rng(1)

    def swap() -> None:
        for p, e in zip(params, avg, strict=True):
            tmp = p.detach().clone()
            p.data.copy_(e)
            e.copy_(tmp)

    def scored() -> dict:
        full.eval()
        if ema > 0:
            swap()
        r = score()
        if ema > 0:
            swap()
        return r

    rows = [{"step": 0, **scored()}]
    log(f"step 0: {rows[-1]}")
    t, acc, share = time.perf_counter(), 0.0, 0.0
    for s in range(1, steps + 1):
        jdd.train()
        loss = torch.zeros(())
        for _ in range(batch):
            b = data.draw()
            rgb = jdd(b["input"][None], b["noise"][None])
            lo, sh, var = f2f_loss(predict_samples(rgb, b["grid"], col), b, col, near=near)
            lo = lo / max(var, 1e-10) if guarded else lo / 1e-3  # guarded: in noise variances, as the mix
            loss, share = loss + lo / batch, share + sh / batch
        if guard is not None:
            crops = {"f2f": loss}
            if mix > 0 and mix_fn is not None:
                sup = [mix_fn(rng) for _ in range(batch)]
                for key, name in (("input", "input"), ("target", "target"), ("noise", "sup_noise")):
                    crops[name] = torch.stack([torch.as_tensor(c[key]).float() for c in sup])
            loss = guard(crops, full)["loss"]
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            for p, e in zip(params, avg, strict=True):
                e.mul_(ema).add_(p.detach(), alpha=1 - ema)
        acc += float(loss.detach())
        if s % every == 0 or s == steps:
            n = every if s % every == 0 else s % every
            row = {"step": s, "loss": round(acc / n, 4), "mask": round(share / n, 3)}
            rows.append({**row, "secs": round(time.perf_counter() - t, 1), **scored()})
            acc = share = 0.0
            log(f"step {s}: {rows[-1]}")
    if ema > 0:  # end holding what was scored
        swap()
    return rows


class BesideStart(torch.nn.Module):
    """The fine-tune ``fine`` beside the unchanged ``start`` (both two-stage RAW models), for
    :class:`~rawrcl.models.sure.SureShrink`: :meth:`parts` are the start with its own SURE weights and the
    fine-tune with its own, which an outer SureShrink weighs (K = 2, nested, 4 × 4 probe windows, the start
    kept next to a clip level) — :class:`~rawrcl.models.blindspot.WithBlindSpot`'s form with the fine-tune
    in the blind-spot network's slot; label-free, so the start comes back where the fine-tune is off
    (docs/adaptation.md, "Stop 103", "Stop 104"). Called directly: the start alone. Shapes: ``x`` (B, 4, h, w)
    packed, ``noise`` (B, 2 or 3, 4) → (B, 4, h, w)."""

    noise_aware = True
    raw_parts = True
    head_name = "raw"
    sure_grid = 4
    sure_first_near_clips = True
    part_names = ("start (its SURE weights)", "fine-tune (its SURE weights)")

    def __init__(self, start: torch.nn.Module, fine: torch.nn.Module) -> None:
        super().__init__()
        from rawrcl.models.geometry import size_multiple
        from rawrcl.models.sure import SureShrink

        self.start, self.fine = SureShrink(start), SureShrink(fine)
        self.size_multiple = math.lcm(size_multiple(start), size_multiple(fine))

    def parts(self, x: torch.Tensor, noise: torch.Tensor) -> list[torch.Tensor]:
        return [self.start(x, noise), self.fine(x, noise)]

    def blend_parts(self, *parts: torch.Tensor) -> torch.Tensor:
        return parts[0]

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.start.model(x, noise)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--burst", required=True, help="a burst folder; frame00.dng is the scored (never used) frame"
    )
    ap.add_argument("--model", default=None, help="two-stage RAW start (default: the shipped RAW denoiser)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument(
        "--batch", type=int, default=4, help="input crops per step (each against every other frame)"
    )
    ap.add_argument("--crop", type=int, default=96, help="target block, mosaic px (even)")
    ap.add_argument("--ema", type=float, default=0.0, help="weight average (0: none); scored on it")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--anchor", type=float, default=0.0, help="guard: weight of Σ(θ − θ₀)² (adapt: 0.05)")
    ap.add_argument(
        "--mix", type=float, default=0.0, help="guard: weight of synthetic supervised crops (adapt: 0.5)"
    )
    ap.add_argument(
        "--mix-zoom",
        type=float,
        default=0.0,
        help="share of the mix crops enlarged up to 8× (adapt's mix_zoom)",
    )
    ap.add_argument(
        "--near",
        type=float,
        default=0.5,
        help="score only target samples within this many px of an input pixel centre (0.5: all)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save", default=None, help="write the last scored weights as a RAW model file here")
    ap.add_argument("--check", action="store_true", help="then adapt's forgetting check, start against them")
    ap.add_argument(
        "--beside",
        action="store_true",
        help="then score the fine-tune beside the start (BesideStart; with --check, its check too)",
    )
    ap.add_argument(
        "--beside-model",
        default=None,
        help="with --beside: this RAW model or run in the start's slot (as rawrcl denoise --model runs it)",
    )
    ap.add_argument(
        "--fine",
        default=None,
        help="score this fine-tune (a --save file of the same start); no training (training options unused)",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.fine and args.save:
        print("error: --fine scores a saved fine-tune; --save is for a training run", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from rawrcl.data.noisy_crops import load_noise_files
    from rawrcl.eval import burst as B
    from rawrcl.eval import burst_score as S
    from rawrcl.eval.metrics import psnr_from_mse
    from rawrcl.infer import TileOptions, denoise_cfa
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.models.loading import default_weights_path
    from rawrcl.models.registry import load_checkpoint
    from rawrcl.models.shrink import maybe_shrink

    folder = Path(args.burst)
    burst = B.load_burst(folder, "frame00.dng")
    br = B.build_reference(burst)
    files = load_noise_files(list(burst.paths))
    truth = np.load(folder / "truth00.npy") if (folder / "truth00.npy").exists() else None
    mask = br.metric_mask(B.BORDER)
    full, _ = load_checkpoint(args.model or default_weights_path("raw-denoise"))
    if not (isinstance(full, DenoiseThenDemosaic) and full.output == "raw" and full.demosaicker is not None):
        print(
            "error: --model must be a two-stage RAW model (the shipped RAW denoiser's kind)", file=sys.stderr
        )
        return 2
    full = full.float()
    # the start as it was, for --check and --beside (taken before training changes ``full`` in place)
    start = copy.deepcopy(full).eval() if args.check or args.beside else None
    if args.fine:  # a saved fine-tune of this start, scored as if just trained
        from rawrcl.errors import RawrclError

        try:
            fine_model, _ = load_checkpoint(args.fine)
            if type(fine_model) is not type(full) or getattr(fine_model, "output", None) != full.output:
                out = getattr(fine_model, "output", None)
                raise RawrclError(f"a {type(fine_model).__name__} with output {out!r}")
            full.load_state_dict(fine_model.float().state_dict())
        except (RawrclError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"error: --fine {args.fine}: not a fine-tune of this start ({first})", file=sys.stderr)
            return 2
    shipped = maybe_shrink(full, True)  # as rawrcl denoise runs it (SURE weights)

    def score(model: torch.nn.Module | None = None) -> dict:
        """frame 00 through ``model`` (default: the fine-tune as ``rawrcl denoise`` runs it)"""
        with torch.no_grad():
            out = denoise_cfa(
                WithNoise(model or shipped, files[0].noise, 4), br.target, burst.pattern, TileOptions()
            )
        sc = S.score_raw(br, out, B.BORDER)
        r = {"psnr": round(sc["psnr"], 4), "psnr_true": round(sc["psnr_true"] or 0.0, 3)}
        if truth is not None:
            r["truth"] = round(
                psnr_from_mse(float(np.mean((np.clip(out, 0, 1)[mask] - truth[mask]) ** 2))), 4
            )
        return r

    if args.fine:  # nothing to train: no frame pairs to register, no mix crops
        rows = [{"step": 0, **score()}]
    else:
        train_files = files[1:]
        packed = [f.packed.astype(np.float32) for f in train_files]
        data = FramePairs(packed, [f.noise for f in train_files], pairwise_warps(packed), crop=args.crop)
        mix_fn = None
        if args.mix > 0:
            from rawrcl.train.adapt_objective import synthetic_mix

            mix_fn = synthetic_mix(args.crop, train_files, 0.5, zoom=args.mix_zoom)
        opts = {k: getattr(args, k) for k in ("lr", "batch", "ema", "every", "anchor", "mix", "near")}
        rows = train(full, data, args.steps, score, mix_fn=mix_fn, **opts)
    doc = {"args": vars(args), "rows": rows}
    if args.save or args.beside:
        from rawrcl.models.registry import read_checkpoint

        ck = read_checkpoint(args.model or default_weights_path("raw-denoise"))
        state = full.state_dict()
        # the fine-tune as a model file holds it (the start's dtype: the shipped file is float16)
        ck["state_dict"] = {k: state[k].detach().to(v.dtype) for k, v in ck["state_dict"].items()}
    if args.save and not args.fine:
        from rawrcl.models.registry import atomic_torch_save

        ck["extra"] = {**ck.get("extra", {}), "burst_f2f": {"burst": str(folder), **vars(args)}}
        atomic_torch_save(ck, args.save)
    if args.check:
        from rawrcl.train.adapt_signal import check_crops, check_scores

        checks = check_crops()
        base = check_scores(start, checks)
        drop = {k: v - base[k] for k, v in check_scores(full, checks).items()}
        worst = min(drop, key=drop.get)
        doc["forgetting"] = {"drop_db": drop, "worst": [worst, drop[worst]]}
        print(
            f"forgetting check: worst {worst} {drop[worst]:+.3f} dB, mean {np.mean(list(drop.values())):+.3f}"
        )
    if args.beside:
        from rawrcl.models.sure import SureShrink

        fine = copy.deepcopy(start)
        fine.load_state_dict({k: v.float() for k, v in ck["state_dict"].items()})
        slot = start
        if args.beside_model:
            from rawrcl.models.loading import load_for_task

            slot = load_for_task(args.beside_model, "raw-denoise")[0].float().eval()
        start_sure, beside = SureShrink(start), SureShrink(BesideStart(slot, fine))
        doc["beside"] = {"start": score(start_sure), "beside": score(beside)}
        if args.beside_model:
            doc["beside"]["slot"] = score(SureShrink(slot))
        # the outer (K = 2) weights of frame 00's tiles; NaN where a tile kept the slot's own output
        doc["beside"]["outer_weights"] = [round(float(v), 3) for v in np.nanmean(np.array(beside.seen), 0)]
        print(f"frame 00, start (SURE weights) {doc['beside']['start']}, beside it {doc['beside']['beside']}")
        if args.check:
            with torch.no_grad():
                base = check_scores(start_sure, checks)
                drop = {k: v - base[k] for k, v in check_scores(beside, checks).items()}
            worst = min(drop, key=drop.get)
            below = sum(v < -0.1 for v in drop.values())
            doc["beside"]["forgetting"] = {"drop_db": drop, "worst": [worst, drop[worst]], "below_0.1": below}
            print(
                f"beside, forgetting check (against the start, both with SURE weights): worst {worst} "
                f"{drop[worst]:+.3f} dB, mean {np.mean(list(drop.values())):+.3f}, {below} below -0.1"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
