"""The claude-code adapter: the pure parser and judge against streams recorded from the real CLI
(``tests/data/claude_streams``), and whole sessions against a fake ``claude`` that speaks
stream-json. Real-CLI sessions are in ``test_claude_code_real.py``."""

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bench_assets.agents.base import SessionContext, SessionResult
from bench_assets.agents.claude_code import (
    ClaudeCodeAdapter,
    Expectations,
    judge,
    parse_stream,
)
from bench_assets.config.models import ClaudeCodeAgent, ClaudeCodeConfig
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded, is_systemic, is_valid_negative
from bench_assets.kernel.hashing import sha256_text
from bench_assets.sandbox.egress import PLACEHOLDER_CREDENTIAL
from bench_assets.sandbox.process import ExecResult
from bench_assets.sandbox.redact import Redactor

FAKE = Path(__file__).resolve().parent / "fake_claude" / "claude"
STREAMS = Path(__file__).resolve().parent / "data" / "claude_streams"
MODEL = "claude-sonnet-4-5-20250929"
PROMPT = "Fix add() so that it adds. UNIQUE-PROMPT-MARKER-7f3a"
KEY = "sk-ant-test-0123456789abcdef0123456789"


FAKE_VERSION = "9.9.9"
"""What the fake CLI answers to --version and reports in init: the pin of these tests."""
PIN = ClaudeCodeConfig(version=FAKE_VERSION)


def _adapter(cli: ClaudeCodeConfig = PIN, **spec: Any) -> ClaudeCodeAdapter:
    agent = ClaudeCodeAgent(adapter="claude-code", executable=str(FAKE), **spec)
    return ClaudeCodeAdapter(agent, cli=cli)


def _ctx(tmp_path: Path, mode: str, **overrides: Any) -> SessionContext:
    workdir = tmp_path / "worktree"
    scratch = tmp_path / "scratch"
    workdir.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    skill = workdir / ".claude" / "skills" / "work" / "SKILL.md"
    skill.parent.mkdir(parents=True, exist_ok=True)
    skill.write_text("---\nname: work\n---\nDo the work.\n")
    fields: dict[str, Any] = {
        "task_id": "alpha",
        "arm": "workflow",
        "run": 1,
        "prompt": PROMPT,
        "model": MODEL,
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
        f"--model {MODEL}",
        '--strict-mcp-config --mcp-config {"mcpServers":{}}',
        "--setting-sources project",
        "--permission-mode dontAsk",
        "--tools Read,Bash,Skill",
        "--allowedTools Bash(git log:*)",
        "--disallowedTools WebSearch --disallowedTools WebFetch",
        "--max-turns 5",
        "--effort medium",
    ):
        assert piece in joined
    assert joined.count("--disallowedTools WebFetch") == 1
    assert PROMPT not in joined
    assert "--max-budget-usd" not in joined
    assert _adapter().permission_mode() == "bypassPermissions"
    budget = _adapter(max_budget_usd=0.75).argv("claude", ctx)
    assert budget[budget.index("--max-budget-usd") + 1] == "0.75"


def test_identity_is_the_pinned_release_and_the_options_and_needs_no_cli() -> None:
    """The version in the identity is the pin, never a probe: planning needs no CLI at all."""
    adapter = _adapter(allowed_tools=["Read"], max_turns=9)
    ident = adapter.identity()
    assert ident == {
        "adapter": "claude-code",
        "executable": str(FAKE),
        "version": FAKE_VERSION,
        "allowed_tools": ["Read"],
        "disallowed_tools": [],
        "max_turns": 9,
        "max_budget_usd": None,
        "permission_mode": "dontAsk",
        "setting_sources": "project",
        "builtin_skills": {"policy": "forbid"},
        "always_disallowed": ["WebSearch", "WebFetch"],
        "network": "model-api",
    }
    missing = ClaudeCodeAdapter(
        ClaudeCodeAgent(adapter="claude-code", executable="no-such-claude-xyz"),
        cli=ClaudeCodeConfig(version="2.1.332"),
    )
    managed = ClaudeCodeAdapter(
        ClaudeCodeAgent(adapter="claude-code"), cli=ClaudeCodeConfig(version="2.1.400")
    )
    assert missing.identity()["version"] == "2.1.332"
    assert managed.identity()["version"] == "2.1.400"
    assert managed.identity()["executable"] is None


