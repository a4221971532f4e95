"""ONNX export, the ONNX Runtime backend and darktable packages (issue 21).

The darktable tests run the package through :mod:`rawrcl.export.dt_emulate`, a re-implementation of
darktable 5.6's Bayer raw-denoise path (darktable itself cannot be installed here), and compare with what
``rawrcl jdd`` / ``rawrcl denoise`` compute for the same file.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from click.testing import CliRunner  # noqa: E402
from rawrcl.cli import main  # noqa: E402

from rawrcl.errors import RawrclError  # noqa: E402
from rawrcl.export.backend import cached_export  # noqa: E402
from rawrcl.export.build import export_prepared, prepare  # noqa: E402
from rawrcl.export.darktable import write_package  # noqa: E402
from rawrcl.export.dt_emulate import (  # noqa: E402
    install_dtmodel,
    load_bayer_variant,
    ort_runner,
    restore_raw_bayer,
)
from rawrcl.export.graph import check_external_data, graph_info  # noqa: E402
from rawrcl.export.noise import baked_nlf  # noqa: E402
from rawrcl.export.ort import OrtModel  # noqa: E402
from rawrcl.infer import TileOptions, denoise_cfa, jdd_cfa, requantize_cfa  # noqa: E402
from rawrcl.models import ARCHS, load_checkpoint, save_checkpoint  # noqa: E402
from rawrcl.models.loading import default_weights_path, load_for_task  # noqa: E402
from tests.conftest import SHARED_RAW  # noqa: E402

torch.set_num_threads(1)
COLOUR = {"R": 0, "G": 1, "B": 2}
BLACK, WHITE = 512.0, 16383.0
WHOLE = TileOptions(tile=4096, overlap=0, precision="fp32", device="cpu")  # one pass: the reference


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAWRCL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def mosaic(h: int, w: int, pattern: str = "RGGB", seed: int = 0) -> np.ndarray:
    """(h, w) float32 Bayer mosaic in [0, 1] units of a real photo (linearised), with shot/read noise and
    values below 0 (unclipped, as rawrcl and darktable read files)."""
    from skimage import data

    rgb = data.astronaut().astype(np.float32) / 255.0
    rgb = np.tile(rgb, (-(-h // 512), -(-w // 512), 1))[:h, :w].transpose(2, 0, 1) ** 2.2 * 0.6
    cfa = np.empty((h, w), np.float32)
    for i in range(2):
        for j in range(2):
            cfa[i::2, j::2] = rgb[COLOUR[pattern[2 * i + j]], i::2, j::2]
    rng = np.random.default_rng(seed)
    return cfa + rng.standard_normal(cfa.shape).astype(np.float32) * np.sqrt(
        4e-3 * np.clip(cfa, 0, None) + 2e-4
    )


def own_colour(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """(3, H, W) → (H, W): each pixel's own CFA colour (what darktable keeps)."""
    ch = np.array([COLOUR[c] for c in pattern]).reshape(2, 2)
    ii, jj = np.indices(rgb.shape[1:])
    return rgb[ch[ii % 2, jj % 2], ii, jj]


def emulate(package_dir: Path, cfa: np.ndarray, pattern: str, **kw):
    """darktable on a [0, 1] mosaic stored as DN; returns (value in [0, 1] units, dn uint16, stats)."""
    v = load_bayer_variant(package_dir)
    for k, val in kw.items():
        setattr(v, k, val)
    dn, value, stats = restore_raw_bayer(
        v, ort_runner(v.onnx), cfa * (WHITE - BLACK) + BLACK, pattern, (BLACK,) * 4, WHITE
    )
    return (value - BLACK) / (WHITE - BLACK), dn, stats


def dn_of(x: np.ndarray) -> np.ndarray:
    return np.floor(np.clip(x * (WHITE - BLACK) + BLACK, 0, WHITE) + 0.5)


#: the shipped JDD model is noise-aware: the darktable packages bake one camera level in
JDD_NLF = ((4e-3,) * 4, (6e-5,) * 4)


def shipped_jdd() -> nn.Module:
    """The shipped JDD model told :data:`JDD_NLF` (what the packages bake in): the torch reference."""
    from rawrcl.models.conditioning import WithNoise

    return WithNoise(load_for_task(None, "jdd")[0], torch.tensor(JDD_NLF), 4).eval()


