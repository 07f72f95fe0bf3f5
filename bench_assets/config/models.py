"""pydantic models of the files users write: ``tasks/bench.yaml`` and ``tasks/<id>/task.yaml``.

Every model forbids unknown keys and uses strict types (YAML ``"3"`` is not the integer 3, ``yes``
written as a string is not a boolean). Field docstrings become the descriptions in the generated
JSON Schema (``tasks/schema/``), which editors use for completion.

Why one file over 500 lines: it is the whole user-facing file format in one place, mirrored
one-to-one by the generated JSON Schemas; splitting it would scatter one schema across modules.
"""

import re
from pathlib import PurePosixPath
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from bench_assets.config.cron import validate_cron, validate_timezone

TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""Task ids: artifact-safe slugs, also valid Dagster partition keys."""

ARM_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
"""Arm names: lowercase; no dot so that cell keys ``<arm>.r<k>`` parse unambiguously."""

RESERVED_DIRS = frozenset({"skills", "candidates", "replays", "schema"})
"""Folders of ``tasks/`` that hold benchmark data other than tasks."""

_MUTABLE_ALIAS_RE = re.compile(r"(^|[-/@:])(latest|auto|default|stable|preview|current)$", re.I)
_CLAUDE_ALIAS_RE = re.compile(r"^(sonnet|opus|haiku|opusplan|best)(\[1m\])?$", re.I)
_SNAPSHOT_DATE_RE = re.compile(r"(?:^|[-@.])20\d{6}(?:$|[-:.\[])")
_DATED_EXAMPLE = {
    "sonnet": "claude-sonnet-4-5-20250929",
    "opus": "claude-opus-4-5-20251101",
    "opusplan": "claude-opus-4-5-20251101",
    "best": "claude-opus-4-5-20251101",
    "haiku": "claude-haiku-4-5-20251001",
}
_MAX_COMMAND = 8 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _nonblank(value: str, what: str) -> str:
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL")
    return value


def _command(value: str, what: str) -> str:
    _nonblank(value, what)
    if len(value.encode("utf-8")) > _MAX_COMMAND:
        raise ValueError(f"{what} is longer than {_MAX_COMMAND} bytes")
    return value


def safe_relative_path(value: str, what: str, *, allow_glob: bool = False) -> str:
    """Check that ``value`` is a relative POSIX path that stays inside its root.

    Rejects absolute paths, ``..`` / ``.`` / empty components, backslashes, NUL, a first component
    ``.git``, and names longer than 240 bytes. Returns the normalised path.
    """
    if not value or "\x00" in value or "\\" in value:
        raise ValueError(f"{what} {value!r} must be a non-empty POSIX path without NUL or '\\'")
    if len(value.encode("utf-8")) > 240:
        raise ValueError(f"{what} {value!r} is longer than 240 bytes")
    if value.startswith("/"):
        raise ValueError(f"{what} {value!r} must be relative, not absolute")
    parts = value.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{what} {value!r} must not contain '..', '.' or empty components")
    if parts[0] == ".git":
        raise ValueError(f"{what} {value!r} must not point into .git")
    if not allow_glob and any(c in value for c in "*?["):
        raise ValueError(f"{what} {value!r} must be a plain path, not a glob")
    return str(PurePosixPath(value))


def check_model_id(value: str) -> str:
    """Reject blank model ids, mutable aliases and undated Claude ids.

    Claude Code resolves ``sonnet``, ``opus``, ``haiku`` (and ``opusplan``, ``best``, ``[1m]``
    variants) and undated ids such as ``claude-sonnet-4-5`` to whatever model is "the latest" when
    the session starts, so two generations could silently measure different models. A Claude id
    must therefore carry its snapshot date (``claude-sonnet-4-5-20250929``, Vertex
    ``claude-sonnet-4-5@20250929``, Bedrock ``anthropic.claude-sonnet-4-5-20250929-v1:0``).
    """
    _nonblank(value, "model id")
    if value != value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"model id {value!r} must not contain whitespace")
    if _MUTABLE_ALIAS_RE.search(value):
        raise ValueError(
            f"model id {value!r} is a mutable alias; name a versioned model "
            f"(e.g. {_DATED_EXAMPLE['sonnet']}) so runs stay comparable"
        )
    family = _CLAUDE_ALIAS_RE.match(value)
    if family:
        example = _DATED_EXAMPLE.get(family.group(1).lower(), _DATED_EXAMPLE["sonnet"])
        raise ValueError(
            f"model id {value!r} is a Claude Code alias for the latest model; name a dated "
            f"model id such as {example} so runs stay comparable"
        )
    if "claude" in value.lower() and not _SNAPSHOT_DATE_RE.search(value):
        family_name = next((f for f in _DATED_EXAMPLE if f in value.lower()), "sonnet")
        raise ValueError(
            f"model id {value!r} has no snapshot date, so it names whichever snapshot is latest; "
            f"name a dated model id such as {_DATED_EXAMPLE[family_name]}"
        )
    return value


OracleFileName = Annotated[str, AfterValidator(lambda v: safe_relative_path(v, "oracle file"))]
ProtectedGlob = Annotated[
    str, AfterValidator(lambda v: safe_relative_path(v, "protected glob", allow_glob=True))
]
RepoPath = Annotated[str, AfterValidator(lambda v: safe_relative_path(v, "path"))]


# --------------------------------------------------------------------------------------------
# task.yaml


ORACLE_DIR_PLACEHOLDER = "{oracle_dir}"
"""Replaced in a custom ``oracle.command`` by the folder where the oracle files are staged."""

_TEST_ID_RE = re.compile(r"^(?P<file>[^:\[\]]+?\.py)(::[^:\[\]]+)+(\[.*\])?$", re.S)


def _worktree_path(value: str, what: str) -> str:
    return "." if value == "." else safe_relative_path(value, what)


WorktreePath = Annotated[str, AfterValidator(lambda v: _worktree_path(v, "worktree path"))]


def _test_id(value: str) -> str:
    if not _TEST_ID_RE.match(value) or "\x00" in value or len(value) > 1000:
        raise ValueError(
            f"test id {value!r} must look like <oracle file>.py::<test>[::<test>][[<params>]] "
            "(a pytest node id relative to the oracle folder)"
        )
    return value


OracleTestId = Annotated[str, AfterValidator(_test_id)]


def oracle_file_of(test_id: str) -> str:
    """The oracle file a test id names (the part before the first ``::``)."""
    return test_id.split("::", 1)[0]


class PytestRun(_Strict):
    """Run pytest on paths of the worktree through the trusted runner (the safe default)."""

    pytest: list[WorktreePath] = Field(min_length=1, max_length=64)
    """Worktree-relative test paths (``.`` for the whole worktree), e.g. ``[tests]``."""


class OracleSpec(_Strict):
    """The hidden behavioural test, staged only after the agent exits.

    By default the files run through the trusted pytest runner and the oracle passes only when
    every expected test is reported passed. ``command`` replaces that with a custom runner graded
    by its exit status alone (see the README for what such a command must do to be as safe).
    """

    files: list[OracleFileName] = Field(min_length=1, max_length=16)
    """Names of files in ``<id>/oracle/`` to stage (flat names or relative paths)."""
    command: str | None = None
    """Custom runner (for non-Python tasks): a shell command run offline with the workspace
    read-only; ``{oracle_dir}`` is replaced by the staged folder. Its exit status decides and its
    output is never stored. Leave it out to use the trusted pytest runner."""
    fail_to_pass: list[OracleTestId] = Field(default_factory=list)
    """Tests (pytest node ids relative to the oracle folder) that fail before the fix and must
    pass after it. A name without ``[params]`` stands for every parametrization of the test."""
    pass_to_pass: list[OracleTestId] = Field(default_factory=list)
    """Tests that pass before the fix and must still pass after it. Without either list, every
    test found in the oracle files is expected to pass."""

    @field_validator("command")
    @classmethod
    def _check_command(cls, v: str | None) -> str | None:
        if v is None:
            return None
        _command(v, "oracle command")
        if "WFBENCH_ORACLE_ROOT" in v:
            raise ValueError(
                "$WFBENCH_ORACLE_ROOT no longer exists (the oracle run has no benchmark-named "
                f"variable); write {ORACLE_DIR_PLACEHOLDER} where the staged folder goes, or leave "
                "command out to use the trusted pytest runner"
            )
        if ORACLE_DIR_PLACEHOLDER not in v:
            raise ValueError(
                f"a custom oracle command must name the staged folder as {ORACLE_DIR_PLACEHOLDER}"
            )
        return v

    @field_validator("files")
    @classmethod
    def _check_files(cls, v: list[str]) -> list[str]:
        dup = sorted({f for f in v if v.count(f) > 1})
        if dup:
            raise ValueError(f"duplicate oracle files: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _check_expected(self) -> "OracleSpec":
        declared = [*self.fail_to_pass, *self.pass_to_pass]
        if declared and self.command is not None:
            raise ValueError(
                "fail_to_pass/pass_to_pass need per-test outcomes, which only the trusted pytest "
                "runner reports; drop oracle.command or the lists"
            )
        dup = sorted({t for t in declared if declared.count(t) > 1})
        if dup:
            raise ValueError(f"test ids listed twice: {', '.join(dup)}")
        for t in declared:
            if oracle_file_of(t) not in self.files:
                raise ValueError(f"test id {t!r} names a file that is not among oracle.files")
        return self

    @property
    def trusted(self) -> bool:
        """Whether the oracle runs through the trusted pytest runner."""
        return self.command is None


class TaskTimeouts(_Strict):
    """Per-task timeout overrides in seconds (recorded in the cell identity)."""

    setup_s: int | None = Field(default=None, gt=0, le=86_400)
    session_s: int | None = Field(default=None, gt=0, le=86_400)
    verify_s: int | None = Field(default=None, gt=0, le=86_400)
    oracle_s: int | None = Field(default=None, gt=0, le=86_400)


class TaskResources(_Strict):
    """Per-task resource profile (recorded in the cell identity)."""

    memory_mb: int | None = Field(default=None, gt=0)
    """Address-space cap for every sandboxed process of the task."""
    max_output_bytes: int | None = Field(default=None, gt=0)
    """Cap on captured stdout/stderr per command."""


class ReviewSpec(_Strict):
    """Review tasks: the agent writes a JSON review (``output``), graded against hidden labels.

    Only ``kind: review`` arms run on a review task; ``verify`` and the oracle command are not
    run for them — grading is the label scoring of ``bench_assets/scorers/review_scoring.py``.
    """

    labels: str
    """Name of the labels file among ``oracle.files``."""
    output: Literal["review-json-v1"] = "review-json-v1"
    """The JSON artifact contract the reviewing agent must write."""

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: str) -> str:
        return safe_relative_path(v, "review labels file")


_REQUIREMENT_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?[ <>=!~.,*0-9A-Za-z+-]*$"
)


def _requirement(value: str) -> str:
    if not _REQUIREMENT_RE.match(value) or len(value) > 200:
        raise ValueError(
            f"requirement {value!r} must be a plain package requirement such as 'idna==3.10' "
            "(no pip options, URLs, paths or environment markers)"
        )
    return value


class EnvironmentSpec(_Strict):
    """Third-party packages a task's code needs, installed once per task (``task_environments``).

    Built from the package index in a sandbox that can reach only that index, stored read-only
    and mounted into every cell of the task (cells never get that network).
    """

    requirements: list[Annotated[str, AfterValidator(_requirement)]] = Field(
        default_factory=list, max_length=200
    )
    """Packages to install, e.g. ``[idna==3.10]``."""
    pyproject: bool = False
    """Also install the ``[project] dependencies`` of the repository's ``pyproject.toml`` at the
    pinned commit (read as data, never executed)."""
    index_url: str = "https://pypi.org/simple"
    """The package index, the one host (plus its file host) the build can reach."""

    @field_validator("index_url")
    @classmethod
    def _check_index(cls, v: str) -> str:
        if not re.match(r"^https://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~/-]*)?$", v):
            raise ValueError(f"index_url {v!r} must be a plain https:// URL")
        return v


class SkillEvalSpec(_Strict):
    """An imported skill-eval case (``claude plugin eval`` / skill-creator): graded by the hidden
    graders of ``oracle/<grading>`` (:mod:`bench_assets.scorers.skill_eval`), not by verify and a
    pytest oracle. The run settings the case declares are kept as they were written."""

    grading: str
    """Name of the graders file among ``oracle.files`` (``skill_eval.json``)."""
    source: Literal["claude-plugin-eval", "skill-creator"]
    case: str
    """The case's name (plugin eval) or id (skill-creator)."""
    runs: int | None = Field(default=None, ge=1, le=50)
    max_turns: int | None = Field(default=None, ge=1, le=200)
    allowed_tools: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    model: str | None = None
    append_system_prompt: str | None = None
    description: str | None = None
    expected_outcome: str | None = None
    tags: list[str] = Field(default_factory=list)

    @field_validator("grading")
    @classmethod
    def _check_grading(cls, v: str) -> str:
        return safe_relative_path(v, "skill_eval grading file")

    @field_validator("env")
    @classmethod
    def _check_env(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in v if not re.match(r"^EVAL_[A-Z0-9_]*$", k))
        if bad:
            raise ValueError(f"env keys must match EVAL_[A-Z0-9_]*: {', '.join(bad)}")
        return v


