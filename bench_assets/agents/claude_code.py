"""The ``claude-code`` adapter: the real Claude Code CLI in headless mode.

One session is one sandboxed process::

    claude -p --input-format text --output-format stream-json --verbose --model M
        --strict-mcp-config --mcp-config '{"mcpServers":{}}' --setting-sources project
        --permission-mode MODE --disallowedTools WebSearch --disallowedTools WebFetch
        [--tools T,...] [--allowedTools T]... [--disallowedTools T]... [--max-turns N]
        [--max-budget-usd X] [--effort E]

with the prompt on standard input (never in argv, where any process could read it). The CLI's
``stream-json`` output is one JSON object per line: a ``system``/``init`` event, ``assistant`` and
``user`` events wrapping Anthropic Messages (``tool_use`` / ``tool_result`` blocks), and one
terminal ``result`` event carrying the CLI's own accounting (``total_cost_usd``, ``num_turns``,
``duration_ms``, ``usage``, ``modelUsage``, ``permission_denials``). Usage is read from that event
only; a field it does not carry stays ``None``. :func:`parse_stream` is the pure parser and
:func:`judge` the pure classifier, both testable without processes.

What every session is, whatever the arm (so arms differ only in what they claim to differ in):

* **Permissions as requested.** ``bypassPermissions`` (or ``dontAsk`` when the arm pre-approves
  tools). ``CLAUDE_CODE_SUBPROCESS_ENV_SCRUB`` is forced to ``0``: when set, the CLI silently
  forces the mode back to ``default`` and denies every un-approved write. The mode in force is
  read back from ``system/init``; a mismatch, or a permission denial of a tool the arm did not
  restrict, is an ``infra-error`` — never a valid negative with 0 files changed.
* **No bundled skills** (``CLAUDE_CODE_DISABLE_BUNDLED_SKILLS=1``): ``init.skills`` may hold only
  skills installed in the worktree's ``.claude/skills``; the ``skills: none`` baseline has none.
* **The repository's own Claude configuration.** Project settings are the only setting source
  (``--setting-sources project``: no user or local settings). A repository's
  ``.claude/settings.json`` / ``.claude/settings.local.json`` are masked with an empty ``{}``
  (read-only) because they configure the *agent* — permissions, hooks, model, environment — which
  the arm defines. Its ``CLAUDE.md`` is kept: it is repository documentation every arm reads
  alike, as a developer's Claude Code would.
* **Model-API-only egress**: the sandbox has no network; the CLI reaches the model API through
  the harness's egress proxy (:mod:`bench_assets.egress`), which holds the credential — the
  session sees only a placeholder — and holds every request until ``system/init`` has been
  checked, so a misconfigured session is stopped before a model call is paid for. Web tools are
  disallowed (``WebSearch`` runs on the API's side, ``WebFetch`` would need the network).
* **Dated model ids only** (see :func:`bench_assets.models.check_model_id`); ``init.model`` must
  equal the requested id. Tokens per model come from ``modelUsage``.

Outcomes come from the CLI's own fields: ``error_max_turns`` is ``turn-limit`` and
``error_max_budget_usd`` is ``budget-limit`` (valid negatives); an API failure — reported as
``is_error`` with ``subtype: success``, ``api_error_status`` and the assistant event's ``error`` —
is systemic, with the CLI's own message in the detail: authentication or an unreachable API is an
``infra-error``, rate limits, overload and server errors a ``session-error``.
"""

import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_assets.agents.base import (
    ModelUsage,
    SessionContext,
    SessionResult,
    Usage,
    session_sandbox,
)
from bench_assets.egress import (
    BASE_URL_ENV,
    CREDENTIAL_HEADERS,
    PLACEHOLDER_CREDENTIAL,
    ModelApiProxy,
    credential_headers,
    resolve_upstream,
)
from bench_assets.errorkinds import ErrorKind
from bench_assets.errors import ContainmentError
from bench_assets.models import ClaudeCodeAgent
from bench_assets.redact import Redactor
from bench_assets.sandbox import (
    SANDBOX_HOME,
    WORKSPACE,
    ExecResult,
    Isolation,
    Mount,
    SandboxSpec,
    run,
    sandbox_env,
    unsafe_mode,
)

