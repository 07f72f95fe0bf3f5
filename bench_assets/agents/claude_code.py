"""The ``claude-code`` adapter: the real Claude Code CLI in headless mode.

One session is one sandboxed process::

    claude -p --input-format text --output-format stream-json --verbose --model M
        --strict-mcp-config --mcp-config '{"mcpServers":{}}' --setting-sources project
        --permission-mode MODE --disallowedTools WebSearch --disallowedTools WebFetch
        [--settings '{"skillOverrides":{...}}'] [--tools T,...] [--allowedTools T]...
        [--disallowedTools T]... [--max-turns N] [--max-budget-usd X] [--effort E]
        [--append-system-prompt=TEXT]

with the prompt on standard input (never in argv, where any process could read it). The CLI's
``stream-json`` output is one JSON object per line: a ``system``/``init`` event, ``assistant`` and
``user`` events wrapping Anthropic Messages (``tool_use`` / ``tool_result`` blocks), and one
terminal ``result`` event carrying the CLI's own accounting (``total_cost_usd``, ``num_turns``,
``duration_ms``, ``usage``, ``modelUsage``, ``permission_denials``). Usage is read from that event
only; a field it does not carry stays ``None``. :func:`parse_stream` is the pure parser and
:func:`judge` the pure classifier, both testable without processes.

What every session is, whatever the arm (so arms differ only in what they claim to differ in):

* **Permissions as requested.** ``bypassPermissions`` (or ``dontAsk`` when the arm pre-approves
  tools). ``CLAUDE_CODE_SUBPROCESS_ENV_SCRUB`` is forced to ``0``: when set, the CLI silently
  forces the mode back to ``default`` and denies every un-approved write. The mode in force is
  read back from ``system/init``; a mismatch, or a permission denial of a tool the arm did not
  restrict, is an ``infra-error`` — never a valid negative with 0 files changed.
* **The pinned release** (``agents.claude_code.version``): wfbench's own install of it
  (:mod:`bench_assets.agents.claude_install`) unless the arm names an ``executable``; either way the
  CLI must answer ``--version`` with the pin and ``init`` must name it, else no session starts. The
  cell identity holds the pin, never a probe.
* **No skills but the arm's** (``CLAUDE_CODE_DISABLE_BUNDLED_SKILLS=1``, and since 2.1.332 the
  skills the release brings past it — ``doctor``, built-in plugins' ``plugin-authoring`` — read
  once per release from an init-only session in an empty worktree (``builtins()``) and turned
  off with ``--settings`` ``skillOverrides``): ``init.skills`` may hold only
  skills installed in the worktree's ``.claude/skills``; the ``skills: none`` baseline has none.
  (``builtin_skills: allow_if_equal`` keeps the release's own and requires exactly them.)
* **The repository's own Claude configuration.** Project settings are the only setting source
  (``--setting-sources project``: no user or local settings). A repository's
  ``.claude/settings.json`` / ``.claude/settings.local.json`` are masked with an empty ``{}``
  (read-only) because they configure the *agent* — permissions, hooks, model, environment — which
  the arm defines. Its ``CLAUDE.md`` is kept: it is repository documentation every arm reads
  alike, as a developer's Claude Code would.
* **Model-API-only egress**: the sandbox has no network; the CLI reaches the model API through
  the harness's egress proxy (:mod:`bench_assets.sandbox.egress`), which holds the credential — the
  session sees only a placeholder — and holds every request until ``system/init`` has been
  checked, so a misconfigured session is stopped before a model call is paid for. Web tools are
  disallowed (``WebSearch`` runs on the API's side, ``WebFetch`` would need the network).
* **Dated model ids only** (see :func:`bench_assets.config.models.check_model_id`); ``init.model``
  must equal the requested id. Tokens per model come from ``modelUsage``.

* **A skill-eval case's settings** (:class:`~bench_assets.tasks.skill_eval_tasks.CaseSession`,
  passed in the context): its ``allowed_tools`` narrowed by the arm's (:func:`granted_tools`), its
  appended system prompt, its ``EVAL_*`` variables (set first, so no harness variable can be
  replaced; a case naming one never starts: :func:`case_problem`) and its turn cap. Its model is
  bench.yaml's (validation refuses another), so ``--model`` is unchanged.

Outcomes come from the CLI's own fields: ``error_max_turns`` is ``turn-limit`` and
``error_max_budget_usd`` is ``budget-limit`` (valid negatives); an API failure — reported as
``is_error`` with ``subtype: success``, ``api_error_status`` and the assistant event's ``error`` —
is systemic, with the CLI's own message in the detail: authentication or an unreachable API is an
``infra-error``, rate limits, overload and server errors a ``session-error``.

Why one file over 500 lines: everything this adapter passes to the CLI — runtime resolution,
mounts, settings (built-in skills, tools, a case's settings), the init probe and the outcome
mapping — must agree with one CLI release; keeping them in one module is what a pin bump
reviews. The stream-json parsing is already apart (``claude_stream.py``).
"""