@pytest.fixture(scope="module")
def jdd_prep():
    from rawrcl.export.noise import BakedNLF

    model, cfg = load_checkpoint(default_weights_path("jdd"))
    return prepare(model, cfg, head="jdd", noise=BakedNLF(*JDD_NLF))


@pytest.fixture(scope="module")
def dt512(tmp_path_factory, jdd_prep) -> Path:
    """The shipped JDD model as a darktable package (default 512 tile), installed like darktable does."""
    d = tmp_path_factory.mktemp("dt512")
    info = write_package(
        jdd_prep, d / "jdd.dtmodel", "rawdenoise-test-jdd", checkpoint=default_weights_path("jdd")
    )
    models = d / "models"
    models.mkdir()
    return install_dtmodel(info["path"], models)


@pytest.fixture(scope="module")
def dt192(tmp_path_factory, jdd_prep) -> Path:
    """Same model, 192-pixel tiles (darktable accepts any ladder entry ≥ 4·32): many tiles, fast."""
    d = tmp_path_factory.mktemp("dt192")
    info = write_package(jdd_prep, d, "rawdenoise-test-192", tile=192)
    return Path(info["path"])


# --------------------------------------------------------------------------------------- graphs


def test_package_graph_contract(dt512):
    import onnx

    path = dt512 / "model_bayer.onnx"
    onnx.checker.check_model(str(path), full_check=True)
    info = graph_info(path)
    assert info["inputs"] == [("input", [1, 4, 512, 512], "FLOAT")]
    assert info["outputs"] == [("output", [1, 3, 1024, 1024], "FLOAT")]
    assert info["opset"] <= 20
    assert info["metadata"]["head"] == "jdd" and info["metadata"]["scale"] == "2"


def test_package_layout_and_manifest(dt512):
    archive = dt512.parent.parent / "jdd.dtmodel"
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
    assert names[0] == "rawdenoise-test-jdd/"  # darktable takes the model id from the first entry
    assert set(names) == {
        "rawdenoise-test-jdd/" + f
        for f in ("", "config.json", "model_bayer.onnx", "README.md", "rawrcl_export.json")
    }
    cfg = json.loads((dt512 / "config.json").read_text())
    assert dt512.name == cfg["id"] == "rawdenoise-test-jdd" and cfg["name"]
    assert cfg["task"] == "rawdenoise" and cfg["backend"] == "onnx"
    bayer = cfg["attributes"]["variants"]["bayer"]
    assert bayer == {
        "onnx": "model_bayer.onnx",
        "input_kind": "bayer_v1",
        "bayer_orientation": "force_rggb",
        "edge_pad": "mirror_cropped",
        "wb_norm": "none",
        "output_scale": "absolute",
    }
    assert cfg["attributes"]["input_sizes"] == [512] and cfg["variants"] == cfg["attributes"]["variants"]
    v = load_bayer_variant(dt512)
    assert (v.tile, v.wb_norm, v.output_scale) == (512, "none", "absolute")
    card = (dt512 / "README.md").read_text()
    assert "cbsd68" in card.lower() and "sha256" in card and "[1, 4, 512, 512]" in card


