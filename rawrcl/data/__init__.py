"""Training data: pair datasets over RAW (:mod:`.pairs`) and photo (:mod:`.photos`) folders, labelled crops
for fine-tuning (:mod:`.labelled`), the batch sampler (:mod:`.sampler`), the folders and RAW cache
(:mod:`.folders`), phase-correct augmentation (:mod:`.augment`)."""

from __future__ import annotations

from rawrcl.data.augment import augment_packed, dihedral
from rawrcl.data.folders import (
    default_cache_dir,
    file_key,
    find_files,
    folder_kind,
    load_packed_raw,
    resolve_cache_dir,
)
from rawrcl.data.labelled import LabelledCrops
from rawrcl.data.pairs import PairDataset, RawFolderDataset
from rawrcl.data.photos import PhotoFolderDataset
from rawrcl.data.sampler import Key, PairBatchSampler, make_loader

__all__ = [
    "augment_packed",
    "default_cache_dir",
    "dihedral",
    "file_key",
    "find_files",
    "folder_kind",
    "Key",
    "LabelledCrops",
    "load_packed_raw",
    "make_loader",
    "PairBatchSampler",
    "PairDataset",
    "PhotoFolderDataset",
    "RawFolderDataset",
    "resolve_cache_dir",
]
