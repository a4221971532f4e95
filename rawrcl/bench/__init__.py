"""``rawrcl bench``: the learning grid (protocols, runs, report)."""

from __future__ import annotations

from rawrcl.bench.runner import (
    BENCH_PROTOCOLS,
    PRETEXTS,
    PROTOCOLS,
    ZERO_LABEL_RAW,
    Bench,
    Pretext,
    Protocol,
    list_images_cached,
    run_bench,
    summarise,
    write_report,
)

__all__ = [
    "Bench",
    "BENCH_PROTOCOLS",
    "list_images_cached",
    "Pretext",
    "PRETEXTS",
    "Protocol",
    "PROTOCOLS",
    "run_bench",
    "summarise",
    "write_report",
    "ZERO_LABEL_RAW",
]
