"""Training data: RAW-folder and photo-folder datasets that yield the paper's positive pairs.

A *sample* is two overlapping crops ``x_a``, ``x_b`` of the same noisy image (paper Sec. 3.4,
Algorithm 1); crops of different images in a batch are the negatives. Batches are drawn by
:class:`PairBatchSampler`, which makes step ``s`` of a run a pure function of ``(seed, s)``, so a resumed
run sees exactly the batches an uninterrupted one would, and DDP ranks take disjoint slices of the same
global batch.

Sample dict (tensors float32 unless stated; ``c`` = crop side in *model-input* pixels, i.e. packed pixels
for RAW = CFA crop / 2):

- ``x_a``, ``x_b``: (C, c, c) noisy crops; C = 4 (packed RAW [R, G1, G2, B], RGGB geometry) or 3 (RGB).
  Values in [0, 1] units (RAW: after black/white level).
- ``offset``: int64 (2,) position of ``x_b`` relative to ``x_a`` (dy, dx), model-input pixels.
- ``x_a2``, ``x_b2``: the same crops with an independent noise realisation (synthetic data only; N2N).
- ``clean_a``, ``clean_b``: noise-free crops when known (synthetic data, or RAW folders with ``clean_dir``).
- ``noise``: (2,) (λshot, λread) of the image when known (per-channel values averaged), else NaN.
- ``index``: int64 image index.

Overlap: ``x_b`` is ``x_a`` shifted by ``round((1 - overlap)·c)`` pixels along one random axis with a random
sign, so the crops share ``overlap·c²`` pixels. Noise is drawn once on the union of the two crops, so the
overlap carries the same noise in both crops (as two crops of one real noisy photo do).

Cache (RAW folders): each file is decoded once per process with :func:`rawrcl.io.raw.read_raw`, aligned to
RGGB (``rawrcl.cfa.align_rggb``), packed and stored as float16 (4, H/2, W/2). With ``cache_dir`` the array
is also written to ``<cache_dir>/<key>.npy`` and later memory-mapped; ``key`` = sha1 of (file size, mtime in
ns, sha1 of the first and last 64 KiB of the file), so a changed file is re-read. Without ``cache_dir``
arrays live in memory (shared copy-on-write with forked DataLoader workers). A cache folder that cannot be
written (read-only, full disk, not a folder) is not an error: one warning, and the arrays stay in memory.

Sizes: images smaller than the crop are skipped with one warning (their crops would be mostly padding, and
a huge ``crop`` would make every sample that large); when no image is large enough the dataset refuses.
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from rawrcl import isp
from rawrcl.cfa import align_rggb, mosaic_packed, pack, rggb_offset, shift_pattern, unpack
from rawrcl.errors import RawrclError
from rawrcl.io import PHOTO_EXTENSIONS, RAW_EXTENSIONS, atomic_path, cache_root, read_photo
from rawrcl.noise import NoiseLike, NoiseModel, noise_label, noise_sampler

log = logging.getLogger("rawrcl.data")


Key = tuple[int, int]  # (image index, sample seed)


# ----------------------------------------------------------------------------------------------- files
def find_files(root: str | os.PathLike, kind: str) -> list[Path]:
    """Files of ``kind`` ("raw" | "photo") directly inside ``root`` (not recursive, so a ``clean/``
    sub-folder written by ``rawrcl simulate`` is not mixed into the training data), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        raise RawrclError(f"{root}: not a directory")
    exts = RAW_EXTENSIONS if kind == "raw" else PHOTO_EXTENSIONS
    return sorted(
        p for p in root.iterdir() if p.is_file() and p.suffix.lower() in exts and not p.name.startswith(".")
    )


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


# -------------------------------------------------------------------------------------- augmentation
def dihedral(x: np.ndarray, op: int) -> np.ndarray:
    """One of the 8 flips/rotations of the last two axes of ``x`` (a view): bit 0 flips left-right,
    bit 1 up-down, bit 2 rotates by 90°; op = 0 is the identity. Any leading shape, any dtype."""
    if op & 1:
        x = x[..., :, ::-1]
    if op & 2:
        x = x[..., ::-1, :]
    if op & 4:
        x = np.rot90(x, 1, axes=(-2, -1))
    return x