def _real_tiles(side: int) -> list[np.ndarray]:
    """Packed tiles (4, side, side) in [0, 1] units: a photo mosaic, and the real phone burst when present."""
    from rawrcl.cfa import align_rggb, pack

    tiles = [pack(mosaic(2 * side, 2 * side, seed=3), "RGGB")]
    p = SHARED_RAW / "hdrplus_burst2" / "frame00.dng"
    if p.is_file():
        from rawrcl.io.raw import read_raw

        raw = read_raw(p, clip=False)
        aligned, _ = align_rggb(raw.cfa, raw.pattern)
        h, w = aligned.shape
        y, x = (h // 4) & ~1, (w // 3) & ~1
        tiles.append(pack(np.ascontiguousarray(aligned[y : y + 2 * side, x : x + 2 * side]), "RGGB"))
    return tiles


@pytest.mark.parametrize("task", ["jdd", "raw-denoise"])
def test_onnxruntime_equals_torch_fp32(task):
    """On-the-fly export (dynamic shapes), random tiles with values outside [0, 1] and real tiles."""
    from rawrcl.infer.noise import bind_noise
    from rawrcl.noise import NoiseModel

    # the shipped RAW denoiser is noise-aware: its on-the-fly graph takes the noise as a second input
    level = NoiseModel(1e-2, 1.6e-3)  # above the pass gates (std 0.058 at mid-grey): one pass, as the graph
    torch_model = bind_noise(load_for_task(None, task)[0], level)
    ort_model = bind_noise(OrtModel(cached_export(None, task)), level)
    g = torch.Generator().manual_seed(5)
    # sizes that are not multiples of the U-Net's 8: the graph pads itself as torch does (--tta makes them)
    xs = [torch.rand(2, 4, 96, 136, generator=g) * 1.3 - 0.15, torch.rand(1, 4, 57, 83, generator=g)]
    xs += [torch.from_numpy(np.ascontiguousarray(t))[None] for t in _real_tiles(128)]
    for x in xs:
        with torch.no_grad():
            ref = torch_model(x)
        got = ort_model(x)
        assert got.shape == ref.shape
        assert (got - ref).abs().max() <= 1e-4
    cfa = mosaic(150, 171, "GBRG")
    tta = TileOptions(tile=64, overlap=16, precision="fp32", device="cpu", self_ensemble=True)
    fn = jdd_cfa if task == "jdd" else denoise_cfa
    assert np.abs(fn(torch_model, cfa, "GBRG", tta) - fn(ort_model, cfa, "GBRG", tta)).max() <= 1e-4


def test_cli_jdd_backend_onnxruntime_matches_torch(tmp_path):
    import tifffile

    from rawrcl.io.dng import write_dng

    cfa = mosaic(300, 420, "GRBG", seed=1)
    dng = write_dng(tmp_path / "f.dng", dn_of(cfa).astype(np.uint16), "GRBG", BLACK, WHITE)
    r = CliRunner()
    outs = {}
    for backend in ("torch", "onnxruntime"):
        out = tmp_path / f"{backend}.tiff"
        res = r.invoke(main, ["jdd", str(dng), "-o", str(out), "--render", "linear", "--precision", "fp32",
                              "--tile", "128", "--backend", backend, "-q"])  # fmt: skip
        assert res.exit_code == 0, res.output
        outs[backend] = tifffile.imread(out).astype(np.int64)
    # 16-bit output of values within 1e-4 of each other: at most ⌈1e-4·65535⌉ = 7 codes apart
    assert np.abs(outs["torch"] - outs["onnxruntime"]).max() <= 7
    # exported once, cached: the one-pass graph and, as this file's estimated noise (std at mid-grey between
    # SIGMA_GATE and FIRST_GATE) asks for it, the graph holding the first stage's pair, the JDD stage once
    assert sorted(p.name.split("-")[-1] for p in tmp_path_cache().glob("*-jdd-*.onnx")) == [
        "p2x1.onnx",
        "v2.onnx",
    ]


def test_onnxruntime_backend_averages_as_torch_at_low_noise_a_users_graph_says_it_holds_one(tmp_path):
    """At base-ISO noise rawrcl jdd averages both stages over four orientations on either backend — on
    onnxruntime through a cached graph holding them (GatedOrt), with the same output and log line as torch;
    a user's ONNX file holds one pass, and the per-file log says so (silent at higher noise)."""
    import tifffile

    from rawrcl.io.dng import write_dng

    dng = write_dng(tmp_path / "f.dng", dn_of(mosaic(200, 260, "RGGB", seed=2)).astype(np.uint16), "RGGB",
                    BLACK, WHITE)  # fmt: skip
    said, outs = {}, {}
    low, high = "2e-5,1e-8", "1e-2,1.6e-3"
    before = set(tmp_path_cache().glob("*-jdd-*-p*.onnx"))
    user = tmp_path / "user.onnx"  # a noise-input graph, as plain `rawrcl export --format onnx` writes
    prep = prepare(*load_checkpoint(default_weights_path("jdd")), head="jdd")
    export_prepared(prep, user, tile=None, verify=False)
    runs = [("torch", low, None), ("onnxruntime", low, None), ("onnxruntime", high, None)]
    for backend, noise, model in [*runs, ("onnxruntime", low, user), ("onnxruntime", high, user)]:
        out = tmp_path / f"{backend}{noise}{model is not None}.tiff"
        res = CliRunner().invoke(main, ["jdd", str(dng), "-o", str(out), "--force", "--noise", noise,
                                        "--backend", backend, "--precision", "fp32", "--render", "linear",
                                        *(["--model", str(model)] if model else [])])  # fmt: skip
        assert res.exit_code == 0, res.output
        said[backend, noise, model] = ("four ways" in res.output, "graph holds one pass" in res.output)
        outs[backend, noise, model] = tifffile.imread(out).astype(np.int64)
    assert said == {
        ("torch", low, None): (True, False),
        ("onnxruntime", low, None): (True, False),
        ("onnxruntime", high, None): (False, False),
        ("onnxruntime", low, user): (False, True),
        ("onnxruntime", high, user): (False, False),
    }
    assert np.abs(outs["torch", low, None] - outs["onnxruntime", low, None]).max() <= 7  # within 1e-4
    assert np.abs(outs["onnxruntime", low, user] - outs["torch", low, None]).max() > 20  # one pass differs
    made = set(tmp_path_cache().glob("*-jdd-*-p*.onnx")) - before  # the base-ISO file's four-pass graph only
    assert [p.name.split("-")[-1] for p in made] == ["p4x4.onnx"]


def tmp_path_cache() -> Path:
    import os

    return Path(os.environ["RAWRCL_CACHE_DIR"]) / "onnx"


def test_cli_denoise_runs_an_exported_onnx_file(tmp_path):
    from rawrcl.io.raw import read_raw

    r = CliRunner()
    onnx_path = tmp_path / "raw.onnx"
    res = r.invoke(main, ["export", "default-raw-denoise", "--format", "onnx", "-o", str(onnx_path)])
    assert res.exit_code == 0, res.output
    assert "verified" in res.output
    from rawrcl.io.dng import write_dng

    cfa = mosaic(200, 260, "BGGR", seed=2)
    dng = write_dng(tmp_path / "f.dng", dn_of(cfa).astype(np.uint16), "BGGR", BLACK, WHITE)
    res = r.invoke(
        main, ["denoise", str(dng), "-o", str(tmp_path / "o.dng"), "--model", str(onnx_path), "-q"]
    )
    assert res.exit_code == 0, res.output  # a .onnx --model picks the onnxruntime backend
    from rawrcl.infer.noise import NoiseOptions, raw_model_for

    got = read_raw(tmp_path / "o.dng", clip=False).cfa
    raw = read_raw(dng, clip=False)  # the same noise as the command: --noise auto (here the image estimate)
    plain = NoiseOptions(shrink=False)  # an exported graph: the network and its fixed blend, no SURE
    ref = denoise_cfa(
        raw_model_for(load_for_task(None, "raw-denoise")[0], raw, dng, plain),
        raw.cfa,
        "BGGR",
        replace(WHOLE, two_pass=False),  # the graph holds one pass; this file is under the first stage's gate
    )
    want = (requantize_cfa(ref, "BGGR", (BLACK,) * 4, WHITE) - BLACK) / (WHITE - BLACK)
    assert np.abs(got - want).max() * (WHITE - BLACK) <= 1.01  # requantised to DN: at most one code apart


# --------------------------------------------------------------------------------------- darktable


def test_darktable_emulation_matches_rawrcl_jdd_rggb(dt192):
    """Many 192-px tiles: where one tile owns a pixel (no seam) away from the frame border, darktable's
    result is rawrcl's to float rounding; seams and the border differ by the tiling, bounded."""
    cfa = mosaic(900, 1000, "RGGB")
    got, dn, st = emulate(dt192, cfa, "RGGB")
    ref = own_colour(jdd_cfa(shipped_jdd(), cfa, "RGGB", WHOLE), "RGGB")
    inner = np.zeros(cfa.shape, bool)
    inner[100:-100, 100:-100] = True
    own = (st["weight"] == 1) & inner
    seam = (st["weight"] < 1) & inner
    assert st["tiles"] == 4 * 4 and own.sum() > 0.1 * cfa.size and seam.sum() > 0.3 * cfa.size
    d = np.abs(got - ref)
    assert d[own].max() <= 1e-4
    assert np.abs(dn.astype(np.int64) - dn_of(ref))[own].max() <= 1
    # measured: seams max 5.0e-3, mean 2.3e-4; border band max 7.3e-2, mean 9e-4 (docs/export.md)
    assert d[seam].max() <= 1e-2 and d[seam].mean() <= 5e-4
    assert d[~inner].mean() <= 2e-3


def test_a_baked_low_noise_graph_averages_the_jdd_stage_as_rawrcl_jdd_does(tmp_path):
    """With the noise baked in, the graph holds both stages' orientations rawrcl jdd runs for it (four at
    base ISO, two at L3–L4 — the first stage up to L6 —, one above; one with --one-pass or with a noise
    input) and equals torch's."""
    from rawrcl.export.noise import BakedNLF
    from rawrcl.models.conditioning import WithNoise
    from rawrcl.noise import PRESETS

    def nlf(level):
        return BakedNLF((PRESETS[level][0],) * 4, (PRESETS[level][1],) * 4)

    def prep(level, **kw):
        return prepare(*load_checkpoint(default_weights_path("jdd")), head="jdd", noise=nlf(level), **kw)

    assert [prep(lv).jdd_passes for lv in ("L1", "L2", "L3", "L4", "L5")] == [4, 4, 2, 2, 1]
    assert [prep(lv).first_passes for lv in ("L1", "L3", "L5", "L6", "high")] == [4, 2, 2, 2, 1]
    assert prep("L1", one_pass=True).jdd_passes == prep("L1", one_pass=True).first_passes == 1
    assert prepare(*load_checkpoint(default_weights_path("jdd"))).jdd_passes == 1  # a noise input
    path = tmp_path / "l1.onnx"
    info = export_prepared(prep("L1"), path, tile=48)
    assert info["metadata"]["jdd_passes"] == info["metadata"]["first_passes"] == "4"
    assert info["max_abs_diff"] <= 1e-4
    x = torch.from_numpy(np.ascontiguousarray(np.stack(
        [mosaic(96, 96, "RGGB", seed=3)[i::2, j::2] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1))]
    )))[None]  # fmt: skip
    model, _ = load_checkpoint(default_weights_path("jdd"))
    with torch.no_grad():
        ref = WithNoise(model, nlf("L1").tensor(), 4).eval()(x)  # as rawrcl jdd runs it: four of each
        model.two_pass = False
        one = WithNoise(model, nlf("L1").tensor(), 4).eval()(x)
    got = OrtModel(path)(x)
    assert float((got - ref).abs().max()) <= 1e-4 < float((got - one).abs().max())
    out = CliRunner().invoke(main, ["export", "default-jdd", "--format", "onnx", "--noise", "2e-5,1e-8",
                                    "--tile", "48", "-o", str(tmp_path / "c.onnx")])  # fmt: skip
    assert out.exit_code == 0 and "averaged over 4 orientations" in out.output, out.output
    args = ["export", "default-jdd", "--format", "onnx", "--noise", "2e-5,1e-8", "--tile", "48"]
    out = CliRunner().invoke(main, [*args, "--one-pass", "-o", str(tmp_path / "d.onnx")])
    assert out.exit_code == 0 and "orientations" not in out.output
    assert graph_info(tmp_path / "d.onnx")["metadata"]["jdd_passes"] == "1"


