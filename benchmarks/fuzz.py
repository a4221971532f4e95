"""Fuzz harness (issue 22): mutated RAW files and photos through rawrcl's read path, ``rawrcl info`` and a
tiled inference. Any crash or hang is a bug; refusals (rawrcl's one-line ``RawrclError``) are fine.

    python benchmarks/fuzz.py                          # 300 mutants, seed 0 (the CI budget)
    python benchmarks/fuzz.py --mutants 5000 --seed 1  # the larger run of docs/reliability.md
    python benchmarks/fuzz.py --save crashes/          # keep every crashing/hanging mutant

Seeds: DNGs made with :func:`rawrcl.io.dng.write_dng` (RGGB 64×96 with full metadata; GRBG 45×67 with
per-position black levels and a 3-plane noise profile), a tiled BGGR DNG (tifffile) and the same in lossless
JPEG tiles (as DNG converters write camera files; when imagecodecs has the encoder), the Kodak DC50 KDC
when ``../shared/data/raw/kodak_dc50.kdc`` (or ``--kdc``) exists, and photos: 8- and 16-bit PNG, 16-bit
and float32 TIFF.

Mutants: each picks a seed file and a region — ``header`` (everything outside the pixel data: TIFF IFDs and
tag values, PNG chunks other than IDAT) or ``pixels`` (the strips/tiles, the IDAT data) — and one operator:
bit flips, bytes set to extreme values, 16/32-bit words set to boundary values (0, 1, 2^15, 2^16 − 1,
2^31 − 1, 2^32 − 1, the file size …), a random TIFF tag entry's type/count/value rewritten, truncation,
a copied block, appended garbage, or (float TIFF pixels) NaN/Inf/huge float32 values. PNG chunks get their
CRC recomputed half of the time, so the decoder runs on the mutated data instead of rejecting the CRC.

Each mutant runs in a child forked from this process (modules and the shipped model are loaded once, here),
under an address-space cap (``RLIMIT_AS``: this process's size + ``--memory-cap-gb``) and a time cap:

- RAW mutants: :func:`rawrcl.io.tags.read_dng_tags`, :func:`rawrcl.io.raw.read_raw` (``clip=False``), the
  ``rawrcl info --json`` command in-process, and, when the file was accepted, a tiled inference
  (:func:`rawrcl.infer.denoise_cfa`, tile 32, overlap 8) with the shipped RAW denoiser
  (``load_for_task(None, "raw-denoise")``) on a ≤ 96×96 crop of the mosaic (2×2 tiles);
- photo mutants: :func:`rawrcl.io.read_photo_depth`, ``rawrcl simulate`` of the file (library call) and a
  tiled RGB inference (a small seeded U-Net) on a ≤ 48×48 crop.

Classification: **crash** = the child died from a signal, an exception other than ``RawrclError`` (a
traceback), or a non-finite value in an accepted image, its metadata (levels, white balance, colour
matrices, noise profile) or an inference output; **hang** = the time cap was hit; **refused** = every
stage that ran ended in ``RawrclError``; **accepted** = the file was read. Prints a Markdown table by
seed and region (and how many refusals were the memory cap stopping an allocation); the exit status is 1
when there is any crash or hang.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import struct
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_KDC = REPO.parent / "shared" / "data" / "raw" / "kodak_dc50.kdc"


# --------------------------------------------------------------------------------------------- seeds
@dataclass
class Seed:
    """A valid file to mutate: its bytes, kind ("raw" | "photo"), suffix and pixel-data byte ranges."""

    name: str
    kind: str
    suffix: str
    data: bytes
    pixels: list[tuple[int, int]]  # [start, end) byte ranges of pixel data
    is_float_tiff: bool = False
    ifd_entries: list[int] = field(default_factory=list)  # file offsets of TIFF IFD entries (12 bytes)

    def header_ranges(self) -> list[tuple[int, int]]:
        out, pos = [], 0
        for a, b in sorted(self.pixels):
            if a > pos:
                out.append((pos, a))
            pos = max(pos, b)
        if pos < len(self.data):
            out.append((pos, len(self.data)))
        return out


def _tiff_layout(path: Path) -> tuple[list[tuple[int, int]], list[int]]:
    """Pixel byte ranges and IFD-entry offsets of a little- or big-endian classic TIFF."""
    import tifffile

    ranges, entries = [], []
    with tifffile.TiffFile(path) as tif:
        pages = []
        for page in tif.pages:
            pages.append(page)
            pages.extend(getattr(page, "pages", None) or [])
        for page in pages:
            for o, c in zip(page.dataoffsets, page.databytecounts, strict=False):
                if c:
                    ranges.append((int(o), int(o) + int(c)))
            n_at = int(page.offset)
            data = path.read_bytes()
            fmt = "<H" if tif.byteorder == "<" else ">H"
            (n,) = struct.unpack_from(fmt, data, n_at)
            entries.extend(n_at + 2 + 12 * i for i in range(n))
    return ranges, entries


def _png_layout(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the IDAT chunks' data."""
    out, pos = [], 8
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        ctype = data[pos + 4 : pos + 8]
        if ctype == b"IDAT":
            out.append((pos + 8, pos + 8 + length))
        pos += 12 + length
    return out


