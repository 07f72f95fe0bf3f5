"""Live-agent checks that cost nothing: the agent half of ``wfbench doctor`` and the preflight
``wfbench evolve`` runs before it pays anything.

For a bench whose arms run the real Claude Code CLI (``adapter: claude-code``):

* ``claude-code``: the release pinned in ``agents.claude_code.version`` is installed in wfbench's
  tools cache (:mod:`bench_assets.agents.claude_install`) and answers ``--version`` with exactly
  that release (an arm's own ``executable`` too);
* ``builtins``: the skills and plugins that release brings itself, and what the policy does with
  them (``builtin_skills: forbid`` turns them off in every session);
* ``arm <name>``: the arm's session, started exactly as a cell starts it — its skill tree
  (none, the incumbent, or the incumbent plus the candidate overlay), tools, MCP servers,
  permission mode — and stopped at ``system/init`` (:meth:`ClaudeCodeAdapter.probe`): what the
  CLI granted, against what the arm declares. The egress proxy holds the first model request and
  refuses it, and credentials are placeholders, so nothing is sent to the model API;
* ``credential``: the credential each arm names is set on the host, and the upstream the egress
  proxy would forward to answers a TLS handshake (no request is made).

A bench without such arms (the demo's replay arms) needs none of this, installs nothing and
returns at once.
"""

import http.client
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from bench_assets.agents.base import SessionContext
from bench_assets.agents.claude_code import Builtins, ClaudeCodeAdapter, InitProbe
from bench_assets.agents.claude_install import (
    ToolUnavailable,
    claude_code_home,
    ensure_claude_code,
    npm_available,
    read_install,
)
from bench_assets.agents.phases import plan_phases
from bench_assets.config.models import ArmSpec, ClaudeCodeAgent
from bench_assets.kernel.errors import ContainmentError, InputError
from bench_assets.sandbox.egress import (
    BASE_URL_ENV,
    CREDENTIAL_HEADERS,
    PLACEHOLDER_CREDENTIAL,
    resolve_upstream,
)
from bench_assets.tasks.catalog import Benchmark

EMPTY_GRAPH = '{"nodes": [], "edges": []}\n'
UPSTREAM_TIMEOUT_S = 10.0


