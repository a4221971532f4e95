"""Training folders: which files they hold, and the cache of decoded RAW files.

Cache (RAW folders): each file is decoded once per process with :func:`rawrcl.io.raw.read_raw`, aligned to
RGGB (``rawrcl.cfa.align_rggb``), packed and stored as float16 (4, H/2, W/2). With ``cache_dir`` the array
is also written to ``<cache_dir>/<key>.npy`` and later memory-mapped; ``key`` = sha1 of (file size, mtime in
ns, sha1 of the first and last 64 KiB of the file), so a changed file is re-read. Without ``cache_dir``
arrays live in memory (shared copy-on-write with forked DataLoader workers). A cache folder that cannot be
written (read-only, full disk, not a folder) is not an error: one warning, and the arrays stay in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from pathlib import Path

import numpy as np

from rawrcl.cfa import align_rggb, pack
from rawrcl.errors import RawrclError
from rawrcl.io import PHOTO_EXTENSIONS, RAW_EXTENSIONS, atomic_path, cache_root, folder_files

log = logging.getLogger("rawrcl.data")


def find_files(root: str | os.PathLike, kind: str) -> list[Path]:
    """Files of ``kind`` ("raw" | "photo") directly inside ``root`` (not recursive, so a ``clean/``
    sub-folder written by ``rawrcl simulate`` is not mixed into the training data), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        raise RawrclError(f"{root}: not a directory")
    exts = RAW_EXTENSIONS if kind == "raw" else PHOTO_EXTENSIONS
    return folder_files(root, exts)


def folder_kind(root: str | os.PathLike) -> str:
    """ "raw", "photo" or "empty": what a data folder mostly holds (RAW files win)."""
    if find_files(root, "raw"):
        return "raw"
    if find_files(root, "photo"):
        return "photo"
    return "empty"


def file_key(path: str | os.PathLike) -> str:
    """Content key of a file: sha1 of (size, mtime_ns, sha1(first 64 KiB + last 64 KiB)), hex."""
    path = Path(path)
    st = path.stat()
    h = hashlib.sha1()
    with open(path, "rb") as fh:
        h.update(fh.read(65536))
        if st.st_size > 65536:
            fh.seek(max(st.st_size - 65536, 65536))
            h.update(fh.read(65536))
    return hashlib.sha1(f"{st.st_size}:{st.st_mtime_ns}:{h.hexdigest()}".encode()).hexdigest()


def default_cache_dir() -> Path:
    """Where decoded RAW files are cached by default: ``packed`` in :func:`rawrcl.io.cache_root`."""
    return cache_root() / "packed"


def resolve_cache_dir(cache_dir: str | os.PathLike | None) -> Path | None:
    """``"auto"`` → :func:`default_cache_dir`; ``None`` / ``"none"`` → no disk cache; else that folder."""
    if cache_dir is None or str(cache_dir) == "none":
        return None
    return default_cache_dir() if str(cache_dir) == "auto" else Path(cache_dir)


def load_packed_raw(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> np.ndarray:
    """Decode a RAW file to packed float16 (4, ceil(H'/2), ceil(W'/2)) in RGGB geometry, [0, 1] units.

    H', W' include the 0/1-pixel top/left reflection padding of :func:`rawrcl.cfa.align_rggb`. With
    ``cache_dir`` the result is cached as ``.npy`` (see module docstring) and returned memory-mapped.
    Raises :class:`RawrclError` for unreadable / non-Bayer files.
    """
    from rawrcl.io.raw import read_raw

    cache_file = None
    if cache_dir is not None and str(cache_dir) not in _unusable_caches:
        cache_file = Path(cache_dir) / f"{file_key(path)}.npy"
        if cache_file.is_file():
            try:
                return np.load(cache_file, mmap_mode="r")
            except (OSError, ValueError):
                pass  # corrupt or unreadable cache entry: decode again
    raw = read_raw(path)
    cfa, _ = align_rggb(np.asarray(raw.cfa, dtype=np.float32), raw.pattern)
    packed = pack(cfa, "RGGB").astype(np.float16)
    if cache_file is not None:
        try:
            with atomic_path(cache_file) as tmp, open(tmp, "wb") as fh:
                np.save(fh, packed)
            return np.load(cache_file, mmap_mode="r")
        except (RawrclError, OSError, ValueError) as exc:
            _unusable_caches.add(str(cache_dir))
            reason = str(exc).removeprefix(f"{cache_file}: ")
            warnings.warn(
                f"{cache_dir}: cannot use the RAW cache ({reason}); continuing without it", stacklevel=2
            )
    return packed


#: cache folders that failed once in this process (not tried again, warned about once)
_unusable_caches: set[str] = set()
