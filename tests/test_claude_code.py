"""The claude-code adapter, driven against a fake ``claude`` that speaks stream-json."""

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bench_assets.agents.base import SessionContext, SessionResult
from bench_assets.agents.claude_code import ClaudeCodeAdapter, parse_stream
from bench_assets.errorkinds import ErrorKind
from bench_assets.hashing import sha256_text
from bench_assets.models import ClaudeCodeAgent
from bench_assets.redact import Redactor

FAKE = Path(__file__).resolve().parent / "fake_claude" / "claude"
PROMPT = "Fix add() so that it adds. UNIQUE-PROMPT-MARKER-7f3a"
KEY = "sk-ant-test-0123456789abcdef0123456789"


def _adapter(**spec: Any) -> ClaudeCodeAdapter:
    return ClaudeCodeAdapter(ClaudeCodeAgent(adapter="claude-code", executable=str(FAKE), **spec))


def _ctx(tmp_path: Path, mode: str, **overrides: Any) -> SessionContext:
    workdir = tmp_path / "worktree"
    scratch = tmp_path / "scratch"
    workdir.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    fields: dict[str, Any] = {
        "task_id": "alpha",
        "arm": "workflow",
        "run": 1,
        "prompt": PROMPT,
        "model": "claude-sonnet-4-5",
        "effort": "medium",
        "workdir": workdir,
        "scratch": scratch,
        "timeout_s": 60.0,
        "secrets_env": {"ANTHROPIC_API_KEY": KEY, "FAKE_CLAUDE_MODE": mode},
    }
    fields.update(overrides)
    return SessionContext(**fields)


def _session(
    tmp_path: Path, mode: str, *, spec: dict[str, Any] | None = None, **ctx: Any
) -> SessionResult:
    return _adapter(**(spec or {})).run(_ctx(tmp_path, mode, **ctx))


def _lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def _skill_use(tool_id: str, key: str, value: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": "Skill", "input": {key: value}}
    return {"type": "assistant", "message": {"content": [block]}, "session_id": "s1"}


def _tool_result(tool_id: str, *, is_error: bool | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}
    if is_error is not None:
        block["is_error"] = is_error
    return {"type": "user", "message": {"content": [block]}, "session_id": "s1"}


RESULT = {"type": "result", "subtype": "success", "is_error": False, "session_id": "s1"}


# --- the pure parser ---------------------------------------------------------------------------


def test_parse_stream_reads_usage_only_from_the_result_event() -> None:
    data = _lines(
        {"type": "system", "subtype": "init", "session_id": "s1"},
        {
            "type": "assistant",
            "message": {"content": [], "usage": {"input_tokens": 999, "output_tokens": 999}},
            "session_id": "s1",
        },
        {
            **RESULT,
            "total_cost_usd": 1.5,
            "num_turns": 3,
            "duration_ms": 2500,
            "usage": {"input_tokens": 11, "output_tokens": 22, "cache_read_input_tokens": 33},
        },
    )
    parsed = parse_stream(data)
    usage = parsed.usage()
    assert parsed.well_formed
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens) == (11, 22, 33)
    assert usage.cache_creation_input_tokens is None
    assert usage.total_tokens is None
    assert (usage.cost_usd, usage.turns, usage.duration_s) == (1.5, 3, 2.5)


def test_parse_stream_without_result_has_unknown_usage_and_counts_garbage() -> None:
    data = _lines({"type": "system", "subtype": "init", "session_id": "a"}) + b"garbage\n[1]\n\n"
    parsed = parse_stream(data + b'{"x": NaN}\n' + b"\xff\xfe\n")
    assert parsed.result is None
    assert parsed.malformed_lines == 4
    assert not parsed.well_formed
    assert parsed.usage().input_tokens is None and parsed.usage().cost_usd is None


def test_parse_stream_collects_distinct_session_ids_in_order() -> None:
    data = _lines(
        {"type": "system", "session_id": "a"},
        {"type": "assistant", "message": {"content": []}, "session_id": "b"},
        {"type": "user", "message": {"content": []}, "session_id": "a"},
        {**RESULT, "session_id": "b"},
    )
    assert parse_stream(data).session_ids == ("a", "b")


@pytest.mark.parametrize("key", ["skill", "command"])
@pytest.mark.parametrize("value", ["work", "/work", "work some args", "plugin:work"])
def test_skill_proof_accepts_both_input_keys_and_normal_forms(key: str, value: str) -> None:
    parsed = parse_stream(_lines(_skill_use("t1", key, value), _tool_result("t1"), RESULT))
    assert parsed.skill_proven("work")
    assert not parsed.skill_proven("plan")


