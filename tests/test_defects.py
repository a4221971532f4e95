"""Hot/dead pixel repair (``rawrcl.defects``) and ``rawrcl denoise/jdd --hot-pixels``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _mosaic(rng, shape=(128, 160)) -> np.ndarray:
    """A smooth Bayer scene in [0.05, 0.6] (different per colour site)."""
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]] / max(shape)
    scene = 0.3 + 0.2 * np.sin(5 * xx) * np.cos(3 * yy) + 0.05 * (np.indices(shape).sum(0) % 2)
    return np.clip(scene, 0.05, 0.6)


@pytest.mark.parametrize("pattern", ["RGGB", "GRBG", "BGGR", "GBRG"])
def test_repair_finds_the_defects_and_leaves_the_noise(pattern):
    from rawrcl.defects import repair_hot_pixels

    rng = np.random.default_rng(0)
    ls, lr = 4e-3, 1e-4
    clean = _mosaic(rng)
    noisy = (clean + rng.normal(size=clean.shape) * np.sqrt(ls * clean + lr)).astype(np.float32)
    hot = [(10, 11), (40, 77), (101, 2), (0, 0)]
    dead = [(64, 64), (90, 121)]
    for y, x in hot:
        noisy[y, x] = 1.0
    for y, x in dead:
        noisy[y, x] = 0.0
    out, n = repair_hot_pixels(noisy, pattern, ls, lr)
    for y, x in hot + dead:
        assert abs(out[y, x] - clean[y, x]) < 0.1, (y, x)
    changed = out != noisy
    assert n == int(changed.sum())
    assert len(hot + dead) <= n <= len(hot + dead) + 3  # Gaussian noise alone almost never trips 8σ
    # noise-free file: only the defects, and a real edge (step of 0.2) is kept
    flat = _mosaic(rng).astype(np.float32)
    flat[:, 80:] += 0.2
    flat[5, 6] = 0.9
    out2, n2 = repair_hot_pixels(flat, pattern, 0.0, 0.0)
    assert n2 == 1 and out2[5, 6] < 0.7 and np.array_equal(np.delete(out2.ravel(), 5 * 160 + 6),
                                                           np.delete(flat.ravel(), 5 * 160 + 6))  # fmt: skip


def test_denoise_hot_pixels_option_logs_and_repairs(tmp_path: Path):
    from click.testing import CliRunner
    from rawrcl.cli import main

    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import read_raw
    from rawrcl.models import build_model, save_checkpoint

    rng = np.random.default_rng(1)
    clean = _mosaic(rng)
    noisy = clean + rng.normal(size=clean.shape) * np.sqrt(2e-3 * clean + 1e-5)
    noisy[20, 30] = 1.0
    dn = np.clip(np.rint(64 + noisy * (4095 - 64)), 0, 4095).astype(np.uint16)
    src = write_dng(tmp_path / "hp.dng", dn, "GRBG", 64, 4095, noise_profile=[(2e-3, 1e-5)] * 3)
    cfg = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 4, "depth": 2, "skip": True}
    save_checkpoint(tmp_path / "m.pt", build_model({**cfg, "noise_aware": True}))
    outs = {}
    for flag in ([], ["--hot-pixels"]):
        dst = tmp_path / f"o{len(flag)}.dng"
        r = CliRunner().invoke(
            main, ["denoise", str(src), "-o", str(dst), "--model", str(tmp_path / "m.pt"), *flag]
        )
        assert r.exit_code == 0, r.output
        outs[len(flag)] = (r.stdout, read_raw(dst).cfa)
    assert "hot/dead pixel" not in outs[0][0]
    assert "hp.dng: 1 hot/dead pixel replaced" in outs[1][0] and "noise from DNG NoiseProfile" in outs[1][0]
    assert outs[1][1][20, 30] < outs[0][1][20, 30] - 0.2
