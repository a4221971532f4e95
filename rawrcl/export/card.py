"""The model card (README.md) of an exported package: what the model is, how it was made, what it expects.

Facts come from the checkpoint itself — ``extra["provenance"]`` (shipped weights and
``scripts/train_default_weights.py``), other small JSON-able ``extra`` entries (e.g. what an adaptation
recorded), and the run directory's ``config.json`` when the checkpoint sits in ``RUN/checkpoints/``.
Nothing is invented: a fact the checkpoint does not hold is written as "not recorded".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rawrcl.export.build import averaged_stages

#: checkpoint ``extra`` keys that are training state, not provenance
_STATE_KEYS = {"optimizer", "rng", "scaler", "train_weights", "sampler", "world_size", "weights_dtype"}


def checkpoint_facts(checkpoint: str | os.PathLike | None) -> dict:
    """Provenance found in a checkpoint (and its run directory), as a JSON-able dict (may be empty)."""
    if checkpoint is None:
        return {}
    from rawrcl.models import read_checkpoint

    p = Path(checkpoint)
    ckpt = read_checkpoint(p)
    extra = ckpt.get("extra") or {}
    facts: dict = {}
    prov = extra.get("provenance")
    if isinstance(prov, dict):
        facts["provenance"] = _jsonable(prov)
    for k, v in extra.items():
        if k in _STATE_KEYS or k == "provenance":
            continue
        j = _jsonable(v)
        if j is not None and len(json.dumps(j)) < 4000:
            facts.setdefault("extra", {})[k] = j
    run_dir = p if p.is_dir() else (p.parent.parent if p.parent.name == "checkpoints" else None)
    if run_dir is not None and (run_dir / "config.json").is_file():
        try:
            facts["run_config"] = json.loads((run_dir / "config.json").read_text())
        except (OSError, json.JSONDecodeError):
            pass
    return facts


def _jsonable(v):
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return None  # tensors and other objects are not provenance


def _command_chain(prov: dict) -> list[str]:
    """Commands recorded in ``prov`` and in the provenance of the checkpoints it was initialised from."""
    chain: list[str] = []
    seen = 0
    while isinstance(prov, dict) and seen < 100:
        chain = [str(c) for c in prov.get("commands") or []] + chain
        init = prov.get("init")
        prov = init.get("provenance") if isinstance(init, dict) else None
        seen += 1
    return chain


def _data_lines(facts: dict) -> list[str]:
    prov = facts.get("provenance") or {}
    data = prov.get("data") or {}
    run = facts.get("run_config") or {}
    lines = []
    if data:
        lines.append(
            f"- dataset: {data.get('dataset', 'not recorded')} (source folder `{data.get('source', '?')}`)"
        )
        if isinstance(data.get("train_photos"), list):
            lines.append(
                f"- training photos: {len(data['train_photos'])}; "
                f"held out: {len(data.get('heldout_photos') or [])}"
            )
    elif isinstance(prov.get("train_photos"), list):  # the noise-aware recipe (scripts/train_noise_aware.py)
        sources = sorted({str(p).split("/")[0] for p in prov["train_photos"]})
        lines.append(
            f"- training photos: {len(prov['train_photos'])} ({', '.join(sources)}); "
            f"held out: {', '.join(map(str, prov.get('held_out') or [])) or 'not recorded'}"
        )
    if run:
        keys = ("task", "method", "data", "train_dir", "steps", "noise", "sampler", "seed")
        got = {k: run[k] for k in keys if k in run}
        if got:
            lines.append("- training run: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in got.items()))
    return lines or ["- not recorded in the checkpoint"]


def model_card(
    model_id: str,
    name: str,
    description: str,
    config: dict,
    head: str,
    tile: int,
    facts: dict,
    noise: dict | None,
    checkpoint_name: str | None,
    checkpoint_sha256: str | None,
    output_scale: str,
    jdd_passes: int = 1,
    first_passes: int = 1,
) -> str:
    """Markdown model card for ``README.md`` in the package (``jdd_passes`` / ``first_passes``: over how many
    orientations the graph averages a two-stage model's JDD stage / first stage)."""
    prov = facts.get("provenance") or {}
    extra = facts.get("extra") or {}
    adapted = {
        k: v for k, v in {**prov, **extra}.items() if k in ("camera", "iso", "adapt", "adapted_to", "files")
    }
    arch = ", ".join(
        f"{k} {config[k]}" for k in ("arch", "width", "depth", "skip", "demosaic") if k in config
    )
    wrapped = (
        "RAW denoiser (head `raw`) wrapped so that its packed output lands unchanged on each pixel's own CFA "
        "site of the 2× RGB output (a bilinear demosaic fills the two other colours, which darktable drops)"
        if head == "raw"
        else "joint demosaicing + denoising network (head `jdd`), exported as it is"
    )
    lines = [
        f"# {name}",
        "",
        f"`{model_id}` — {description}",
        "",
        "Exported by rawrcl (`rawrcl export --format darktable`) for darktable's neural restore → "
        "raw denoise, "
        "Bayer sensors only (no linear / X-Trans variant).",
        "",
        "## Model",
        f"- {wrapped}; {arch or 'architecture not recorded'}",
        f"- source checkpoint: `{checkpoint_name or 'in-memory model'}`"
        + (f", sha256 `{checkpoint_sha256}`" if checkpoint_sha256 else ""),
        "",
        "## ONNX graph (`model_bayer.onnx`, opset 20, static shapes)",
        "",
        "| tensor | name | shape | type | meaning |",
        "|---|---|---|---|---|",
        f"| input | `input` | [1, 4, {tile}, {tile}] | float32 | packed R, G1, G2, B (RGGB origin), "
        "(raw − black)/(white − black), "
        "not clipped, no white balance |",
        f"| output | `output` | [1, 3, {2 * tile}, {2 * tile}] | float32 | linear camera RGB in the "
        "input's units "
        "(no colour matrix) |",
        "",
        f"darktable settings (config.json → attributes.variants.bayer): input_kind bayer_v1, force_rggb, "
        f"mirror_cropped, wb_norm none, output_scale {output_scale}.",
        "",
        "## Noise",
    ]
    if noise:
        shot = ", ".join(f"{k} {v:.4g}" for k, v in noise["lambda_shot"].items())
        read = ", ".join(f"{k} {v:.4g}" for k, v in noise["lambda_read"].items())
        where = (
            f"profile `{noise.get('profile')}`, camera {noise.get('camera')!r}, ISO {noise.get('iso'):g}"
            + (" (interpolated between measured ISOs)" if noise.get("interpolated") else " (measured)")
            if noise.get("source") == "profile"
            else f"given as `--noise {noise.get('text')}`"
        )
        lines += [
            f"Noise-aware model with the camera's noise-level function baked in ({where}); variance = "
            "λshot·x + λread in [0, 1] units:",
            f"- λshot: {shot}",
            f"- λread: {read}",
            "",
            "Use it for files of that camera at that ISO; export one package per ISO.",
        ]
        if (averaged := averaged_stages(jdd_passes, first_passes)) is not None:
            lines += [
                "",
                f"At this noise {averaged} of the mosaic, as `rawrcl jdd` / `rawrcl denoise` run them: each "
                "tile takes longer (with four, about 4× the time of one pass in ONNX Runtime on a 2-thread "
                "CPU; `rawrcl export --one-pass` for one pass).",
            ]
    else:
        lines.append("Blind model (no noise input): one package serves every ISO the model was trained for.")
    lines += ["", "## Adapted to", ""]
    lines += [f"- {k}: {json.dumps(v)}" for k, v in adapted.items()] or [
        "- not recorded (not an adapted model)"
    ]
    lines += ["", "## Training data and provenance", ""] + _data_lines(facts)
    chain = _command_chain(prov)
    if chain:
        lines += ["", "Commands, first run first (from the checkpoint and its `--init` chain):", "", "```"]
        lines += chain + ["```"]
    if prov.get("date"):
        lines += ["", f"Trained: {prov['date']}"]
    lines += [
        "",
        "## License",
        "",
        "rawrcl is MIT-licensed. The weights' training data keep their own terms (check them before "
        "you publish "
        "this package).",
        "",
        "Full provenance as recorded: `rawrcl_export.json` beside this file.",
        "",
    ]
    return "\n".join(lines)
