"""Real Claude Code sessions (from the npm registry) against a mock Messages API, on two releases.

The CLI runs exactly as in a benchmark: wfbench's own install of the release
(:mod:`bench_assets.agents.claude_install`), in the sandbox with no network, reaching the model API
only through the egress proxy, which forwards to ``tests/mock_anthropic.py`` on the host's loopback.
The mock scripts the "model": write a file, invoke a skill, loop until the turn limit, answer 401 or
529, spend past the budget, try to reach another listener.

Two releases: the pin (``.ci/claude-code.version``, equal to
:data:`bench_assets.config.models.CLAUDE_CODE_VERSION`) runs every test here; the registry's current
``latest`` runs the ones marked ``both`` (the facts a new release is most likely to break). When
``latest`` is the pin it is tested once; when it cannot be asked for or installed its tests skip
and say why. ``WFBENCH_CLAUDE_CODE_LATEST`` names another release to use as ``latest`` (``off``:
pin only). A broken fact fails as ``<version>: <fact> (seen: ...)``, so a new release's change is
named, not a bare assertion (the facts are the table in ``docs/claude-code-versions.md``).
"""

import json
import os
import re
import socket
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench_assets.agents.base import SessionContext, SessionResult
from bench_assets.agents.claude_code import ClaudeCodeAdapter, parse_stream
from bench_assets.agents.claude_install import ToolUnavailable, ensure_claude_code, registry_latest
from bench_assets.cells.pipeline import build_cell_inputs, run_cell
from bench_assets.config.models import (
    CLAUDE_CODE_VERSION,
    ArmSpec,
    ClaudeCodeAgent,
    ClaudeCodeConfig,
)
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import load_benchmark
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
LATEST_ENV = "WFBENCH_CLAUDE_CODE_LATEST"
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

# The facts about the CLI that wfbench relies on (docs/claude-code-versions.md lists them).
F_INIT = "stream-json starts with system/init naming tools, skills, model and version"
F_MODE = "--permission-mode bypassPermissions is granted (CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=0)"
F_WRITE = "a Write the model asks for changes the file under bypassPermissions"
F_NO_SKILLS = (
    "init.skills lists no skill the arm did not install (skillOverrides turns built-ins off)"
)
F_LISTED = "the model is offered exactly the arm's skills"
F_SKILL = "the Skill tool loads a project skill and answers with a tool_result"
F_TURNS = "--max-turns ends the session with subtype error_max_turns"
F_BUDGET = "--max-budget-usd ends the session with subtype error_max_budget_usd"
F_401 = "a 401 ends the session with api_error_status 401 and the CLI's 'Invalid API key'"
F_TOOLS = "--tools sets init.tools exactly and drops an unknown name silently"
F_EGRESS = "ANTHROPIC_BASE_URL carries every model call; the sandbox reaches nothing else"
F_USAGE = "the result event reports total_cost_usd and modelUsage per model"
F_KEY = "apiKeySource is ANTHROPIC_API_KEY and the key never reaches the transcript"
F_PROBE = "a session stopped at system/init sends nothing to the model API"


@dataclass(frozen=True)
class Cli:
    """One installed release under test."""

    version: str
    exe: Path
    which: str
    """``pin`` or ``latest``."""


def holds(cli: Cli, fact: str, ok: bool, seen: object = "") -> None:
    """Fail as ``<version>: <fact>`` when a fact we rely on does not hold for this release."""
    if not ok:
        pytest.fail(f"{cli.version}: {fact} (seen: {str(seen)[:600]})", pytrace=False)


def _install(version: str, which: str) -> Cli:
    try:
        exe = ensure_claude_code(version)
    except ToolUnavailable as e:
        pytest.skip(f"Claude Code {version} ({which}) cannot be installed: {e}")
    return Cli(version=version, exe=exe, which=which)


_latest: list[str | None] = []


def _latest_version() -> str | None:
    if not _latest:
        named = os.environ.get(LATEST_ENV, "").strip()
        _latest.append(None if named == "off" else named or registry_latest())
    return _latest[0]


@pytest.fixture(scope="session")
def pinned_cli() -> Cli:
    """The pinned release, installed by wfbench into its tools cache if needed."""
    return _install(PIN, "pin")


@pytest.fixture(scope="session")
def latest_cli() -> Cli:
    """The registry's current ``latest`` (skipped with the reason when it cannot be had)."""
    if os.environ.get(LATEST_ENV, "").strip() == "off":
        pytest.skip(f"{LATEST_ENV}=off: the pinned release only")
    version = _latest_version()
    if version is None:
        pytest.skip("the npm registry's latest Claude Code cannot be asked for (npm or network)")
    if version == PIN:
        pytest.skip(f"the registry's latest is {PIN}, the pin: tested once, as the pin")
    return _install(version, "latest")