EMPTY_MCP_CONFIG = '{"mcpServers":{}}'
MAX_TRANSCRIPT_BYTES = 32 * 1024 * 1024
VERSION_TIMEOUT_S = 60.0
_DETAIL_TAIL = 400
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
_VERSION_RE = re.compile(r"\d+\.\d+\.\d+[0-9A-Za-z.+\-]*")
_SKILL_TOOL = "Skill"
_SKILL_INPUT_KEYS = ("skill", "command")
SETTING_SOURCES = "project"
"""The only settings source: the worktree's (user and local settings never apply)."""
MASKED_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
"""A repository's agent configuration, masked with an empty ``{}`` in every session."""
ALWAYS_DISALLOWED = ("WebSearch", "WebFetch")
"""Tools no arm gets: they would reach the web (WebSearch through the model API itself)."""
SKILLS_DIR = ".claude/skills"
"""Where Claude Code discovers project skills (``<name>/SKILL.md``)."""
_MAX_INIT_BYTES = 1024 * 1024
_MAX_SYSTEM_EVENTS_BEFORE_INIT = 20

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
    # Set, the scrub forces the permission mode back to "default" and every un-approved write is
    # denied (issue 12, M1). It is not needed: the credential never enters the sandbox (the
    # egress proxy holds it), so there is nothing for the CLI's children to inherit.
    "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB": "0",
    # Without it every arm, the skills: none baseline included, gets ~12 bundled skills.
    "CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1",
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
    init: dict[str, Any] | None = None
    """The first ``system``/``init`` event, if any."""
    api_errors: tuple[str, ...] = ()
    """``error`` codes of assistant events (``authentication_failed``, ``rate_limit``, ...)."""

    @property
    def well_formed(self) -> bool:
        """Every line parsed, exactly one result event, nothing but system events after it."""
        return (
            self.malformed_lines == 0 and self.result_count == 1 and self.events_after_result == 0
        )

    def usage(self) -> Usage:
        """Usage exactly as the ``result`` event reports it; absent fields stay ``None``.

        Token counts are the sums over ``modelUsage`` when the CLI reports one (it covers every
        model of the session, sub-agents included, and stays right when ``usage`` does not — a
        session stopped by ``--max-budget-usd`` reports ``usage`` as zeros); otherwise they are
        the ``usage`` block's.
        """
        if self.result is None:
            return Usage()
        by_model = _model_usage(self.result.get("modelUsage"))
        raw_usage = self.result.get("usage")
        tokens = raw_usage if isinstance(raw_usage, dict) else {}
        counts = {
            name: _count(tokens.get(name))
            for name in (
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            )
        }
        if by_model:
            for name in counts:
                values = [getattr(m, name) for m in by_model.values()]
                counts[name] = None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]
        duration_ms = _number(self.result.get("duration_ms"))
        return Usage(
            **counts,
            cost_usd=_number(self.result.get("total_cost_usd")),
            turns=_count(self.result.get("num_turns")),
            duration_s=None if duration_ms is None else duration_ms / 1000.0,
            by_model=by_model or None,
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
    init: dict[str, Any] | None = None
    api_errors: list[str] = []
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
        if kind == "system" and event.get("subtype") == "init" and init is None:
            init = event
        if kind == "assistant":
            if isinstance(event.get("error"), str):
                api_errors.append(event["error"])
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
        init=init,
        api_errors=tuple(api_errors),
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


def _model_usage(raw: object) -> dict[str, ModelUsage]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, ModelUsage] = {}
    for model, entry in raw.items():
        if not isinstance(model, str) or not isinstance(entry, dict):
            continue
        out[model] = ModelUsage(
            input_tokens=_count(entry.get("inputTokens")),
            output_tokens=_count(entry.get("outputTokens")),
            cache_read_input_tokens=_count(entry.get("cacheReadInputTokens")),
            cache_creation_input_tokens=_count(entry.get("cacheCreationInputTokens")),
            cost_usd=_number(entry.get("costUSD")),
        )
    return out


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


@dataclass(frozen=True)
class Expectations:
    """What a session must be, checked against its ``system/init`` event and its result."""

    permission_mode: str
    model: str
    tools: tuple[str, ...] | None
    """Built-in tools passed with ``--tools`` (``None``: the CLI's default set)."""
    installed_skills: frozenset[str]
    """Skills present in the worktree (directory names and ``name:`` front matter)."""
    expected_skill: str | None
    disallowed: frozenset[str] = frozenset()
    """Tool names the arm (or the harness) denies."""
    restricted: frozenset[str] = frozenset()
    """Tools the arm pre-approves only with a specifier (``Bash(git log:*)``): denials expected."""
    unrestricted_mode: bool = True
    """``bypassPermissions``: no tool call may be denied except a disallowed one."""
    granted: frozenset[str] = field(default_factory=frozenset)
    """``dontAsk``: tools pre-approved outright (a denial of one of them is the harness's fault)."""
    version: str | None = None
    """The CLI version recorded in the cell identity (``--version``); init must agree."""
    api_key_source: str | None = None
    """Where the CLI must take its key from (``ANTHROPIC_API_KEY``: the proxy's placeholder)."""


