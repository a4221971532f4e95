"""``rawrcl bench``: the learning grid — budgets (:mod:`.protocols`), the runs (:mod:`.runner`), numbers and
figures (:mod:`.summary`), ``report.md`` (:mod:`.report`), all of it as one call (:mod:`.run`)."""

from __future__ import annotations

from rawrcl.bench.protocols import BENCH_PROTOCOLS, PRETEXTS, PROTOCOLS, ZERO_LABEL_RAW, Pretext, Protocol
from rawrcl.bench.report import write_report
from rawrcl.bench.run import run_bench
from rawrcl.bench.runner import Bench
from rawrcl.bench.summary import list_images_cached, summarise

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
