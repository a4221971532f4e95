"""`rawrcl demo`, reduced: bundled photos → noisy DNGs → jdd + denoise → PSNR against the clean reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from rawrcl.errors import RawrclError

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> tuple[Path, Path]:
    from rawrcl.models import build_model, save_checkpoint

    d = tmp_path_factory.mktemp("demo_models")
    torch.manual_seed(0)
    jdd = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 4, "depth": 2}).eval()
    save_checkpoint(d / "jdd.pt", jdd)
    ident = build_model({"arch": "dncnn", "in_channels": 4, "head": "raw", "width": 4, "depth": 2}).eval()
    nn.init.zeros_(ident.head.conv.weight)  # DnCNN returns x − head(body(x)): identity
    nn.init.zeros_(ident.head.conv.bias)
    save_checkpoint(d / "raw.pt", ident)
    return d / "jdd.pt", d / "raw.pt"


def test_demo_reduced(tmp_path: Path, tiny_models):
    from rawrcl.demo import run_demo
    from rawrcl.io.raw import read_raw

    lines: list[str] = []
    out = tmp_path / "demo"
    s = run_demo(out, quick=True, n_photos=1, size=96, jdd_model=tiny_models[0], denoise_model=tiny_models[1],
                 echo=lines.append)  # fmt: skip
    assert json.loads((out / "summary.json").read_text())["psnr_db"] == s["psnr_db"]
    den = s["psnr_db"]["raw-denoise"]
    # identity "denoiser": same PSNR as the noisy input (the DNG round trip only re-quantises)
    assert den["rawrcl denoise (default)"] == pytest.approx(den["noisy input"], abs=0.05)
    # noise preset 'high' on a linear mosaic: well below 40 dB, well above 10 dB
    assert 10 < den["noisy input"] < 40
    jdd = s["psnr_db"]["jdd"]
    assert jdd["menon demosaic of the noisy mosaic"] > 10 and np.isfinite(jdd["rawrcl jdd (default)"])
    # the classical baselines the models are compared with denoise: above their noisy inputs
    assert jdd["Menon + NLM (classical pipeline)"] > jdd["menon demosaic of the noisy mosaic"] + 0.5
    menon = jdd["menon demosaic of the noisy mosaic"]
    for name in ("LibRaw AHD", "LibRaw DHT + FBDD"):  # right phase and units
        assert abs(jdd[f"{name} demosaic of the noisy mosaic"] - menon) < 2
    assert den["GAT+BM3D (classical gold standard)"] > den["noisy input"] + 1.0
    for p in s["outputs"]:
        assert Path(p).is_file()
    dng = [p for p in s["outputs"] if p.endswith(".dng")][0]
    r = read_raw(dng)
    assert r.pattern == "GRBG" and r.cfa.shape == (96, 96)
    assert any("PSNR" in line for line in lines) and any(str(out) in line for line in lines)


def test_demo_with_pretraining(tmp_path: Path, tiny_models):
    """--pretrain adds a self-supervised RCL model's row (it crashed on save_every=0 before)."""
    from rawrcl.demo import run_demo

    s = run_demo(tmp_path / "demo", pretrain=True, steps=2, n_photos=1, size=96, jdd_model=tiny_models[0],
                 denoise_model=tiny_models[1], echo=lambda _: None)  # fmt: skip
    row = s["psnr_db"]["jdd"]["rawrcl jdd (pretrained (RCL, self-supervised))"]
    assert np.isfinite(row) and (tmp_path / "demo" / "pretrain" / "checkpoints" / "last.pt").is_file()


def test_demo_refuses_foreign_folder(tmp_path: Path, tiny_models):
    from rawrcl.demo import run_demo

    (tmp_path / "mine.txt").write_text("user data")
    with pytest.raises(RawrclError, match="not a rawrcl demo folder"):
        run_demo(tmp_path, quick=True, jdd_model=tiny_models[0], denoise_model=tiny_models[1])


def test_demo_cli_with_shipped_weights(tmp_path: Path):
    from click.testing import CliRunner
    from rawrcl.cli import main

    from rawrcl.tasks import get_task

    weights = Path(__file__).resolve().parents[1] / "rawrcl" / "weights"
    if not all((weights / get_task(t).default_weights).is_file() for t in ("jdd", "raw-denoise")):
        pytest.skip("shipped default weights not present")
    res = CliRunner().invoke(main, ["demo", "--quick", "--out", str(tmp_path / "d")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "d" / "summary.json").read_text())
    # quality is measured by scripts/train_default_weights.py (docs/weights.md), not here: the shipped
    # models must load, run on the simulated DNG and give finite PSNRs on the right grid
    assert np.isfinite(s["psnr_db"]["raw-denoise"]["rawrcl denoise (default)"])
    assert np.isfinite(s["psnr_db"]["jdd"]["rawrcl jdd (default)"])
    assert "PSNR" in res.output and all(Path(p).is_file() for p in s["outputs"])
