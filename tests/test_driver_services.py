"""The processes a queued generation started are ended by the next one when it was killed.

The driver's record and the token in each process's environment are built as a killed ``evolve``
leaves them: a dead driver pid, and children (here: sleepers) still carrying its token.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from bench_assets.driver import services


def spawn(token: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != services.TOKEN_ENV}
    if token is not None:
        env[services.TOKEN_ENV] = token
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True
    )


def dead_pid() -> tuple[int, str]:
    """A pid that no longer runs, and the start time it had."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    started = ""
    while not started:
        started = services.start_time(proc.pid)
    proc.kill()
    proc.wait()
    return proc.pid, started


def test_a_dead_drivers_processes_are_ended_and_no_one_elses(tmp_path: Path) -> None:
    pid, started = dead_pid()
    token = f"{pid}:0123456789abcdef"
    ours = [spawn(token), spawn(token)]
    other = spawn(f"{os.getpid()}:fedcba9876543210")  # a live driver's (or no driver's) process
    bare = spawn(None)
    try:
        deadline = time.monotonic() + 10
        while len(services.carrying(token)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # /proc/<pid>/environ is readable once the child has exec'd
        services.save(
            tmp_path, services.DriverRecord(token=token, pid=pid, started=started, daemon_id="d1")
        )
        record = services.load(tmp_path)
        assert record is not None and not record.alive() and record.dead_daemon() == "d1"
        said: list[str] = []
        services.end_orphaned(tmp_path, said.append)
        for p in ours:
            assert p.wait(timeout=10) is not None
        assert other.poll() is None and bare.poll() is None, "only the dead driver's processes"
        assert len(said) == 1 and said[0].startswith("ending 2 process(es)")
    finally:
        for p in (*ours, other, bare):
            p.kill()
            p.wait()


def test_a_live_or_cleanly_ended_driver_is_left_alone(tmp_path: Path) -> None:
    token = services.new_token()
    child = spawn(token)
    try:
        live = services.DriverRecord(
            token=token, pid=os.getpid(), started=services.start_time(os.getpid()), daemon_id="d2"
        )
        services.save(tmp_path, live)
        said: list[str] = []
        services.end_orphaned(tmp_path, said.append)
        assert child.poll() is None and said == [] and live.dead_daemon() is None
        ended = live.model_copy(update={"ended": True})
        services.save(tmp_path, ended)
        services.end_orphaned(tmp_path, said.append)
        assert child.poll() is None and said == []
        assert ended.dead_daemon() == "d2", "its daemon stopped with it: its heartbeat is stale"
        reused = live.model_copy(update={"started": "1"})  # the pid now runs something else
        assert not reused.alive()
    finally:
        child.kill()
        child.wait()
