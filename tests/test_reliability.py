"""Issue 22: files and situations that used to lose data or crash — each refused in one line or handled.

Truncated / header-only / absurd RAW headers, NaN photos, unwritable caches, full disks (RLIMIT_FSIZE),
file names that are not UTF-8, stale temporaries of killed writers, rejected checkpoints, bad options.
Training-run items (lock, resume before the first checkpoint, NaN loss) are in test_run_reliability.py.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from click.testing import CliRunner
from rawrcl.cli import main

from rawrcl.data import RawFolderDataset, load_packed_raw
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path, atomic_write_text, read_photo
from rawrcl.io.dng import write_dng
from rawrcl.io.raw import read_raw
from rawrcl.io.tags import read_dng_tags
from rawrcl.models import build_model, read_checkpoint, save_checkpoint
from tests._fakes import bare_cfa_dng

REPO = Path(__file__).resolve().parents[1]


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _errors(res) -> list[str]:
    """stderr's lines other than the trainer's progress lines (printed off a terminal)."""
    return [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("train: step ")]


def _subprocess_cli(*args, preexec_fn=None, env=None, timeout=180):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "rawrcl.cli", *map(os.fsdecode, args)],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=timeout,
        preexec_fn=preexec_fn,
        env=env,
    )


def _dng(path, shape=(64, 96), pattern="RGGB", seed=0, **kw) -> Path:
    data = np.random.default_rng(seed).integers(600, 4000, size=shape).astype(np.uint16)
    write_dng(path, data, pattern, 512, 4095, **kw)
    return Path(path)


def _patch_entry(content: bytes, code: int, new_value: int) -> bytes:
    """Set the SHORT/LONG value of IFD entry ``code`` (little-endian TIFF written by tifffile)."""
    for typ, size in ((3, 2), (4, 4)):
        entry = struct.pack("<HHI", code, typ, 1)
        at = content.find(entry)
        if at >= 0:
            value = struct.pack("<H", new_value) + b"\0\0" if size == 2 else struct.pack("<I", new_value)
            return content[: at + 8] + value + content[at + 12 :]
    raise AssertionError(f"tag {code} not found")


# --------------------------------------------------------------------------- 1. header without pixels


def test_dng_header_without_pixel_data_is_refused_not_read_as_zeros(tmp_path):
    """LibRaw decodes a lossless-JPEG DNG whose tiles lie beyond the end of the file as an all-zero image
    without an error; rawrcl checks the declared strips/tiles against the file size first."""
    tiled = tmp_path / "tiled.dng"  # a tiled CFA DNG, as cameras write them
    cfa = np.random.default_rng(0).integers(600, 4000, size=(128, 128)).astype(np.uint16)
    tags = [(33421, "H", 2, (2, 2), True), (33422, "B", 4, (0, 1, 1, 2), True)]
    tags += [(50706, "B", 4, (1, 4, 0, 0), True), (50717, "I", 1, 4095, True)]
    tifffile.imwrite(tiled, cfa, photometric=32803, tile=(64, 64), extratags=tags, metadata=None)
    assert read_raw(tiled).cfa.shape == (128, 128)
    data_at = min(tifffile.TiffFile(tiled).pages[0].dataoffsets)
    ljpeg = _patch_entry(tiled.read_bytes(), 259, 7)  # Compression = 7 (lossless JPEG)
    header = tmp_path / "header.dng"
    header.write_bytes(ljpeg[: data_at - 8])  # the header alone: every tile lies beyond the end
    import rawpy

    with rawpy.imread(str(header)) as r:  # the silent failure guarded against: no error, an image of zeros
        assert r.raw_image_visible.shape == (128, 128)  # (or of whatever LibRaw's buffer held before)
    with pytest.raises(RawrclError, match=r"header\.dng: unreadable or truncated"):
        read_raw(header)
    strips = _dng(tmp_path / "strips.dng")  # the same for a strip DNG cut where its pixel data begins
    (tmp_path / "strips_header.dng").write_bytes(
        strips.read_bytes()[: tifffile.TiffFile(strips).pages[0].dataoffsets[0]]
    )
    assert "pixel data missing" in read_dng_tags(tmp_path / "strips_header.dng")["data_problem"]
    with pytest.raises(
        RawrclError, match=r"strips_header\.dng: unreadable or truncated .*pixel data missing"
    ):
        read_raw(tmp_path / "strips_header.dng")
    for n in (600, 2048, 10240):
        cut = tmp_path / f"cut{n}.dng"
        cut.write_bytes(_dng(tmp_path / f"big{n}.dng", shape=(128, 160)).read_bytes()[:n])
        with pytest.raises(RawrclError, match=rf"cut{n}\.dng: unreadable or truncated"):
            read_raw(cut)
    res = _cli("info", header)
    assert res.exit_code == 1 and len(_errors(res)) == 2 and "header.dng: unreadable" in _errors(res)[0]
    out = tmp_path / "out.tiff"
    res = _cli("jdd", header, "-o", out, "-q")
    assert res.exit_code == 1 and not out.exists()


def test_empty_and_text_files_are_named_as_such_not_as_damaged_raws(tmp_path):
    """LibRaw answers "Input/output error" for both, which read_raw turned into "unreadable or truncated
    RAW file" — as if a real RAW were damaged."""
    (tmp_path / "empty.dng").write_bytes(b"")
    notes = "Shot list, ISO 3200\n" * 25 + "..........— f/2\n"  # the 3-byte "—" at bytes 510–512:
    assert notes.encode()[510:513] == "—".encode()  # the 512-byte head read cuts it in two
    (tmp_path / "notes.nef").write_text(notes, encoding="utf-8")
    with pytest.raises(RawrclError, match=r"empty\.dng: empty file \(0 bytes\), not a RAW file$"):
        read_raw(tmp_path / "empty.dng")
    with pytest.raises(RawrclError, match=r"notes\.nef: a text file, not a RAW file$"):
        read_raw(tmp_path / "notes.nef")
    cut = _dng(tmp_path / "ok.dng").read_bytes()[:300]  # binary, even when short: not called text
    (tmp_path / "cut.dng").write_bytes(cut)
    with pytest.raises(RawrclError, match=r"cut\.dng: unreadable or truncated"):
        read_raw(tmp_path / "cut.dng")
    res = _cli("calibrate", tmp_path / "notes.nef")
    assert res.exit_code == 1
    assert _errors(res) == [f"rawrcl: error: {tmp_path / 'notes.nef'}: a text file, not a RAW file"]


