"""Reading a Claude Code ``stream-json`` session: parsing, the init check, the verdict.

Pure functions over the CLI's events, split from the adapter (:mod:`.claude_code`) that runs the
session: :func:`parse_stream` folds the events into a :class:`ParsedStream`; :func:`check_init`
compares the ``system``/``init`` event with what the arm asked for (:class:`Expectations`) before
a session is paid; :func:`judge` turns a finished stream into an outcome kind from the CLI's own
fields (turn and budget limits are valid negatives; auth, rate limit, overload and an unreachable
API are systemic, with the real cause in the detail).

Why one file over 500 lines: it is the one reader of the CLI's ``stream-json`` format, so every
rule tied to a Claude Code release (event shapes, init fields, error codes) is in this file and a
pin upgrade (``docs/claude-code-versions.md``) is reviewed here alone; parse, check and judge read
as one chain.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bench_assets.agents.base import (
    ModelUsage,
    Usage,
)
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.sandbox.process import (
    SANDBOX_HOME,
    ExecResult,
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
    mcp_servers: frozenset[str] = frozenset()
    """The arm's MCP servers: exactly these must be listed in init, none of them failed."""
    builtin_policy: Literal["forbid", "allow_if_equal"] = "forbid"
    """``agents.claude_code.builtin_skills``: what may be listed beside the arm's own skills."""
    builtin_skills: frozenset[str] = frozenset()
    """The skills this CLI release brings itself (read from an empty worktree). ``forbid``: each
    session turns them off and none may remain; ``allow_if_equal``: exactly these must remain."""


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
    if want.version is not None and version != want.version:
        return (
            f"the session runs Claude Code {version!r}, but {want.version!r} is pinned "
            "(agents.claude_code.version) and recorded in the cell identity"
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
    servers = init.get("mcp_servers")
    listed = {
        str(x.get("name")): str(x.get("status"))
        for x in (servers if isinstance(servers, list) else [])
        if isinstance(x, dict)
    }
    if set(listed) != set(want.mcp_servers):
        return (
            f"MCP servers in the session are {sorted(listed) or 'none'}, but the arm configures "
            f"{sorted(want.mcp_servers) or 'none'}"
        )
    broken = sorted(f"{n} ({st})" for n, st in listed.items() if st != "connected")
    if broken:
        return f"MCP server(s) {', '.join(broken)} did not connect"
    leaked = sorted(t for t in want.disallowed & present)
    if leaked:
        return f"disallowed tool(s) {', '.join(leaked)} are available in the session"
    skills = init.get("skills")
    names = {k for k in skills if isinstance(k, str)} if isinstance(skills, list) else set()
    problem = _skills_problem(names, want)
    if problem:
        return problem
    if want.expected_skill is not None:
        if _SKILL_TOOL not in present:
            return f"expected skill {want.expected_skill!r} needs the Skill tool, which is absent"
        if not any(skill_matches(n, want.expected_skill) for n in names):
            return (
                f"expected skill {want.expected_skill!r} is not available in the session "
                f"(init skills: {', '.join(sorted(names)) or 'none'})"
            )
    return ""


def _skills_problem(names: set[str], want: Expectations) -> str:
    """Why the skills listed in init are not the arm's (plus the allowed built-ins), or ""."""
    foreign = {n for n in names if n.rsplit(":", 1)[-1] not in want.installed_skills}
    release = f"Claude Code {want.version}" if want.version else "this Claude Code"
    if want.builtin_policy == "allow_if_equal":
        other = sorted(foreign - want.builtin_skills)
        if other:
            return (
                f"skills neither installed by the arm nor built into {release} are available: "
                f"{', '.join(other)} (user or plugin skills make arms unequal)"
            )
        missing = sorted(want.builtin_skills - names)
        if missing:
            return (
                f"built-in skill(s) {', '.join(missing)} of {release} are missing from this "
                "session; agents.claude_code.builtin_skills: allow_if_equal requires every arm "
                "to see the same built-in skills"
            )
        return ""
    if foreign:
        brought = sorted(foreign & want.builtin_skills)
        why = (
            f"; {release} brings {', '.join(brought)} and skillOverrides did not turn them off"
            if brought
            else ""
        )
        return (
            f"skills not installed by the arm are available: {', '.join(sorted(foreign))} "
            f"(bundled, built-in or user skills make arms unequal; "
            f"agents.claude_code.builtin_skills: forbid{why})"
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


def _exit_note(res: ExecResult) -> str:
    if res.returncode == 0:
        return ""
    tail = res.stderr.decode("utf-8", errors="replace").strip()[-_DETAIL_TAIL:]
    return f" (exit {res.returncode}: {tail})" if tail else f" (exit {res.returncode})"
