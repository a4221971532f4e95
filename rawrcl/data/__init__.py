"""Training data: pair datasets over RAW and photo folders, the batch sampler, the RAW cache."""

from __future__ import annotations

from rawrcl.data.pairs import (
    Key,
    PairBatchSampler,
    PairDataset,
    PhotoFolderDataset,
    RawFolderDataset,
    augment_packed,
    default_cache_dir,
    dihedral,
    file_key,
    find_files,
    folder_kind,
    load_packed_raw,
    make_loader,
    resolve_cache_dir,
)

__all__ = [
    "augment_packed",
    "default_cache_dir",
    "dihedral",
    "file_key",
    "find_files",
    "folder_kind",
    "Key",
    "load_packed_raw",
    "make_loader",
    "PairBatchSampler",
    "PairDataset",
    "PhotoFolderDataset",
    "RawFolderDataset",
    "resolve_cache_dir",
]
