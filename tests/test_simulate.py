"""rawrcl.simulate: photos → noisy Bayer DNGs whose noise matches their NoiseProfile."""

from __future__ import annotations

import json

import numpy as np
import pytest
import rawpy
import tifffile

from rawrcl.cfa import PATTERNS, mosaic
from rawrcl.errors import RawrclError
from rawrcl.io import list_photos, read_photo
from rawrcl.io.raw import read_raw
from rawrcl.io.tags import read_noise_profile
from rawrcl.noise import PaperSampler
from rawrcl.simulate import simulate_folder


def _read_dn(path) -> np.ndarray:
    with rawpy.imread(str(path)) as raw:
        return raw.raw_image_visible.astype(np.float64)


def fit_nlf(clean01: np.ndarray, noise01: np.ndarray, min_count: int = 100) -> tuple[float, float, float]:
    """Weighted least-squares fit of var(noise | clean level) = a·x + b over the distinct clean levels.

    Returns (a, b, worst relative deviation of a level's variance from the fit, over levels).
    """
    keys, inv = np.unique(clean01.ravel(), return_inverse=True)
    cnt = np.bincount(inv)
    mean = np.bincount(inv, noise01.ravel()) / cnt
    var = (np.bincount(inv, noise01.ravel() ** 2) / cnt - mean**2) * cnt / np.maximum(cnt - 1, 1)
    ok = cnt >= min_count
    x, v, n = keys[ok], var[ok], cnt[ok]
    a0, b0 = np.polyfit(x, v, 1)
    w = np.sqrt((n - 1) / 2) / np.maximum(a0 * x + b0, 1e-12)  # 1 / std of a sample variance
    a, b = np.linalg.lstsq(np.stack([x, np.ones_like(x)], 1) * w[:, None], v * w, rcond=None)[0]
    return float(a), float(b), float(np.max(np.abs(v / (a * x + b) - 1)))


@pytest.mark.parametrize("seed", [0, 1])
def test_noise_variance_matches_noise_profile(ramp_photo_dir, tmp_path, seed):
    ls, lr, black, white = 0.004, 2e-4, 2048, 16383
    out = tmp_path / "sim"
    report = simulate_folder(
        ramp_photo_dir,
        out,
        noise=f"{ls},{lr}",
        pattern="GBRG",
        do_unprocess=False,
        black_level=black,
        white_level=white,
        seed=seed,
        save_clean=True,
    )
    assert len(report.written) == 1 and not report.failed
    noisy, clean = _read_dn(out / "ramp.dng"), _read_dn(out / "clean" / "ramp.dng")
    scale = white - black
    x, n = (clean - black) / scale, (noisy - clean) / scale
    assert x.min() == 0 and x.max() == pytest.approx(191 / 255, abs=1e-4)
    a, b, worst = fit_nlf(x, n)
    assert abs(a / ls - 1) < 0.02, a
    assert abs(b / lr - 1) < 0.05, b
    assert worst < 0.2  # every one of the 192 levels (~1365 samples each) agrees with the line
    assert abs(n.mean()) < 4e-4  # zero-mean (standard error ≈ 8e-5)
    assert read_noise_profile(out / "ramp.dng") == [(ls, lr)]
    assert read_raw(out / "ramp.dng").pattern == "GBRG"
    entry = json.loads((out / "manifest.json").read_text())["files"][0]
    assert (entry["lambda_shot"], entry["lambda_read"]) == (ls, lr)
    assert entry["clipped_low_fraction"] == 0 and entry["clipped_high_fraction"] == 0