class Check(BaseModel):
    """One line of ``wfbench doctor``: ``ok``, or what is wrong and what to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    ok: bool
    detail: str


class PreflightFailed(InputError):
    """A live-agent check failed before anything was paid (``wfbench evolve``)."""


def live_arms(bench: Benchmark) -> list[str]:
    """The arms that run the Claude Code CLI, sorted."""
    return sorted(n for n, a in bench.config.arms.items() if isinstance(a.agent, ClaudeCodeAgent))


def _adapter(bench: Benchmark, arm: ArmSpec) -> ClaudeCodeAdapter:
    assert isinstance(arm.agent, ClaudeCodeAgent)
    return ClaudeCodeAdapter(arm.agent, bench.root, bench.config.agents.claude_code)


def cli_check(bench: Benchmark, *, install: bool, progress: Callable[[str], None]) -> Check:
    """The pinned release is installed (installing it when ``install``) and answers --version."""
    pin = bench.config.agents.claude_code.pinned()
    where = "agents.claude_code.version"
    managed = [n for n in live_arms(bench) if _agent(bench, n).executable is None]
    try:
        if managed:
            ensure_claude_code(pin, install=install, progress=progress)
    except ToolUnavailable as e:
        detail = str(e)
        if npm_available() is None and "npm is not on PATH" not in detail:
            detail += (
                "; npm is not on PATH either: install Node.js and npm first (e.g. `sudo "
                "apt-get install nodejs npm`)"
            )
        return Check(check="claude-code", ok=False, detail=detail)
    problems = []
    for name in live_arms(bench):
        verified = _adapter(bench, bench.config.arms[name]).verified_runtime(install=False)
        if isinstance(verified, str):
            problems.append(f"arm {name}: {verified}")
    if problems:
        return Check(check="claude-code", ok=False, detail="; ".join(problems))
    own = sorted({str(_agent(bench, n).executable) for n in live_arms(bench)} - {"None"})
    where_from = [f"installed in {claude_code_home(pin)}"] if managed else []
    where_from += [f"arm executable {e}" for e in own]
    return Check(
        check="claude-code",
        ok=True,
        detail=f"{pin} ({where}): {', '.join(where_from)}; answers --version {pin}",
    )


def _agent(bench: Benchmark, name: str) -> ClaudeCodeAgent:
    agent = bench.config.arms[name].agent
    assert isinstance(agent, ClaudeCodeAgent)
    return agent


def install_check(bench: Benchmark) -> list[Check]:
    """Without a working sandbox: only whether the pinned release is installed (nothing runs)."""
    pin = bench.config.agents.claude_code.pinned()
    record = read_install(pin)
    if record is None:
        npm = "" if npm_available() else "; install Node.js and npm first (npm is not on PATH)"
        line = Check(
            check="claude-code",
            ok=False,
            detail=f"Claude Code {pin} (agents.claude_code.version) is not installed in "
            f"{claude_code_home(pin)}: run `wfbench doctor --install` once the sandbox works"
            f"{npm}",
        )
    else:
        line = Check(
            check="claude-code",
            ok=True,
            detail=f"{pin} installed in {claude_code_home(pin)} ({record.version_output!r} at "
            "install); its --version and the arms' sessions are checked once the sandbox works",
        )
    why = "not probed: the sandbox is not ready (see the sandbox line)"
    return [line, *(Check(check=f"arm {n}", ok=False, detail=why) for n in live_arms(bench))]


def builtins_check(bench: Benchmark) -> tuple[Check, Builtins | None]:
    """What the pinned release brings itself, and what the bench's policy does with it."""
    cli = bench.config.agents.claude_code
    arms = live_arms(bench)
    found = _adapter(bench, bench.config.arms[arms[0]]).builtins(install=False)
    if isinstance(found, str):
        return Check(check="builtins", ok=False, detail=found), None
    skills = ", ".join(sorted(found.skills)) or "none"
    plugins = ", ".join(found.plugins) or "none"
    what = (
        "turned off in every session (skillOverrides)"
        if cli.builtin_skills == "forbid"
        else "kept, recorded in every cell's identity; every arm must see them all"
    )
    detail = (
        f"Claude Code {found.version} brings skills: {skills} (built-in plugins: {plugins}); "
        f"builtin_skills: {cli.builtin_skills}: {what}"
    )
    return Check(check="builtins", ok=True, detail=detail), found


def _secrets(agent: ClaudeCodeAgent) -> dict[str, str]:
    """What the session gets for the arm's ``env`` names: placeholders for credentials."""
    out = {}
    for name in agent.env:
        if name in CREDENTIAL_HEADERS:
            out[name] = PLACEHOLDER_CREDENTIAL
        elif name in os.environ:
            out[name] = os.environ[name]
    return out


def _skill_layers(bench: Benchmark, arm: ArmSpec, candidate: str | None) -> list[Path]:
    if arm.skills == "none":
        return []
    layers = [bench.skills_dir]
    if arm.skills == "candidate" and candidate is not None and candidate in bench.candidates:
        layers.append(bench.candidates[candidate].files_dir)
    return layers


def _candidate_for_doctor(bench: Benchmark, candidate: str | None) -> str | None:
    """The overlay a candidate arm is probed with: the generation's, else the first queued."""
    if candidate is not None:
        return candidate
    return min(bench.candidates) if bench.candidates else None


