"""Train the learned noise-level check of the single-image estimate (``rawrcl.calibration.learned``).

    python scripts/train_noise_estimator.py --work runs/nle --steps 2500 --lr 1e-3 --seed 0
    python scripts/train_noise_estimator.py --work runs/nle2 --steps 2000 --lr 3e-4 --seed 8 \
        --init runs/nle/nle.pt
    python scripts/train_noise_estimator.py --install runs/nle2/nle.pt  # → rawrcl/weights/noise_estimator.pt

Data: 256-px crops (a share 0.4 enlarged up to 4×: smooth content) of the training photos (cbsd68[:58],
urban100[:90]; sunhays80 stays out for testing), degraded by the raw-denoise task as the noise-aware denoiser
is trained (unprocessed half the time, exposure ×0.02–1 on 60 %), noise from ``rawrcl.noise.CameraSampler``
(Poisson shot noise, read noise, readout bit depth, black clipping or pedestal). Loss: Gaussian negative
log-likelihood of the true noise (input − clean) under λshot·clean + λread, on samples that are not clipped.
12 crops a step, Adam with a cosine schedule, gradients clipped at norm 1. The state (network, optimiser,
step) is saved atomically every 100 steps and a killed run resumes from it. ≈ 0.2–0.4 s a step on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_noise_aware import DATA, training_photos  # noqa: E402

WEIGHTS = Path(__file__).resolve().parents[1] / "rawrcl" / "weights" / "noise_estimator.pt"


def nll(lam: torch.Tensor, noisy: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """Mean Gaussian negative log-likelihood (up to a constant) of noisy − clean under the variance
    λshot·clean + λread per crop; ``lam`` (B, 2), mosaics (B, 4, h, w); clipped samples are left out."""
    v = lam[:, 0, None, None, None] * clean.clamp_min(0) + lam[:, 1, None, None, None]
    ok = ((noisy > 0) & (noisy < 1) & (clean < 0.98)).float()
    return (((noisy - clean) ** 2 / v + torch.log(v)) * ok).sum() / ok.sum().clamp_min(1)


def train(args) -> Path:
    from rawrcl.calibration.learned import build

    from rawrcl.data.labelled import LabelledCrops
    from rawrcl.io import atomic_path
    from rawrcl.noise import CameraSampler
    from rawrcl.tasks import get_task

    torch.set_num_threads(2)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    task = replace(
        get_task("raw-denoise", unprocess=True), unprocess_mix=0.5, exposure=(0.02, 1.0), exposure_mix=0.6
    )
    crops = LabelledCrops(
        training_photos(Path(args.data)),
        task,
        crop=256,
        seed=7,
        noise=CameraSampler(),
        augment=True,
        zoom=(0.4, 4.0),
        hard=(args.hard_p, args.hard_k) if args.hard_p > 0 else None,  # textured windows beside noise
    )
    net = build()
    if args.init:
        net.load_state_dict(torch.load(args.init, map_location="cpu", weights_only=True))
    opt = torch.optim.Adam(net.parameters(), args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    state_file, start = work / "state.pt", 1
    if state_file.exists():  # resume after a kill
        st = torch.load(state_file, map_location="cpu", weights_only=True)
        net.load_state_dict(st["net"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        start = int(st["step"]) + 1
    rng = np.random.default_rng([args.seed, start])
    t0, running = time.time(), None
    for step in range(start, args.steps + 1):
        items = [crops[(int(rng.integers(len(crops))), int(rng.integers(2**40)))] for _ in range(12)]
        noisy = torch.stack([it["input"] for it in items])
        clean = torch.stack([it["target"] for it in items])
        loss = nll(net(noisy), noisy, clean)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        value = float(loss.detach())
        running = value if running is None else 0.98 * running + 0.02 * value
        if step % 100 == 0 or step == args.steps:
            print(f"step {step}  nll {running:.4f}  {time.time() - t0:.0f} s", flush=True)
            with atomic_path(state_file) as tmp:
                state = {"net": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
                torch.save({**state, "step": step}, tmp)
            with atomic_path(work / "nle.pt") as tmp:
                torch.save(net.state_dict(), tmp)
    return work / "nle.pt"


def install(path: str, provenance: str) -> None:
    """Write the shipped weights: the state dict with its width and provenance."""
    from rawrcl.io import atomic_path

    sd = torch.load(path, map_location="cpu", weights_only=True)
    with atomic_path(WEIGHTS) as tmp:
        torch.save({"state_dict": sd, "width": 32, "provenance": provenance}, tmp)
    print(f"installed {WEIGHTS}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="runs/nle")
    ap.add_argument("--data", default=os.environ.get("RAWRCL_DATA", str(DATA)))
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default=None, help="a state dict to continue from")
    ap.add_argument("--hard-p", type=float, default=0.0, help="share of plain crops mined for texture")
    ap.add_argument("--hard-k", type=int, default=4, help="candidate windows per mined crop")
    ap.add_argument("--install", default=None, metavar="NLE.pt", help="install these weights and stop")
    ap.add_argument("--provenance", default="scripts/train_noise_estimator.py")
    a = ap.parse_args(argv)
    if a.install:
        install(a.install, a.provenance)
        return
    train(a)


if __name__ == "__main__":
    main()
