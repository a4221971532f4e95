"""Row (banding) noise: the noise model's offsets, the estimator, R2R recorruption and SURE with banding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rawrcl.errors import RawrclError


def _photo_packed(scale: float = 0.3) -> np.ndarray:
    """A packed (4, 200, 250) grey scene from a bundled photo, [0, scale]."""
    from rawrcl.sample_data import bundled_photos

    a = [p for _, p in bundled_photos(2)][1].mean(-1) / 255.0
    m = np.kron(a, np.ones((2, 2)))[:400, :500]
    return (np.stack([m[0::2, 0::2], m[0::2, 1::2], m[1::2, 0::2], m[1::2, 1::2]]) * scale).astype(np.float32)


def _banded(x: np.ndarray, lam, row: float, rng, floor: float | None = 0.0) -> np.ndarray:
    n = rng.standard_normal(x.shape) * np.sqrt(lam[0] * x + lam[1])
    b = rng.standard_normal((2, x.shape[1])) * row
    y = x + n + np.stack([b[0], b[0], b[1], b[1]])[:, :, None]
    return (np.maximum(y, floor) if floor is not None else y).astype(np.float32)


def test_row_offsets_share_mosaic_rows_and_scale_per_sample():
    from rawrcl.noise import row_offsets

    g = torch.Generator().manual_seed(0)
    b = row_offsets((3, 4, 500, 7), torch.tensor([0.0, 0.01, 0.02]), g)
    assert b.shape == (3, 4, 500, 1)
    assert torch.equal(b[:, 0], b[:, 1]) and torch.equal(b[:, 2], b[:, 3])  # R/G1 and G2/B rows
    assert not torch.equal(b[:, 0], b[:, 2])
    assert float(b[0].abs().max()) == 0.0
    assert float(b[1].std()) == pytest.approx(0.01, rel=0.1)
    assert float(b[2].std()) == pytest.approx(0.02, rel=0.1)
    mono = row_offsets((1, 300, 5), 0.01, g)  # a mosaic: one offset per row
    assert mono.shape == (1, 300, 1)


def test_noise_model_row_component():
    from rawrcl.noise import NoiseModel

    with pytest.raises(RawrclError):
        NoiseModel(1e-3, 1e-5, row=-0.1)
    nm = NoiseModel(0.0, 1e-8, row=0.01)
    y = nm.sample(torch.zeros(1, 400, 300), generator=torch.Generator().manual_seed(1))
    rows = y[0].mean(1)
    assert float(rows.std()) == pytest.approx(0.01, rel=0.15)
    assert float((y[0] - rows[:, None]).std()) < 1e-3  # constant along each row
    assert nm.to_dict()["row"] == 0.01 and "row" not in NoiseModel(1e-3, 1e-5).to_dict()


@pytest.mark.parametrize("floor", [None, 0.0])
def test_estimate_row_noise_recovers_banding_and_ignores_scenes(floor):
    from rawrcl.calibration.rows import ROW_SIGNIFICANT, estimate_row_noise

    rng = np.random.default_rng(2)
    x = _photo_packed()
    lam = (2e-3, 2e-5)
    noise = torch.tensor([[lam[0]] * 4, [lam[1]] * 4])
    est = estimate_row_noise(_banded(x, lam, 0.005, rng, floor), noise, floor)
    assert est["row"] == pytest.approx(0.005, rel=0.15)
    assert est["stderr"] < 0.2 * est["row"] and est["ratio"] > ROW_SIGNIFICANT
    none = estimate_row_noise(_banded(x, lam, 0.0, rng, floor), noise, floor)
    assert none["ratio"] < ROW_SIGNIFICANT  # the photo's own horizontal edges are not banding
    with pytest.raises(ValueError):
        estimate_row_noise(np.zeros((3, 10, 100)), noise)


def test_recorrupted_row_noise_keeps_input_and_target_independent():
    """With banding, R2R's recorruption draws offsets of the same covariance: the row means of the input's
    and the target's noise are uncorrelated and the input's row variance is (1 + α²)·σ_row² (+ white)."""
    from rawrcl.methods.r2r import recorrupt

    g = torch.Generator().manual_seed(3)
    x = torch.full((32, 4, 64, 64), 0.3)
    lam, row, alpha = (2e-3, 2e-5), 0.01, 0.5
    noise = torch.tensor([[[lam[0]] * 4, [lam[1]] * 4]] * 32)
    from rawrcl.noise import row_offsets

    y = x + torch.randn(x.shape, generator=g) * (lam[0] * x + lam[1]).sqrt()
    y = y + row_offsets(x.shape, row, g)
    r = recorrupt(y, noise, torch.full((32,), -1.0), alpha, True, generator=g, row=torch.full((32,), row))
    a = (r["input"] - x).mean(-1).flatten()  # row means: banding + white/64
    b = (r["target"] - x).mean(-1).flatten()
    white = (lam[0] * 0.3 + lam[1]) / 64
    assert float((a * b).mean()) == pytest.approx(0.0, abs=0.2 * row**2)
    assert float(a.var()) == pytest.approx((1 + alpha**2) * (row**2 + white), rel=0.15)
    plain = recorrupt(y, noise, torch.full((32,), -1.0), alpha, True, generator=g)  # banding ignored
    a0, b0 = (plain["input"] - x).mean(-1).flatten(), (plain["target"] - x).mean(-1).flatten()
    assert float((a0 * b0).mean()) > 0.5 * row**2  # the banding stays in both: the target is not independent


def test_held_out_sure_with_row_noise_tracks_true_mse():
    """A horizontal blur keeps the banding: its true MSE is σ_row² + white/k. SURE told the row noise
    matches it; SURE blind to the banding does not."""
    from rawrcl.noise import row_offsets
    from rawrcl.train.adapt_signal import held_out_scores

    class RowBlur(torch.nn.Module):
        noise_aware = False

        def forward(self, x):
            return torch.nn.functional.avg_pool2d(
                torch.nn.functional.pad(x, (4, 4, 0, 0), mode="replicate"), (1, 9), 1
            )

    g = torch.Generator().manual_seed(4)
    x = torch.full((4, 48, 48), 0.3)
    lam, row = (2e-3, 1e-5), 0.01
    noise = torch.tensor([[lam[0]] * 4, [lam[1]] * 4])
    crops, true = [], []
    for _ in range(8):
        y = x + torch.randn(x.shape, generator=g) * (lam[0] * x + lam[1]).sqrt()
        y = y + row_offsets(x.shape, row, g)
        with torch.no_grad():
            true.append(float(((RowBlur()(y[None])[0] - x) ** 2).mean()))
        crops.append({"x": y, "noise": noise, "floor": -1.0, "row": row})
    told = held_out_scores(RowBlur(), crops, draws=4)["sure"]
    blind = held_out_scores(RowBlur(), [{**c, "row": 0.0} for c in crops], draws=4)["sure"]
    mse = float(np.mean(true))
    assert told == pytest.approx(mse, rel=0.15)
    assert abs(blind - mse) > 0.5 * mse


def test_adapt_row_noise_setting():
    from rawrcl.data.noisy_crops import pack_file
    from rawrcl.train.adapt import set_row_noise
    from rawrcl.train.config import AdaptConfig

    assert AdaptConfig().row_noise == "off" and AdaptConfig(row_noise="0.004").row_noise == "0.004"
    for bad in ("-1", "loud", "2"):
        with pytest.raises(RawrclError):
            AdaptConfig(row_noise=bad)
    rng = np.random.default_rng(5)
    x = _photo_packed()
    lam = torch.tensor([[2e-3] * 4, [2e-5] * 4])
    mosaic = np.zeros((400, 500), np.float32)
    y = _banded(x, (2e-3, 2e-5), 0.006, rng)
    mosaic[0::2, 0::2], mosaic[0::2, 1::2], mosaic[1::2, 0::2], mosaic[1::2, 1::2] = y
    f = pack_file("band.dng", mosaic, "RGGB", lam)
    assert "row noise" in set_row_noise(f, "auto") and f.row == pytest.approx(0.006, rel=0.15)
    assert set_row_noise(f, "off") == "" and f.row == 0.0
    set_row_noise(f, "0.002")
    assert f.row == 0.002 and f.describe()["row_noise"] == 0.002
    clean = np.zeros_like(mosaic)
    clean[0::2, 0::2], clean[0::2, 1::2], clean[1::2, 0::2], clean[1::2, 1::2] = _banded(
        x, (2e-3, 2e-5), 0.0, rng
    )
    g = pack_file("plain.dng", clean, "RGGB", lam)
    assert set_row_noise(g, "auto") == "" and g.row == 0.0


# ------------------------------------------------------------------------- row-aware conditioning
def _tiny(noise_aware: bool = True):
    from rawrcl.models import build_model

    torch.manual_seed(0)
    cfg = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 4, "depth": 2, "skip": True}
    return build_model({**cfg, "noise_aware": noise_aware}).eval()


def test_add_row_input_is_the_same_model_until_trained(tmp_path):
    """The row-aware copy computes exactly the start's output (any third row), survives a checkpoint
    round trip, and reads σ_row once its new weights are non-zero; blind models are refused."""
    from rawrcl.models.conditioning import add_row_input, is_row_aware
    from rawrcl.models.registry import load_checkpoint, save_checkpoint
    from rawrcl.noise import with_row_variance

    base = _tiny()
    row = add_row_input(base).eval()
    assert is_row_aware(row) and not is_row_aware(base) and add_row_input(row) is row
    x = torch.rand(2, 4, 16, 16)
    lam = torch.tensor([[2e-3] * 4, [2e-5] * 4]).expand(2, 2, 4)
    lam3 = with_row_variance(lam, torch.tensor([0.0, 0.02]))
    assert lam3.shape == (2, 3, 4) and lam3[1, 2, 0] == pytest.approx(4e-4)
    with torch.no_grad():
        ref = base(x, lam)
        assert torch.equal(row(x, lam), ref) and torch.allclose(row(x, lam3), ref, atol=1e-6)
        save_checkpoint(tmp_path / "r.pt", row)
        back, cfg = load_checkpoint(tmp_path / "r.pt")
        assert cfg["row_aware"] and torch.allclose(back.eval()(x, lam3), ref, atol=1e-6)
        first = back.body.down[0][0].weight
        first[:, 8:] = 1.0  # the σ_row inputs
        out = back(x, lam3)
        assert torch.equal(out[0], back(x, lam)[0]) and not torch.allclose(out[1], back(x, lam)[1])
    with pytest.raises(RawrclError, match="noise-aware"):
        add_row_input(_tiny(noise_aware=False))


def test_row_switch_keeps_the_start_for_samples_without_row_noise(tmp_path):
    """``add_row_input(switch=True)``: the starting model is kept, frozen, and every sample told σ_row = 0 (or
    no row) goes through it exactly, however the row-aware weights move; banded samples of the same batch
    go through those weights, unless told no more than ``row_min``; the switch survives a checkpoint round
    trip."""
    from rawrcl.models.conditioning import add_row_input, is_row_aware
    from rawrcl.models.registry import load_checkpoint, save_checkpoint
    from rawrcl.noise import with_row_variance

    base = _tiny()
    sw = add_row_input(base, switch=True).eval()
    assert is_row_aware(sw) and sw.config["row_switch"] and "row_switch" not in add_row_input(base).config
    assert not any(p.requires_grad for p in sw.plain.parameters()) and any(
        p.requires_grad for p in sw.parameters()
    )
    x = torch.rand(3, 4, 16, 16)
    lam = torch.tensor([[2e-3] * 4, [2e-5] * 4]).expand(3, 2, 4)
    lam3 = with_row_variance(lam, torch.tensor([0.0, 0.02, 0.0]))
    with torch.no_grad():
        ref = base(x, lam)
        for p in sw.body.parameters():  # "adaptation"
            p.add_(0.05)
        out = sw(x, lam3)
        assert torch.equal(sw(x, lam), ref) and torch.equal(out[0], ref[0]) and torch.equal(out[2], ref[2])
        assert torch.allclose(out[1:2], sw._forward(x[1:2], lam3[1:2]), atol=1e-6)
        assert not torch.allclose(out[1], ref[1])
        save_checkpoint(tmp_path / "s.pt", sw)
        back, cfg = load_checkpoint(tmp_path / "s.pt")
        assert cfg["row_switch"] and torch.equal(back(x, lam3), out)
        faint = add_row_input(base, switch=True, row_min=0.03).eval()  # σ_row 0.02 ≤ row_min: the start
        for p in faint.body.parameters():
            p.add_(0.05)
        assert torch.equal(faint(x, lam3), ref)
    with pytest.raises(RawrclError, match="row-aware"):
        from rawrcl.models.registry import build_model

        build_model({**base.config, "row_switch": True})


def test_with_noise_and_recorrupt_carry_the_row_variance():
    from rawrcl.methods.r2r import recorrupt
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.noise import NoiseModel

    m = WithNoise(_tiny(), NoiseModel(2e-3, 2e-5, row=0.01), 4)
    assert m.noise.shape == (3, 4) and float(m.noise[2, 0]) == pytest.approx(1e-4)
    assert WithNoise(_tiny(), NoiseModel(2e-3, 2e-5), 4).noise.shape == (2, 4)
    y = torch.rand(2, 4, 16, 16) * 0.5
    lam = torch.tensor([[2e-3] * 4, [2e-5] * 4]).expand(2, 2, 4)
    r = recorrupt(y, lam, torch.full((2,), -1.0), 0.5, row=torch.tensor([0.0, 0.01]))
    assert r["noise"].shape == (2, 3, 4) and float(r["noise"][1, 2, 0]) == pytest.approx(1.25e-4)
    assert recorrupt(y, lam, torch.full((2,), -1.0), 0.5)["noise"].shape == (2, 2, 4)


def test_row_noise_for_estimates_banding_only_for_row_aware_models():
    from rawrcl.infer.noise import row_noise_for
    from rawrcl.models.conditioning import add_row_input
    from rawrcl.noise import NoiseModel

    rng = np.random.default_rng(7)
    x = _photo_packed()
    nm = NoiseModel(2e-3, 2e-5)
    logs: list[str] = []
    for row, aware in ((0.006, True), (0.0, True), (0.006, False)):
        y = _banded(x, (2e-3, 2e-5), row, rng)
        mosaic = np.zeros((400, 500), np.float32)
        mosaic[0::2, 0::2], mosaic[0::2, 1::2], mosaic[1::2, 0::2], mosaic[1::2, 1::2] = y
        model = add_row_input(_tiny()) if aware else _tiny()
        got = row_noise_for(model, mosaic, "RGGB", nm, logs.append, "f.dng")
        if not aware:
            assert got is nm and len(logs) == 2
        elif row:
            assert got.row == pytest.approx(row, rel=0.15) and got.lambda_shot == 2e-3
        else:
            assert got.row == 0.0 and "none significant" in logs[-1]


def _banded_files() -> tuple[np.ndarray, list]:
    """(the clean packed scene, two packed files of it with σ_row 0.01 banding at λ (2e-3, 2e-5))."""
    from rawrcl.data.noisy_crops import pack_file

    rng = np.random.default_rng(11)
    x = _photo_packed()
    lam = torch.tensor([[2e-3] * 4, [2e-5] * 4])
    files = []
    for i in range(2):
        y = _banded(x, (2e-3, 2e-5), 0.01, rng)
        mosaic = np.zeros((400, 500), np.float32)
        mosaic[0::2, 0::2], mosaic[0::2, 1::2], mosaic[1::2, 0::2], mosaic[1::2, 1::2] = y
        files.append(pack_file(f"f{i}.dng", mosaic, "RGGB", lam))
    return x, files


def test_adapt_on_banded_files_makes_a_row_aware_checkpoint(tmp_path):
    """Files with significant row noise and ``deband`` off: ``adapt`` extends the start with the σ_row input,
    trains, and its checkpoint loads as a row-aware model that ``rawrcl denoise`` tells each file's
    estimate."""
    from rawrcl.models.registry import load_checkpoint, save_checkpoint
    from rawrcl.train.adapt import adapt

    save_checkpoint(tmp_path / "start.pt", _tiny())
    _, files = _banded_files()
    summ = adapt(
        files, tmp_path / "r", source=tmp_path / "start.pt", steps=2, crop=32, batch_size=2, evals=1,
        lr=1e-3, row_noise="auto", deband=False, progress=False,
    )  # fmt: skip
    assert all(f["row_noise"] == pytest.approx(0.01, rel=0.2) for f in summ["files"])
    model, cfg = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.pt")
    assert cfg["row_aware"] and model.body.down[0][0].weight.shape[1] == 12 and "deband_row" not in cfg


def test_camera_file_rows_keeps_the_camera_value_unless_a_file_reads_clearly_below_it():
    from rawrcl.calibration.rows import camera_file_rows, camera_row_noise

    camera = camera_row_noise([0.0, 0.012, 0.01, 0.016])
    assert camera == pytest.approx((0.012, 0.005))
    with pytest.raises(ValueError):
        camera_row_noise([0.0, 0.0])
    assert camera_file_rows(None, camera) == 0.012  # too small to estimate: the camera's
    assert camera_file_rows({"row": 0.0, "stderr": float("inf")}, camera) == 0.012  # no usable rows
    assert camera_file_rows({"row": 0.006, "stderr": 0.002}, camera) == 0.012  # above σ_min: the camera's
    assert camera_file_rows({"row": 0.004, "stderr": 0.004}, camera) == 0.0  # a noisy file without banding
    assert camera_file_rows({"row": 0.0, "stderr": 0.001}, camera) == 0.0


def test_camera_rows_survive_a_checkpoint_and_a_two_stage_wrapper_and_drive_the_eval_paths(tmp_path):
    """``set_camera_rows`` records the camera in the config (validated), a checkpoint round trip and the
    two-stage / SURE wrappers keep it, and ``camera_debanded`` and the eval predictor de-band with it."""
    from rawrcl.eval.runner import model_predictor
    from rawrcl.infer.noise import camera_debanded
    from rawrcl.models.compose import DenoiseThenDemosaic
    from rawrcl.models.conditioning import camera_rows, set_camera_rows
    from rawrcl.models.registry import load_checkpoint, save_checkpoint
    from rawrcl.models.sure import SureShrink
    from rawrcl.noise import NoiseModel
    from rawrcl.tasks import get_task

    plain = _tiny()
    assert camera_rows(plain) is None and "deband_row" not in plain.config
    with pytest.raises(RawrclError):
        set_camera_rows(_tiny(), 0.01, 0.02)  # σ_min above σ_cam
    model = set_camera_rows(_tiny(), 0.01, 0.004)
    save_checkpoint(tmp_path / "m.pt", model)
    back, cfg = load_checkpoint(tmp_path / "m.pt")
    assert camera_rows(back) == (0.01, 0.004) and cfg["deband_row"] == 0.01
    assert camera_rows(DenoiseThenDemosaic(back, None)) == (0.01, 0.004)
    assert camera_rows(SureShrink(back)) == (0.01, 0.004)

    clean, y, _ = _banded_mosaic(0.01, seed=5)
    nm = NoiseModel(2e-3, 2e-5)
    assert camera_debanded(plain, y, "RGGB", nm) is y
    left = camera_debanded(back, y, "RGGB", nm)
    assert np.std((left - clean).mean(1)) < 0.5 * np.std((y - clean).mean(1))
    task = get_task("raw-denoise")
    pk = lambda m: torch.as_tensor(np.stack([m[0::2, 0::2], m[0::2, 1::2], m[1::2, 0::2], m[1::2, 1::2]]))  # noqa: E731
    got = model_predictor(back, task, shrink=False)(pk(y), task, {"noise": nm})
    plain.load_state_dict(back.state_dict())
    ref = model_predictor(plain, task, shrink=False)(pk(left), task, {"noise": nm})
    assert torch.allclose(got, ref, atol=1e-6)


def test_adapt_debands_a_banded_camera_and_its_model_debands_its_files(tmp_path):
    """Files with significant row noise and ``deband`` (API-only): ``adapt`` removes the camera's row offsets
    from its files, keeps the model's architecture (not row-aware) and records the camera in the checkpoint;
    ``rawrcl denoise --model RUN`` then removes them from a banded file of that camera without being asked
    (closer to the clean mosaic than with ``--row-noise off``), and leaves a file without banding alone;
    ``rawrcl export`` refuses such a model in one line."""
    from click.testing import CliRunner
    from rawrcl.cli import main

    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import read_raw
    from rawrcl.models.registry import load_checkpoint, save_checkpoint
    from rawrcl.train.adapt import adapt

    save_checkpoint(tmp_path / "start.pt", _tiny())
    x, files = _banded_files()
    before = files[0].packed.copy()
    summ = adapt(
        files, tmp_path / "r", source=tmp_path / "start.pt", steps=2, crop=32, batch_size=2, evals=1,
        lr=1e-3, row_noise="auto", deband=True, progress=False,
    )  # fmt: skip
    assert all(f["row_noise"] == 0.0 and f["debanded"] == pytest.approx(0.01, rel=0.2) for f in summ["files"])
    assert summ["deband"]["row"] == pytest.approx(0.01, rel=0.2)
    rows = lambda p: p[:, :, 20:-20].mean(-1)  # noqa: E731  (row means: the banding, mostly)
    assert np.std(rows(files[0].packed) - rows(x)) < 0.5 * np.std(rows(before) - rows(x))
    model, cfg = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.pt")
    assert not cfg["row_aware"] and model.body.down[0][0].weight.shape[1] == 8
    assert cfg["deband_row"] == pytest.approx(0.01, rel=0.2) and 0 < cfg["deband_min"] < cfg["deband_row"]

    clean, y, _ = _banded_mosaic(0.01, seed=3)
    _, flat, _ = _banded_mosaic(0.0, seed=4)
    for name, m in (("b", y), ("flat", flat)):
        write_dng(tmp_path / f"{name}.dng", np.clip(np.rint(m * 4095), 0, 4095).astype(np.uint16), "RGGB", 0,
                  4095, iso=800, noise_profile=[(2e-3, 2e-5)] * 3)  # fmt: skip
    err, logs = {}, {}
    for name, src, extra in (("on", "b", []), ("off", "b", ["--row-noise", "off"]), ("flat", "flat", [])):
        args = ["denoise", str(tmp_path / f"{src}.dng"), "-o", str(tmp_path / f"out_{name}.dng"), "--model",
                str(tmp_path / "r"), *extra]  # fmt: skip
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, res.output
        logs[name] = res.output
        out = read_raw(tmp_path / f"out_{name}.dng").cfa
        err[name] = float(np.std((out - clean)[8:-8, 8:-8].mean(1)))  # banding left ("flat": not used)
    assert "row offsets removed" in logs["on"] and "row offsets removed" not in logs["off"]
    assert "row offsets removed" not in logs["flat"] and "row noise none" in logs["flat"]
    assert err["on"] < 0.5 * err["off"]
    res = CliRunner().invoke(
        main, ["export", str(tmp_path / "r"), "--format", "onnx", "-o", str(tmp_path / "m.onnx")]
    )
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "banded camera" in res.output


def test_mix_of_a_banded_file_has_crops_with_and_without_banding():
    """The own-noise half of ``--mix`` for a banded file: its σ_row and, at the same white noise, 0 — what
    teaches a row-aware model to leave rows alone when told σ_row = 0."""
    from rawrcl.data.noisy_crops import pack_file
    from rawrcl.train.adapt_objective import synthetic_mix

    f = pack_file("f.dng", np.full((64, 64), 0.3, np.float32), "RGGB", torch.tensor([[2e-3] * 4, [2e-5] * 4]))
    f.row = 0.01
    draw = synthetic_mix(32, [f], own=1.0, photos=2)
    rng = np.random.default_rng(0)
    thirds = {round(float(draw(rng)["noise"][2, 0]), 8) for _ in range(24)}
    assert thirds == {0.0, 1e-4}


def test_self_ensemble_of_a_banded_file_keeps_rows_as_rows():
    """``--tta`` with a row-aware model told σ_row: only the 4 flips (a transpose would turn the sensor's
    rows into columns, which the model is not told about); told 0: all 8 transforms."""
    from rawrcl.models import SelfEnsemble
    from rawrcl.models.conditioning import WithNoise, add_row_input
    from rawrcl.noise import NoiseModel

    model = add_row_input(_tiny())
    seen: list[tuple] = []

    class Spy(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.keeps_rows = inner.keeps_rows

        def forward(self, x):
            seen.append(tuple(x.shape))
            return self.inner(x)

    x = torch.rand(1, 4, 8, 12)
    with torch.no_grad():
        SelfEnsemble(Spy(WithNoise(model, NoiseModel(2e-3, 2e-5, row=0.01), 4)))(x)
        assert len(seen) == 4 and all(s[-1] > s[-2] for s in seen)  # never transposed
        seen.clear()
        SelfEnsemble(Spy(WithNoise(model, NoiseModel(2e-3, 2e-5), 4)))(x)
        assert len(seen) == 8


# ------------------------------------------------------------------- row-offset removal (inference)
def _banded_mosaic(row: float, seed: int = 0, h: int = 256, w: int = 384):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) / w
    clean = 0.15 + 0.1 * np.sin(20 * xx) * np.cos(13 * yy)
    n = rng.standard_normal(clean.shape) * np.sqrt(2e-3 * clean + 2e-5)
    b = rng.standard_normal((h, 1)) * row
    return clean.astype(np.float32), (clean + n + b).astype(np.float32), b[:, 0]


@pytest.mark.parametrize("shift", [0, 1])  # any Bayer phase: rows two apart have the same colours
def test_remove_row_offsets_takes_out_most_of_the_banding(shift):
    from rawrcl.banding import remove_row_offsets

    clean, y, b = _banded_mosaic(0.01)
    clean, y, b = clean[shift:], y[shift:], b[shift:]
    out = remove_row_offsets(y, 0.01)
    left = (out - clean).mean(1)  # per-row offset left (white noise averages out over 384 samples)
    assert np.std(left) < 0.5 * np.std(b)  # ≥ 6 dB less banding (two passes of a local estimate)
    assert np.array_equal(remove_row_offsets(y, 0.0), y) and remove_row_offsets(y, 0.0) is not y
    _, plain, _ = _banded_mosaic(0.0, seed=1)
    assert np.abs(remove_row_offsets(plain, 0.001) - plain).max() < 0.003  # a small σ_row barely moves rows


def test_denoise_row_noise_option_removes_banding(tmp_path):
    """``rawrcl denoise --row-noise auto``: estimated on a banded DNG, offsets removed before the shipped
    model (one log line each), output closer to the clean mosaic than without; a bad value: one line,
    exit 1."""
    from click.testing import CliRunner
    from rawrcl.cli import main

    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import read_raw

    clean, y, _ = _banded_mosaic(0.015, seed=2)
    write_dng(tmp_path / "b.dng", np.clip(np.rint(y * 4095), 0, 4095).astype(np.uint16), "RGGB", 0, 4095,
              iso=800, noise_profile=[(2e-3, 2e-5)] * 3)  # fmt: skip
    err = {}
    for name, extra in (("plain", ["--quiet"]), ("auto", ["--row-noise", "auto"])):
        args = ["denoise", str(tmp_path / "b.dng"), "-o", str(tmp_path / f"{name}.dng"), *extra]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, res.output
        out = read_raw(tmp_path / f"{name}.dng").cfa
        err[name] = float(np.mean((out[8:-8, 8:-8] - clean[8:-8, 8:-8]) ** 2))
        if name == "auto":
            assert "row noise 0.01" in res.output and "row offsets removed" in res.output
    assert err["auto"] < 0.5 * err["plain"]
    res = CliRunner().invoke(main, ["denoise", str(tmp_path / "b.dng"), "-o", str(tmp_path / "x.dng"),
                                    "--row-noise", "loud"])  # fmt: skip
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "--row-noise" in res.output
