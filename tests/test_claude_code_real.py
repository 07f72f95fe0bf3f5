"""Real Claude Code sessions (the pinned CLI from the npm registry) against a mock Messages API.

The CLI runs exactly as in a benchmark: in the sandbox with no network, reaching the model API
only through the egress proxy, which forwards to ``tests/mock_anthropic.py`` on the host's
loopback. The mock scripts the "model": write a file, invoke a skill, loop until the turn limit,
answer 401 or 529, spend past the budget, try to reach another listener. The CLI version is
pinned in ``.ci/claude-code.version``; ``.ci/run`` installs it into ``.tools/claude-code`` (this
module installs it there too when npm is available) and the tests skip, with the reason, only
when it cannot be installed.
"""

import json
import os
import shutil
import socket
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench_assets.agents.base import SessionContext, SessionResult
from bench_assets.agents.claude_code import ClaudeCodeAdapter, parse_stream
from bench_assets.catalog import load_benchmark
from bench_assets.cells import build_cell_inputs, run_cell
from bench_assets.errorkinds import ErrorKind
from bench_assets.models import ArmSpec, ClaudeCodeAgent
from bench_assets.redact import Redactor
from bench_assets.store import ArtifactStore
from tests.conftest import REPO_ROOT, make_bench
from tests.mock_anthropic import (
    Failure,
    MockMessagesAPI,
    Reply,
    Script,
    always,
    assistant_turns,
    is_main_loop,
    steps,
    text,
    tool_use,
)

PIN = (REPO_ROOT / ".ci" / "claude-code.version").read_text().strip()
TOOLS = REPO_ROOT / ".tools" / "claude-code"
MODEL = "claude-sonnet-4-5-20250929"
KEY = "sk-ant-api03-realcli-test-key-0123456789abcdefghij"
FIXED_CALC = textwrap.dedent(
    """\
    import math


    def add(a, b):
        return a + b


    class Acc:
        def __init__(self):
            self.total = 0

        def push(self, x):
            self.total = add(self.total, x)
            return self.total
    """
)


def _installed_version(exe: Path) -> str | None:
    if not exe.exists():
        return None
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode(errors="replace").split(" ", 1)[0].strip() or None


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    """The pinned CLI binary, installed into .tools/claude-code if needed."""
    exe = TOOLS / "node_modules" / ".bin" / "claude"
    if _installed_version(exe) != PIN:
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip(f"Claude Code {PIN} is not installed and npm is missing (run .ci/run)")
        TOOLS.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(TOOLS),
                    "--no-audit",
                    "--no-fund",
                    f"@anthropic-ai/claude-code@{PIN}",
                ],
                capture_output=True,
                timeout=900,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"installing Claude Code {PIN} from the npm registry timed out")
        if done.returncode != 0 or _installed_version(exe) != PIN:
            tail = done.stderr.decode(errors="replace")[-300:]
            pytest.skip(f"Claude Code {PIN} could not be installed from the npm registry: {tail}")
    return exe.resolve()


@pytest.fixture
def decoy() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback listener on the host that is not the model API; records every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    hits: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                hits.append(conn.recv(4096))
            except OSError:
                hits.append(b"")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    # Wake the blocked accept() before closing: a closed fd number is reused at once, and a
    # thread still accepting on it would steal the next test's connections.
    server.shutdown(socket.SHUT_RDWR)
    thread.join(timeout=5)
    server.close()


def _workdir(tmp_path: Path, skills: tuple[str, ...] = ()) -> Path:
    work = tmp_path / "worktree"
    (work / "calc").mkdir(parents=True)
    (work / "calc" / "__init__.py").write_text("def add(a, b):\n    return a - b\n")
    (work / "CLAUDE.md").write_text("Repository notes: MARKER-CLAUDE-MD\n")
    for name in skills:
        skill = work / ".claude" / "skills" / name / "SKILL.md"
        skill.parent.mkdir(parents=True)
        skill.write_text(f"---\nname: {name}\ndescription: {name} skill\n---\nSKILL-BODY-{name}\n")
    return work