def test_darktable_emulation_single_512_tile_grbg(dt512):
    """The real package (512 tiles) on a GRBG frame: darktable crops to the R origin before packing,
    rawrcl pads; on the same (R-origin) grid the results agree."""
    cfa = mosaic(700, 801, "GRBG")
    got, _, st = emulate(dt512, cfa, "GRBG")
    assert st["tiles"] == 1 and st["gains"] == [1.0]
    cropped = cfa[:, 1:]  # R origin: GRBG → RGGB
    ref = own_colour(jdd_cfa(shipped_jdd(), cropped, "RGGB", WHOLE), "RGGB")
    inner = (slice(100, -100), slice(100, -100))
    assert np.abs(got[:, 1:] - ref)[inner].max() <= 1e-4
    assert np.allclose(got[:, 0], cfa[:, 0], atol=1e-6)  # the column left of the R origin keeps its input


def test_darktable_raw_denoiser_lands_on_cfa_sites(tmp_path):
    """A RAW denoiser exported for darktable: at the CFA sites darktable keeps rawrcl denoise's values."""
    from rawrcl.export.noise import BakedNLF
    from rawrcl.models.conditioning import WithNoise

    model, cfg = load_checkpoint(default_weights_path("raw-denoise"))
    nlf = BakedNLF((4e-3,) * 4, (3e-5,) * 4)  # the shipped denoiser is noise-aware: one camera level baked in
    info = write_package(
        prepare(model, cfg, head="jdd", noise=nlf), tmp_path, "rawdenoise-test-raw", tile=192
    )
    cfa = mosaic(500, 520, "RGGB", seed=4)
    got, _, st = emulate(Path(info["path"]), cfa, "RGGB")
    ref = denoise_cfa(WithNoise(model, nlf.tensor(), 4).eval(), cfa, "RGGB", WHOLE)
    own = st["weight"] == 1
    own[:100] = own[-100:] = False
    own[:, :100] = own[:, -100:] = False
    assert own.sum() > 0 and np.abs(got - ref)[own].max() <= 1e-4


