"""File I/O: atomic writes, photos and the cache folder (:mod:`.files`), RAW reading (:mod:`.raw`), DNG
tags (:mod:`.tags`), DNG writing (:mod:`.dng`), TIFF structure checks (:mod:`.tiffcheck`)."""

from __future__ import annotations

from rawrcl.io.files import (
    PHOTO_EXTENSIONS,
    RAW_EXTENSIONS,
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    cache_root,
    captured_stderr,
    file_mode,
    folder_files,
    list_photos,
    load_images,
    read_photo,
    read_photo_depth,
    remove_stale_temporaries,
    write_error,
)

__all__ = [
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "cache_root",
    "captured_stderr",
    "file_mode",
    "folder_files",
    "list_photos",
    "load_images",
    "PHOTO_EXTENSIONS",
    "RAW_EXTENSIONS",
    "read_photo",
    "read_photo_depth",
    "remove_stale_temporaries",
    "write_error",
]
