"""Running one cell (task × arm × run) end to end, and the identity that decides reuse.

:func:`run_cell` copies the sanitized template, installs the arm's skills, places the graph, runs
setup, the agent session, ``verify`` and the hidden oracle, captures the patch, writes the record
atomically, and removes the worktree. Nothing it does raises for a failing agent or a broken
environment: each outcome becomes a record with a classified error kind
(:mod:`bench_assets.kernel.errorkinds`).

:func:`cell_identity` lists everything a cell's result depends on: harness version, arm
configuration, model, effort, agent identity, sandbox backend, resource profile, and the data
versions of binding, oracle, graph, skills and overlay. Equal identity means a stored record can be
reused instead of paying for a new session (:mod:`bench_assets.generation.planner` names what
changed).

Why one file over 500 lines: :func:`run_cell` (about 260 lines) is one ordered procedure whose
every step's failure becomes a classified record, read top to bottom; and :func:`cell_identity`
must name exactly the inputs that :func:`run_cell` reads, so the two stay side by side, where a new
input to the run is seen beside the identity that must name it.
"""

import functools
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_assets import __version__
from bench_assets.agents.base import Adapter, SessionContext, SessionResult, Usage
from bench_assets.agents.command import CommandAdapter
from bench_assets.agents.phases import PhaseRecord, plan_phases, run_phases
from bench_assets.agents.replay import ReplayAdapter
from bench_assets.cells.cellkeys import case_session_identity, cell_key, identity_digest
from bench_assets.cells.grading import Grade, grade_cell
from bench_assets.cells.records import (
    CellRecord,
    new_record_id,
    now_iso,
    write_artifact,
    write_record,
)
from bench_assets.cells.review_cells import (
    REVIEW_CONTRACT,
    ReviewGrade,
    grade_review,
    new_output_dir,
)
from bench_assets.cells.skill_eval_cell import grade_skill_eval, skill_error_kind
from bench_assets.cells.worktree import CellWorktree, prepare
from bench_assets.config.models import ArmSpec, ClaudeCodeAgent, CommandAgent, ReplayAgent, TaskSpec
from bench_assets.inputs.binding import TaskBinding
from bench_assets.inputs.environments import EnvironmentRecord
from bench_assets.inputs.graph import GraphInfo
from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.inputs.overlay import OverlaySnapshot
from bench_assets.inputs.sanitize import Template
from bench_assets.inputs.skills import SkillsSnapshot
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import WfbenchError
from bench_assets.kernel.fsutil import atomic_write_text, remove_tree
from bench_assets.kernel.store import ArtifactStore
from bench_assets.runner.canaries import CanaryOutcome
from bench_assets.runner.trusted import PhaseResult
from bench_assets.sandbox import process as sandbox_mod
from bench_assets.sandbox.egress import preflight as egress_preflight
from bench_assets.sandbox.redact import Redactor
from bench_assets.scorers.skill_graders import RunGrade
from bench_assets.tasks.catalog import Benchmark
from bench_assets.tasks.skill_eval_tasks import case_session

if TYPE_CHECKING:
    from bench_assets.scorers.judge import MessagesJudge

SANDBOX_BACKEND = "bwrap"
GRADER = "trusted-runner-2"
"""How cells are graded; part of the identity, so records graded another way are never reused.
2: the recorded patch is graded in a tree rebuilt from the base, with tamper canaries in both
phases and source-only imports (1: per-test outcomes in the agent's worktree)."""
MAX_DETAIL = 2000


@dataclass(frozen=True)
class CellInputs:
    """The upstream artifacts a cell rests on (one task)."""

    binding: TaskBinding
    oracle: OracleSnapshot
    oracle_payloads: dict[str, bytes]
    template: Template
    graph: GraphInfo
    graph_file: Path
    skills: SkillsSnapshot
    skills_dir: Path
    overlay: OverlaySnapshot | None = None
    overlay_dir: Path | None = None
    environment: EnvironmentRecord | None = None
    environment_dir: Path | None = None
    """The task environment (:mod:`bench_assets.inputs.environments`), for a task that declares
    one."""

    def identity(self) -> "InputIdentity":
        """The part of these inputs a cell's identity depends on."""
        return InputIdentity(
            binding=self.binding,
            oracle_digest=self.oracle.digest,
            graph_digest=self.graph.digest,
            sanitized_sha=self.template.info.sanitized_sha,
            skills_digest=self.skills.digest,
            overlay_digest=self.overlay.digest if self.overlay is not None else None,
            environment_digest=self.environment.digest if self.environment is not None else None,
        )