class TaskSpec(_Strict):
    """One benchmark problem: ``tasks/<id>/task.yaml``."""

    id: str
    """Slug equal to the folder name: ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``."""
    class_: str = Field(alias="class")
    """Label for analysis, e.g. ``bug``, ``feature``, ``cross-module``, ``review-defect``."""
    repo: str
    """``inline`` (the folder ``repo/`` beside task.yaml) or a path to a local git repository,
    relative to the task folder or absolute."""
    ref: str | None = None
    """Git ref for a repo path (default ``HEAD``); resolved once to a full SHA and pinned."""
    prompt: str
    """Task text given verbatim to every arm."""
    verify: str | PytestRun
    """The agent's own tests, a signal and never proof. ``{pytest: [tests]}`` runs them through
    the trusted pytest runner (every collected test must pass); a string is a custom shell
    command whose exit status decides."""
    oracle: OracleSpec
    setup: str | None = None
    """Command run in the fresh worktree before any agent session."""
    protected: list[ProtectedGlob] = Field(default_factory=list)
    """Globs restored to their template state before ``verify`` and the oracle run."""
    import_paths: list[WorktreePath] = Field(default_factory=lambda: ["."], min_length=1)
    """Worktree folders the trusted runner makes importable as the code under test (after the
    standard library and the runner, never ahead of them), e.g. ``[src]``."""
    runner_files: Literal["restore", "keep"] = "restore"
    """What grading does with files of the agent's diff that can change how the test runner or
    the interpreter behaves (``conftest.py`` at any depth, runner modules and start-up hooks at an
    import root, runner config): ``restore`` them from the template (default), or ``keep`` them
    (only recorded) for a task whose work is such a file."""
    allow_binaries: bool = False
    """Let compiled code from the worktree run: sourceless ``.pyc`` files and extension modules
    are imported by the trusted runner (by default only source files import from the worktree
    and the oracle stage), and binary files in a patch are recorded without being flagged. For a
    task whose work really needs them; the patch's binary files are listed in the record either
    way."""
    expensive: bool = False
    """Skipped unless selected explicitly."""
    timeouts: TaskTimeouts = Field(default_factory=TaskTimeouts)
    resources: TaskResources = Field(default_factory=TaskResources)
    review: ReviewSpec | None = None
    environment: EnvironmentSpec | None = None
    """Third-party packages the task needs (see :class:`EnvironmentSpec`); none by default."""
    skill_eval: SkillEvalSpec | None = None
    """An imported skill-eval case: graded by hidden transcript graders (see
    :class:`SkillEvalSpec`); ``verify`` and the oracle are not run."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @field_validator("id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if not TASK_ID_RE.match(v) or ".." in v:
            raise ValueError(
                f"task id {v!r} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}} without '..'"
            )
        return v

    @field_validator("class_")
    @classmethod
    def _check_class(cls, v: str) -> str:
        return _nonblank(v, "class")

    @field_validator("repo")
    @classmethod
    def _check_repo(cls, v: str) -> str:
        return _nonblank(v, "repo")

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, v: str) -> str:
        return _nonblank(v, "prompt")

    @field_validator("verify")
    @classmethod
    def _check_verify(cls, v: str | PytestRun) -> str | PytestRun:
        return _command(v, "verify command") if isinstance(v, str) else v

    @field_validator("setup")
    @classmethod
    def _check_setup(cls, v: str | None) -> str | None:
        return None if v is None else _command(v, "setup command")

    @model_validator(mode="after")
    def _check_combination(self) -> "TaskSpec":
        if self.repo == "inline" and self.ref is not None:
            raise ValueError("ref applies only to a repo path; an inline repo has one commit")
        if self.ref is not None:
            _nonblank(self.ref, "ref")
        if self.review is not None and self.review.labels not in self.oracle.files:
            raise ValueError(f"review.labels {self.review.labels!r} is not among oracle.files")
        if self.skill_eval is not None:
            if self.skill_eval.grading not in self.oracle.files:
                raise ValueError(
                    f"skill_eval.grading {self.skill_eval.grading!r} is not among oracle.files"
                )
            if self.review is not None:
                raise ValueError("a task is a review task or a skill-eval case, not both")
        return self

    @property
    def is_inline(self) -> bool:
        """Whether the repository is the inline ``repo/`` folder."""
        return self.repo == "inline"


# --------------------------------------------------------------------------------------------
# bench.yaml: arms and agent adapters


class ReplayAgent(_Strict):
    """Apply recorded predictions (SWE-bench lines + ``run`` + ``usage``) instead of a session."""

    adapter: Literal["replay"]
    predictions: str
    """JSONL file, relative to ``tasks/``."""

    @field_validator("predictions")
    @classmethod
    def _check_predictions(cls, v: str) -> str:
        return safe_relative_path(v, "predictions file")


def check_api_base_url(value: str) -> str:
    """An ``http(s)://host[:port][/path]`` URL without credentials, query or fragment."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"api_base_url {value!r} must be an http(s) URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(
            f"api_base_url {value!r} must not carry credentials, a query or a fragment"
        )
    return value.rstrip("/")