def test_match_gain_would_shift_a_calibrated_model(dt192):
    """Why the package says output_scale: absolute: match_gain rescales each tile by
    mean(4 packed) / mean(3 RGB), which is not 1 for true camera RGB and changes from tile to tile."""
    cfa = mosaic(600, 600, "RGGB")
    absolute, _, _ = emulate(dt192, cfa, "RGGB")
    matched, _, st = emulate(dt192, cfa, "RGGB", output_scale="match_gain")
    gains = np.array(st["gains"])
    assert np.abs(gains - 1).max() > 0.01 and gains.std() > 1e-3
    assert np.abs(matched - absolute).mean() > 1e-3


# --------------------------------------------------------------------------------------- noise-aware


class FakeNoiseAware(nn.Module):
    """The issue-19 interface: ``model(x, noise)``, noise (B, 2, 4) = [λshot; λread] per packed plane; builds
    √(λshot·max(x̄, 0) + λread) itself and predicts a correction from [x, σ]. Head ``raw``."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = {**config, "noise_aware": True}
        self.head_name = config.get("head", "raw")
        self.clamp = bool(config.get("clamp", True))
        torch.manual_seed(0)
        self.conv = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        xbar = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        xbar = xbar.clamp(min=0) if self.clamp else xbar
        std = torch.sqrt(noise[:, 0, :, None, None] * xbar + noise[:, 1, :, None, None])
        return x + 0.1 * self.conv(torch.cat([x, std], 1))


@pytest.fixture
def fake_ckpt(tmp_path, monkeypatch):
    monkeypatch.setitem(ARCHS, "fake_noise", FakeNoiseAware)

    def make(**cfg) -> Path:
        config = {"arch": "fake_noise", "in_channels": 4, "head": "raw", "noise_aware": True, **cfg}
        path = tmp_path / f"fake{len(list(tmp_path.glob('fake*.pt')))}.pt"
        save_checkpoint(
            path, FakeNoiseAware(config), config, {"provenance": {"camera": "Test Cam", "iso": 800}}
        )
        return path

    return make


def _profile(path: Path) -> Path:
    entries = [
        {
            "iso": iso,
            "per_plane": {
                c: [1e-4 * iso / 100 * (1 + k / 10), 1e-6 * (iso / 100) ** 2]
                for k, c in enumerate("R G1 G2 B".split())
            },
        }
        for iso in (100, 1600)
    ]
    path.write_text(
        json.dumps(
            {
                "format": "rawrcl-noise-profile/1",
                "cameras": {"test cam": {"make": "Test", "model": "Cam", "entries": entries}},
            }
        )
    )
    return path


def test_noise_aware_package_bakes_the_profile(tmp_path, fake_ckpt):
    ckpt = fake_ckpt()
    prof = _profile(tmp_path / "prof.json")
    r = CliRunner()
    res = r.invoke(main, ["export", str(ckpt), "--format", "darktable", "--noise", str(prof), "--iso", "400",
                          "-o", str(tmp_path / "pkg.dtmodel")])  # fmt: skip
    assert res.exit_code == 0, res.output
    d = install_dtmodel(tmp_path / "pkg.dtmodel", tmp_path)
    assert d.name.endswith("-iso400")
    spec = baked_nlf(str(prof), 400)
    model, _ = load_checkpoint(ckpt)
    cfa = mosaic(260, 300, "RGGB", seed=6) - 0.01  # darker than black in places: the clamp matters
    got, _, st = emulate(d, cfa, "RGGB")
    from rawrcl.models import DenoiseThenDemosaic
    from rawrcl.models.conditioning import WithNoise

    ref = own_colour(
        jdd_cfa(DenoiseThenDemosaic(WithNoise(model, spec.tensor(), channels=4)), cfa, "RGGB", WHOLE), "RGGB"
    )
    assert np.isfinite(got).all()
    inner = (slice(8, -8), slice(8, -8))  # receptive field 2 px: only the frame border differs
    assert np.abs(got - ref)[inner].max() <= 1e-4
    card = (d / "README.md").read_text()
    assert "ISO 400" in card and "interpolated" in card and "Test Cam" in card
    assert spec.shot[0] == pytest.approx(4e-4, rel=1e-6)  # log-log interpolation of λshot ∝ ISO


def test_noise_aware_plain_onnx_has_a_noise_input(tmp_path, fake_ckpt):
    model, cfg = load_checkpoint(fake_ckpt())
    path = tmp_path / "n.onnx"
    export_prepared(prepare(model, cfg), path)
    m = OrtModel(path)
    assert m.noise_input and [n for n, _, _ in graph_info(path)["inputs"]] == ["input", "noise"]
    x = torch.rand(2, 4, 40, 56) - 0.05
    noise = torch.tensor([[[3e-3] * 4, [5e-5] * 4], [[1e-3] * 4, [2e-6] * 4]])
    with torch.no_grad():
        assert (m(x, noise) - model(x, noise)).abs().max() <= 1e-5


def test_export_says_an_adapt_runs_fusion_weight_is_not_in_the_graph(tmp_path, fake_ckpt):
    """A ``rawrcl adapt --method burst`` run's GAT+BM3D weight cannot go into a graph: export says so."""
    model, cfg = load_checkpoint(fake_ckpt())
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / "denoise.pt", model, cfg, {"adapt": {"method": "burst", "fuse_bm3d": 0.3}})
    r = CliRunner().invoke(main, ["export", str(run), "--format", "onnx", "-o", str(tmp_path / "r.onnx")])
    assert r.exit_code == 0, r.output
    assert "GAT+BM3D weight 0.3 is not exported" in r.output and (tmp_path / "r.onnx").is_file()
    plain = ["export", str(fake_ckpt()), "--format", "onnx", "-o", str(tmp_path / "p.onnx")]
    r = CliRunner().invoke(main, plain)
    assert r.exit_code == 0 and "not exported" not in r.output, r.output


