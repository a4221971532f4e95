"""The fuzz harness (benchmarks/fuzz.py) on the CI budget: a fixed seed, 0 crashes and 0 hangs; and proof
that it does report crashes, signal deaths, non-finite outputs and hangs (deliberately injected)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FUZZ = REPO / "benchmarks" / "fuzz.py"


def _fuzz(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(FUZZ), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _total(stdout: str) -> tuple[int, ...]:
    m = re.search(r"\| \*\*total\*\* \| \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", stdout)
    assert m, stdout
    return tuple(int(g) for g in m.groups())


@pytest.mark.slow
def test_fuzz_ci_budget_has_no_crash_and_no_hang(tmp_path):
    proc = _fuzz("--mutants", "300", "--seed", "0", "--save", str(tmp_path / "crashes"))
    n, accepted, refused, crash, hang = _total(proc.stdout)
    assert proc.returncode == 0 and (crash, hang) == (0, 0), proc.stdout[-4000:]
    assert n == 300 and accepted > 50 and refused > 50  # the mutants reach both outcomes
    assert "dng-rggb | header" in proc.stdout and "photo-tiff-float | pixels" in proc.stdout


@pytest.mark.slow
def test_fuzz_reports_injected_failures():
    proc = _fuzz("--mutants", "0", "--inject", "exception,signal,nan,hang", "--time-cap", "3")
    assert proc.returncode == 1
    assert _total(proc.stdout)[3:] == (3, 1)
    assert "ValueError: injected exception" in proc.stdout and "killed by SIGSEGV" in proc.stdout
    assert "non-finite output" in proc.stdout and "HANG" in proc.stdout