def test_calibrate_metadata_says_when_the_pixels_could_not_be_read(tmp_path):
    """A NoiseProfile is valid without the pixels (a metadata-only or linear DNG), so ``calibrate``
    reports it with exit 0 — but it says the pixels were not read (it said "[metadata, ok]" and nothing
    else for a truncated file)."""
    whole = _dng(tmp_path / "whole.dng", shape=(128, 128), noise_profile=(1e-3, 1e-5))
    cut = tmp_path / "cut.dng"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    res = _cli("calibrate", cut)
    assert res.exit_code == 0 and "λshot 0.001" in res.stdout
    assert "from the tags alone: the pixels were not read (unreadable or truncated file" in res.stdout
    res = _cli("calibrate", whole)
    assert res.exit_code == 0 and "the pixels were not read" not in res.stdout


def test_absurd_declared_dimensions_refused_before_allocating(tmp_path):
    good = _dng(tmp_path / "good.dng")
    content = good.read_bytes()
    for code, value in ((256, 60000), (257, 60000)):
        bad = tmp_path / f"huge{code}.dng"
        bad.write_bytes(_patch_entry(content, code, value))
        with pytest.raises(RawrclError, match=r"corrupt header"):
            read_raw(bad)
    wide = tmp_path / "wide.dng"  # 64 columns more than the strip holds
    wide.write_bytes(_patch_entry(content, 256, 160))
    with pytest.raises(RawrclError, match=r"wide\.dng: corrupt header: .*uncompressed"):
        read_raw(wide)
    assert read_raw(good).cfa.shape == (64, 96)