def arm_probes(bench: Benchmark, name: str, candidate: str | None) -> list[InitProbe]:
    """The arm's sessions (one per distinct expected skill of its phases), stopped at init."""
    arm = bench.config.arms[name]
    agent = arm.agent
    assert isinstance(agent, ClaudeCodeAgent)
    adapter = _adapter(bench, arm)
    timeout = float(bench.config.limits.session_timeout_s)
    phases = plan_phases(arm, default_timeout_s=timeout, agent_skill=agent.expected_skill)
    skills = list(dict.fromkeys(p.expected_skill if arm.skills != "none" else None for p in phases))
    probes = []
    with tempfile.TemporaryDirectory(prefix="wfbench-probe-") as tmp:
        root = Path(tmp)
        work = root / "worktree"
        work.mkdir()
        for layer in _skill_layers(bench, arm, candidate):
            shutil.copytree(layer, work / bench.config.skills.install_path, dirs_exist_ok=True)
        graph = root / "graph.json"
        graph.write_text(EMPTY_GRAPH, encoding="utf-8")
        review = root / "review-output" if arm.kind == "review" else None
        if review is not None:
            review.mkdir()
        for i, expected in enumerate(skills):
            scratch = root / f"scratch-{i}"
            scratch.mkdir()
            ctx = SessionContext(
                task_id="doctor",
                arm=name,
                run=0,
                prompt="",
                model=bench.config.model,
                effort=bench.config.effort,
                workdir=work,
                scratch=scratch,
                timeout_s=timeout,
                expected_skill=expected,
                secrets_env=_secrets(agent),
                review_output=review,
                graph_file=graph,
            )
            probes.append(adapter.probe(ctx))
    return probes


def arm_check(bench: Benchmark, name: str, candidate: str | None) -> Check:
    """One line for one arm: the session's init against the arm's declaration."""
    label = f"arm {name}"
    probes = arm_probes(bench, name, _candidate_for_doctor(bench, candidate))
    failed = [p for p in probes if p.problem]
    if failed:
        problem = failed[0].problem
        return Check(check=label, ok=False, detail=f"{problem}: {_fix(bench, name, problem)}")
    return Check(check=label, ok=True, detail=describe(probes[0]))


def _fix(bench: Benchmark, name: str, problem: str) -> str:
    """What to do about an arm whose session is not the one it declares."""
    agent = f"arms.{name}.agent"
    fixes = {
        "expected skill": f"add the skill to {bench.config.skills.source}/ (installed at "
        f"{bench.config.skills.install_path}; Claude Code lists a skill only when its SKILL.md "
        f"front matter has a description) or change {agent}.expected_skill",
        "tool(s)": f"fix {agent}.allowed_tools: this Claude Code does not know those tools",
        "skills not installed": "the release brings skills wfbench cannot turn off: set "
        "agents.claude_code.builtin_skills: allow_if_equal, or pin another release",
        "skills neither": "remove the plugin or user skills the session picked up",
        "built-in skill(s)": "pin a release whose built-in skills are the same in every session",
        "MCP server": f"fix {agent}.mcp_servers",
        "disallowed tool": f"fix {agent}.disallowed_tools",
        "permission mode": "this release does not grant the mode wfbench asks for: pin another "
        "release (docs/claude-code-versions.md)",
        "the CLI runs model": "name a model id this release accepts (bench.yaml model)",
    }
    for start, fix in fixes.items():
        if start in problem:
            return fix
    return f"fix {agent} or agents.claude_code in bench.yaml"


def describe(probe: InitProbe) -> str:
    """What the CLI granted, against what the arm declared (from a successful probe)."""
    init, want = probe.init or {}, probe.want
    assert want is not None
    skills = sorted(str(s) for s in init.get("skills") or [])
    tools = [str(t) for t in init.get("tools") or []]
    servers = sorted(
        f"{s.get('name')} ({s.get('status')})"
        for s in init.get("mcp_servers") or []
        if isinstance(s, dict)
    )
    declared_tools = ", ".join(want.tools) if want.tools is not None else "the CLI's default set"
    declared_skills = ", ".join(sorted(want.installed_skills)) or "none"
    expected = f", expected skill {want.expected_skill!r} present" if want.expected_skill else ""
    turned_off = " (built-ins turned off)" if probe.settings else ""
    return (
        f"stopped at system/init, nothing sent: permission mode {init.get('permissionMode')} "
        f"(requested {want.permission_mode}); skills {', '.join(skills) or 'none'} (installs "
        f"{declared_skills}{expected}){turned_off}; {len(tools)} tools ({', '.join(tools)}; "
        f"declared: {declared_tools}); MCP servers {', '.join(servers) or 'none'} (declared "
        f"{', '.join(sorted(want.mcp_servers)) or 'none'}); model {init.get('model')}"
    )


