"""File helpers shared by every module: atomic writes and photo reading.

Atomic writes: the data goes to a temporary file in the target's folder, which is then moved onto the
target with ``os.replace`` (atomic on POSIX and Windows), so a killed process never leaves a half-written
output. The temporary file is removed on failure. Finished files get the permissions a plain ``open()``
would give them (:func:`file_mode`). Whether an existing target may be replaced is the caller's decision.

Photos: :func:`list_photos` / :func:`read_photo` give float32 RGB (3, H, W) in [0, 1] from 8/16-bit
PNG, JPEG, TIFF, BMP, WebP, PPM files.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError

PHOTO_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp", ".ppm", ".pgm")

__all__ = [
    "PHOTO_EXTENSIONS",
    "read_photo_depth",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "cache_root",
    "file_mode",
    "list_photos",
    "read_photo",
]


def file_mode() -> int:
    """Permission bits a normal ``open()`` would give a new file (0o666 minus the umask);
    ``tempfile.mkstemp`` creates 0o600 files, which the atomic writers fix with this."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp", *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` (parent folders created) to write to; on normal exit it gets
    :func:`file_mode` permissions (and is fsync'ed if ``fsync``) and is moved onto ``path``; on an exception
    it is removed. ``suffix`` matters for writers that pick the format from the name (e.g. ``".png"``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
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
    files = sorted(
        f for f in p.iterdir() if f.is_file() and f.suffix.lower() in PHOTO_EXTENSIONS and f.name[0] != "."
    )
    if not files:
        raise RawrclError(f"{p}: no photos found (looked for {', '.join(PHOTO_EXTENSIONS)})")
    return files


def read_photo(path: str | os.PathLike, min_size: int = 1) -> np.ndarray:
    """Read an RGB photo as float32 (3, H, W) in [0, 1] (8- and 16-bit PNG/JPEG/TIFF/…; float files clipped).

    Grey images are replicated to 3 channels, alpha is dropped. Raises :class:`RawrclError` if the file
    cannot be decoded or is smaller than ``min_size`` × ``min_size``.
    """
    return read_photo_depth(path, min_size)[0]


def read_photo_depth(path: str | os.PathLike, min_size: int = 1) -> tuple[np.ndarray, int]:
    """:func:`read_photo` and the file's bit depth: ((3, H, W) float32 in [0, 1], 8 or 16).

    The depth is 8 for 8-bit files and 16 otherwise (16-bit integer or float files), so writers can keep it.
    """
    import cv2

    p = Path(path)
    img = cv2.imread(str(p), cv2.IMREAD_UNCHANGED)
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
        x = np.clip(img.astype(np.float32), 0.0, 1.0)
    if min(x.shape[:2]) < min_size:
        raise RawrclError(
            f"{p}: image of size {x.shape[0]}×{x.shape[1]} is too small (min {min_size}×{min_size})"
        )
    return np.ascontiguousarray(x.transpose(2, 0, 1)), bits
