"""Data: pair sampler, photo and RAW-folder datasets, phase-correct augmentation, cache, errors."""

from __future__ import annotations

import numpy as np
import pytest
import skimage.data
import torch

from rawrcl.cfa import pack, unpack
from rawrcl.data import (
    PairBatchSampler,
    PhotoFolderDataset,
    RawFolderDataset,
    augment_packed,
    dihedral,
    file_key,
)
from rawrcl.errors import RawrclError
from rawrcl.noise import FixedSampler


def _photos():
    return [
        skimage.data.astronaut()[:96, :128],
        skimage.data.chelsea()[:80, :100],
        skimage.data.coffee()[:90, :90],
    ]


def test_sampler_deterministic_and_sharded():
    s = PairBatchSampler(5, 4, seed=3, steps=3)
    assert list(s) == list(PairBatchSampler(5, 4, seed=3, steps=3))
    assert s.batch(2) == list(PairBatchSampler(5, 4, seed=3, steps=3, start_step=2))[0]
    b = s.batch(0)
    assert len({i for i, _ in b}) == 4  # no image twice when the batch fits
    g = PairBatchSampler(8, 3, seed=1, world_size=2)
    r0, r1 = (
        PairBatchSampler(8, 3, seed=1, rank=0, world_size=2),
        PairBatchSampler(8, 3, seed=1, rank=1, world_size=2),
    )
    k0, k1 = r0.batch(5), r1.batch(5)
    assert not {i for i, _ in k0} & {i for i, _ in k1}
    assert g.batch_size == 3 and len(k0) == len(k1) == 3


def test_photo_raw_pairs_overlap_and_noise():
    ds = PhotoFolderDataset(
        images=_photos(), crop=32, overlap=0.5, mode="raw", noise=FixedSampler(1e-3, 1e-4)
    )
    s = ds[(1, 7)]
    assert s["x_a"].shape == (4, 16, 16) and s["x_b"].shape == (4, 16, 16)
    dy, dx = s["offset"].tolist()
    assert abs(dy) + abs(dx) == 8 and 0 in (dy, dx)
    # the overlapping region carries the same noisy values in both crops
    a, b = s["x_a"], s["x_b"]
    ya, xa = max(dy, 0), max(dx, 0)
    yb, xb = max(-dy, 0), max(-dx, 0)
    h, w = 16 - abs(dy), 16 - abs(dx)
    assert torch.equal(a[:, ya : ya + h, xa : xa + w], b[:, yb : yb + h, xb : xb + w])
    n = s["x_a"] - s["clean_a"]
    expected = torch.sqrt(1e-3 * s["clean_a"] + 1e-4)
    assert 0.8 < float((n / expected).std()) < 1.2
    assert not torch.equal(s["x_a"], s["x_a2"])  # independent second realisation
    assert torch.equal(ds[(1, 7)]["x_a"], s["x_a"])  # deterministic
    assert not torch.equal(ds[(1, 8)]["x_a"], s["x_a"])


def test_photo_rgb_each_image_own_noise():
    ds = PhotoFolderDataset(images=_photos(), crop=24, mode="rgb", seed=5)
    assert ds[0]["x_a"].shape == (3, 24, 24)
    lam = {m.lambda_shot for m in ds.noise_models}
    assert len(lam) == 3  # one (λshot, λread) per image


@pytest.mark.parametrize("op", range(8))
def test_augment_packed_phase_correct(op):
    rng = np.random.default_rng(op)
    cfa = rng.random((18, 18)).astype(np.float32)
    out = augment_packed(pack(cfa, "RGGB"), op, (8, 8))
    assert out.shape == (4, 8, 8)
    t = dihedral(cfa, op)
    labels = dihedral(np.tile(np.array([["R", "G"], ["G", "B"]]), (9, 9)), op)
    # the transformed CFA, cropped where red is top-left, is exactly unpack(out)
    found = False
    for dy in (0, 1):
        for dx in (0, 1):
            if labels[dy, dx] == "R" and labels[dy + 1, dx + 1] == "B":
                assert np.array_equal(unpack(out, "RGGB"), t[dy : dy + 16, dx : dx + 16])
                found = True
    assert found


def _write_dngs(folder, n=3, size=(64, 80)):
    from rawrcl.io.dng import write_dng

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(n):
        cfa = (rng.random(size) * 3000 + 600).astype(np.uint16)
        write_dng(folder / f"img{k}.dng", cfa, ["RGGB", "GRBG", "BGGR"][k % 3], 512, 4095)
    return folder


def test_raw_folder_cache_skip_and_errors(tmp_path):
    pytest.importorskip("rawrcl.io.dng")
    data = _write_dngs(tmp_path / "raw")
    (data / "broken.dng").write_bytes(b"garbage")
    cache = tmp_path / "cache"
    with pytest.warns(UserWarning, match="broken.dng"):
        ds = RawFolderDataset(data, crop=32, cache_dir=cache)
    assert len(ds) == 3 and len(ds.skipped) == 1
    assert len(list(cache.glob("*.npy"))) == 3
    s = ds[(2, 11)]
    assert s["x_a"].shape == (4, 16, 16) and s["x_a"].dtype == torch.float32
    assert torch.isnan(s["noise"]).all()
    # odd sizes / phases are aligned to RGGB: the packed image of a GRBG file is one CFA column wider
    assert ds.images[1].shape[-1] == 41 and ds.images[0].shape[-1] == 40
    # the cache key follows the content
    key = file_key(data / "img0.dng")
    with open(data / "img0.dng", "ab") as fh:
        fh.write(b"\0")
    assert file_key(data / "img0.dng") != key
    # nothing usable -> clear error
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.dng").write_bytes(b"nope")
    with pytest.raises(RawrclError, match="no usable RAW"), pytest.warns(UserWarning):
        RawFolderDataset(bad, crop=32)
    with pytest.raises(RawrclError):
        RawFolderDataset(data, crop=31)


def test_raw_folder_clean_references(tmp_path):
    pytest.importorskip("rawrcl.io.dng")
    noisy = _write_dngs(tmp_path / "n", n=2)
    clean = _write_dngs(tmp_path / "n" / "clean", n=2)
    ds = RawFolderDataset(noisy, crop=16, clean_dir=clean)
    s = ds[(0, 1)]
    assert torch.equal(s["clean_a"], s["x_a"])  # same files written twice
