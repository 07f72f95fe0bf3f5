"""Record the skill-eval grader fixtures from the REAL Claude Code CLI (the pin) and the mock API.

Run from the repository root (``WFBENCH_TOOLS`` set, bubblewrap available):

    .venv/bin/python -m tests.data.skill_eval.record_transcripts

Each scenario runs one real ``claude -p --output-format stream-json --verbose`` session through
wfbench's own adapter (sandbox, egress proxy) against ``tests/mock_anthropic.py``, in a worktree
seeded like the ``relnotes`` plugin's cases, and writes ``transcripts/<scenario>.jsonl`` (the
stream exactly as the CLI printed it) and ``transcripts/<scenario>.tree.json`` (the files the
session created and the final text of every file). ``tests/test_skill_eval_graders.py`` grades
them; re-record only when the pin changes.
"""

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_assets.agents.base import SessionContext
from bench_assets.agents.claude_code import ClaudeCodeAdapter
from bench_assets.config.models import CLAUDE_CODE_VERSION, ClaudeCodeAgent, ClaudeCodeConfig
from tests.mock_anthropic import Failure, MockMessagesAPI, always, steps, text, tool_use

HERE = Path(__file__).parent
PLUGIN = HERE / "plugins" / "relnotes"
OUT = HERE / "transcripts"
MODEL = "claude-sonnet-4-5-20250929"
KEY = "sk-ant-api03-skilleval-record-key-0123456789abcdef"
PATCH_PROMPT = (
    "The patch since 4.1.0 is in inputs/delta.patch. Add a section for it to RELEASE_NOTES.md\n"
    "and tell me which version number you chose."
)
TEAPOT_PROMPT = "What does HTTP status 418 mean?"
SEED = {
    "inputs/delta.patch": (
        "diff --git a/cli.py b/cli.py\n"
        '+    parser.add_argument("--limit", type=int, help="stop after N rows")\n'
    ),
    "RELEASE_NOTES.md": "# Release notes\n\n## 4.1.0\n\n- First public release.\n",
}
NEW_NOTES = (
    "# Release notes\n\n## 4.2.0\n\n- New `--limit N` option stops after N rows.\n\n"
    "## 4.1.0\n\n- First public release.\n"
)
MAJOR_NOTES = (
    "# Release notes\n\n## 5.0.0\n\n- Added --limit.\n\n## 4.1.0\n\n- First public release.\n"
)
W = "/workspace"


def _skill(tid: str, name: str = "draft-release-notes") -> Any:
    return tool_use(tid, "Skill", {"skill": name})


SCENARIOS: dict[str, dict[str, Any]] = {
    # With the plugin: skill, read both inputs, write the 4.2.0 section, name the version.
    "patch-with": {
        "prompt": PATCH_PROMPT,
        "seed": True,
        "skills": True,
        "script": steps(
            _skill("toolu_s1"),
            tool_use("toolu_r1", "Read", {"file_path": f"{W}/inputs/delta.patch"}),
            tool_use("toolu_r2", "Read", {"file_path": f"{W}/RELEASE_NOTES.md"}),
            tool_use(
                "toolu_w1", "Write", {"file_path": f"{W}/RELEASE_NOTES.md", "content": NEW_NOTES}
            ),
            text("Added the 4.2.0 section: the patch only adds a flag, so a minor bump."),
        ),
    },
    # Without it: a backup first (created .orig), then a major bump, and the wrong version.
    "patch-without": {
        "prompt": PATCH_PROMPT,
        "seed": True,
        "skills": False,
        "script": steps(
            tool_use(
                "toolu_w0",
                "Write",
                {"file_path": f"{W}/RELEASE_NOTES.md.orig", "content": SEED["RELEASE_NOTES.md"]},
            ),
            tool_use("toolu_r1", "Read", {"file_path": f"{W}/RELEASE_NOTES.md"}),
            tool_use(
                "toolu_w1", "Write", {"file_path": f"{W}/RELEASE_NOTES.md", "content": MAJOR_NOTES}
            ),
            text("Done: I chose 5.0.0."),
        ),
    },
    # The negative control answered well, no tool at all.
    "teapot-quiet": {
        "prompt": TEAPOT_PROMPT,
        "seed": False,
        "skills": True,
        "script": steps(text("418 is \"I'm a teapot\": an April Fools' joke from RFC 2324.")),
    },
    # The negative control with the skill firing where it should not.
    "teapot-skill": {
        "prompt": TEAPOT_PROMPT,
        "seed": False,
        "skills": True,
        "script": steps(
            _skill("toolu_s1"), text("418 means I'm a Teapot (RFC 2324); no notes needed.")
        ),
    },
    # The API fails: a session error, never a "did not trigger".
    "crash": {
        "prompt": PATCH_PROMPT,
        "seed": True,
        "skills": True,
        "script": always(Failure(500, "api_error", "Internal server error")),
    },
}


