"""The ``claude-code`` adapter: the real Claude Code CLI in headless mode.

One session is one sandboxed process::

    claude -p --input-format text --output-format stream-json --verbose --model M
        --strict-mcp-config --mcp-config '{"mcpServers":{}}' --permission-mode MODE
        [--tools T,...] [--allowedTools T]... [--disallowedTools T]... [--max-turns N] [--effort E]

with the prompt on standard input (never in argv, where any process could read it). The CLI's
``stream-json`` output is one JSON object per line: a ``system``/``init`` event, ``assistant`` and
``user`` events wrapping Anthropic Messages (``tool_use`` / ``tool_result`` blocks), and one
terminal ``result`` event carrying the CLI's own accounting (``total_cost_usd``, ``num_turns``,
``duration_ms``, ``usage``). Usage is read from that event only; a field it does not carry stays
``None``. :func:`parse_stream` is the pure parser, testable without processes.
"""

import json
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_assets.agents.base import SessionContext, SessionResult, Usage, session_sandbox
from bench_assets.errorkinds import ErrorKind
from bench_assets.errors import ContainmentError
from bench_assets.models import ClaudeCodeAgent
from bench_assets.redact import Redactor
from bench_assets.sandbox import (
    SANDBOX_HOME,
    ExecResult,
    Isolation,
    Mount,
    SandboxSpec,
    run,
    sandbox_env,
)

EMPTY_MCP_CONFIG = '{"mcpServers":{}}'
MAX_TRANSCRIPT_BYTES = 32 * 1024 * 1024
VERSION_TIMEOUT_S = 60.0
_DETAIL_TAIL = 400
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
_VERSION_RE = re.compile(r"\d+\.\d+\.\d+[0-9A-Za-z.+\-]*")
_SKILL_TOOL = "Skill"
_SKILL_INPUT_KEYS = ("skill", "command")

# Fixed settings for every session; they override anything an arm passes under the same name.
_SESSION_ENV = {
    "HOME": SANDBOX_HOME,
    "USER": "agent",
    "LOGNAME": "agent",
    "TMPDIR": "/tmp",
    "XDG_CONFIG_HOME": f"{SANDBOX_HOME}/.config",
    "XDG_CACHE_HOME": f"{SANDBOX_HOME}/.cache",
    "XDG_STATE_HOME": f"{SANDBOX_HOME}/.local/state",
    "CLAUDE_CONFIG_DIR": f"{SANDBOX_HOME}/.claude",
    "CI": "1",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    # Bash/MCP/hook children of the CLI do not inherit the model credentials.
    "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB": "1",
}


@dataclass(frozen=True)
class SkillInvocation:
    """One ``Skill`` tool call found in the stream."""

    tool_use_id: str
    skill: str
    """The skill named in the tool input, normalized (see :func:`normalize_skill`)."""
    event_index: int
    result_ok: bool | None
    """``True``/``False`` from the first later ``tool_result`` for this id; ``None`` if none."""


@dataclass(frozen=True)
class ParsedStream:
    """What :func:`parse_stream` found in a ``stream-json`` transcript."""

    events: tuple[dict[str, Any], ...]
    result: dict[str, Any] | None
    """The first terminal ``result`` event, if any."""
    result_count: int
    malformed_lines: int
    """Lines that are not a UTF-8 JSON object (blank lines are not counted)."""
    events_after_result: int
    """Non-``system`` events after the first ``result`` event (the stream should end there)."""
    session_ids: tuple[str, ...]
    skill_invocations: tuple[SkillInvocation, ...]

    @property
    def well_formed(self) -> bool:
        """Every line parsed, exactly one result event, nothing but system events after it."""
        return (
            self.malformed_lines == 0 and self.result_count == 1 and self.events_after_result == 0
        )

    def usage(self) -> Usage:
        """Usage exactly as the ``result`` event reports it; absent fields stay ``None``."""
        if self.result is None:
            return Usage()
        raw_usage = self.result.get("usage")
        tokens = raw_usage if isinstance(raw_usage, dict) else {}
        duration_ms = _number(self.result.get("duration_ms"))
        return Usage(
            input_tokens=_count(tokens.get("input_tokens")),
            output_tokens=_count(tokens.get("output_tokens")),
            cache_read_input_tokens=_count(tokens.get("cache_read_input_tokens")),
            cache_creation_input_tokens=_count(tokens.get("cache_creation_input_tokens")),
            cost_usd=_number(self.result.get("total_cost_usd")),
            turns=_count(self.result.get("num_turns")),
            duration_s=None if duration_ms is None else duration_ms / 1000.0,
        )

    def skill_proven(self, expected: str) -> bool:
        """A ``Skill`` call naming ``expected`` was answered by a non-error ``tool_result``."""
        return any(
            inv.result_ok is True and skill_matches(inv.skill, expected)
            for inv in self.skill_invocations
        )

    def skill_requested(self, expected: str) -> bool:
        """A ``Skill`` call naming ``expected`` exists, whatever its result."""
        return any(skill_matches(inv.skill, expected) for inv in self.skill_invocations)


