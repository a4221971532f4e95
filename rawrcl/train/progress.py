"""Training progress on stderr: a live bar on a terminal, plain lines in a log file.

A run sent to a file (``rawrcl adapt … > log 2>&1``, a batch job) gets one line every ``LINES_EVERY`` of
its steps — step, loss, speed, time left — instead of nothing for the half hour a blind-spot run takes.
"""

from __future__ import annotations

import sys
import time

#: Fraction of a run's steps between two plain progress lines.
LINES_EVERY = 0.1


def format_duration(seconds: float) -> str:
    """``'45 s'``, ``'12 min'``, ``'2.3 h'``: a remaining time, rounded for reading."""
    if seconds < 90:
        return f"{max(seconds, 0.0):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Progress of steps ``start+1 … steps``.

    mode : ``"bar"`` (tqdm, with the loss), ``"lines"`` (a line at each ``LINES_EVERY`` of the steps and at
        the last) or ``"off"``.
    """

    def __init__(self, mode: str, steps: int, start: int, desc: str = "train") -> None:
        if mode not in ("bar", "lines", "off"):
            raise ValueError(f"unknown progress mode {mode!r}")
        self.mode = mode if steps > start else "off"
        self.steps, self.start, self.desc = steps, start, desc
        self._bar = None
        self._t0 = time.perf_counter()
        self._every = max(1, round(steps * LINES_EVERY))
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=steps, initial=start, desc=desc, dynamic_ncols=True)

    def update(self, step: int, loss: float) -> None:
        """Step ``step`` (1-based, after it ran) ended with loss ``loss``."""
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{loss:.4g}")
        elif self.mode == "lines" and (step % self._every == 0 or step == self.steps):
            done = step - self.start
            rate = done / max(time.perf_counter() - self._t0, 1e-9)
            left = (self.steps - step) / rate
            print(
                f"{self.desc}: step {step}/{self.steps} ({100 * step / self.steps:.0f} %), loss {loss:.4g}, "
                f"{rate:.2f} steps/s, {format_duration(left)} left",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def progress_mode(progress: bool | None) -> str:
    """The mode of a ``progress`` option: True → bar, False → off, None → bar on a terminal, else lines."""
    if progress is None:
        return "bar" if sys.stderr.isatty() else "lines"
    return "bar" if progress else "off"