def test_libraw_messages_become_part_of_the_one_line_error(dc50, tmp_path):
    """LibRaw prints "<file>: Unexpected end of file" on the C stderr; rawrcl folds it into its message."""
    cut = tmp_path / "cut.kdc"
    cut.write_bytes(dc50.read_bytes()[:60000])
    proc = _subprocess_cli("info", cut)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "cut.kdc: unreadable or truncated" in lines[0], lines


def test_unique_camera_model_names_the_camera(tmp_path):
    path = _dng(tmp_path / "u.dng", make="", model="", unique_camera_model="Acme Sensor 9")
    content = path.read_bytes()  # write_dng writes "unknown" for an empty make: drop Make and Model
    for code in (271, 272):
        at = content.find(struct.pack("<HH", code, 2))
        content = content[:at] + struct.pack("<H", 65000 + code - 271) + content[at + 2 :]
    path.write_bytes(content)
    tags = read_dng_tags(path)
    assert "make" not in tags and tags["unique_camera_model"] == "Acme Sensor 9"
    res = _cli("info", path)
    assert res.exit_code == 0 and "camera        Acme Sensor 9" in res.stdout and "?" not in res.stdout


# --------------------------------------------------------------------------------- 2. NaN / Inf photos


def test_non_finite_float_tiff_is_refused(tmp_path):
    img = np.random.default_rng(0).random((64, 64, 3)).astype(np.float32)
    img[10:20, 10:20] = np.nan
    img[0, 0, 0] = np.inf
    src = tmp_path / "photos"
    src.mkdir()
    tifffile.imwrite(src / "nan.tiff", img, photometric="rgb")
    with pytest.raises(RawrclError, match=r"nan\.tiff: 301 pixel values are NaN or infinite"):
        read_photo(src / "nan.tiff")
    ckpt = tmp_path / "rgb.pt"
    tiny = {"arch": "unet", "in_channels": 3, "head": "rgb", "width": 4, "depth": 1}
    save_checkpoint(ckpt, build_model(tiny))
    out = tmp_path / "den.png"
    res = _cli("denoise", src / "nan.tiff", "-o", out, "--rgb-model", ckpt, "-q")
    assert res.exit_code == 1 and not out.exists()
    assert "nan.tiff: 301 pixel values are NaN" in res.stderr and "Traceback" not in res.output
    res = _cli("simulate", src, tmp_path / "sim")
    assert res.exit_code == 1 and "NaN" in res.stderr and not (tmp_path / "sim" / "nan.dng").exists()
    manifest = json.loads((tmp_path / "sim" / "manifest.json").read_text())
    assert manifest["files"] == [] and "NaN" in manifest["failed"][0]["error"]


# ------------------------------------------------------------------------------ 4. unwritable cache


def test_unwritable_cache_falls_back_to_memory_with_one_warning(tmp_path):
    raws = tmp_path / "raws"
    raws.mkdir()
    for k in range(3):
        _dng(raws / f"r{k}.dng", seed=k)
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the cache folder should be")
    with pytest.warns(UserWarning) as record:
        ds = RawFolderDataset(raws, crop=32, cache_dir=blocker / "rawrcl")
    assert len(ds) == 3 and not ds.skipped
    assert len(record) == 1 and "continuing without it" in str(record[0].message)
    assert np.array_equal(load_packed_raw(raws / "r0.dng"), ds.images[0])


def test_pretrain_cli_with_unwritable_cache_home(tmp_path, monkeypatch):
    raws = tmp_path / "raws"
    raws.mkdir()
    for k in range(2):
        _dng(raws / f"r{k}.dng", seed=k)
    (tmp_path / "cachefile").write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cachefile"))
    args = ["pretrain", raws, "--out", tmp_path / "run", "--task", "raw-denoise", "--method", "n2s"]
    res = _cli(*args, "--steps", "1", "--batch-size", "2", "--crop", "32", "--width", "4", "--depth", "1")
    assert res.exit_code == 0, res.output
    assert len(_errors(res)) == 1 and "warning: " in _errors(res)[0], _errors(res)
    assert "cannot use the RAW cache" in _errors(res)[0]


# ------------------------------------------------------------------------------------ 5. disk full


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes then fail with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _hidden(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".*") if p.is_file()]


