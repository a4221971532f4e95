"""Colour photos bundled with scikit-image (no download needed), for demos and tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.io import atomic_path

#: (name, loader) of the colour photos shipped inside the scikit-image wheel, in a fixed order.
_PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "motorcycle",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
)


def _load(name: str) -> np.ndarray:
    from skimage import data

    if name == "motorcycle":
        img = data.stereo_motorcycle()[0]
    else:
        img = getattr(data, name)()
    img = np.asarray(img)
    if img.ndim != 3 or img.shape[2] < 3:
        raise RawrclError(f"bundled photo {name!r} is not a colour image (shape {img.shape})")
    return np.ascontiguousarray(img[..., :3]).astype(np.uint8)


def bundled_photos(n: int | None = None) -> list[tuple[str, np.ndarray]]:
    """The first ``n`` (default all 8) colour photos bundled with scikit-image.

    Returns
    -------
    list of (name, image) with image uint8 (H, W, 3) sRGB, e.g. ("astronaut", 512×512×3).
    """
    names = _PHOTOS if n is None else _PHOTOS[: max(int(n), 0)]
    return [(name, _load(name)) for name in names]


def write_bundled_photos(
    directory: str | os.PathLike, n: int | None = None, *, overwrite: bool = False
) -> list[Path]:
    """Write the bundled photos as 8-bit PNGs ``<directory>/<name>.png`` (atomically).

    Existing files are kept unless ``overwrite``. Returns the paths (written or kept).
    """
    import cv2

    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, img in bundled_photos(n):
        path = out_dir / f"{name}.png"
        if path.exists() and not overwrite:
            paths.append(path)
            continue
        with atomic_path(path, suffix=".png") as tmp:
            if not cv2.imwrite(str(tmp), img[..., ::-1]):
                raise RawrclError(f"{path}: could not write PNG")
        paths.append(path)
    return paths
