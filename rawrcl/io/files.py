"""File helpers shared by every module: atomic writes and photo reading.

Atomic writes: the data goes to a temporary file in the target's folder, which is then moved onto the
target with ``os.replace`` (atomic on POSIX and Windows), so a killed process never leaves a half-written
output. The temporary file is removed on failure; a write that fails (disk full, file-size limit,
read-only folder) raises :class:`RawrclError` naming the target. Temporary files are named
``.<name>.<host>.<pid>.<random><suffix>``, so those left by a process that was killed (SIGKILL) are
recognised and removed by the next atomic write into the same folder on the same host. Finished files get
the permissions a plain ``open()`` would give them (:func:`file_mode`). Whether an existing target may be
replaced is the caller's decision.

Photos: :func:`list_photos` / :func:`read_photo` give float32 RGB (3, H, W) in [0, 1] from 8/16-bit
PNG, JPEG, TIFF, BMP, WebP, PPM files (and float TIFFs, which must be finite).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError

PHOTO_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".ppm", ".pgm")

#: camera RAW file extensions LibRaw reads (lower case); everything that is not a photo extension is tried
#: as RAW when named explicitly, these are what folders are searched for
RAW_EXTENSIONS = frozenset(
    (
        ".dng .cr2 .cr3 .crw .nef .nrw .arw .srf .sr2 .raf .orf .rw2 .rwl .pef .ptx .srw .kdc .dcr .k25 .mrw"
        " .3fr .fff .iiq .mef .mos .erf .raw .x3f .gpr"
    ).split()
)

__all__ = [
    "PHOTO_EXTENSIONS",
    "RAW_EXTENSIONS",
    "read_photo_depth",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "cache_root",
    "file_mode",
    "list_photos",
    "captured_stderr",
    "read_photo",
    "write_error",
]


def file_mode() -> int:
    """Permission bits a normal ``open()`` would give a new file (0o666 minus the umask);
    ``tempfile.mkstemp`` creates 0o600 files, which the atomic writers fix with this."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _host_tag() -> str:
    """This machine's short host name, reduced to characters that are safe in a file name."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])[:32] or "host"


def _pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists on this machine (or cannot be probed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # exists but belongs to someone else, or cannot tell: keep its files
    return True


_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+(\.tmp.*)$")
_swept: set[str] = set()


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files that atomic writes of killed processes left in ``folder``: hidden
    ``.<name>.<host>.<pid>.<random>.tmp…`` files of this host whose process no longer exists. Returns them.
    """
    folder = Path(folder)
    host, removed = _host_tag(), []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP_NAME.match(entry.name)
        if m and m["host"] == host and int(m["pid"]) != os.getpid() and not _pid_alive(int(m["pid"])):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Capture what C libraries print on the process's stderr (fd 2) during the block — LibRaw's "Unexpected
    end of file", libpng's and OpenCV's decoder messages — so that rawrcl can keep its errors to one line.
    The returned list receives the captured lines when the block ends. Only in the main thread (fd 2 is
    shared by all threads); elsewhere nothing is captured."""
    lines: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield lines
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield lines
        return
    try:
        sink = tempfile.TemporaryFile()
    except OSError:
        os.close(saved)
        yield lines
        return
    with sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(ln for ln in sink.read(65536).decode("utf-8", "replace").splitlines() if ln.strip())


def write_error(path: str | os.PathLike, exc: BaseException) -> RawrclError:
    """A one-line :class:`RawrclError` for a failed write of ``path`` (disk full, file-size limit, no
    permission, …): the OS error's text, or the first line of the writer's message."""
    text = str(exc).strip()
    reason = getattr(exc, "strerror", None) or (text.splitlines()[0] if text else type(exc).__name__)
    code = getattr(exc, "errno", None)
    # writers that report a short write without an errno ("N requested and M written", torch's
    # "enforce fail") hit a full disk or a file-size limit
    full = code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or (code is None and "written" in text)
    full = full or "enforce fail" in text or "iostream error" in text
    hint = "; is the disk full?" if full and code not in (errno.ENOSPC, errno.EDQUOT) else ""
    return RawrclError(f"{path}: cannot write ({reason}{hint}); nothing was written")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp", *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` (parent folders created) to write to; on normal exit it gets
    :func:`file_mode` permissions (and is fsync'ed if ``fsync``) and is moved onto ``path``; on an exception
    it is removed. ``suffix`` matters for writers that pick the format from the name (e.g. ``".png"``;
    the temporary name ends with ``.tmp<suffix>``).

    An ``OSError`` while creating, writing or moving the file (disk full, file-size limit, read-only
    folder) becomes a one-line :class:`RawrclError` naming ``path`` (:func:`write_error`); the target is
    then untouched. The first atomic write into a folder removes the temporaries of killed processes
    (:func:`remove_stale_temporaries`).
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = str(path.parent.resolve())
        if folder not in _swept:
            _swept.add(folder)
            remove_stale_temporaries(path.parent)
        prefix = f".{path.name}.{_host_tag()}.{os.getpid()}."
        suffix = suffix if suffix.startswith(".tmp") else f".tmp{suffix}"
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
        os.close(fd)
        yield Path(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, exc) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def cache_root() -> Path:
    """rawrcl's cache folder: ``$RAWRCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/rawrcl``, else ``~/.cache/rawrcl``
    (not created here). Sub-folders: ``packed`` (decoded RAW files), ``onnx`` (on-the-fly exports)."""
    if os.environ.get("RAWRCL_CACHE_DIR"):
        return Path(os.environ["RAWRCL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rawrcl"


def folder_files(
    folder: str | os.PathLike, extensions: frozenset[str] | tuple[str, ...] | None = None
) -> list[Path]:
    """The files directly inside ``folder`` (not recursive), sorted by name, with a suffix in ``extensions``
    (lower case, with the dot; None: any). Hidden files are skipped: macOS ``._NAME`` resource forks on
    memory cards and the ``.NAME.*`` temporaries of an interrupted atomic write are not the user's files."""
    files = (f for f in Path(folder).iterdir() if f.is_file() and not f.name.startswith("."))
    return sorted(f for f in files if extensions is None or f.suffix.lower() in extensions)