def test_disk_full_during_simulate_is_one_line_and_leaves_nothing_half_written(photo_dir, tmp_path):
    out = tmp_path / "sim"
    proc = _subprocess_cli("simulate", photo_dir, out, "--save-clean", preexec_fn=_file_size_limit(30_000))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write" in lines[0] and "nothing was written" in lines[0], lines
    assert not _hidden(out)
    assert not list(out.rglob("*.dng")) and not list(out.rglob("*.tiff"))  # no photo half done


def test_disk_full_during_pretrain_is_one_line_and_the_run_resumes(photo_dir, tmp_path):
    run = tmp_path / "run"
    args = ["pretrain", photo_dir, "--out", run, "--task", "denoise", "--steps", "2", "--batch-size", "2"]
    args += ["--crop", "32", "--width", "4", "--depth", "1", "--encoder", "none"]
    proc = _subprocess_cli(*args, preexec_fn=_file_size_limit(8_000))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "init.pt: cannot write" in lines[0] and "disk full" in lines[0], lines
    assert not _hidden(run) and not (run / "checkpoints" / "init.pt").exists()
    proc = _subprocess_cli(*args, "--resume")  # the space is back: the stuck run starts again
    assert proc.returncode == 0, proc.stderr
    assert "starting the run again" in proc.stderr
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=True)["extra"]["step"] == 2


# ------------------------------------------------------------------------------ 6. non-UTF-8 names


@pytest.fixture
def odd_dir(tmp_path) -> Path:
    """A folder in which a file name with the byte 0xFF (not UTF-8) can be created."""
    d = tmp_path / "odd"
    d.mkdir()
    try:
        probe = os.path.join(os.fsencode(d), b"probe\xff")
        open(probe, "wb").close()
        os.unlink(probe)
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses file names that are not UTF-8")
    return d


