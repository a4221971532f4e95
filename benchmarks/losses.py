"""Benchmarks and studies for rawrcl.losses (issue 4). Prints Markdown tables.

    python benchmarks/losses.py speed    [--device cpu|cuda] [--batch 64] [--size 128] [--repeat 3]
    python benchmarks/losses.py signal   # scale / tau: logit spread, top-1, gradient norm
    python benchmarks/losses.py leak     # residual inflation: paper form vs normalisation remedies
    python benchmarks/losses.py mosaic   # JDD pre-training, MosaicConsistency T variants
    python benchmarks/losses.py all

Everything is seeded. CPU-only runs use ``torch.set_num_threads(--threads)`` (default 1).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rawrcl.cfa import mosaic_packed
from rawrcl.losses import MosaicConsistency, ResidualContrastiveLoss, keys_upsample2, pairwise
from rawrcl.noise import NoiseModel, PaperSampler

# ----------------------------------------------------------------------------------------------------
# data helpers
# ----------------------------------------------------------------------------------------------------

PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "colorwheel",
)


def photos() -> list[torch.Tensor]:
    """skimage photos as linear-ish RGB (3, H, W) float32 in [0, 1] (sRGB^2.2)."""
    import skimage.data as sd

    out = []
    for name in PHOTOS:
        im = getattr(sd, name)()[..., :3].astype(np.float32) / 255.0
        out.append(torch.from_numpy(im**2.2).permute(2, 0, 1).contiguous())
    return out


def blur(x: torch.Tensor, sigma: float = 2.0) -> torch.Tensor:
    r = int(3 * sigma)
    t = torch.arange(-r, r + 1, dtype=x.dtype)
    k = torch.exp(-(t**2) / (2 * sigma**2))
    k = k / k.sum()
    c = x.shape[1]
    x = F.conv2d(F.pad(x, (r, r, 0, 0), mode="reflect"), k.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c)
    return F.conv2d(F.pad(x, (0, 0, r, r), mode="reflect"), k.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c)


def pair_batch(n: int, size: int, seed: int, shift: int = 16, sigma_max: float = 20.0):
    """n instances: overlapping clean crops (a, b), noise, high-pass content, σ map.

    Each instance has its own photo location and its own λ from the paper's sampler (σ ≤ sigma_max, 8-bit).
    Returns dict of (n, 3, size, size) tensors in [0, 1] units.
    """
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    ims = photos()
    sampler = PaperSampler(1.0, sigma_max)
    keys = ("ya", "yb", "na", "nb", "ca", "cb", "sa", "sb", "xa2", "xb2")
    out: dict[str, list] = {k: [] for k in keys}
    for i in range(n):
        im = ims[i % len(ims)]
        _, h, w = im.shape
        y0 = int(rng.integers(0, h - size - shift))
        x0 = int(rng.integers(0, w - size - shift))
        region = im[None, :, y0 : y0 + size + shift, x0 : x0 + size + shift]
        hp = region - blur(region)
        nm: NoiseModel = sampler(rng)
        crops = {"a": (0, 0), "b": (shift, shift)}
        for tag, (oy, ox) in crops.items():
            y = region[..., oy : oy + size, ox : ox + size]
            out["y" + tag].append(y)
            out["n" + tag].append(nm.sample(y, generator=g) - y)
            out["x" + tag + "2"].append(nm.sample(y, generator=g))  # independent second realisation
            out["c" + tag].append(hp[..., oy : oy + size, ox : ox + size])
            out["s" + tag].append(nm.std(y))
    return {k: torch.cat(v) for k, v in out.items()}


def rms(x: torch.Tensor) -> float:
    return float(x.pow(2).mean().sqrt())


# ----------------------------------------------------------------------------------------------------
# speed
# ----------------------------------------------------------------------------------------------------

SPEED_CONFIGS = {
    "lower bound: sort once + pairwise L1 (cdist p=1)": None,
    "EMD contrastive (exact)": {"distance": "emd"},
    "EMD contrastive, quantiles=1024": {"distance": "emd", "distance_options": {"quantiles": 1024}},
    "EMD contrastive, per_channel": {"distance": "emd", "distance_options": {"per_channel": True}},
    "BD contrastive": {"distance": "bhattacharyya"},
    "MMD contrastive (binned, all values)": {"distance": "mmd"},
}


def _speed_child(name: str, batch: int, size: int, repeat: int, device: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    shape = (batch, 3, size, size)
    ra = (torch.randn(shape, generator=g) * 0.03).to(device).requires_grad_(True)
    rb = (torch.randn(shape, generator=g) * 0.03).to(device).requires_grad_(True)
    cfg = SPEED_CONFIGS[name]
    if cfg is None:

        def step():
            sa = torch.sort((ra * 255).reshape(batch, -1), dim=1).values
            sb = torch.sort((rb * 255).reshape(batch, -1), dim=1).values
            d = torch.cdist(sa[None], sb[None], p=1.0)[0] / sa.shape[1]
            d.sum().backward()
    else:
        loss_fn = ResidualContrastiveLoss(**cfg)

        def step():
            loss_fn(ra, rb).backward()

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for _ in range(repeat + 1):
        ra.grad = rb.grad = None
        sync()
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"name": name, "time_s": statistics.median(times[1:]), "peak_mib": peak / 2**20}


def speed(args) -> None:
    rows = []
    for name in SPEED_CONFIGS:
        cmd = [sys.executable, __file__, "_speed_child", "--name", name, "--batch", str(args.batch),
               "--size", str(args.size), "--repeat", str(args.repeat), "--device", args.device,
               "--threads", str(args.threads)]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
    lb = rows[0]["time_s"]
    dev = args.device if args.device != "cpu" else f"cpu ({args.threads} thread(s))"
    print(f"\n### Forward+backward, batch {args.batch} pairs of 3×{args.size}×{args.size}, {dev}\n")
    print(f"| configuration | time (s, median of {args.repeat}) | × lower bound | peak extra memory (MiB) |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['time_s']:.3f} | {r['time_s'] / lb:.2f} | {r['peak_mib']:.0f} |")
    # Accuracy of the quantile-subsampled EMD on realistic residuals.
    data = pair_batch(16, args.size, seed=3)
    ra = (data["na"] + 0.05 * data["ca"]) * 255
    rb = (data["nb"] + 0.05 * data["cb"]) * 255
    exact = pairwise(ra, rb, "emd")
    print("\n### Quantile-subsampled EMD: relative error vs exact (16×16 pairs of realistic residuals)\n")
    print("| quantiles | median rel. error | max rel. error |")
    print("|---:|---:|---:|")
    for q in (256, 1024, 4096):
        approx = pairwise(ra, rb, "emd", quantiles=q)
        rel = ((approx - exact).abs() / exact.clamp_min(1e-12)).flatten()
        print(f"| {q} | {float(rel.median()):.2e} | {float(rel.max()):.2e} |")


# ----------------------------------------------------------------------------------------------------
# signal (scale / tau)
# ----------------------------------------------------------------------------------------------------


def _signal_metrics(loss_fn: ResidualContrastiveLoss, ra, rb, **kw) -> dict:
    ra = ra.clone().requires_grad_(True)
    rb = rb.clone().requires_grad_(True)
    loss = loss_fn(ra, rb, **kw)
    loss.backward()
    d = loss_fn.last_distances
    eye = torch.eye(d.shape[0], dtype=torch.bool)
    acc = float((d.argmin(dim=1) == torch.arange(d.shape[0])).float().mean())
    logits = loss_fn.last_logits
    spread = float((logits.max(dim=1).values - logits.min(dim=1).values).mean())
    n = d.shape[0]
    gnorm = float(torch.cat([ra.grad.flatten(), rb.grad.flatten()]).norm())
    return {
        "d_pos": float(d[eye].mean()),
        "d_neg": float(d[~eye].mean()),
        "spread": spread,
        "loss_per_anchor": float(loss.detach()) / n,
        "chance": math.log(n),
        "acc": acc,
        "grad": gnorm,
    }


def signal(args) -> None:
    torch.set_num_threads(args.threads)
    data = pair_batch(args.pairs, args.size, seed=1)
    print(
        f"\n### Learning signal on realistic residuals ({args.pairs} instances, 3×{args.size}², σ8 ∈ [1, 20] "
        "per instance, residual = true noise + leak·high-pass(image))\n"
    )
    print("| leak | distance | normalize | scale | τ | d_pos | d_neg | logit range | loss/anchor (chance) "
          "| top-1 | ‖∂L/∂r‖ |")  # fmt: skip
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    configs = [
        ("emd", "none", 1.0, 0.5),
        ("emd", "none", 255.0, 0.1),
        ("emd", "none", 255.0, 0.5),
        ("emd", "none", 255.0, 1.0),
        ("emd", "std", 1.0, 0.5),
        ("emd", "std", 10.0, 0.5),
        ("emd", "std", 30.0, 0.5),
        ("emd", "noise_level", 1.0, 0.5),
        ("emd", "noise_level", 10.0, 0.5),
        ("bhattacharyya", "none", 255.0, 0.5),
        ("bhattacharyya", "none", 255.0, 0.1),
        ("mmd", "none", 255.0, 0.5),
        ("mmd", "none", 255.0, 0.05),
    ]
    for leak in (0.0, 0.1):
        ra = data["na"] + leak * data["ca"]
        rb = data["nb"] + leak * data["cb"]
        for dist, norm, scale, tau in configs:
            opts = {"generator": torch.Generator().manual_seed(0)} if dist == "mmd" else None
            fn = ResidualContrastiveLoss(dist, tau=tau, scale=scale, normalize=norm, distance_options=opts)
            kw = {"noise_std_a": data["sa"], "noise_std_b": data["sb"]} if norm == "noise_level" else {}
            m = _signal_metrics(fn, ra, rb, **kw)
            print(
                f"| {leak} | {dist} | {norm} | {scale:g} | {tau:g} | {m['d_pos']:.3g} | {m['d_neg']:.3g} | "
                f"{m['spread']:.3g} | {m['loss_per_anchor']:.3f} ({m['chance']:.3f}) | {m['acc']:.2f} | "
                f"{m['grad']:.3g} |"
            )


# ----------------------------------------------------------------------------------------------------
# leak (residual inflation)
# ----------------------------------------------------------------------------------------------------


def leak(args) -> None:
    """Toy: residual of image j is r = g_j·n + s_j·c (n true noise, c high-pass image content).
    Adam lr 0.05 on (g, s), initialised at the ideal denoiser (g = 1, s = 0).

    The denoiser's output is then f = y + (1 − g_j)·n − s_j·c. Consistency proxy = mean |x' − f| with x' an
    independent noisy realisation (what translate-mosaic consistency compares against): minimal at
    g = 1, s = 0. Total = α·contrast + consistency, optimised over (g_j, s_j) by Adam. Reports the residual
    RMS relative to the true noise and the content-leak ratio ‖s·c‖/‖n‖ after training.
    """
    torch.set_num_threads(args.threads)
    data = pair_batch(args.pairs, args.leak_size, seed=2)
    n = data["na"].shape[0]
    checkpoints = sorted({max(1, args.steps // 3), args.steps})
    print(
        f"\n### Residual inflation study ({n} instances, 3×{args.leak_size}², {args.steps} Adam steps "
        "lr 0.05; residual r_j = g_j·noise + s_j·highpass(image))\n"
    )
    print("| normalize | α | g (median) | RMS(r)/RMS(noise) at steps " + "/".join(str(c) for c in checkpoints)
          + " | leak ‖s·c‖/‖n‖ (median) | RMS(f(x) − y)/RMS(noise) | contrast/anchor | top-1 |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for norm in ("none", "std", "noise_level"):
        for alpha in (1e-3, 0.1, math.inf):
            traj = []
            g = torch.ones(n, 1, 1, 1, requires_grad=True)
            s = torch.zeros(n, 1, 1, 1, requires_grad=True)
            opt = torch.optim.Adam([g, s], lr=0.05)
            fn = ResidualContrastiveLoss("emd", tau=0.5, normalize=norm)
            kw = {"noise_std_a": data["sa"], "noise_std_b": data["sb"]} if norm == "noise_level" else {}
            for step in range(1, args.steps + 1):
                ra = g * data["na"] + s * data["ca"]
                rb = g * data["nb"] + s * data["cb"]
                c = fn(ra, rb, **kw)
                fa = data["ya"] + (1 - g) * data["na"] - s * data["ca"]
                fb = data["yb"] + (1 - g) * data["nb"] - s * data["cb"]
                cons = 0.5 * ((data["xa2"] - fa).abs().mean() + (data["xb2"] - fb).abs().mean())
                loss = c if math.isinf(alpha) else alpha * c + cons
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step in checkpoints:
                    traj.append(rms((g * data["na"] + s * data["ca"]).detach()) / rms(data["na"]))
            with torch.no_grad():
                ra = g * data["na"] + s * data["ca"]
                err = rms((1 - g) * data["na"] - s * data["ca"]) / rms(data["na"])
                lk = s.abs().flatten() * data["ca"].flatten(1).norm(dim=1) / data["na"].flatten(1).norm(dim=1)
                c = fn(ra, g * data["nb"] + s * data["cb"], **kw)
                acc = float((fn.last_distances.argmin(1) == torch.arange(n)).float().mean())
            a_txt = "∞ (contrast only)" if math.isinf(alpha) else f"{alpha:g}"
            tr = " / ".join(f"{t:.3g}" for t in traj)
            print(
                f"| {norm} | {a_txt} | {float(g.median()):.3g} | {tr} | {float(lk.median()):.3g} | "
                f"{err:.3g} | "
                f"{float(c) / n:.3f} | {acc:.2f} |"
            )


# ----------------------------------------------------------------------------------------------------
# mosaic consistency (JDD at 0 labels)
# ----------------------------------------------------------------------------------------------------


class TinyJDD(nn.Module):
    """Packed (B, 4, h, w) → RGB (B, 3, 2h, 2w) (``half=False``) or (B, 3, h, w) (``half=True``)."""

    def __init__(self, width: int = 32, depth: int = 5, half: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(4, width, 3, padding=1), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)
        self.half = half
        self.head = nn.Conv2d(width, 3 if half else 12, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(self.body(x))
        return y if self.half else F.pixel_shuffle(y, 2)


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    from rawrcl.eval.metrics import psnr_from_mse

    return psnr_from_mse(max(float(((a.clamp(0, 1) - b) ** 2).mean()), 1e-12))


def mosaic(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ims = photos()
    # Self-supervised pre-training uses the user's own noisy images, so the evaluation crops come from the
    # same photos (fresh noise, clean images never seen by the mosaic-consistency runs).
    train_ims = test_ims = ims[:5]
    nm = NoiseModel(lambda_shot=(8 / 255) ** 2, lambda_read=(4 / 255) ** 2)  # σ ≈ 9 (8-bit) at x = 1
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)

    def crops(pool, k, size):
        out = []
        for _ in range(k):
            im = pool[int(rng.integers(len(pool)))]
            _, h, w = im.shape
            y0 = 2 * int(rng.integers(0, (h - size) // 2))
            x0 = 2 * int(rng.integers(0, (w - size) // 2))
            out.append(im[:, y0 : y0 + size, x0 : x0 + size])
        return torch.stack(out)

    test_rgb = crops(test_ims, 6, 128)
    test_x = nm.sample(mosaic_packed(test_rgb, "RGGB"), generator=torch.Generator().manual_seed(1))
    border = 8

    def score(rgb_out):
        return _psnr(
            rgb_out[..., border:-border, border:-border], test_rgb[..., border:-border, border:-border]
        )

    # Classical reference: bilinear demosaicing of the noisy mosaic (no denoising).
    from rawrcl.cfa import unpack
    from rawrcl.demosaic import demosaic

    cfa = unpack(test_x, "RGGB").numpy()
    bil = np.stack([demosaic(c, "RGGB", "bilinear") for c in cfa])
    net_txt = "tiny 5-layer conv net" if args.arch == "tiny" else "rawrcl U-Net width 16 depth 2"
    print(f"\n### JDD pre-training with MosaicConsistency only (0 labels), {args.mosaic_steps} steps, "
          f"batch 8 of 64×64, {net_txt}, Adam lr {args.lr:g}, σ8 ≈ 9 at x = 1\n")  # fmt: skip
    print("| transform T | RGB PSNR of f(x) vs clean (dB) | train time (s) |")
    print("|---|---:|---:|")
    print(
        f"| (reference) bilinear demosaic of the noisy mosaic | "
        f"{score(torch.from_numpy(bil).float()):.2f} | – |"
    )
    tr = {"transform": "translate"}
    variants = [
        ("identity", {"transform": "identity"}),
        ("upsample2 (packed-res RGB output + Keys ×2)", {"transform": "upsample2"}),
        ("translate, max_shift=1, sub-pixel", {**tr, "max_shift": 1, "subpixel": True}),
        ("translate, max_shift=2, sub-pixel", {**tr, "max_shift": 2, "subpixel": True}),
        ("translate, max_shift=1, integer only", {**tr, "max_shift": 1, "subpixel": False}),
        ("translate, max_shift=2, integer only", {**tr, "max_shift": 2, "subpixel": False}),
        ("(reference) supervised L1 to the clean RGB", None),
    ]
    for label, cfg in variants:
        torch.manual_seed(0)
        # Same training crops and noise for every variant.
        rng = np.random.default_rng(100)
        gen = torch.Generator().manual_seed(100)
        half = cfg is not None and cfg["transform"] == "upsample2"
        net = _jdd_net(half, args.arch)
        loss_fn = MosaicConsistency(**cfg, seed=0) if cfg is not None else None
        opt = torch.optim.Adam(net.parameters(), lr=args.lr)
        t0 = time.perf_counter()
        for _ in range(args.mosaic_steps):
            rgb = crops(train_ims, 8, 64)
            x = nm.sample(mosaic_packed(rgb, "RGGB"), generator=gen)
            out = net(x)
            loss = loss_fn(x, out) if loss_fn is not None else (out - rgb).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dt = time.perf_counter() - t0
        with torch.no_grad():
            out = net(test_x)
            if half:
                out = keys_upsample2(out)
        print(f"| {label} | {score(out):.2f} | {dt:.0f} |", flush=True)


def _jdd_net(half: bool, arch: str) -> nn.Module:
    """JDD net: rawrcl.models U-Net (head 'jdd', or 'rgb' at packed resolution for upsample2) or TinyJDD."""
    if arch == "tiny":
        return TinyJDD(half=half)
    from rawrcl.models import build_model

    return build_model(
        {"arch": "unet", "in_channels": 4, "head": "rgb" if half else "jdd", "width": 16, "depth": 2}
    )


# ----------------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["speed", "signal", "leak", "mosaic", "all", "_speed_child"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--leak-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--mosaic-steps", type=int, default=600)
    p.add_argument("--arch", choices=["unet", "tiny"], default="unet", help="JDD net of the mosaic study")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate of the mosaic study")
    p.add_argument("--name", default="")
    args = p.parse_args()
    if args.what == "_speed_child":
        print(
            json.dumps(_speed_child(args.name, args.batch, args.size, args.repeat, args.device, args.threads))
        )
        return
    for what, fn in (("speed", speed), ("signal", signal), ("leak", leak), ("mosaic", mosaic)):
        if args.what in (what, "all"):
            fn(args)


if __name__ == "__main__":
    main()