def test_a_cli_that_is_not_the_pin_never_runs_a_session(tmp_path: Path) -> None:
    """The fake answers 9.9.9: pinned 9.9.10, the session is refused before it starts, free."""
    res = _adapter(cli=ClaudeCodeConfig(version="9.9.10")).run(_ctx(tmp_path, "ok"))
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith(
        f"Claude Code at {FAKE} answers --version 9.9.9, but agents.claude_code.version pins "
        "9.9.10; no session runs under the pin's name on another CLI"
    )
    assert res.usage.cost_usd == 0.0
    assert not (tmp_path / "worktree" / ".fake-argv.json").exists()
    broken = tmp_path / "bin" / "claude"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    silent = ClaudeCodeAdapter(ClaudeCodeAgent(adapter="claude-code", executable=str(broken)))
    assert "answers nothing to --version" in silent.run(_ctx(tmp_path, "ok")).error_detail


def test_a_missing_managed_install_is_named_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The managed CLI is installed only when an arm runs; unavailable, the cell says why."""
    monkeypatch.setenv("WFBENCH_TOOLS", str(tmp_path / "tools"))
    monkeypatch.setenv("PATH", "/nonexistent")  # no npm: the install cannot happen
    adapter = ClaudeCodeAdapter(
        ClaudeCodeAgent(adapter="claude-code"), cli=ClaudeCodeConfig(version="2.1.332")
    )
    res = adapter.run(_ctx(tmp_path, "ok"))
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith("npm is not on PATH, so Claude Code cannot be installed")
    assert "wfbench doctor --install" in res.error_detail
    assert str(adapter.runtime(install=False)).startswith(
        f"Claude Code 2.1.332 (agents.claude_code.version) is not installed in "
        f"{tmp_path / 'tools' / 'claude-code' / '2.1.332'}: run `wfbench doctor --install`"
    )


def test_built_in_skills_are_read_once_and_turned_off_in_every_session(tmp_path: Path) -> None:
    """Like 2.1.332, the fake brings 'doctor' past the env var; skillOverrides turns it off."""
    adapter = _adapter()
    found = adapter.builtins()
    assert not isinstance(found, str), found
    assert found.skills == frozenset({"doctor"})
    res = adapter.run(_ctx(tmp_path, "ok", expected_skill="work"))
    assert res.ok, res.error_detail
    argv = json.loads((tmp_path / "worktree" / ".fake-argv.json").read_text())["argv"]
    assert json.loads(argv[argv.index("--settings") + 1]) == {"skillOverrides": {"doctor": "off"}}
    init = parse_stream(res.transcript or b"").init
    assert init is not None and init["skills"] == ["work"]


def test_a_built_in_skill_the_override_does_not_remove_is_refused_at_init(tmp_path: Path) -> None:
    """forbid (the default): a built-in skill still listed stops the session, naming it."""
    res = _session(tmp_path, "stubborn")
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith(
        "session stopped at system/init: skills not installed by the arm are available: doctor "
        "(bundled, built-in or user skills make arms unequal; agents.claude_code.builtin_skills: "
        "forbid; Claude Code 9.9.9 brings doctor and skillOverrides did not turn them off)"
    )
    assert "forwarded 0 request(s)" in res.error_detail


def test_allow_if_equal_records_the_built_ins_and_requires_them_in_every_arm(
    tmp_path: Path,
) -> None:
    """allow_if_equal: the release's built-ins are in the identity and must all be present."""
    equal = ClaudeCodeConfig(version=FAKE_VERSION, builtin_skills="allow_if_equal")
    adapter = _adapter(cli=equal)
    assert adapter.identity()["builtin_skills"] == {
        "policy": "allow_if_equal",
        "skills": ["doctor"],
    }
    res = adapter.run(_ctx(tmp_path, "ok", expected_skill="work"))
    assert res.ok, res.error_detail
    argv = json.loads((tmp_path / "worktree" / ".fake-argv.json").read_text())["argv"]
    assert "--settings" not in argv
    assert parse_stream(res.transcript or b"").init["skills"] == ["work", "doctor"]  # type: ignore[index]
    # A session missing one of them (another arm saw fewer) is not equal.
    want = adapter.expectations(_ctx(tmp_path, "ok"), adapter.builtins())  # type: ignore[arg-type]
    from bench_assets.agents.claude_stream import check_init

    init = {
        "permissionMode": "bypassPermissions",
        "model": MODEL,
        "claude_code_version": FAKE_VERSION,
        "apiKeySource": "ANTHROPIC_API_KEY",
        "tools": [],
        "mcp_servers": [],
        "skills": ["work"],
    }
    assert check_init(init, want).startswith(
        "built-in skill(s) doctor of Claude Code 9.9.9 are missing from this session"
    )
    assert check_init({**init, "skills": ["work", "doctor", "extra"]}, want).startswith(
        "skills neither installed by the arm nor built into Claude Code 9.9.9 are available: extra"
    )