def test_denoise_tells_a_noise_input_graph_the_noise(tmp_path, fake_ckpt):
    """rawrcl denoise, a plain .onnx with a noise input: --noise reaches it (and changes the output)."""
    from rawrcl.io.dng import write_dng
    from rawrcl.io.raw import read_raw

    model, cfg = load_checkpoint(fake_ckpt())
    path = tmp_path / "n.onnx"
    export_prepared(prepare(model, cfg), path)
    rng = np.random.default_rng(0)
    write_dng(tmp_path / "x.dng", (rng.random((64, 64)) * 3000 + 600).astype(np.uint16), "GRBG", 512, 4095)
    outs = []
    for k, noise in enumerate(("1e-3,1e-5", "2e-2,1e-3")):
        dst = tmp_path / f"o{k}.dng"
        res = CliRunner().invoke(
            main, ["denoise", str(tmp_path / "x.dng"), "-o", str(dst), "--model", str(path), "--noise", noise]
        )
        assert res.exit_code == 0, res.output
        assert "noise from --noise" in res.stdout
        outs.append(read_raw(dst).cfa)
    assert not np.array_equal(*outs)


def test_noise_options_one_line_errors(tmp_path, fake_ckpt):
    from rawrcl.models import build_model

    prof = _profile(tmp_path / "prof.json")
    blind = tmp_path / "blind.pt"
    save_checkpoint(
        blind, build_model({"arch": "unet", "in_channels": 4, "head": "jdd", "width": 4, "depth": 1})
    )
    r = CliRunner()
    out = str(tmp_path / "x.dtmodel")
    cases = [
        ([str(fake_ckpt()), "--format", "darktable", "-o", out], "no noise input"),
        (
            [str(fake_ckpt()), "--format", "darktable", "--noise", str(prof), "--iso", "6400", "-o", out],
            "outside the measured ISOs",
        ),
        ([str(fake_ckpt(clamp=False)), "--format", "darktable", "--noise", "4e-3,6e-5", "-o", out], "clamp"),
        ([str(blind), "--format", "darktable", "--noise", "4e-3,6e-5", "-o", out], "not noise-aware"),
        (
            ["default-jdd", "--format", "darktable", "-o", out],
            "noise-aware model and the target has no noise",
        ),
        (["default-jdd", "--format", "onnx", "--iso", "100", "-o", str(tmp_path / "y.onnx")], "--iso"),
    ]
    for args, needle in cases:
        res = r.invoke(main, ["export", *args])
        assert res.exit_code == 1, (args, res.output)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rawrcl: error:") and needle in lines[0], res.output
    assert not Path(out).exists()