@dataclass(frozen=True)
class InputIdentity:
    """What a cell's identity takes from its inputs: the binding and digests, no artifact paths.

    Planning needs only this, so it is read from the input assets' stored metadata and binding
    records (:func:`bench_assets.driver.plan.stored_input_identities`) instead of building the
    inputs; :meth:`CellInputs.identity` gives the same for built or loaded inputs.
    """

    binding: TaskBinding
    oracle_digest: str
    graph_digest: str
    sanitized_sha: str
    skills_digest: str
    overlay_digest: str | None = None
    environment_digest: str | None = None


def _identity_of(inputs: "CellInputs | InputIdentity") -> InputIdentity:
    return inputs.identity() if isinstance(inputs, CellInputs) else inputs


def make_adapter(bench: Benchmark, arm: ArmSpec) -> Adapter:
    """The adapter for an arm's agent."""
    agent = arm.agent
    if isinstance(agent, ReplayAgent):
        return ReplayAdapter.from_file(bench.root / agent.predictions)
    if isinstance(agent, CommandAgent):
        return CommandAdapter(agent)
    if isinstance(agent, ClaudeCodeAgent):
        from bench_assets.agents.claude_code import ClaudeCodeAdapter

        return ClaudeCodeAdapter(agent, bench.root, bench.config.agents.claude_code)
    raise TypeError(f"unknown agent {agent!r}")


def _timeouts(bench: Benchmark, task_id: str) -> dict[str, float]:
    t = bench.task(task_id).spec.timeouts
    lim = bench.config.limits
    return {
        "setup_s": float(t.setup_s or lim.setup_timeout_s),
        "session_s": float(t.session_s or lim.session_timeout_s),
        "verify_s": float(t.verify_s or lim.verify_timeout_s),
        "oracle_s": float(t.oracle_s or lim.oracle_timeout_s),
    }


def cell_identity(
    bench: Benchmark,
    task_id: str,
    arm_name: str,
    run: int,
    inputs: "CellInputs | InputIdentity",
    adapter: Adapter,
    arm_spec: ArmSpec | None = None,
) -> dict[str, Any]:
    """Everything the cell's result depends on (see module docstring)."""
    ids = _identity_of(inputs)
    arm = arm_spec or bench.config.arms[arm_name]
    spec = bench.task(task_id).spec
    per_cell = getattr(adapter, "cell_identity", None)
    agent = per_cell(task_id, run) if callable(per_cell) else adapter.identity()
    # Only a task with an environment has the key, so no other cell's identity changed with it.
    env: dict[str, Any] = {}
    if ids.environment_digest is not None:
        env["environment"] = ids.environment_digest
    # Likewise only a skill-eval case that sets session settings has this key.
    session = _case_session_identity(spec)
    if session is not None:
        env["case_session"] = session
    return {
        "harness_version": __version__,
        "grader": GRADER,
        "arm": arm_identity(arm),
        "agent": agent,
        "model": bench.config.model,
        "effort": bench.config.effort,
        "sandbox_backend": SANDBOX_BACKEND,
        "resources": {**_timeouts(bench, task_id), **spec.resources.model_dump(mode="json")},
        "skills_install_path": bench.config.skills.install_path,
        "graph_path": bench.config.graph.path,
        "run": run,
        "binding": ids.binding.model_dump(mode="json"),
        "oracle": ids.oracle_digest,
        "graph": ids.graph_digest,
        "sanitized_sha": ids.sanitized_sha,
        "skills": ids.skills_digest if arm.skills != "none" else None,
        "overlay": ids.overlay_digest if arm.skills == "candidate" else None,
        **env,
    }


def _case_session_identity(spec: TaskSpec) -> dict[str, Any] | None:
    se = spec.skill_eval
    if se is None:
        return None
    return case_session_identity(
        allowed_tools=list(se.allowed_tools),
        append_system_prompt=se.append_system_prompt,
        env=se.env,
        max_turns=se.max_turns,
        model=se.model,
    )


_NEW_ARM_FIELDS = ("kind", "phases")
_NEW_AGENT_FIELDS = ("mcp_servers", "plugin_dirs")


