"""A skill-eval case's run settings reach its sessions and its cells' identity.

The case's ``allowed_tools``, ``append_system_prompt``, ``env`` (``EVAL_*`` only), ``max_turns``
and ``model`` (which must be bench.yaml's) are enforced in the claude-code session; forbidden env
names and another model are refused at import / validate with the file and field named. Unit
tests use the fake CLI; one test runs the real pinned CLI against the mock Messages API.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench_assets.agents.base import SessionContext
from bench_assets.agents.claude_code import ClaudeCodeAdapter, granted_tools, parse_stream
from bench_assets.cells.pipeline import (
    InputIdentity,
    build_cell_inputs,
    cell_identity,
    make_adapter,
)
from bench_assets.config.models import (
    CLAUDE_CODE_VERSION,
    ArmSpec,
    ClaudeCodeAgent,
    ClaudeCodeConfig,
)
from bench_assets.inputs.binding import TaskBinding
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import InputError
from bench_assets.tasks.catalog import collect_issues, load_benchmark
from bench_assets.tasks.skill_eval_import import import_plugin
from bench_assets.tasks.skill_eval_tasks import case_session
from tests.data.skill_eval.record_transcripts import PLUGIN
from tests.test_claude_code_real import claude_cli  # noqa: F401  (the pinned CLI fixture)

FAKE = Path(__file__).resolve().parent / "fake_claude" / "claude"
MODEL = "claude-sonnet-4-5-20250929"
OTHER = "claude-opus-4-1-20250805"
KEY = "sk-ant-test-settings-0123456789abcdef0123"
TASK = "relnotes.patch-to-notes"


def _ctx(tmp_path: Path, mode: str = "ok", **overrides: Any) -> SessionContext:
    workdir, scratch = tmp_path / "worktree", tmp_path / "scratch"
    workdir.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    fields: dict[str, Any] = {
        "task_id": "alpha",
        "arm": "with_plugin",
        "run": 0,
        "prompt": "Do it.",
        "model": MODEL,
        "effort": None,
        "workdir": workdir,
        "scratch": scratch,
        "timeout_s": 60.0,
        "secrets_env": {"ANTHROPIC_API_KEY": KEY, "FAKE_CLAUDE_MODE": mode},
    }
    fields.update(overrides)
    return SessionContext(**fields)


def _fake(**spec: Any) -> ClaudeCodeAdapter:
    agent = ClaudeCodeAgent(adapter="claude-code", executable=str(FAKE), **spec)
    return ClaudeCodeAdapter(agent, cli=ClaudeCodeConfig(version="9.9.9"))


# --- the command line and the environment ------------------------------------------------------


def test_argv_carries_the_case_tools_turns_model_and_appended_prompt(tmp_path: Path) -> None:
    ctx = _ctx(
        tmp_path,
        allowed_tools=("Read", "Bash"),
        append_system_prompt="--answer in en_GB",
        max_turns=7,
    )
    argv = _fake().argv("claude", ctx)
    joined = " ".join(argv)
    assert f"--model {MODEL}" in joined
    assert "--tools Read,Bash --allowedTools Read --allowedTools Bash" in joined
    assert "--permission-mode dontAsk" in joined  # un-granted tools are denied, never asked
    assert argv[argv.index("--max-turns") + 1] == "7"
    # One argument, so text starting with "-" is never read as a flag.
    assert "--append-system-prompt=--answer in en_GB" in argv
    plain = " ".join(_fake().argv("claude", _ctx(tmp_path)))
    assert "--tools" not in plain and "--append-system-prompt" not in plain
    assert "--permission-mode bypassPermissions" in plain


def test_a_case_cannot_widen_the_arms_grant() -> None:
    assert granted_tools([], ("Read", "Write")) == ["Read", "Write"]
    assert granted_tools(["Read", "Grep"], ()) == ["Read", "Grep"]
    assert granted_tools(["Read", "Grep"], ("Read", "Write")) == ["Read"]
    # A plain case tool the arm grants only as a pattern gets the arm's pattern.
    assert granted_tools(["Read", "Bash(git log:*)"], ("Bash", "Read")) == [
        "Bash(git log:*)",
        "Read",
    ]
    assert granted_tools(["Bash"], ("Bash(ls)",)) == ["Bash(ls)"]
    assert granted_tools(["Bash(git log:*)"], ("Bash(rm -rf /)",)) == []


def test_the_case_env_reaches_the_session_and_the_harness_keeps_its_own(tmp_path: Path) -> None:
    res = _fake().run(_ctx(tmp_path, "env", case_env={"EVAL_LOCALE": "en_GB"}))
    assert res.ok, res.error_detail
    text = next(
        block["text"]
        for event in parse_stream(res.transcript or b"").events
        if event.get("type") == "assistant"
        for block in event["message"]["content"]
        if block.get("type") == "text"
    )
    env = json.loads(text)
    assert env["EVAL_LOCALE"] == "en_GB"
    assert env["HOME"] == "/home/agent"
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")


@pytest.mark.parametrize(
    "name", ["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "HOME", "PATH", "HTTPS_PROXY", "LANG"]
)
def test_a_session_with_a_harness_env_name_never_starts(tmp_path: Path, name: str) -> None:
    """Defence in depth: task.yaml validation refuses these first; the adapter refuses too."""
    res = _fake().run(_ctx(tmp_path, "ok", case_env={name: "http://evil.example"}))
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert f"the case's env: {name}" in res.error_detail
    assert res.transcript is None or b"evil.example" not in res.transcript


def test_a_case_whose_tools_the_arm_grants_none_of_never_starts(tmp_path: Path) -> None:
    res = _fake(allowed_tools=["Read"]).run(_ctx(tmp_path, allowed_tools=("Write",)))
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert "allowed_tools (Write) are none of those the arm grants (Read)" in res.error_detail


# --- import and validate -------------------------------------------------------------------------


def _plugin(tmp_path: Path, frontmatter: str) -> Path:
    plugin = tmp_path / "plugin"
    shutil.copytree(PLUGIN, plugin)
    shutil.rmtree(plugin / "evals" / "judged")
    shutil.rmtree(plugin / "evals" / "controls")
    case = plugin / "evals" / "patch-to-notes"
    (case / "case.yaml").unlink()
    (case / "prompt.md").write_text(f"---\n{frontmatter}---\nSay done.\n")
    (case / "graders").mkdir(exist_ok=True)
    return plugin


@pytest.mark.parametrize(
    "name", ["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "HOME", "PATH", "https_proxy"]
)
def test_import_refuses_a_harness_variable_with_file_and_field(tmp_path: Path, name: str) -> None:
    plugin = _plugin(tmp_path, f"env:\n  {name}: x\n")
    with pytest.raises(InputError) as e:
        import_plugin(plugin, tmp_path / "tasks")
    msg = str(e.value)
    assert str(plugin / "evals" / "patch-to-notes" / "prompt.md") in msg
    assert f"field 'env.{name}'" in msg and "harness's own variable" in msg
    assert not (tmp_path / "tasks").exists()


def test_import_refuses_other_env_names_and_a_mutable_model(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"field 'env.MY_VAR': MY_VAR: keys must match EVAL_"):
        import_plugin(_plugin(tmp_path / "a", "env:\n  MY_VAR: x\n"), tmp_path / "tasks")
    with pytest.raises(
        InputError, match=r"prompt.md: field 'model': model id 'sonnet' is a Claude Code"
    ):
        import_plugin(_plugin(tmp_path / "b", "model: sonnet\n"), tmp_path / "tasks")
    with pytest.raises(InputError, match=r"field 'allowed_tools': a list of tool names"):
        import_plugin(_plugin(tmp_path / "c", "allowed_tools: Read\n"), tmp_path / "tasks")


def _tasks(tmp_path: Path, model: str = MODEL) -> Path:
    tasks = tmp_path / "tasks"
    import_plugin(PLUGIN, tasks)
    shutil.rmtree(tasks / "relnotes.names-version")  # a judge case: needs a judge pinned
    (tasks / "p.jsonl").write_text("")
    arm = {"agent": {"adapter": "replay", "predictions": "p.jsonl"}, "skills": "none"}
    (tasks / "bench.yaml").write_text(
        yaml.safe_dump(
            {
                "model": model,
                "runs": 1,
                "arms": {"replayed": arm},
                "agents": {"claude_code": {"version": CLAUDE_CODE_VERSION}},
            }
        )
    )
    return tasks


def _set(tasks: Path, **settings: Any) -> None:
    path = tasks / TASK / "task.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["skill_eval"].update(settings)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_validate_refuses_a_case_model_other_than_the_pinned_one(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path)
    _set(tasks, model=MODEL)
    issues, bench = collect_issues(tasks)
    assert issues == [] and bench is not None
    assert case_session(bench.task(TASK).spec, MODEL).model == MODEL
    _set(tasks, model=OTHER)
    issues, _ = collect_issues(tasks)
    [issue] = issues
    assert issue.file.endswith(f"{TASK}/task.yaml") and issue.field == "skill_eval.model"
    assert OTHER in issue.message and MODEL in issue.message
    # The cell refuses it too (fail closed before any session), naming the file.
    with pytest.raises(InputError, match=r"task.yaml: field 'skill_eval.model'"):
        case_session(bench.task(TASK).spec, OTHER)


def test_validate_refuses_a_harness_env_name_in_task_yaml(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path)
    _set(tasks, env={"ANTHROPIC_BASE_URL": "http://evil.example"})
    issues, _ = collect_issues(tasks)
    assert issues, "a harness variable in a case's env must not validate"
    assert all(i.file.endswith(f"{TASK}/task.yaml") for i in issues)
    assert any("skill_eval" in i.field and "env" in i.field + i.message for i in issues)


# --- cell identity ---------------------------------------------------------------------------


_DIGESTS = (
    "prompt_digest", "setup_digest", "verify_digest", "task_file_digest", "oracle_digest",
    "oracle_command_digest", "oracle_manifest_digest",
)  # fmt: skip


def _identity(tasks: Path) -> str:
    bench = load_benchmark(tasks)
    digests = dict.fromkeys(_DIGESTS, "d")
    binding = TaskBinding(  # fixed: only the settings may differ
        task_id=TASK, task_class="skill-eval", repo_kind="inline", repo_identity=f"inline:{TASK}",
        ref=None, resolved_sha="0" * 40, oracle_files=[], protected=[], expensive=False, **digests,
    )  # fmt: skip
    ids = InputIdentity(binding, "o", "g", "s", "k")
    arm = bench.config.arms["replayed"]
    return json.dumps(
        cell_identity(bench, TASK, "replayed", 0, ids, make_adapter(bench, arm), arm),
        sort_keys=True,
    )


def test_every_case_setting_is_part_of_the_cell_identity(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path)
    seen = {_identity(tasks)}
    assert '"case_session"' in next(iter(seen))
    for change in (
        {"allowed_tools": ["Read"]},
        {"env": {"EVAL_LOCALE": "fr_FR"}},
        {"append_system_prompt": "Be brief."},
        {"max_turns": 3},
        {"model": MODEL},  # the same model as bench.yaml's, but now the case asks for it
    ):
        _set(tasks, **change)
        seen.add(_identity(tasks))
    assert len(seen) == 6
    # A case that sets none of them has no such key: other cells' identities are unchanged.
    _set(tasks, allowed_tools=[], env={}, append_system_prompt=None, max_turns=None, model=None)
    assert '"case_session"' not in _identity(tasks)


# --- the real CLI ------------------------------------------------------------------------------


def test_real_cli_gets_the_case_model_prompt_tools_and_env(
    tmp_path: Path,
    claude_cli: Path,  # noqa: F811
) -> None:
    """The pinned CLI against the mock API, through an imported case's cell: the API sees the
    case's model, its appended system prompt, only its tools; a tool it did not grant is refused;
    its EVAL_* variable is in the session's environment."""
    from bench_assets.cells.pipeline import run_cell
    from bench_assets.kernel.store import ArtifactStore
    from bench_assets.sandbox.redact import Redactor
    from tests.mock_anthropic import MockMessagesAPI, steps, text, tool_results, tool_use

    plugin = _plugin(
        tmp_path,
        f"model: {MODEL}\nmax_turns: 6\nallowed_tools: [Bash]\n"
        "append_system_prompt: APPENDED-MARKER-51c2\nenv:\n  EVAL_MARK: env-value-9d1e\n",
    )
    grader = plugin / "evals" / "patch-to-notes" / "graders" / "done.md"
    grader.write_text("---\ntype: regex\n---\nfinished\n")
    for extra in (plugin / "evals" / "patch-to-notes" / "graders").glob("*.md"):
        if extra != grader:
            extra.unlink()
    tasks = tmp_path / "tasks"
    import_plugin(plugin, tasks)
    (tasks / "p.jsonl").write_text("")
    arm = {"agent": {"adapter": "replay", "predictions": "p.jsonl"}, "skills": "none"}
    (tasks / "bench.yaml").write_text(
        yaml.safe_dump(
            {
                "model": MODEL,
                "runs": 1,
                "arms": {"replayed": arm},
                "limits": {"session_timeout_s": 120},
                "agents": {"claude_code": {"version": CLAUDE_CODE_VERSION}},
            }
        )
    )
    bench = load_benchmark(tasks)
    store = ArtifactStore(tmp_path / "artifacts")
    script = steps(
        tool_use("toolu_b1", "Bash", {"command": "echo mark=$EVAL_MARK"}),
        tool_use("toolu_w1", "Write", {"file_path": "/workspace/x.txt", "content": "no"}),
        text("finished"),
    )
    with MockMessagesAPI(script) as api:
        spec = ArmSpec.model_validate(
            {"agent": {"adapter": "claude-code", "api_base_url": api.url}, "skills": "none"}
        )
        os.environ["ANTHROPIC_API_KEY"] = KEY
        try:
            record, _ = run_cell(
                bench, TASK, "without_plugin", 0, build_cell_inputs(bench, TASK, store), store,
                generation=None, redactor=Redactor([KEY]), arm_spec=spec, ad_hoc=True,
            )  # fmt: skip
        finally:
            del os.environ["ANTHROPIC_API_KEY"]
        loop = api.main_loop_requests()
    assert loop, "the model API saw no agent-loop request"
    first = loop[0].body or {}
    assert {r.body.get("model") for r in loop if r.body} == {MODEL}
    assert "APPENDED-MARKER-51c2" in json.dumps(first.get("system"))
    offered = {t.get("name") for t in first.get("tools", [])}
    assert "Bash" in offered and not offered & {"Write", "Edit", "Read", "WebFetch"}
    results = tool_results(loop[-1].body or {})
    by_id = {r["tool_use_id"]: json.dumps(r.get("content")) for r in results}
    assert "mark=env-value-9d1e" in by_id["toolu_b1"]
    write = next(r for r in results if r["tool_use_id"] == "toolu_w1")
    assert write.get("is_error") is True  # not offered, so not run
    assert not (tmp_path / "x.txt").exists()
    assert record.skill_eval is not None and record.skill_eval.score == 1.0, record.error_detail


def test_a_fresh_bench_pins_the_model_the_cases_name(tmp_path: Path) -> None:
    from bench_assets.tasks.skill_eval_tasks import ensure_bench

    tasks = tmp_path / "tasks"
    import_plugin(_plugin(tmp_path, f"model: {OTHER}\n"), tasks)
    ensure_bench(tasks, judge=False)
    assert yaml.safe_load((tasks / "bench.yaml").read_text())["model"] == OTHER
    issues, _ = collect_issues(tasks)
    assert not [i for i in issues if i.field == "skill_eval.model"]