def credential_check(bench: Benchmark, names: Iterable[str], *, handshake: bool = True) -> Check:
    """Each arm names a credential that is set, and (``handshake``) its upstream answers a TLS
    handshake. ``wfbench evolve`` leaves the handshake out: an unreachable API is a transient
    outage its breaker handles, and costs nothing."""
    missing: dict[str, list[str]] = {}
    upstreams: dict[str, list[str]] = {}
    for name in names:
        agent = bench.config.arms[name].agent
        assert isinstance(agent, ClaudeCodeAgent)
        named = [n for n in agent.env if n in CREDENTIAL_HEADERS]
        if not any(os.environ.get(n) for n in named):
            want = " or ".join(named) or " or ".join(CREDENTIAL_HEADERS)
            missing.setdefault(want, []).append(name)
        try:
            upstream = resolve_upstream(agent.api_base_url, agent.env, dict(os.environ))
        except ContainmentError as e:
            return Check(check="credential", ok=False, detail=f"arm {name}: {e}")
        upstreams.setdefault(upstream, []).append(name)
    if missing:
        lines = [
            f"{want} is not set on the host (arm(s) {', '.join(arms)}): export it, or name the "
            "variable that holds the key in the arm's env list"
            for want, arms in missing.items()
        ]
        return Check(check="credential", ok=False, detail="; ".join(lines))
    if not handshake:
        return Check(check="credential", ok=True, detail="credentials set")
    for upstream, arms in upstreams.items():
        problem = _handshake(upstream)
        if problem:
            return Check(
                check="credential",
                ok=False,
                detail=f"the model API {upstream} (arm(s) {', '.join(arms)}) is unreachable from "
                f"this machine: {problem}; the egress proxy forwards there directly (no HTTP "
                f"proxy): fix the network, or set api_base_url / {BASE_URL_ENV} to a gateway",
            )
    return Check(
        check="credential",
        ok=True,
        detail="credentials set; model API "
        + ", ".join(sorted(upstreams))
        + " accepts a connection (TLS handshake for https; no request made)",
    )


def _handshake(upstream: str) -> str:
    parts = urlsplit(upstream)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=UPSTREAM_TIMEOUT_S)
    try:
        conn.connect()
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return ""


def agent_checks(
    bench: Benchmark,
    *,
    install: bool,
    candidate: str | None = None,
    progress: Callable[[str], None] = lambda m: None,
    handshake: bool = True,
) -> list[Check]:
    """Every live-agent check of ``bench`` (see module docstring); none without claude-code arms.

    Args:
        install: install the pinned release when it is missing.
        candidate: the overlay candidate arms get (default: the first queued one).
        handshake: check that each upstream answers a TLS handshake (``wfbench doctor``).
    """
    arms = live_arms(bench)
    if not arms:
        return []
    first = cli_check(bench, install=install, progress=progress)
    checks = [first]
    if not first.ok:
        why = "Claude Code is not ready (see the claude-code line)"
        checks += [Check(check=f"arm {n}", ok=False, detail=f"not probed: {why}") for n in arms]
    else:
        line, builtins = builtins_check(bench)
        checks.append(line)
        for name in arms:
            if builtins is None:
                checks.append(
                    Check(check=f"arm {name}", ok=False, detail="not probed: " + line.detail)
                )
            else:
                checks.append(arm_check(bench, name, candidate))
    checks.append(credential_check(bench, arms, handshake=handshake))
    return checks


def require_live_agents(
    bench: Benchmark, *, candidate: str | None, progress: Callable[[str], None]
) -> None:
    """``wfbench evolve``'s preflight: every live-agent check passes, or nothing is paid.

    Installs the pinned release if it is missing (an arm that uses it is about to run).

    Raises:
        PreflightFailed: naming each failed check and what to do.
    """
    if not live_arms(bench):
        return
    progress("live-agent preflight: the pinned Claude Code and each arm's session up to init")
    failed = [
        c
        for c in agent_checks(
            bench, install=True, candidate=candidate, progress=progress, handshake=False
        )
        if not c.ok
    ]
    if failed:
        lines = "\n  ".join(f"{c.check}: {c.detail}" for c in failed)
        raise PreflightFailed(
            f"live-agent preflight failed; nothing was paid (`wfbench doctor` shows every "
            f"check):\n  {lines}"
        )