@functools.cache
def _new_arm_defaults() -> dict[str, Any]:
    """The defaults of :data:`_NEW_ARM_FIELDS`, computed once: pydantic inspects a default
    factory's signature on every call, and a plan computes an identity per cell (9,000 at
    1,000 tasks)."""
    return {
        n: ArmSpec.model_fields[n].get_default(call_default_factory=True) for n in _NEW_ARM_FIELDS
    }


def arm_identity(arm: ArmSpec) -> dict[str, Any]:
    """The arm's configuration as identity: every field, phases and tool servers included.

    Fields added after records were first stored (arm ``kind`` and ``phases``, an agent's
    ``mcp_servers`` and ``plugin_dirs``) are left out while they hold their defaults, so adding
    them to the format did not make every stored cell unreusable.
    """
    body = arm.model_dump(mode="json")
    defaults = _new_arm_defaults()
    for name in _NEW_ARM_FIELDS:
        if body.get(name) == defaults[name]:
            body.pop(name)
    agent = body.get("agent", {})
    for name in _NEW_AGENT_FIELDS:
        if name in agent and not agent[name]:
            agent.pop(name)
    return body


_contained = False


def ensure_contained() -> None:
    """Prove sandbox containment once per process before any paid work (fail closed)."""
    global _contained
    if not _contained:
        sandbox_mod.preflight()
        egress_preflight()
        _contained = True


def _skill_layers(arm: ArmSpec, inputs: CellInputs) -> list[Path]:
    if arm.skills == "none":
        return []
    layers = [inputs.skills_dir]
    if arm.skills == "candidate":
        if inputs.overlay_dir is None:
            raise WfbenchError("candidate arm without a candidate overlay")
        layers.append(inputs.overlay_dir)
    return layers


_NO_TESTS = (ErrorKind.PATCH_FAILED, ErrorKind.PHASE_ARTIFACT_MISSING)
"""Session outcomes after which the tests are not run (nothing meaningful to grade)."""


def _error_kind(session: SessionResult | None, grade: Grade | None) -> ErrorKind | None:
    if session is None or grade is None:
        return ErrorKind.INFRA_ERROR
    if session.error_kind is not None:
        return session.error_kind
    if not session.ok:
        return ErrorKind.SESSION_ERROR
    if grade.infra_detail:
        return ErrorKind.INFRA_ERROR
    if grade.patch_failed:
        return ErrorKind.PATCH_FAILED
    if grade.tampered:
        return ErrorKind.GRADER_TAMPERED
    if grade.oracle_error is not None and grade.oracle_error is not ErrorKind.ORACLE_UNAVAILABLE:
        return grade.oracle_error
    if not grade.verify_passed:
        return ErrorKind.VERIFY_FAILED
    if grade.oracle_error is not None:
        return grade.oracle_error
    if not grade.oracle_passed:
        return ErrorKind.ORACLE_FAILED
    if not grade.patch.strip():
        return ErrorKind.NO_WORK_PRODUCED
    return None