def normalize_skill(value: str) -> str:
    """The skill name in a ``Skill`` tool input: first token, without a leading ``/``."""
    parts = value.strip().split(maxsplit=1)
    return parts[0].lstrip("/") if parts else ""


def skill_matches(invoked: str, expected: str) -> bool:
    """``invoked`` names ``expected``, directly or plugin-qualified (``plugin:expected``)."""
    if not invoked or not expected:
        return False
    return invoked == expected or invoked.rsplit(":", 1)[-1] == expected


def parse_stream(data: bytes) -> ParsedStream:
    """Parse Claude Code ``--output-format stream-json`` output (one JSON object per line).

    Args:
        data: the raw standard output of the CLI.

    Returns:
        The events in order, the terminal result event, counts of anomalies, the distinct
        session ids and every ``Skill`` invocation with the outcome of its ``tool_result``.
    """
    events: list[dict[str, Any]] = []
    malformed = 0
    for raw_line in data.splitlines():
        if not raw_line.strip():
            continue
        event = _decode_line(raw_line)
        if event is None:
            malformed += 1
        else:
            events.append(event)

    result: dict[str, Any] | None = None
    result_count = 0
    after_result = 0
    session_ids: list[str] = []
    calls: dict[str, tuple[str, int]] = {}
    outcomes: dict[str, bool] = {}
    for index, event in enumerate(events):
        sid = event.get("session_id")
        if isinstance(sid, str) and sid and sid not in session_ids:
            session_ids.append(sid)
        kind = event.get("type")
        if kind == "result":
            result_count += 1
            if result is None:
                result = event
            continue
        if result is not None and kind != "system":
            after_result += 1
        if kind == "assistant":
            for block in _content_blocks(event):
                _note_skill_call(block, index, calls)
        elif kind == "user":
            for block in _content_blocks(event):
                _note_tool_result(block, index, calls, outcomes)

    invocations = tuple(
        SkillInvocation(
            tool_use_id=tool_id,
            skill=skill,
            event_index=index,
            result_ok=outcomes.get(tool_id),
        )
        for tool_id, (skill, index) in calls.items()
    )
    return ParsedStream(
        events=tuple(events),
        result=result,
        result_count=result_count,
        malformed_lines=malformed,
        events_after_result=after_result,
        session_ids=tuple(session_ids),
        skill_invocations=invocations,
    )


