"""``rawrcl export``: a checkpoint → ONNX graph or darktable raw-denoise package (:mod:`rawrcl.export`)."""

from __future__ import annotations

import click
from rawrcl.cli.common import user_errors

#: MODEL names that mean the shipped weights
DEFAULTS = {"default-jdd": "jdd", "default-raw-denoise": "raw-denoise"}


@click.command()
@click.argument("model", metavar="MODEL")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["onnx", "darktable"]),
    required=True,
    help="onnx: a .onnx graph; darktable: a .dtmodel package (or <id>/ folder) for darktable 5.6 "
    "raw denoise.",
)
@click.option(
    "-o",
    "--out",
    required=True,
    help="onnx: file.onnx. darktable: NAME.dtmodel (zip), or a folder that receives <id>/ (e.g. darktable's "
    "models directory).",
)
@click.option(
    "--tile",
    type=int,
    default=None,
    help="Static square input side in packed pixels (darktable: default 512). onnx: default dynamic shapes.",
)
@click.option(
    "--head",
    type=click.Choice(["jdd", "raw", "rgb"]),
    default=None,
    help="onnx only: output kind (default: the model's own head; 'jdd' wraps a RAW denoiser as denoise → "
    "bilinear demosaic, as darktable gets it).",
)
@click.option(
    "--noise",
    default=None,
    help="Noise-aware models: bake this NLF into the graph: 'λshot,λread' ([0, 1] units) or a rawrcl noise "
    "profile PROFILE.json[:ISO].",
)
@click.option("--iso", type=float, default=None, help="ISO to look up in the --noise profile.")
@click.option("--camera", default=None, help="'Make Model' in the --noise profile (when it holds several).")
@click.option("--id", "model_id", default=None, help="darktable model id (default rawdenoise-rawrcl-<name>).")
@click.option("--name", default=None, help="darktable display name.")
@click.option("--description", default=None, help="darktable description.")
@click.option("--version", "version", default="1.0", show_default=True, help="darktable model version (X.Y).")
@click.option(
    "--one-pass",
    is_flag=True,
    help="With --noise: one pass of each stage. By default a two-stage model's stages are averaged over "
    "the orientations the commands run for the baked noise (four at std at mid-grey ≤ 0.008, two at ≤ "
    "0.021, the first stage two up to 0.053): their output, at up to 4× the time per tile.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing output.")
@user_errors
def export(
    model, fmt, out, tile, head, noise, iso, camera, model_id, name, description, version, one_pass, force
):
    """Export MODEL (checkpoint, run directory, or default-jdd / default-raw-denoise for the shipped
    weights) to ONNX (opset 20) or to a darktable raw-denoise package; verified against torch. A run
    directory gives checkpoints/last.pt, or for a JDD export (darktable, --head jdd) its jdd.pt when it has
    one (rawrcl adapt --task jdd)."""
    import re
    from pathlib import Path

    from rawrcl.errors import RawrclError
    from rawrcl.export.build import averaged_stages, export_prepared, prepare
    from rawrcl.export.noise import baked_nlf
    from rawrcl.models import load_checkpoint
    from rawrcl.models.loading import adapted_fusion, default_weights_path, export_checkpoint

    if not re.fullmatch(r"\d+\.\d+", version):
        raise RawrclError(f"--version {version!r}: darktable compares model versions as X.Y (e.g. 1.0)")
    if model in DEFAULTS:
        ckpt = default_weights_path(DEFAULTS[model])
    else:
        ckpt = export_checkpoint(model, jdd=fmt == "darktable" or head == "jdd")
    if (iso is not None or camera) and noise is None:
        raise RawrclError("--iso/--camera need --noise PROFILE.json")
    spec = baked_nlf(noise, iso, camera) if noise is not None else None
    net, cfg = load_checkpoint(ckpt)
    fused = adapted_fusion(ckpt) if model not in DEFAULTS else 0.0
    if fused > 0:  # rawrcl denoise --model RUN averages GAT+BM3D in; a graph cannot
        click.echo(
            f"{ckpt}: its adapt run's GAT+BM3D weight {fused:g} is not exported (the graph holds the network "
            "alone; rawrcl denoise --model RUN applies it)",
            err=True,
        )
    if fmt == "onnx":
        target = Path(out)
        if target.suffix.lower() != ".onnx":
            raise RawrclError(f"-o {out}: --format onnx writes a .onnx file")
        if target.exists() and not force:
            raise RawrclError(f"{target}: exists (use --force to overwrite)")
        prep = prepare(
            net, cfg, head=head, noise=spec, allow_noise_input=True, name=str(ckpt), one_pass=one_pass
        )
        info = export_prepared(prep, target, tile=tile, checkpoint=ckpt, name=str(ckpt))
        path = target
    else:
        from rawrcl.export.darktable import DEFAULT_TILE, write_package

        if head not in (None, "jdd"):
            raise RawrclError("--head: darktable packages are always packed RAW → RGB (jdd)")
        prep = prepare(
            net, cfg, head="jdd", noise=spec, allow_noise_input=False, name=str(ckpt), one_pass=one_pass
        )
        p = Path(model).resolve()
        if model in DEFAULTS or p.is_dir():
            stem = model if model in DEFAULTS else p.name
        else:  # RUN/checkpoints/last.pt → RUN
            stem = p.parent.parent.name if p.parent.name == "checkpoints" else p.stem
        default_id = "rawdenoise-rawrcl-" + re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.")
        if spec is not None and spec.source.get("iso") is not None:
            default_id += f"-iso{spec.source['iso']:g}"
        summary = write_package(
            prep,
            out,
            model_id or default_id,
            name=name,
            description=description,
            version=version,
            tile=tile or DEFAULT_TILE,
            checkpoint=ckpt,
            overwrite=force,
        )
        info, path = summary["graph"], summary["path"]
    ins = ", ".join(f"{n} {d}" for n, d, _ in info["inputs"])
    outs = ", ".join(f"{n} {d}" for n, d, _ in info["outputs"])
    click.echo(f"{path}: opset {info['opset']}, {ins} → {outs}")
    click.echo(
        f"verified: ONNX Runtime vs torch max |diff| {info.get('max_abs_diff', float('nan')):.2e} (fp32)"
    )
    if (averaged := averaged_stages(prep.jdd_passes, prep.first_passes)) is not None:
        click.echo(
            f"{averaged}, as the commands run them at this noise: each tile takes longer (docs/export.md; "
            "--one-pass for one pass)"
        )