ApiBaseUrl = Annotated[str, AfterValidator(check_api_base_url)]


class CommandAgent(_Strict):
    """Any agent CLI, run from an argv template."""

    adapter: Literal["command"]
    argv: list[str] = Field(min_length=1)
    """Template; placeholders ``{prompt_file}``, ``{workdir}``, ``{model}``, ``{effort}``."""
    network: bool | Literal["model-api"] = False
    """``false``: no network. ``model-api``: no network except the model API, reached through
    the harness's egress proxy at ``$WFBENCH_MODEL_API_URL`` (also exported as
    ``ANTHROPIC_BASE_URL``). ``true``: the open network (not recommended: an agent can fetch the
    upstream fix of a public repository)."""
    api_base_url: ApiBaseUrl | None = None
    """For ``network: model-api``: the only upstream the proxy forwards to (default
    ``ANTHROPIC_BASE_URL`` when named in ``env``, else the Anthropic API)."""
    env: list[str] = Field(default_factory=list)
    """Names of host environment variables passed into the session (credentials)."""
    version: str | None = None
    """Agent CLI version recorded in the cell identity."""


MCP_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class McpServerSpec(_Strict):
    """One stdio MCP server of a ``claude-code`` arm: the bundled one, or a command."""

    builtin: Literal["code-graph"] | None = None
    """``code-graph``: the bundled server answering find-definition, callers, callees and symbol
    search over the task's sanitized code graph."""
    command: str | None = None
    """Absolute path of the server executable on the host (mounted read-only in the sandbox)."""
    args: list[str] = Field(default_factory=list, max_length=64)
    env: dict[str, str] = Field(default_factory=dict, max_length=32)
    """Literal environment of the server (never host values: no credential reaches a server)."""

    @model_validator(mode="after")
    def _check_kind(self) -> "McpServerSpec":
        if (self.builtin is None) == (self.command is None):
            raise ValueError("an MCP server needs exactly one of builtin or command")
        if self.builtin is not None and (self.args or self.env):
            raise ValueError("a builtin MCP server takes no args or env")
        if self.command is not None and not self.command.startswith("/"):
            raise ValueError(f"MCP server command {self.command!r} must be an absolute path")
        for name in self.env:
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"MCP server env name {name!r} is not a variable name")
        for value in [*self.args, *self.env.values()]:
            if "\x00" in value:
                raise ValueError("MCP server args and env must not contain NUL")
        return self


