"""Frame-to-frame fine-tuning on small synthetic bursts: its geometry (a frame's RGB resampled at another
frame's mosaic samples predicts them; :mod:`rawrcl.data.frame_pairs`, :mod:`rawrcl.methods.f2f`) and
``benchmarks/burst_f2f.py``'s training loop and scoring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rawrcl.data.frame_pairs import FramePairs, colour_map, pairwise_warps
from rawrcl.methods.f2f import f2f_loss, predict_samples
from tests.conftest import load_benchmark

SHIFTS = [(0.0, 0.0), (1.3, -2.7), (-2.2, 0.6), (0.8, 1.9)]  # (dy, dx) mosaic px per frame


def _burst(size: int = 160):
    """(RGB frames (3, H, W), packed RGGB mosaics (4, H/2, W/2)) of one smooth scene, translated per frame."""
    from scipy.ndimage import gaussian_filter, shift

    from rawrcl.cfa import mosaic, pack

    rng = np.random.default_rng(0)
    scene = np.stack([gaussian_filter(rng.standard_normal((size + 32, size + 32)), 4.0) for _ in range(3)])
    scene = 0.4 + 0.25 * scene / scene.std()
    rgbs, packed = [], []
    for dy, dx in SHIFTS:
        rgb = np.stack([shift(p, (dy, dx), order=5, mode="reflect") for p in scene])[:, 16:-16, 16:-16]
        rgbs.append(rgb.astype(np.float32))
        packed.append(pack(mosaic(rgb, "RGGB")[0], "RGGB").astype(np.float32))
    return rgbs, packed


def _errors(rgbs, packed, warps):
    """RMS error of frame 0's true RGB, resampled at the other frames' samples, against those samples."""
    noise = [np.array([[1e-3] * 4, [1e-5] * 4], np.float32)] * len(packed)
    data = FramePairs(packed, noise, warps, crop=32, margin=8, seed=1)
    col = colour_map(32)
    errs = []
    for _ in range(4):
        b = data.draw(i=0)
        rx, ry = b["origin"]
        big = b["input"].shape[-1] * 2
        rgb = torch.from_numpy(rgbs[0][:, ry : ry + big, rx : rx + big].copy())[None]
        pred = predict_samples(rgb, b["grid"], col)
        assert pred.shape == b["target"].shape == (len(packed) - 1, 32, 32)
        errs.append(float((pred - b["target"]).square().mean().sqrt()))
        loss, share, _ = f2f_loss(pred, b, col)
        assert share > 0.9 and float(loss) == pytest.approx(errs[-1] ** 2, rel=0.2)
    return float(np.mean(errs))


def test_a_frames_rgb_resampled_at_another_frames_samples_predicts_them():
    rgbs, packed = _burst()
    warps = pairwise_warps(packed)
    # the registration recovers the translations (packed px = mosaic px / 2; frame 0's x is x + shift in k)
    for k, (dy, dx) in enumerate(SHIFTS):
        assert warps[0][k][:, 2] == pytest.approx([dx / 2, dy / 2], abs=0.05)
    good = _errors(rgbs, packed, warps)
    assert good < 0.004, good  # signal std 0.25: bicubic on a smooth scene
    flipped = [[warps[j][i] for j in range(len(packed))] for i in range(len(packed))]  # the wrong direction
    assert _errors(rgbs, packed, flipped) > 5 * good


def test_f2f_loss_masks_dark_predictions_without_reading_the_target():
    col = colour_map(8)
    pred = torch.full((2, 8, 8), 0.5)
    pred[:, :4] = 0.001  # far below 3 std of λread 1e-4 (std 0.01)
    target = pred.clone()
    target[:, :4] = 0.7  # would dominate the loss if read
    noise_j = torch.tensor([[[1e-3] * 4, [1e-4] * 4]] * 2)
    loss, share, var = f2f_loss(pred, {"target": target, "noise_j": noise_j}, col)
    assert float(loss) == 0.0 and share == pytest.approx(0.5)
    assert var == pytest.approx(1e-3 * 0.5 + 1e-4, rel=1e-4)  # over the scored half only
    loss, _, _ = f2f_loss(pred + 0.01, {"target": target, "noise_j": noise_j}, col)
    assert float(loss) == pytest.approx(1e-4, rel=1e-3)


def _tiny_two_stage():
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "width": 4, "depth": 2, "skip": True, "noise_aware": True}
    return DenoiseThenDemosaic(
        build_model({**cfg, "head": "raw"}), build_model({**cfg, "head": "jdd"}), output="raw"
    )


def _tiny_pairs() -> FramePairs:
    _, packed = _burst(128)
    rng = np.random.default_rng(1)
    noisy = [np.clip(p + 0.02 * rng.standard_normal(p.shape), 0, 1).astype(np.float32) for p in packed]
    noise = [np.array([[1e-3] * 4, [4e-4] * 4], np.float32)] * len(noisy)
    return FramePairs(noisy, noise, pairwise_warps(noisy), crop=32, margin=8)


def test_f2f_training_steps_move_both_stages_and_score_each_checkpoint():
    from rawrcl.train.adapt_f2f import train_f2f

    full = _tiny_two_stage()
    before = [p.detach().clone() for p in full.parameters()]
    calls = []
    rows = train_f2f(
        full,
        _tiny_pairs(),
        3,
        score=lambda: calls.append(full.training) or {"psnr": 0.0},
        batch=2,
        ema=0.9,
        every=2,
    )
    assert [r["step"] for r in rows] == [0, 2, 3] and calls == [False] * 3
    assert all(np.isfinite(r["loss"]) and 0 < r["mask"] <= 1 for r in rows[1:])
    moved = [float((p.detach() - q).abs().max()) for p, q in zip(full.parameters(), before, strict=True)]
    assert max(moved[: len(list(full.denoiser.parameters()))]) > 0 and max(moved[-1:]) > 0


def test_near_keeps_only_samples_close_to_an_input_pixel_centre():
    _, packed = _burst()
    warps = pairwise_warps(packed)
    data = FramePairs(packed, [np.array([[1e-3] * 4, [1e-5] * 4], np.float32)] * 4, warps, crop=32, margin=8)
    b = data.draw(i=0)
    frac = b["frac"]
    assert frac.shape == b["target"].shape and 0 <= float(frac.min()) and float(frac.max()) <= 0.5
    # SHIFTS' offsets lie 0.3 / 0.3, 0.2 / 0.4, 0.2 / 0.1 px from an integer: the larger axis 0.3, 0.4, 0.2
    assert sorted(round(float(f.mean()), 1) for f in frac) == [0.2, 0.3, 0.4]
    col = colour_map(32)
    pred = b["target"] + 0.01
    _, every, _ = f2f_loss(pred, b, col)
    _, near, _ = f2f_loss(pred, b, col, near=0.25)
    assert near == pytest.approx(every / 3, rel=0.05)  # only the frame shifted by 0.2 px is kept


class _Blur(torch.nn.Module):
    """A noise-aware 'denoiser': a 5 × 5 box blur of its input, plus ``err``."""

    def __init__(self, err: float) -> None:
        super().__init__()
        self.err = err

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(x, 5, 1, 2, count_include_pad=False) + self.err


def test_a_fine_tune_beside_the_start_keeps_whichever_estimate_is_right_by_sure_weights():
    from scipy.ndimage import gaussian_filter

    from rawrcl.models.beside import WithFineTune
    from rawrcl.models.sure import SureShrink

    rng = np.random.default_rng(0)
    g = gaussian_filter(rng.standard_normal((4, 160, 160)), (0, 8, 8))
    # smooth: a blur denoises it
    truth = torch.from_numpy((0.4 + 0.1 * g / g.std()).astype(np.float32)).clamp(0.1, 0.8)[None]
    noise = torch.tensor([[[5e-3] * 4, [1e-4] * 4]])
    sd = (5e-3 * truth + 1e-4).sqrt()
    y = truth + sd * torch.randn(truth.shape, generator=torch.Generator().manual_seed(1))

    def err(model: torch.nn.Module) -> float:
        with torch.no_grad():
            return float((SureShrink(model)(y, noise) - truth).square().mean())

    good, bad = _Blur(0.0), _Blur(0.03)
    assert err(bad) > 4 * err(good)
    for start, fine in ((good, bad), (bad, good)):  # the right one wins, in either slot
        assert err(WithFineTune(start, fine)) < 1.2 * err(good)
    assert torch.equal(WithFineTune(bad, good)(y, noise), bad(y, noise))  # called directly: the start


def test_a_saved_fine_tune_is_scored_again_beside_another_model(tmp_path):
    """``--save`` then ``--fine`` gives the trained checkpoint's frame-00 score back (float16 file), and
    ``--beside-model`` scores a model given by path in the start's slot (here the fine-tune itself)."""
    import json

    from rawrcl.io.dng import write_dng
    from tests.test_burst import _burst

    bench = load_benchmark("burst_f2f")
    _, _, noisy = _burst(n=4)
    for k, x in enumerate(noisy):
        dn = np.clip(x * 3583 + 512, 0, 4095).astype(np.uint16)
        write_dng(tmp_path / f"frame{k:02d}.dng", dn, "RGGB", 512, 4095, noise_profile=(4e-3, 1e-4))
    fine, first, again = tmp_path / "F.pt", tmp_path / "a.json", tmp_path / "b.json"
    args = ["--burst", str(tmp_path), "--steps", "1", "--every", "1", "--batch", "1", "--crop", "32"]
    args += ["--lr", "3e-3", "--threads", "1"]
    assert bench.main([*args, "--save", str(fine), "--json", str(first)]) == 0
    rows = json.loads(first.read_text())["rows"]
    assert abs(rows[1]["psnr"] - rows[0]["psnr"]) > 0.1  # the step changed the model
    composite = tmp_path / "C.pt"
    extra = ["--fine", str(fine), "--beside", "--beside-model", str(fine), "--json", str(again)]
    assert bench.main([*args, *extra, "--save-beside", str(composite)]) == 0
    doc = json.loads(again.read_text())
    assert [r["step"] for r in doc["rows"]] == [0]  # no training
    assert doc["rows"][0]["psnr"] == pytest.approx(rows[1]["psnr"], abs=0.01)
    beside = doc["beside"]
    assert beside["start"]["psnr"] == pytest.approx(rows[0]["psnr"], abs=0.01)  # the start, unchanged
    assert beside["slot"]["psnr"] == pytest.approx(rows[1]["psnr"], abs=0.01)  # the fine-tune in its slot
    assert len(beside["outer_weights"]) == 2 and sum(beside["outer_weights"]) <= 1 + 1e-6
    # --save-beside: the composite as a model file the commands load (RAW only)
    from rawrcl.models.beside import WithFineTune
    from rawrcl.models.loading import load_for_task

    assert isinstance(load_for_task(composite, "raw-denoise")[0], WithFineTune)
    assert bench.main([*args, "--save-beside", str(tmp_path / "D.pt")]) == 2  # needs --beside
    # refused in one line, exit 2: --save beside --fine, a file that is not a fine-tune of this start
    from rawrcl.models.loading import default_weights_path

    assert bench.main([*args, "--fine", str(fine), "--save", str(tmp_path / "G.pt")]) == 2
    (tmp_path / "text.pt").write_text("not a checkpoint")
    for other in (tmp_path / "text.pt", default_weights_path("jdd")):
        assert bench.main([*args, "--fine", str(other)]) == 2
