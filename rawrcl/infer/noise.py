"""The noise a noise-aware model is told at inference: ``--noise``, ``--noise-profile``, ``--noise-scale``.

A noise-aware model (:func:`rawrcl.models.conditioning.is_noise_aware`) is bound to each file's noise
parameters (:class:`~rawrcl.models.conditioning.WithNoise`) before it runs over the tiles, so every tile
sees the same per-plane (λshot, λread); the std map is recomputed from each tile inside the model. The
parameters of a RAW file come from the one resolver, :func:`rawrcl.calibration.resolve.file_noise`, in
the canonical packed order R, G1, G2, B — the order :func:`rawrcl.infer.pipeline.denoise_cfa` /
:func:`~rawrcl.infer.pipeline.jdd_cfa` pack every Bayer phase into, so per-plane values follow the planes
for GRBG, GBRG and BGGR files too. Blind models are returned unchanged and no estimate is made.

Hot pixels are not treated specially: the single-image estimate is robust to them (tiles with outliers
are a small minority and the fit is quantile-based), and a noise-aware model sees them as signal, as a
blind one does; map them out beforehand (e.g. with a dark frame) if the sensor has many.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.models.conditioning import WithNoise, camera_rows, is_noise_aware, is_row_aware
from rawrcl.models.row_fusion import with_row_fusion
from rawrcl.models.shrink import maybe_shrink
from rawrcl.noise import NoiseModel
from rawrcl.noise.profiles import read_profile
from rawrcl.noise.spec import PER_FILE, NoiseSpec, parse_noise


@dataclass
class NoiseOptions:
    """What ``--noise``, ``--noise-profile`` and ``--noise-scale`` asked for.

    ``spec``: a per-file kind of the noise grammar (None: ``auto``, not given by the user);
    ``profile``: a noise profile file consulted by ``auto`` before the single-image estimate;
    ``scale``: multiplies λshot and λread (> 0); ``hot_pixels``: replace isolated hot/dead pixels
    before inference (:func:`prepare_raw`); ``row_noise``: ``--row-noise`` (None: not given — a row-aware
    model estimates it, a model adapted to a banded camera's de-banded files de-bands each file as that
    camera, other models ignore banding; ``"off"``, ``"auto"`` or a std: :func:`deband_raw`,
    :func:`row_noise_for`); ``shrink``: ``--shrink/--no-shrink``, the SURE weights of input and output(s)
    (:mod:`rawrcl.models.shrink`; None: the command's default — on for RAW denoising, also as the network
    half of ``--fuse-bm3d``; off for JDD).
    """

    spec: str | NoiseSpec | None = None
    profile: str | os.PathLike | None = None
    scale: float = 1.0
    hot_pixels: bool = False
    row_noise: str | None = None
    shrink: bool | None = None

    def __post_init__(self) -> None:
        if self.row_noise is not None:
            from rawrcl.calibration.rows import parse_row_noise

            self.row_noise = parse_row_noise(self.row_noise)
        self.parsed = parse_noise(self.spec if self.spec is not None else "auto", PER_FILE, "--noise")
        if not self.scale > 0:
            raise RawrclError(f"--noise-scale must be > 0, got {self.scale}")
        if self.profile is not None:
            if not Path(self.profile).is_file():
                raise RawrclError(f"--noise-profile {self.profile}: no such file")
            read_profile(self.profile)  # a bad file is refused before any RAW file is read
        self._warned = False

    @property
    def explicit(self) -> bool:
        """Whether the user asked for anything beyond the default (``auto``, no profile, scale 1)."""
        return self.spec is not None or self.profile is not None or self.scale != 1.0

    def warn_blind(self) -> None:
        """Warn once that a blind model ignores the noise options the user gave."""
        if self.explicit and not self._warned:
            self._warned = True
            warnings.warn(
                "the model is blind to the noise level: --noise/--noise-profile/--noise-scale are ignored",
                stacklevel=2,
            )


def bind_noise(
    model: nn.Module, noise: NoiseModel | None, channels: int = 4, shrink: bool | None = False
) -> nn.Module:
    """``model`` as a one-argument module: bound to ``noise`` when noise-aware (refused without it),
    unchanged when blind. ``shrink`` (RAW, 4 channels): with the SURE weights of input and output(s)
    (:func:`rawrcl.models.shrink.maybe_shrink`: True, False, or None for the model's default); a banded
    camera's adapted model fuses its banded files' rows (:func:`rawrcl.models.row_fusion.with_row_fusion`)."""
    if not is_noise_aware(model):
        return model
    if noise is None:
        raise RawrclError("a noise-aware model needs the noise parameters (λshot, λread)")
    if channels == 4:
        model = with_row_fusion(maybe_shrink(model, shrink))
    return WithNoise(model, noise, channels).eval()


def _name(path: str | os.PathLike | None) -> str:
    return Path(path).name if path is not None else "image"


def resolve_noise(
    raw, path: str | os.PathLike | None, opts: NoiseOptions | None, log: Callable[[str], None] | None
):
    """The file's noise (a :class:`~rawrcl.calibration.resolve.FileNoise`) as ``opts`` says (default
    ``auto``), with the one log line saying where it came from."""
    from rawrcl.calibration.resolve import file_noise

    opts = opts or NoiseOptions()
    t0 = time.perf_counter()
    fn = file_noise(raw, opts.parsed, path=path, profile=opts.profile, scale=opts.scale, fallback=True)
    if log is not None:
        log(fn.describe(_name(path), opts.parsed.kind, time.perf_counter() - t0))
    return fn


def prepare_raw(raw, path: str | os.PathLike | None, opts: NoiseOptions | None, log=None):
    """``(raw, noise)`` before inference: with ``opts.hot_pixels`` the file's hot/dead pixels are replaced
    (:func:`rawrcl.defects.repair_hot_pixels`, threshold from the file's noise, one log line) and the
    resolved :class:`~rawrcl.calibration.resolve.FileNoise` is returned for :func:`raw_model_for` to
    reuse; otherwise ``(raw, None)`` unchanged."""
    opts = opts or NoiseOptions()
    if not opts.hot_pixels:
        return raw, None
    from rawrcl.defects import repair_hot_pixels

    fn = resolve_noise(raw, path, opts, log)
    cfa, n = repair_hot_pixels(raw.cfa, raw.pattern, fn.model.lambda_shot, fn.model.lambda_read)
    if log is not None:
        log(f"{_name(path)}: {n} hot/dead pixel{'s' if n != 1 else ''} replaced by their neighbours' median")
    return replace(raw, cfa=cfa), fn


def file_row_noise(
    cfa,
    pattern: str | None,
    noise: NoiseModel,
    log: Callable[[str], None] | None = None,
    name: str | None = None,
) -> float:
    """The row (banding) noise std of one file, [0, 1] units: estimated from the CFA (H, W) [0, 1] of phase
    ``pattern`` (None: ``cfa`` is already packed RGGB planes (4, h, w)) with its white ``noise``
    (:func:`rawrcl.calibration.rows.estimate_row_noise`), 0 unless significant; one log line."""
    from rawrcl.calibration.rows import used_row_noise
    from rawrcl.data.noisy_crops import clip_floor, pack_file

    if pattern is None:
        packed, lam, floor = cfa, noise.params(4), clip_floor(np.asarray(cfa))[0]
    else:
        f = pack_file(name or "image", cfa, pattern, noise.params(4))
        packed, lam, floor = f.packed, f.noise, f.floor
    row, est = used_row_noise(packed, lam, floor)
    if est is not None and log is not None:
        what = f"{row:.3g}" if row > 0 else f"none significant ({est['row']:.2g})"
        log(f"{name or 'image'}: row noise {what}, {est['ratio']:.2f} of the white std (estimated)")
    return row


def row_noise_for(
    model: nn.Module,
    cfa,
    pattern: str | None,
    noise: NoiseModel,
    log: Callable[[str], None] | None = None,
    name: str | None = None,
    setting: str | None = None,
) -> NoiseModel:
    """``noise`` with the file's row (banding) noise when ``model`` is row-aware (an adapted model of a
    banded camera): ``setting`` (``--row-noise``) ``"off"`` → 0, a std → that, None or ``"auto"`` →
    :func:`file_row_noise`. Other models: ``noise`` unchanged."""
    if not is_row_aware(model):
        return noise
    from rawrcl.calibration.rows import fixed_row_noise

    row = fixed_row_noise(setting or "auto")
    if row is None:
        row = file_row_noise(cfa, pattern, noise, log, name)
    return replace(noise, row=row)


def deband_raw(model: nn.Module, raw, path, opts: NoiseOptions | None, log=None, resolved=None):
    """``(raw, resolved)`` with the row offsets removed from ``raw.cfa``
    (:func:`rawrcl.banding.remove_row_offsets`) when ``opts.row_noise`` is ``"auto"`` (estimated, where
    significant) or a std, and ``model`` is not row-aware (a row-aware model is told σ_row instead); for a
    model adapted to a banded camera's de-banded files (:func:`~rawrcl.models.conditioning.camera_rows`) also
    when ``row_noise`` is not given, and ``auto`` means that camera's σ_row unless the file's estimate is
    below the camera's σ_min (:func:`camera_file_rows`); ``"off"`` never. Otherwise unchanged.
    ``resolved``: the file's :class:`~rawrcl.calibration.resolve.FileNoise` when already resolved (``auto``
    needs it; returned, resolved if it had to be). One log line."""
    opts = opts or NoiseOptions()
    camera = camera_rows(model)
    setting = opts.row_noise if opts.row_noise is not None or camera is None else "auto"
    if setting in (None, "off") or is_row_aware(model):
        return raw, resolved
    from rawrcl.banding import remove_row_offsets
    from rawrcl.calibration.rows import fixed_row_noise

    row = fixed_row_noise(setting)
    if row is None:
        resolved = resolved if resolved is not None else resolve_noise(raw, path, opts, log)
        if camera is not None:
            row = camera_file_rows(raw.cfa, raw.pattern, resolved.model, camera, log, _name(path))
        else:
            row = file_row_noise(raw.cfa, raw.pattern, resolved.model, log, _name(path))
    if row <= 0:
        return raw, resolved
    if log is not None:
        log(f"{_name(path)}: row offsets removed (σ_row {row:.3g})")
    return replace(raw, cfa=remove_row_offsets(raw.cfa, row)), resolved


def camera_debanded(
    model: nn.Module,
    cfa,
    pattern: str,
    noise: NoiseModel,
    log: Callable[[str], None] | None = None,
    name: str | None = None,
):
    """``cfa`` (H, W) [0, 1] of phase ``pattern`` with the camera's row offsets removed when ``model`` was
    adapted to a banded camera's de-banded files (:func:`~rawrcl.models.conditioning.camera_rows`), as the
    commands do without ``--row-noise`` (:func:`deband_raw`; ``noise`` the file's white noise); otherwise
    ``cfa`` itself. For the evaluation paths (``rawrcl eval``, benchmarks) that run a model on a mosaic."""
    camera = camera_rows(model)
    if camera is None:
        return cfa
    from rawrcl.banding import remove_row_offsets

    row = camera_file_rows(cfa, pattern, noise, camera, log, name)
    return remove_row_offsets(cfa, row) if row > 0 else cfa


def camera_file_rows(
    cfa,
    pattern: str,
    noise: NoiseModel,
    camera: tuple[float, float],
    log: Callable[[str], None] | None = None,
    name: str | None = None,
) -> float:
    """The σ_row to remove from one file (CFA (H, W) [0, 1] of phase ``pattern``, white ``noise``) before a
    model adapted to the banded ``camera`` = (σ_cam, σ_min) runs: σ_cam unless the file's estimate is
    below σ_min (:func:`rawrcl.calibration.rows.camera_file_rows`); one log line."""
    from rawrcl.calibration.rows import camera_file_rows as rows_for
    from rawrcl.calibration.rows import estimate_row_noise
    from rawrcl.data.noisy_crops import pack_file

    f = pack_file(name or "image", cfa, pattern, noise.params(4))
    try:
        est = estimate_row_noise(f.packed, f.noise, f.floor)
    except ValueError:
        est = None
    row = rows_for(est, camera)
    if log is not None:
        read = "not estimable" if est is None or not math.isfinite(est["stderr"]) else f"{est['row']:.2g}"
        what = f"the adapted camera's {row:.3g}" if row > 0 else "none"
        log(f"{name or 'image'}: row noise {what} (this file reads {read}; the camera {camera[0]:.3g})")
    return row


def raw_model_for(
    model: nn.Module,
    raw,
    path: str | os.PathLike | None,
    opts: NoiseOptions | None,
    log: Callable[[str], None] | None = None,
    resolved=None,
) -> nn.Module:
    """``model`` ready for one RAW file: bound to the file's noise (``resolved``, a ``FileNoise`` already
    resolved, else :func:`resolve_noise`) when noise-aware, else unchanged (and a one-time warning when
    the user gave noise options that only a noise-aware model uses)."""
    opts = opts or NoiseOptions()
    if not is_noise_aware(model):
        if not opts.hot_pixels:
            opts.warn_blind()
        return model
    return bind_noise(model, file_noise_for(model, raw, path, opts, log, resolved), 4, opts.shrink)


def file_noise_for(
    model: nn.Module,
    raw,
    path: str | os.PathLike | None,
    opts: NoiseOptions | None,
    log: Callable[[str], None] | None = None,
    resolved=None,
) -> NoiseModel:
    """The noise ``model`` is told for one RAW file: ``resolved`` (a ``FileNoise``; else
    :func:`resolve_noise`) with the file's row noise when ``model`` is row-aware (:func:`row_noise_for`)."""
    opts = opts or NoiseOptions()
    fn = resolved if resolved is not None else resolve_noise(raw, path, opts, log)
    return row_noise_for(model, raw.cfa, raw.pattern, fn.model, log, _name(path), opts.row_noise)


def rgb_model_for(
    model: nn.Module, path: str | os.PathLike, opts: NoiseOptions | None, log: Callable[[str], None] | None
) -> nn.Module:
    """An RGB photo's model: a noise-aware RGB model needs a fixed level (``--noise λshot,λread`` or a
    preset: photos carry no noise metadata and the RAW estimator does not apply); blind models unchanged."""
    opts = opts or NoiseOptions()
    if not is_noise_aware(model):
        opts.warn_blind()
        return model
    spec = opts.parsed
    if spec.kind not in ("pair", "preset"):
        raise RawrclError(
            f"{path}: a noise-aware RGB model needs --noise λshot,λread for photos (they carry no noise "
            f"metadata), not --noise {spec.text}"
        )
    s, r = spec.pair
    nm = NoiseModel(s * opts.scale, r * opts.scale)
    if log is not None:
        extra = f" (×{opts.scale:g})" if opts.scale != 1.0 else ""
        lam = f"λshot {nm.lambda_shot:.3g}, λread {nm.lambda_read:.3g}"
        log(f"{Path(path).name}: noise from --noise: {lam}{extra}")
    return bind_noise(model, nm, 3)
