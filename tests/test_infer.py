"""Tiled inference, grid alignment of every Bayer phase, writers, DNG round trip, `rawrcl jdd/denoise` CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from rawrcl.cfa import PATTERNS, mosaic, pack
from rawrcl.errors import RawrclError
from rawrcl.infer import (
    TileOptions,
    denoise_cfa,
    jdd_cfa,
    requantize_cfa,
    write_image,
)
from rawrcl.infer.tiling import fit_tile, tile_starts, tiled_apply, whole_apply
from tests._fakes import SparseJDD, bare_cfa_dng

torch.set_num_threads(1)


def _small_cnn(cin: int = 4, cout: int = 3, scale: int = 2, seed: int = 0) -> nn.Module:
    """Three 3×3 convs: receptive-field radius 3 input pixels."""
    torch.manual_seed(seed)
    last = [nn.Conv2d(8, cout * scale * scale, 3, padding=1)] + (
        [nn.PixelShuffle(scale)] if scale > 1 else []
    )
    return nn.Sequential(
        nn.Conv2d(cin, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), *last
    ).eval()


class ChannelGain(nn.Module):
    """Packed → packed, channel k multiplied by (k + 1): tells R, G1, G2, B apart."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.arange(1, 5, dtype=x.dtype, device=x.device).view(1, 4, 1, 1)


# --------------------------------------------------------------------------------------- tiling


@pytest.mark.parametrize("shape", [(101, 77), (64, 64), (33, 150)])
def test_tiled_equals_whole_for_small_receptive_field(shape):
    net = _small_cnn()
    x = torch.rand(1, 4, *shape, generator=torch.Generator().manual_seed(1))
    ref = whole_apply(net, x, scale=2)
    out = tiled_apply(net, x, tile=32, overlap=12, scale=2, batch_tiles=3, device="cpu", precision="fp32")
    assert out.shape == (1, 3, 2 * shape[0], 2 * shape[1])
    assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()


def test_tiled_differs_when_overlap_below_receptive_field():
    """The equivalence test above can fail: with a too-small overlap the tile borders show."""
    net = _small_cnn()
    x = torch.rand(1, 4, 90, 90, generator=torch.Generator().manual_seed(2))
    ref = whole_apply(net, x, scale=2)
    out = tiled_apply(net, x, tile=32, overlap=4, scale=2, device="cpu", precision="fp32")
    assert (out - ref).abs().max() > 1e-4


def test_tiled_unet_close_to_whole_and_memory_bounded():
    from rawrcl.models import build_model

    torch.manual_seed(0)
    model = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 8, "depth": 3}).eval()
    shapes: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(lambda m, args: shapes.append(tuple(args[0].shape)))
    x = torch.rand(1, 4, 150, 203, generator=torch.Generator().manual_seed(3)) * 0.6
    ref = whole_apply(model, x, scale=2)
    shapes.clear()
    out = tiled_apply(model, x, tile=80, overlap=32, scale=2, batch_tiles=2, device="cpu", precision="fp32")
    # every forward pass holds at most batch_tiles tiles of at most tile² pixels
    assert shapes and all(s[0] <= 2 and s[2] <= 80 and s[3] <= 80 for s in shapes)
    err = (out - ref).abs().max().item()
    assert err < 1e-3 * max(ref.abs().max().item(), 1e-3), err


def test_tile_starts_cover_and_align():
    for length, tile, ov, m in [(1000, 256, 32, 8), (257, 256, 32, 1), (64, 64, 16, 8), (520, 64, 32, 8)]:
        starts = tile_starts(length, min(tile, length), ov, m)
        assert starts[0] == 0 and starts[-1] + min(tile, length) == length
        assert all(s % m == 0 for s in starts)
        assert all(b - a <= tile - ov for a, b in zip(starts, starts[1:], strict=False))