import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_assets.agents.arm_tools import ArmTools
from bench_assets.agents.base import (
    SessionContext,
    SessionResult,
    Usage,
    session_sandbox,
)
from bench_assets.agents.claude_install import ToolUnavailable, claude_code_home, ensure_claude_code
from bench_assets.agents.claude_stream import (
    _MAX_INIT_BYTES,
    _MAX_SYSTEM_EVENTS_BEFORE_INIT,
    _SESSION_ENV,
    _SKILL_TOOL,
    _SYSTEM_TREES,
    _VERSION_RE,
    ALWAYS_DISALLOWED,
    EMPTY_MCP_CONFIG,
    MASKED_SETTINGS,
    MAX_TRANSCRIPT_BYTES,
    SETTING_SOURCES,
    SKILLS_DIR,
    VERSION_TIMEOUT_S,
    Expectations,
    _decode_line,
    check_init,
    judge,
    parse_stream,
)
from bench_assets.config.models import ClaudeCodeAgent, ClaudeCodeConfig
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import ContainmentError
from bench_assets.sandbox.egress import (
    BASE_URL_ENV,
    CREDENTIAL_HEADERS,
    PLACEHOLDER_CREDENTIAL,
    ModelApiProxy,
    credential_headers,
    resolve_upstream,
)
from bench_assets.sandbox.process import (
    WORKSPACE,
    Isolation,
    Mount,
    SandboxSpec,
    run,
    sandbox_env,
    unsafe_mode,
)
from bench_assets.sandbox.redact import Redactor


def _under(path: Path, roots: tuple[str, ...]) -> bool:
    return any(path == Path(r) or path.is_relative_to(r) for r in roots)


def _mountable(path: Path) -> bool:
    # Never expose the whole host root or the whole home folder, even read-only.
    return path != Path("/") and path != Path.home() and len(path.parts) > 2


def _shebang(path: Path) -> list[str]:
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", errors="replace")
    return line.split()


@dataclass(frozen=True)
class _Runtime:
    """How to start the CLI inside the sandbox."""

    exe: Path
    mounts: tuple[Mount, ...]
    path_prefix: tuple[str, ...]


def _resolve_runtime(executable: str) -> _Runtime | str:
    """Where the CLI lives and what to mount for it, or why it cannot be started."""
    found = shutil.which(executable)
    if found is None:
        return f"claude executable {executable!r} not found on PATH"
    exe = Path(found).resolve()
    mount_dirs: list[Path] = []
    path_prefix: list[str] = []
    if not _under(exe, _SYSTEM_TREES):
        if not _mountable(exe.parent):
            return f"claude executable {str(exe)!r} is in a folder wfbench will not mount"
        mount_dirs.append(exe.parent)
    interpreter = _interpreter_of(exe, path_prefix)
    if interpreter is not None and not _under(interpreter, _SYSTEM_TREES):
        prefix = interpreter.parent.parent
        mount_dirs.append(prefix if _mountable(prefix) else interpreter.parent)
    mounts = tuple(Mount(d, str(d)) for d in dict.fromkeys(mount_dirs) if _mountable(d))
    return _Runtime(exe=exe, mounts=mounts, path_prefix=tuple(path_prefix))


def _interpreter_of(exe: Path, path_prefix: list[str]) -> Path | None:
    words = _shebang(exe)
    if not words:
        return None
    if Path(words[0]).name != "env":
        return Path(words[0]).resolve()
    name = next((w for w in words[1:] if not w.startswith("-")), None)
    if name is None:
        return None
    # Prefer what the sandbox's own PATH finds; fall back to the host PATH and expose that dir.
    inside = shutil.which(name, path=sandbox_env()["PATH"])
    if inside is not None:
        return Path(inside).resolve()
    host = shutil.which(name)
    if host is None:
        return None
    path_prefix.append(str(Path(host).parent))
    return Path(host).resolve()


def installed_skills(workdir: Path) -> frozenset[str]:
    """Names of the project skills in ``workdir`` (folder names and ``name:`` front matter)."""
    root = workdir / SKILLS_DIR
    names: set[str] = set()
    if not root.is_dir():
        return frozenset()
    for skill_md in root.glob("*/SKILL.md"):
        names.add(skill_md.parent.name)
        try:
            head = skill_md.read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        match = _FRONT_MATTER_NAME.search(head)
        if match:
            names.add(match.group(1).strip().strip("\"'"))
    return frozenset(names)