def check_init(init: Mapping[str, Any] | None, want: Expectations) -> str:
    """Why the session described by ``init`` is not the one asked for ("" when it is)."""
    if init is None:
        return "the CLI printed no system/init event, so its configuration cannot be verified"
    mode = init.get("permissionMode")
    if mode != want.permission_mode:
        return (
            f"permission mode in force is {mode!r}, but {want.permission_mode!r} was requested "
            "(the CLI overrode it, e.g. because CLAUDE_CODE_SUBPROCESS_ENV_SCRUB is set); "
            "un-approved edits would be denied"
        )
    model = init.get("model")
    if model != want.model:
        return f"the CLI runs model {model!r}, but {want.model!r} was requested"
    version = init.get("claude_code_version")
    if want.version is not None and version is not None and version != want.version:
        return (
            f"the session runs Claude Code {version!r}, but {want.version!r} is recorded in the "
            "cell identity (the executable changed)"
        )
    source = init.get("apiKeySource")
    if want.api_key_source is not None and source != want.api_key_source:
        return (
            f"the CLI takes its credential from {source!r}, not from {want.api_key_source!r} "
            "(the variable the egress proxy stands behind)"
        )
    tools = init.get("tools")
    present = {t for t in tools if isinstance(t, str)} if isinstance(tools, list) else set()
    if want.tools is not None:
        missing = [t for t in want.tools if t not in present]
        if missing:
            return (
                f"tool(s) {', '.join(missing)} requested but unknown to this CLI (it drops "
                f"unknown names silently); init tools: {', '.join(sorted(present)) or 'none'}"
            )
    leaked = sorted(t for t in want.disallowed & present)
    if leaked:
        return f"disallowed tool(s) {', '.join(leaked)} are available in the session"
    skills = init.get("skills")
    names = {k for k in skills if isinstance(k, str)} if isinstance(skills, list) else set()
    foreign = sorted(n for n in names if n.rsplit(":", 1)[-1] not in want.installed_skills)
    if foreign:
        return (
            f"skills not installed by the arm are available: {', '.join(foreign)} (bundled or "
            "user skills make arms unequal)"
        )
    if want.expected_skill is not None:
        if _SKILL_TOOL not in present:
            return f"expected skill {want.expected_skill!r} needs the Skill tool, which is absent"
        if not any(skill_matches(n, want.expected_skill) for n in names):
            return (
                f"expected skill {want.expected_skill!r} is not available in the session "
                f"(init skills: {', '.join(sorted(names)) or 'none'})"
            )
    return ""


def unexpected_denials(result: Mapping[str, Any], want: Expectations) -> list[str]:
    """Tool names the CLI denied although the arm did not restrict them."""
    raw = result.get("permission_denials")
    denied = (
        [d.get("tool_name") for d in raw if isinstance(d, dict)] if isinstance(raw, list) else []
    )
    out = []
    for name in denied:
        tool = str(name)
        if tool in want.disallowed or tool in want.restricted:
            continue
        if want.unrestricted_mode or tool in want.granted:
            out.append(tool)
    return out


_AUTH_CODES = frozenset({"authentication_failed", "authentication_error", "permission_error"})
_RATE_CODES = frozenset({"rate_limit", "rate_limit_error"})
_OVERLOAD_CODES = frozenset({"overloaded", "overloaded_error"})