def test_an_arm_skill_named_like_a_built_in_one_is_refused(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "ok")
    doctor = ctx.workdir / ".claude" / "skills" / "doctor" / "SKILL.md"
    doctor.parent.mkdir(parents=True)
    doctor.write_text("---\nname: doctor\n---\nMine.\n")
    res = _adapter().run(ctx)
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith(
        "the arm's skill(s) doctor have the name of a skill built into Claude Code 9.9.9"
    )


def test_a_probe_stops_at_init_and_shows_the_session_against_the_arm(tmp_path: Path) -> None:
    """What doctor and evolve's preflight show: granted vs declared, nothing sent, no key."""
    ctx = _ctx(tmp_path, "ok", expected_skill="work", secrets_env={})
    probe = _adapter(allowed_tools=["Read", "Write"]).probe(ctx)
    assert probe.problem == "" and probe.forwarded == 0
    assert probe.init is not None
    assert probe.init["permissionMode"] == "dontAsk"
    assert probe.init["skills"] == ["work"]
    assert sorted(probe.init["tools"]) == ["Read", "Skill", "Write"]
    wrong = _adapter(allowed_tools=["Read", "Wirte"]).probe(_ctx(tmp_path, "ok", secrets_env={}))
    assert wrong.problem.startswith("tool(s) Wirte requested but unknown to this CLI")


def test_pins_must_be_exact_releases_and_are_required_with_a_claude_code_arm(
    tmp_path: Path,
) -> None:
    from bench_assets.kernel.errors import ValidationFailed
    from bench_assets.tasks.catalog import load_benchmark
    from tests.conftest import make_bench

    for bad in ("latest", "^2.1.0", "2.1", "stable"):
        with pytest.raises(ValidationError, match="is not an exact release"):
            ClaudeCodeConfig(version=bad)
    assert ClaudeCodeConfig(version="2.1.332").pinned() == "2.1.332"
    live = {"live": {"agent": {"adapter": "claude-code"}, "skills": "none"}}
    root = make_bench(tmp_path / "tasks", arms=live)
    with pytest.raises(
        ValidationFailed,
        match=r"agents\.claude_code\.version: required, because "
        r"arms\.live use\(s\) adapter claude-code",
    ):
        load_benchmark(root)
    root = make_bench(
        tmp_path / "pinned", arms=live, agents={"claude_code": {"version": "2.1.332"}}
    )
    assert load_benchmark(root).config.agents.claude_code.version == "2.1.332"


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


def test_malformed_stream_is_a_session_error(tmp_path: Path) -> None:
    res = _session(tmp_path, "malformed", expected_skill="work")
    assert not res.ok
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert "line(s) are not JSON objects" in res.error_detail
    assert len(res.error_detail) < 1000


