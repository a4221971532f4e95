"""``rawrcl demo``: the end-to-end demo on scikit-image's bundled photos (library: rawrcl.demo)."""

from __future__ import annotations

import click
from rawrcl.cli.common import user_errors


@click.command()
@click.option("--out", default="rawrcl-demo", show_default=True, help="Demo folder (created).")
@click.option("--quick", is_flag=True, help="Smaller: 2 photos cropped to 256×256.")
@click.option("--pretrain", is_flag=True, help="Also pre-train a small U-Net with RCL on the noisy DNGs.")
@click.option("--steps", default=150, show_default=True, help="Pre-training steps with --pretrain.")
@click.option("--force", is_flag=True, help="Use --out even if it holds other files.")
@user_errors
def demo(out, quick, pretrain, steps, force):
    """Noisy DNGs from bundled photos → rawrcl jdd + denoise with the shipped weights → PSNR vs the clean
    reference, beside bilinear / Menon / LibRaw demosaicing. No data or download needed."""
    import torch

    from rawrcl.demo import run_demo

    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    run_demo(out, quick=quick, pretrain=pretrain, steps=steps, force=force, echo=click.echo)