def _api_failure(parsed: ParsedStream) -> tuple[ErrorKind, str] | None:
    """A model API failure the CLI reported, classified, with its own message."""
    result = parsed.result or {}
    status = result.get("api_error_status")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    codes = set(parsed.api_errors)
    message = str(result.get("result") or "").strip()[:_DETAIL_TAIL]
    said = f": {message}" if message else ""
    http = f" (HTTP {status})" if status is not None else ""
    if status in (401, 403) or codes & _AUTH_CODES:
        return ErrorKind.INFRA_ERROR, f"model API authentication failed{http}{said}"
    if status == 429 or codes & _RATE_CODES:
        return ErrorKind.SESSION_ERROR, f"model API rate limit{http}{said}"
    if status == 529 or codes & _OVERLOAD_CODES:
        return ErrorKind.SESSION_ERROR, f"model API overloaded{http}{said}"
    lowered = message.lower()
    if status is None and ("unable to connect" in lowered or "connection" in lowered):
        return ErrorKind.INFRA_ERROR, f"model API unreachable{said}"
    if status is not None or codes:
        code = f" [{', '.join(sorted(codes))}]" if codes else ""
        return ErrorKind.SESSION_ERROR, f"model API error{http}{code}{said}"
    return None


def judge(
    res: ExecResult,
    parsed: ParsedStream,
    want: Expectations,
    *,
    timeout_s: float,
    max_turns: int | None = None,
    max_budget_usd: float | None = None,
    stop_reason: str = "",
) -> tuple[ErrorKind | None, str]:
    """Classify one finished session from the CLI's own fields (see module docstring)."""
    session = ErrorKind.SESSION_ERROR
    if res.stopped:
        return ErrorKind.INFRA_ERROR, f"session stopped at system/init: {stop_reason}"
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
    problem = check_init(parsed.init, want)
    if problem:
        return ErrorKind.INFRA_ERROR, problem
    denied = unexpected_denials(parsed.result, want)
    if denied:
        counts = ", ".join(f"{t} x{denied.count(t)}" for t in dict.fromkeys(denied))
        return ErrorKind.INFRA_ERROR, (
            f"the CLI denied tool calls the arm did not restrict ({counts}) in permission mode "
            f"{want.permission_mode!r}; the session did not run as configured"
        )
    subtype = parsed.result.get("subtype")
    turns = parsed.result.get("num_turns")
    if subtype == "error_max_turns":
        limit = f" of {max_turns}" if max_turns is not None else ""
        return ErrorKind.TURN_LIMIT, f"turn limit{limit} reached (num_turns {turns})"
    if subtype == "error_max_budget_usd":
        cost = _number(parsed.result.get("total_cost_usd"))
        spent = f"${cost:.4f}" if cost is not None else "an unreported amount"
        cap = f" of ${max_budget_usd:g}" if max_budget_usd is not None else ""
        return ErrorKind.BUDGET_LIMIT, f"session budget{cap} reached (spent {spent})"
    if parsed.result.get("is_error") is True or subtype != "success":
        failure = _api_failure(parsed)
        if failure is not None:
            return failure
        message = str(parsed.result.get("result") or "").strip()[:_DETAIL_TAIL]
        return session, (
            f"session ended with subtype {str(subtype)[:80]!r}"
            f" (is_error={parsed.result.get('is_error')!r}, exit {res.returncode})"
            + (f": {message}" if message else "")
        )
    if res.returncode != 0:
        return session, f"claude exited with code {res.returncode}{_exit_note(res)}"
    expected_skill = want.expected_skill
    if expected_skill and not parsed.skill_proven(expected_skill):
        if parsed.skill_requested(expected_skill):
            return ErrorKind.SKILL_NOT_INVOKED, (
                f"skill {expected_skill!r} was requested but no successful tool_result followed"
            )
        return ErrorKind.SKILL_NOT_INVOKED, f"skill {expected_skill!r} was never invoked"
    return None, ""


def installed_skills(workdir: Path) -> frozenset[str]:
    """Names of the project skills in ``workdir`` (folder names and ``name:`` front matter)."""
    root = workdir / SKILLS_DIR
    names: set[str] = set()
    if not root.is_dir():
        return frozenset()
    for skill_md in root.glob("*/SKILL.md"):
        names.add(skill_md.parent.name)
        try:
            head = skill_md.read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        match = _FRONT_MATTER_NAME.search(head)
        if match:
            names.add(match.group(1).strip().strip("\"'"))
    return frozenset(names)


_FRONT_MATTER_NAME = re.compile(r"^name:\s*(\S.*?)\s*$", re.M)