_FRONT_MATTER_NAME = re.compile(r"^name:\s*(\S.*?)\s*$", re.M)


class _InitWatch:
    """Watches the live stream for ``system/init``; releases or refuses the proxy on it."""

    def __init__(self, check: Callable[[Mapping[str, Any]], str], proxy: ModelApiProxy) -> None:
        self._check = check
        self._proxy = proxy
        self._buf = b""
        self._system_events = 0
        self.decided = False
        self.problem = ""

    def __call__(self, chunk: bytes) -> bool:
        if self.decided:
            return False
        self._buf += chunk
        while b"\n" in self._buf:
            line, _, self._buf = self._buf.partition(b"\n")
            if not line.strip():
                continue
            event = _decode_line(line)
            if event is not None and event.get("type") == "system":
                if event.get("subtype") != "init":
                    self._system_events += 1
                    if self._system_events <= _MAX_SYSTEM_EVENTS_BEFORE_INIT:
                        continue
                    return self._decide("no system/init event among the first events")
                return self._decide(self._check(event))
            return self._decide("the first stream event is not system/init")
        if len(self._buf) > _MAX_INIT_BYTES:
            return self._decide("the first stream event is larger than 1 MiB")
        return False

    def _decide(self, problem: str) -> bool:
        self.decided = True
        self.problem = problem
        if problem:
            self._proxy.refuse(problem)
            return True
        self._proxy.release()
        return False


@dataclass(frozen=True)
class Builtins:
    """What one CLI release brings itself: read from a session in an empty worktree."""

    version: str
    skills: frozenset[str]
    """``init.skills`` with no project skill installed and CLAUDE_CODE_DISABLE_BUNDLED_SKILLS=1
    set (2.1.197: none; 2.1.332: ``doctor``, ``plugin-authoring``)."""
    plugins: tuple[str, ...]
    """``init.plugins`` sources (``cc-plugin-agents-md@builtin``, ...)."""


@dataclass(frozen=True)
class InitProbe:
    """A session started as a cell would start it, stopped at ``system/init`` (nothing is sent
    to the model API: the egress proxy holds every request and refuses it at the stop)."""

    init: dict[str, Any] | None
    problem: str
    """Why the session is not the one the arm asks for ("" when it is)."""
    forwarded: int
    """Requests the egress proxy forwarded (always 0: it is never released)."""
    want: Expectations | None = None
    settings: str | None = None
    """The ``--settings`` JSON the session got (the built-in skills it turned off)."""


PROBE_MODEL = "claude-sonnet-4-5-20250929"
"""The model named in the session that reads a release's built-in skills (no request is sent)."""
PROBE_TIMEOUT_S = 120.0
_PROBE_UPSTREAM = "http://127.0.0.1:9"
_PROBE_STOP = "stopped at system/init on purpose: a probe sends nothing to the model API"
_BUILTINS: dict[tuple[str, str], Builtins] = {}
_BUILTINS_LOCK = threading.Lock()


