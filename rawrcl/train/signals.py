"""Stopping a training run cleanly: SIGINT/SIGTERM finish the current step, save ``last.pt`` and raise
:class:`TrainingInterrupted` (the CLI prints one line and exits 130)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rawrcl.errors import RawrclError


class TrainingInterrupted(RawrclError):
    """Training stopped by SIGINT/SIGTERM after ``last.pt`` was written at ``step``."""

    exit_code = 130

    def __init__(self, run_dir: Path, step: int, signum: int, saved: Path | None = None) -> None:
        """``run_dir``: the run to resume; ``saved``: the file written (default
        ``run_dir/checkpoints/last.pt``)."""
        self.run_dir, self.step, self.signum = run_dir, step, signum
        self.saved = saved if saved is not None else Path(run_dir) / "checkpoints" / "last.pt"
        super().__init__(
            f"{run_dir}: stopped by {signal.Signals(signum).name} at step {step}; {self.saved} is saved, "
            "continue with --resume"
        )


@contextmanager
def _stop_requests(enabled: bool) -> Iterator[list[int]]:
    """Catch SIGINT/SIGTERM for the duration: the returned list receives the signal numbers instead
    of the default action (only in the main thread of a single-process run; otherwise a no-op)."""
    got: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield got
        return
    sigs = [signal.SIGINT, signal.SIGTERM]
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)
