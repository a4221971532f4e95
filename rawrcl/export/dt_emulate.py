"""darktable 5.6's Bayer raw-denoise path, re-implemented to test rawrcl packages without darktable.

Follows darktable-org/darktable ``src/common/ai_models.c`` (``.dtmodel`` install: the first zip entry's
top-level folder is the model id, ``..`` entries skipped), ``src/ai/backend_common.c`` (``config.json``
needs ``id`` and ``name``; attributes read by dotted path under ``attributes``), ``src/common/ai/restore.c``
(variant ``bayer``: ``variants.bayer.onnx`` required, ``input_kind`` must be ``bayer_v1`` when declared,
policy strings, ``input_sizes`` tile ladder) and ``src/common/ai/restore_raw_bayer.c`` +
``restore_common.h`` (the algorithm below). darktable cannot be installed here; docs/export.md lists each
point with its source.

Algorithm (:func:`restore_raw_bayer`), sensor coordinates, O = 32 packed pixels, T = the tile:

1. (y0, x0) = position of R in the 2×2 CFA; working region [y0, y0 + 2·Hh) × [x0, x0 + 2·Wh) with
   Hh = (H − y0) // 2, Wh = (W − x0) // 2; pixels outside keep their input value.
2. tiles step = T − 2·O packed pixels; tile (ty, tx) reads the 2T × 2T sensor block starting at
   (y0 + 2·(ty·step − O), x0 + 2·(tx·step − O)), indices mirrored (``mirror_cropped``: inside
   [y0, H'), H' − y0 even) — so a tile sees O packed pixels of context on each side;
3. packs it as [R, G1, G2, B] with (raw − black[site]) / (white − black[site]) · wb_norm[colour], runs the
   graph, applies ``match_gain`` (scalar mean(4 input planes) / mean(3 output planes)) unless
   ``output_scale`` is ``absolute``;
4. writes back each sensor pixel's *own colour* of the output, un-normalised to DN, over the tile's core
   extended by 2·O sensor pixels where a neighbour exists, with linear ramps (d + 0.5) / (4·O) across the
   4·O-pixel seams so that neighbouring weights sum to 1; ``strength`` blends with the input;
5. clips to [0, white] and rounds to uint16.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rawrcl.errors import RawrclError

OVERLAP_PACKED = 32
_COLOUR = {"R": 0, "G": 1, "B": 2}


def install_dtmodel(archive: str | os.PathLike, models_dir: str | os.PathLike) -> Path:
    """Extract a ``.dtmodel`` the way darktable does: model id = top folder of the *first* entry; entries
    containing ``..`` are skipped; the result must be ``models_dir/<id>/``. Returns that folder."""
    archive, models_dir = Path(archive), Path(models_dir)
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        if not names:
            raise RawrclError(f"{archive}: empty archive")
        model_id = names[0].split("/", 1)[0]
        if not model_id or "/" in model_id or "\\" in model_id or model_id in (".", ".."):
            raise RawrclError(f"{archive}: archive top-level directory is not a valid model id: {model_id!r}")
        with tempfile.TemporaryDirectory(dir=models_dir) as staging:
            for name in names:
                if ".." in name:
                    continue
                zf.extract(name, staging)
            staged = Path(staging) / model_id
            if not staged.is_dir():
                raise RawrclError(f"{archive}: archive top-level does not match model id {model_id!r}")
            final = models_dir / model_id
            staged.rename(final)
    return final


def _attribute(attrs: dict, key: str):
    node = attrs
    for seg in key.split("."):
        if not isinstance(node, dict) or seg not in node:
            return None
        node = node[seg]
    return node


@dataclass
class BayerVariant:
    """What darktable resolves from a package for a Bayer sensor."""

    model_dir: Path
    onnx: Path
    tile: int
    wb_norm: str
    output_scale: str
    bayer_orientation: str
    edge_pad: str
    config: dict


def load_bayer_variant(model_dir: str | os.PathLike, tile: int | None = None) -> BayerVariant:
    """Resolve the ``bayer`` variant of the model in ``model_dir`` with darktable's checks.

    Stricter than darktable in one respect: unknown policy strings raise instead of falling back to the
    default with a debug message (a package rawrcl writes must not rely on the fallback).
    """
    d = Path(model_dir)
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise RawrclError(f"{d}: no config.json (darktable does not discover this folder)")
    cfg = json.loads(cfg_path.read_text())
    for key in ("id", "name"):
        if not isinstance(cfg.get(key), str) or not cfg[key]:
            raise RawrclError(f"{cfg_path}: {key!r} missing (darktable skips the model)")
    if cfg.get("task") != "rawdenoise":
        raise RawrclError(f"{cfg_path}: task {cfg.get('task')!r}, the raw denoise module loads 'rawdenoise'")
    if cfg.get("backend", "onnx") != "onnx":
        raise RawrclError(f"{cfg_path}: backend {cfg.get('backend')!r} is not onnx")
    attrs = cfg.get("attributes") if isinstance(cfg.get("attributes"), dict) else {}
    onnx_name = _attribute(attrs, "variants.bayer.onnx")
    if not isinstance(onnx_name, str):
        raise RawrclError(f"{cfg_path}: declares no attributes.variants.bayer.onnx; darktable cannot load it")
    kind = _attribute(attrs, "variants.bayer.input_kind")
    if kind is not None and kind != "bayer_v1":
        raise RawrclError(f"{cfg_path}: input_kind {kind!r} does not match 'bayer_v1'; darktable refuses it")

    def policy(name: str, allowed: tuple[str, ...], default: str) -> str:
        v = _attribute(attrs, f"variants.bayer.{name}")
        if v is None:
            return default
        if v not in allowed:
            raise RawrclError(f"{cfg_path}: {name} {v!r} unknown (darktable would fall back to {default!r})")
        return v

    orientation = policy("bayer_orientation", ("force_rggb", "native"), "force_rggb")
    variant = BayerVariant(
        model_dir=d,
        onnx=d / onnx_name,
        tile=0,
        wb_norm=policy("wb_norm", ("daylight", "as_shot", "none"), "daylight"),
        output_scale=policy("output_scale", ("match_gain", "absolute"), "match_gain"),
        bayer_orientation=orientation,
        edge_pad=policy(
            "edge_pad",
            ("mirror_cropped", "mirror"),
            "mirror_cropped" if orientation == "force_rggb" else "mirror",
        ),
        config=cfg,
    )
    ladder = _attribute(attrs, "input_sizes")
    ladder = [int(t) for t in ladder] if isinstance(ladder, list) and ladder else [512, 384, 256, 192]
    variant.tile = int(tile if tile is not None else ladder[0])
    if variant.tile not in ladder:
        raise RawrclError(f"{cfg_path}: tile {variant.tile} is not in input_sizes {ladder}")
    if variant.tile < 4 * OVERLAP_PACKED:
        raise RawrclError(f"tile {variant.tile} < {4 * OVERLAP_PACKED}: darktable refuses it")
    if not variant.onnx.is_file():
        raise RawrclError(f"{variant.onnx}: declared ONNX file is missing")
    return variant


def _mirror(i: np.ndarray, n: int) -> np.ndarray:
    """darktable's periodic mirror (restore_common.h ``_mirror``), vectorised."""
    if n <= 1:
        return np.zeros_like(i)
    i = np.abs(i)
    period = 2 * (n - 1)
    i = i % period
    return np.where(i >= n, period - i, i)