@pytest.fixture(params=["pin", "latest"])
def cli(request: pytest.FixtureRequest) -> Cli:
    """Each test that takes it runs on the pin and on the registry's latest."""
    name = "pinned_cli" if request.param == "pin" else "latest_cli"
    found: Cli = request.getfixturevalue(name)
    return found


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    """The pinned CLI's executable (other modules' real-CLI tests import this fixture alone)."""
    return _install(PIN, "pin").exe


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


def _adapter(cli: Cli, api: MockMessagesAPI, env: list[str], **spec: Any) -> ClaudeCodeAdapter:
    policy = spec.pop("builtin_skills", "forbid")
    # No executable: wfbench's own install of the pinned release, exactly as a bench runs it.
    agent = ClaudeCodeAgent(adapter="claude-code", api_base_url=api.url, env=env, **spec)
    return ClaudeCodeAdapter(
        agent, cli=ClaudeCodeConfig(version=cli.version, builtin_skills=policy)
    )


def _context(
    tmp_path: Path, env: dict[str, str], skills: tuple[str, ...], expected_skill: str | None
) -> SessionContext:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return SessionContext(
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


def _session(
    tmp_path: Path,
    cli: Cli,
    api: MockMessagesAPI,
    *,
    expected_skill: str | None = None,
    skills: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    **spec: Any,
) -> SessionResult:
    env = {"ANTHROPIC_API_KEY": KEY, **(extra_env or {})}
    ctx = _context(tmp_path, env, skills, expected_skill)
    return _adapter(cli, api, sorted(env), **spec).run(ctx)


def _init(cli: Cli, res: SessionResult) -> dict[str, Any]:
    init = parse_stream(res.transcript or b"").init
    holds(cli, F_INIT, init is not None, res.error_detail)
    assert init is not None
    return init


_LISTING = re.compile(r"skills are available[^\n]*\n(.*?)</system-reminder>", re.S)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _offered(api: MockMessagesAPI) -> tuple[set[str], str]:
    """The skill names the first agent-loop request offers the model, and that request's text."""
    requests = api.main_loop_requests()
    request = "\n".join(_strings(requests[0].body)) if requests else ""
    names: set[str] = set()
    for block in _LISTING.findall(request):
        names |= {m.group(1) for m in re.finditer(r"^- ([^:\s]+):", block, re.M)}
    return names, request


READ_CALC = tool_use("toolu_r1", "Read", {"file_path": "/workspace/calc/__init__.py"})
"""The CLI refuses to overwrite a file the session has not read."""
WRITE_FIX = tool_use(
    "toolu_w1", "Write", {"file_path": "/workspace/calc/__init__.py", "content": FIXED_CALC}
)


def test_real_cli_edits_files_and_a_skills_none_arm_has_no_skills(tmp_path: Path, cli: Cli) -> None:
    """M1/M4 on both releases: the write resolves; the baseline sees no skill it did not install
    (on 2.1.332 the CLI's built-in doctor and plugin-authoring are turned off)."""
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        res = _session(tmp_path, cli, api)
    init = _init(cli, res)
    holds(
        cli, F_MODE, init.get("permissionMode") == "bypassPermissions", init.get("permissionMode")
    )
    holds(cli, F_NO_SKILLS, init.get("skills") == [], init.get("skills"))
    holds(cli, F_INIT, init.get("claude_code_version") == cli.version, init)
    holds(cli, F_WRITE, res.ok, res.error_detail)
    fixed = (tmp_path / "worktree" / "calc" / "__init__.py").read_text()
    holds(cli, F_WRITE, fixed == FIXED_CALC, fixed)
    offered, request = _offered(api)
    holds(cli, F_LISTED, offered == set(), offered)
    holds(cli, F_LISTED, "plugin-authoring" not in request, "plugin-authoring reached the model")
    assert init["model"] == MODEL
    assert "WebSearch" not in init["tools"] and "WebFetch" not in init["tools"]
    assert res.agent_version == cli.version
    # The credential stayed in the proxy: the API saw the real key, the CLI a placeholder.
    holds(cli, F_KEY, {s.headers.get("x-api-key") for s in api.seen} == {KEY}, "headers")
    holds(cli, F_KEY, KEY.encode() not in (res.transcript or b""), "key in transcript")
    # CLAUDE.md is read (the same for every arm); usage comes from the CLI, per model.
    assert any("MARKER-CLAUDE-MD" in json.dumps(s.body) for s in api.main_loop_requests())
    by_model = res.usage.by_model or {}
    holds(cli, F_USAGE, MODEL in by_model and (res.usage.cost_usd or 0) > 0, res.usage)


def test_real_cli_invokes_a_project_skill_and_proves_it(tmp_path: Path, cli: Cli) -> None:
    """M4/M6 on both releases: only the installed skill exists and is offered; Skill is ensured
    though the arm omitted it."""
    script = steps(tool_use("toolu_s1", "Skill", {"skill": "work"}), READ_CALC, WRITE_FIX)
    with MockMessagesAPI(script) as api:
        res = _session(
            tmp_path,
            cli,
            api,
            skills=("work",),
            expected_skill="work",
            allowed_tools=["Read", "Write"],
        )
    init = _init(cli, res)
    holds(cli, F_NO_SKILLS, init.get("skills") == ["work"], init.get("skills"))
    holds(cli, F_SKILL, res.ok, res.error_detail)
    assert init["permissionMode"] == "dontAsk"
    holds(cli, F_TOOLS, sorted(init["tools"]) == ["Read", "Skill", "Write"], init["tools"])
    assert parse_stream(res.transcript or b"").skill_proven("work")
    offered, _ = _offered(api)
    holds(cli, F_LISTED, offered == {"work"}, offered)
    # The skill's body reached the model.
    assert any("SKILL-BODY-work" in json.dumps(s.body) for s in api.main_loop_requests())
    assert (tmp_path / "worktree" / "calc" / "__init__.py").read_text() == FIXED_CALC


def test_real_cli_built_in_skills_are_what_the_policy_says(tmp_path: Path, cli: Cli) -> None:
    """Negative control for forbid, on both releases: with ``allow_if_equal`` the release's own
    skills stay on and reach the model; the set is exactly what the identity records."""
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        adapter = _adapter(cli, api, ["ANTHROPIC_API_KEY"], builtin_skills="allow_if_equal")
        builtins = adapter.builtins()
        assert not isinstance(builtins, str), builtins
        res = adapter.run(_context(tmp_path, {"ANTHROPIC_API_KEY": KEY}, ("work",), None))
    holds(cli, F_WRITE, res.ok, res.error_detail)
    init = _init(cli, res)
    holds(cli, F_NO_SKILLS, set(init["skills"]) == {"work", *builtins.skills}, init["skills"])
    assert adapter.identity()["builtin_skills"] == {
        "policy": "allow_if_equal",
        "skills": sorted(builtins.skills),
    }
    offered, _ = _offered(api)
    # What a user's session of this release offers the model, and forbid turns off. Some
    # built-ins are for the user only (2.1.332's doctor); when a release has any, at least one
    # reaches the model (2.1.332: plugin-authoring), so forbid changes what the arms see.
    assert "work" in offered and offered - {"work"} <= builtins.skills, offered
    assert bool(offered - {"work"}) == bool(builtins.skills), (offered, builtins)


def test_real_cli_that_never_invokes_the_skill_is_skill_not_invoked(
    tmp_path: Path, pinned_cli: Cli
) -> None:
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        res = _session(tmp_path, pinned_cli, api, skills=("work",), expected_skill="work")
    assert res.error_kind is ErrorKind.SKILL_NOT_INVOKED
    assert res.error_detail == "skill 'work' was never invoked"


def _loop(body: dict[str, Any]) -> Reply:
    if not is_main_loop(body):
        return text("ok")
    return tool_use(f"toolu_b{assistant_turns(body)}", "Bash", {"command": "true"})


def test_real_cli_turn_limit_is_a_valid_negative(tmp_path: Path, cli: Cli) -> None:
    """M2 on both releases: looping until --max-turns is the agent's failure."""
    with MockMessagesAPI(_loop) as api:
        res = _session(tmp_path, cli, api, max_turns=2)
    holds(cli, F_TURNS, res.error_kind is ErrorKind.TURN_LIMIT, res.error_detail)
    assert res.error_detail.startswith("turn limit of 2 reached")
    assert res.usage.cost_usd is not None


def test_real_cli_budget_limit_is_a_valid_negative(tmp_path: Path, pinned_cli: Cli) -> None:
    """M8: --max-budget-usd stops the session; tokens still come from modelUsage."""
    costly: Script = lambda body: (  # noqa: E731
        Reply(({"type": "text", "text": "thinking"},), input_tokens=2_000_000)
        if is_main_loop(body)
        else text("ok")
    )
    with MockMessagesAPI(costly) as api:
        res = _session(tmp_path, pinned_cli, api, max_budget_usd=0.5)
    holds(pinned_cli, F_BUDGET, res.error_kind is ErrorKind.BUDGET_LIMIT, res.error_detail)
    assert res.error_detail.startswith("session budget of $0.5 reached (spent $6.")
    assert res.usage.input_tokens == 2_000_000


def test_real_cli_401_is_systemic_and_named(tmp_path: Path, cli: Cli) -> None:
    """M3 on both releases: the detail is the CLI's own message, not "subtype 'success'"."""
    failure = Failure(401, "authentication_error", "invalid x-api-key")
    with MockMessagesAPI(always(failure)) as api:
        res = _session(tmp_path, cli, api, extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    holds(cli, F_401, res.error_kind is ErrorKind.INFRA_ERROR, res.error_detail)
    fragment = "model API authentication failed (HTTP 401): Invalid API key"
    holds(cli, F_401, fragment in res.error_detail, res.error_detail)
    assert KEY not in res.error_detail


def test_real_cli_529_is_a_session_error_with_the_real_cause(
    tmp_path: Path, pinned_cli: Cli
) -> None:
    failure = Failure(529, "overloaded_error", "Overloaded")
    with MockMessagesAPI(always(failure)) as api:
        res = _session(tmp_path, pinned_cli, api, extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    assert res.error_kind is ErrorKind.SESSION_ERROR
    assert "model API overloaded (HTTP 529): API Error: 529" in res.error_detail


def test_real_cli_with_an_unknown_tool_is_stopped_before_any_model_call(
    tmp_path: Path, cli: Cli
) -> None:
    """M6/M7 on both releases: the CLI drops 'Wirte' silently; init shows it, nothing is paid."""
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        res = _session(tmp_path, cli, api, allowed_tools=["Read", "Wirte"])
        holds(cli, F_PROBE, api.seen == [], [s.path for s in api.seen])
    holds(cli, F_TOOLS, res.error_kind is ErrorKind.INFRA_ERROR, res.error_detail)
    stopped = "session stopped at system/init: tool(s) Wirte requested"
    holds(cli, F_TOOLS, res.error_detail.startswith(stopped), res.error_detail)
    assert "forwarded 0 request(s)" in res.error_detail


def test_real_cli_probe_shows_the_session_and_sends_nothing(tmp_path: Path, cli: Cli) -> None:
    """What `wfbench doctor` and evolve's preflight run per arm, on both releases."""
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        adapter = _adapter(cli, api, ["ANTHROPIC_API_KEY"], allowed_tools=["Read", "Write"])
        ctx = _context(tmp_path, {"ANTHROPIC_API_KEY": KEY}, ("work",), "work")
        probe = adapter.probe(ctx)
        holds(cli, F_PROBE, api.seen == [], [s.path for s in api.seen])
    holds(cli, F_INIT, probe.problem == "" and probe.init is not None, probe.problem)
    assert probe.init is not None
    assert probe.init["permissionMode"] == "dontAsk" and probe.init["skills"] == ["work"]
    assert (tmp_path / "worktree" / "calc" / "__init__.py").read_text().endswith("a - b\n")


def test_real_cli_reaches_the_model_api_and_nothing_else(
    tmp_path: Path, cli: Cli, decoy: tuple[int, list[bytes]]
) -> None:
    """Egress negative control on both releases: the agent's own tool tries a host listener,
    an absolute-form request, another path and DNS."""
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
        res = _session(tmp_path, cli, api)
        reached_api = len(api.main_loop_requests())
    holds(cli, F_EGRESS, res.ok, res.error_detail)
    out = json.loads((tmp_path / "worktree" / "egress.json").read_text())
    assert out["direct"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert out["absolute_form"].startswith("HTTP/1.1 403")
    assert "403" in out["other_path"]
    assert out["dns"] != "RESOLVED"
    assert hits == []
    holds(cli, F_EGRESS, reached_api >= 2, reached_api)


def test_real_cli_session_resolves_a_demo_task(tmp_path: Path, pinned_cli: Cli) -> None:
    """A whole cell: sandboxed session edits the worktree, verify and the hidden oracle pass."""
    bench = load_benchmark(
        make_bench(
            tmp_path / "tasks",
            limits={"session_timeout_s": 120},
            agents={"claude_code": {"version": pinned_cli.version}},
        )
    )
    store = ArtifactStore(tmp_path / "artifacts")
    with MockMessagesAPI(steps(READ_CALC, WRITE_FIX)) as api:
        arm = ArmSpec.model_validate(
            {"agent": {"adapter": "claude-code", "api_base_url": api.url}, "skills": "none"}
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
    assert record.agent_version == pinned_cli.version
    assert record.identity["agent"]["version"] == pinned_cli.version
    assert record.model_usage is not None and MODEL in record.model_usage
    assert record.cost_usd is not None and record.input_tokens is not None


def test_the_ci_pin_is_the_default_pin() -> None:
    """``.ci/claude-code.version`` (what CI installs) is the release wfbench suggests and uses
    for an ad hoc arm; moving one without the other would test a CLI nobody runs."""
    assert PIN == CLAUDE_CODE_VERSION, (
        f".ci/claude-code.version ({PIN}) and bench_assets.config.models.CLAUDE_CODE_VERSION "
        f"({CLAUDE_CODE_VERSION}) must move together: the suggested pin is the one CI tests"
    )