def test_skill_proof_needs_a_later_non_error_result_for_the_same_id() -> None:
    def proven(*events: dict[str, Any]) -> bool:
        return parse_stream(_lines(*events, RESULT)).skill_proven("work")

    assert proven(_skill_use("t1", "skill", "work"), _tool_result("t1", is_error=False))
    assert not proven(_skill_use("t1", "skill", "work"))
    assert not proven(_skill_use("t1", "skill", "work"), _tool_result("t1", is_error=True))
    assert not proven(_skill_use("t1", "skill", "work"), _tool_result("t2"))
    assert not proven(_tool_result("t1"), _skill_use("t1", "skill", "work"))
    other_tool = {
        "type": "assistant",
        "message": {
            "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"skill": "work"}}
            ]
        },
    }
    assert not proven(other_tool, _tool_result("t1"))


def test_events_after_the_result_make_the_stream_malformed() -> None:
    parsed = parse_stream(
        _lines(RESULT, {"type": "system", "subtype": "x"}, {"type": "assistant", "message": {}})
    )
    assert parsed.events_after_result == 1 and not parsed.well_formed


# --- argv and identity -------------------------------------------------------------------------


def test_argv_carries_the_headless_flags_and_never_the_prompt(tmp_path: Path) -> None:
    adapter = _adapter(
        allowed_tools=["Read", "Bash(git log:*)", "Skill"],
        disallowed_tools=["WebFetch"],
        max_turns=5,
    )
    ctx = _ctx(tmp_path, "ok")
    argv = adapter.argv("claude", ctx)
    assert argv[:2] == ["claude", "-p"]
    joined = " ".join(argv)
    for piece in (
        "--output-format stream-json --verbose",
        "--model claude-sonnet-4-5",
        '--strict-mcp-config --mcp-config {"mcpServers":{}}',
        "--permission-mode dontAsk",
        "--tools Read,Bash,Skill",
        "--allowedTools Bash(git log:*)",
        "--disallowedTools WebFetch",
        "--max-turns 5",
        "--effort medium",
    ):
        assert piece in joined
    assert PROMPT not in joined
    assert _adapter().permission_mode() == "bypassPermissions"


def test_identity_reports_the_cli_version_once_and_the_options() -> None:
    adapter = _adapter(allowed_tools=["Read"], max_turns=9)
    ident = adapter.identity()
    assert ident == {
        "adapter": "claude-code",
        "executable": str(FAKE),
        "version": "9.9.9",
        "allowed_tools": ["Read"],
        "disallowed_tools": [],
        "max_turns": 9,
    }
    assert adapter.identity() == ident


def test_identity_version_is_none_when_the_probe_fails(tmp_path: Path) -> None:
    broken = tmp_path / "bin" / "claude"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    adapter = ClaudeCodeAdapter(ClaudeCodeAgent(adapter="claude-code", executable=str(broken)))
    assert adapter.identity()["version"] is None


# --- sessions against the fake CLI -------------------------------------------------------------


def test_ok_session_reports_usage_exactly_from_the_result_event(tmp_path: Path) -> None:
    res = _session(tmp_path, "ok", expected_skill="work")
    assert res.ok, res.error_detail
    assert res.error_kind is None
    u = res.usage
    assert (u.input_tokens, u.output_tokens) == (1234, 567)
    assert (u.cache_creation_input_tokens, u.cache_read_input_tokens) == (89, 4321)
    assert (u.cost_usd, u.turns, u.duration_s) == (0.4321, 7, 12.345)
    assert res.session_ids == ("fake-session-1",)
    assert res.agent_version == "9.9.9"
    assert res.transcript is not None and res.transcript.endswith(b"\n")
    assert parse_stream(res.transcript).result is not None
    assert res.wall_s > 0
    assert (tmp_path / "worktree" / "fake-work.txt").read_text() == "work was done\n"


def test_missing_result_fields_stay_unknown(tmp_path: Path) -> None:
    res = _session(tmp_path, "partial", expected_skill="work")
    assert res.ok, res.error_detail
    assert res.usage.input_tokens == 10 and res.usage.cache_creation_input_tokens == 0
    assert res.usage.cache_read_input_tokens is None
    assert res.usage.cost_usd is None
    assert res.usage.total_tokens is None


def test_prompt_arrives_on_stdin_not_in_argv(tmp_path: Path) -> None:
    res = _session(tmp_path, "ok")
    assert res.ok, res.error_detail
    record = json.loads((tmp_path / "worktree" / ".fake-argv.json").read_text())
    assert record["stdin_len"] == len(PROMPT.encode())
    assert record["stdin_sha256"] == sha256_text(PROMPT)
    assert all("UNIQUE-PROMPT-MARKER" not in a for a in record["argv"])
    assert record["cwd"] == "/workspace"
    assert "--effort" in record["argv"]
    assert record["scratch_writable"] is True


