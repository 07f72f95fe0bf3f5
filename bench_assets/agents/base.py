"""The adapter interface every agent kind implements.

An adapter runs one agent session in a prepared worktree and reports what happened. It never
grades (that is :mod:`bench_assets.cells.grading`) and never writes records (that is
:mod:`bench_assets.cells.pipeline`). Every process it starts goes through
:func:`bench_assets.sandbox.process.run` with ``Isolation.SANDBOX``: the worktree is mounted
read-write at ``/workspace`` and a private scratch folder at ``/wfbench`` (prompt file, usage file).
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.sandbox.process import WORKSPACE, ModelApiChannel, Mount, SandboxSpec

SCRATCH = "/wfbench"
"""Where the adapter's private scratch folder is mounted inside the sandbox."""
REVIEW_OUTPUT_DIR = "/review-output"
"""Where a review session's writable output folder is mounted (outside ``/workspace``)."""
REVIEW_OUTPUT_FILE = f"{REVIEW_OUTPUT_DIR}/review-output.json"
"""The file a review session must write (the review output contract)."""


class ModelUsage(BaseModel):
    """Tokens and cost of one model within a session (Claude Code's ``modelUsage``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cost_usd: float | None = None


class Usage(BaseModel):
    """What a session cost, as reported by the agent itself. Unknown is ``None``, never 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cost_usd: float | None = None
    turns: int | None = None
    duration_s: float | None = None
    """Agent-reported session duration (wall time is measured separately)."""
    by_model: dict[str, ModelUsage] | None = None
    """Per-model breakdown (main model, sub-agents), when the agent reports one."""

    @property
    def total_tokens(self) -> int | None:
        """Sum of the four token counts, or None if any is unknown."""
        parts = [
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens,
        ]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


@dataclass(frozen=True)
class SessionContext:
    """Everything an adapter needs to run one session."""

    task_id: str
    arm: str
    run: int
    prompt: str
    model: str
    effort: str | None
    workdir: Path
    """Host path of the worktree (mounted at ``/workspace``)."""
    scratch: Path
    """Host path of a private, empty folder (mounted read-write at ``/wfbench``)."""
    timeout_s: float
    expected_skill: str | None = None
    """Skill that must be proven invoked in the transcript, else ``skill-not-invoked``."""
    secrets_env: dict[str, str] = field(default_factory=dict)
    """Credentials the arm may pass (names from its config, values from the host)."""
    memory_mb: int | None = None
    readonly_paths: tuple[str, ...] = ()
    """Worktree-relative paths (the evaluated skill files) mounted read-only over the worktree."""
    phase: str | None = None
    """The arm's phase this session is (``None`` for a one-session arm)."""
    max_budget_usd: float | None = None
    """This session's budget when the phase overrides the agent's ``max_budget_usd``."""
    max_turns: int | None = None
    """This session's turn cap when the task declares one (a skill-eval case's ``max_turns``),
    in place of the agent's ``max_turns``."""
    allowed_tools: tuple[str, ...] = ()
    """The tools a skill-eval case grants (narrowed by the arm's own grant); empty: the arm's."""
    append_system_prompt: str | None = None
    """Text a skill-eval case appends to the agent's system prompt."""
    case_env: dict[str, str] = field(default_factory=dict)
    """A skill-eval case's ``EVAL_*`` variables, set in the session; never a harness variable."""
    review_output: Path | None = None
    """Review sessions: host folder mounted writable at ``/review-output`` (outside the
    worktree), where the agent writes its review; the worktree is then mounted read-only."""
    extra_mounts: tuple[Mount, ...] = ()
    """Further mounts the cell adds."""
    graph_file: Path | None = None
    """Host path of the task's sanitized code graph (served by the bundled code-graph server)."""
    env_mounts: tuple[Mount, ...] = ()
    """The task environment (read-only; :mod:`bench_assets.inputs.environments`), if the task has
    one."""

    @property
    def env_vars(self) -> dict[str, str]:
        """``PYTHONPATH`` naming the task environment, so the agent's own test runs see it."""
        from bench_assets.inputs.environments import env_pythonpath

        return env_pythonpath(tuple(m.dest for m in self.env_mounts))


def session_sandbox(
    ctx: SessionContext,
    *,
    network: bool,
    extra: tuple[Mount, ...] = (),
    model_api: ModelApiChannel | None = None,
) -> SandboxSpec:
    """The containment every adapter uses for a session.

    The worktree is writable at ``/workspace`` (read-only for a review session, whose only
    writable place besides the scratch folder is ``/review-output``), the scratch folder at
    ``/wfbench``, the evaluated skill files are read-only, and the network exists only if the
    agent needs it — or, with ``model_api``, only the model API through the egress proxy.
    """
    mounts = [Mount(ctx.scratch, SCRATCH, writable=True)]
    review = ctx.review_output is not None
    for rel in ctx.readonly_paths:
        if (ctx.workdir / rel).exists() and not review:
            mounts.append(Mount(ctx.workdir / rel, f"{WORKSPACE}/{rel}", writable=False))
    mounts.extend(ctx.env_mounts)
    if ctx.review_output is not None:
        mounts.append(Mount(ctx.review_output, REVIEW_OUTPUT_DIR, writable=True))
    mounts.extend(ctx.extra_mounts)
    mounts.extend(extra)
    return SandboxSpec(
        workspace=ctx.workdir,
        workspace_writable=not review,
        network=network,
        mounts=tuple(mounts),
        memory_mb=ctx.memory_mb,
        model_api=model_api,
    )


@dataclass(frozen=True)
class SessionResult:
    """What one session did."""

    ok: bool
    usage: Usage
    error_kind: ErrorKind | None = None
    error_detail: str = ""
    session_ids: tuple[str, ...] = ()
    transcript: bytes | None = None
    """Raw transcript; the caller redacts it before storing."""
    agent_version: str | None = None
    wall_s: float = 0.0
    """Wall time spent in agent subprocesses."""
    producer: str | None = None
    """Who produced a replayed patch (a prediction's ``model_name_or_path``), when known."""


class Adapter(Protocol):
    """One agent kind."""

    name: str

    def identity(self) -> dict[str, object]:
        """What about this agent goes into the cell identity (CLI version, options)."""
        ...

    def run(self, ctx: SessionContext) -> SessionResult:
        """Run one session in ``ctx.workdir``; never raises for agent failures."""
        ...
