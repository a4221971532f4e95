"""`rawrcl info` and `rawrcl simulate`: outputs, exit codes, one-line errors (never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from rawrcl.cli import main


def _run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def simulated(photo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "sim"
    res = _run(
        "simulate",
        photo_dir,
        out,
        "--pattern",
        "grbg",
        "--sampler",
        "fixed",
        "--lambda-shot",
        "0.002",
        "--lambda-read",
        "1e-5",
        "--seed",
        "3",
        "--save-clean",
    )
    assert res.exit_code == 0, res.output
    assert "wrote 3 DNG(s)" in res.stdout
    return out


def test_help_lists_foundation_commands():
    res = _run("--help")
    assert res.exit_code == 0 and "info" in res.output and "simulate" in res.output


def test_info_json_reports_pattern_levels_and_noise_profile(simulated):
    files = sorted(simulated.glob("*.dng"))
    res = _run("info", "--json", *files)
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert len(rows) == 3
    for row in rows:
        assert {
            "path",
            "make",
            "model",
            "pattern",
            "width",
            "height",
            "black_level",
            "white_level",
            "iso",
            "noise_profile",
        } <= set(row)
        assert row["pattern"] == "GRBG" and row["black_level"] == [512.0] * 4 and row["white_level"] == 16383
        assert row["noise_profile"] == [[0.002, 1e-5]]
    assert {(r["width"], r["height"]) for r in rows} == {(128, 96), (97, 81), (96, 64)}


def test_info_text(simulated):
    res = _run("info", simulated / "coffee.dng")
    assert res.exit_code == 0
    assert "pattern GRBG" in res.stdout and "96×64" in res.stdout and "[[0.002, 1e-05]]" in res.stdout


def test_info_dc50(dc50):
    res = _run("info", "--json", dc50)
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert row["pattern"] == "GRBG" and (row["width"], row["height"]) == (768, 512)
    assert row["black_level"] == [0.0] * 4 and row["white_level"] == 16383 and row["noise_profile"] is None


def test_info_bad_files_one_line_each_others_still_reported(simulated, tmp_path, iphone_dng):
    text = tmp_path / "fake.dng"
    text.write_text("hello")
    cut = tmp_path / "cut.dng"
    cut.write_bytes((simulated / "coffee.dng").read_bytes()[:5000])
    res = _run("info", "--json", text, simulated / "coffee.dng", cut, iphone_dng, tmp_path / "missing.dng")
    assert res.exit_code == 1
    assert len(json.loads(res.stdout)) == 1
    errors = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(errors) == 5, errors  # 4 files + the summary line
    assert "fake.dng" in errors[0] and "cut.dng: unreadable or truncated" in errors[1]
    assert "linear (demosaiced)" in errors[2] and "missing.dng: no such file" in errors[3]
    assert "4 of 5 file(s)" in errors[4]
    assert "Traceback" not in res.output


def test_simulate_kept_force_and_failures(photo_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.png").write_bytes((photo_dir / "coffee.png").read_bytes())
    (src / "b.png").write_bytes(b"\x89PNG truncated")
    out = tmp_path / "out"
    res = _run("simulate", src, out, "--sampler", "paper", "--sigma-range", "2", "10")
    assert res.exit_code == 1
    assert (out / "a.dng").is_file()
    assert "b.png: cannot decode" in res.stderr and "1 of 2 photo(s) failed" in res.stderr
    (src / "b.png").unlink()
    res = _run("simulate", src, out)
    assert res.exit_code == 0 and "kept 1 existing output(s)" in res.stdout
    res = _run(
        "simulate",
        src,
        out,
        "--force",
        "--no-unprocess",
        "--black-level",
        "1024",
        "--white-level",
        "4095",
        "--sigma-range",
        "2",
        "10",
    )
    assert res.exit_code == 0 and "wrote 1 DNG(s)" in res.stdout
    entry = json.loads((out / "manifest.json").read_text())["files"][0]
    assert entry["black_level"] == 1024 and entry["unprocess"] is False and entry["wb"] == [1.0, 1.0, 1.0]
    lo, hi = (2 / 255) / 2**0.5, (10 / 255) / 2**0.5  # paper sampler bounds of sqrt(lambda)
    assert lo <= entry["lambda_shot"] ** 0.5 <= hi and lo <= entry["lambda_read"] ** 0.5 <= hi


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sampler", "fixed"], "--lambda-shot and --lambda-read"),
        (["--lambda-shot", "0.1"], "need --sampler fixed"),
        (["--black-level", "70000"], "--black-level"),
        (["--sigma-range", "10", "2"], "sigma range"),
    ],
)
def test_simulate_bad_options_one_line(photo_dir, tmp_path, args, message):
    res = _run("simulate", photo_dir, tmp_path / "o", *args)
    assert res.exit_code == 1
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_simulate_empty_folder_and_missing_source(tmp_path):
    (tmp_path / "empty").mkdir()
    res = _run("simulate", tmp_path / "empty", tmp_path / "o")
    assert res.exit_code == 1 and "no photos found" in res.stderr
    res = _run("simulate", tmp_path / "nope", tmp_path / "o")
    assert res.exit_code == 1 and "nope: no such file or folder" in res.stderr


def test_console_entry_point_exits_non_zero_without_traceback(tmp_path):
    bad = tmp_path / "bad.dng"
    bad.write_bytes(b"II*\x00garbage")
    proc = subprocess.run(
        [sys.executable, "-m", "rawrcl.cli", "info", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "bad.dng" in proc.stderr
