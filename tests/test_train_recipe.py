"""scripts/train_noise_aware.py's install step: the provenance of every stage, and continuing or re-seating
from an installed checkpoint file (no run directories needed). Runs on tiny models in a temporary tree."""

from __future__ import annotations

import datetime
import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_noise_aware.py"


@pytest.fixture()
def recipe(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("train_noise_aware", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "rawrcl" / "weights").mkdir(parents=True)
    monkeypatch.setattr(mod, "REPO", tmp_path)
    return mod


def _denoiser(seed: int):
    from rawrcl.models.registry import build_model

    torch.manual_seed(seed)
    cfg = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 8, "depth": 2, "noise_aware": True}
    return build_model(cfg)


def _run_dir(root: Path, model, seed: int) -> Path:
    run = root / f"run{seed}"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"config": model.config, "state_dict": model.state_dict()}, run / "checkpoints" / "last.pt")
    cfg = {"task": "raw-denoise", "steps": 10, "seed": seed, "source": "x.pt", "train_photos": ["a.png"]}
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 10}) + "\n")
    return run


def test_install_continues_the_stages_recorded_in_a_checkpoint_file(recipe, tmp_path):
    first = _run_dir(tmp_path, _denoiser(1), 1)
    shipped = recipe.install([first], "raw-denoise")
    copy = tmp_path / "shipped_copy.pt"
    copy.write_bytes(shipped.read_bytes())
    new = _denoiser(2)
    second = _run_dir(tmp_path, new, 2)
    out = torch.load(recipe.install([copy, second], "raw-denoise"), weights_only=True)
    stages = out["extra"]["provenance"]["stages"]
    assert [s["seed"] for s in stages] == [1, 2] and stages[-1]["steps_done"] == 10
    assert out["extra"]["provenance"]["train_photos"] == ["a.png"]
    for k, v in new.state_dict().items():
        if v.is_floating_point():
            assert out["state_dict"][k].dtype == torch.float16
            torch.testing.assert_close(out["state_dict"][k].float(), v.half().float())
    with pytest.raises(SystemExit, match="records its stages"):
        bare = tmp_path / "bare.pt"
        torch.save({"config": new.config, "state_dict": new.state_dict()}, bare)
        recipe.install([bare, second], "raw-denoise")


def test_install_average_with_records_the_averaged_stage(recipe, tmp_path):
    """--average-with: the installed weights are the half/half average; the stage is recorded as averaged."""
    a, b = _denoiser(1), _denoiser(2)
    out = torch.load(
        recipe.install([_run_dir(tmp_path, a, 1)], "raw-denoise", average_with=_run_dir(tmp_path, b, 2)),
        weights_only=True,
    )
    stages = out["extra"]["provenance"]["stages"]
    assert [(s["seed"], s.get("averaged")) for s in stages] == [(1, None), (2, 0.5)]
    sa, sb = a.state_dict(), b.state_dict()
    for k, v in out["state_dict"].items():
        if v.is_floating_point():
            torch.testing.assert_close(v.float(), ((sa[k] + sb[k]) / 2).half().float())
    from rawrcl.models.registry import build_model

    wide = build_model({**_denoiser(4).config, "width": 16})  # another architecture
    with pytest.raises(SystemExit, match="not the architecture"):
        recipe.install([_run_dir(tmp_path, a, 5)], "raw-denoise", average_with=_run_dir(tmp_path, wide, 6))


def test_two_stage_file_is_reseated_behind_the_shipped_denoiser(recipe, tmp_path, monkeypatch):
    from rawrcl.models.compose import RESIDUAL, DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    den_file = recipe.install([_run_dir(tmp_path, _denoiser(3), 3)], "raw-denoise")
    monkeypatch.setattr("rawrcl.models.loading.default_weights_path", lambda task: den_file)
    torch.manual_seed(4)
    jdd_cfg = {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "noise_aware": True}
    old = DenoiseThenDemosaic(_denoiser(5), build_model(jdd_cfg), RESIDUAL)
    note = "trained behind X; re-seated again behind this one"  # an undated note of an earlier install
    prov = {"stages": [{"seed": 9}], "two_stage": {"first_stage": {"note": note}}}
    jdd_file = tmp_path / "jdd_copy.pt"
    torch.save(
        {"config": old.config, "state_dict": old.state_dict(), "extra": {"provenance": prov}}, jdd_file
    )
    out = torch.load(recipe.install([jdd_file], "jdd", two_stage=True), weights_only=True)
    den = torch.load(den_file, weights_only=True)["state_dict"]
    for k, v in den.items():
        torch.testing.assert_close(out["state_dict"][f"denoiser.{k}"], v)  # the new denoiser in front
    for k, v in old.demosaicker.state_dict().items():  # the same JDD stage behind it
        torch.testing.assert_close(out["state_dict"][f"demosaicker.{k}"].float(), v.half().float())
    p = out["extra"]["provenance"]
    assert [s["seed"] for s in p["stages"]] == [9]
    today = datetime.date.today()
    assert p["two_stage"]["first_stage"]["note"] == f"trained behind X; re-seated behind this one on {today}"
    assert [s["seed"] for s in p["two_stage"]["first_stage"]["stages"]] == [3]
    with pytest.raises(SystemExit, match="--two-stage"):
        recipe.install([jdd_file], "jdd")