def run_cell(
    bench: Benchmark,
    task_id: str,
    arm_name: str,
    run: int,
    inputs: CellInputs,
    artifacts: ArtifactStore,
    *,
    generation: str | None,
    redactor: Redactor,
    adapter: Adapter | None = None,
    arm_spec: ArmSpec | None = None,
    ad_hoc: bool = False,
) -> tuple[CellRecord, Path]:
    """Run one cell and store its record; returns the record and the record file.

    ``arm_spec`` runs an arm that is not in bench.yaml (``wfbench grade`` / ``wfbench try``).
    """
    ensure_contained()
    started = time.monotonic()
    arm = arm_spec or bench.config.arms[arm_name]
    task = bench.task(task_id)
    adapter = adapter or make_adapter(bench, arm)
    identity = cell_identity(bench, task_id, arm_name, run, inputs, adapter, arm)
    record_id = new_record_id()
    work = artifacts.work(record_id)
    timeouts = _timeouts(bench, task_id)
    memory = task.spec.resources.memory_mb
    timings: dict[str, float] = {}
    session: SessionResult | None = None
    phase_records: list[PhaseRecord] = []
    review: ReviewGrade | None = None
    skill_run: RunGrade | None = None
    skill_detail = ""
    grade: Grade | None = None
    detail = ""
    wt: CellWorktree | None = None
    atomic_write_text(work / "owner", f"{socket.gethostname()}:{os.getpid()}\n")
    try:
        t0 = time.monotonic()
        wt = prepare(
            inputs.template,
            work / "tree",
            skill_layers=_skill_layers(arm, inputs),
            install_path=bench.config.skills.install_path,
            graph_file=inputs.graph_file,
            graph_path=bench.config.graph.path,
            setup=task.spec.setup,
            setup_timeout_s=timeouts["setup_s"],
            protected=list(task.spec.protected),
            memory_mb=memory,
            import_paths=list(task.spec.import_paths),
            environment=inputs.environment_dir,
            keep_base=arm.kind != "review",
        )
        # A phase's declared document (the plan) is the skill's output, not the task's work:
        # like the skills and the graph it stays out of the patch, the churn and no-work checks.
        wt.excluded_paths.extend(p.artifact for p in arm.phases if p.artifact)
        timings["prepare_s"] = time.monotonic() - t0
        if wt.setup_result is not None:
            timings["setup_s"] = wt.setup_result.duration_s
        scratch = work / "scratch"
        scratch.mkdir(parents=True)
        expected = getattr(arm.agent, "expected_skill", None)
        secret_names = list(getattr(arm.agent, "env", []) or [])
        if not arm.applies_to(task.spec):
            raise WfbenchError(
                f"arm {arm_name!r} is a {arm.kind} arm and task {task_id!r} is "
                f"{'a review task' if task.spec.review else 'not a review task'}"
            )
        review_dir = new_output_dir(work) if arm.kind == "review" else None
        case = case_session(task.spec, bench.config.model, str(task.file))
        ctx = SessionContext(
            task_id=task_id,
            arm=arm_name,
            run=run,
            prompt=task.spec.prompt,
            model=bench.config.model,
            effort=bench.config.effort,
            workdir=wt.path,
            scratch=scratch,
            timeout_s=timeouts["session_s"],
            secrets_env=_secrets(secret_names),
            memory_mb=memory,
            readonly_paths=tuple(wt.readonly_paths),
            env_mounts=wt.env_mounts,
            review_output=review_dir,
            graph_file=inputs.graph_file,
            max_turns=case.max_turns,
            allowed_tools=case.allowed_tools,
            append_system_prompt=case.append_system_prompt,
            case_env=case.env,
        )
        t0 = time.monotonic()
        outcome = run_phases(
            adapter.run,
            ctx,
            plan_phases(arm, default_timeout_s=timeouts["session_s"], agent_skill=expected),
            task.spec.prompt + (REVIEW_CONTRACT if review_dir is not None else ""),
            skills_installed=arm.skills != "none",
        )
        session, phase_records = outcome.session, outcome.phases
        timings["session_s"] = time.monotonic() - t0
        timings["agent_process_s"] = session.wall_s
        t0 = time.monotonic()
        if task.spec.skill_eval is not None:
            grade, skill_run, skill_detail = grade_skill_eval(
                wt,
                inputs.oracle_payloads.get(task.spec.skill_eval.grading),
                session.transcript,
                scratch=work / "capture",
                with_plugin=arm.skills != "none",
                session_kind=session.error_kind,
                session_detail=session.error_detail,
                judge=_judge(bench),
            )
        elif review_dir is not None:
            assert task.spec.review is not None
            if session.ok:
                labels = inputs.oracle_payloads.get(task.spec.review.labels)
                review = grade_review(review_dir, labels)
            grade = Grade(
                verify_passed=review is not None and review.valid,
                oracle_passed=bool(review and review.score and review.score.oracle_passed),
            )
        else:
            grade = grade_cell(
                wt,
                verify=task.spec.verify,
                snapshot=inputs.oracle,
                payloads=inputs.oracle_payloads,
                stage_parent=work / "stage",
                verify_timeout_s=timeouts["verify_s"],
                oracle_timeout_s=timeouts["oracle_s"],
                tail_bytes=bench.config.limits.output_tail_bytes,
                memory_mb=memory,
                runner_files=task.spec.runner_files,
                run_tests=session.error_kind not in _NO_TESTS,
                allow_binaries=task.spec.allow_binaries,
            )
        timings["grade_s"] = time.monotonic() - t0
        timings["verify_s"] = grade.verify_s
        timings["oracle_s"] = grade.oracle_s
        timings["capture_s"] = grade.capture_s
    except (WfbenchError, OSError) as e:
        detail = f"{type(e).__name__}: {e}"
    kind = _error_kind(session, grade)
    if task.spec.skill_eval is not None and session is not None and grade is not None:
        kind = skill_error_kind(session.ok, session.error_kind, grade, skill_run)
        detail = detail or session.error_detail or skill_detail
    elif review is not None:
        kind, detail = review.error_kind, review.detail
    elif session is not None and session.error_detail:
        detail = session.error_detail
    elif grade is not None and grade.infra_detail and kind is ErrorKind.INFRA_ERROR:
        detail = grade.infra_detail
    elif grade is not None and kind is ErrorKind.PATCH_FAILED:
        detail = grade.patch_failed
    elif grade is not None and kind is ErrorKind.GRADER_TAMPERED:
        detail = "the code under test forged test outcomes: " + "; ".join(grade.tampered[:5])
    elif grade is not None and grade.verify_run is not None and kind is ErrorKind.VERIFY_FAILED:
        detail = f"verify: {grade.verify_run.detail}"
    elif (
        grade is not None
        and grade.oracle_detail
        and kind
        in (
            ErrorKind.ORACLE_FAILED,
            ErrorKind.EVIDENCE_UNVERIFIED,
            ErrorKind.ORACLE_UNAVAILABLE,
        )
    ):
        detail = grade.oracle_detail
    folder = artifacts.cell(task_id, cell_key(arm_name, run), record_id)
    patch = transcript = None
    if grade is not None:
        patch = write_artifact(
            folder, "patch.diff", redactor.bytes(grade.patch), grade.patch_truncated
        )
    if session is not None and session.transcript is not None:
        transcript = write_artifact(folder, "transcript.jsonl", redactor.bytes(session.transcript))
    review_artifact = None
    if review is not None and review.artifact is not None:
        review_artifact = write_artifact(folder, "review.json", redactor.bytes(review.artifact))
    try:
        remove_tree(work)
    except OSError as e:
        kind = ErrorKind.CLEANUP_FAILURE
        detail = f"worktree cleanup failed: {e}"
    usage = session.usage if session is not None else Usage()
    resolved = kind is None
    record = CellRecord(
        record_id=record_id,
        task=task_id,
        task_class=task.spec.class_,
        arm=arm_name,
        role=arm.role,
        run=run,
        cell=cell_key(arm_name, run),
        generation=generation,
        adapter=adapter.name,
        model=bench.config.model,
        effort=bench.config.effort,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        total_tokens=usage.total_tokens,
        cost_usd=usage.cost_usd,
        turns=usage.turns,
        agent_duration_s=usage.duration_s,
        duration_s=round(time.monotonic() - started, 3),
        churn_files=grade.churn_files if grade else 0,
        churn_insertions=grade.churn_insertions if grade else 0,
        churn_deletions=grade.churn_deletions if grade else 0,
        verify_passed=bool(grade and grade.verify_passed),
        oracle_passed=bool(grade and grade.oracle_passed),
        resolved=resolved,
        error_kind=kind,
        error_detail=redactor.text(detail)[:MAX_DETAIL],
        verify_tail=redactor.text(grade.verify_tail if grade else ""),
        verify_run=_redacted_run(grade.verify_run, redactor) if grade else None,
        oracle_run=grade.oracle_run if grade else None,
        protected_changed=grade.protected_changed if grade else [],
        runner_files=grade.runner_files if grade else [],
        canaries=_redacted_canaries(grade, redactor),
        tampered=[redactor.text(t) for t in grade.tampered] if grade else [],
        binary_files=grade.binary_files if grade else [],
        session_ids=list(session.session_ids) if session else [],
        patch=patch,
        transcript=transcript,
        identity_digest=identity_digest(identity),
        identity=redactor.deep(identity),  # type: ignore[arg-type]
        skills_digest=identity["skills"],
        overlay_digest=identity["overlay"],
        binding_digest=inputs.binding.digest,
        resolved_sha=inputs.binding.resolved_sha,
        sanitized_sha=inputs.template.info.sanitized_sha,
        oracle_digest=inputs.oracle.digest,
        graph_digest=inputs.graph.digest,
        harness_version=__version__,
        agent_version=session.agent_version if session else None,
        sandbox_backend=SANDBOX_BACKEND,
        timings={k: round(v, 4) for k, v in timings.items()},
        recorded_at=now_iso(),
        ad_hoc=ad_hoc,
        model_usage=usage.by_model,
        producer=session.producer if session is not None else None,
        phases=phase_records or None,
        review=review.score if review is not None else None,
        review_evidence_valid=review.valid if review is not None else None,
        review_artifact=review_artifact,
        skill_eval=(
            RunGrade.model_validate(redactor.deep(skill_run.model_dump(mode="json")))
            if skill_run is not None
            else None
        ),
    )
    return record, write_record(folder, record)