class ClaudeCodeAgent(_Strict):
    """The real Claude Code CLI in headless mode (``-p``, stream-json output)."""

    adapter: Literal["claude-code"]
    executable: str | None = None
    """The CLI to run. Unset (the default): wfbench's own install of the release pinned in
    ``agents.claude_code.version``, installed once from the npm registry into its tools cache
    (:mod:`bench_assets.agents.claude_install`). A name on ``PATH`` or a path: that CLI, which must
    answer ``--version`` with the pinned release, else every session is refused before it starts."""
    allowed_tools: list[str] = Field(default_factory=list)
    disallowed_tools: list[str] = Field(default_factory=list)
    max_turns: int | None = Field(default=None, gt=0)
    """``--max-turns``: reaching it ends the session as a ``turn-limit`` valid negative."""
    max_budget_usd: float | None = Field(default=None, gt=0)
    """``--max-budget-usd``: the CLI stops the session once it has spent this much; the cell is
    a ``budget-limit`` valid negative."""
    expected_skill: str | None = None
    """Skill that must be proven invoked in the transcript, else ``skill-not-invoked``."""
    env: list[str] = Field(default_factory=lambda: ["ANTHROPIC_API_KEY"])
    """Names of host environment variables the session needs. Credentials
    (``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``) stay in the egress proxy, which adds them
    to each model API request; the session only sees a placeholder. ``ANTHROPIC_BASE_URL`` names
    the upstream (a gateway) instead of being passed in. Other names are passed through."""
    api_base_url: ApiBaseUrl | None = None
    """The only upstream the egress proxy forwards to (default: ``ANTHROPIC_BASE_URL`` when named
    in ``env``, else the Anthropic API)."""
    mcp_servers: dict[str, McpServerSpec] = Field(default_factory=dict, max_length=8)
    """Tool servers this arm's sessions get (stdio, started by the CLI inside the cell's sandbox,
    never with network). ``{builtin: code-graph}`` is the bundled server over the sanitized code
    graph; ``{command, args, env}`` runs any server installed on the host (read-only)."""
    plugin_dirs: list[str] = Field(default_factory=list, max_length=8)
    """Claude Code plugin folders (relative to ``tasks/``), mounted read-only and passed with
    ``--plugin-dir``: only the arms that name them see them. Their content is in the identity."""

    @field_validator("mcp_servers")
    @classmethod
    def _check_mcp_names(cls, v: dict[str, McpServerSpec]) -> dict[str, McpServerSpec]:
        for name in v:
            if not MCP_NAME_RE.match(name):
                raise ValueError(f"MCP server name {name!r} must match [a-z][a-z0-9_-]{{0,31}}")
        return v

    @field_validator("plugin_dirs")
    @classmethod
    def _check_plugin_dirs(cls, v: list[str]) -> list[str]:
        out = [safe_relative_path(d, "plugin_dirs entry") for d in v]
        if len(set(out)) != len(out):
            raise ValueError("plugin_dirs lists a folder twice")
        return out

    @model_validator(mode="after")
    def _check_skill_tool(self) -> "ClaudeCodeAgent":
        denied = {t.split("(", 1)[0].strip() for t in self.disallowed_tools}
        if self.expected_skill is not None and "Skill" in denied:
            raise ValueError(
                f"expected_skill {self.expected_skill!r} needs the Skill tool, "
                "but disallowed_tools denies it"
            )
        return self


AgentSpec = Annotated[ReplayAgent | CommandAgent | ClaudeCodeAgent, Field(discriminator="adapter")]


CLAUDE_CODE_VERSION = "2.1.332"
"""The Claude Code release wfbench is tested with (``.ci/claude-code.version``): the pin suggested
for ``agents.claude_code.version`` and the one used when no benchmark names one (an ad hoc arm)."""
_CLI_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z][0-9A-Za-z.-]*)?$")


class ClaudeCodeConfig(_Strict):
    """``agents.claude_code``: the Claude Code CLI every ``claude-code`` arm of the bench runs."""

    version: str | None = None
    """The exact npm release (``2.1.332``), part of every claude-code cell's identity. Required
    when an arm (or the proposer) uses ``adapter: claude-code``. wfbench installs exactly this
    release; moving it re-pays the cells made with the old one, and ``wfbench plan`` says so."""
    builtin_skills: Literal["forbid", "allow_if_equal"] = "forbid"
    """Skills the CLI brings itself (bundled, or from its built-in plugins). ``forbid``: every
    session turns them off (``skillOverrides``) and is refused at ``system/init`` if one is still
    available, so an arm has exactly the skills it installs. ``allow_if_equal``: they stay
    available, as on a user's machine; the set this release brings is recorded in every cell's
    identity and each session must show exactly that set."""

    @field_validator("version")
    @classmethod
    def _check_version(cls, v: str | None) -> str | None:
        if v is not None and not _CLI_RELEASE_RE.match(v):
            raise ValueError(
                f"{v!r} is not an exact release: name one such as {CLAUDE_CODE_VERSION} (a "
                "dist-tag like 'latest' or a range would follow the registry, so cells made "
                "with different CLIs would look alike)"
            )
        return v

    def pinned(self) -> str:
        """The release sessions run: the named one, else :data:`CLAUDE_CODE_VERSION`."""
        return self.version or CLAUDE_CODE_VERSION


class AgentsConfig(_Strict):
    """``agents``: settings shared by every arm of one adapter kind."""

    claude_code: ClaudeCodeConfig = Field(default_factory=ClaudeCodeConfig)


PHASE_PLACEHOLDERS = ("{task}", "{artifact}")
"""What a phase prompt may name: the task prompt, and the previous phase's artifact path."""


class PhaseSpec(_Strict):
    """One session of a multi-session arm (e.g. ``plan`` then ``work``)."""

    name: str
    """Slug naming the phase in records and reports."""
    prompt: str = "{task}"
    """Template: ``{task}`` is the task prompt, ``{artifact}`` the worktree path of the previous
    phase's artifact (e.g. the plan document)."""
    artifact: ProtectedGlob | None = None
    """Worktree glob of the document this phase must produce, e.g. ``docs/plans/*.md``: exactly
    one matching file must be new or changed after it, else the cell fails as
    ``phase-artifact-missing`` and later phases do not run."""
    expected_skill: str | None = None
    """Skill that must be proven invoked in this phase (default: the agent's)."""
    timeout_s: int | None = Field(default=None, gt=0, le=86_400)
    """Session timeout of this phase (default: the task's / bench's session timeout)."""
    max_budget_usd: float | None = Field(default=None, gt=0)
    """Budget of this phase's session (default: the agent's ``max_budget_usd``)."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not ARM_NAME_RE.match(v):
            raise ValueError(f"phase name {v!r} must match [a-z][a-z0-9_-]{{0,63}}")
        return v

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, v: str) -> str:
        return _nonblank(v, "phase prompt")


class ArmSpec(_Strict):
    """One agent configuration under test."""

    agent: AgentSpec
    skills: Literal["none", "incumbent", "candidate"]
    """Which skill tree the worktree gets: none, the incumbent, or incumbent + candidate overlay."""
    role: Literal["comparator", "candidate"] = "comparator"
    pairs_with: str | None = None
    """For a candidate arm: the comparator arm (with incumbent skills) it is judged against."""
    kind: Literal["implementation", "review"] = "implementation"
    """``implementation`` arms run on tasks without ``review``; ``review`` arms run only on
    review tasks: the worktree is read-only and the agent writes its JSON review to
    ``/review-output/review-output.json``, scored against the hidden labels."""
    phases: list[PhaseSpec] = Field(default_factory=list, max_length=8)
    """Ordered sessions (default: one session on the task prompt). Each later phase may name the
    previous phase's artifact in its prompt; usage and outcome are recorded per phase."""

    @model_validator(mode="after")
    def _check_phases(self) -> "ArmSpec":
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            raise ValueError("phase names must be unique")
        for i, p in enumerate(self.phases):
            if "{artifact}" in p.prompt and (i == 0 or self.phases[i - 1].artifact is None):
                raise ValueError(
                    f"phase {p.name!r} names {{artifact}} but the phase before it declares no "
                    "artifact"
                )
        if self.kind == "review" and len(self.phases) > 1:
            raise ValueError("a review arm has one session (at most one phase)")
        return self

    def applies_to(self, task: "TaskSpec") -> bool:
        """Whether this arm runs on ``task``: review arms on review tasks, others on the rest."""
        return (self.kind == "review") == (task.review is not None)

    @model_validator(mode="after")
    def _check_role(self) -> "ArmSpec":
        if self.role == "candidate":
            if self.skills != "candidate":
                raise ValueError("a candidate arm must use skills: candidate")
            if self.pairs_with is None:
                raise ValueError("a candidate arm needs pairs_with: <incumbent comparator arm>")
        else:
            if self.skills == "candidate":
                raise ValueError("skills: candidate requires role: candidate")
            if self.pairs_with is not None:
                raise ValueError("pairs_with applies only to candidate arms")
        return self