def test_file_names_that_are_not_utf8(odd_dir, photo_dir):
    raw = Path(os.fsdecode(os.path.join(os.fsencode(odd_dir), b"bad\xffname.dng")))
    _dng(raw, pattern="GRBG", noise_profile=(1e-3, 1e-5))
    img = read_raw(raw)
    assert img.pattern == "GRBG" and img.cfa.shape == (64, 96)
    photo = Path(os.fsdecode(os.path.join(os.fsencode(odd_dir), b"ph\xffoto.png")))
    photo.write_bytes((photo_dir / "coffee.png").read_bytes())
    assert read_photo(photo).shape == (3, 64, 96)  # cv2.imread crashed (SIGSEGV) on such a name
    # a real stdout with strict UTF-8 (not the surrogateescape of a C locale) must still print the name
    proc = _subprocess_cli("info", raw, env={"PYTHONIOENCODING": "utf-8"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert os.fsencode(raw) in proc.stdout.encode("utf-8", "surrogateescape")
    for cmd in (["info", "--json", raw], ["calibrate", raw], ["jdd", raw, "-o", odd_dir / "out", "-q"]):
        res = _cli(*cmd)
        assert res.exit_code == 0, (cmd, res.output)
    assert read_photo(next((odd_dir / "out").iterdir())).shape == (3, 64, 96)


# ------------------------------------------------------------------ smaller items of the issue


def test_sigkilled_writer_leaves_a_temporary_that_the_next_write_removes(tmp_path):
    target = tmp_path / "out" / "result.bin"
    script = (
        "import sys, time\nfrom rawrcl.io import atomic_path\n"
        f"with atomic_path({str(target)!r}) as tmp:\n"
        "    tmp.write_bytes(b'x' * 1000); print(tmp, flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        tmp = Path(proc.stdout.readline().strip())
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert tmp.exists() and tmp.name.startswith(".result.bin.") and not target.exists()
    live = tmp.parent / tmp.name.replace(f".{proc.pid}.", f".{os.getpid()}.")
    live.write_bytes(b"a write of this (live) process")
    check = "from rawrcl.io import atomic_write_text; import sys; atomic_write_text(sys.argv[1], 'new')"
    subprocess.run([sys.executable, "-c", check, str(tmp_path / "out" / "other.txt")], check=True)
    assert not tmp.exists()  # the killed writer's temporary is gone
    assert live.exists()  # a live process's is kept
    assert (tmp_path / "out" / "other.txt").read_text() == "new"


def test_atomic_write_errors_are_one_line_and_name_the_target(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RawrclError, match=r"file/sub/out\.txt: cannot write \(.*\); nothing was written"):
        atomic_write_text(tmp_path / "file" / "sub" / "out.txt", "data")
    target = tmp_path / "t.bin"
    target.write_text("old")
    with pytest.raises(RawrclError, match="t.bin: cannot write .*disk full"), atomic_path(target) as tmp:
        tmp.write_text("partial")
        raise OSError(f"{2**20} requested and 512 written")  # what numpy/tifffile raise on a full disk
    assert target.read_text() == "old" and not _hidden(tmp_path)


def test_rejected_checkpoint_message_is_one_line_without_unsafe_advice(tmp_path):
    evil = tmp_path / "evil.pt"
    torch.save({"config": {}, "state_dict": {}, "extra": {"x": os.system}}, evil)
    with pytest.raises(RawrclError) as info:
        read_checkpoint(evil)
    msg = str(info.value)
    assert "\n" not in msg and "weights_only" not in msg and "posix.system" in msg
    res = _cli("jdd", evil, "-o", tmp_path / "o", "--model", evil)
    assert res.exit_code == 1 and len(_errors(res)) == 1 and "weights_only" not in res.stderr


def test_negative_tile_is_reported_as_given(tmp_path):
    raw = _dng(tmp_path / "r.dng")
    res = _cli("jdd", raw, "-o", tmp_path / "o.tiff", "--tile", "-5")
    assert res.exit_code == 1 and "--tile must be ≥ 1, got -5" in res.stderr


@pytest.mark.parametrize(
    "option, message", [(["--width", "0"], "--width and --depth"), (["--lr", "nan"], "--lr must be a finite")]
)
def test_pretrain_bad_numbers_are_one_line(photo_dir, tmp_path, option, message):
    args = ["pretrain", photo_dir, "--out", tmp_path / "r", "--task", "denoise", "--steps", "1"]
    res = _cli(*args, "--crop", "32", "--encoder", "none", *option)
    assert res.exit_code == 1 and message in res.stderr and len(_errors(res)) == 1, res.output
    assert not (tmp_path / "r" / "checkpoints").exists()


def _memory_limit(nbytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))

    return apply


def test_pretrain_crop_larger_than_the_photos(photo_dir, tmp_path):
    # this once grew past 16 GB: run it in a child capped at 3 GB of address space
    args = ["pretrain", photo_dir, "--out", tmp_path / "r", "--task", "denoise", "--crop", "5000"]
    proc = _subprocess_cli(*args, "--encoder", "none", preexec_fn=_memory_limit(3 << 30))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "no image is large enough for --crop 5000 (the largest is 128×96)" in lines[0]
    # mixed sizes: the small ones are skipped with one warning, memory stays bounded by batch × crop²
    args = ["pretrain", photo_dir, "--out", tmp_path / "r2", "--task", "denoise", "--crop", "90"]
    args += ["--steps", "1", "--batch-size", "2", "--width", "4", "--depth", "1", "--encoder", "none"]
    res = _cli(*args)
    assert res.exit_code == 0, res.output
    warned = [ln for ln in _errors(res) if "warning" in ln]
    assert len(warned) == 1 and "skipped 2 image(s) smaller than --crop 90" in warned[0]
    files = json.loads((tmp_path / "r2" / "config.json").read_text())["data"]["files"]
    assert files == ["astronaut.png"]


def test_simulate_rerun_with_another_seed_keeps_a_truthful_manifest(photo_dir, tmp_path):
    out = tmp_path / "sim"
    assert _cli("simulate", photo_dir, out, "--sampler", "low").exit_code == 0
    before = (out / "coffee.dng").read_bytes()
    res = _cli("simulate", photo_dir, out, "--sampler", "low", "--seed", "5")
    assert res.exit_code == 0 and (out / "coffee.dng").read_bytes() == before
    assert "made with other settings: seed 0 (not 5)" in res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["seed"] == 0  # what the files were made with, not the new --seed
    assert all(e["settings"]["seed"] == 0 and e["seed"][0] == 0 for e in manifest["files"])
    res = _cli("simulate", photo_dir, out, "--sampler", "low", "--seed", "5", "--force")
    manifest = json.loads((out / "manifest.json").read_text())
    assert res.exit_code == 0 and manifest["settings"]["seed"] == 5 and "mixed" not in manifest["settings"]


def test_read_dng_tags_stays_quiet_on_malformed_files(tmp_path, capfd):
    good = _dng(tmp_path / "g.dng")
    bad = tmp_path / "b.dng"
    bad.write_bytes(_patch_entry(good.read_bytes(), 273, 10**9))  # StripOffsets far beyond the file
    assert "data_problem" in read_dng_tags(bad)
    with pytest.raises(RawrclError):
        read_raw(bad)
    time.sleep(0.01)
    assert capfd.readouterr().err == ""


def test_fuzz_findings_tiff_photos_with_corrupt_sizes(tmp_path):
    """Found by benchmarks/fuzz.py: a TIFF photo declaring more rows than it holds was decoded (OpenCV padded
    it) and `simulate` then wrote a 65535-row DNG that LibRaw cannot read; a width of 0 or 2^31 raised
    cv2.error (a traceback)."""
    good = tmp_path / "p.tiff"
    tifffile.imwrite(good, np.full((64, 64, 3), 30000, np.uint16), photometric="rgb", metadata=None)
    for code, value, reason in (
        (257, 65535, "uncompressed"),
        (256, 0, "cannot decode"),
        (256, 2**31, "corrupt"),
    ):
        bad = tmp_path / f"bad{code}_{value}.tiff"
        bad.write_bytes(_patch_entry(good.read_bytes(), code, value))
        with pytest.raises(RawrclError, match=reason):
            read_photo(bad)
    assert read_photo(good).shape == (3, 64, 64)
    with pytest.raises(RawrclError, match="22 ≤ H, W ≤ 64000"):
        write_dng(tmp_path / "long.dng", np.zeros((64, 64001), np.uint16), "RGGB", 0, 4095)


def test_fuzz_findings_absurd_tile_size(tmp_path):
    """Found by benchmarks/fuzz.py: a tiled DNG whose TileWidth was set to 32767 made LibRaw allocate far
    beyond the file (refused only by the fuzzer's memory cap); the tile size is now checked as well."""
    tiled = tmp_path / "tiled.dng"
    cfa = np.random.default_rng(0).integers(600, 4000, size=(96, 96)).astype(np.uint16)
    tags = [(33421, "H", 2, (2, 2), True), (33422, "B", 4, (0, 1, 1, 2), True)]
    tags += [(50706, "B", 4, (1, 4, 0, 0), True), (50717, "I", 1, 4095, True)]
    tifffile.imwrite(tiled, cfa, photometric=32803, tile=(32, 32), extratags=tags, metadata=None)
    assert read_raw(tiled).cfa.shape == (96, 96)
    wide = tmp_path / "wide_tiles.dng"
    wide.write_bytes(_patch_entry(tiled.read_bytes(), 322, 32767))  # TileWidth
    with pytest.raises(RawrclError, match=r"32767×32 uncompressed tiles"):
        read_raw(wide)


def test_fuzz_findings_empty_cfa_repeat_pattern_dim(tmp_path):
    """Found by benchmarks/fuzz.py (5000 mutants, seed 2): a CFARepeatPatternDim tag with no values raised
    IndexError while building the refusal message."""
    good = _dng(tmp_path / "g.dng")
    content = good.read_bytes()
    at = content.find(struct.pack("<HHI", 33421, 3, 2))  # CFARepeatPatternDim: SHORT, count 2
    bad = tmp_path / "b.dng"
    bad.write_bytes(content[: at + 4] + struct.pack("<I", 0) + content[at + 8 :])  # count 0
    with pytest.raises(RawrclError, match=r"b\.dng: CFA repeat pattern \(empty\)"):
        read_raw(bad)


# --------------------------------------------------------------------------- stop 48 audit: noise tags, NaN


def _dng_with_profile(path, s, o) -> Path:
    """A DNG whose NoiseProfile is (s, o), written past write_dng's own checks (bytes patched)."""
    _dng(path, noise_profile=(1e-3, 1e-5))
    content = Path(path).read_bytes()
    at = content.find(struct.pack("<dd", 1e-3, 1e-5))
    assert at >= 0
    Path(path).write_bytes(content[:at] + struct.pack("<dd", s, o) + content[at + 16 :])
    return Path(path)


@pytest.mark.parametrize("s, o", [(1e6, 1e6), (-4e-3, 2e-4), (5.0, 1e-5), (0.0, 0.0), (1e-12, 1e-14)])
def test_absurd_or_negative_noise_profile_is_no_profile(tmp_path, s, o):
    p = _dng_with_profile(tmp_path / "bad.dng", s, o)
    assert read_raw(p).noise_profile is None
    assert read_dng_tags(p)["noise_profile_invalid"] == [s, o]


def test_a_profile_of_no_noise_is_ignored_and_said_so(tmp_path):
    """A NoiseProfile of zeros (stop 100's sweep: `rawrcl denoise` then told the model "no noise" and returned
    its input unchanged) is not used: `auto` takes the image estimate and says the profile was ignored,
    `metadata` refuses naming why, `calibrate --method metadata` notes it; the quietest real profiles stay."""
    from rawrcl.calibration.api import calibrate_file
    from rawrcl.calibration.resolve import file_noise

    p = _dng_with_profile(tmp_path / "zero.dng", 0.0, 0.0)
    raw = read_raw(p)
    got = file_noise(raw, "auto", path=p)
    assert got.source == "image" and got.profile_ignored
    assert min(got.model.lambda_shot) + min(got.model.lambda_read) > 0
    assert "(its NoiseProfile is implausible: ignored)" in got.describe(p.name, asked="auto")
    with pytest.raises(RawrclError, match="implausible DNG NoiseProfile"):
        file_noise(raw, "metadata", path=p)
    assert "implausible: not used" in calibrate_file(p, "metadata").extra["note"]
    quiet = _dng_with_profile(tmp_path / "quiet.dng", 1e-5, 1e-7)  # a base-ISO medium-format sensor's order
    assert read_raw(quiet).noise_profile == [(1e-5, 1e-7)]
    assert file_noise(read_raw(quiet), "auto", path=quiet).source == "metadata"


def test_calibrate_errors_of_the_fit_name_the_file(tmp_path):
    """The line fit's own refusals did not know the file: with several files, which one failed was unclear."""
    from rawrcl.calibration.api import calibrate_file

    black = tmp_path / "black.dng"
    write_dng(black, np.full((256, 384), 512, dtype=np.uint16), "RGGB", 512, 4095)
    with pytest.raises(RawrclError, match=r"^.*black\.dng: (not enough|too few) signal levels"):
        calibrate_file(black, "image")


def test_negative_profile_offset_is_read_and_written_clamped(tmp_path):
    from rawrcl.infer.writers import _profile_for_dng, write_denoised_dng

    raw = read_raw(_dng_with_profile(tmp_path / "neg.dng", 4e-3, -2e-4))
    assert raw.noise_profile == [(4e-3, -2e-4)]
    out = write_denoised_dng(tmp_path / "out.dng", raw, raw.cfa)
    assert read_raw(out).noise_profile == [(4e-3, 0.0)]
    per_position = [(1e-3, 1e-6), (2e-3, 2e-6), (4e-3, 4e-6), (3e-3, 3e-6)]  # GRBG: G R B G
    assert _profile_for_dng(per_position, "GRBG") == [(2e-3, 2e-6), (2e-3, 2e-6), (4e-3, 4e-6)]


def test_noise_pair_above_full_scale_is_refused():
    from rawrcl.noise.spec import PER_FILE, parse_noise

    with pytest.raises(RawrclError, match="not a camera's noise"):
        parse_noise("10,10", PER_FILE)
    assert parse_noise("4e-2,1e-3", PER_FILE).pair == (4e-2, 1e-3)


def test_non_finite_results_are_never_written(tmp_path):
    from rawrcl.infer.writers import requantize_cfa, write_image

    cfa = np.full((32, 32), 0.5, np.float32)
    cfa[3, 4] = np.nan
    with pytest.raises(RawrclError, match="non-finite"):
        requantize_cfa(cfa, "RGGB", (512,) * 4, 4095)
    with pytest.raises(RawrclError, match="non-finite"):
        write_image(tmp_path / "x.tiff", np.stack([cfa] * 3))
    assert not (tmp_path / "x.tiff").exists()


def test_hidden_files_in_input_folders_are_skipped(tmp_path):
    """macOS '._NAME' forks on memory cards and a killed writer's '.NAME.*' temporary are not inputs."""
    from rawrcl.infer.batch import expand_inputs
    from rawrcl.io import RAW_EXTENSIONS

    _dng(tmp_path / "a.dng")
    (tmp_path / "._a.dng").write_bytes(b"\0\5\26\7 AppleDouble")
    (tmp_path / ".b.dng.host.99999.abcd.dng").write_bytes(b"half a DNG")
    files, errors = expand_inputs([tmp_path], RAW_EXTENSIONS)
    assert [f.name for f in files] == ["a.dng"] and not errors


def test_format_that_contradicts_the_output_name_is_refused(tmp_path):
    src = _dng(tmp_path / "a.dng")
    res = _cli("denoise", src, "-o", tmp_path / "x.tiff", "--format", "dng")
    assert res.exit_code != 0 and "--format is dng" in res.output and not (tmp_path / "x.tiff").exists()
    res = _cli("jdd", src, "-o", tmp_path / "y.tiff", "--format", "png")
    assert res.exit_code != 0 and "--format is png" in res.output and not (tmp_path / "y.tiff").exists()


def test_eval_refuses_an_existing_json_before_any_work(tmp_path):
    (tmp_path / "r.json").write_text("{}")
    res = _cli("eval", "noisy", "--burst", tmp_path / "no-such-burst", "--json", tmp_path / "r.json")
    assert res.exit_code != 0 and "r.json: exists" in res.output  # not the burst's error: checked first


def test_float_dng_profile_is_not_used_in_libraw_units(tmp_path):
    """LibRaw turns floating-point CFA data into integers with a scale of its own: the file's NoiseProfile
    (relative to the float values) would be told ~10⁴× too small and denoise nothing; it is not used."""
    data = np.random.default_rng(0).uniform(0.05, 0.25, (64, 96)).astype(np.float32)
    profile = (51041, "d", 2, (4e-3, 2e-4), True)
    p = bare_cfa_dng(tmp_path / "float.dng", data, (50717, "I", 1, 1, True), profile)
    assert read_dng_tags(p)["sample_format"] == 3
    raw = read_raw(p)
    assert raw.noise_profile is None and raw.cfa.shape == (64, 96)


def test_white_level_zero_tag_is_ignored_not_fatal(tmp_path):
    """WhiteLevel 0 (invalid): LibRaw reads the file with its own default; the tag no longer makes the noise
    profile's conversion fail (which refused the whole file)."""
    p = _dng(tmp_path / "w.dng", noise_profile=(1e-3, 1e-5))
    p.write_bytes(_patch_entry(p.read_bytes(), 50717, 0))
    assert "white_level" not in read_dng_tags(p)
    res = _cli("calibrate", p)
    assert res.exit_code == 0, res.output


def test_too_small_dng_says_so(tmp_path):
    p = bare_cfa_dng(tmp_path / "tiny.dng", np.full((15, 17), 900, np.uint16))
    with pytest.raises(RawrclError, match="17×15 px: too small"):
        read_raw(p)


@pytest.mark.parametrize("out", ["-", ""])
def test_output_dash_or_empty_is_refused(tmp_path, out, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = _cli("denoise", _dng(tmp_path / "a.dng"), "-o", out)
    assert res.exit_code != 0 and "nothing is written to stdout" in res.output
    assert not (tmp_path / "-").exists()