def _redacted_canaries(grade: Grade | None, redactor: Redactor) -> list[CanaryOutcome] | None:
    """Verify's canaries are copies of the agent's own tests: redact them like its output."""
    if grade is None or (grade.verify_run is None and grade.oracle_run is None):
        return None
    return [
        c.model_copy(
            update={
                "id": redactor.text(c.id),
                "copies": redactor.text(c.copies) if c.copies is not None else None,
                "detail": redactor.text(c.detail),
            }
        )
        for c in grade.canaries
    ]


def _redacted_run(run: PhaseResult | None, redactor: Redactor) -> PhaseResult | None:
    """Verify's test ids come from the agent's own test files: redact them like its output."""
    if run is None:
        return None
    tests = [t.model_copy(update={"id": redactor.text(t.id)}) for t in run.tests]
    return run.model_copy(update={"tests": tests, "detail": redactor.text(run.detail)})


def _judge(bench: Benchmark) -> "MessagesJudge | None":
    """The pinned judge of skill-eval llm/baseline graders, if bench.yaml names one."""
    cfg = bench.config.judge
    if cfg is None:
        return None
    from bench_assets.scorers.judge import MessagesJudge

    return MessagesJudge(cfg, _secrets(cfg.env), os.environ)


def _secrets(names: list[str]) -> dict[str, str]:
    return {n: os.environ[n] for n in names if n in os.environ}