def test_jdd_stage_trained_behind_the_jdd_files_own_denoiser(recipe, tmp_path, monkeypatch):
    """--behind jdd-default: a JDD stage continued behind the first stage of the shipped JDD file (not the
    shipped RAW denoiser, which may be another network) is installed with that first stage and says so;
    --two-stage jdd-default re-seats a JDD stage behind it."""
    from rawrcl.models.compose import RESIDUAL, DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    raw_file = recipe.install([_run_dir(tmp_path, _denoiser(3), 3)], "raw-denoise")
    jdd_cfg = {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "noise_aware": True}
    torch.manual_seed(4)
    shipped = DenoiseThenDemosaic(_denoiser(5), build_model(jdd_cfg), RESIDUAL)
    prov = {
        "stages": [{"seed": 9}],
        "two_stage": {"first_stage": {"note": "stage 11", "stages": [{"seed": 5}]}},
    }
    jdd_file = tmp_path / "jdd_shipped.pt"
    torch.save(
        {"config": shipped.config, "state_dict": shipped.state_dict(), "extra": {"provenance": prov}},
        jdd_file,
    )
    paths = {"raw-denoise": raw_file, "jdd": jdd_file}
    monkeypatch.setattr("rawrcl.models.loading.default_weights_path", lambda t: paths[getattr(t, "name", t)])
    den, rec = recipe.first_stage_denoiser("jdd-default")
    for k, v in shipped.denoiser.state_dict().items():
        torch.testing.assert_close(den.state_dict()[k], v)
    assert rec["note"] == "stage 11" and "jdd_default.pt" in rec["weights"]

    torch.manual_seed(6)
    trained = DenoiseThenDemosaic(shipped.denoiser, build_model(jdd_cfg), RESIDUAL)
    run = _run_dir(tmp_path, trained, 10)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "task": "jdd", "behind": "jdd-default"}))
    out = torch.load(recipe.install([run], "jdd"), weights_only=True)
    for k, v in shipped.denoiser.state_dict().items():  # the JDD file's own first stage, not raw_file's
        torch.testing.assert_close(out["state_dict"][f"denoiser.{k}"].float(), v.half().float())
    first = out["extra"]["provenance"]["two_stage"]["first_stage"]
    assert first["weights"].startswith("frozen during training (--behind jdd-default: the first stage")
    assert [s["seed"] for s in first["stages"]] == [5]

    out = torch.load(recipe.install([run], "jdd", two_stage="jdd-default"), weights_only=True)
    for k, v in shipped.denoiser.state_dict().items():
        torch.testing.assert_close(out["state_dict"][f"denoiser.{k}"].float(), v.half().float())
    raw = torch.load(raw_file, weights_only=True)["state_dict"]
    assert not all(torch.equal(out["state_dict"][f"denoiser.{k}"], v) for k, v in raw.items())