class _InitWatch:
    """Watches the live stream for ``system/init``; releases or refuses the proxy on it."""

    def __init__(self, check: Callable[[Mapping[str, Any]], str], proxy: ModelApiProxy) -> None:
        self._check = check
        self._proxy = proxy
        self._buf = b""
        self._system_events = 0
        self.decided = False
        self.problem = ""

    def __call__(self, chunk: bytes) -> bool:
        if self.decided:
            return False
        self._buf += chunk
        while b"\n" in self._buf:
            line, _, self._buf = self._buf.partition(b"\n")
            if not line.strip():
                continue
            event = _decode_line(line)
            if event is not None and event.get("type") == "system":
                if event.get("subtype") != "init":
                    self._system_events += 1
                    if self._system_events <= _MAX_SYSTEM_EVENTS_BEFORE_INIT:
                        continue
                    return self._decide("no system/init event among the first events")
                return self._decide(self._check(event))
            return self._decide("the first stream event is not system/init")
        if len(self._buf) > _MAX_INIT_BYTES:
            return self._decide("the first stream event is larger than 1 MiB")
        return False

    def _decide(self, problem: str) -> bool:
        self.decided = True
        self.problem = problem
        if problem:
            self._proxy.refuse(problem)
            return True
        self._proxy.release()
        return False


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
            "max_budget_usd": self._spec.max_budget_usd,
            "permission_mode": self.permission_mode(),
            "setting_sources": SETTING_SOURCES,
            "bundled_skills": False,
            "always_disallowed": list(ALWAYS_DISALLOWED),
            "network": "model-api",
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

    def _allowed_tools(self, expected_skill: str | None) -> list[str]:
        allowed = list(self._spec.allowed_tools)
        bases = {t.split("(", 1)[0].strip() for t in allowed}
        if allowed and expected_skill and _SKILL_TOOL not in bases:
            # An arm that expects a skill but forgot the tool would be "skill-not-invoked" for
            # the harness's reason, not the agent's.
            allowed.append(_SKILL_TOOL)
        return allowed

    def _builtin_tools(self, expected_skill: str | None) -> tuple[str, ...] | None:
        allowed = self._allowed_tools(expected_skill)
        if not allowed:
            return None
        builtins = dict.fromkeys(
            t.split("(", 1)[0].strip() for t in allowed if not t.startswith("mcp__")
        )
        return tuple(b for b in builtins if b)

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
            "--setting-sources",
            SETTING_SOURCES,
            "--permission-mode",
            self.permission_mode(),
        ]
        builtins = self._builtin_tools(ctx.expected_skill)
        if builtins is not None:
            # --allowedTools only pre-approves; --tools is what restricts the built-in set.
            args += ["--tools", ",".join(builtins)]
            for tool in self._allowed_tools(ctx.expected_skill):
                args += ["--allowedTools", tool]
        for tool in dict.fromkeys([*ALWAYS_DISALLOWED, *spec.disallowed_tools]):
            args += ["--disallowedTools", tool]
        if spec.max_turns is not None:
            args += ["--max-turns", str(spec.max_turns)]
        if spec.max_budget_usd is not None:
            args += ["--max-budget-usd", f"{spec.max_budget_usd:g}"]
        if ctx.effort:
            args += ["--effort", ctx.effort]
        return args

    def expectations(self, ctx: SessionContext) -> Expectations:
        """What this arm's session must look like (for :func:`check_init` and :func:`judge`)."""
        allowed = self._allowed_tools(ctx.expected_skill)
        granted = frozenset(t.strip() for t in allowed if "(" not in t)
        restricted = frozenset(t.split("(", 1)[0].strip() for t in allowed if "(" in t) - granted
        disallowed = frozenset(
            t.split("(", 1)[0].strip() for t in [*ALWAYS_DISALLOWED, *self._spec.disallowed_tools]
        )
        return Expectations(
            permission_mode=self.permission_mode(),
            model=ctx.model,
            tools=self._builtin_tools(ctx.expected_skill),
            installed_skills=installed_skills(ctx.workdir),
            expected_skill=ctx.expected_skill,
            disallowed=disallowed,
            restricted=restricted,
            unrestricted_mode=not allowed,
            granted=granted,
            version=self._cli_version(),
            api_key_source="ANTHROPIC_API_KEY" if "ANTHROPIC_API_KEY" in ctx.secrets_env else None,
        )

    def _env(
        self,
        runtime: _Runtime,
        passed: Mapping[str, str],
        effort: str | None,
        *,
        bypass: bool,
    ) -> dict[str, str]:
        extra = dict(passed)
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
            return _infra(runtime)
        version = self._cli_version()
        redactor = Redactor(ctx.secrets_env.values())
        credentials = credential_headers(ctx.secrets_env)
        if not credentials:
            names = " or ".join(CREDENTIAL_HEADERS)
            return _infra(
                f"no model API credential: set {names} on the host and name it in the arm's "
                "env list",
                version,
            )
        try:
            upstream = resolve_upstream(self._spec.api_base_url, self._spec.env, ctx.secrets_env)
        except ContainmentError as e:
            return _infra(redactor.text(str(e)), version)
        # Inside, credentials are placeholders (the proxy adds the real ones) and the base URL
        # is the relay's; everything else the arm names passes through.
        passed = {
            name: PLACEHOLDER_CREDENTIAL if name in CREDENTIAL_HEADERS else value
            for name, value in ctx.secrets_env.items()
            if name != BASE_URL_ENV
        }
        want = self.expectations(ctx)
        bypass = self.permission_mode() == "bypassPermissions"
        try:
            with (
                tempfile.TemporaryDirectory(prefix="wfbench-mask-") as mask_dir,
                ModelApiProxy(
                    upstream, credentials=credentials, hold=True, timeout_s=ctx.timeout_s
                ) as proxy,
            ):
                watch = _InitWatch(lambda init: check_init(init, want), proxy)
                res = run(
                    self.argv(str(runtime.exe), ctx),
                    isolation=Isolation.SANDBOX,
                    env=self._env(runtime, passed, ctx.effort, bypass=bypass),
                    timeout_s=ctx.timeout_s,
                    stdin=ctx.prompt.encode("utf-8"),
                    max_output=MAX_TRANSCRIPT_BYTES,
                    sandbox=session_sandbox(
                        ctx,
                        network=False,
                        extra=(*runtime.mounts, *_settings_masks(ctx.workdir, Path(mask_dir))),
                        model_api=proxy.channel(),
                    ),
                    watch=watch,
                )
                egress = proxy.stats()
                forwarded = proxy.forwarded
        except (ContainmentError, OSError, ValueError) as e:
            return _infra(redactor.text(f"{type(e).__name__}: {e}"), version)
        parsed = parse_stream(res.stdout)
        stop = watch.problem
        if res.stopped:
            stop += f" ({egress})"
        kind, detail = judge(
            res,
            parsed,
            want,
            timeout_s=ctx.timeout_s,
            max_turns=self._spec.max_turns,
            max_budget_usd=self._spec.max_budget_usd,
            stop_reason=stop,
        )
        if kind in (ErrorKind.INFRA_ERROR, ErrorKind.SESSION_ERROR) and not res.stopped:
            detail += f" [{egress}]"
        usage = parsed.usage()
        if parsed.result is None and forwarded == 0 and not unsafe_mode():
            # No report, but the proxy is the only way to the model API (in the sandbox): nothing
            # forwarded, nothing spent. A stop at init is free, which the spend cap relies on.
            usage = usage.model_copy(update={"cost_usd": 0.0})
        return SessionResult(
            ok=kind is None,
            usage=usage,
            error_kind=kind,
            error_detail=redactor.text(detail),
            session_ids=parsed.session_ids,
            transcript=res.stdout,
            agent_version=version,
            wall_s=res.duration_s,
        )