class ClaudeCodeAdapter:
    """Runs Claude Code headless in the sandbox and reads its own stream-json report."""

    name = "claude-code"

    def __init__(
        self,
        spec: ClaudeCodeAgent,
        tasks_root: Path | None = None,
        cli: ClaudeCodeConfig | None = None,
    ) -> None:
        """Bind the adapter to one arm's agent configuration.

        Args:
            spec: the arm's ``claude-code`` agent settings.
            tasks_root: the benchmark folder its ``plugin_dirs`` are relative to.
            cli: ``agents.claude_code`` of the bench (the pinned release and the built-in skill
                policy); default: :data:`~bench_assets.config.models.CLAUDE_CODE_VERSION`,
                ``forbid``.
        """
        self._spec = spec
        self._tools = ArmTools(spec, tasks_root)
        self._cli = cli or ClaudeCodeConfig()
        self.pin = self._cli.pinned()
        """The release every session must run (``--version`` and ``init`` both say so)."""
        self._lock = threading.Lock()
        self._versions: dict[Path, str | None] = {}

    def identity(self) -> dict[str, object]:
        """The pinned CLI release and the options that make this agent what it is.

        The release is the pin, not what happens to be installed: planning needs no CLI, a
        moved pin makes exactly these cells stale (``agent.version``), and a session whose CLI
        is not the pin is refused before it starts.
        """
        return {
            "adapter": self.name,
            "executable": self._spec.executable,
            "version": self.pin,
            "allowed_tools": list(self._spec.allowed_tools),
            "disallowed_tools": list(self._spec.disallowed_tools),
            "max_turns": self._spec.max_turns,
            "max_budget_usd": self._spec.max_budget_usd,
            "permission_mode": self.permission_mode(),
            "setting_sources": SETTING_SOURCES,
            "builtin_skills": self._builtin_identity(),
            "always_disallowed": list(ALWAYS_DISALLOWED),
            "network": "model-api",
            **self._tools.identity(),
        }

    def _builtin_identity(self) -> dict[str, object]:
        if self._cli.builtin_skills == "forbid":
            return {"policy": "forbid"}
        found = self.builtins()
        if isinstance(found, str):
            raise ToolUnavailable(
                "agents.claude_code.builtin_skills: allow_if_equal records the built-in skills "
                f"of Claude Code {self.pin} in every cell's identity, but they cannot be read: "
                f"{found}"
            )
        return {"policy": "allow_if_equal", "skills": sorted(found.skills)}

    # --- which CLI runs --------------------------------------------------------------------------

    def runtime(self, *, install: bool = True) -> _Runtime | str:
        """The CLI to start (wfbench's install of the pin unless the arm names one), or why not.

        Args:
            install: install the pinned release when it is missing (else say so).
        """
        if self._spec.executable is None:
            try:
                exe = ensure_claude_code(self.pin, install=install)
            except ToolUnavailable as e:
                return str(e)
            return _resolve_runtime(str(exe))
        return _resolve_runtime(self._spec.executable)

    def verified_runtime(self, *, install: bool = True) -> tuple[_Runtime, str] | str:
        """The CLI and its ``--version``, only if that is the pinned release; else why not."""
        runtime = self.runtime(install=install)
        if isinstance(runtime, str):
            return runtime
        version = self._cli_version(runtime)
        if version == self.pin:
            return runtime, version
        if self._spec.executable is None:
            fix = (
                f"the install is damaged: delete {claude_code_home(self.pin)} and run "
                "`wfbench doctor --install`"
            )
        else:
            fix = (
                f"install {self.pin} there, point executable at Claude Code {self.pin}, or drop "
                "executable to use wfbench's own install of the pin"
            )
        answered = f"--version {version}" if version else "nothing to --version"
        return (
            f"Claude Code at {runtime.exe} answers {answered}, but agents.claude_code.version "
            f"pins {self.pin}; no session runs under the pin's name on another CLI: {fix}"
        )

    def _cli_version(self, runtime: _Runtime) -> str | None:
        with self._lock:
            if runtime.exe not in self._versions:
                self._versions[runtime.exe] = self._probe_version(runtime)
            return self._versions[runtime.exe]

    def _probe_version(self, runtime: _Runtime) -> str | None:
        try:
            res = run(
                [str(runtime.exe), "--version"],
                isolation=Isolation.SANDBOX,
                env=self._env(runtime, {}, None, bypass=False),
                timeout_s=VERSION_TIMEOUT_S,
                sandbox=SandboxSpec(mounts=runtime.mounts),
            )
        except ContainmentError:
            return None
        if not res.ok:
            return None
        first = res.text().strip().splitlines()[:1]
        found = _VERSION_RE.search(first[0]) if first else None
        return found.group(0) if found else None

    def builtins(self, *, install: bool = True) -> Builtins | str:
        """The skills and plugins the pinned release brings itself (cached per process), or why
        they cannot be read. Read once per CLI from a session in an empty worktree, stopped at
        ``system/init``: it costs nothing."""
        verified = self.verified_runtime(install=install)
        if isinstance(verified, str):
            return verified
        runtime, version = verified
        key = (str(runtime.exe), version)
        with _BUILTINS_LOCK:
            if key in _BUILTINS:
                return _BUILTINS[key]
        found = self._discover(runtime, version)
        if isinstance(found, Builtins):
            with _BUILTINS_LOCK:
                _BUILTINS[key] = found
        return found

    def _discover(self, runtime: _Runtime, version: str) -> Builtins | str:
        with tempfile.TemporaryDirectory(prefix="wfbench-builtins-") as tmp:
            work, scratch = Path(tmp) / "worktree", Path(tmp) / "scratch"
            work.mkdir()
            scratch.mkdir()
            ctx = _probe_context(work, scratch, PROBE_MODEL)
            argv = [
                str(runtime.exe),
                *_HEADLESS,
                "--model",
                PROBE_MODEL,
                "--strict-mcp-config",
                "--mcp-config",
                EMPTY_MCP_CONFIG,
                "--setting-sources",
                SETTING_SOURCES,
                "--permission-mode",
                "bypassPermissions",
            ]
            passed = {"ANTHROPIC_API_KEY": PLACEHOLDER_CREDENTIAL}
            env = self._env(runtime, passed, None, bypass=True)
            init, why = _probe(argv, env, ctx, runtime.mounts)
        if init is None:
            return (
                f"Claude Code {version} did not start a session to read its built-in skills: {why}"
            )
        skills = init.get("skills")
        plugins = init.get("plugins")
        return Builtins(
            version=version,
            skills=frozenset(k for k in skills if isinstance(k, str))
            if isinstance(skills, list)
            else frozenset(),
            plugins=tuple(
                str(p.get("source") or p.get("name"))
                for p in (plugins if isinstance(plugins, list) else [])
                if isinstance(p, dict)
            ),
        )

    # --- one session -----------------------------------------------------------------------------

    def permission_mode(self, ctx: SessionContext | None = None) -> str:
        """``dontAsk`` when tools are pre-approved (others are denied), else ``bypassPermissions``.

        Headless sessions cannot answer permission prompts; the sandbox is the boundary. With
        ``ctx``, the session's mode: a skill-eval case that grants tools makes it ``dontAsk``.
        """
        if self._spec.allowed_tools or (ctx is not None and ctx.allowed_tools):
            return "dontAsk"
        return "bypassPermissions"

    def _allowed_tools(self, ctx: SessionContext) -> list[str]:
        allowed = granted_tools(self._spec.allowed_tools, ctx.allowed_tools)
        bases = {t.split("(", 1)[0].strip() for t in allowed}
        if allowed and ctx.expected_skill and _SKILL_TOOL not in bases:
            # An arm that expects a skill but forgot the tool would be "skill-not-invoked" for
            # the harness's reason, not the agent's.
            allowed.append(_SKILL_TOOL)
        return allowed

    def _builtin_tools(self, ctx: SessionContext) -> tuple[str, ...] | None:
        allowed = self._allowed_tools(ctx)
        if not allowed:
            return None
        builtins = dict.fromkeys(
            t.split("(", 1)[0].strip() for t in allowed if not t.startswith("mcp__")
        )
        return tuple(b for b in builtins if b)

    def budget(self, ctx: SessionContext) -> float | None:
        """The session's ``--max-budget-usd``: its phase's, else the agent's."""
        return ctx.max_budget_usd if ctx.max_budget_usd is not None else self._spec.max_budget_usd

    def argv(self, exe: str, ctx: SessionContext, *, settings: str | None = None) -> list[str]:
        """The CLI arguments for one session (the prompt is not among them: it goes on stdin).

        Args:
            exe: the CLI.
            ctx: the session.
            settings: ``--settings`` JSON (:meth:`settings`), when the session needs one.
        """
        spec = self._spec
        args = [
            exe,
            *_HEADLESS,
            "--model",
            ctx.model,
            "--strict-mcp-config",
            "--mcp-config",
            self._tools.mcp_config() if self._spec.mcp_servers else EMPTY_MCP_CONFIG,
            "--setting-sources",
            SETTING_SOURCES,
            "--permission-mode",
            self.permission_mode(ctx),
        ]
        if settings is not None:
            args += ["--settings", settings]
        builtins = self._builtin_tools(ctx)
        if builtins is not None:
            # --allowedTools only pre-approves; --tools is what restricts the built-in set.
            args += ["--tools", ",".join(builtins)]
            for tool in self._allowed_tools(ctx):
                args += ["--allowedTools", tool]
        for tool in dict.fromkeys([*ALWAYS_DISALLOWED, *spec.disallowed_tools]):
            args += ["--disallowedTools", tool]
        turns = ctx.max_turns if ctx.max_turns is not None else spec.max_turns
        if turns is not None:
            args += ["--max-turns", str(turns)]
        budget = self.budget(ctx)
        if budget is not None:
            args += ["--max-budget-usd", f"{budget:g}"]
        if ctx.effort:
            args += ["--effort", ctx.effort]
        if ctx.append_system_prompt is not None:
            # One argument with "=", so a text starting with "-" is never read as a flag.
            args.append(f"--append-system-prompt={ctx.append_system_prompt}")
        for dest in self._tools.plugin_dests():
            args += ["--plugin-dir", dest]
        return args

    def settings(self, builtins: Builtins, installed: frozenset[str]) -> str | None:
        """The ``--settings`` JSON that turns off the release's built-in skills (``forbid``).

        ``skillOverrides`` ``off`` hides a skill from the model and from ``/name`` alike (the
        CLI's own settings schema). It applies with ``--setting-sources project`` because flag
        settings always load. Skills the arm installs itself are left alone.
        """
        if self._cli.builtin_skills != "forbid":
            return None
        off = sorted(builtins.skills - installed)
        if not off:
            return None
        overrides = {"skillOverrides": dict.fromkeys(off, "off")}
        return json.dumps(overrides, sort_keys=True, separators=(",", ":"))

    def expectations(self, ctx: SessionContext, builtins: Builtins | None = None) -> Expectations:
        """What this arm's session must look like (for :func:`check_init` and :func:`judge`)."""
        allowed = self._allowed_tools(ctx)
        granted = frozenset(t.strip() for t in allowed if "(" not in t)
        restricted = frozenset(t.split("(", 1)[0].strip() for t in allowed if "(" in t) - granted
        disallowed = frozenset(
            t.split("(", 1)[0].strip() for t in [*ALWAYS_DISALLOWED, *self._spec.disallowed_tools]
        )
        return Expectations(
            permission_mode=self.permission_mode(ctx),
            model=ctx.model,
            tools=self._builtin_tools(ctx),
            installed_skills=installed_skills(ctx.workdir),
            expected_skill=ctx.expected_skill,
            disallowed=disallowed,
            restricted=restricted,
            unrestricted_mode=not allowed,
            granted=granted,
            version=self.pin,
            api_key_source="ANTHROPIC_API_KEY" if "ANTHROPIC_API_KEY" in ctx.secrets_env else None,
            mcp_servers=frozenset(self._spec.mcp_servers),
            builtin_policy=self._cli.builtin_skills,
            builtin_skills=builtins.skills if builtins is not None else frozenset(),
        )

    def _env(
        self,
        runtime: _Runtime,
        passed: Mapping[str, str],
        effort: str | None,
        *,
        bypass: bool,
        case: SessionContext | None = None,
    ) -> dict[str, str]:
        """The session's environment: a skill-eval case's ``EVAL_*`` variables first, then
        everything the harness sets, which a case variable can never replace (:meth:`_prepared`
        refuses a session whose case names one)."""
        extra = dict(case.case_env) if case is not None else {}
        extra.update(passed)
        extra.update(_SESSION_ENV)
        if runtime.path_prefix:
            extra["PATH"] = ":".join([*runtime.path_prefix, sandbox_env()["PATH"]])
        if effort:
            # Some CLI versions parse --effort without applying it; the variable is honoured.
            extra["CLAUDE_CODE_EFFORT_LEVEL"] = effort
        if bypass:
            # The CLI refuses bypassPermissions as uid 0 unless told it is inside a sandbox,
            # which it is (bubblewrap maps the caller's uid).
            extra["IS_SANDBOX"] = "1"
        return sandbox_env(extra)

    def _prepared(
        self, ctx: SessionContext
    ) -> tuple[_Runtime, str, Builtins, Expectations, str | None] | str:
        """Everything a session needs before it starts, or why it cannot start (free)."""
        verified = self.verified_runtime()
        if isinstance(verified, str):
            return verified
        runtime, version = verified
        builtins = self.builtins()
        if isinstance(builtins, str):
            return builtins
        problem = case_problem(ctx, self._spec.allowed_tools)
        if problem is not None:
            return problem
        want = self.expectations(ctx, builtins)
        clash = sorted(builtins.skills & want.installed_skills)
        if clash:
            return (
                f"the arm's skill(s) {', '.join(clash)} have the name of a skill built into "
                f"Claude Code {version}, so init cannot show which one the session got: rename "
                "them"
            )
        return runtime, version, builtins, want, self.settings(builtins, want.installed_skills)

    def probe(self, ctx: SessionContext) -> InitProbe:
        """Start this arm's session exactly as :meth:`run` would and stop it at ``system/init``.

        What ``wfbench doctor`` and ``wfbench evolve``'s preflight show per arm: the permission
        mode granted, the skills, tools, MCP servers and model in force, against the arm's
        declaration. Credentials are placeholders and nothing reaches the model API.
        """
        prepared = self._prepared(ctx)
        if isinstance(prepared, str):
            return InitProbe(init=None, problem=prepared, forwarded=0)
        runtime, _version, _builtins, want, settings = prepared
        passed = {
            name: PLACEHOLDER_CREDENTIAL if name in CREDENTIAL_HEADERS else value
            for name, value in ctx.secrets_env.items()
            if name != BASE_URL_ENV
        }
        bypass = self.permission_mode(ctx) == "bypassPermissions"
        try:
            tool_mounts = self._tools.mounts(ctx.graph_file)
        except ContainmentError as e:
            return InitProbe(init=None, problem=str(e), forwarded=0, want=want, settings=settings)
        with tempfile.TemporaryDirectory(prefix="wfbench-mask-") as mask_dir:
            init, why = _probe(
                self.argv(str(runtime.exe), ctx, settings=settings),
                self._env(runtime, {**ctx.env_vars, **passed}, ctx.effort, bypass=bypass, case=ctx),
                ctx,
                (*runtime.mounts, *_settings_masks(ctx.workdir, Path(mask_dir)), *tool_mounts),
            )
        problem = check_init(init, want) if init is not None else why
        return InitProbe(init=init, problem=problem, forwarded=0, want=want, settings=settings)

    def run(self, ctx: SessionContext) -> SessionResult:
        """Run one headless session in ``ctx.workdir``; never raises for agent failures.

        Args:
            ctx: the prepared session (worktree, scratch, prompt, model, limits, credentials).

        Returns:
            The outcome, with usage taken only from the CLI's terminal ``result`` event.
        """
        prepared = self._prepared(ctx)
        if isinstance(prepared, str):
            return _infra(prepared)
        runtime, version, _builtins, want, settings = prepared
        redactor = Redactor(ctx.secrets_env.values())
        credentials = credential_headers(ctx.secrets_env)
        if not credentials:
            names = " or ".join(CREDENTIAL_HEADERS)
            return _infra(
                f"no model API credential: set {names} on the host and name it in the arm's "
                "env list",
                version,
            )
        try:
            upstream = resolve_upstream(self._spec.api_base_url, self._spec.env, ctx.secrets_env)
        except ContainmentError as e:
            return _infra(redactor.text(str(e)), version)
        # Inside, credentials are placeholders (the proxy adds the real ones) and the base URL
        # is the relay's; everything else the arm names passes through.
        passed = {
            name: PLACEHOLDER_CREDENTIAL if name in CREDENTIAL_HEADERS else value
            for name, value in ctx.secrets_env.items()
            if name != BASE_URL_ENV
        }
        bypass = self.permission_mode(ctx) == "bypassPermissions"
        try:
            tool_mounts = self._tools.mounts(ctx.graph_file)
        except ContainmentError as e:
            return _infra(redactor.text(str(e)), version)
        try:
            with (
                tempfile.TemporaryDirectory(prefix="wfbench-mask-") as mask_dir,
                ModelApiProxy(
                    upstream, credentials=credentials, hold=True, timeout_s=ctx.timeout_s
                ) as proxy,
            ):
                watch = _InitWatch(lambda init: check_init(init, want), proxy)
                res = run(
                    self.argv(str(runtime.exe), ctx, settings=settings),
                    isolation=Isolation.SANDBOX,
                    env=self._env(
                        runtime, {**ctx.env_vars, **passed}, ctx.effort, bypass=bypass, case=ctx
                    ),
                    timeout_s=ctx.timeout_s,
                    stdin=ctx.prompt.encode("utf-8"),
                    max_output=MAX_TRANSCRIPT_BYTES,
                    sandbox=session_sandbox(
                        ctx,
                        network=False,
                        extra=(
                            *runtime.mounts,
                            *_settings_masks(ctx.workdir, Path(mask_dir)),
                            *tool_mounts,
                        ),
                        model_api=proxy.channel(),
                    ),
                    watch=watch,
                )
                egress = proxy.stats()
                forwarded = proxy.forwarded
        except (ContainmentError, OSError, ValueError) as e:
            return _infra(redactor.text(f"{type(e).__name__}: {e}"), version)
        parsed = parse_stream(res.stdout)
        stop = watch.problem
        if res.stopped:
            stop += f" ({egress})"
        kind, detail = judge(
            res,
            parsed,
            want,
            timeout_s=ctx.timeout_s,
            max_turns=ctx.max_turns if ctx.max_turns is not None else self._spec.max_turns,
            max_budget_usd=self.budget(ctx),
            stop_reason=stop,
        )
        if kind in (ErrorKind.INFRA_ERROR, ErrorKind.SESSION_ERROR) and not res.stopped:
            detail += f" [{egress}]"
        usage = parsed.usage()
        if parsed.result is None and forwarded == 0 and not unsafe_mode():
            # No report, but the proxy is the only way to the model API (in the sandbox): nothing
            # forwarded, nothing spent. A stop at init is free, which the spend cap relies on.
            usage = usage.model_copy(update={"cost_usd": 0.0})
        return SessionResult(
            ok=kind is None,
            usage=usage,
            error_kind=kind,
            error_detail=redactor.text(detail),
            session_ids=parsed.session_ids,
            transcript=res.stdout,
            agent_version=version,
            wall_s=res.duration_s,
        )


