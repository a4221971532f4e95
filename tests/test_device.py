"""``rawrcl.device``: the memory-format rule (precision spelling: ``tests/test_cli_names.py``)."""

from __future__ import annotations

import pytest
import torch

from rawrcl.device import use_channels_last


@pytest.mark.parametrize("capability", ["AVX2", "AVX512", "DEFAULT"])
def test_channels_last_for_cpu_training_only_with_avx512(monkeypatch, capability):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    cpu = torch.device("cpu")
    assert use_channels_last(cpu) is True  # inference: NHWC is faster on every measured CPU
    assert use_channels_last(cpu, training=True) is (capability == "AVX512")
    assert use_channels_last(torch.device("cuda"), training=True) is True
    assert use_channels_last(torch.device("mps")) is False