# --------------------------------------------------------------------------------------------
# bench.yaml: the rest


class SkillsConfig(_Strict):
    """Where the incumbent skill tree lives and where it is installed in a worktree."""

    source: str = "skills"
    """Folder relative to ``tasks/``."""
    install_path: str = ".claude/skills"
    """Path inside every worktree."""

    @field_validator("source", "install_path")
    @classmethod
    def _check_paths(cls, v: str) -> str:
        return safe_relative_path(v, "skills path")


class PolicyConfig(_Strict):
    """Promotion gate settings, preregistered before a generation runs.

    The README section "Generations, reuse and the gate" describes every policy. A field the
    chosen policy does not read (:data:`POLICY_READS`) may not be set: that is an error naming
    the field, never a silent no-op (issue 23: ``resolve_margin: 0.10`` was ignored while gate
    v2 used ``v2_resolve_margin`` 0.12). A dump holds only the fields the policy reads.
    """

    name: Literal["paired", "paired_v2", "paired_v1", "strict"] = "paired"
    """``paired`` (gate v3, the default: group-sequential looks, drift-robust cost test),
    ``paired_v2`` (issue 13's rules, kept for comparison and for decisions stored before v3),
    ``paired_v1`` (the issue-4 rules) or ``strict`` (the original harness's rules)."""
    metric: Literal["cost_usd", "total_tokens", "duration_s", "turns"] = "cost_usd"
    """The efficiency metric a candidate must improve."""
    min_runs: int = Field(default=3, ge=1)
    """Valid runs per task and arm below which a task cannot be gated."""
    min_improvement: float = Field(default=0.05, ge=0, lt=1)
    """Required relative improvement of the metric (0.05 = 5 % cheaper): of the median per-task
    improvement (strict), of the estimated geometric-mean ratio (paired)."""
    resolve_margin: float = Field(default=0.10, ge=0, le=1)
    """Non-inferiority margin on the mean per-task resolve rate (``paired`` and ``paired_v1``;
    strict, like the original harness, allows no per-task drop at all). The one margin the
    default gate uses: a candidate exactly this much worse is promoted at most ``resolve_error``
    of the time, at every suite size."""
    efficiency_regression_cap: float = Field(default=0.25, ge=0)
    """Largest per-task metric regression tolerated (0.25 = 25 % more expensive); strict only."""
    min_gated_share: float = Field(default=0.5, gt=0, le=1)
    """Share of tasks that must be gated (both arms resolved something) to decide."""
    quality_floor: float = Field(default=0.0, ge=0, le=1)
    """Minimum oracle-backed resolve rate of the candidate over gated tasks."""
    ungated_spend_cap: float = Field(default=1.5, gt=0)
    """Mutually unresolved tasks: candidate median spend at most this multiple of the incumbent
    (strict and paired_v1)."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """One-sided confidence of the paired_v1 cost test and single-task regression test."""
    noninferiority_confidence: float = Field(default=0.85, gt=0.5, lt=1)
    """One-sided confidence of the paired_v1 resolve-rate non-inferiority bound (task-cluster
    bootstrap)."""
    bootstrap_samples: int = Field(default=10_000, ge=100, le=1_000_000)
    seed: int = 20260101
    """Seed of the paired_v1 task-cluster bootstrap: decisions are reproducible."""
    # -- paired (gate v3); see bench_assets/gate/paired3.py and bench/gate_calibration.py
    resolve_error: float = Field(default=0.20, gt=0, lt=0.5)
    """Gate v3: the chance, summed over every look, of promoting a candidate whose resolve rate
    is exactly ``resolve_margin`` below the comparator's (one-sided; spent over the looks by
    ``spending``). With ``standard_error: model`` the bound spends about this error at every
    suite size, so 0.20 is the target itself: a 10-point drop at a 0.10 margin is promoted at
    most 20 % of the time, less where the cost test also has to pass (README, "Where the
    defaults sit")."""
    cost_error: float = Field(default=0.025, gt=0, lt=0.5)
    """Gate v3: the chance, summed over every look, that the cost test calls an equally
    expensive candidate cheaper (one-sided, spent over the looks). 0.025 keeps an equal
    candidate's promotions at 10 tasks near 2 % with the run-level standard error."""
    futility_error: float = Field(default=0.10, ge=0, lt=0.5)
    """Gate v3: the mirror-image futility boundary of each test, spent like the error: a look
    before the last stops (keep) when the resolve rate is shown *below the comparator's at all*,
    or the saving below ``min_improvement``, at this one-sided error. 0 turns futility off."""
    spending: Literal["obrien_fleming", "pocock"] = "pocock"
    """Gate v3: the Lan–DeMets spending function over the observed information fraction.
    ``pocock`` (the default) spends more at the early looks, so a clear candidate stops sooner:
    at 50 tasks starting at 1 run per task a 20 %-cheaper candidate costs about 77 expected
    candidate cells instead of O'Brien–Fleming's 98, and drift10 promotes 3.8 % there instead of
    5.2 % (README, "Where the defaults sit"); ``obrien_fleming`` keeps nearly all the error for
    the last look."""
    drift_prior_sd: float = Field(default=0.15, ge=0)
    """Gate v3: the comparator cost drift (log scale) the cost test is built to withstand. The
    comparator level of a task is ``(1 − w)·old + w·fresh`` with ``w = (A + B²)/(A + B² + F)``
    (A, F: the variances of the old and fresh means, B this value): the drift-robust
    difference-in-differences weight. 0 pools old and fresh runs as if nothing drifted; large
    values read only the fresh gate canaries. As suites grow, ``w`` → 1, so a drift's bias
    shrinks faster than the test's standard error. Why 0.15 (README, "Where the defaults
    sit"): a smaller B buys power at 10 tasks (B 0.10: 57.6 % on a 20 % cut against 49.6 %;
    B 0.07: 62.5 %, and no smaller B buys more: still under 65 %) only by trusting old cells: B
    0.10 promotes a 20–30 % drift 12–19 % of the time at 10 tasks, B 0.07 a 30 % drift 26 %
    (drift10's limit there: 10 %), B 0.05 a 10 % drift 9.0 % at 50 tasks (limit 5 %)."""
    drift_repay_above: float = Field(default=0.10, ge=0, lt=1)
    """Gate v3: estimated comparator drift whose one-sided ``drift_confidence`` lower bound
    exceeds this makes the generation re-pay the comparator's reused cells fresh (once; for
    power, not for validity: the cost test already corrects for drift)."""
    regression_error: float = Field(default=0.10, gt=0, lt=0.5)
    """Gate v3: the per-task regression veto's family error over the counted tasks (one-sided
    Fisher per task, combined by ``regression_test``), checked at every look. At four looks it
    vetoes about 12 % of equal candidates at 10 tasks (``bench/gate_calibration.py``'s
    ``not_promoted_because``); 0.05 would buy about 1.5 points of power there but cannot fire
    at 3 vs 3 runs (3/3 against 0/3 has p = 1/20 exactly), the case this veto exists for."""
    standard_error: Literal["model", "conservative"] = "model"
    """Gate v3: how both tests estimate their standard error. ``model`` (the default): the
    run-level variance of this suite's mean — binomial per task for the resolve rate (every
    counted task with at least 2 runs of each arm), the pooled within-task variance of the log
    metric for the cost (at least ``n − 1`` degrees of freedom) — read through the normal
    quantile; where it does not apply (1 run per task), ``conservative``. ``conservative`` (v3's
    first rule, decisions of schema ≤ 5): the larger of the task-cluster and the run-level SE,
    through Student's t with ``n − 1`` degrees of freedom; at 10 tasks its error is well below
    nominal (a 10-point drop promoted 11 % at ``resolve_error`` 0.25), so the same nominal level
    spent a different real error at each suite size. The tasks are the suite, not a sample of
    tasks: the run-level variance is the variance of the suite's mean."""
    regression_test: Literal["min_p", "bonferroni"] = "min_p"
    """Gate v3: how the per-task Fisher p values are combined. ``min_p``: the exact max-type
    statistic (the family-wise chance of the smallest p given every task's margins; fires at 3
    vs 3 runs); ``bonferroni``: p ≤ ``regression_error`` / tasks (v2's rule; cannot fire at 3 vs
    3 runs). See bench_assets/gate/regression.py and bench/gate_veto_power.py."""
    # -- paired_v2 only; see bench_assets/gate/paired2.py
    v2_noninferiority_confidence: float = Field(default=0.83, gt=0.5, lt=1)
    """paired_v2: one-sided level of the resolve-rate bound, split evenly over the looks."""
    v2_resolve_margin: float = Field(default=0.12, ge=0, le=1)
    """paired_v2: non-inferiority margin of the resolve-rate bound (gate v3 reads
    ``resolve_margin``)."""
    v2_confidence: float = Field(default=0.90, gt=0.5, lt=1)
    """paired_v2: one-sided level of the cost test and hard-regression veto, split evenly over
    the looks."""
    drift_tolerance: float = Field(default=0.05, ge=0, lt=1)
    """paired_v2: comparator cost drift the cost test absorbs (gate v3 has no tolerance band)."""
    drift_absorb_sd: float = Field(default=0.5, ge=0)
    """paired_v2: drift estimate less this many standard errors becomes the cost margin."""
    futility_t: float = -1.0
    """paired_v2: at a look before the last, a cost t statistic above this stops for futility."""
    # -- paired (v3) and paired_v2
    min_counted_tasks: int = Field(default=5, ge=2)
    """Fewer counted tasks than this: insufficient evidence."""
    drift_confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """One-sided level of the drift bound that asks for a comparator re-payment."""
    max_total_spend_ratio: float | None = Field(default=1.0, gt=0)
    """Candidate total spend over comparator total spend (sums of per-task mean metric) above
    this: keep_incumbent; ``None`` reports the ratio without gating on it."""
    pooled_history: bool = True
    """Count comparator cells of identical identity from earlier generations as extra runs."""
    max_pooled_runs: int = Field(default=9, ge=0, le=100)
    """Most earlier-generation comparator runs pooled per task (newest first)."""
    max_looks: int = Field(default=7, ge=1, le=10)
    """Looks at the candidate: the first after the planned ``runs``, then one after each top-up
    of ``top_up_runs`` more candidate runs on every task or, with ``top_up_share``, on some of
    them (new ``<arm>.r<k>`` cells, ``k`` ≥ that task's planned runs), so at most ``runs +
    (max_looks − 1)·top_up_runs`` candidate runs per task. Gate v3 spends
    its errors over the looks (``spending``); paired_v2 splits them evenly (its calibrated point
    is one look). The default, 7, with ``top_up_share`` 1/6, ends at twice the first look's
    candidate cells (4 looks of a whole run per task before issue 23's partial top-ups)."""
    top_up_runs: int = Field(default=1, ge=1, le=20)
    """Candidate runs per task added before each further look."""
    top_up_share: float = Field(default=1 / 6, gt=0, le=1)
    """Gate v3: the share of the first look's candidate cells each top-up adds. A top-up pays
    ``top_up_runs`` more runs on the ``ceil(share · runs · tasks / top_up_runs)`` tasks (at
    least one, at most all) with the fewest planned candidate runs, ties broken by the SHA-256
    of the look number and the task id — fixed before any run, never read from an outcome, so
    every task's rate stays the plain mean of its runs (``bench_assets/gate/sequential.py``).
    The default, 1/6, with ``max_looks`` 7: at 10 tasks × 3 runs a top-up is one more run on 5
    tasks, at 50 tasks × 1 run on 9 tasks; 1 pays every task (at 3 runs, the design before
    this field). Why: each look costs the same share of the evidence at every suite size, and a
    finer step stops closer to where the evidence suffices, so a 50-task suite starting at 1
    run per task stops after about 61 expected candidate cells instead of 79 (README, "Where
    the defaults sit"). The information fractions come from the runs each task had at each
    look; the tasks a look paid are in its record (``top_up_tasks``)."""
    mutually_unresolved: Literal["count"] = "count"
    """Preregistered handling of tasks neither arm resolved: ``count`` keeps them in every
    statistic (dropping them after seeing the outcome would hide a candidate breaking them)."""
    # -- every policy (the driver's)
    requeue_insufficient: int = Field(default=2, ge=0, le=10)
    """A queued candidate whose every decision was insufficient_evidence stays queued and is
    evaluated again (after every never-evaluated candidate) up to this many more times."""
    retries: int = Field(default=2, ge=0, le=5)
    """Re-payments of an excluded (systemic) cell within the generation before deciding."""

    @model_validator(mode="after")
    def _only_fields_the_policy_reads(self) -> "PolicyConfig":
        reads = POLICY_READS[self.name]
        ignored = sorted(f for f in self.model_fields_set if f not in reads)
        if ignored:
            hints = [
                f"{f} (the {self.name} policy reads {POLICY_RENAMED[f]})"
                if POLICY_RENAMED.get(f) in reads
                else f
                for f in ignored
            ]
            raise ValueError(
                f"policy {self.name!r} does not read {', '.join(hints)}: a setting it ignores "
                "would be a silent default; remove it, or choose the policy that reads it"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump_what_the_policy_reads(self, handler: SerializerFunctionWrapHandler) -> object:
        """A stored policy holds only the settings its policy reads, so it validates again."""
        data = handler(self)
        if not isinstance(data, dict):
            return data
        reads = POLICY_READS[self.name]
        return {k: v for k, v in data.items() if k in reads}


_POLICY_COMMON = frozenset(
    {
        "name",
        "metric",
        "min_runs",
        "min_improvement",
        "min_gated_share",
        "quality_floor",
        "requeue_insufficient",
        "retries",
    }
)
_PAIRED_FAMILY = frozenset(
    {
        "min_counted_tasks",
        "drift_confidence",
        "max_total_spend_ratio",
        "pooled_history",
        "max_pooled_runs",
        "max_looks",
        "top_up_runs",
        "mutually_unresolved",
    }
)
POLICY_READS: dict[str, frozenset[str]] = {
    "paired": _POLICY_COMMON
    | _PAIRED_FAMILY
    | {
        "resolve_margin",
        "resolve_error",
        "cost_error",
        "futility_error",
        "spending",
        "drift_prior_sd",
        "drift_repay_above",
        "regression_error",
        "regression_test",
        "standard_error",
        "top_up_share",
    },
    "paired_v2": _POLICY_COMMON
    | _PAIRED_FAMILY
    | {
        "v2_noninferiority_confidence",
        "v2_resolve_margin",
        "v2_confidence",
        "drift_tolerance",
        "drift_absorb_sd",
        "futility_t",
    },
    "paired_v1": _POLICY_COMMON
    | {
        "resolve_margin",
        "ungated_spend_cap",
        "confidence",
        "noninferiority_confidence",
        "bootstrap_samples",
        "seed",
    },
    "strict": _POLICY_COMMON | {"efficiency_regression_cap", "ungated_spend_cap"},
}
"""The :class:`PolicyConfig` fields each policy reads; setting any other is an error."""

POLICY_RENAMED: dict[str, str] = {
    "v2_resolve_margin": "resolve_margin",
    "v2_noninferiority_confidence": "resolve_error",
    "v2_confidence": "cost_error",
    "drift_tolerance": "drift_prior_sd",
    "drift_absorb_sd": "drift_prior_sd",
    "futility_t": "futility_error",
    "noninferiority_confidence": "resolve_error",
    "confidence": "cost_error",
    "seed": "nothing random",
}
"""Where the setting a policy ignores lives in the policy that does read it (for the error)."""


class ReviewPolicyConfig(_Strict):
    """The preregistered gate for a review candidate arm against its incumbent review arm.

    ``bench_assets/gate/review.py`` states every rule; in short, per review task: no verdict
    wrong on any repeat, blocker recall (worst repeat) and weighted F1 (median) not below the
    incumbent's by more than the margins, and on clean controls no more false positives; then
    promote only on a quality improvement or a cost improvement, never at a cost regression.
    """

    min_runs: int = Field(default=3, ge=1)
    """Valid runs per task and arm below which the review gate cannot decide."""
    min_improvement: float = Field(default=0.01, ge=0, le=1)
    """Weighted-F1 gain on a defect task that counts as a quality improvement."""
    weighted_f1_margin: float = Field(default=0.0, ge=0, le=1)
    """Non-inferiority margin on each defect task's weighted F1 (0: the original's rule)."""
    blocker_recall_margin: float = Field(default=0.0, ge=0, le=1)
    """Non-inferiority margin on each task's blocker recall (0: the original's rule)."""
    min_cost_improvement: float = Field(default=0.05, ge=0, lt=1)
    """Geometric-mean cost reduction over the tasks (0.05 = 5 % cheaper) that counts as an
    improvement when quality is non-inferior."""
    max_cost_regression: float = Field(default=0.25, ge=0)
    """Largest geometric-mean cost increase tolerated (0.25 = 25 % dearer) even with better
    quality."""


class ReuseConfig(_Strict):
    """Comparator-cell reuse: when a stored record stands in for a new run.

    The README section "Generations, reuse and the gate" lists why a cell is paid for anyway.
    """

    max_age_days: int = Field(default=90, ge=0)
    canaries: int = Field(default=1, ge=0)
    """Fresh cells paid per comparator arm per generation even when all are reusable (arms no
    candidate is gated against; all comparator arms when ``gate_canaries_per_task`` is 0)."""
    gate_canaries_per_task: int = Field(default=1, ge=0)
    """Fresh cells paid per task, each generation, of every comparator arm a candidate arm is
    gated against (its ``pairs_with``), on the tasks that arm runs on: the fresh evidence the
    gate's drift estimate compares reused cells with. 0 turns them off."""


class IntegrityConfig(_Strict):
    """Cheat measurement (issue 21). A cell the grader found ``grader-tampered`` (a planted canary
    that must fail reported passed) is always a gate veto for a candidate; this section adds
    what must be planned to measure more."""

    impossible_tasks: int = Field(default=0, ge=0)
    """Impossible variants per generation: for a task, a variant whose oracle contradicts the
    prompt (a mutated expectation), so any *resolved* impossible cell is a measured cheat. The
    gate never promotes a candidate with more impossible-resolved cells than its comparator.
    Only 0 is accepted for now: the gate reads the counts, but nothing plans and pays the
    variant cells yet, and a setting that could not be honoured would make every decision
    ``insufficient_evidence`` after the money is spent — so it is refused before any."""

    @field_validator("impossible_tasks")
    @classmethod
    def _not_yet(cls, v: int) -> int:
        if v > 0:
            raise ValueError(
                "impossible variants are not planned yet: the gate can read their counts, but "
                "no generation pays the variant cells, so every decision would be "
                "insufficient_evidence; set 0 (grader-tampered cells are a veto regardless)"
            )
        return v


class ScheduleConfig(_Strict):
    """When the weekly generation starts."""

    cron: str = "0 3 * * 6"
    timezone: str = "UTC"
    """IANA zone the cron is read in (the Dagster schedule's execution timezone)."""
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, v: str) -> str:
        validate_cron(v)
        return v

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, v: str) -> str:
        validate_timezone(v)
        return v