def test_jdd_stage_trained_behind_a_denoiser_file_records_its_name_not_its_path(recipe, tmp_path):
    """--behind PATH (a denoiser checkpoint file, e.g. a new first stage): the installed two-stage file holds
    that denoiser and its recorded stages, and the provenance names it by file name — no machine path."""
    from rawrcl.models.compose import RESIDUAL, DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    den = _denoiser(7)
    den_file = tmp_path / "deep" / "folder" / "den_told.pt"
    den_file.parent.mkdir(parents=True)
    prov = {"stages": [{"seed": 7}]}
    ckpt = {"config": den.config, "state_dict": den.state_dict(), "extra": {"provenance": prov}}
    torch.save(ckpt, den_file)
    jdd_cfg = {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "noise_aware": True}
    torch.manual_seed(8)
    run = _run_dir(tmp_path, DenoiseThenDemosaic(den, build_model(jdd_cfg), RESIDUAL), 11)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "task": "jdd", "behind": str(den_file)}))
    out = torch.load(recipe.install([run], "jdd"), weights_only=True)
    for k, v in den.state_dict().items():
        torch.testing.assert_close(out["state_dict"][f"denoiser.{k}"].float(), v.half().float())
    p = out["extra"]["provenance"]
    first = p["two_stage"]["first_stage"]
    assert first["weights"] == "frozen during training (--behind den_told.pt: den_told.pt)"
    assert [s["seed"] for s in first["stages"]] == [7]
    assert p["stages"][-1]["behind"] == "den_told.pt"
    assert str(tmp_path) not in json.dumps(p)
    # --two-stage: behind the very denoiser it was trained behind, the note says so; behind another, re-seated
    out = torch.load(recipe.install([run], "jdd", two_stage=str(den_file)), weights_only=True)
    note = out["extra"]["provenance"]["two_stage"]["first_stage"]["note"]
    assert (
        note
        == "the JDD stage was last trained behind this one (--behind den_told.pt; each stage records its own)"
    )
    other = tmp_path / "other.pt"
    torch.save({**ckpt, "state_dict": _denoiser(12).state_dict()}, other)
    out = torch.load(recipe.install([run], "jdd", two_stage=str(other)), weights_only=True)
    assert "re-seated behind this one" in out["extra"]["provenance"]["two_stage"]["first_stage"]["note"]


def test_install_blend_makes_the_raw_default_from_a_two_stage_file(recipe, tmp_path, monkeypatch):
    """--task raw-denoise --blend W [--blend-sigma S]: the RAW default becomes the CFA-site blend of a
    two-stage JDD file (same stages, head 'raw'), its provenance kept plus the blend record; the shipped
    RAW denoiser that --behind/--two-stage default name is then that file's first stage. A plain file is
    refused."""
    from rawrcl.models.compose import RESIDUAL, DenoiseThenDemosaic
    from rawrcl.models.registry import build_model

    jdd_cfg = {"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 2, "noise_aware": True}
    torch.manual_seed(4)
    shipped = DenoiseThenDemosaic(_denoiser(5), build_model(jdd_cfg), RESIDUAL)
    jdd_file = tmp_path / "jdd_shipped.pt"
    prov = {"stages": [{"seed": 9}], "two_stage": {"first_stage": {"stages": [{"seed": 5}]}}}
    ckpt = {"config": shipped.config, "state_dict": shipped.state_dict(), "extra": {"provenance": prov}}
    torch.save(ckpt, jdd_file)
    out_path = recipe.install([jdd_file], "raw-denoise", blend=0.5, blend_sigma=0.003)
    out = torch.load(out_path, weights_only=True)
    assert out["config"]["arch"] == "two_stage" and out["config"]["head"] == "raw"
    assert (out["config"]["blend"], out["config"]["blend_sigma"]) == (0.5, 0.003)
    assert out["extra"]["provenance"]["cfa_blend"]["blend"] == 0.5
    assert out["extra"]["provenance"]["stages"] == [{"seed": 9}]
    for k, v in shipped.state_dict().items():
        torch.testing.assert_close(out["state_dict"][k].float(), v.half().float())
    monkeypatch.setattr("rawrcl.models.loading.default_weights_path", lambda t: out_path)
    den, _ = recipe.first_stage_denoiser("default")
    assert not isinstance(den, DenoiseThenDemosaic) and den.head_name == "raw"
    with pytest.raises(SystemExit, match="two-stage checkpoint with a JDD network"):
        recipe.install(
            [recipe.install([_run_dir(tmp_path, _denoiser(3), 3)], "raw-denoise")], "raw-denoise", blend=0.5
        )


def test_a_distilled_stage_records_its_teacher_weight_and_others_do_not(recipe, tmp_path):
    """--distill-tta W is part of a stage's provenance (``distill_tta``); stages trained without it keep the
    provenance they always had (no such key)."""
    plain = _run_dir(tmp_path, _denoiser(13), 13)
    distilled = _run_dir(tmp_path, _denoiser(14), 14)
    cfg = json.loads((distilled / "config.json").read_text())
    (distilled / "config.json").write_text(json.dumps({**cfg, "distill_tta": 1.0}))
    assert "distill_tta" not in recipe._stage(plain)
    assert recipe._stage(distilled)["distill_tta"] == 1.0
    out = torch.load(recipe.install([plain, distilled], "raw-denoise"), weights_only=True)
    assert [s.get("distill_tta") for s in out["extra"]["provenance"]["stages"]] == [None, 1.0]