def _decode_line(raw_line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw_line.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _content_blocks(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def _note_skill_call(
    block: Mapping[str, Any], index: int, calls: dict[str, tuple[str, int]]
) -> None:
    if block.get("type") != "tool_use" or block.get("name") != _SKILL_TOOL:
        return
    tool_id = block.get("id")
    tool_input = block.get("input")
    if not isinstance(tool_id, str) or not tool_id or not isinstance(tool_input, dict):
        return
    named = next(
        (tool_input[k] for k in _SKILL_INPUT_KEYS if isinstance(tool_input.get(k), str)), None
    )
    # A reused id is ambiguous; the first call keeps it so a later one cannot borrow its result.
    if named is not None and tool_id not in calls:
        calls[tool_id] = (normalize_skill(named), index)


def _note_tool_result(
    block: Mapping[str, Any],
    index: int,
    calls: Mapping[str, tuple[str, int]],
    outcomes: dict[str, bool],
) -> None:
    if block.get("type") != "tool_result":
        return
    tool_id = block.get("tool_use_id")
    if not isinstance(tool_id, str) or tool_id not in calls or tool_id in outcomes:
        return
    if index <= calls[tool_id][1]:
        return
    outcomes[tool_id] = block.get("is_error") is not True


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")) or number < 0:
        return None
    return number


def _under(path: Path, roots: tuple[str, ...]) -> bool:
    return any(path == Path(r) or path.is_relative_to(r) for r in roots)


def _mountable(path: Path) -> bool:
    # Never expose the whole host root or the whole home folder, even read-only.
    return path != Path("/") and path != Path.home() and len(path.parts) > 2


def _shebang(path: Path) -> list[str]:
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", errors="replace")
    return line.split()


@dataclass(frozen=True)
class _Runtime:
    """How to start the CLI inside the sandbox."""

    exe: Path
    mounts: tuple[Mount, ...]
    path_prefix: tuple[str, ...]


def _resolve_runtime(executable: str) -> _Runtime | str:
    """Where the CLI lives and what to mount for it, or why it cannot be started."""
    found = shutil.which(executable)
    if found is None:
        return f"claude executable {executable!r} not found on PATH"
    exe = Path(found).resolve()
    mount_dirs: list[Path] = []
    path_prefix: list[str] = []
    if not _under(exe, _SYSTEM_TREES):
        if not _mountable(exe.parent):
            return f"claude executable {str(exe)!r} is in a folder wfbench will not mount"
        mount_dirs.append(exe.parent)
    interpreter = _interpreter_of(exe, path_prefix)
    if interpreter is not None and not _under(interpreter, _SYSTEM_TREES):
        prefix = interpreter.parent.parent
        mount_dirs.append(prefix if _mountable(prefix) else interpreter.parent)
    mounts = tuple(Mount(d, str(d)) for d in dict.fromkeys(mount_dirs) if _mountable(d))
    return _Runtime(exe=exe, mounts=mounts, path_prefix=tuple(path_prefix))


def _interpreter_of(exe: Path, path_prefix: list[str]) -> Path | None:
    words = _shebang(exe)
    if not words:
        return None
    if Path(words[0]).name != "env":
        return Path(words[0]).resolve()
    name = next((w for w in words[1:] if not w.startswith("-")), None)
    if name is None:
        return None
    # Prefer what the sandbox's own PATH finds; fall back to the host PATH and expose that dir.
    inside = shutil.which(name, path=sandbox_env()["PATH"])
    if inside is not None:
        return Path(inside).resolve()
    host = shutil.which(name)
    if host is None:
        return None
    path_prefix.append(str(Path(host).parent))
    return Path(host).resolve()


class ClaudeCodeAdapter:
    """Runs Claude Code headless in the sandbox and reads its own stream-json report."""

    name = "claude-code"

    def __init__(self, spec: ClaudeCodeAgent) -> None:
        """Bind the adapter to one arm's agent configuration.

        Args:
            spec: the arm's ``claude-code`` agent settings.
        """
        self._spec = spec
        self._lock = threading.Lock()
        self._version: str | None = None
        self._version_probed = False

    def identity(self) -> dict[str, object]:
        """The CLI version and options that make this agent what it is."""
        return {
            "adapter": self.name,
            "executable": self._spec.executable,
            "version": self._cli_version(),
            "allowed_tools": list(self._spec.allowed_tools),
            "disallowed_tools": list(self._spec.disallowed_tools),
            "max_turns": self._spec.max_turns,
        }

    def _cli_version(self) -> str | None:
        with self._lock:
            if not self._version_probed:
                self._version = self._probe_version()
                self._version_probed = True
            return self._version

    def _probe_version(self) -> str | None:
        runtime = _resolve_runtime(self._spec.executable)
        if isinstance(runtime, str):
            return None
        try:
            res = run(
                [str(runtime.exe), "--version"],
                isolation=Isolation.SANDBOX,
                env=self._env(runtime, {}, None, bypass=False),
                timeout_s=VERSION_TIMEOUT_S,
                sandbox=SandboxSpec(mounts=runtime.mounts),
            )
        except ContainmentError:
            return None
        if not res.ok:
            return None
        first = res.text().strip().splitlines()[:1]
        found = _VERSION_RE.search(first[0]) if first else None
        return found.group(0) if found else None

    def permission_mode(self) -> str:
        """``dontAsk`` when tools are pre-approved (others are denied), else ``bypassPermissions``.

        Headless sessions cannot answer permission prompts; the sandbox is the boundary.
        """
        return "dontAsk" if self._spec.allowed_tools else "bypassPermissions"

    def argv(self, exe: str, ctx: SessionContext) -> list[str]:
        """The CLI arguments for one session (the prompt is not among them: it goes on stdin)."""
        spec = self._spec
        args = [
            exe,
            "-p",
            "--input-format",
            "text",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            ctx.model,
            "--strict-mcp-config",
            "--mcp-config",
            EMPTY_MCP_CONFIG,
            "--permission-mode",
            self.permission_mode(),
        ]
        if spec.allowed_tools:
            # --allowedTools only pre-approves; --tools is what restricts the built-in set.
            builtins = dict.fromkeys(
                t.split("(", 1)[0].strip() for t in spec.allowed_tools if not t.startswith("mcp__")
            )
            args += ["--tools", ",".join(b for b in builtins if b)]
            for tool in spec.allowed_tools:
                args += ["--allowedTools", tool]
        for tool in spec.disallowed_tools:
            args += ["--disallowedTools", tool]
        if spec.max_turns is not None:
            args += ["--max-turns", str(spec.max_turns)]
        if ctx.effort:
            args += ["--effort", ctx.effort]
        return args

    def _env(
        self,
        runtime: _Runtime,
        secrets: Mapping[str, str],
        effort: str | None,
        *,
        bypass: bool,
    ) -> dict[str, str]:
        extra = dict(secrets)
        extra.update(_SESSION_ENV)
        if runtime.path_prefix:
            extra["PATH"] = ":".join([*runtime.path_prefix, sandbox_env()["PATH"]])
        if effort:
            # Some CLI versions parse --effort without applying it; the variable is honoured.
            extra["CLAUDE_CODE_EFFORT_LEVEL"] = effort
        if bypass:
            # The CLI refuses bypassPermissions as uid 0 unless told it is inside a sandbox,
            # which it is (bubblewrap maps the caller's uid).
            extra["IS_SANDBOX"] = "1"
        return sandbox_env(extra)

    def run(self, ctx: SessionContext) -> SessionResult:
        """Run one headless session in ``ctx.workdir``; never raises for agent failures.

        Args:
            ctx: the prepared session (worktree, scratch, prompt, model, limits, credentials).

        Returns:
            The outcome, with usage taken only from the CLI's terminal ``result`` event.
        """
        runtime = _resolve_runtime(self._spec.executable)
        if isinstance(runtime, str):
            return SessionResult(
                ok=False, usage=Usage(), error_kind=ErrorKind.INFRA_ERROR, error_detail=runtime
            )
        version = self._cli_version()
        redactor = Redactor(ctx.secrets_env.values())
        bypass = self.permission_mode() == "bypassPermissions"
        spec = session_sandbox(ctx, network=True, extra=tuple(runtime.mounts))
        try:
            res = run(
                self.argv(str(runtime.exe), ctx),
                isolation=Isolation.SANDBOX,
                env=self._env(runtime, ctx.secrets_env, ctx.effort, bypass=bypass),
                timeout_s=ctx.timeout_s,
                stdin=ctx.prompt.encode("utf-8"),
                max_output=MAX_TRANSCRIPT_BYTES,
                sandbox=spec,
            )
        except ContainmentError as e:
            return SessionResult(
                ok=False,
                usage=Usage(),
                error_kind=ErrorKind.INFRA_ERROR,
                error_detail=redactor.text(str(e)),
                agent_version=version,
            )
        parsed = parse_stream(res.stdout)
        kind, detail = _judge(res, parsed, ctx.timeout_s, ctx.expected_skill)
        return SessionResult(
            ok=kind is None,
            usage=parsed.usage(),
            error_kind=kind,
            error_detail=redactor.text(detail),
            session_ids=parsed.session_ids,
            transcript=res.stdout,
            agent_version=version,
            wall_s=res.duration_s,
        )


def _judge(
    res: ExecResult, parsed: ParsedStream, timeout_s: float, expected_skill: str | None
) -> tuple[ErrorKind | None, str]:
    session = ErrorKind.SESSION_ERROR
    if res.timed_out:
        return session, f"timed out after {timeout_s:g}s"
    if res.stdout_total > len(res.stdout):
        return session, f"stream-json output exceeded {MAX_TRANSCRIPT_BYTES} bytes"
    if parsed.malformed_lines:
        return session, (
            f"malformed stream-json: {parsed.malformed_lines} line(s) are not JSON objects"
            f"{_exit_note(res)}"
        )
    if parsed.result is None:
        return session, f"no result event in stream-json output{_exit_note(res)}"
    if parsed.result_count > 1 or parsed.events_after_result:
        return session, "malformed stream-json: events after the result event"
    subtype = parsed.result.get("subtype")
    if parsed.result.get("is_error") is True or subtype != "success":
        return session, (
            f"session ended with subtype {str(subtype)[:80]!r}"
            f" (is_error={parsed.result.get('is_error')!r}, exit {res.returncode})"
        )
    if res.returncode != 0:
        return session, f"claude exited with code {res.returncode}{_exit_note(res)}"
    if expected_skill and not parsed.skill_proven(expected_skill):
        if parsed.skill_requested(expected_skill):
            return ErrorKind.SKILL_NOT_INVOKED, (
                f"skill {expected_skill!r} was requested but no successful tool_result followed"
            )
        return ErrorKind.SKILL_NOT_INVOKED, f"skill {expected_skill!r} was never invoked"
    return None, ""


def _exit_note(res: ExecResult) -> str:
    if res.returncode == 0:
        return ""
    tail = res.stderr.decode("utf-8", errors="replace").strip()[-_DETAIL_TAIL:]
    return f" (exit {res.returncode}: {tail})" if tail else f" (exit {res.returncode})"