def make_seeds(folder: Path, kdc: Path | None) -> list[Seed]:
    """Write the seed files into ``folder`` and describe them."""
    import cv2
    import tifffile
    from skimage import data as skdata

    from rawrcl.io.dng import write_dng

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(12345)
    seeds: list[Seed] = []

    def add_tiff(name: str, kind: str, path: Path, is_float: bool = False) -> None:
        ranges, entries = _tiff_layout(path)
        seeds.append(Seed(name, kind, path.suffix, path.read_bytes(), ranges, is_float, entries))

    cam = np.array([[0.65, -0.05, -0.08], [-0.8, 1.55, 0.25], [-0.15, 0.2, 0.7]])
    p = folder / "rggb.dng"
    write_dng(
        p,
        rng.integers(500, 4096, (64, 96)).astype(np.uint16),
        "RGGB",
        512,
        4095,
        wb=(2.0, 1.0, 1.6),
        color_matrix=cam,
        iso=400,
        exposure_time=0.01,
        noise_profile=(2e-3, 1e-5),
    )
    add_tiff("dng-rggb", "raw", p)
    p = folder / "grbg.dng"
    write_dng(
        p,
        rng.integers(0, 16384, (45, 67)).astype(np.uint16),
        "GRBG",
        (500, 510, 520, 530),
        16383,
        noise_profile=[(1e-3, 1e-6), (2e-3, 2e-6), (3e-3, 3e-6)],
    )
    add_tiff("dng-grbg", "raw", p)
    p = folder / "tiled.dng"
    tags = [(33421, "H", 2, (2, 2), True), (33422, "B", 4, (2, 1, 1, 0), True)]
    tags += [(50706, "B", 4, (1, 4, 0, 0), True), (50717, "I", 1, 4095, True)]
    tifffile.imwrite(
        p, rng.integers(0, 4096, (96, 96)).astype(np.uint16), photometric=32803, tile=(32, 32),
        extratags=tags, metadata=None,
    )  # fmt: skip
    add_tiff("dng-tiled", "raw", p)
    p = folder / "ljpeg.dng"  # tiles in lossless JPEG (Compression 7), as DNG converters write camera files
    try:
        tifffile.imwrite(
            p, rng.integers(0, 4096, (96, 96)).astype(np.uint16), photometric=32803, tile=(32, 32),
            extratags=tags, metadata=None, compression="jpeg",
            compressionargs={"lossless": True, "bitspersample": 16},
        )  # fmt: skip
        add_tiff("dng-ljpeg", "raw", p)
    except Exception:  # an imagecodecs without a lossless JPEG encoder: the seed is left out
        p.unlink(missing_ok=True)
    if kdc is not None and kdc.is_file():
        p = folder / "dc50.kdc"
        p.write_bytes(kdc.read_bytes())
        add_tiff("kdc", "raw", p)

    photo = skdata.astronaut()[100:164, 150:214]  # 64×64 RGB uint8
    for name, arr in (("png8", photo), ("png16", photo.astype(np.uint16) * 257)):
        p = folder / f"{name}.png"
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(arr[..., ::-1]))
        assert ok
        p.write_bytes(buf.tobytes())
        seeds.append(Seed(f"photo-{name}", "photo", ".png", p.read_bytes(), _png_layout(p.read_bytes())))
    p = folder / "tiff16.tiff"
    tifffile.imwrite(p, photo.astype(np.uint16) * 257, photometric="rgb", metadata=None)
    add_tiff("photo-tiff16", "photo", p)
    p = folder / "float.tiff"
    tifffile.imwrite(p, photo.astype(np.float32) / 255, photometric="rgb", metadata=None)
    add_tiff("photo-tiff-float", "photo", p, is_float=True)
    return seeds