# --------------------------------------------------------------------------------------- bad input


def test_wrong_head_checkpoint_is_refused(tmp_path):
    from rawrcl.models import build_model

    ckpt = tmp_path / "rgb.pt"
    save_checkpoint(
        ckpt, build_model({"arch": "unet", "in_channels": 3, "head": "rgb", "width": 4, "depth": 1})
    )
    res = CliRunner().invoke(
        main, ["export", str(ckpt), "--format", "darktable", "-o", str(tmp_path / "p.dtmodel")]
    )
    assert res.exit_code == 1 and res.output.count("\n") == 1 and "head 'rgb'" in res.output
    with pytest.raises(RawrclError, match="head 'raw'"):
        model, cfg = load_checkpoint(default_weights_path("jdd"))
        prepare(model, cfg, head="raw")


def test_row_aware_checkpoint_is_refused():
    """An adapted model of a banded camera needs each file's row noise, which an export cannot give it."""
    from rawrcl.models import build_model
    from rawrcl.models.conditioning import add_row_input

    cfg = {"arch": "unet", "in_channels": 4, "head": "raw", "width": 4, "depth": 1, "noise_aware": True}
    model = add_row_input(build_model(cfg))
    with pytest.raises(RawrclError, match="row-aware"):
        prepare(model, model.config)