def test_default_run_writes_noisy_dngs_clean_refs_and_manifest(photo_dir, tmp_path):
    out = tmp_path / "out"
    report = simulate_folder(photo_dir, out, seed=5, save_clean=True, pattern="BGGR")
    assert [e["source"] for e in report.written] == ["astronaut.png", "chelsea.png", "coffee.png"]
    assert sorted(p.name for p in out.iterdir()) == [
        "astronaut.dng",
        "chelsea.dng",
        "clean",
        "coffee.dng",
        "manifest.json",
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["noise"] == "paper" and len(manifest["files"]) == 3
    a, b = PaperSampler(0, 20).bounds()
    lambdas = set()
    for entry in manifest["files"]:
        stem = entry["source"][:-4]
        img = read_raw(out / f"{stem}.dng")
        photo = read_photo(photo_dir / entry["source"])
        assert img.pattern == "BGGR" and (img.height, img.width) == photo.shape[1:]
        ls, lr = entry["lambda_shot"], entry["lambda_read"]
        assert a <= np.sqrt(ls) <= b and a <= np.sqrt(lr) <= b
        assert img.noise_profile == [(ls, lr)]
        lambdas.add((ls, lr))
        assert img.wb == pytest.approx(entry["wb"], rel=1e-5)
        # ground truth: clean DNG = mosaic of the clean linear TIFF (up to 16-bit / DN quantisation)
        clean = read_raw(out / "clean" / f"{stem}.dng", clip=False)
        rgb = tifffile.imread(out / "clean" / f"{stem}.tiff")
        assert rgb.dtype == np.uint16 and rgb.shape == (*photo.shape[1:], 3)
        ref = mosaic(rgb.transpose(2, 0, 1).astype(np.float64) / 65535, "BGGR")[0]
        assert np.abs(clean.cfa - ref).max() < 1e-4
        assert clean.noise_profile == [(ls, lr)]
        # and the noisy one differs from it
        assert np.abs(img.cfa - clean.cfa).mean() > 1e-3
    assert len(lambdas) == 3  # sampled per image


def test_reproducible_with_seed_and_per_image_streams(photo_dir, tmp_path):
    simulate_folder(photo_dir, tmp_path / "a", seed=11, noise="brooks")
    simulate_folder(photo_dir, tmp_path / "b", seed=11, noise="brooks")
    simulate_folder(photo_dir, tmp_path / "c", seed=12, noise="brooks")
    for name in ("astronaut.dng", "chelsea.dng"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    files = json.loads((tmp_path / "a" / "manifest.json").read_text())["files"]
    for e in files:
        assert 1e-4 <= e["lambda_shot"] <= 0.012
    assert files[0]["seed"] == [11, 0] and files[2]["seed"] == [11, 2]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_requested_pattern_is_what_rawpy_reads(photo_dir, tmp_path, pattern):
    simulate_folder(photo_dir / "coffee.png", tmp_path, pattern=pattern, noise="low")
    with rawpy.imread(str(tmp_path / "coffee.dng")) as raw:
        desc = raw.color_desc.decode()
        assert "".join(desc[c] for c in raw.raw_colors_visible[:2, :2].ravel()) == pattern


def test_existing_outputs_kept_unless_force_and_bad_inputs_skipped(photo_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for p in photo_dir.iterdir():
        (src / p.name).write_bytes(p.read_bytes())
    (src / "broken.jpg").write_text("not an image")
    (src / "readme.txt").write_text("ignored: not a photo extension")
    out = tmp_path / "out"
    first = simulate_folder(src, out, noise="high")
    assert len(first.written) == 3
    assert [f[0].endswith("broken.jpg") for f in first.failed] == [True]
    assert "cannot decode" in first.failed[0][1]
    before = (out / "chelsea.dng").read_bytes()
    second = simulate_folder(src, out, noise="high", seed=9)
    assert len(second.kept) == 3 and not second.written
    assert (out / "chelsea.dng").read_bytes() == before
    assert len(json.loads((out / "manifest.json").read_text())["files"]) == 3  # kept entries stay listed
    third = simulate_folder(src, out, noise="high", seed=9, force=True)
    assert len(third.written) == 3 and (out / "chelsea.dng").read_bytes() != before
    failed = json.loads((out / "manifest.json").read_text())["failed"]
    assert [f["source"].endswith("broken.jpg") for f in failed] == [True]


def test_errors(tmp_path, photo_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RawrclError, match="empty: no photos found"):
        simulate_folder(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(RawrclError, match="no such file"):
        list_photos(tmp_path / "missing")
    with pytest.raises(RawrclError, match="--noise"):
        simulate_folder(photo_dir, tmp_path / "out", noise="fixed")
    with pytest.raises(RawrclError, match="black-level"):
        simulate_folder(photo_dir, tmp_path / "out", black_level=20000)
    with pytest.raises(RawrclError, match="pattern"):
        simulate_folder(photo_dir, tmp_path / "out", pattern="RGBG")
    dup = tmp_path / "dup"
    dup.mkdir()
    (dup / "a.png").write_bytes((photo_dir / "coffee.png").read_bytes())
    tifffile.imwrite(dup / "a.tif", np.zeros((30, 30, 3), np.uint16))
    rep = simulate_folder(dup, tmp_path / "dupout", noise="low")
    assert len(rep.written) == 1 and "already used" in rep.failed[0][1]
