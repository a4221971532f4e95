"""Synthesise noisy Bayer DNGs from RGB photos (the library behind ``rawrcl simulate``).

Pipeline per photo: sRGB (8/16-bit) → optional unprocess (Brooks et al. 2019, random seeded camera:
colour matrix, white balance, brightness) → linear camera RGB in [0, 1] → Bayer mosaic with the
requested phase → quantised clean mosaic in DN → noise n ~ N(0, λshot·x + λread) with λ drawn per
image by a sampler ([0, 1] units, x the clean value after black/white level) → DN, clipped to
[0, white level] like a real ADC → uint16 DNG whose NoiseProfile is (λshot, λread).

Quantisation: DN = round(black + x·(white − black)); rounding adds a variance of 1/12 DN², i.e.
1/(12·(white − black)²) ≈ 3.3e-10 in [0, 1] units for the defaults (white 16383, black 512) — negligible
beside any λread above ~1e-7 (8-bit σ ≳ 0.1). The clean reference is the quantised clean mosaic
itself, so noisy − clean carries exactly one rounding.

Clipping: values are clipped to [0, white] DN. With a large λread (the paper sampler's σ up to 20/255)
the noise around black can reach below 0 DN when the black level is 512; the manifest records the
clipped fractions so users can raise ``--black-level`` if that matters.

Reproducibility: image ``i`` (in sorted file order) uses ``numpy.random.SeedSequence([seed, i])``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from rawrcl.cfa import check_pattern, mosaic
from rawrcl.colour import XYZ_TO_SRGB
from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path, atomic_write_bytes, list_photos, read_photo
from rawrcl.io.dng import MAX_SIZE, MIN_SIZE, write_dng
from rawrcl.isp import unprocess
from rawrcl.noise import SYNTHETIC, NoiseModel, NoiseSpec, Sampler, parse_noise

MANIFEST = "manifest.json"


def identity_camera() -> dict:
    """Camera parameters used with ``unprocess=False``: camera RGB = linear sRGB, no white balance."""
    return {"xyz_to_cam": XYZ_TO_SRGB.copy(), "ccm": np.eye(3), "wb": np.ones(3), "gain": 1.0}


def simulate_image(
    srgb: np.ndarray,
    rng: np.random.Generator,
    sampler: Sampler,
    *,
    pattern: str = "RGGB",
    do_unprocess: bool = True,
    white_level: int = 16383,
    black_level: int = 512,
) -> dict:
    """Simulate one noisy Bayer capture of a photo.

    Parameters
    ----------
    srgb : (3, H, W) float in [0, 1]; display sRGB if ``do_unprocess``, else taken as linear camera RGB.
    rng : seeded generator; draws, in order, the camera (if unprocessing), λ, and the noise.
    sampler : noise-parameter sampler (``rawrcl.noise``), [0, 1] units.
    pattern : Bayer phase of the output mosaic.
    white_level, black_level : DN of the simulated sensor (integers, black < white ≤ 65535); a noise model
        with a :class:`~rawrcl.noise.Readout` (the ``camera`` sampler) sets them from its bit depth and
        black level instead (black 0: a black-subtracted file, clipped at 0).

    Returns
    -------
    dict with ``noisy`` and ``clean`` (H, W) uint16 DN mosaics, ``linear`` (3, H, W) float32 linear
    camera RGB in [0, 1], ``noise`` (:class:`NoiseModel`, [0, 1] units), ``camera`` (xyz_to_cam,
    ccm, wb, gain), ``clipped_low`` / ``clipped_high`` (fractions of pixels clipped at 0 / white),
    ``black_level`` / ``white_level`` (the levels used, DN).
    """
    pattern = check_pattern(pattern)
    white, black = int(white_level), int(black_level)
    if not 0 <= black < white <= 65535:
        raise RawrclError(f"need 0 ≤ --black-level < --white-level ≤ 65535, got {black}, {white}")
    if do_unprocess:
        linear, camera = unprocess(srgb.astype(np.float64), rng)
    else:
        linear, camera = np.clip(srgb.astype(np.float64), 0, 1), identity_camera()
    linear = linear.astype(np.float32)
    noise = sampler(rng)
    if noise.readout is not None:  # the sampler drew the sensor's ADC: it sets the file's levels
        white = 2 ** int(noise.readout.bits) - 1
        black = int(round(noise.readout.black * white))
        noise = replace(noise, readout=None)  # quantised and clipped below, in DN
    scale = float(white - black)
    cfa = mosaic(linear, pattern)[0].astype(np.float64)  # (H, W) in [0, 1]
    clean_dn = np.clip(np.rint(black + cfa * scale), 0, white)
    clean01 = (clean_dn - black) / scale  # the exact clean signal in the DNG
    gen = torch.Generator().manual_seed(int(rng.integers(0, 2**63 - 1)))
    noisy01 = noise.sample(torch.from_numpy(clean01)[None], generator=gen)[0].numpy()
    noisy_dn = np.rint(black + noisy01 * scale)
    low, high = float(np.mean(noisy_dn < 0)), float(np.mean(noisy_dn > white))
    noisy_dn = np.clip(noisy_dn, 0, white)
    return {
        "noisy": noisy_dn.astype(np.uint16),
        "clean": clean_dn.astype(np.uint16),
        "linear": linear,
        "noise": noise,
        "camera": camera,
        "clipped_low": low,
        "clipped_high": high,
        "black_level": black,
        "white_level": white,
    }


@dataclass
class SimulateReport:
    """What :func:`simulate_folder` did: written entries, kept (existing) outputs, failures."""

    out_dir: Path
    written: list[dict] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: kept outputs that were made with other settings than this run's: {setting: (theirs, this run's)}
    kept_differ: dict[str, tuple] = field(default_factory=dict)

    @property
    def manifest(self) -> Path:
        return self.out_dir / MANIFEST


def _write_tiff16(path: Path, rgb01: np.ndarray) -> None:
    import tifffile

    img = np.rint(np.clip(rgb01, 0, 1) * 65535).astype(np.uint16).transpose(1, 2, 0)
    with atomic_path(path) as tmp:
        tifffile.imwrite(tmp, img, photometric="rgb", metadata=None, software="rawrcl")


def _load_manifest(path: Path) -> dict[str, dict]:
    """The entries of an existing manifest by source name; each carries its ``settings`` (older manifests
    kept them only at the top level)."""
    try:
        data = json.loads(path.read_text())
        entries = {e["source"]: e for e in data.get("files", []) if isinstance(e, dict) and "source" in e}
        top = data.get("settings")
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
    for e in entries.values():
        if "settings" not in e and isinstance(top, dict):
            e["settings"] = top
    return entries


def _manifest_settings(entries: list[dict], settings: dict) -> dict:
    """The manifest's top-level settings: those of its files when they all agree (normally this run's), else
    this run's with ``"mixed": true`` (each file's ``settings`` then tells what made it)."""
    made = [e.get("settings") for e in entries]
    if made and all(m == made[0] for m in made) and isinstance(made[0], dict):
        return made[0]
    return {**settings, "mixed": bool(entries)}


def simulate_folder(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    noise: str | NoiseSpec = "paper",
    pattern: str = "RGGB",
    do_unprocess: bool = True,
    white_level: int = 16383,
    black_level: int = 512,
    seed: int = 0,
    save_clean: bool = False,
    force: bool = False,
    progress: bool | None = None,
) -> SimulateReport:
    """Turn a folder of RGB photos into noisy Bayer DNGs ``OUT/<stem>.dng``.

    Parameters
    ----------
    src : folder of photos (or one photo); see :data:`rawrcl.io.PHOTO_EXTENSIONS`.
    out : output folder (created). With ``save_clean`` the ground truth goes to ``OUT/clean/``:
        ``<stem>.dng`` (noise-free mosaic, same metadata) and ``<stem>.tiff`` (noise-free linear
        camera RGB, 16-bit, full size), so that OUT itself holds only noisy DNGs.
    noise : the noise drawn per photo, the :data:`~rawrcl.noise.SYNTHETIC` kinds of the ``--noise``
        grammar (:mod:`rawrcl.noise.spec`): ``paper[:LO-HI]`` (σ in 8-bit units), ``brooks``, ``camera``,
        ``λshot,λread``, a preset, ``PROFILE.json[:ISO]``, or ``none``.
    pattern, do_unprocess, white_level, black_level : see :func:`simulate_image`.
    seed : base seed; photo ``i`` uses ``SeedSequence([seed, i])``.
    force : overwrite existing outputs; otherwise photos whose outputs exist are kept and reported.
    progress : tqdm progress bar (None: only on a terminal).

    Returns
    -------
    :class:`SimulateReport`. ``OUT/manifest.json`` lists every output with its parameters
    (λ in [0, 1] units) and the ``settings`` that made it; kept outputs keep their own, and
    ``report.kept_differ`` names the settings in which they differ from this run's. Unreadable photos
    are skipped and listed in ``report.failed``. A write that fails (disk full) removes that photo's
    outputs, writes the manifest of the finished ones and raises :class:`RawrclError`.
    """
    from tqdm import tqdm

    pattern = check_pattern(pattern)
    if not 0 <= int(black_level) < int(white_level) <= 65535:
        raise RawrclError(f"need 0 ≤ --black-level < --white-level ≤ 65535, got {black_level}, {white_level}")
    spec = parse_noise(noise, SYNTHETIC)
    noise_sampler = spec.make_sampler() or (lambda rng: NoiseModel(0.0, 0.0))
    photos = list_photos(src)
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise RawrclError(f"{out_dir}: exists and is not a folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    clean_dir = out_dir / "clean"
    if save_clean:
        clean_dir.mkdir(exist_ok=True)

    report = SimulateReport(out_dir=out_dir)
    previous = _load_manifest(out_dir / MANIFEST)
    entries: dict[str, dict] = {}
    stems: dict[str, str] = {}
    settings = {
        "noise": spec.text,
        "pattern": pattern,
        "unprocess": bool(do_unprocess),
        "white_level": int(white_level),
        "black_level": int(black_level),
        "seed": int(seed),
        "save_clean": bool(save_clean),
    }
    disable = None if progress is None else not progress
    for index, photo in enumerate(tqdm(photos, desc="simulate", unit="photo", disable=disable)):
        stem = photo.stem
        if stem in stems:
            report.failed.append((str(photo), f"output name {stem}.dng already used by {stems[stem]}"))
            continue
        stems[stem] = photo.name
        dng_path = out_dir / f"{stem}.dng"
        outputs = [dng_path]
        if save_clean:
            outputs += [clean_dir / f"{stem}.dng", clean_dir / f"{stem}.tiff"]
        existing = [o for o in outputs if o.exists()]
        if existing and not force:
            report.kept.append(str(existing[0]))
            if photo.name in previous:
                entries[photo.name] = previous[photo.name]
                theirs = previous[photo.name].get("settings") or {}
                for key, value in settings.items():
                    if key in theirs and theirs[key] != value and key != "save_clean":
                        report.kept_differ.setdefault(key, (theirs[key], value))
            continue
        try:
            srgb = read_photo(photo, min_size=MIN_SIZE)
            if max(srgb.shape[1:]) > MAX_SIZE:
                h, w = srgb.shape[1:]
                raise RawrclError(f"{photo}: {h}×{w} is larger than a DNG LibRaw reads ({MAX_SIZE} a side)")
            rng = np.random.default_rng(np.random.SeedSequence([int(seed), index]))
            res = simulate_image(
                srgb,
                rng,
                noise_sampler,
                pattern=pattern,
                do_unprocess=do_unprocess,
                white_level=white_level,
                black_level=black_level,
            )
        except RawrclError as exc:
            report.failed.append((str(photo), str(exc)))
            continue
        noise: NoiseModel = res["noise"]
        cam = res["camera"]
        ls, lr = float(noise.lambda_shot), float(noise.lambda_read)
        black, white = int(res["black_level"]), int(res["white_level"])
        common = dict(
            pattern=pattern,
            black_level=black,
            white_level=white,
            wb=cam["wb"],
            color_matrix=cam["xyz_to_cam"],
            noise_profile=(ls, lr),
            make="rawrcl",
            model="simulate",
            overwrite=True,
        )
        entry = {
            "source": photo.name,
            "index": index,
            "seed": [int(seed), index],
            "dng": dng_path.name,
            "height": int(res["noisy"].shape[0]),
            "width": int(res["noisy"].shape[1]),
            "pattern": pattern,
            "lambda_shot": ls,
            "lambda_read": lr,
            "noise_profile": [[ls, lr]],
            "quantisation_variance": 1.0 / (12.0 * (white - black) ** 2),
            "clipped_low_fraction": res["clipped_low"],
            "clipped_high_fraction": res["clipped_high"],
            "black_level": black,
            "white_level": white,
            "unprocess": bool(do_unprocess),
            "wb": [float(v) for v in cam["wb"]],
            "gain": float(cam["gain"]),
            "xyz_to_cam": np.asarray(cam["xyz_to_cam"]).tolist(),
            "ccm": np.asarray(cam["ccm"]).tolist(),
            "settings": settings,
        }
        if save_clean:
            entry["clean_dng"] = f"clean/{stem}.dng"
            entry["clean_tiff"] = f"clean/{stem}.tiff"
        try:  # all of a photo's outputs or none (a full disk must not leave a DNG without its clean pair)
            write_dng(dng_path, res["noisy"], **common)
            if save_clean:
                write_dng(clean_dir / f"{stem}.dng", res["clean"], **common)
                _write_tiff16(clean_dir / f"{stem}.tiff", res["linear"])
        except RawrclError:
            for o in outputs:
                o.unlink(missing_ok=True)
            _write_manifest(out_dir, entries, settings, report, best_effort=True)
            raise
        entries[photo.name] = entry
        report.written.append(entry)

    _write_manifest(out_dir, entries, settings, report)
    return report


def _write_manifest(
    out_dir: Path, entries: dict[str, dict], settings: dict, report: SimulateReport, best_effort: bool = False
) -> None:
    """Write ``OUT/manifest.json`` (atomically); ``best_effort``: ignore a failure (already failing)."""
    files = [entries[k] for k in sorted(entries)]
    manifest = {
        "tool": "rawrcl simulate",
        "units": "lambda in [0,1] after black/white level; variance = lambda_shot*x + lambda_read",
        "settings": _manifest_settings(files, settings),
        "files": files,
        "failed": [{"source": s, "error": e} for s, e in report.failed],
    }
    try:
        atomic_write_bytes(out_dir / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    except RawrclError:
        if not best_effort:
            raise