def test_turn_limit_is_a_valid_negative_that_still_reports_its_cost(tmp_path: Path) -> None:
    res = _session(tmp_path, "fail", spec={"max_turns": 7})
    assert res.error_kind is ErrorKind.TURN_LIMIT
    assert res.error_detail == "turn limit of 7 reached (num_turns 7)"
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
    bad.argv = lambda exe, ctx, settings=None: [exe, "-p", "--bogus"]  # type: ignore[method-assign]
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
    missing = _session(tmp_path, "ok", expected_skill="plan")
    assert missing.error_kind is ErrorKind.INFRA_ERROR
    assert "expected skill 'plan' is not available in the session" in missing.error_detail
    plan = tmp_path / "worktree" / ".claude" / "skills" / "plan" / "SKILL.md"
    plan.parent.mkdir(parents=True)
    plan.write_text("---\nname: plan\n---\nPlan.\n")
    res = _session(tmp_path, "ok", expected_skill="plan")
    assert res.error_kind is ErrorKind.SKILL_NOT_INVOKED
    assert _session(tmp_path, "noskill").ok


def test_expected_skill_comes_from_the_context_only(tmp_path: Path) -> None:
    # The caller decides (e.g. no proof for a skills="none" arm), even if the arm names one.
    assert _session(tmp_path, "noskill", spec={"expected_skill": "work"}).ok


def test_the_api_key_never_enters_the_session(tmp_path: Path) -> None:
    """The egress proxy holds the credential: an agent printing its key prints a placeholder."""
    res = _session(tmp_path, "secret")
    assert res.ok, res.error_detail
    assert res.transcript is not None
    assert KEY.encode() not in res.transcript
    assert PLACEHOLDER_CREDENTIAL.encode() in res.transcript
    cleaned = Redactor([KEY]).bytes(res.transcript)
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
    assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER_CREDENTIAL
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["HOME"] == "/home/agent"
    assert env["CLAUDE_CODE_EFFORT_LEVEL"] == "medium"
    assert env["CLAUDE_CODE_SUBPROCESS_ENV_SCRUB"] == "0"
    assert env["CLAUDE_CODE_DISABLE_BUNDLED_SKILLS"] == "1"


def test_hang_times_out_quickly(tmp_path: Path) -> None:
    start = time.monotonic()
    res = _session(tmp_path, "hang", timeout_s=1.0)
    assert time.monotonic() - start < 15
    assert not res.ok
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert res.error_detail.startswith("timed out after 1s [egress proxy forwarded 0 request(s)")
    assert res.session_ids == ("fake-session-1",)
    # No result event, but not one request went through the egress proxy: provably free.
    assert res.usage.cost_usd == 0.0
    assert res.usage.input_tokens is None


def test_missing_executable_is_an_infra_error(tmp_path: Path) -> None:
    adapter = ClaudeCodeAdapter(
        ClaudeCodeAgent(adapter="claude-code", executable="no-such-claude-xyz"), cli=PIN
    )
    res = adapter.run(_ctx(tmp_path, "ok"))
    assert not res.ok
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail == "claude executable 'no-such-claude-xyz' not found on PATH"
    assert res.usage.cost_usd == 0.0


# --- recorded real streams (CLI 2.1.197 against tests/mock_anthropic.py) -----------------------


def _recorded(name: str) -> bytes:
    return (STREAMS / f"{name}.jsonl").read_bytes()


def _want(**overrides: Any) -> Expectations:
    fields: dict[str, Any] = {
        "permission_mode": "bypassPermissions",
        "model": MODEL,
        "tools": None,
        "installed_skills": frozenset({"work"}),
        "expected_skill": None,
    }
    fields.update(overrides)
    return Expectations(**fields)


def _judge_recorded(name: str, want: Expectations | None = None, returncode: int = 0) -> Any:
    data = _recorded(name)
    res = ExecResult(("claude",), returncode, data, b"", False, 1.0, len(data), 0)
    return judge(res, parse_stream(data), want or _want(), timeout_s=60, max_turns=2)