@pytest.mark.parametrize(
    ("mode", "fragment"),
    [
        ("fail", "error_max_turns"),
        ("malformed", "line(s) are not JSON objects"),
    ],
)
def test_failed_sessions_are_session_errors(tmp_path: Path, mode: str, fragment: str) -> None:
    res = _session(tmp_path, mode, expected_skill="work")
    assert not res.ok
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert fragment in res.error_detail
    assert len(res.error_detail) < 1000


def test_failed_session_still_reports_what_it_cost(tmp_path: Path) -> None:
    res = _session(tmp_path, "fail")
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert res.usage.cost_usd == 0.4321 and res.usage.turns == 7


def test_pre_approved_tools_session_runs_without_effort(tmp_path: Path) -> None:
    res = _session(tmp_path, "ok", spec={"allowed_tools": ["Read", "Skill"]}, effort=None)
    assert res.ok, res.error_detail
    argv = json.loads((tmp_path / "worktree" / ".fake-argv.json").read_text())["argv"]
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert argv[argv.index("--tools") + 1] == "Read,Skill"
    assert "--effort" not in argv


def test_cli_rejecting_an_option_is_a_session_error(tmp_path: Path) -> None:
    bad = _adapter()
    bad.argv = lambda exe, ctx: [exe, "-p", "--bogus"]  # type: ignore[method-assign]
    res = bad.run(_ctx(tmp_path, "ok"))
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert "unknown option '--bogus'" in res.error_detail


@pytest.mark.parametrize(
    ("mode", "fragment"),
    [("noskill", "never invoked"), ("skillerror", "no successful tool_result")],
)
def test_skill_must_be_proven(tmp_path: Path, mode: str, fragment: str) -> None:
    res = _session(tmp_path, mode, expected_skill="work")
    assert not res.ok
    assert res.error_kind is ErrorKind.SKILL_NOT_INVOKED
    assert fragment in res.error_detail
    assert res.usage.cost_usd == 0.4321


def test_skill_proof_is_for_the_expected_skill_only(tmp_path: Path) -> None:
    assert _session(tmp_path, "ok", expected_skill="work").ok
    res = _session(tmp_path, "ok", expected_skill="plan")
    assert res.error_kind is ErrorKind.SKILL_NOT_INVOKED
    assert _session(tmp_path, "noskill").ok


def test_expected_skill_comes_from_the_context_only(tmp_path: Path) -> None:
    # The caller decides (e.g. no proof for a skills="none" arm), even if the arm names one.
    assert _session(tmp_path, "noskill", spec={"expected_skill": "work"}).ok


def test_secret_in_transcript_is_removed_by_the_callers_redactor(tmp_path: Path) -> None:
    res = _session(tmp_path, "secret")
    assert res.ok, res.error_detail
    assert res.transcript is not None
    assert KEY.encode() in res.transcript
    cleaned = Redactor([KEY]).bytes(res.transcript)
    assert KEY.encode() not in cleaned
    assert parse_stream(cleaned).result is not None


def test_session_sees_only_allow_listed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_HOST_SECRET", "host-only-value-123456")
    res = _session(tmp_path, "env")
    assert res.ok, res.error_detail
    text = next(
        block["text"]
        for event in parse_stream(res.transcript or b"").events
        if event.get("type") == "assistant"
        for block in event["message"]["content"]
        if block.get("type") == "text"
    )
    env = json.loads(text)
    assert "SOME_HOST_SECRET" not in env
    assert "host-only-value-123456" not in (res.transcript or b"").decode()
    assert env["ANTHROPIC_API_KEY"] == KEY
    assert env["HOME"] == "/home/agent"
    assert env["CLAUDE_CODE_EFFORT_LEVEL"] == "medium"
    assert env["CLAUDE_CODE_SUBPROCESS_ENV_SCRUB"] == "1"


def test_hang_times_out_quickly(tmp_path: Path) -> None:
    start = time.monotonic()
    res = _session(tmp_path, "hang", timeout_s=1.0)
    assert time.monotonic() - start < 15
    assert not res.ok
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert res.error_detail == "timed out after 1s"
    assert res.session_ids == ("fake-session-1",)
    assert res.usage.cost_usd is None


def test_missing_executable_is_an_infra_error(tmp_path: Path) -> None:
    adapter = ClaudeCodeAdapter(
        ClaudeCodeAgent(adapter="claude-code", executable="no-such-claude-xyz")
    )
    res = adapter.run(_ctx(tmp_path, "ok"))
    assert not res.ok
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail == "claude executable 'no-such-claude-xyz' not found on PATH"
    assert adapter.identity()["version"] is None
