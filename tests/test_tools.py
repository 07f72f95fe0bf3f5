"""The managed Claude Code install (``bench_assets/agents/claude_install.py``) without the registry.

Real installs from npm are what ``tests/test_claude_code_real.py`` runs on (its fixtures install
the pin and the registry's latest through :func:`ensure_claude_code`); these check what an install
is, and that a failed one leaves nothing that could pass for it.
"""

import shutil
from pathlib import Path

import pytest

from bench_assets.agents.claude_install import (
    INSTALL_FILE,
    ClaudeCodeInstall,
    ToolUnavailable,
    claude_code_home,
    ensure_claude_code,
    installed_claude_code,
    read_install,
    tools_root,
)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WFBENCH_TOOLS", str(tmp_path / "tools"))
    return tmp_path / "tools"


def _record(version: str) -> ClaudeCodeInstall:
    return ClaudeCodeInstall(
        package="@anthropic-ai/claude-code",
        version=version,
        version_output=f"{version} (Claude Code)",
        executable="node_modules/.bin/claude",
        binary_sha256="0" * 64,
        packages=[],
        npm_version=None,
    )


def test_the_cache_is_per_release_and_overridable(
    tools: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tools_root() == tools.resolve()
    assert claude_code_home("2.1.332") == tools.resolve() / "claude-code" / "2.1.332"
    monkeypatch.delenv("WFBENCH_TOOLS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tools / "xdg"))
    assert tools_root() == (tools / "xdg" / "wfbench" / "tools").resolve()


def test_only_a_folder_with_its_own_install_record_is_an_install(tools: Path) -> None:
    home = claude_code_home("2.1.332")
    exe = home / "node_modules" / ".bin" / "claude"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n")
    assert installed_claude_code("2.1.332") is None  # no install.json: interrupted or foreign
    (home / INSTALL_FILE).write_text(_record("2.1.197").model_dump_json())
    assert installed_claude_code("2.1.332") is None  # the record names another release
    (home / INSTALL_FILE).write_text('{"version": "2.1.332"}')
    assert read_install("2.1.332") is None  # not a valid record
    (home / INSTALL_FILE).write_text(_record("2.1.332").model_dump_json())
    assert installed_claude_code("2.1.332") == exe
    assert ensure_claude_code("2.1.332", install=False) == exe
    exe.unlink()
    assert installed_claude_code("2.1.332") is None  # the record without its executable


def test_without_install_permission_a_missing_release_is_named_with_its_fix(tools: Path) -> None:
    with pytest.raises(ToolUnavailable, match=r"run `wfbench doctor --install` \(needs npm\)"):
        ensure_claude_code("2.1.332", install=False)
    assert not tools.exists()


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_an_install_that_cannot_be_contained_fails_and_leaves_nothing(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """npm runs in the sandbox; without one there is no install, and no half-made folder."""
    monkeypatch.setenv("WFBENCH_BWRAP", str(tmp_path / "no-bwrap"))
    broken = claude_code_home("2.1.332")
    broken.mkdir(parents=True)
    (broken / "leftover").write_text("an interrupted install")
    with pytest.raises(ToolUnavailable, match="npm runs in the sandbox, which is not available"):
        ensure_claude_code("2.1.332")
    assert sorted(p.name for p in (tools / "claude-code").iterdir()) == []