@pytest.mark.parametrize(
    ("name", "kind", "fragments"),
    [
        # M1: CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1 forced "default": the Write was denied.
        ("scrub_write_denied", ErrorKind.INFRA_ERROR, ["permission mode in force is 'default'"]),
        # M4: the bundled skills (verify, debug, ...) were offered to the agent.
        ("bundled_skills", ErrorKind.INFRA_ERROR, ["skills not installed by the arm", "verify"]),
        # M2: the turn limit is the agent's failure, a valid negative.
        ("max_turns", ErrorKind.TURN_LIMIT, ["turn limit of 2 reached (num_turns 3)"]),
        # M8: the per-session budget too.
        ("max_budget", ErrorKind.BUDGET_LIMIT, ["session budget reached (spent $6.0003)"]),
        # M3: systemic failures name the real cause, not "subtype 'success'".
        (
            "auth_401",
            ErrorKind.INFRA_ERROR,
            ["model API authentication failed (HTTP 401): Invalid API key"],
        ),
        (
            "rate_limit_429",
            ErrorKind.SESSION_ERROR,
            ["model API rate limit (HTTP 429): API Error: Request rejected (429)"],
        ),
        ("overloaded_529", ErrorKind.SESSION_ERROR, ["model API overloaded (HTTP 529)"]),
        (
            "unreachable",
            ErrorKind.INFRA_ERROR,
            ["model API unreachable: API Error: Unable to connect to API (ConnectionRefused)"],
        ),
        ("write_ok", None, []),
        ("skill_ok", None, []),
    ],
)
def test_recorded_real_streams_get_the_right_kind_and_detail(
    name: str, kind: ErrorKind | None, fragments: list[str]
) -> None:
    got_kind, detail = _judge_recorded(name, returncode=0 if kind is None else 1)
    assert got_kind is kind, detail
    for fragment in fragments:
        assert fragment in detail
    assert "subtype 'success'" not in detail


def test_a_real_2_1_332_session_with_its_built_in_skills_is_refused_under_forbid() -> None:
    """Issue 22: 2.1.332 lists doctor and plugin-authoring past CLAUDE_CODE_DISABLE_BUNDLED_SKILLS
    (recorded with the built-ins left on); forbid refuses it naming both, allow_if_equal with the
    release's set accepts it, and a set that differs is not equal."""
    builtins = frozenset({"doctor", "plugin-authoring"})
    forbid = _want(version="2.1.332", builtin_skills=builtins)
    kind, detail = _judge_recorded("builtin_skills_2_1_332", forbid)
    assert kind is ErrorKind.INFRA_ERROR
    assert detail == (
        "skills not installed by the arm are available: doctor, plugin-authoring (bundled, "
        "built-in or user skills make arms unequal; agents.claude_code.builtin_skills: forbid; "
        "Claude Code 2.1.332 brings doctor, plugin-authoring and skillOverrides did not turn "
        "them off)"
    )
    equal = _want(version="2.1.332", builtin_skills=builtins, builtin_policy="allow_if_equal")
    assert _judge_recorded("builtin_skills_2_1_332", equal) == (None, "")
    fewer = _want(
        version="2.1.332", builtin_skills=frozenset({"doctor"}), builtin_policy="allow_if_equal"
    )
    kind, detail = _judge_recorded("builtin_skills_2_1_332", fewer)
    assert kind is ErrorKind.INFRA_ERROR and "nor built into Claude Code 2.1.332" in detail


def test_limits_are_valid_negatives_and_api_failures_systemic() -> None:
    """M2: a looping skill's failures count against it and never trip the outage breaker."""
    for kind in (ErrorKind.TURN_LIMIT, ErrorKind.BUDGET_LIMIT):
        assert is_valid_negative(kind) and not is_systemic(kind) and not is_excluded(kind)


def test_unknown_tool_names_are_caught_from_init() -> None:
    """M6: the CLI drops 'Wirte' silently; the init tools show it is missing."""
    kind, detail = _judge_recorded("unknown_tool", _want(tools=("Read", "Wirte", "Skill")))
    assert kind is ErrorKind.INFRA_ERROR
    assert "tool(s) Wirte requested but unknown to this CLI" in detail


