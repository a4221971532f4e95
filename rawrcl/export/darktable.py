"""darktable 5.6 raw-denoise packages: ``<id>.dtmodel`` (zip of ``<id>/``) or the unpacked ``<id>/`` folder.

What darktable reads (sources and the exact points in docs/export.md):

- a model is a folder with ``config.json`` under darktable's models directory
  (``~/.local/share/darktable/models/<id>/``); ``id`` and ``name`` are required strings;
- a ``.dtmodel`` is a zip whose *first* entry's top-level folder is the model id (``<id>/``), extracted
  to ``models/<id>/``; the id must not contain ``/``, ``\\`` or be ``.``/``..``;
- the raw-denoise module loads the active model of task ``rawdenoise`` and for a Bayer sensor reads the
  dotted attribute paths ``variants.bayer.onnx`` (file name, required), ``variants.bayer.input_kind``
  (must be ``bayer_v1`` when present), ``…wb_norm``, ``…output_scale``, ``…bayer_orientation``,
  ``…edge_pad`` and the tile ladder ``input_sizes`` from the ``attributes`` object of ``config.json``.

rawrcl writes ``wb_norm: none`` (its models take camera RGB without white balance), ``output_scale:
absolute`` (its outputs are calibrated: ``match_gain`` would rescale every tile by mean(4 packed)/mean(3
RGB), ≠ 1 for true camera RGB), ``bayer_orientation: force_rggb`` and ``edge_pad: mirror_cropped``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from rawrcl.errors import RawrclError
from rawrcl.export.build import Prepared, export_prepared
from rawrcl.export.card import checkpoint_facts, model_card
from rawrcl.export.graph import file_sha256
from rawrcl.io import atomic_path

TASK = "rawdenoise"
ONNX_NAME = "model_bayer.onnx"
#: darktable's Bayer tile overlap in packed pixels (restore_raw_bayer.c OVERLAP_PACKED); tiles need T ≥ 4·O
OVERLAP_PACKED = 32
DEFAULT_TILE = 512
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def check_model_id(model_id: str) -> str:
    """A darktable model id: lowercase letters, digits, ``.``, ``_``, ``-`` (a folder name and a conf key)."""
    if not _ID.match(model_id or "") or model_id in (".", ".."):
        raise RawrclError(
            f"--id {model_id!r}: use lowercase letters, digits, '.', '_' and '-' (e.g. rawdenoise-mycam)"
        )
    return model_id


def bayer_variant(output_scale: str = "absolute") -> dict:
    """``attributes.variants.bayer`` of the manifest."""
    return {
        "onnx": ONNX_NAME,
        "input_kind": "bayer_v1",
        "bayer_orientation": "force_rggb",
        "edge_pad": "mirror_cropped",
        "wb_norm": "none",
        "output_scale": output_scale,
    }


def manifest(
    model_id: str,
    name: str,
    description: str,
    tile: int = DEFAULT_TILE,
    version: str = "1.0",
    arch: str = "unet",
) -> dict:
    """``config.json`` for darktable's loader (see module docstring).

    The variant block is also written at the top level (``variants``): darktable's AI tasks reference shows
    it there while the 5.6 code reads it from ``attributes``; the two copies are identical.
    """
    variant = {"bayer": bayer_variant()}
    return {
        "id": model_id,
        "name": name,
        "description": description,
        "task": TASK,
        "arch": arch,
        "backend": "onnx",
        "version": version,
        "tiling": True,
        "num_inputs": 1,
        "attributes": {"input_sizes": [tile], "variants": variant},
        "variants": variant,
    }


def write_package(
    prep: Prepared,
    out: str | os.PathLike,
    model_id: str,
    name: str | None = None,
    description: str | None = None,
    version: str = "1.0",
    tile: int = DEFAULT_TILE,
    checkpoint: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> dict:
    """Export ``prep`` (head ``jdd``, 4 input channels) as a darktable package at ``out``.

    ``out`` ending in ``.dtmodel`` → zip archive; anything else → a folder receiving ``<id>/`` (e.g.
    darktable's models directory). Refuses to overwrite unless ``overwrite``. Returns a summary dict
    (``path``, ``files``, ``config``, ``graph`` = :func:`rawrcl.export.graph.graph_info` + ``max_abs_diff``).
    """
    check_model_id(model_id)
    if prep.head != "jdd" or prep.in_channels != 4 or prep.noise_input:
        raise RawrclError("darktable packages need a packed-RAW → RGB graph with a single input")
    if tile < 4 * OVERLAP_PACKED or tile % max(prep.size_multiple, 8):
        raise RawrclError(
            f"--tile {tile}: darktable needs a tile ≥ {4 * OVERLAP_PACKED} "
            f"(4 × its {OVERLAP_PACKED}-pixel overlap) "
            f"and a multiple of {max(prep.size_multiple, 8)}"
        )
    out = Path(out)
    zipped = out.suffix.lower() == ".dtmodel"
    final = out if zipped else out / model_id
    if final.exists() and not overwrite:
        raise RawrclError(f"{final}: exists (use --force to overwrite)")
    name = name or model_id
    description = (
        description
        or f"rawrcl {'noise-aware ' if prep.noise else ''}raw denoiser ({prep.config.get('head')} head)"
    )
    cfg = manifest(model_id, name, description, tile, version, str(prep.config.get("arch", "unet")))
    facts = checkpoint_facts(checkpoint)
    sha = None
    if checkpoint is not None:
        p = Path(checkpoint)
        p = p / "checkpoints" / "last.pt" if p.is_dir() else p
        sha = file_sha256(p)
    noise = prep.noise.as_dict() if prep.noise else None
    with tempfile.TemporaryDirectory(prefix=".rawrcl-export-", dir=_existing_parent(final)) as tmp:
        root = Path(tmp) / model_id
        root.mkdir()
        graph = export_prepared(
            prep, root / ONNX_NAME, tile=tile, checkpoint=checkpoint, name=str(checkpoint or "model")
        )
        (root / "config.json").write_text(json.dumps(cfg, indent=4) + "\n")
        card = model_card(
            model_id,
            name,
            description,
            prep.config,
            prep.config.get("head", prep.head),
            tile,
            facts,
            noise,
            Path(checkpoint).name if checkpoint else None,
            sha,
            cfg["attributes"]["variants"]["bayer"]["output_scale"],
            prep.jdd_passes,
            prep.first_passes,
        )
        (root / "README.md").write_text(card)
        record = {
            "rawrcl_export": 1,
            "config": prep.config,
            "noise": noise,
            "jdd_passes": prep.jdd_passes,
            "first_passes": prep.first_passes,
            "checkpoint_sha256": sha,
            "facts": facts,
        }
        (root / "rawrcl_export.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        files = ["config.json", ONNX_NAME, "README.md", "rawrcl_export.json"]
        if zipped:
            with atomic_path(final, suffix=".tmp.dtmodel") as tmpzip:
                with zipfile.ZipFile(tmpzip, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                    zf.write(root, f"{model_id}/")  # first entry: the top-level folder = the model id
                    for f in files:
                        zf.write(root / f, f"{model_id}/{f}")
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            os.replace(root, final)
    return {"path": str(final), "files": [f"{model_id}/{f}" for f in files], "config": cfg, "graph": graph}


def _existing_parent(p: Path) -> Path:
    """``p``'s parent folder, created if needed (temporary files go beside the output)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    return p.parent