def _alive(owner: str) -> bool:
    host, _, pid = owner.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's cell: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_work(artifacts: ArtifactStore) -> int:
    """Delete worktrees of cells whose process died (killed mid-cell); returns how many."""
    root = artifacts.work_root()
    if not root.is_dir():
        return 0
    n = 0
    for d in root.iterdir():
        owner_file = d / "owner"
        owner = owner_file.read_text().strip() if owner_file.is_file() else ""
        if owner and _alive(owner):
            continue
        remove_tree(d)
        n += 1
    return n


def build_cell_inputs(
    bench: Benchmark,
    task_id: str,
    artifacts: ArtifactStore,
    *,
    candidate: str | None = None,
) -> CellInputs:
    """Build every upstream input of a task's cells directly (no Dagster): for the CLI."""
    from bench_assets.inputs import build as inputs_mod
    from bench_assets.inputs import oracle as oracle_mod
    from bench_assets.inputs import overlay as overlay_mod
    from bench_assets.inputs import skills as skills_mod

    bound = inputs_mod.bind_task(bench, task_id, artifacts).binding
    captured = inputs_mod.capture_oracle(bench, task_id, bound, artifacts)
    built = inputs_mod.build_sanitized_graph(bench, task_id, bound, captured, artifacts)
    skills, skills_path = skills_mod.snapshot(bench.skills_dir, artifacts)
    ov = ov_dir = None
    if candidate is not None:
        cand = bench.candidates.get(candidate)
        if cand is None:
            known = ", ".join(sorted(bench.candidates)) or "none"
            raise WfbenchError(f"unknown candidate {candidate!r} (queued: {known})")
        ov, ov_dir = overlay_mod.snapshot(cand, bench.skills_dir, skills.digest, artifacts)
    env = inputs_mod.build_environment(bench, task_id, bound, artifacts)
    return CellInputs(
        binding=bound,
        oracle=captured.snapshot,
        oracle_payloads=oracle_mod.verify_stored(captured.snapshot, artifacts),
        template=built.template,
        graph=built.graph,
        graph_file=artifacts.graph(built.graph.digest) / "graph.json",
        skills=skills,
        skills_dir=skills_path / "files",
        overlay=ov,
        overlay_dir=ov_dir,
        environment=env.record if env is not None else None,
        environment_dir=env.path if env is not None else None,
    )