class LimitsConfig(_Strict):
    """Timeouts, concurrency and safety limits."""

    setup_timeout_s: int = Field(default=600, gt=0)
    session_timeout_s: int = Field(default=1800, gt=0)
    verify_timeout_s: int = Field(default=600, gt=0)
    oracle_timeout_s: int = Field(default=600, gt=0)
    graph_timeout_s: int = Field(default=1800, gt=0)
    agent_sessions: int = Field(default=2, ge=1, le=256)
    """Concurrency limit of the ``agent_sessions`` pool."""
    graph_builds: int = Field(default=1, ge=1, le=64)
    """Concurrency limit of the ``graph_build`` pool."""
    outage_streak: int = Field(default=5, ge=1)
    """Consecutive systemic failures that trip the outage breaker."""
    max_spend_usd: float | None = Field(default=None, gt=0)
    """Spend cap of one generation: once the paid cells' reported cost reaches it, no further
    cell is scheduled and the generation is aborted (exit 1). A paid cell whose cost is unknown
    counts at its arm's ``max_budget_usd``; without one the spend can no longer be bounded and
    the cap trips too."""
    oracle_file_bytes: int = Field(default=512 * 1024, gt=0)
    oracle_total_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    output_tail_bytes: int = Field(default=8 * 1024, gt=0)