def test_fit_tile_needs_no_more_tiles_and_keeps_the_overlap():
    """The fitted side: a multiple of ``m``, ≤ tile, as few tiles as ``tile`` needs, neighbours sharing
    ≥ overlap; the 12 MP case (1416 × 2120 packed, tile 512) shrinks to 496 × 456."""
    assert (fit_tile(1416, 512, 32, 8), fit_tile(2120, 512, 32, 8)) == (496, 456)
    for length, tile, ov, m in [
        (1416, 512, 32, 8),
        (2120, 512, 32, 8),
        (520, 512, 32, 8),
        (64, 512, 32, 8),
        (1024, 512, 128, 16),
        (2000, 256, 64, 8),
        (264, 256, 128, 8),
        (1000, 64, 16, 1),
    ]:
        side = fit_tile(length, tile, ov, m)
        starts = tile_starts(length, side, ov, m)
        assert side % m == 0 and side <= max(tile, length) and side <= length
        assert len(starts) <= len(tile_starts(length, min(tile, length), ov, m))
        assert starts[-1] + side == length
        assert all(a + side - b >= ov for a, b in zip(starts, starts[1:], strict=False))


def test_tiled_rejects_bad_options():
    with pytest.raises(RawrclError):
        tiled_apply(_small_cnn(), torch.rand(1, 4, 40, 40), tile=16, overlap=9, scale=2, device="cpu")
    with pytest.raises(RawrclError):
        tiled_apply(_small_cnn(), torch.rand(4, 40, 40), tile=32, overlap=8, scale=2, device="cpu")


# ------------------------------------------------------------------------------ grid alignment


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("shape", [(40, 56), (37, 51), (38, 45)])
def test_jdd_output_on_input_grid(pattern, shape):
    rng = np.random.default_rng(4)
    rgb = rng.random((3, *shape), dtype=np.float32)
    cfa = mosaic(rgb, pattern)[0]
    opts = TileOptions(tile=16, overlap=4, batch_tiles=3, device="cpu", precision="fp32")
    out = jdd_cfa(SparseJDD(), cfa, pattern, opts)
    assert out.shape == (3, *shape)
    # each CFA sample comes back at its own pixel, in its own colour channel
    np.testing.assert_allclose(mosaic(out, pattern)[0], cfa, atol=1e-6)
    np.testing.assert_allclose(out.sum(axis=0), cfa, atol=1e-6)  # and nowhere else


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("shape", [(40, 56), (37, 51)])
def test_denoise_output_on_input_grid(pattern, shape):
    rng = np.random.default_rng(5)
    cfa = rng.random(shape, dtype=np.float32)
    opts = TileOptions(tile=16, overlap=4, device="cpu", precision="fp32")
    out = denoise_cfa(ChannelGain(), cfa, pattern, opts)
    assert out.shape == shape
    gain = pack(np.ones(shape, np.float32), pattern) * np.arange(1, 5, dtype=np.float32)[:, None, None]
    from rawrcl.cfa import unpack

    np.testing.assert_allclose(out, cfa * unpack(gain, pattern, shape), rtol=1e-6)


