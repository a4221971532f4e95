"""Benchmark scripts that run the shipped defaults still run them (two had stopped with "needs the noise
parameters" after the defaults became noise-aware, unnoticed until stop 69). Tiny sizes, no ../shared."""

from __future__ import annotations

from tests.conftest import load_benchmark


def test_speed_benchmark_times_the_shipped_defaults():
    argv = ["--mp", "0.05", "--tile", "128", "--skip", "cpu-bf16,menon,libraw,gpu"]
    rows = load_benchmark("speed").main(argv)
    got = {r["method"]: r for r in rows}
    assert set(got) == {"rawrcl jdd", "rawrcl denoise"}
    for r in got.values():
        assert "shipped" in r["note"] and r["seconds"] > 0 and r["mp_per_s"] > 0


def test_darktable_emulation_benchmark_on_the_noise_aware_default(tmp_path, capsys):
    """The shipped (noise-aware) JDD default exported with the file's noise baked in: darktable's Bayer path,
    emulated, equals the same network in rawrcl on the pixels one tile owns."""
    import numpy as np
    import pytest
    import torch

    pytest.importorskip("onnxruntime")
    from rawrcl.io.dng import write_dng

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:320, 0:320]
    clean = 0.25 + 0.15 * np.sin(xx / 9.0) * np.cos(yy / 13.0)
    noisy = clean + rng.normal(size=clean.shape) * np.sqrt(2e-3 * clean + 2e-5)
    dn = np.clip(np.rint(noisy * (4095 - 256) + 256), 0, 4095).astype(np.uint16)
    path = write_dng(tmp_path / "f.dng", dn, "GRBG", 256, 4095)
    bench = load_benchmark("darktable_emulation")
    bench.main(["--raw", str(path), "--threads", str(torch.get_num_threads())])
    out = capsys.readouterr()
    assert "noise baked in (image estimate)" in out.err
    owned = "| absolute | rawrcl jdd (R-origin crop) | one"
    row = next(ln for ln in out.out.splitlines() if ln.startswith(owned))
    assert float(row.split("|")[4]) < 1e-4, row