class ProposerConfig(_Strict):
    """How each generation's candidate overlay is produced.

    ``queue`` takes the next unevaluated overlay from the queue folder. ``command`` and
    ``claude-code`` run a proposer agent in the sandbox; it sees ``/workspace/skills`` (a copy of
    the incumbent tree), ``/workspace/evidence.json`` (a bounded, redacted bundle from the previous
    generation) and ``/workspace/PROPOSE.md`` (its instructions), and writes the overlay under
    ``/workspace/overlay/``, which is validated before any cell is paid for.
    """

    kind: Literal["queue", "command", "claude-code"] = "queue"
    queue: str = "candidates"
    """Folder of queued overlays, relative to ``tasks/``; proposals are added to it."""
    argv: list[str] | None = None
    """For ``kind: command``: the proposer's argv template (``{workdir}``, ``{prompt_file}``)."""
    agent: ClaudeCodeAgent | None = None
    """For ``kind: claude-code``: the agent's options (default: Read/Glob/Grep/Write/Edit tools)."""
    network: bool = False
    """Whether a ``command`` proposer may reach the network (a model API)."""
    env: list[str] = Field(default_factory=list)
    """Host environment variables passed to a ``command`` proposer (credentials)."""
    max_files: int = Field(default=20, ge=1)
    max_file_bytes: int = Field(default=64 * 1024, ge=1)
    timeout_s: int = Field(default=1800, gt=0)

    @model_validator(mode="after")
    def _check_kind(self) -> "ProposerConfig":
        if self.kind == "command" and not self.argv:
            raise ValueError("proposer kind 'command' needs argv")
        safe_relative_path(self.queue, "proposer queue")
        return self


