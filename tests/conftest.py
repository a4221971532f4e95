"""Shared fixtures: small photo folders from scikit-image's bundled photos, the optional ../shared RAWs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_RAW = SHARED / "data" / "raw"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """The script ``benchmarks/<name>.py`` imported as a module (benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write_png(path: Path, rgb: np.ndarray) -> Path:
    import cv2

    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]))
    return path


@pytest.fixture(scope="session")
def photo_dir(tmp_path_factory) -> Path:
    """A folder with three small 8-bit colour PNGs (crops of skimage photos, one with odd size)."""
    from skimage import data

    d = tmp_path_factory.mktemp("photos")
    _write_png(d / "astronaut.png", data.astronaut()[100:196, 150:278])  # 96×128
    _write_png(d / "chelsea.png", data.chelsea()[50:131, 100:197])  # 81×97, odd
    _write_png(d / "coffee.png", data.coffee()[100:164, 200:296])  # 64×96
    return d


@pytest.fixture(scope="session")
def ramp_photo_dir(tmp_path_factory) -> Path:
    """One 512×512 grey-level 'photo' covering 8-bit values 0..191 evenly (for noise statistics)."""
    d = tmp_path_factory.mktemp("ramp")
    rng = np.random.default_rng(7)
    levels = np.repeat(np.arange(192, dtype=np.uint8), 512 * 512 // 192 + 1)[: 512 * 512]
    img = rng.permutation(levels).reshape(512, 512)
    _write_png(d / "ramp.png", np.repeat(img[..., None], 3, axis=2))
    return d


def shared_raw(name: str) -> Path:
    """Path of a file in ../shared/data/raw, or skip the test when ../shared is absent."""
    p = SHARED_RAW / name
    if not p.is_file():
        pytest.skip(f"{p} not available (../shared is absent)")
    return p


@pytest.fixture
def dc50() -> Path:
    return shared_raw("kodak_dc50.kdc")


@pytest.fixture
def iphone_dng() -> Path:
    return shared_raw("iphone12pro_metadata_only.dng")