def git_patch(before: dict[str, str], after: dict[str, str]) -> str:
    """The git patch that turns the ``before`` tree into ``after`` (what a replay applies)."""
    from bench_assets.sandbox.gitrepo import git

    with tempfile.TemporaryDirectory(prefix="wfbench-skill-patch-") as tmp:
        root = Path(tmp)
        git(["init", "-q"], cwd=root)
        for rel, body in before.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(body)
        git(["add", "-A"], cwd=root)
        git(
            ["-c", "user.name=r", "-c", "user.email=r@r", "commit", "-qm", "seed", "--allow-empty"],
            cwd=root,
        )
        for rel, body in after.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(body)
        git(["add", "-A"], cwd=root)
        return git(["diff", "--cached", "--binary"], cwd=root).stdout.decode()


def record(name: str, cli_version: str = CLAUDE_CODE_VERSION) -> tuple[bytes, dict[str, Any]]:
    """Run one scenario through the real CLI; its transcript and final tree."""
    sc = SCENARIOS[name]
    skill = (PLUGIN / "skills" / "draft-release-notes" / "SKILL.md").read_bytes()
    return record_session(
        sc["prompt"],
        sc["script"],
        SEED if sc["seed"] else {},
        {"draft-release-notes": skill} if sc["skills"] else {},
        cli_version=cli_version,
    )


def record_session(
    prompt: str,
    script: Any,
    seed: dict[str, str],
    skills: dict[str, bytes],
    cli_version: str = CLAUDE_CODE_VERSION,
    task_id: str = "relnotes",
) -> tuple[bytes, dict[str, Any]]:
    """One real ``claude -p`` session against the mock API ``script``, in a worktree holding
    ``seed`` and ``skills`` (``.claude/skills/<name>/SKILL.md``); its transcript and final tree."""
    with tempfile.TemporaryDirectory(prefix="wfbench-skill-rec-") as tmp:
        root = Path(tmp)
        work, scratch = root / "worktree", root / "scratch"
        work.mkdir()
        scratch.mkdir()
        for rel, body in seed.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(body)
        for skill_name, skill_md in skills.items():
            dest = work / ".claude" / "skills" / skill_name
            dest.mkdir(parents=True)
            (dest / "SKILL.md").write_bytes(skill_md)
        before = {p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()}
        with MockMessagesAPI(script) as api:
            agent = ClaudeCodeAgent(
                adapter="claude-code", api_base_url=api.url, env=["ANTHROPIC_API_KEY"]
            )
            adapter = ClaudeCodeAdapter(agent, cli=ClaudeCodeConfig(version=cli_version))
            ctx = SessionContext(
                task_id=task_id,
                arm="arm",
                run=0,
                prompt=prompt,
                model=MODEL,
                effort=None,
                workdir=work,
                scratch=scratch,
                timeout_s=120.0,
                secrets_env={"ANTHROPIC_API_KEY": KEY},
            )
            res = adapter.run(ctx)
        files = {
            p.relative_to(work).as_posix(): p.read_text()
            for p in sorted(work.rglob("*"))
            if p.is_file() and ".claude" not in p.relative_to(work).parts
        }
        tree = {
            "patch": git_patch(seed, files),
            "created": sorted(set(files) - before),
            "files": files,
            "session_ok": res.ok,
            "session_error_kind": str(res.error_kind) if res.error_kind else None,
            "cli_version": res.agent_version,
        }
        return res.transcript or b"", tree


def add_patches() -> None:
    """Re-derive every recorded tree's patch (no CLI run)."""
    for path in sorted(OUT.glob("*.tree.json")):
        tree = json.loads(path.read_text())
        seeded = SEED if SCENARIOS[path.name.split(".")[0]]["seed"] else {}
        tree["patch"] = git_patch(seeded, tree["files"])
        path.write_text(json.dumps(tree, indent=2, sort_keys=True) + "\n")


def main(names: list[str]) -> None:
    OUT.mkdir(exist_ok=True)
    for name in names or list(SCENARIOS):
        transcript, tree = record(name)
        (OUT / f"{name}.jsonl").write_bytes(transcript)
        (OUT / f"{name}.tree.json").write_text(json.dumps(tree, indent=2, sort_keys=True) + "\n")
        print(
            f"{name}: ok={tree['session_ok']} kind={tree['session_error_kind']} "
            f"created={tree['created']} ({len(transcript)} bytes)"
        )


if __name__ == "__main__":
    if sys.argv[1:] == ["--patches"]:
        add_patches()
    else:
        main(sys.argv[1:])