# ------------------------------------------------------------------------------------------ mutation
_WORDS = [
    0,
    1,
    2,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
]
_FLOATS = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, -1.0, 65535.0]


def _pick(rng: np.random.Generator, ranges: list[tuple[int, int]]) -> int:
    sizes = np.array([b - a for a, b in ranges], dtype=np.float64)
    k = int(rng.choice(len(ranges), p=sizes / sizes.sum()))
    a, b = ranges[k]
    return int(rng.integers(a, b))


def mutate(seed: Seed, rng: np.random.Generator) -> tuple[bytes, str, str]:
    """One mutant of ``seed``: (bytes, region, operator)."""
    data = bytearray(seed.data)
    header = seed.header_ranges()
    region = "pixels" if seed.pixels and rng.random() < 0.5 else "header"
    ranges = seed.pixels if region == "pixels" else header
    ops = ["flip", "set", "word", "truncate", "copy", "append"]
    if region == "header" and seed.ifd_entries:
        ops += ["tag", "tag", "tag"]
    if region == "pixels" and seed.is_float_tiff:
        ops += ["float", "float"]
    op = str(rng.choice(ops))
    if op == "flip":
        for _ in range(int(rng.integers(1, 9))):
            data[_pick(rng, ranges)] ^= 1 << int(rng.integers(0, 8))
    elif op == "set":
        for _ in range(int(rng.integers(1, 9))):
            data[_pick(rng, ranges)] = int(rng.choice([0x00, 0xFF, 0x7F, 0x80]))
    elif op == "word":
        at = _pick(rng, ranges) & ~1
        width = 2 if rng.random() < 0.5 else 4
        value = int(rng.choice(_WORDS + [len(data), len(data) - 1, len(data) + 1]))
        endian = "<" if data[:2] == b"II" else ">"
        packed = struct.pack(
            endian + ("H" if width == 2 else "I"), value & (0xFFFF if width == 2 else 0xFFFFFFFF)
        )
        data[at : at + width] = packed[: max(0, min(width, len(data) - at))]
    elif op == "tag":
        at = int(rng.choice(seed.ifd_entries))
        endian = "<" if data[:2] == b"II" else ">"
        field_ = str(rng.choice(["type", "count", "value", "code"]))
        value = int(rng.choice(_WORDS + [len(data), len(data) + 1]))
        if field_ == "code":
            struct.pack_into(endian + "H", data, at, value & 0xFFFF)
        elif field_ == "type":
            struct.pack_into(endian + "H", data, at + 2, int(rng.integers(0, 20)))
        elif field_ == "count":
            struct.pack_into(endian + "I", data, at + 4, value & 0xFFFFFFFF)
        else:
            struct.pack_into(endian + "I", data, at + 8, value & 0xFFFFFFFF)
        op = f"tag-{field_}"
    elif op == "truncate":
        a, b = ranges[int(rng.integers(len(ranges)))]
        del data[int(rng.integers(a, b)) :]
    elif op == "copy":
        n = int(rng.integers(1, 257))
        src, dst = int(rng.integers(0, len(data))), _pick(rng, ranges)
        block = bytes(data[src : src + n])
        data[dst : dst + len(block)] = block
    elif op == "append":
        data += rng.integers(0, 256, int(rng.integers(1, 4097)), dtype=np.uint8).tobytes()
    elif op == "float":
        for _ in range(int(rng.integers(1, 33))):
            at = _pick(rng, ranges) & ~3
            data[at : at + 4] = np.float32(rng.choice(_FLOATS)).tobytes()[: len(data) - at]
    if seed.suffix == ".png" and rng.random() < 0.5:
        _fix_png_crcs(data)
        op += "+crc"
    return bytes(data), region, op


def _fix_png_crcs(data: bytearray) -> None:
    pos = 8
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        end = pos + 8 + length
        if end + 4 > len(data):
            return
        struct.pack_into(">I", data, end, zlib.crc32(bytes(data[pos + 4 : end])) & 0xFFFFFFFF)
        pos = end + 4