def _infra(detail: str, version: str | None = None) -> SessionResult:
    # Returned before the CLI could reach the egress proxy, the only way to the model API: the
    # session provably spent nothing (the generation's spend cap relies on it).
    return SessionResult(
        ok=False,
        usage=Usage(cost_usd=0.0),
        error_kind=ErrorKind.INFRA_ERROR,
        error_detail=detail,
        agent_version=version,
    )


def _settings_masks(workdir: Path, private: Path) -> tuple[Mount, ...]:
    """Read-only ``{}`` over each repository settings file that exists (see module docstring).

    The ``{}`` lives in ``private``, a host folder the sandbox cannot reach any other way (in the
    writable scratch folder the agent could rewrite the mask through its second path).
    """
    present = [rel for rel in MASKED_SETTINGS if (workdir / rel).is_file()]
    if not present:
        return ()
    empty = private / "empty-settings.json"
    empty.write_text("{}\n", encoding="utf-8")
    os.chmod(empty, 0o444)
    return tuple(Mount(empty, f"{WORKSPACE}/{rel}", writable=False) for rel in present)


def _exit_note(res: ExecResult) -> str:
    if res.returncode == 0:
        return ""
    tail = res.stderr.decode("utf-8", errors="replace").strip()[-_DETAIL_TAIL:]
    return f" (exit {res.returncode}: {tail})" if tail else f" (exit {res.returncode})"
