"""The Claude Code release as a pinned part of the experiment (issue 22, item 1).

A moved pin (``agents.claude_code.version``) makes exactly the claude-code cells stale, for that
reason alone, and ``wfbench plan`` says so; a CLI that is not the pin is refused by ``wfbench
evolve``'s preflight before anything is paid. The CLI here is the fake (``tests/fake_claude``),
copied to answer as release 2.1.197 would, so these tests need no npm.
"""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.generation.planner import PriorCell, reuse_verdict
from tests.conftest import write_yaml
from tests.test_dagster_cells import replay_bench

FAKE = Path(__file__).resolve().parent / "fake_claude" / "claude"


def _identity(version: str, **agent: Any) -> dict[str, Any]:
    return {
        "harness_version": "x",
        "arm": {"agent": {"adapter": "claude-code"}, "skills": "none"},
        "agent": {"adapter": "claude-code", "version": version, **agent},
        "model": "claude-sonnet-4-5-20250929",
        "binding": {"prompt_digest": "p"},
    }


def test_a_moved_pin_names_the_cli_upgrade_as_the_reason() -> None:
    before = _identity("2.1.197")
    prior = PriorCell(
        identity=before,
        identity_digest="old",
        error_kind=None,
        recorded_at=datetime.now(UTC),
        generation="g0001",
    )
    now = datetime.now(UTC)
    verdict = reuse_verdict(
        prior, _identity("2.1.332"), "comparator", arm="a", canary=False, max_age_days=30, now=now
    )
    assert (verdict.kind, verdict.changed) == ("code", ["agent.version"])
    assert verdict.reason == (
        "Claude Code CLI 2.1.197 → 2.1.332 (agents.claude_code.version): code identity "
        "changed: agent.version"
    )
    # Any other change keeps its own reason, without a CLI line.
    other = reuse_verdict(
        prior,
        _identity("2.1.197", max_turns=5),
        "comparator",
        arm="a",
        canary=False,
        max_age_days=30,
        now=now,
    )
    assert other.reason == "code identity changed: agent.max_turns"


def _fake_release(tmp_path: Path, version: str) -> Path:
    """The fake CLI, answering ``version`` (to --version and in init) like that release."""
    exe = tmp_path / "bin" / "claude"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(FAKE.read_text().replace("9.9.9", version))
    exe.chmod(0o755)
    return exe


def _live_bench(tmp_path: Path, version: str, **agent: Any) -> Path:
    """The replay bench plus a claude-code comparator arm running the fake CLI as ``version``."""
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["agents"] = {"claude_code": {"version": version}}
    exe = _fake_release(tmp_path, version)
    data["arms"]["live"] = {
        "agent": {"adapter": "claude-code", "executable": str(exe), **agent},
        "skills": "incumbent",
    }
    write_yaml(root / "bench.yaml", data)
    return root


def _pin(root: Path, version: str) -> None:
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["agents"]["claude_code"]["version"] = version
    write_yaml(root / "bench.yaml", data)


def _add_candidate(root: Path, cid: str) -> None:
    cand = root / "candidates" / cid
    (cand / "files" / "work").mkdir(parents=True)
    (cand / "files" / "work" / "SKILL.md").write_text(f"---\nname: work\n---\n{cid}.\n")
    write_yaml(cand / "candidate.yaml", {"id": cid, "title": cid})


def _records(art: Path) -> list[Path]:
    return sorted(art.glob("cells/**/record.json"))


@pytest.mark.slow  # one in-process generation with a sandboxed fake CLI: ~1 min on 2 cores
def test_moving_the_pin_re_pays_exactly_the_cli_cells_and_a_cli_off_the_pin_pays_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _live_bench(tmp_path, "2.1.197")
    art = tmp_path / "art"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-pin-test-key-0000000000000000")
    runner = CliRunner()
    first = runner.invoke(main, ["evolve", "--tasks", str(root)])
    assert first.exit_code == 0, first.output
    assert "live-agent preflight" in first.output
    paid = _records(art)
    live = [json.loads(p.read_text()) for p in paid if "/live." in str(p)]
    assert len(live) == 1 and live[0]["identity"]["agent"]["version"] == "2.1.197"
    assert live[0]["agent_version"] == "2.1.197"

    # The pin moves: `wfbench plan` re-pays the live cell for that reason and nothing else.
    _pin(root, "2.1.332")
    res = runner.invoke(main, ["plan", "--tasks", str(root), "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    by_arm = {c["arm"]: c for c in plan}
    assert by_arm["live"]["action"] == "run"
    assert by_arm["live"]["kind"] == "code"
    assert by_arm["live"]["changed"] == ["agent.version"]
    assert by_arm["live"]["reason"].startswith(
        "Claude Code CLI 2.1.197 → 2.1.332 (agents.claude_code.version): "
    )
    for cell in plan:
        if cell["arm"] != "live":
            assert cell["kind"] in ("reusable", "canary"), cell
            assert cell["changed"] == [], cell
    text = runner.invoke(main, ["plan", "--tasks", str(root)])
    assert "Claude Code CLI 2.1.197 → 2.1.332" in text.output

    # The arm's CLI still answers 2.1.197, not the pin: evolve refuses before paying.
    _add_candidate(root, "c2")
    second = runner.invoke(main, ["evolve", "--tasks", str(root)])
    assert second.exit_code == 2, second.output
    assert "live-agent preflight failed; nothing was paid" in second.output
    assert f"Claude Code at {tmp_path / 'bin' / 'claude'} answers --version 2.1.197" in (
        second.output
    )
    assert "pins 2.1.332" in second.output
    assert _records(art) == paid


def test_evolve_refuses_an_arm_whose_session_is_not_what_it_declares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expected skill the arm's tree lacks is found at init, before the first cell is paid."""
    root = _live_bench(tmp_path, "9.9.9", expected_skill="nope")
    art = tmp_path / "art"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-pin-test-key-0000000000000000")
    res = CliRunner().invoke(main, ["evolve", "--tasks", str(root)])
    assert res.exit_code == 2, res.output
    assert "arm live: expected skill 'nope' is not available in the session" in res.output
    assert "change arms.live.agent.expected_skill" in res.output
    assert _records(art) == []