def _session(
    tmp_path: Path,
    cli: Path,
    api: MockMessagesAPI,
    *,
    expected_skill: str | None = None,
    skills: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    **spec: Any,
) -> SessionResult:
    env = {"ANTHROPIC_API_KEY": KEY, **(extra_env or {})}
    agent = ClaudeCodeAgent(
        adapter="claude-code",
        executable=str(cli),
        api_base_url=api.url,
        env=sorted(env),
        **spec,
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ctx = SessionContext(
        task_id="alpha",
        arm="arm",
        run=0,
        prompt="Fix add() so that it adds.",
        model=MODEL,
        effort=None,
        workdir=_workdir(tmp_path, skills),
        scratch=scratch,
        timeout_s=120.0,
        expected_skill=expected_skill,
        secrets_env=env,
    )
    return ClaudeCodeAdapter(agent).run(ctx)


def _init(res: SessionResult) -> dict[str, Any]:
    init = parse_stream(res.transcript or b"").init
    assert init is not None
    return init


READ_CALC = tool_use("toolu_r1", "Read", {"file_path": "/workspace/calc/__init__.py"})
"""The CLI refuses to overwrite a file the session has not read."""
WRITE_FIX = tool_use(
    "toolu_w1", "Write", {"file_path": "/workspace/calc/__init__.py", "content": FIXED_CALC}
)


def test_real_cli_edits_files_under_the_default_arm_config(
    tmp_path: Path, claude_cli: Path
) -> None:
    """M1: with the arm config bench.yaml suggests, the Write is allowed and the file changes."""
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        res = _session(tmp_path, claude_cli, api)
    assert res.ok, res.error_detail
    assert (tmp_path / "worktree" / "calc" / "__init__.py").read_text() == FIXED_CALC
    init = _init(res)
    assert init["permissionMode"] == "bypassPermissions"
    assert init["skills"] == []  # M4: no bundled skills for an arm without skills
    assert init["model"] == MODEL
    assert "WebSearch" not in init["tools"] and "WebFetch" not in init["tools"]
    assert res.agent_version == PIN
    # The credential stayed in the proxy: the API saw the real key, the CLI a placeholder.
    assert {s.headers.get("x-api-key") for s in api.seen} == {KEY}
    assert KEY.encode() not in (res.transcript or b"")
    # CLAUDE.md is read (the same for every arm); usage comes from the CLI, per model.
    assert any("MARKER-CLAUDE-MD" in json.dumps(s.body) for s in api.main_loop_requests())
    assert res.usage.by_model is not None and MODEL in res.usage.by_model
    assert res.usage.cost_usd is not None and res.usage.cost_usd > 0


def test_real_cli_invokes_a_project_skill_and_proves_it(tmp_path: Path, claude_cli: Path) -> None:
    """M4/M6: only the installed skill exists, and Skill is ensured though the arm omitted it."""
    script = steps(tool_use("toolu_s1", "Skill", {"skill": "work"}), READ_CALC, WRITE_FIX)
    with MockMessagesAPI(script) as api:
        res = _session(
            tmp_path,
            claude_cli,
            api,
            skills=("work",),
            expected_skill="work",
            allowed_tools=["Read", "Write"],
        )
    assert res.ok, res.error_detail
    init = _init(res)
    assert init["skills"] == ["work"]
    assert init["permissionMode"] == "dontAsk"
    assert sorted(init["tools"]) == ["Read", "Skill", "Write"]
    assert parse_stream(res.transcript or b"").skill_proven("work")
    # The skill's body reached the model.
    assert any("SKILL-BODY-work" in json.dumps(s.body) for s in api.main_loop_requests())
    assert (tmp_path / "worktree" / "calc" / "__init__.py").read_text() == FIXED_CALC


def test_real_cli_that_never_invokes_the_skill_is_skill_not_invoked(
    tmp_path: Path, claude_cli: Path
) -> None:
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        res = _session(tmp_path, claude_cli, api, skills=("work",), expected_skill="work")
    assert res.error_kind is ErrorKind.SKILL_NOT_INVOKED
    assert res.error_detail == "skill 'work' was never invoked"


def _loop(body: dict[str, Any]) -> Reply:
    if not is_main_loop(body):
        return text("ok")
    return tool_use(f"toolu_b{assistant_turns(body)}", "Bash", {"command": "true"})


def test_real_cli_turn_limit_is_a_valid_negative(tmp_path: Path, claude_cli: Path) -> None:
    """M2: looping until --max-turns is the agent's failure, not a session error."""
    with MockMessagesAPI(_loop) as api:
        res = _session(tmp_path, claude_cli, api, max_turns=2)
    assert res.error_kind is ErrorKind.TURN_LIMIT
    assert res.error_detail.startswith("turn limit of 2 reached")
    assert res.usage.cost_usd is not None


def test_real_cli_budget_limit_is_a_valid_negative(tmp_path: Path, claude_cli: Path) -> None:
    """M8: --max-budget-usd stops the session; tokens still come from modelUsage."""
    costly: Script = lambda body: (  # noqa: E731
        Reply(({"type": "text", "text": "thinking"},), input_tokens=2_000_000)
        if is_main_loop(body)
        else text("ok")
    )
    with MockMessagesAPI(costly) as api:
        res = _session(tmp_path, claude_cli, api, max_budget_usd=0.5)
    assert res.error_kind is ErrorKind.BUDGET_LIMIT
    assert res.error_detail.startswith("session budget of $0.5 reached (spent $6.")
    assert res.usage.input_tokens == 2_000_000


@pytest.mark.parametrize(
    ("failure", "kind", "fragment"),
    [
        (
            Failure(401, "authentication_error", "invalid x-api-key"),
            ErrorKind.INFRA_ERROR,
            "model API authentication failed (HTTP 401): Invalid API key",
        ),
        (
            Failure(529, "overloaded_error", "Overloaded"),
            ErrorKind.SESSION_ERROR,
            "model API overloaded (HTTP 529): API Error: 529",
        ),
    ],
)
def test_real_cli_api_failures_are_systemic_with_the_real_cause(
    tmp_path: Path, claude_cli: Path, failure: Failure, kind: ErrorKind, fragment: str
) -> None:
    """M3: the detail is the CLI's own message, not "subtype 'success' (is_error=True)"."""
    with MockMessagesAPI(always(failure)) as api:
        res = _session(tmp_path, claude_cli, api, extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    assert res.error_kind is kind
    assert fragment in res.error_detail
    assert KEY not in res.error_detail


def test_real_cli_with_an_unknown_tool_is_stopped_before_any_model_call(
    tmp_path: Path, claude_cli: Path
) -> None:
    """M6/M7: the CLI drops 'Wirte' silently; init shows it, and nothing is paid for."""
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        res = _session(tmp_path, claude_cli, api, allowed_tools=["Read", "Wirte"])
        assert api.seen == []
    assert res.error_kind is ErrorKind.INFRA_ERROR
    assert res.error_detail.startswith("session stopped at system/init: tool(s) Wirte requested")
    assert "forwarded 0 request(s)" in res.error_detail


def test_real_cli_reaches_the_model_api_and_nothing_else(
    tmp_path: Path, claude_cli: Path, decoy: tuple[int, list[bytes]]
) -> None:
    """Egress negative control: the agent's own tool tries a host listener and other paths."""
    port, hits = decoy
    probe = textwrap.dedent(
        f"""\
        import json, os, socket, urllib.request
        out = {{}}
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=3)
            out["direct"] = "REACHED"
        except OSError as e:
            out["direct"] = type(e).__name__
        base = os.environ["ANTHROPIC_BASE_URL"]
        host, p = base.rsplit("/", 1)[-1].split(":")
        s = socket.create_connection((host, int(p)), timeout=3)
        s.sendall(b"GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n")
        out["absolute_form"] = s.recv(200).split(b"\\r\\n", 1)[0].decode()
        try:
            urllib.request.urlopen(base + "/v1/files", timeout=3)
        except Exception as e:
            out["other_path"] = str(e)
        try:
            socket.getaddrinfo("registry.npmjs.org", 443)
            out["dns"] = "RESOLVED"
        except OSError as e:
            out["dns"] = type(e).__name__
        open("/workspace/egress.json", "w").write(json.dumps(out))
        """
    )
    command = f"python3 - <<'EOF'\n{probe}EOF"
    with MockMessagesAPI(steps(tool_use("toolu_b1", "Bash", {"command": command}))) as api:
        res = _session(tmp_path, claude_cli, api)
        reached_api = len(api.main_loop_requests())
    assert res.ok, res.error_detail
    out = json.loads((tmp_path / "worktree" / "egress.json").read_text())
    assert out["direct"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert out["absolute_form"].startswith("HTTP/1.1 403")
    assert "403" in out["other_path"]
    assert out["dns"] != "RESOLVED"
    assert hits == []
    assert reached_api >= 2


def test_real_cli_session_resolves_a_demo_task(tmp_path: Path, claude_cli: Path) -> None:
    """A whole cell: sandboxed session edits the worktree, verify and the hidden oracle pass."""
    bench = load_benchmark(make_bench(tmp_path / "tasks", limits={"session_timeout_s": 120}))
    store = ArtifactStore(tmp_path / "artifacts")
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        arm = ArmSpec.model_validate(
            {
                "agent": {
                    "adapter": "claude-code",
                    "executable": str(claude_cli),
                    "api_base_url": api.url,
                },
                "skills": "none",
            }
        )
        os.environ["ANTHROPIC_API_KEY"] = KEY
        try:
            record, _ = run_cell(
                bench,
                "alpha",
                "live",
                0,
                build_cell_inputs(bench, "alpha", store),
                store,
                generation="g0001",
                redactor=Redactor([KEY]),
                arm_spec=arm,
            )
        finally:
            del os.environ["ANTHROPIC_API_KEY"]
    assert record.resolved, record.error_detail
    assert (record.verify_passed, record.oracle_passed, record.error_kind) == (True, True, None)
    assert record.churn_files == 1
    assert record.agent_version == PIN
    assert record.model_usage is not None and MODEL in record.model_usage
    assert record.cost_usd is not None and record.input_tokens is not None
