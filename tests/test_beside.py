"""rawrcl.models.beside: a start beside a fine-tune (arch ``with_fine_tune``) as a checkpoint the commands
load — its parts, its refusals (JDD, export, configs that are not noise-aware RAW denoisers)."""

from __future__ import annotations

import pytest
import torch

from rawrcl.errors import RawrclError
from rawrcl.models.beside import WithFineTune
from rawrcl.models.blindspot import BlindSpotDenoiser, WithBlindSpot
from rawrcl.models.registry import build_model, load_checkpoint, model_config, save_checkpoint
from rawrcl.models.sure import SureShrink
from rawrcl.noise import NoiseModel

RAW = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 4, "depth": 1, "noise_aware": True}


def _composite() -> WithFineTune:
    """A blind-spot composite (the start) beside a second small RAW denoiser (the fine-tune)."""
    torch.manual_seed(0)
    start = WithBlindSpot(build_model(RAW), BlindSpotDenoiser(width=4))
    return WithFineTune(start, build_model(RAW)).eval()


def test_a_start_beside_a_fine_tune_round_trips_and_runs_as_its_parts(tmp_path):
    model = _composite()
    save_checkpoint(tmp_path / "c.pt", model)
    back, cfg = load_checkpoint(tmp_path / "c.pt")
    assert isinstance(back, WithFineTune) and isinstance(back.base, WithBlindSpot)
    assert cfg["arch"] == "with_fine_tune" and cfg["base"]["arch"] == "with_blindspot"
    assert not any(k.startswith(("_start", "_fine")) for k in back.state_dict())  # each weight once
    x = torch.rand(1, 4, 32, 32) * 0.5
    noise = NoiseModel(1e-3, 1e-5).conditioning(4)[None]
    back.eval()
    with torch.no_grad():
        torch.testing.assert_close(back(x, noise), model.base(x, noise))  # called directly: the start
        start, fine = back.parts(x, noise)
        torch.testing.assert_close(start, SureShrink(model.base)(x, noise))  # as rawrcl denoise runs it
        torch.testing.assert_close(fine, SureShrink(model.fine)(x, noise))
        out = SureShrink(back)(x, noise)
    assert out.shape == x.shape and back.size_multiple % 4 == 0


def test_a_start_beside_a_fine_tune_is_refused_where_it_was_not_measured(tmp_path):
    from rawrcl.export.build import prepare
    from rawrcl.models.loading import load_for_task

    save_checkpoint(tmp_path / "c.pt", _composite())
    model, _ = load_for_task(tmp_path / "c.pt", "raw-denoise")
    assert isinstance(model, WithFineTune)
    with pytest.raises(RawrclError, match="RAW denoiser only"):
        load_for_task(tmp_path / "c.pt", "jdd")
    with pytest.raises(RawrclError, match="beside a fine-tune"):
        prepare(*load_checkpoint(tmp_path / "c.pt"), name="c.pt")
    for base, fine in (
        ({**RAW, "head": "jdd"}, RAW),  # not a RAW denoiser
        (RAW, {**RAW, "noise_aware": False}),  # not noise-aware
        (RAW, {"arch": "with_blindspot", "base": RAW, "blindspot": {}}),  # a composite as the fine-tune
    ):
        with pytest.raises(RawrclError, match="with_fine_tune"):
            model_config({"arch": "with_fine_tune", "base": base, "fine": fine})
