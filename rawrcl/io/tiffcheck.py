"""Checks of the pixel-data layout a TIFF-based file declares (DNG and the TIFF-based RAW formats — NEF,
CR2, ARW, KDC, … — and TIFF photos), made before a decoder allocates or reads anything.

Decoders trust the header: LibRaw fills the tiles of a lossless-JPEG DNG that lie beyond the end of the
file with zeros (or whatever its buffer held) without an error, and OpenCV returns a TIFF photo whose
declared rows are missing. :func:`data_layout_problem` finds such files (used by
:func:`rawrcl.io.tags.read_dng_tags` / :func:`rawrcl.io.raw.read_raw` and :func:`rawrcl.io.read_photo`).
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["MAX_PIXELS", "MAX_SAMPLES_PER_BYTE", "RAW_CODECS", "data_layout_problem", "tiff_layout_problem"]

#: the largest image rawrcl accepts, in pixels (2**29 ≈ 537 MP; the largest camera files are ~400 MP):
#: a header that declares more is corrupt, and is refused before anything is allocated
MAX_PIXELS = 1 << 29
#: at most this many declared samples per byte of file for data in a camera RAW codec (≥ 1/4 bit per
#: sample: lossless RAW codecs need ≥ 1 bit); a header declaring more is corrupt (refused before LibRaw
#: allocates the image). Not applied to general-purpose compression (deflate, LZW, lossy JPEG), which can
#: shrink a flat image far more.
MAX_SAMPLES_PER_BYTE = 32
#: TIFF Compression values of camera RAW codecs: lossless JPEG (DNG), Sony ARW, Nikon packed/NEF, Samsung,
#: Kodak (KDC, DCR), Pentax
RAW_CODECS = frozenset({7, 99, 262, 32767, 32769, 32770, 32867, 34713, 65000, 65535})
_MAX_IFDS = 32  # IFDs examined by the layout check (a corrupt chain can be long)


def _ifds(tif) -> Iterator[tuple[str, object]]:
    """(name, page) of the file's IFD chain and each IFD's SubIFDs (depth first, at most ``_MAX_IFDS``)."""
    count = 0

    def walk(pages, prefix):
        nonlocal count
        for i, page in enumerate(pages):
            if count >= _MAX_IFDS:
                return
            count += 1
            name = f"{prefix}{i}"
            yield name, page
            subs = getattr(page, "pages", None)
            if subs:
                yield from walk(subs, f"{name}.SubIFD")

    yield from walk(tif.pages, "IFD")


def data_layout_problem(tif, file_size: int) -> str | None:
    """What is wrong with the pixel-data layout a TIFF-based file (DNG, NEF, CR2, ARW, KDC, …) declares,
    or None. Checked for every IFD and SubIFD (``tif``: an open ``tifffile.TiffFile``):

    - the declared size: at most :data:`MAX_PIXELS` pixels, and for data in a camera RAW codec
      (:data:`RAW_CODECS`) at most :data:`MAX_SAMPLES_PER_BYTE` samples per byte of the file (absurd sizes
      are refused before LibRaw allocates them);
    - every strip/tile lies inside the file (a truncated file, or a header without its pixel data, which
      LibRaw would silently decode as zeros);
    - uncompressed data holds at least width × height × samples × bits / 8 bytes (and each tile its
      tile width × tile length × samples × bits / 8); tiles are no larger than images may be.

    Returns a one-line reason (without the file name).
    """
    pages = list(_ifds(tif))
    layouts = []
    for name, page in pages:  # first the extents: a truncated file is reported as truncated
        offsets, counts = list(page.dataoffsets or ()), list(page.databytecounts or ())
        if len(offsets) != len(counts):
            n_off, n_cnt = len(offsets), len(counts)
            return f"unreadable or truncated file ({name}: {n_off} data offsets, {n_cnt} byte counts)"
        segments = [(int(o), int(c)) for o, c in zip(offsets, counts, strict=True) if int(c) > 0]
        end = max((o + c for o, c in segments), default=0)
        if end > file_size:
            missing = sum(c for o, c in segments if o >= file_size)
            what = "missing" if missing else "cut short"
            return (
                f"unreadable or truncated file (pixel data {what}: {name} declares data up to byte "
                f"{end}, the file has {file_size} bytes)"
            )
        layouts.append((name, page, segments))
    for name, page, segments in layouts:
        have = sum(c for _, c in segments)
        try:
            w, h = int(page.imagewidth or 0), int(page.imagelength or 0)
            tw, th = int(getattr(page, "tilewidth", 0) or 0), int(getattr(page, "tilelength", 0) or 0)
            spp = max(int(page.samplesperpixel or 1), 1)
            bits = page.bitspersample
            bits = int(bits[0] if isinstance(bits, (tuple, list)) else bits or 0)
            compression = int(page.compression)
        except (TypeError, ValueError):  # e.g. a size tag with several values
            return f"corrupt header: {name} declares an invalid image or tile size"
        codec = compression in RAW_CODECS
        for kind, (x, y) in (("image", (w, h)), ("tile", (tw, th))):
            if x * y > MAX_PIXELS or (codec and x * y * spp > MAX_SAMPLES_PER_BYTE * file_size):
                return (
                    f"corrupt header: {name} declares a {x}×{y} {kind}, impossible for a file of "
                    f"{file_size} bytes"
                )
        if not (have and compression == 1 and 0 < bits <= 32 and w * h):
            continue
        need = w * h * spp * bits // 8
        if have < need:
            return (
                f"corrupt header: {name} declares {w}×{h}×{spp} uncompressed {bits}-bit samples "
                f"({need} bytes) but only {have} bytes of pixel data"
            )
        per_tile = tw * th * spp * bits // 8
        if per_tile and min(c for _, c in segments) < per_tile:
            return (
                f"corrupt header: {name} declares {tw}×{th} uncompressed tiles ({per_tile} bytes) but a "
                f"tile holds {min(c for _, c in segments)} bytes"
            )
    return None


def tiff_layout_problem(path) -> str | None:
    """:func:`data_layout_problem` of the file at ``path``, or None when it is fine or not a TIFF that
    tifffile can parse (the decoder then decides)."""
    import logging
    import os

    import tifffile

    logger = logging.getLogger("tifffile")
    old = logger.level
    logger.setLevel(logging.CRITICAL + 1)  # tifffile logs malformed tags; rawrcl reports one line itself
    try:
        with tifffile.TiffFile(path) as tif:
            return data_layout_problem(tif, os.path.getsize(path))
    except Exception:  # noqa: BLE001 - not parseable: not our call
        return None
    finally:
        logger.setLevel(old)