def test_write_denials_the_arm_did_not_ask_for_are_infra_errors() -> None:
    """M1: even in the requested mode, a denied unrestricted tool is not a valid negative."""
    events = [json.loads(line) for line in _recorded("write_ok").splitlines()]
    events[-1]["permission_denials"] = [{"tool_name": "Write", "tool_use_id": "t1"}]
    data = _lines(*events)
    res = ExecResult(("claude",), 0, data, b"", False, 1.0, len(data), 0)
    kind, detail = judge(res, parse_stream(data), _want(), timeout_s=60)
    assert kind is ErrorKind.INFRA_ERROR
    assert "denied tool calls the arm did not restrict (Write x1)" in detail
    # A tool the arm restricted (pre-approved only with a specifier, e.g. Write(docs/*)) may be.
    allowed_only_read = _want(
        unrestricted_mode=False,
        granted=frozenset({"Read"}),
        restricted=frozenset({"Write"}),
    )
    assert judge(res, parse_stream(data), allowed_only_read, timeout_s=60) == (None, "")


def test_init_version_and_key_source_must_match_what_is_recorded() -> None:
    """M7: the version in the cell identity and the credential path are what actually ran."""
    assert _judge_recorded("write_ok", _want(version="2.1.197")) == (None, "")
    kind, detail = _judge_recorded("write_ok", _want(version="2.1.200"))
    assert kind is ErrorKind.INFRA_ERROR
    assert "runs Claude Code '2.1.197', but '2.1.200' is pinned" in detail
    # A CLI that stops reporting its version in init is not trusted to be the pin either.
    events = [json.loads(line) for line in _recorded("write_ok").splitlines()]
    del events[0]["claude_code_version"]
    data = _lines(*events)
    res = ExecResult(("claude",), 0, data, b"", False, 1.0, len(data), 0)
    kind, detail = judge(res, parse_stream(data), _want(version="2.1.197"), timeout_s=60)
    assert kind is ErrorKind.INFRA_ERROR and "runs Claude Code None" in detail
    assert _judge_recorded("write_ok", _want(api_key_source="ANTHROPIC_API_KEY")) == (None, "")
    kind, detail = _judge_recorded("write_ok", _want(api_key_source="apiKeyHelper"))
    assert kind is ErrorKind.INFRA_ERROR and "takes its credential from" in detail


def test_expected_skill_must_be_available_in_init() -> None:
    assert _judge_recorded("skill_ok", _want(expected_skill="work")) == (None, "")
    kind, detail = _judge_recorded(
        "skill_ok", _want(expected_skill="plan", installed_skills=frozenset({"work", "plan"}))
    )
    assert kind is ErrorKind.INFRA_ERROR
    assert "expected skill 'plan' is not available" in detail


def test_tokens_per_model_come_from_model_usage() -> None:
    """M7: modelUsage is the truth; a budget-stopped session reports usage as zeros."""
    usage = parse_stream(_recorded("max_budget")).usage()
    assert usage.input_tokens == 2_000_000
    assert usage.by_model is not None
    assert set(usage.by_model) == {MODEL}
    assert usage.by_model[MODEL].cost_usd == 6.0003
    assert usage.cost_usd == 6.0003


def test_fake_session_reports_tokens_per_model(tmp_path: Path) -> None:
    res = _session(tmp_path, "ok")
    assert res.usage.by_model is not None
    assert sorted(res.usage.by_model) == ["claude-haiku-4-5-20251001", MODEL]
    assert res.usage.by_model["claude-haiku-4-5-20251001"].output_tokens == 67


