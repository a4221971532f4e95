"""One training run per run directory: the lock file ``<run_dir>/run.lock``.

The lock file holds its owner as JSON (``pid``, ``host``, ``started``, ``command``). It is held with an
exclusive ``flock`` (POSIX) for the life of the run, so the kernel releases it when the owner dies, even by
SIGKILL; a second run on the same folder finds the lock held and refuses with one line naming the owner. A
lock file whose lock is free but which still names an owner was left by a run that died: it is taken over
with one warning. Where ``flock`` is unavailable (Windows, some network file systems) the file is created
exclusively instead, and a lock naming a process of this host that no longer exists is taken over.

The owner removes the file when the run ends (normally or with an error), and the run directory too when
the lock created it and the run wrote nothing into it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

from rawrcl.errors import RawrclError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = "run.lock"

__all__ = ["LOCK_NAME", "RunLock", "check_unlocked"]


def _host() -> str:
    return socket.gethostname()


def _alive(pid: int) -> bool:
    """True when process ``pid`` exists on this machine (or cannot be probed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _read_owner(path: Path) -> dict | None:
    """The owner recorded in a lock file: dict with pid/host/started/command, {} when unreadable or
    empty, None when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict | None) -> str:
    if not owner:
        return "owner unknown"
    started = owner.get("started")
    when = ""
    if isinstance(started, (int, float)):
        when = ", started " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}{when}"


class RunLock:
    """Exclusive lock of ``run_dir`` (created when missing); use as a context manager or call
    :meth:`acquire` / :meth:`release`.

    :meth:`acquire` raises :class:`RawrclError` (one line, naming the owner) when another live run holds
    the folder, and warns once when it takes over the lock of a run that died.
    """

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None
        self._held = False
        self._made_dir = False  # acquire created run_dir: release removes it again when still empty

    def _busy(self, owner: dict | None, hint: str = "") -> RawrclError:
        return RawrclError(
            f"{self.run_dir}: another run is using this run directory ({_describe(owner)}); wait for it to "
            f"finish or use another --out{hint}"
        )

    def _record(self) -> bytes:
        owner = {
            "pid": os.getpid(),
            "host": _host(),
            "started": time.time(),
            "command": " ".join(sys.argv),
        }
        return (json.dumps(owner) + "\n").encode()

    def _took_over(self, owner: dict) -> None:
        warnings.warn(
            f"{self.path}: took over the lock of a run that is no longer running ({_describe(owner)})",
            stacklevel=4,
        )

    def acquire(self) -> RunLock:
        if self._held:
            return self
        try:
            self._made_dir = not self.run_dir.exists()
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RawrclError(f"{self.run_dir}: cannot create the run directory ({exc.strerror})") from None
        if fcntl is not None:
            for _ in range(20):
                done = self._try_flock()
                if done is not None:
                    if done:
                        return self
                    break  # flock unsupported here: exclusive creation instead
        self._acquire_exclusive()
        return self

    def _try_flock(self) -> bool | None:
        """True: locked; False: flock unsupported on this file system; None: the file was replaced
        under us (try again). Raises when another process holds the lock."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RawrclError(f"{self.path}: cannot create the lock file ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._busy(_read_owner(self.path)) from None
        except OSError:
            os.close(fd)
            return False
        try:
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the previous owner removed the file between our open and flock
            os.close(fd)
            return None
        owner = _read_owner(self.path)
        if owner:
            self._took_over(owner)
        os.ftruncate(fd, 0)
        os.pwrite(fd, self._record(), 0)
        self._fd, self._held = fd, True
        return True

    def _acquire_exclusive(self) -> None:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = _read_owner(self.path)
                if owner is None:
                    continue  # removed meanwhile
                pid = owner.get("pid")
                if owner.get("host") == _host() and isinstance(pid, int) and not _alive(pid):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path)
                    self._took_over(owner)
                    continue
                raise self._busy(owner, f" (if no run is going, delete {self.path})") from None
            except OSError as exc:
                raise RawrclError(f"{self.path}: cannot create the lock file ({exc.strerror})") from None
            os.write(fd, self._record())
            self._fd, self._held = fd, True
            return
        raise self._busy(_read_owner(self.path))

    def release(self) -> None:
        """Remove the lock file and release the lock (a no-op when not held)."""
        if not self._held:
            return
        self._held = False
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still locked: nobody can take a lock on the old file
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing releases the flock
            self._fd = None
        if self._made_dir:  # a run that failed before writing anything leaves no empty folder behind
            with contextlib.suppress(OSError):
                self.run_dir.rmdir()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def check_unlocked(run_dir: str | os.PathLike) -> None:
    """Raise :class:`RawrclError` when a live run holds ``run_dir`` (before deleting or replacing it)."""
    with RunLock(run_dir) if Path(run_dir).is_dir() else contextlib.nullcontext():
        pass