class GraphConfig(_Strict):
    """The indexer that builds the code graph given to agents, from the sanitized template.

    The README section "What the agent can never see" says what is scrubbed from it.
    """

    indexer: Literal["builtin", "command"] = "builtin"
    argv: list[str] | None = None
    """For ``indexer: command``: argv run in the sandbox with ``{workdir}`` (the sanitized tree,
    read-only) and ``{out}`` (the output directory; it must write ``graph.json``)."""
    path: str = ".wfbench/graph.json"
    """Where the graph is placed inside each cell worktree."""

    @model_validator(mode="after")
    def _check_indexer(self) -> "GraphConfig":
        if self.indexer == "command" and not self.argv:
            raise ValueError("graph indexer 'command' needs argv")
        safe_relative_path(self.path, "graph path")
        return self


class SanitizeConfig(_Strict):
    """Benchmark-owned paths removed from every sanitized template."""

    remove: list[RepoPath] = Field(default_factory=list)


class ApplyConfig(_Strict):
    """What happens to the incumbent skill files when a generation decides ``promote``."""

    on_promote: bool = False
    """Replace the incumbent skill files with the overlay automatically (compare-and-swap)."""


class JudgeConfig(_Strict):
    """The judge model of skill-eval ``llm`` / ``baseline`` graders, pinned like the agent's.

    Called from the harness through the model-API egress proxy (:mod:`bench_assets.scorers.judge`),
    3 votes per grader per run (PASS on 2 of 3). Its list prices are required: a judge's cost is
    recorded apart from the agent's and counted toward ``limits.max_spend_usd``, and an unknown
    cost is not zero.
    """

    model: str
    """A dated model id (an alias could change the judge under a fixed config)."""
    input_usd_per_mtok: float = Field(gt=0)
    output_usd_per_mtok: float = Field(gt=0)
    api_base_url: ApiBaseUrl | None = None
    """The model API (default: the host's ``ANTHROPIC_BASE_URL`` if named in ``env``, else the
    Anthropic API)."""
    env: list[str] = Field(default_factory=lambda: ["ANTHROPIC_API_KEY"])
    """Host variables holding the credential (the egress proxy adds it to each request)."""
    max_tokens: int = Field(default=1024, ge=16, le=8192)
    timeout_s: float = Field(default=120.0, gt=0, le=1800)

    @field_validator("model")
    @classmethod
    def _check_model(cls, v: str) -> str:
        return check_model_id(v)


class BenchConfig(_Strict):
    """The experiment: ``tasks/bench.yaml``."""

    model: str
    """Named, versioned model id given to agent arms."""
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    runs: int = Field(ge=1, le=100)
    """Repeats of every arm on every task."""
    arms: dict[str, ArmSpec] = Field(min_length=1)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    review_policy: ReviewPolicyConfig = Field(default_factory=ReviewPolicyConfig)
    """The gate of review candidate arms (``kind: review``)."""
    reuse: ReuseConfig = Field(default_factory=ReuseConfig)
    integrity: IntegrityConfig = Field(default_factory=IntegrityConfig)
    """Cheat measurement: impossible variants (the grader-tampered veto needs no setting)."""
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    proposer: ProposerConfig = Field(default_factory=ProposerConfig)
    graph: GraphConfig = Field(default_factory=GraphConfig)
    sanitize: SanitizeConfig = Field(default_factory=SanitizeConfig)
    apply: ApplyConfig = Field(default_factory=ApplyConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    judge: JudgeConfig | None = None
    """The judge of skill-eval tasks' ``llm`` / ``baseline`` graders (required when one has
    any)."""
    """Adapter-wide settings: ``agents.claude_code.version`` pins the Claude Code CLI."""

    @field_validator("model")
    @classmethod
    def _check_model(cls, v: str) -> str:
        return check_model_id(v)

    @field_validator("arms")
    @classmethod
    def _check_arm_names(cls, v: dict[str, ArmSpec]) -> dict[str, ArmSpec]:
        for name in v:
            if not ARM_NAME_RE.match(name):
                raise ValueError(f"arm name {name!r} must match [a-z][a-z0-9_-]{{0,63}}")
        return v

    @model_validator(mode="after")
    def _check_pairs(self) -> "BenchConfig":
        for name, arm in self.arms.items():
            if arm.role != "candidate":
                continue
            partner = self.arms.get(arm.pairs_with or "")
            if partner is None:
                raise ValueError(f"arms.{name}.pairs_with: no arm named {arm.pairs_with!r}")
            if partner.role != "comparator" or partner.skills != "incumbent":
                raise ValueError(
                    f"arms.{name}.pairs_with: {arm.pairs_with!r} must be a comparator arm "
                    "with skills: incumbent"
                )
            if partner.kind != arm.kind:
                raise ValueError(
                    f"arms.{name}.pairs_with: {arm.pairs_with!r} is a {partner.kind} arm; a "
                    f"{arm.kind} candidate pairs with a {arm.kind} arm"
                )
        return self

    @model_validator(mode="after")
    def _check_claude_code_pin(self) -> "BenchConfig":
        users = [f"arms.{n}" for n, a in self.arms.items() if isinstance(a.agent, ClaudeCodeAgent)]
        if self.proposer.kind == "claude-code":
            users.append("proposer")
        if users and self.agents.claude_code.version is None:
            raise ValueError(
                f"agents.claude_code.version: required, because {', '.join(users)} use(s) "
                "adapter claude-code: name the exact Claude Code release the sessions run, e.g. "
                f"`agents: {{claude_code: {{version: {CLAUDE_CODE_VERSION}}}}}` (wfbench installs "
                "it; `npm view @anthropic-ai/claude-code version` shows the newest)"
            )
        return self

    def comparator_arms(self) -> list[str]:
        """Comparator arm names, sorted."""
        return sorted(n for n, a in self.arms.items() if a.role == "comparator")

    def arm_runs(self, arm: str) -> int:
        """Most runs per task ``arm`` can be planned in a generation: ``runs``, plus the
        sequential top-ups of the implementation candidate under the ``paired`` policy (its cell
        partitions ``<arm>.r<runs>`` … exist so a top-up is a visible partition, not a rename)."""
        spec = self.arms[arm]
        if (
            spec.role == "candidate"
            and spec.kind == "implementation"
            and self.policy.name == "paired"
        ):
            return self.runs + (self.policy.max_looks - 1) * self.policy.top_up_runs
        return self.runs

    def candidate_arms(self, kind: Literal["implementation", "review"] | None = None) -> list[str]:
        """Candidate arm names, sorted; only those of ``kind`` when given."""
        return sorted(
            n
            for n, a in self.arms.items()
            if a.role == "candidate" and (kind is None or a.kind == kind)
        )


# --------------------------------------------------------------------------------------------
# candidate overlays


class CandidateSpec(_Strict):
    """``tasks/candidates/<id>/candidate.yaml``: one queued overlay (files under ``files/``)."""

    id: str
    title: str
    origin: Literal["manual", "proposer"] = "manual"
    rationale: str = ""

    @field_validator("id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if not TASK_ID_RE.match(v) or ".." in v:
            raise ValueError(f"candidate id {v!r} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}")
        return v

    @field_validator("title")
    @classmethod
    def _check_title(cls, v: str) -> str:
        return _nonblank(v, "title")