def augment_packed(packed: np.ndarray, op: int, out_hw: tuple[int, int]) -> np.ndarray:
    """Phase-correct flip/rot90 of packed RGGB RAW.

    Flipping the packed planes alone would move every sample by one CFA pixel inside its 2×2 cell (a
    flipped RGGB mosaic is GRBG/GBRG/BGGR, not RGGB). So the packed array is unpacked to the CFA, the
    CFA is flipped/rotated, and the result is cropped by one CFA pixel where needed so that red is
    top-left again, then re-packed. ``packed`` must therefore carry one spare packed row and column
    (shape (4, h+1, w+1) for an output of (4, h, w) = ``out_hw``). op as in :func:`dihedral` (0..7).
    After a rot90 the green on the red row is the former G2: the channel order stays [R, G1, G2, B] by
    position.
    """
    h, w = out_hw
    cfa = unpack(packed, "RGGB")
    cfa = np.ascontiguousarray(dihedral(cfa, op))
    # phase of the transformed mosaic: transform a tile-label map the same way
    labels = np.tile(np.array([["R", "G"], ["G", "B"]]), (cfa.shape[0] // 2, cfa.shape[1] // 2))
    labels = dihedral(labels, op)
    pattern = "".join(labels[:2, :2].ravel())
    dy, dx = rggb_offset(pattern)
    cfa = cfa[dy : dy + 2 * h, dx : dx + 2 * w]
    assert shift_pattern(pattern, dy, dx) == "RGGB"
    return pack(cfa, "RGGB")


# -------------------------------------------------------------------------------------------- sampler
class PairBatchSampler:
    """Yields, for steps ``start_step .. steps-1``, this rank's list of keys ``(image index, sample seed)``.

    Step ``s`` draws the global batch (``batch_size × world_size`` keys) from
    ``numpy.random.default_rng([seed, s])``: images without replacement (a fresh permutation, extended by
    further permutations only when the global batch is larger than the number of images), one 63-bit
    sample seed per slot. Rank ``r`` takes slots ``[r·B, (r+1)·B)``. The sampler's whole state is the
    step: resuming at step k needs only ``start_step=k``.
    """

    def __init__(
        self,
        n_images: int,
        batch_size: int,
        seed: int = 0,
        steps: int | None = None,
        start_step: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if n_images < 1 or batch_size < 1:
            raise RawrclError("the sampler needs at least one image and a batch size ≥ 1")
        self.n_images, self.batch_size, self.seed = n_images, batch_size, seed
        self.steps, self.start_step, self.rank, self.world_size = steps, start_step, rank, world_size

    def batch(self, step: int) -> list[Key]:
        rng = np.random.default_rng([self.seed, step])
        need = self.batch_size * self.world_size
        idx = np.concatenate([rng.permutation(self.n_images) for _ in range(-(-need // self.n_images))])[
            :need
        ]
        seeds = rng.integers(0, 2**63 - 1, size=need, dtype=np.int64)
        lo = self.rank * self.batch_size
        return [
            (int(i), int(s))
            for i, s in zip(idx[lo : lo + self.batch_size], seeds[lo : lo + self.batch_size], strict=True)
        ]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "step": self.start_step}

    def __iter__(self) -> Iterator[list[Key]]:
        step = self.start_step
        while self.steps is None or step < self.steps:
            yield self.batch(step)
            step += 1

    def __len__(self) -> int:
        return max((self.steps or 0) - self.start_step, 0)


# ------------------------------------------------------------------------------------------- datasets
class PairDataset(torch.utils.data.Dataset):
    """Base class: ``dataset[(image_index, sample_seed)]`` → sample dict (module docstring).

    ``dataset[i]`` with a plain int uses ``sample_seed = i`` on image ``i % len(dataset)``.
    """

    kind: str = "raw"  # "raw" (packed 4-channel input) or "rgb"
    keyed: bool = True  # receives (image index, sample seed) keys from PairBatchSampler
    has_clean: bool = False
    has_second: bool = False

    def __init__(self, crop: int, overlap: float, augment: bool, seed: int) -> None:
        if not 0.0 < overlap <= 1.0:
            raise RawrclError(f"--overlap must be in (0, 1], got {overlap}")
        if int(crop) < 2:
            raise RawrclError(f"--crop must be at least 2 pixels, got {crop}")
        self.crop_input = int(crop)  # crop side in file/photo pixels (CFA pixels for RAW)
        self.overlap, self.augment, self.seed = float(overlap), bool(augment), int(seed)
        self.paths: list[Path] = []
        self.skipped: list[tuple[str, str]] = []

    @property
    def in_channels(self) -> int:
        return 4 if self.kind == "raw" else 3

    @property
    def crop(self) -> int:
        """Crop side in model-input pixels (packed pixels for RAW)."""
        return self.crop_input // 2 if self.kind == "raw" else self.crop_input

    def __len__(self) -> int:
        return len(self.paths)

    def describe(self) -> dict:
        return {
            "class": type(self).__name__,
            "files": [p.name for p in self.paths],
            "skipped": self.skipped,
            "crop": self.crop_input,
            "overlap": self.overlap,
            "augment": self.augment,
            "seed": self.seed,
        }

    def _skip(self, path: Path, exc: Exception) -> None:
        reason = str(exc).removeprefix(f"{path}: ")
        self.skipped.append((str(path), str(exc)))
        warnings.warn(f"{path}: skipped ({reason})", stacklevel=3)

    def _too_small(self, sides: Sequence[tuple[int, int]], need: int) -> list[int]:
        """Indices of the images whose (height, width) — in the units of ``need`` — are below ``need``;
        they are recorded as skipped with one warning for all of them. Refuses when none is large enough."""
        small = [k for k, (h, w) in enumerate(sides) if min(h, w) < need]
        if not small:
            return []
        crop = self.crop_input
        if len(small) == len(sides):
            big = max(sides, key=lambda hw: min(hw))
            scale = crop // need
            raise RawrclError(
                f"{self.root}: no image is large enough for --crop {crop} (the largest is "
                f"{big[1] * scale}×{big[0] * scale}); use a smaller --crop"
            )
        names = [self.paths[k].name for k in small]
        for k in small:
            self.skipped.append((str(self.paths[k]), f"smaller than --crop {crop}"))
        listed = ", ".join(names[:5]) + (" …" if len(names) > 5 else "")
        warnings.warn(
            f"{self.root}: skipped {len(small)} image(s) smaller than --crop {crop}: {listed}", stacklevel=3
        )
        return small

    def _require_some(self, root: Path, what: str) -> None:
        if not self.paths:
            extra = f" ({len(self.skipped)} unreadable)" if self.skipped else ""
            raise RawrclError(f"{root}: no usable {what} files{extra}")

    # geometry ----------------------------------------------------------------------------------------
    def _pair_geometry(self, rng: np.random.Generator, h: int, w: int, margin: int):
        """Union-region origin/size and the two crops' positions inside it (model-input pixels)."""
        c = self.crop
        s = int(round((1.0 - self.overlap) * c))
        dy = dx = 0
        if s:
            sign = 1 if rng.random() < 0.5 else -1
            if rng.random() < 0.5:
                dy = sign * s
            else:
                dx = sign * s
        uh, uw = c + abs(dy) + margin, c + abs(dx) + margin
        y0 = int(rng.integers(0, max(h - uh, 0) + 1))
        x0 = int(rng.integers(0, max(w - uw, 0) + 1))
        a = (max(0, -dy), max(0, -dx))
        b = (a[0] + dy, a[1] + dx)
        return (y0, x0, uh, uw), a, b, (dy, dx)

    @staticmethod
    def _region(img: np.ndarray, y0: int, x0: int, uh: int, uw: int, scale: int = 1) -> np.ndarray:
        """img[..., y0:y0+uh, x0:x0+uw] (coordinates × scale), edge-padded when the image is too small."""
        sl = img[..., y0 * scale : (y0 + uh) * scale, x0 * scale : (x0 + uw) * scale]
        ph, pw = uh * scale - sl.shape[-2], uw * scale - sl.shape[-1]
        sl = np.asarray(sl, dtype=np.float32)
        if ph or pw:
            sl = np.pad(sl, [(0, 0)] * (sl.ndim - 2) + [(0, ph), (0, pw)], mode="symmetric")
        return sl

    def _cut(self, region: np.ndarray, pos: tuple[int, int], op: int) -> torch.Tensor:
        c = self.crop
        if self.augment and self.kind == "raw":
            part = region[..., pos[0] : pos[0] + c + 1, pos[1] : pos[1] + c + 1]
            return torch.from_numpy(np.ascontiguousarray(augment_packed(part, op, (c, c)), dtype=np.float32))
        part = region[..., pos[0] : pos[0] + c, pos[1] : pos[1] + c]
        if self.augment:
            part = dihedral(part, op)
        return torch.from_numpy(np.ascontiguousarray(part, dtype=np.float32))

    def _key(self, key) -> Key:
        if isinstance(key, (tuple, list)):
            return int(key[0]) % len(self), int(key[1])
        return int(key) % len(self), int(key)


class RawFolderDataset(PairDataset):
    """Positive pairs from a folder of RAW files (real noise; no synthetic noise is added).

    Parameters
    ----------
    root : folder of RAW files (DNG, CR2, NEF, …; not recursive).
    crop : crop side in CFA pixels (even; default 128 → 64×64 packed).
    overlap : fraction of the crop area shared by the two crops of a pair, (0, 1].
    augment : phase-correct random flips/rot90 (off by default, as in the paper).
    cache_dir : optional folder for the decoded ``.npy`` cache (``"auto"``: :func:`default_cache_dir`).
    clean_dir : optional folder of noise-free references with the same file names (e.g. the ``clean/``
        folder of ``rawrcl simulate --save-clean``); samples then carry ``clean_a``/``clean_b``.
    files : optional explicit file list (overrides the folder listing).
    """

    kind = "raw"

    def __init__(
        self,
        root: str | os.PathLike,
        crop: int = 128,
        overlap: float = 0.5,
        augment: bool = False,
        cache_dir: str | os.PathLike | None = None,
        clean_dir: str | os.PathLike | None = None,
        seed: int = 0,
        files: Sequence[str | os.PathLike] | None = None,
    ) -> None:
        super().__init__(crop, overlap, augment, seed)
        if crop % 2 or crop < 4:
            raise RawrclError(f"--crop must be an even number of CFA pixels ≥ 4 for RAW data, got {crop}")
        root = Path(root)
        candidates = [Path(f) for f in files] if files is not None else find_files(root, "raw")
        cache_dir = resolve_cache_dir(cache_dir)
        self.root, self.cache_dir = root, cache_dir
        self.images: list[np.ndarray] = []
        self.cleans: list[np.ndarray] = []
        for path in candidates:
            try:
                img = load_packed_raw(path, cache_dir)
                clean = None
                if clean_dir is not None:
                    clean = _find_clean(Path(clean_dir), path)
                    clean = load_packed_raw(clean, cache_dir)
                    if clean.shape != img.shape:
                        raise RawrclError(f"clean reference {clean.shape} does not match {img.shape}")
            except RawrclError as exc:
                self._skip(path, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - a broken file must not end a long run
                self._skip(path, RawrclError(f"{type(exc).__name__}: {exc}"))
                continue
            self.paths.append(path)
            self.images.append(img)
            if clean is not None:
                self.cleans.append(clean)
        self._require_some(root, "RAW")
        small = set(self._too_small([img.shape[-2:] for img in self.images], self.crop))
        if small:
            keep = [k for k in range(len(self.paths)) if k not in small]
            self.paths = [self.paths[k] for k in keep]
            self.images = [self.images[k] for k in keep]
            self.cleans = [self.cleans[k] for k in keep] if self.cleans else []
        self.has_clean = clean_dir is not None

    def __getitem__(self, key) -> dict:
        i, sseed = self._key(key)
        rng = np.random.default_rng([self.seed, i, sseed % 2**62])
        img = self.images[i]
        margin = 1 if self.augment else 0
        (y0, x0, uh, uw), a, b, off = self._pair_geometry(rng, img.shape[-2], img.shape[-1], margin)
        op = int(rng.integers(0, 8)) if self.augment else 0
        region = self._region(img, y0, x0, uh, uw)
        out = {
            "x_a": self._cut(region, a, op),
            "x_b": self._cut(region, b, op),
            "offset": torch.tensor(off, dtype=torch.int64),
            "noise": torch.full((2,), float("nan")),
            "index": torch.tensor(i, dtype=torch.int64),
        }
        if self.has_clean:
            cregion = self._region(self.cleans[i], y0, x0, uh, uw)
            out["clean_a"], out["clean_b"] = self._cut(cregion, a, op), self._cut(cregion, b, op)
        return out


def _find_clean(clean_dir: Path, noisy: Path) -> Path:
    for cand in [clean_dir / noisy.name, *sorted(clean_dir.glob(noisy.stem + ".*"))]:
        if cand.is_file():
            return cand
    raise RawrclError(f"no clean reference named {noisy.stem}.* in {clean_dir}")


class PhotoFolderDataset(PairDataset):
    """Positive pairs from clean photos with synthetic noise: RGB (``mode="rgb"``) or synthetic RAW
    (``mode="raw"``: RGB → RGGB mosaic, packed, then noise; optionally ``unprocess`` first).

    Each image gets its own noise parameters (λshot, λread), drawn once from ``noise`` (the ``--noise``
    grammar of :mod:`rawrcl.noise.spec` or a sampler; default the paper's App. C.1 sampler, σ ∈ [0, 20]
    8-bit) with ``numpy.random.default_rng([seed, index])``, as in the paper; a calibrated camera profile
    ``PROFILE.json`` draws one of its measured entries per image. ``noise="none"`` adds no noise (photos
    already noisy).
    Every sample draws a fresh noise realisation on the union of its two crops, plus an independent second
    realisation (``x_a2``/``x_b2``, for N2N). Clean crops are returned too (``clean_a``/``clean_b``).

    Parameters
    ----------
    root : folder of photos (PNG, JPEG, TIFF, …; not recursive). ``images`` may give arrays instead.
    crop : crop side in photo pixels (even for RAW; default 128).
    images : optional list of RGB arrays (3, H, W) float in [0, 1] or (H, W, 3) uint8, used instead of files.
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        crop: int = 128,
        overlap: float = 0.5,
        mode: str = "rgb",
        noise: NoiseLike = "paper",
        unprocess: bool = False,
        augment: bool = False,
        seed: int = 0,
        images: Sequence[np.ndarray] | None = None,
    ) -> None:
        super().__init__(crop, overlap, augment, seed)
        if mode not in ("rgb", "raw"):
            raise RawrclError(f"photo dataset mode must be 'rgb' or 'raw', got {mode!r}")
        self.kind = mode
        if mode == "raw" and (crop % 2 or crop < 4):
            raise RawrclError(f"--crop must be an even number of pixels ≥ 4 for RAW tasks, got {crop}")
        self.root = Path(root) if root is not None else Path("<arrays>")
        self.images: list[np.ndarray] = []
        if images is not None:
            for k, arr in enumerate(images):
                self.paths.append(Path(f"image{k:04d}"))
                self.images.append(_as_chw_float(arr))
        else:
            for path in find_files(self.root, "photo"):
                try:
                    self.images.append(read_photo(path))
                    self.paths.append(path)
                except Exception as exc:  # noqa: BLE001
                    self._skip(path, exc if isinstance(exc, RawrclError) else RawrclError(str(exc)))
        self._require_some(self.root, "photo")
        small = set(self._too_small([img.shape[-2:] for img in self.images], self.crop_input))
        if small:
            keep = [k for k in range(len(self.paths)) if k not in small]
            self.paths = [self.paths[k] for k in keep]
            self.images = [self.images[k] for k in keep]
        self.unprocess = bool(unprocess)
        self.sampler_name = noise_label(noise)
        sampler = noise_sampler(noise)
        self.noise_models: list[NoiseModel | None] = []
        for k in range(len(self.images)):
            rng = np.random.default_rng([self.seed, k])
            self.noise_models.append(
                _adapt_channels(sampler(rng), 4 if mode == "raw" else 3) if sampler else None
            )
        self.has_clean = True
        self.has_second = sampler is not None
        if self.unprocess:
            self.images = [
                np.asarray(isp.unprocess(img, np.random.default_rng([self.seed, k, 1]))[0], dtype=np.float32)
                for k, img in enumerate(self.images)
            ]

    def describe(self) -> dict:
        d = super().describe()
        d.update(
            mode=self.kind,
            sampler=self.sampler_name,
            unprocess=self.unprocess,
            noise=[m.to_dict() if m else None for m in self.noise_models],
        )
        return d

    def __getitem__(self, key) -> dict:
        i, sseed = self._key(key)
        rng = np.random.default_rng([self.seed, i, sseed % 2**62])
        img = self.images[i]
        scale = 2 if self.kind == "raw" else 1
        margin = 1 if self.augment and self.kind == "raw" else 0
        geom = self._pair_geometry(rng, img.shape[-2] // scale, img.shape[-1] // scale, margin)
        (y0, x0, uh, uw), a, b, off = geom
        op = int(rng.integers(0, 8)) if self.augment else 0
        region = self._region(img, y0, x0, uh, uw, scale)
        if self.kind == "raw":
            region = mosaic_packed(region, "RGGB")
        clean = torch.from_numpy(np.ascontiguousarray(region, dtype=np.float32))
        model = self.noise_models[i]
        out = {"offset": torch.tensor(off, dtype=torch.int64), "index": torch.tensor(i, dtype=torch.int64)}
        if model is None:
            noisy = noisy2 = clean
            out["noise"] = torch.full((2,), float("nan"))
        else:
            gen = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
            noisy, noisy2 = model.sample(clean, gen), model.sample(clean, gen)
            out["noise"] = torch.tensor(
                [float(np.mean(model.lambda_shot)), float(np.mean(model.lambda_read))], dtype=torch.float32
            )
        for name, arr in (("x", noisy), ("clean", clean)) + ((("x2", noisy2),) if model is not None else ()):
            arr = arr.numpy()
            sa, sb = ("_a", "_b") if name != "x2" else ("_a2", "_b2")
            base = "x" if name == "x2" else name
            out[base + sa], out[base + sb] = self._cut(arr, a, op), self._cut(arr, b, op)
        return out


def _as_chw_float(arr: np.ndarray) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim == 3 and a.shape[-1] == 3 and a.shape[0] != 3:
        a = a.transpose(2, 0, 1)
    if a.dtype == np.uint8:
        a = a.astype(np.float32) / 255.0
    elif a.dtype == np.uint16:
        a = a.astype(np.float32) / 65535.0
    if a.ndim != 3 or a.shape[0] != 3:
        raise RawrclError(f"expected an RGB image (3, H, W) or (H, W, 3), got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _adapt_channels(model: NoiseModel, channels: int) -> NoiseModel:
    """Map per-channel λ between packed RAW (4: R, G1, G2, B) and RGB (3: R, G, B) when needed."""
    out = []
    for v in (model.lambda_shot, model.lambda_read):
        a = np.asarray(v, dtype=np.float64)
        if a.ndim == 1 and a.size != channels:
            if a.size == 4 and channels == 3:
                a = np.array([a[0], 0.5 * (a[1] + a[2]), a[3]])
            elif a.size == 3 and channels == 4:
                a = np.array([a[0], a[1], a[1], a[2]])
            else:
                a = np.full(channels, a.mean())
        out.append(float(a) if a.ndim == 0 else [float(t) for t in a])
    return NoiseModel(out[0], out[1], poisson=model.poisson, clip=model.clip)


def make_loader(
    dataset: PairDataset,
    sampler: PairBatchSampler,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> torch.utils.data.DataLoader:
    """DataLoader over a :class:`PairBatchSampler` (deterministic whatever ``num_workers``)."""
    kwargs: dict = {}
    if num_workers > 0:
        kwargs.update(persistent_workers=False, prefetch_factor=2)
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        generator=torch.Generator(),  # never touch the global RNG
        **kwargs,
    )