def test_external_data_outside_the_folder_is_refused(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [1], np.float32([2.0]).tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["input", "w"], ["output"])],
        "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    inside = tmp_path / "m" / "ok.onnx"
    inside.parent.mkdir()
    onnx.save(helper.make_model(graph), str(inside), save_as_external_data=True, location="ok.bin",
              size_threshold=0)  # fmt: skip
    assert check_external_data(inside) == ["ok.bin"]
    proto = onnx.load(str(inside), load_external_data=False)
    for e in proto.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = "../../secret.bin"
    evil = tmp_path / "m" / "evil.onnx"
    onnx.save(proto, str(evil))
    with pytest.raises(RawrclError, match="outside the model's folder"):
        OrtModel(evil)
    res = CliRunner().invoke(
        main, ["denoise", str(tmp_path / "none.dng"), "-o", str(tmp_path / "o.dng"), "--model", str(evil)]
    )
    assert res.exit_code == 1 and "outside the model's folder" in res.output and res.output.count("\n") == 1


def test_backend_option_errors(tmp_path):
    r = CliRunner()
    onnx_path = tmp_path / "x.onnx"
    onnx_path.write_bytes(b"not onnx")
    for args, needle in [
        (["--model", str(onnx_path), "--backend", "torch"], "--backend onnxruntime"),
        (["--backend", "onnxruntime", "--precision", "bf16"], "fp32 only"),
        (["--model", str(onnx_path)], "not a readable ONNX file"),
    ]:
        res = r.invoke(main, ["jdd", str(tmp_path / "a.dng"), "-o", str(tmp_path / "o.tiff"), *args])
        assert res.exit_code == 1 and needle in res.output and res.output.count("\n") == 1, res.output


def test_raw_denoiser_as_jdd_same_result_on_both_backends(tmp_path):
    """``rawrcl jdd --model RAW_DENOISER``: the on-the-fly export is the same denoise → demosaic module and
    tiles the frame the same way (same size multiple) as torch."""
    from rawrcl.infer import task_model
    from rawrcl.models import build_model, save_checkpoint

    torch.manual_seed(8)  # a blind RAW denoiser (the shipped one is noise-aware: its JDD graph needs --noise)
    ckpt = tmp_path / "blind_raw.pt"
    save_checkpoint(
        ckpt, build_model({"arch": "unet", "in_channels": 4, "head": "raw", "width": 8, "depth": 3})
    )
    cfa = mosaic(150, 171, "GRBG", seed=8)
    out = {}
    for backend in ("torch", "onnxruntime"):
        opts = TileOptions(tile=64, overlap=16, precision="fp32", device="cpu", backend=backend)
        out[backend] = jdd_cfa(task_model(ckpt, "jdd", opts), cfa, "GRBG", opts)
    assert np.abs(out["torch"] - out["onnxruntime"]).max() <= 1e-4