def list_photos(src: str | os.PathLike) -> list[Path]:
    """Photos in ``src`` (a folder, non-recursive, sorted by name, hidden files skipped; or one photo file).

    Raises :class:`RawrclError` if ``src`` does not exist or holds no photo.
    """
    p = Path(src)
    if not p.exists():
        raise RawrclError(f"{p}: no such file or folder")
    if p.is_file():
        if p.suffix.lower() not in PHOTO_EXTENSIONS:
            raise RawrclError(f"{p}: not a photo (expected one of {', '.join(PHOTO_EXTENSIONS)})")
        return [p]
    files = folder_files(p, PHOTO_EXTENSIONS)
    if not files:
        raise RawrclError(f"{p}: no photos found (looked for {', '.join(PHOTO_EXTENSIONS)})")
    return files


def read_photo(path: str | os.PathLike, min_size: int = 1) -> np.ndarray:
    """Read an RGB photo as float32 (3, H, W) in [0, 1] (8- and 16-bit PNG/JPEG/TIFF/…; float files clipped).

    Grey images are replicated to 3 channels, alpha is dropped. Raises :class:`RawrclError` if the file
    cannot be decoded, holds NaN/Inf values (float files) or is smaller than ``min_size`` × ``min_size``.
    """
    return read_photo_depth(path, min_size)[0]


def read_photo_depth(path: str | os.PathLike, min_size: int = 1) -> tuple[np.ndarray, int]:
    """:func:`read_photo` and the file's bit depth: ((3, H, W) float32 in [0, 1], 8 or 16).

    The depth is 8 for 8-bit files and 16 otherwise (16-bit integer or float files), so writers can keep it.
    """
    import cv2

    p = Path(path)
    try:  # bytes + imdecode: cv2.imread cannot take every file name (one that is not UTF-8 crashes it)
        buf = np.fromfile(p, dtype=np.uint8)
    except OSError as exc:
        raise RawrclError(f"{p}: cannot open ({exc.strerror or exc})") from None
    if buf[:4].tobytes() in (b"II*\x00", b"MM\x00*"):  # TIFF: the declared strips must be in the file
        from rawrcl.io.tiffcheck import tiff_layout_problem

        problem = tiff_layout_problem(p)
        if problem is not None:
            raise RawrclError(f"{p}: {problem}")
    img = None
    with captured_stderr():  # decoder chatter (libpng, libtiff, OpenCV) would add lines to a one-line error
        try:
            img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED) if buf.size else None
        except cv2.error:  # e.g. a header declaring a zero or huge size
            img = None
    if img is None or img.size == 0:
        raise RawrclError(f"{p}: cannot decode the image (unreadable, truncated or not a photo)")
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    elif img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    else:
        img = img[..., :3][..., ::-1]  # BGR(A) → RGB
    bits = 8 if img.dtype == np.uint8 else 16
    if np.issubdtype(img.dtype, np.integer):
        x = img.astype(np.float32) / float(np.iinfo(img.dtype).max)
    else:
        bad = int(np.count_nonzero(~np.isfinite(img)))
        if bad:
            raise RawrclError(f"{p}: {bad} pixel values are NaN or infinite (a float image must be finite)")
        x = np.clip(img, 0.0, 1.0).astype(np.float32)
    if min(x.shape[:2]) < min_size:
        raise RawrclError(
            f"{p}: image of size {x.shape[0]}×{x.shape[1]} is too small (min {min_size}×{min_size})"
        )
    return np.ascontiguousarray(x.transpose(2, 0, 1)), bits


def load_images(
    source: str | os.PathLike | Sequence, limit: int | None = None
) -> list[tuple[str, np.ndarray]]:
    """Photos as ``[(name, (3, H, W) float32 [0, 1])]`` from a folder, a list of paths, or a list of
    arrays / (name, array) pairs (uint8 (H, W, 3) arrays are converted). Sorted by name for folders.

    The one home of "photos → (C, H, W)" for training, fine-tuning and the bench."""
    if isinstance(source, str | os.PathLike):
        files = list_photos(source)
        if limit is not None:
            files = files[:limit]
        return [(f.name, read_photo(f)) for f in files]
    out: list[tuple[str, np.ndarray]] = []
    for i, item in enumerate(source):
        if isinstance(item, str | os.PathLike):
            out.append((Path(item).name, read_photo(item)))
            continue
        name, arr = item if isinstance(item, tuple) else (f"image{i:03d}", item)
        a = np.asarray(arr)
        if a.dtype == np.uint8:
            a = a.astype(np.float32) / 255.0
        if a.ndim == 3 and a.shape[-1] == 3 and a.shape[0] != 3:
            a = a.transpose(2, 0, 1)
        out.append((str(name), np.ascontiguousarray(a, dtype=np.float32)))
    return out[:limit] if limit is not None else out