def granted_tools(arm: list[str] | tuple[str, ...], case: tuple[str, ...]) -> list[str]:
    """The tools a session is granted: the arm's, or a skill-eval case's narrowed by them.

    A case's ``allowed_tools`` cannot widen the operator's grant (as in ``claude plugin eval``):
    when the arm restricts tools, a case tool the arm does not grant is removed, and a plain case
    tool the arm grants only as patterns (``Bash(git *)``) gets the arm's patterns. An arm that
    restricts nothing grants the case's list as written. No case list: the arm's.
    """
    if not case:
        return list(arm)
    if not arm:
        return list(dict.fromkeys(case))
    plain = {t.strip() for t in arm if "(" not in t}
    out: list[str] = []
    for tool in case:
        base = tool.split("(", 1)[0].strip()
        if base in plain or tool in arm:
            out.append(tool)
        elif "(" not in tool:
            out += [t for t in arm if t.split("(", 1)[0].strip() == base]
    return list(dict.fromkeys(out))


def case_problem(ctx: SessionContext, arm_tools: list[str] | tuple[str, ...]) -> str | None:
    """Why a skill-eval case's settings cannot be honoured in this session (free, before it)."""
    from bench_assets.tasks.skill_eval_tasks import env_key_problem

    harness = {*_SESSION_ENV, *sandbox_env(), "IS_SANDBOX", BASE_URL_ENV, *CREDENTIAL_HEADERS}
    for key in ctx.case_env:
        problem = env_key_problem(key)
        if problem is None and key in harness:
            problem = f"{key} is set by the harness"
        if problem is not None:
            return f"the case's env: {problem}"
    if ctx.allowed_tools and not granted_tools(arm_tools, ctx.allowed_tools):
        return (
            f"the case's allowed_tools ({', '.join(ctx.allowed_tools)}) are none of those the "
            f"arm grants ({', '.join(arm_tools)}): the session would have no tool the case wants"
        )
    return None


