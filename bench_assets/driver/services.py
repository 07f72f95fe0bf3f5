"""The processes a queued generation starts, and ending those a killed one left behind; and
:class:`SignalPipe`, which keeps the driver's Ctrl-C when a handler's interrupt is dropped.

On the run-queue path (:class:`~bench_assets.driver.runqueue.QueueExecutor`) ``wfbench evolve``
starts processes that outlive it when it is killed with ``kill -9``: the gRPC code server its
workspace starts, the ``dagster-daemon`` it may start, the daemon's own code server and the run
workers that one launches. Dagster's idle code servers only exit after their 45 s heartbeat
timeout, a run worker runs its cell to the end, and a dead daemon's heartbeat looks healthy for
another minute (so the next generation would wait for a daemon that is gone).

So every process of a generation carries a token: :data:`TOKEN_ENV` = ``<driver pid>:<random>``
in its environment, set before any of them starts (children inherit it). The token and the
daemon's id are written to :class:`DriverRecord` (``<DAGSTER_HOME>/wfbench-driver.json``). The
next generation (holding the writer lock, so no other driver is alive) reads it first
(:func:`end_orphaned`): when the driver that wrote it is gone without ending, every process
whose environment carries that exact token is ended — by pid, SIGTERM then SIGKILL — and a
heartbeat of the daemon it recorded is never taken for a live daemon
(:meth:`DriverRecord.dead_daemon`). Linux only (``/proc``), as the sandbox is.
"""

import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bench_assets.kernel.fsutil import atomic_write_json

TOKEN_ENV = "WFBENCH_DRIVER"
"""Environment variable naming the generation driver a process belongs to."""
RECORD_NAME = "wfbench-driver.json"
GRACE_S = 5.0


class DriverRecord(BaseModel):
    """The last queued generation driver of an instance and what it started."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    token: str
    """The value of :data:`TOKEN_ENV` in every process it started."""
    pid: int
    started: str
    """The driver process's start time (``/proc/<pid>/stat``): a reused pid is not the driver."""
    daemon_id: str | None = None
    """The id the daemon it started heartbeats with (``None``: it started none, or not yet)."""
    ended: bool = False
    """It stopped what it started (a clean exit)."""

    def dead_daemon(self) -> str | None:
        """The id of a daemon this driver started that is no longer running, if any."""
        return self.daemon_id if self.ended or not self.alive() else None

    def alive(self) -> bool:
        """The driver process still runs."""
        return _alive(self.pid) and start_time(self.pid) == self.started


def record_path(instance_root: str | Path) -> Path:
    """Where an instance's :class:`DriverRecord` is kept."""
    return Path(instance_root) / RECORD_NAME


def load(instance_root: str | Path) -> DriverRecord | None:
    """The instance's driver record; ``None`` when there is none or it cannot be read."""
    path = record_path(instance_root)
    try:
        return DriverRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def save(instance_root: str | Path, record: DriverRecord) -> None:
    """Write the driver record (atomically)."""
    atomic_write_json(record_path(instance_root), record.model_dump(mode="json"))


def new_token() -> str:
    """A token for a driver starting now in this process."""
    return f"{os.getpid()}:{secrets.token_hex(8)}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _stat(pid, 3) not in ("", "Z")


def _stat(pid: int, field: int) -> str:
    """Field ``field`` (1-based, as in proc(5)) of ``/proc/<pid>/stat``; ``""`` if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    rest = stat.rsplit(")", 1)[-1].split()  # fields 3.. (the name may hold spaces)
    return rest[field - 3] if ")" in stat and 0 <= field - 3 < len(rest) else ""


def start_time(pid: int) -> str:
    """The start time of a process (``/proc/<pid>/stat`` field 22)."""
    return _stat(pid, 22)


def carrying(token: str) -> list[int]:
    """Pids of the live processes whose environment holds ``TOKEN_ENV=token`` (not this one)."""
    want = f"{TOKEN_ENV}={token}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if want in env.split(b"\0") and _alive(int(entry.name)):
            out.append(int(entry.name))
    return sorted(out)


def end(pids: list[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM each process, then SIGKILL those still alive after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if not any(_alive(p) for p in pids):
                return
            time.sleep(0.1)


def end_orphaned(instance_root: str | Path, progress: Callable[[str], None]) -> DriverRecord | None:
    """End what the instance's last queued driver started, if it died without ending it.

    Call only while holding the writer lock (no other driver is alive). Returns the record read
    (its :meth:`~DriverRecord.dead_daemon` tells which heartbeat to distrust), or ``None``.
    """
    record = load(instance_root)
    if record is None or record.ended or record.alive():
        return record
    pids = carrying(record.token)
    if pids:
        progress(
            f"ending {len(pids)} process(es) (code servers, daemon, run workers) left by an "
            f"interrupted generation (driver pid {record.pid})"
        )
        end(pids)
    return record


class SignalPipe:
    """Every signal with a Python handler, also written to a pipe (``signal.set_wakeup_fd``).

    A handler's ``KeyboardInterrupt`` can be lost: Dagster defers it during an in-process run and
    drops one that arrives after its last checkpoint, and one raised inside a garbage-collection
    callback is printed and dropped. The pipe keeps the signal whoever's handler ran, so the
    caller can raise it at a safe point. Only the main thread receives signals; elsewhere the
    pipe is never opened and :meth:`interrupted` is always false.
    """

    def __init__(self) -> None:
        self._fds: tuple[int, int, int] | None = None  # read fd, write fd, previous wakeup fd

    def open(self) -> "SignalPipe":
        if threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._fds = (r, w, signal.set_wakeup_fd(w, warn_on_full_buffer=False))
        return self

    def interrupted(self) -> bool:
        """Whether Ctrl-C or SIGTERM arrived since the pipe opened (or was last read)."""
        if self._fds is None:
            return False
        try:
            got = os.read(self._fds[0], 4096)
        except BlockingIOError:
            return False
        return signal.SIGINT in got or signal.SIGTERM in got

    def close(self) -> None:
        if self._fds is not None:
            r, w, previous = self._fds
            signal.set_wakeup_fd(previous)
            os.close(r)
            os.close(w)
            self._fds = None