# ------------------------------------------------------------------------------------------ the work
class Models:
    """Loaded once in the parent, before any fork."""

    def __init__(self) -> None:
        import torch

        from rawrcl.models import build_model
        from rawrcl.models.loading import load_for_task

        torch.set_num_threads(1)
        from rawrcl.infer.noise import bind_noise
        from rawrcl.noise import NoiseModel

        # the shipped RAW denoiser is noise-aware: bound to a fixed level (the estimator is not under test)
        self.raw = bind_noise(load_for_task(None, "raw-denoise")[0], NoiseModel(4e-3, 3e-5))
        torch.manual_seed(0)
        self.rgb = build_model(
            {"arch": "unet", "in_channels": 3, "head": "rgb", "width": 8, "depth": 2}
        ).eval()
        from rawrcl.infer import TileOptions

        self.opts = TileOptions(tile=32, overlap=8, batch_tiles=2, device="cpu", precision="fp32")
        with torch.no_grad():  # warm-up: kernels initialised once, shared by the children
            self.raw(torch.zeros(1, 4, 32, 32))
            self.rgb(torch.zeros(1, 3, 32, 32))


class NonFinite(Exception):
    """An accepted file produced NaN/Inf."""


def _finite(name: str, a) -> None:
    a = np.asarray(a)
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise NonFinite(f"{name} holds {int((~np.isfinite(a)).sum())} non-finite values")


def _stage(stages: dict, name: str, fn):
    """Run one stage; a RawrclError is a refusal (recorded), anything else propagates (a crash)."""
    from rawrcl.errors import RawrclError

    try:
        out = fn()
    except RawrclError as exc:
        stages[name] = "refused: " + str(exc).splitlines()[0][-160:]
        return None
    stages[name] = "ok"
    return out


def _cli_info(path: Path) -> None:
    from rawrcl.cli import main

    from rawrcl.errors import RawrclError

    try:
        main(["info", "--json", str(path)], standalone_mode=False, prog_name="rawrcl")
    except SystemExit as exc:
        if exc.code not in (0, 1, None):
            raise RuntimeError(f"rawrcl info exited with {exc.code}") from None
        if exc.code == 1:
            raise RawrclError("rawrcl info: exit status 1") from None


def run_raw(path: Path, models: Models) -> dict:
    from rawrcl.infer import denoise_cfa
    from rawrcl.io.raw import raw_summary, read_raw
    from rawrcl.io.tags import read_dng_tags

    stages: dict = {}
    _stage(stages, "tags", lambda: read_dng_tags(path))
    img = _stage(stages, "read", lambda: read_raw(path, clip=False))
    _stage(stages, "info", lambda: _cli_info(path))
    if img is not None:
        _finite("the mosaic", img.cfa)
        summary = raw_summary(img)
        for key in ("black_level", "white_level", "wb", "xyz_to_cam", "noise_profile"):
            if summary[key] is not None:
                _finite(f"the {key}", np.asarray(summary[key], dtype=np.float64))
        _finite("the colour matrix", np.asarray(img.ccm if img.ccm is not None else 0.0, dtype=np.float64))
        json.dumps(summary)
        cfa = img.cfa[:96, :96]  # 48×48 packed: 2×2 tiles of 32
        out = _stage(stages, "infer", lambda: denoise_cfa(models.raw, cfa, img.pattern, models.opts))
        if out is not None:
            _finite("the denoised mosaic", out)
    return stages


def run_photo(path: Path, models: Models, work: Path) -> dict:
    import torch

    from rawrcl.infer import denoise_rgb
    from rawrcl.io import read_photo_depth
    from rawrcl.simulate import simulate_folder

    stages: dict = {}
    got = _stage(stages, "read", lambda: read_photo_depth(path))
    if got is not None:
        x, _ = got
        _finite("the photo", x)
        if x.min() < 0 or x.max() > 1:
            raise NonFinite(f"photo values outside [0, 1]: {x.min()}..{x.max()}")
        with torch.no_grad():
            out = _stage(stages, "infer", lambda: denoise_rgb(models.rgb, x[:, :48, :48], models.opts))
        if out is not None:
            _finite("the denoised photo", out)
    rep = _stage(stages, "simulate", lambda: simulate_folder(path, work / "sim", noise="low", progress=False))
    if rep is not None and rep.written:
        from rawrcl.io.raw import read_raw

        _finite("the simulated DNG", read_raw(work / "sim" / rep.written[0]["dng"]).cfa)
    return stages


INJECTED = ("exception", "signal", "hang", "nan")


def run_injected(what: str) -> dict:
    """Deliberate failures, to check that the harness classifies them (``--inject``)."""
    if what == "exception":
        raise ValueError("injected exception")
    if what == "signal":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "hang":
        time.sleep(3600)
    _finite("injected", np.array([np.nan], np.float32))
    return {}