# --- M5, M6: configuration --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "suggestion"),
    [
        ("sonnet", "claude-sonnet-4-5-20250929"),
        ("opus", "claude-opus-4-5-20251101"),
        ("haiku", "claude-haiku-4-5-20251001"),
        ("sonnet[1m]", "claude-sonnet-4-5-20250929"),
        ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
        ("claude-opus-4-1", "claude-opus-4-5-20251101"),
    ],
)
def test_aliases_and_undated_model_ids_are_rejected_naming_a_dated_id(
    tmp_path: Path, model: str, suggestion: str
) -> None:
    from bench_assets.config.models import check_model_id

    with pytest.raises(ValueError, match=suggestion):
        check_model_id(model)


@pytest.mark.parametrize(
    "model",
    [MODEL, "claude-sonnet-4-5@20250929", "anthropic.claude-sonnet-4-5-20250929-v1:0", "gpt-x"],
)
def test_dated_and_non_claude_model_ids_are_accepted(model: str) -> None:
    from bench_assets.config.models import check_model_id

    assert check_model_id(model) == model


def test_skill_tool_is_added_when_a_skill_is_expected(tmp_path: Path) -> None:
    adapter = _adapter(allowed_tools=["Read", "Write"], expected_skill="work")
    argv = adapter.argv("claude", _ctx(tmp_path, "ok", expected_skill="work"))
    assert argv[argv.index("--tools") + 1] == "Read,Write,Skill"
    assert "Skill" in [argv[i + 1] for i, a in enumerate(argv) if a == "--allowedTools"]
    res = _session(tmp_path, "ok", spec={"allowed_tools": ["Read", "Write"]}, expected_skill="work")
    assert res.ok, res.error_detail


def test_an_arm_cannot_expect_a_skill_and_deny_the_skill_tool() -> None:
    with pytest.raises(ValidationError, match="needs the Skill tool"):
        ClaudeCodeAgent(adapter="claude-code", expected_skill="work", disallowed_tools=["Skill"])


# --- M1, M7: the session is verified from init, before anything is paid ------------------------


def test_an_arm_cannot_turn_the_env_scrub_back_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M1: with the scrub set the (fake, like the real) CLI forces 'default' and denies Write."""
    monkeypatch.setenv("CLAUDE_CODE_SUBPROCESS_ENV_SCRUB", "1")
    res = _session(
        tmp_path,
        "ok",
        spec={"env": ["ANTHROPIC_API_KEY", "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB"]},
        secrets_env={
            "ANTHROPIC_API_KEY": KEY,
            "FAKE_CLAUDE_MODE": "ok",
            "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB": "1",
        },
    )
    assert res.ok, res.error_detail
    assert (tmp_path / "worktree" / "fake-work.txt").read_text() == "work was done\n"


def test_a_session_running_another_model_is_stopped_at_init(tmp_path: Path) -> None:
    res = _session(tmp_path, "othermodel")
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith(
        "session stopped at system/init: the CLI runs model 'claude-opus-4-5-20251101', "
        f"but '{MODEL}' was requested"
    )
    assert "forwarded 0 request(s)" in res.error_detail


def test_no_credential_fails_before_the_cli_starts(tmp_path: Path) -> None:
    res = _session(tmp_path, "ok", secrets_env={"FAKE_CLAUDE_MODE": "ok"})
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith("no model API credential")
    assert not (tmp_path / "worktree" / ".fake-argv.json").exists()


def test_repository_settings_are_masked_and_left_untouched(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "settings")
    settings = ctx.workdir / ".claude" / "settings.json"
    settings.write_text('{"permissions": {"deny": ["Write"]}, "model": "opus"}')
    res = _adapter().run(ctx)
    assert res.ok, res.error_detail
    texts = [
        b["text"]
        for e in parse_stream(res.transcript or b"").events
        if e.get("type") == "assistant"
        for b in e["message"]["content"]
        if b.get("type") == "text"
    ]
    assert texts[0] == "{}\n"
    # The agent can neither rewrite the mask nor reach it through a writable path.
    attack = json.loads(texts[1])
    assert attack["rewrite"] in ("OSError", "PermissionError")
    assert attack["scratch"] == []
    assert settings.read_text() == '{"permissions": {"deny": ["Write"]}, "model": "opus"}'