def _seam(idx: np.ndarray, base: int, end: int, so: int, has_lo: bool, has_hi: bool) -> np.ndarray:
    """darktable's ``_seam_ax``/``_seam_ay``: ramp (d + 0.5) / (2·so) over [base − so, base + so) etc."""
    w = np.ones(idx.shape, np.float64)
    if has_lo:
        m = idx < base + so
        w[m] = (idx[m] - (base - so) + 0.5) / (2 * so)
    if has_hi:
        m = idx >= end - so
        w[m] = 1.0 - (idx[m] - (end - so) + 0.5) / (2 * so)
    return w


def restore_raw_bayer(
    variant: BayerVariant,
    run,
    cfa: np.ndarray,
    pattern: str,
    black: tuple[float, float, float, float],
    white: float,
    wb_coeffs: tuple[float, float, float] | None = None,
    strength: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """darktable's batch Bayer path on one frame.

    Parameters
    ----------
    run : callable (1, 4, T, T) float32 array → (1, 3, 2T, 2T) array (e.g. an ONNX Runtime session).
    cfa : (H, W) raw values in DN (float; the whole frame is the visible area), phase ``pattern``.
    black : per 2×2 position, row-major (DN); ``white`` in DN.
    wb_coeffs : as-shot (R, G, B) multipliers, only for ``wb_norm: as_shot``.

    Returns
    -------
    (dn, value, stats): ``dn`` (H, W) uint16 as darktable writes it; ``value`` (H, W) float64 before
    clipping/rounding, in DN; ``stats`` with ``tiles``, ``gains`` (per tile) and ``weight`` (H, W): the
    largest blend weight any tile gave the pixel (1 = one tile owns it, < 1 = a seam, 0 = outside the
    working region).
    """
    if variant.bayer_orientation != "force_rggb" or variant.edge_pad != "mirror_cropped":
        raise RawrclError("emulation covers force_rggb + mirror_cropped (darktable's bayer_v1 default) only")
    cfa = np.asarray(cfa, np.float64)
    H, W = cfa.shape
    pattern = pattern.upper()
    colour = np.array([_COLOUR[c] for c in pattern]).reshape(2, 2)
    y0, x0 = divmod(pattern.index("R"), 2)
    black_a = np.asarray(black, np.float64).reshape(2, 2)
    rng = np.where(white - black_a <= 0, 1.0, white - black_a)
    if variant.wb_norm == "none":
        wb = np.ones(3)
    elif variant.wb_norm == "as_shot" and wb_coeffs is not None:
        wb = np.array([wb_coeffs[0] / wb_coeffs[1], 1.0, wb_coeffs[2] / wb_coeffs[1]])
    else:
        raise RawrclError(f"emulation of wb_norm {variant.wb_norm!r} needs camera data it does not model")
    alpha = float(np.clip(strength, 0.0, 1.0))
    T, O = variant.tile, OVERLAP_PACKED
    so = 2 * O
    step = T - 2 * O
    Hh, Wh = (H - y0) // 2, (W - x0) // 2
    out = np.clip(cfa, 0, white)  # margins keep the (clipped) input
    value = cfa.copy()
    weight = np.zeros((H, W))
    stats: dict = {"tiles": 0, "gains": []}
    if Hh <= 0 or Wh <= 0:
        return np.floor(out + 0.5).astype(np.uint16), value, {**stats, "weight": weight}
    acc = np.zeros((H, W))
    wsum = np.zeros((H, W))
    lo_y, hi_y = y0, H - ((H - y0) & 1)
    lo_x, hi_x = x0, W - ((W - x0) & 1)
    rows, cols = -(-Hh // step), -(-Wh // step)
    for ty in range(rows):
        for tx in range(cols):
            py, px = ty * step, tx * step
            py_end, px_end = min(py + step, Hh), min(px + step, Wh)
            sr0, sc0 = y0 + 2 * (py - O), x0 + 2 * (px - O)
            r = lo_y + _mirror(sr0 + np.arange(2 * T) - lo_y, hi_y - lo_y)
            c = lo_x + _mirror(sc0 + np.arange(2 * T) - lo_x, hi_x - lo_x)
            block = cfa[np.ix_(r, c)]
            ri, ci = (r & 1)[:, None], (c & 1)[None, :]
            norm = (block - black_a[ri, ci]) / rng[ri, ci] * wb[colour[ri, ci]]
            tile_in = np.stack([norm[0::2, 0::2], norm[0::2, 1::2], norm[1::2, 0::2], norm[1::2, 1::2]])
            tile_in = tile_in[None].astype(np.float32)
            tile_out = np.asarray(run(tile_in), np.float32)[0]
            if tile_out.shape != (3, 2 * T, 2 * T):
                raise RawrclError(f"model output {tile_out.shape}, darktable expects (3, {2 * T}, {2 * T})")
            gain = 1.0
            if variant.output_scale == "match_gain":
                in_mean = float(tile_in.astype(np.float64).mean())
                out_mean = float(tile_out.astype(np.float64).mean())
                if abs(out_mean) > 1e-6 * abs(in_mean):
                    gain = in_mean / out_mean
                tile_out = tile_out * np.float32(gain)
            stats["gains"].append(gain)
            stats["tiles"] += 1
            sy_b, sy_e, sx_b, sx_e = y0 + 2 * py, y0 + 2 * py_end, x0 + 2 * px, x0 + 2 * px_end
            has_t, has_b, has_l, has_r = ty > 0, ty < rows - 1, tx > 0, tx < cols - 1
            ey0, ey1 = max(0, sy_b - so if has_t else sy_b), min(H, sy_e + so if has_b else sy_e)
            ex0, ex1 = max(0, sx_b - so if has_l else sx_b), min(W, sx_e + so if has_r else sx_e)
            sr, sc = np.arange(ey0, ey1), np.arange(ex0, ex1)
            ay = _seam(sr, sy_b, sy_e, so, has_t, has_b)
            ax = _seam(sc, sx_b, sx_e, so, has_l, has_r)
            my, mx = sr - sr0, sc - sc0
            ch = colour[(sr & 1)[:, None], (sc & 1)[None, :]]
            model_val = tile_out[ch, my[:, None], mx[None, :]].astype(np.float64)
            bi, bj = (sr & 1)[:, None], (sc & 1)[None, :]
            raw_val = model_val / wb[ch] * rng[bi, bj] + black_a[bi, bj]
            blended = alpha * raw_val + (1 - alpha) * cfa[ey0:ey1, ex0:ex1]
            w2 = ay[:, None] * ax[None, :]
            acc[ey0:ey1, ex0:ex1] += w2 * blended
            wsum[ey0:ey1, ex0:ex1] += w2
            weight[ey0:ey1, ex0:ex1] = np.maximum(weight[ey0:ey1, ex0:ex1], w2)
    work = (slice(y0, y0 + 2 * Hh), slice(x0, x0 + 2 * Wh))
    if not np.allclose(wsum[work], 1.0, atol=1e-9):
        raise AssertionError("seam weights do not sum to 1 over the working region")
    value[work] = acc[work]
    out[work] = np.clip(acc[work], 0, white)
    stats["weight"] = weight
    return np.floor(out + 0.5).astype(np.uint16), value, stats


def ort_runner(onnx_path: str | os.PathLike, threads: int | None = None):
    """(1, 4, T, T) → (1, 3, 2T, 2T) with ONNX Runtime on the package's graph (input ``input``)."""
    from rawrcl.export.ort import OrtModel

    m = OrtModel(onnx_path, threads)
    if m.in_name != "input" or m.out_name != "output":
        raise RawrclError(f"{onnx_path}: tensors must be named input/output, got {m.in_name}/{m.out_name}")
    return lambda a: m(torch.from_numpy(np.ascontiguousarray(a))).numpy()