# ---------------------------------------------------------------------------------------- the pool
@dataclass
class Job:
    index: int
    seed: str
    region: str
    op: str
    path: Path
    kind: str
    pid: int = 0
    fd: int = -1
    log: Path | None = None
    start: float = 0.0
    chunks: list[bytes] = field(default_factory=list)


def _child(job: Job, models: Models, mem_cap: int, work: Path, wfd: int) -> None:
    """In the forked child: caps, quiet output, the work, the result as JSON on ``wfd``; never returns."""
    code, t0 = 0, time.monotonic()
    try:
        resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))
        log = os.open(job.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)  # what the commands print (info's JSON) is not needed
        os.dup2(log, 2)  # what they report is kept: anything but rawrcl's own lines is "stray"
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives until os._exit
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        try:
            if job.kind == "raw":
                stages = run_raw(job.path, models)
            elif job.kind == "photo":
                stages = run_photo(job.path, models, work)
            else:
                stages = run_injected(job.kind)
            accepted = stages.get("read") == "ok"
            result = {"status": "accepted" if accepted else "refused", "stages": stages}
            result["seconds"] = time.monotonic() - t0
        except NonFinite as exc:
            result = {"status": "crash", "detail": f"non-finite output: {exc}"}
        except BaseException as exc:  # noqa: BLE001 - every other exception is a crash
            tb = traceback.format_exc().strip().splitlines()
            result = {
                "status": "crash",
                "detail": f"{type(exc).__name__}: {exc}"[:300],
                "traceback": tb[-12:],
            }
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(wfd, json.dumps(result, default=str).encode())
    except BaseException:  # noqa: BLE001
        code = 3
    finally:
        os._exit(code)


def run_pool(jobs: list[Job], models: Models, workers: int, time_cap: float, mem_cap: int, work: Path):
    """Run ``jobs`` in forked children, ``workers`` at a time; yields (job, result dict)."""
    pending = list(reversed(jobs))
    running: dict[int, Job] = {}
    while pending or running:
        while pending and len(running) < workers:
            job = pending.pop()
            job.log = job.path.with_suffix(job.path.suffix + ".log")
            rfd, wfd = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                _child(job, models, mem_cap, work / f"w{job.index}", wfd)
            os.close(wfd)
            job.pid, job.fd, job.start = pid, rfd, time.monotonic()
            running[rfd] = job
        ready, _, _ = select.select(list(running), [], [], 0.2)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                running[fd].chunks.append(chunk)
                continue
            job = running.pop(fd)
            os.close(fd)
            _, status = os.waitpid(job.pid, 0)
            yield job, _result(job, status)
        now = time.monotonic()
        for fd, job in list(running.items()):
            if now - job.start > time_cap:
                os.kill(job.pid, signal.SIGKILL)
                os.waitpid(job.pid, 0)
                os.close(fd)
                del running[fd]
                yield job, {"status": "hang", "detail": f"no result after {time_cap:.0f} s"}


def _result(job: Job, status: int) -> dict:
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return {"status": "crash", "detail": f"killed by {sig}", "log": _tail(job.log)}
    raw = b"".join(job.chunks)
    try:
        result = json.loads(raw.decode())
    except ValueError:
        return {
            "status": "crash",
            "detail": f"no result (exit status {os.WEXITSTATUS(status)})",
            "log": _tail(job.log),
        }
    result["stray_stderr"] = _stray(job.log)
    return result


def _tail(path: Path | None) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-8:] if path else []
    except OSError:
        return []


def _stray(path: Path | None) -> list[str]:
    """stderr lines other than rawrcl's own (``rawrcl: error: …``, ``rawrcl: warning: …``)."""
    return [ln.strip()[:160] for ln in _tail(path) if ln.strip() and not ln.startswith("rawrcl: ")]