_HEADLESS = ("-p", "--input-format", "text", "--output-format", "stream-json", "--verbose")


def _probe_context(work: Path, scratch: Path, model: str) -> SessionContext:
    return SessionContext(
        task_id="probe",
        arm="probe",
        run=0,
        prompt="",
        model=model,
        effort=None,
        workdir=work,
        scratch=scratch,
        timeout_s=PROBE_TIMEOUT_S,
    )


def _probe(
    argv: list[str], env: dict[str, str], ctx: SessionContext, mounts: tuple[Mount, ...]
) -> tuple[dict[str, Any] | None, str]:
    """Run ``argv`` as a session in ``ctx`` until its ``system/init``; the init, or why none.

    The egress proxy holds the first model request and is refused at the stop, so a probe never
    reaches an upstream (its upstream is the discard port anyway).
    """
    seen: dict[str, Any] = {}

    def stop(init: Mapping[str, Any]) -> str:
        seen.update(init)
        return _PROBE_STOP

    try:
        with ModelApiProxy(
            _PROBE_UPSTREAM,
            credentials={"x-api-key": PLACEHOLDER_CREDENTIAL},
            hold=True,
            timeout_s=PROBE_TIMEOUT_S,
        ) as proxy:
            watch = _InitWatch(stop, proxy)
            res = run(
                argv,
                isolation=Isolation.SANDBOX,
                env=env,
                timeout_s=PROBE_TIMEOUT_S,
                stdin=b"wfbench probe: this session is stopped at system/init",
                max_output=_MAX_INIT_BYTES * 2,
                sandbox=session_sandbox(
                    ctx, network=False, extra=mounts, model_api=proxy.channel()
                ),
                watch=watch,
            )
            forwarded = proxy.forwarded
    except (ContainmentError, OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"
    if forwarded:
        return None, f"the egress proxy forwarded {forwarded} request(s) during a probe"
    if seen:
        return seen, ""
    if watch.problem and watch.problem != _PROBE_STOP:
        return None, watch.problem
    tail = res.tail(300).strip()
    how = "timed out" if res.timed_out else f"exit {res.returncode}"
    return None, f"the CLI printed no system/init event ({how}){': ' + tail if tail else ''}"


def _infra(detail: str, version: str | None = None) -> SessionResult:
    # Returned before the CLI could reach the egress proxy, the only way to the model API: the
    # session provably spent nothing (the generation's spend cap relies on it).
    return SessionResult(
        ok=False,
        usage=Usage(cost_usd=0.0),
        error_kind=ErrorKind.INFRA_ERROR,
        error_detail=detail,
        agent_version=version,
    )


def _settings_masks(workdir: Path, private: Path) -> tuple[Mount, ...]:
    """Read-only ``{}`` over each repository settings file that exists (see module docstring).

    The ``{}`` lives in ``private``, a host folder the sandbox cannot reach any other way (in the
    writable scratch folder the agent could rewrite the mask through its second path).
    """
    present = [rel for rel in MASKED_SETTINGS if (workdir / rel).is_file()]
    if not present:
        return ()
    empty = private / "empty-settings.json"
    empty.write_text("{}\n", encoding="utf-8")
    os.chmod(empty, 0o444)
    return tuple(Mount(empty, f"{WORKSPACE}/{rel}", writable=False) for rel in present)
