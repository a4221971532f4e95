"""Test helpers for multi-process runs: gloo ranks with a deadline, and waiting on a training run."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker: Callable, world: int, *args, timeout: float = 120) -> None:
    """Run ``worker(rank, world, port, *args)`` in ``world`` spawned processes and wait for all of them.

    spawn, not fork: forking a process whose torch thread pools already run can deadlock. The deadline
    keeps a stuck rendezvous from hanging the suite (the ranks are killed and the test fails). The port
    was free when chosen but another process may take it before rank 0 listens: on that error alone
    (EADDRINUSE) the ranks are started once more on a new port.
    """
    for attempt in (1, 2):
        ctx = mp.start_processes(
            worker, args=(world, free_port(), *args), nprocs=world, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=1):
                if time.monotonic() > deadline:
                    for proc in ctx.processes:
                        proc.kill()
                    pytest.fail(f"{world}-rank run did not finish within {timeout:.0f} s")
            return
        except mp.ProcessRaisedException as exc:
            if attempt == 2 or "EADDRINUSE" not in str(exc):
                raise


def leave_rank(tag: str, rank: int, world: int, wait: float = 60) -> None:
    """End a spawned rank without gloo teardown: mark ``{tag}.done{rank}``, wait for every rank's mark (a
    file each, no more gloo traffic), then ``os._exit(0)`` without running destructors.

    Why: gloo's teardown can abort a rank (SIGABRT, "terminate called without an active exception": a C++
    thread destroyed while joinable) — seen in CI with the TCP store and with the file store, once each,
    always after the results were written. Call it last, after the rank has written what the test reads.
    """
    open(f"{tag}.done{rank}", "w").close()
    deadline = time.monotonic() + wait
    while not all(os.path.exists(f"{tag}.done{r}") for r in range(world)) and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0)


def wait_for_steps(run: Path, n: int, timeout: float = 60) -> None:
    """Wait until the training run ``run`` has logged ``n`` lines of metrics.jsonl (or ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    m = Path(run) / "metrics.jsonl"
    while time.monotonic() < deadline:
        if m.exists() and len(m.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