# ---------------------------------------------------------------------------------------------- main
def _vm_size() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mutants", type=int, default=300, help="number of mutants (default 300, the CI budget)")
    ap.add_argument("--seed", type=int, default=0, help="mutant i is drawn from default_rng([seed, i])")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--time-cap", type=float, default=60.0, help="seconds per mutant before it is a hang")
    ap.add_argument("--memory-cap-gb", type=float, default=1.5, help="address space per mutant beyond ours")
    ap.add_argument("--kdc", type=Path, default=DEFAULT_KDC, help="a KDC to mutate too (skipped when absent)")
    ap.add_argument("--save", type=Path, default=None, help="copy crashing/hanging mutants here")
    ap.add_argument(
        "--inject", default="", help=f"comma-separated deliberate failures: {', '.join(INJECTED)}"
    )
    ap.add_argument("--json", type=Path, default=None, help="write every result to this JSON file")
    args = ap.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import rawrcl.cli.info  # noqa: F401  (imported once, in the parent)

    t0 = time.perf_counter()
    models = Models()
    mem_cap = _vm_size() + int(args.memory_cap_gb * 2**30)
    with tempfile.TemporaryDirectory(prefix="rawrcl-fuzz-") as tmp:
        work = Path(tmp)
        seeds = make_seeds(work / "seeds", args.kdc)
        jobs: list[Job] = []
        for i in range(args.mutants):
            rng = np.random.default_rng([args.seed, i])
            seed = seeds[int(rng.integers(len(seeds)))]
            data, region, op = mutate(seed, rng)
            path = work / f"m{i:05d}{seed.suffix}"
            path.write_bytes(data)
            jobs.append(Job(i, seed.name, region, op, path, seed.kind))
        for k, what in enumerate(w for w in args.inject.split(",") if w):
            if what not in INJECTED:
                ap.error(f"--inject {what!r}: expected one of {', '.join(INJECTED)}")
            jobs.append(Job(args.mutants + k, "injected", what, what, work / f"inj{k}.bin", what))
        results = []
        for job, res in run_pool(jobs, models, args.workers, args.time_cap, mem_cap, work):
            res.update(index=job.index, seed=job.seed, region=job.region, op=job.op)
            results.append(res)
            if res["status"] in ("crash", "hang") and args.save is not None and job.path.exists():
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / job.path.name).write_bytes(job.path.read_bytes())
            for p in (job.path, job.log):
                if p is not None and p.exists():
                    p.unlink()
    elapsed = time.perf_counter() - t0
    return report(results, args, elapsed, mem_cap, [s.name for s in seeds])


def report(results: list[dict], args, elapsed: float, mem_cap: int, seeds: list[str]) -> int:
    statuses = ("accepted", "refused", "crash", "hang")
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for r in results:
        row = rows.setdefault((r["seed"], r["region"]), dict.fromkeys(statuses, 0))
        row[r["status"]] += 1
    print(
        f"rawrcl fuzz: {len(results)} mutants, seed {args.seed}, {args.workers} workers, "
        f"caps {args.time_cap:g} s and {mem_cap / 2**30:.1f} GiB address space, {elapsed:.1f} s "
        f"({len(results) / max(elapsed, 1e-9):.1f} mutants/s); seeds: {', '.join(seeds)}\n"
    )
    print("| seed | region | mutants | accepted | refused | crash | hang |")
    print("|---|---|---:|---:|---:|---:|---:|")
    total = dict.fromkeys(statuses, 0)
    for (seed, region), row in sorted(rows.items()):
        n = sum(row.values())
        print(f"| {seed} | {region} | {n} | " + " | ".join(str(row[s]) for s in statuses) + " |")
        for s in statuses:
            total[s] += row[s]
    print(f"| **total** | | {len(results)} | " + " | ".join(str(total[s]) for s in statuses) + " |")
    stray = [r for r in results if r.get("stray_stderr")]
    if stray:
        print(f"\n{len(stray)} mutant(s) printed lines on stderr other than rawrcl's own, e.g.:")
        kinds: dict[str, int] = {}
        for r in stray:
            kinds.setdefault(r["stray_stderr"][0][:60], r["index"])
        for text, index in list(kinds.items())[:8]:
            print(f"    #{index}: {text}")
    bad = [r for r in results if r["status"] in ("crash", "hang")]
    for r in bad[:30]:
        what = f"{r['status'].upper()} #{r['index']} {r['seed']}/{r['region']}/{r['op']}"
        print(f"\n{what}: {r.get('detail', '')}")
        for line in r.get("traceback", [])[-6:] + r.get("log", [])[-4:]:
            print(f"    {line}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    oom = [r for r in results if "memory" in json.dumps(r.get("stages", {})).lower()]
    if oom:  # refused in one line, but only because the address-space cap stopped an allocation
        print(
            f"\n{len(oom)} refusal(s) came from running out of memory under the cap, e.g. #{oom[0]['index']}"
        )
    secs = sorted(r["seconds"] for r in results if "seconds" in r)
    if secs:
        print(f"\nper mutant: median {secs[len(secs) // 2]:.2f} s, max {secs[-1]:.2f} s (wall, in the child)")
    print(f"\ncrash {total['crash']}, hang {total['hang']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