def test_requantize_per_position_black_levels():
    cfa = np.array([[0.0, 1.0], [0.5, 0.25]], dtype=np.float32)
    dn = requantize_cfa(cfa, "RGGB", (100, 200, 300, 400), 1100)
    assert dn.dtype == np.uint16
    np.testing.assert_array_equal(dn, [[100, 1100], [700, 575]])
    # several bands of rows, an odd height: every row keeps its own Bayer row's black levels
    from rawrcl.infer.writers import BAND_ROWS

    big = np.random.default_rng(0).uniform(-0.1, 1.1, (3 * BAND_ROWS + 3, 5))
    black = np.tile([[100.0, 200.0], [300.0, 400.0]], (big.shape[0] // 2 + 1, 3))[: big.shape[0], :5]
    want = np.clip(np.rint(black + big * (1100 - black)), 0, 1100).astype(np.uint16)
    np.testing.assert_array_equal(requantize_cfa(big, "RGGB", (100, 200, 300, 400), 1100), want)


def test_write_image_atomic_and_no_overwrite(tmp_path: Path):
    import tifffile

    img = np.random.default_rng(0).random((3, 9, 7)).astype(np.float32)
    p = write_image(tmp_path / "a.tiff", img)
    back = tifffile.imread(p)
    assert back.shape == (9, 7, 3) and back.dtype == np.uint16
    np.testing.assert_allclose(back.transpose(2, 0, 1) / 65535.0, img, atol=1e-5)
    with pytest.raises(RawrclError, match="exists"):
        write_image(tmp_path / "a.tiff", img)
    write_image(tmp_path / "a.tiff", img * 0.5, overwrite=True)
    assert [f.name for f in tmp_path.iterdir()] == ["a.tiff"]  # no temporary left behind


# ------------------------------------------------------------------------- files, DNG, CLI


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Two noisy DNGs (GRBG odd size, RGGB), a corrupt 'DNG', an identity RAW denoiser, a tiny JDD model."""
    from rawrcl.io.dng import write_dng
    from rawrcl.models import build_model, save_checkpoint

    d = tmp_path_factory.mktemp("infer")
    rng = np.random.default_rng(6)
    for name, pattern, shape in (("a", "GRBG", (45, 63)), ("b", "RGGB", (40, 48))):
        cfa = rng.integers(512, 16383, shape).astype(np.uint16)
        write_dng(
            d / f"{name}.dng",
            cfa,
            pattern,
            (512, 510, 514, 512),
            16383,
            wb=(2.0, 1.0, 1.5),
            color_matrix=np.array([[0.9, -0.2, -0.1], [-0.4, 1.2, 0.2], [-0.1, 0.2, 0.6]]),
            iso=800,
            noise_profile=[(1e-3, 1e-5)] * 3,
            make="TestMake",
            model="TestModel",
        )
    (d / "bad.dng").write_bytes(b"this is not a raw file")
    torch.manual_seed(0)
    ident = build_model({"arch": "dncnn", "in_channels": 4, "head": "raw", "width": 4, "depth": 2}).eval()
    nn.init.zeros_(ident.head.conv.weight)  # DnCNN returns x − head(body(x)) = x
    nn.init.zeros_(ident.head.conv.bias)
    save_checkpoint(d / "identity_raw.pt", ident)
    jdd = build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 4, "depth": 2}).eval()
    save_checkpoint(d / "jdd.pt", jdd)
    rgb = build_model({"arch": "unet", "in_channels": 3, "head": "rgb", "width": 4, "depth": 2}).eval()
    save_checkpoint(d / "rgb.pt", rgb)
    return d


def _cli(args: list[str]):
    from click.testing import CliRunner
    from rawrcl.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_denoise_dng_round_trip_through_rawpy(workdir: Path, tmp_path: Path):
    import rawpy

    from rawrcl.io.raw import read_raw

    res = _cli(
        ["denoise", workdir / "a.dng", "-o", tmp_path / "a_out.dng", "--model", workdir / "identity_raw.pt"]
    )
    assert res.exit_code == 0, res.output
    src, out = read_raw(workdir / "a.dng"), read_raw(tmp_path / "a_out.dng")
    assert out.pattern == src.pattern == "GRBG" and out.cfa.shape == src.cfa.shape == (45, 63)
    assert out.black_level == src.black_level and out.white_level == src.white_level
    assert out.iso == 800 and out.noise_profile == src.noise_profile
    np.testing.assert_allclose(out.wb, src.wb, rtol=1e-4)
    np.testing.assert_allclose(out.xyz_to_cam, src.xyz_to_cam, atol=1e-4)
    with rawpy.imread(str(workdir / "a.dng")) as r0, rawpy.imread(str(tmp_path / "a_out.dng")) as r1:
        # identity model: the re-quantised DN are exactly the input's
        np.testing.assert_array_equal(r1.raw_image_visible, r0.raw_image_visible)
        assert r1.postprocess(output_bps=8).shape == (45, 63, 3)


@pytest.mark.parametrize("orientation", [6, 3, 8])
def test_orientation_kept_in_dng_and_applied_to_the_render(workdir: Path, tmp_path: Path, orientation):
    """A portrait file stays portrait: the denoised DNG keeps its Orientation, the JDD render is turned as
    LibRaw turns its own rendering (same shape and the same bright corner)."""
    import rawpy
    import tifffile

    from rawrcl.io.dng import write_dng

    cfa = np.full((40, 64), 1500, np.uint16)
    cfa[:10, :16] = 15000  # a bright top-left corner on the sensor grid
    src = tmp_path / "portrait.dng"
    write_dng(src, cfa, "RGGB", 512, 16383, orientation=orientation)
    res = _cli(["denoise", src, "-o", tmp_path / "d.dng", "--model", workdir / "identity_raw.pt"])
    assert res.exit_code == 0, res.output
    with rawpy.imread(str(src)) as r0, rawpy.imread(str(tmp_path / "d.dng")) as r1:
        assert r1.sizes.flip == r0.sizes.flip != 0
        ref = r0.postprocess(output_bps=16, no_auto_bright=True, gamma=(1, 1)).sum(-1)
    # a RAW denoiser as the JDD model: the identity then bilinear demosaicking, brightness kept
    jdd_args = ["-o", tmp_path / "j.tiff", "--model", workdir / "identity_raw.pt", "--render", "linear"]
    res = _cli(["jdd", src, *jdd_args])
    assert res.exit_code == 0, res.output
    img = tifffile.imread(tmp_path / "j.tiff").astype(float).sum(-1)
    assert img.shape == ref.shape  # (64, 40) when turned by 90°
    corner = np.unravel_index(np.argmax(ref), ref.shape)
    h, w = img.shape
    quad = (corner[0] >= h // 2, corner[1] >= w // 2)
    top = img[: h // 2].mean(), img[h // 2 :].mean()
    left = img[:, : w // 2].mean(), img[:, w // 2 :].mean()
    assert (top[1] > top[0]) == quad[0] and (left[1] > left[0]) == quad[1]


def test_default_crop_of_a_dng_with_an_active_area_is_kept(workdir: Path, tmp_path: Path):
    """DefaultCrop is relative to the active area, the mosaic rawrcl reads and writes: copied as it is."""
    import rawpy
    import tifffile

    data = np.random.default_rng(0).integers(600, 4000, (80, 120)).astype(np.uint16)
    src = bare_cfa_dng(
        tmp_path / "active.dng",
        data,
        (50714, "I", 1, 512, True),
        (50829, "I", 4, (4, 6, 76, 114), True),  # ActiveArea: top, left, bottom, right
        (50719, "I", 2, (3, 5), True),
        (50720, "I", 2, (100, 60), True),
    )
    res = _cli(["denoise", src, "-o", tmp_path / "d.dng", "--model", workdir / "identity_raw.pt"])
    assert res.exit_code == 0, res.output
    with tifffile.TiffFile(tmp_path / "d.dng") as t:
        got = t.pages[0].tags
        assert got[50719].value == (3, 1, 5, 1) and got[50720].value == (100, 1, 60, 1)
    with rawpy.imread(str(tmp_path / "d.dng")) as r:
        assert r.raw_image_visible.shape == (72, 108)


def test_jdd_cli_batch_with_bad_file(workdir: Path, tmp_path: Path):
    import cv2
    import tifffile

    out = tmp_path / "rgb"
    args = [
        "jdd",
        workdir / "a.dng",
        workdir / "bad.dng",
        workdir / "b.dng",
        "-o",
        out,
        "--model",
        workdir / "jdd.pt",
    ]
    res = _cli([*args, "--tile", "16", "--overlap", "4", "--quiet"])
    assert res.exit_code == 1
    assert "bad.dng" in res.stderr and "Traceback" not in res.output
    assert sorted(p.name for p in out.iterdir()) == ["a.tiff", "b.tiff"]
    a = tifffile.imread(out / "a.tiff")
    assert a.shape == (45, 63, 3) and a.dtype == np.uint16  # exactly the CFA's grid
    res = _cli(["jdd", workdir / "b.dng", "-o", tmp_path / "b.png", "--model", workdir / "jdd.pt", "-q"])
    assert res.exit_code == 0, res.output
    png = cv2.imread(str(tmp_path / "b.png"), cv2.IMREAD_UNCHANGED)
    assert png.shape == (40, 48, 3) and png.dtype == np.uint8


def test_cli_never_overwrites_without_force(workdir: Path, tmp_path: Path):
    dst = tmp_path / "b.tiff"
    base = ["denoise", workdir / "b.dng", "-o", dst, "--model", workdir / "identity_raw.pt", "-q"]
    assert _cli(base).exit_code == 0
    dst.write_bytes(b"sentinel")
    res = _cli(base)
    assert res.exit_code == 1 and "exists" in res.stderr and "--force" in res.stderr
    assert dst.read_bytes() == b"sentinel"
    assert _cli([*base, "--force"]).exit_code == 0
    assert dst.read_bytes() != b"sentinel"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_cli_errors_are_one_line(workdir: Path, tmp_path: Path):
    res = _cli(["jdd", workdir / "a.dng", "-o", tmp_path / "x.tiff", "--model", workdir / "rgb.pt"])
    assert res.exit_code == 1 and "head" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = _cli(["jdd", workdir / "missing.dng", "-o", tmp_path / "y", "--model", workdir / "jdd.pt", "-q"])
    assert res.exit_code == 1 and "missing.dng" in res.stderr


def test_jdd_with_a_raw_denoiser_is_denoise_then_bilinear(workdir: Path, tmp_path: Path):
    import tifffile

    from rawrcl.io.raw import read_raw
    from rawrcl.models.heads import bilinear_demosaic_packed

    res = _cli(
        ["jdd", workdir / "b.dng", "-o", tmp_path / "x.tiff", "--model", workdir / "identity_raw.pt"]
        + ["--render", "linear", "-q"]
    )
    assert res.exit_code == 0, res.output
    raw = read_raw(workdir / "b.dng")  # RGGB, even size: the CFA grid is the packed grid
    ref = bilinear_demosaic_packed(torch.from_numpy(pack(raw.cfa, raw.pattern))[None].float())[0]
    out = tifffile.imread(tmp_path / "x.tiff").astype(np.float64) / 65535
    assert np.abs(out - ref.permute(1, 2, 0).numpy()).max() < 2e-3


def test_denoise_rgb_photo(workdir: Path, tmp_path: Path):
    import cv2

    img = (np.random.default_rng(7).random((30, 41, 3)) * 255).astype(np.uint8)
    cv2.imwrite(str(tmp_path / "p.png"), img)
    res = _cli(
        ["denoise", tmp_path / "p.png", "-o", tmp_path / "out", "--model", workdir / "identity_raw.pt", "-q"]
    )
    assert res.exit_code == 1 and "rgb" in res.stderr.lower()
    res = _cli(["denoise", tmp_path / "p.png", "-o", tmp_path / "out", "--model", workdir / "rgb.pt", "-q"])
    assert res.exit_code == 0, res.output
    assert cv2.imread(str(tmp_path / "out" / "p.png")).shape == (30, 41, 3)


def test_jdd_on_real_grbg_raw(workdir: Path, tmp_path: Path):
    import tifffile

    kdc = Path(__file__).resolve().parents[2] / "shared" / "data" / "raw" / "kodak_dc50.kdc"
    if not kdc.is_file():
        pytest.skip("shared RAW sample not present")
    res = _cli(
        ["jdd", kdc, "-o", tmp_path / "dc50.tiff", "--model", workdir / "jdd.pt", "--render", "linear", "-q"]
    )
    assert res.exit_code == 0, res.output
    from rawrcl.io.raw import read_raw

    raw = read_raw(kdc)
    assert tifffile.imread(tmp_path / "dc50.tiff").shape == (raw.height, raw.width, 3)


def test_bf16_autocast_keeps_full_precision_output():
    """Under bf16 autocast the head runs in fp32: an identity DnCNN stays exact (a bf16 output would not)."""
    from rawrcl.models import build_model

    torch.manual_seed(0)
    ident = build_model({"arch": "dncnn", "in_channels": 4, "head": "raw", "width": 4, "depth": 2}).eval()
    nn.init.zeros_(ident.head.conv.weight)
    nn.init.zeros_(ident.head.conv.bias)
    cfa = np.random.default_rng(8).random((40, 44), dtype=np.float32)
    out = denoise_cfa(ident, cfa, "BGGR", TileOptions(tile=16, overlap=4, device="cpu", precision="bf16"))
    np.testing.assert_allclose(out, cfa, atol=1e-6)  # a bf16 output would be off by ~1e-3
    assert isinstance(ident.head, nn.Module) and type(ident.head).__name__ == "Head"  # restored


def test_outputs_are_readable_by_others(tmp_path):
    import os
    import stat

    from rawrcl.infer import atomic_output

    dst = tmp_path / "out.tiff"
    with atomic_output(dst) as tmp:
        tmp.write_bytes(b"x")
    mode = stat.S_IMODE(os.stat(dst).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # not mkstemp's 0600
    assert not [p for p in tmp_path.iterdir() if p.name != "out.tiff"]  # no temporary left behind


def test_tta_flag_keeps_the_grid_and_an_identity_exact(workdir: Path, tmp_path: Path):
    """`--tta` runs the self-ensemble through tiling: identity denoiser → the same DN; JDD → same grid."""
    import rawpy
    import tifffile

    dst = tmp_path / "a.dng"
    res = _cli(
        ["denoise", workdir / "a.dng", "-o", dst, "--model", workdir / "identity_raw.pt", "--tta", "-q"]
    )
    assert res.exit_code == 0, res.output
    with rawpy.imread(str(workdir / "a.dng")) as r0, rawpy.imread(str(dst)) as r1:
        np.testing.assert_array_equal(r1.raw_image_visible, r0.raw_image_visible)
    args = ["jdd", workdir / "a.dng", "--model", workdir / "jdd.pt", "--tile", "16", "--overlap", "4", "-q"]
    assert _cli([*args, "-o", tmp_path / "plain.tiff"]).exit_code == 0
    assert _cli([*args, "-o", tmp_path / "tta.tiff", "--tta"]).exit_code == 0
    plain, tta = tifffile.imread(tmp_path / "plain.tiff"), tifffile.imread(tmp_path / "tta.tiff")
    assert plain.shape == tta.shape == (45, 63, 3)
    assert not np.array_equal(plain, tta)  # a random network: the average differs from one pass


def test_cli_tile_defaults_are_the_library_defaults():
    """`rawrcl jdd/denoise` and the API (TileOptions) tile a frame the same way by default."""
    from rawrcl.cli.infer import jdd

    defaults = {p.name: p.default for p in jdd.params}
    opts = TileOptions()
    assert (defaults["tile"], defaults["overlap"], defaults["batch_tiles"]) == (
        opts.tile,
        opts.overlap,
        opts.batch_tiles,
    )


@pytest.mark.parametrize("env", [None, "default"])
def test_keep_freed_memory_applies_once_unless_opted_out(env):
    """glibc accepts the thresholds (True) on Linux; RAWRCL_MALLOC=default leaves them alone (False).
    Run in a fresh interpreter: the setting is process-wide and applied once."""
    import os
    import subprocess
    import sys

    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    if not (sys.platform.startswith("linux") and libc.startswith("glibc")):
        pytest.skip("glibc only")
    code = "from rawrcl.infer.memory import keep_freed_memory as k; print(k(), k())"
    environ = {k: v for k, v in os.environ.items() if k != "RAWRCL_MALLOC"}
    if env is not None:
        environ["RAWRCL_MALLOC"] = env
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == (["False", "False"] if env else ["True", "True"])


def test_banded_rendering_and_quantisation_match_the_whole_image_formulas():
    from types import SimpleNamespace

    from rawrcl.infer.files import _render
    from rawrcl.infer.pipeline import channel_clip_levels
    from rawrcl.infer.writers import BAND_ROWS, to_uint
    from rawrcl.isp import render_srgb

    rng = np.random.default_rng(0)
    rgb = rng.uniform(-0.1, 1.2, (3, 2 * BAND_ROWS + 5, 9)).astype(np.float32)  # rows not a band multiple
    ccm = np.array([[1.6, -0.4, -0.2], [-0.2, 1.5, -0.3], [0.0, -0.5, 1.5]])
    cfa = rng.uniform(0, 1, (2 * BAND_ROWS + 5, 9)).astype(np.float32)
    raw = SimpleNamespace(wb=(2.0, 1.0, 1.5), ccm=ccm, cfa=cfa, pattern="GRBG")
    sat = channel_clip_levels(cfa, "GRBG")  # on this small random mosaic: each position's maximum
    whole = render_srgb(np.clip(rgb, 0, 1), raw.wb, ccm, clip_highlights=sat)
    assert np.array_equal(_render(raw, rgb, "srgb"), whole)
    for bits in (8, 16):
        top = (1 << bits) - 1
        ref = (
            (np.clip(whole, 0, 1) * top + 0.5).transpose(1, 2, 0).astype(np.uint8 if bits == 8 else np.uint16)
        )
        got = to_uint(whole, bits)
        assert got.dtype == ref.dtype and got.shape == (2 * BAND_ROWS + 5, 9, 3)
        assert np.array_equal(got, ref)


def test_blown_highlights_render_white_where_the_sensor_clips_below_white():
    """The greens of this mosaic clip at 0.9 (a pile-up below the white level): a blown area (R, B at 1, G at
    0.9 in camera RGB) renders white, as LibRaw's default (it rendered magenta)."""
    from types import SimpleNamespace

    from rawrcl.infer.files import _render
    from rawrcl.infer.pipeline import channel_clip_levels

    rng = np.random.default_rng(1)
    cfa = rng.uniform(0.05, 0.6, (128, 128)).astype(np.float32)  # a lone maximum is < 0.1 % of a position
    cfa[:16, :16] = 1.0
    cfa[:16:2, 1:16:2] = cfa[1:16:2, :16:2] = 0.9  # RGGB greens
    assert channel_clip_levels(cfa, "RGGB") == (1.0, pytest.approx(0.9), 1.0)
    ccm = np.array([[1.6, -0.4, -0.2], [-0.2, 1.5, -0.3], [0.0, -0.5, 1.5]])
    raw = SimpleNamespace(wb=(2.0, 1.0, 1.5), ccm=ccm, cfa=cfa, pattern="RGGB")
    rgb = np.broadcast_to(np.array([1.0, 0.9, 1.0], np.float32)[:, None, None], (3, 4, 4)).copy()
    out = _render(raw, rgb, "srgb")
    assert np.ptp(out[:, 0, 0]) < 1e-5 and out[0, 0, 0] > 0.9  # white (the clip level: 0.9 after WB)
    raw.cfa = cfa[16:, 16:]  # nothing blown: the same pixel keeps its colour
    assert np.ptp(_render(raw, rgb, "srgb")[:, 0, 0]) > 0.05


def test_keep_saturated_puts_clipped_samples_back():
    from rawrcl.infer import keep_saturated

    rng = np.random.default_rng(0)
    cfa = rng.uniform(0.1, 0.8, size=(64, 64)).astype(np.float32)
    cfa[:8, 0::2] = 1.0  # blown at the white level
    cfa[:8, 1::2] = 0.9  # the odd columns' positions clip below white (a pile-up at their maximum)
    out = keep_saturated(cfa * 0.95, cfa)
    assert np.all(out[:8, 0::2] == 1.0) and np.all(out[:8, 1::2] == np.float32(0.9))
    assert np.allclose(out[8:], cfa[8:] * 0.95)
    single = cfa.copy()
    single[40, 40] = 0.85  # a lone maximum (no pile-up) below white is a bright sample, not a clip
    single[:16] = 0.5
    assert np.allclose(keep_saturated(single * 0.95, single), single * 0.95)
    small = single[32:56, 32:56]  # 144 samples per position: one is more than 0.1 % of them
    assert np.allclose(keep_saturated(small * 0.95, small), small * 0.95)


def test_denoise_keeps_blown_highlights_clipped(workdir: Path, tmp_path: Path, monkeypatch):
    """A network's estimate pulled clipped samples a few % below white, so raw developers no longer saw the
    highlights as clipped (coloured fringes): `denoise` puts the input's saturated samples back."""
    import rawrcl.infer.files as files
    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import read_raw

    cfa = np.full((48, 64), 1500, np.uint16)
    cfa[:16] = 4095  # blown
    write_dng(tmp_path / "sun.dng", cfa, "RGGB", 64, 4095)
    darker = files.denoise_cfa
    monkeypatch.setattr(files, "denoise_cfa", lambda *a, **k: darker(*a, **k) * 0.97)
    res = _cli(
        ["denoise", tmp_path / "sun.dng", "-o", tmp_path / "o.dng", "--model", workdir / "identity_raw.pt"]
    )
    assert res.exit_code == 0, res.output
    out = read_raw(tmp_path / "o.dng").cfa
    assert np.all(out[:16] == 1.0) and np.all(out[16:] < 0.4)


def test_model_default_names_the_shipped_weights(workdir: Path, tmp_path: Path):
    """``--model default`` is what ``adapt --from default`` and ``eval default`` call the shipped weights."""
    from rawrcl.io.raw import read_raw
    from rawrcl.models.loading import checkpoint_for

    for task in ("raw-denoise", "jdd"):
        assert checkpoint_for("default", task) == checkpoint_for(None, task)
    outs = []
    for extra in ([], ["--model", "default"]):
        dst = tmp_path / f"b{len(extra)}.dng"
        res = _cli(["denoise", workdir / "b.dng", "-o", dst, *extra])
        assert res.exit_code == 0, res.output
        outs.append(read_raw(dst).cfa)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_jdd_and_denoise_average_their_stages_at_low_noise_unless_one_pass(tmp_path: Path):
    """`rawrcl jdd` with the shipped default: told base-ISO noise the output is the mean over both stages'
    four orientations, told a phone's base ISO over two (both differ from --one-pass; --two-pass differs
    again at base ISO only where it would not: it keeps the four); told high-ISO noise the default is the
    one-pass output exactly. `rawrcl denoise` averages its first stage the same way."""
    import tifffile

    from rawrcl.io.dng import write_dng

    rng = np.random.default_rng(3)
    cfa = (rng.random((96, 128)) * 3000 + 600).astype(np.uint16)
    src = tmp_path / "f.dng"
    write_dng(src, cfa, "GRBG", 512, 16383)

    def run(noise: str, *opts: str) -> np.ndarray:
        out = tmp_path / f"{noise}{''.join(opts)}.tiff"
        res = _cli(["jdd", src, "-o", out, "--noise", noise, "--render", "linear", "--precision", "fp32",
                    "-q", *opts])  # fmt: skip
        assert res.exit_code == 0, res.output
        return tifffile.imread(out).astype(np.int64)

    # σ at mid-grey 0.0019, 0.0134, 0.0268 and 0.058 (QUAD_GATE 0.008, SIGMA_GATE 0.021, FIRST_GATE 0.053)
    low, mid, l5, high = "2e-5,1e-8", "1e-3,2e-6", "4e-3,3e-5", "1e-2,1.6e-3"
    default = run(low)
    assert np.abs(default - run(low, "--one-pass")).max() > 20  # real further passes
    np.testing.assert_array_equal(run(low, "--two-pass"), default)  # at least two: four here
    assert np.abs(run(mid) - run(mid, "--one-pass")).max() > 20
    np.testing.assert_array_equal(run(high), run(high, "--one-pass"))
    said = {}  # the per-file log line says when (and only when) further passes run, and how many
    cases = [("jdd", low, ()), ("jdd", mid, ()), ("jdd", low, ("--one-pass",)), ("jdd", low, ("--tta",))]
    cases += [("jdd", l5, ()), ("jdd", high, ())]
    cases += [("denoise", low, ()), ("denoise", l5, ()), ("denoise", high, ())]
    for cmd, noise, opts in cases:
        out = tmp_path / ("log.tiff" if cmd == "jdd" else "log.dng")
        res = _cli([cmd, src, "-o", out, "--noise", noise, "--force", *opts])
        assert res.exit_code == 0, res.output
        said[cmd, noise, opts] = [
            f"{who} {n}"
            for who in ("both stages run", "the first stage runs")
            for n in ("on the mosaic and its transpose", "on the mosaic turned four ways")
            if f"{who} {n}" in res.output
        ]
    assert said == {
        ("jdd", low, ()): ["both stages run on the mosaic turned four ways"],
        ("jdd", mid, ()): ["both stages run on the mosaic and its transpose"],
        ("jdd", low, ("--one-pass",)): [],
        ("jdd", low, ("--tta",)): [],
        ("jdd", l5, ()): ["the first stage runs on the mosaic and its transpose"],
        ("jdd", high, ()): [],
        ("denoise", low, ()): ["the first stage runs on the mosaic turned four ways"],
        ("denoise", l5, ()): ["the first stage runs on the mosaic and its transpose"],
        ("denoise", high, ()): [],
    }
