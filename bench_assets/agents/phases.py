"""Multi-session arms: run an arm's phases in order and fold them into one cell outcome.

An arm without ``phases`` is one session on the task prompt. An arm with phases (the original
harness's ``workflow``: a *plan* session that must produce exactly one plan document, then a
*work* session on that plan) runs each phase as its own session in the same worktree:

* the phase prompt is its template with ``{task}`` (the task prompt) and ``{artifact}`` (the
  worktree path of the previous phase's artifact) filled in — nothing else is substituted, so a
  task prompt that contains braces passes through unchanged;
* the phase's own expected skill, timeout and budget apply to its session;
* a phase that declares ``artifact`` (a worktree glob) must leave exactly one matching file new
  or changed — zero, two or more is ``phase-artifact-missing`` and no later phase runs;
* the first failing phase decides the cell's error kind (its detail names the phase).

Usage is summed over the phases that ran (:func:`sum_usage`: a count is unknown when any phase's
is unknown — unknown is never zero), and each phase keeps its own :class:`PhaseRecord`.
"""

import fnmatch
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.agents.base import ModelUsage, SessionContext, SessionResult, Usage
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.hashing import sha256_file

MAX_ARTIFACT_SCAN = 20_000
"""Files looked at when snapshotting a phase artifact glob (a bound on adversarial trees)."""


@dataclass(frozen=True)
class PhasePlan:
    """One session to run: the phase's settings resolved against the arm and the task."""

    name: str | None
    prompt_template: str
    artifact: str | None
    expected_skill: str | None
    timeout_s: float
    max_budget_usd: float | None


class PhaseRecord(BaseModel):
    """What one phase did (stored in the cell record, in phase order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    ok: bool
    error_kind: ErrorKind | None
    error_detail: str
    input_tokens: int | None
    output_tokens: int | None
    cache_read_input_tokens: int | None
    cache_creation_input_tokens: int | None
    cost_usd: float | None
    turns: int | None
    agent_duration_s: float | None
    wall_s: float
    session_ids: list[str]
    expected_skill: str | None
    artifact: str | None
    """Worktree path of the document the phase produced (when it declares one)."""


@dataclass(frozen=True)
class PhasesOutcome:
    """The folded outcome of every phase, and each phase's record (empty for one-session arms)."""

    session: SessionResult
    phases: list[PhaseRecord]


def plan_phases(
    arm: ArmSpec, *, default_timeout_s: float, agent_skill: str | None
) -> list[PhasePlan]:
    """The sessions an arm runs, in order (one unnamed session when it declares no phases)."""
    agent_budget = getattr(arm.agent, "max_budget_usd", None)
    if not arm.phases:
        return [PhasePlan(None, "{task}", None, agent_skill, default_timeout_s, None)]
    return [
        PhasePlan(
            name=p.name,
            prompt_template=p.prompt,
            artifact=p.artifact,
            expected_skill=p.expected_skill if p.expected_skill is not None else agent_skill,
            timeout_s=float(p.timeout_s) if p.timeout_s else default_timeout_s,
            max_budget_usd=p.max_budget_usd if p.max_budget_usd is not None else agent_budget,
        )
        for p in arm.phases
    ]


def render_prompt(template: str, task_prompt: str, artifact: str | None) -> str:
    """Fill ``{task}`` and ``{artifact}`` in one pass (a task prompt's braces stay as written)."""
    out: list[str] = []
    i = 0
    while i < len(template):
        if template.startswith("{task}", i):
            out.append(task_prompt)
            i += len("{task}")
        elif template.startswith("{artifact}", i):
            out.append(artifact or "")
            i += len("{artifact}")
        else:
            out.append(template[i])
            i += 1
    return "".join(out)


def snapshot_glob(root: Path, pattern: str) -> dict[str, str]:
    """Worktree-relative regular files matching ``pattern`` → content digest (``.git`` skipped).

    Symlinks are never followed and never match: a phase cannot point its artifact elsewhere.
    """
    out: dict[str, str] = {}
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            seen += 1
            if seen > MAX_ARTIFACT_SCAN:
                return out
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if not fnmatch.fnmatchcase(rel, pattern) or path.is_symlink() or not path.is_file():
                continue
            out[rel] = sha256_file(path)
    return out


def produced(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files new or changed between two snapshots, sorted."""
    return sorted(rel for rel, digest in after.items() if before.get(rel) != digest)


def _sum_int(values: list[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _sum_float(values: list[float | None], digits: int) -> float | None:
    if any(v is None for v in values):
        return None
    return round(sum(v for v in values if v is not None), digits)


def sum_usage(usages: list[Usage]) -> Usage:
    """Usage of several sessions: sums, unknown if any session's value is unknown."""
    if len(usages) == 1:
        return usages[0]
    by_model: dict[str, ModelUsage] | None = None
    if all(u.by_model is not None for u in usages):
        by_model = {}
        for u in usages:
            for model, mu in (u.by_model or {}).items():
                prev = by_model.get(model)
                if prev is None:
                    by_model[model] = mu
                    continue
                by_model[model] = ModelUsage(
                    input_tokens=_sum_int([prev.input_tokens, mu.input_tokens]),
                    output_tokens=_sum_int([prev.output_tokens, mu.output_tokens]),
                    cache_read_input_tokens=_sum_int(
                        [prev.cache_read_input_tokens, mu.cache_read_input_tokens]
                    ),
                    cache_creation_input_tokens=_sum_int(
                        [prev.cache_creation_input_tokens, mu.cache_creation_input_tokens]
                    ),
                    cost_usd=_sum_float([prev.cost_usd, mu.cost_usd], 6),
                )
    return Usage(
        input_tokens=_sum_int([u.input_tokens for u in usages]),
        output_tokens=_sum_int([u.output_tokens for u in usages]),
        cache_read_input_tokens=_sum_int([u.cache_read_input_tokens for u in usages]),
        cache_creation_input_tokens=_sum_int([u.cache_creation_input_tokens for u in usages]),
        cost_usd=_sum_float([u.cost_usd for u in usages], 6),
        turns=_sum_int([u.turns for u in usages]),
        duration_s=_sum_float([u.duration_s for u in usages], 3),
        by_model=by_model,
    )


def _record(plan: PhasePlan, res: SessionResult, artifact: str | None) -> PhaseRecord:
    u = res.usage
    return PhaseRecord(
        name=plan.name or "session",
        ok=res.ok,
        error_kind=res.error_kind,
        error_detail=res.error_detail,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read_input_tokens=u.cache_read_input_tokens,
        cache_creation_input_tokens=u.cache_creation_input_tokens,
        cost_usd=u.cost_usd,
        turns=u.turns,
        agent_duration_s=u.duration_s,
        wall_s=round(res.wall_s, 3),
        session_ids=list(res.session_ids),
        expected_skill=plan.expected_skill,
        artifact=artifact,
    )


def run_phases(
    run_session: Callable[[SessionContext], SessionResult],
    base: SessionContext,
    plans: list[PhasePlan],
    task_prompt: str,
    *,
    skills_installed: bool,
) -> PhasesOutcome:
    """Run ``plans`` in order with ``run_session`` (an adapter's ``run``); see module docstring.

    ``skills_installed`` is false for a ``skills: none`` arm, which is never asked to prove a skill.
    """
    results: list[SessionResult] = []
    records: list[PhaseRecord] = []
    artifact: str | None = None
    kind: ErrorKind | None = None
    detail = ""
    for plan in plans:
        ctx = replace(
            base,
            prompt=render_prompt(plan.prompt_template, task_prompt, artifact),
            timeout_s=plan.timeout_s,
            expected_skill=plan.expected_skill if skills_installed else None,
            phase=plan.name,
            max_budget_usd=plan.max_budget_usd,
        )
        before = snapshot_glob(base.workdir, plan.artifact) if plan.artifact else {}
        res = run_session(ctx)
        produced_path: str | None = None
        if res.ok and plan.artifact:
            made = produced(before, snapshot_glob(base.workdir, plan.artifact))
            if len(made) == 1:
                produced_path = made[0]
            else:
                found = ", ".join(made[:5]) or "none"
                res = replace(
                    res,
                    ok=False,
                    error_kind=ErrorKind.PHASE_ARTIFACT_MISSING,
                    error_detail=f"phase {plan.name} must produce exactly one new or changed "
                    f"file matching {plan.artifact!r}; found {len(made)} ({found})",
                )
        results.append(res)
        if plan.name is not None:
            records.append(_record(plan, res, produced_path))
        if not res.ok:
            kind = res.error_kind or ErrorKind.SESSION_ERROR
            prefix = f"phase {plan.name}: " if plan.name and len(plans) > 1 else ""
            detail = prefix + res.error_detail if res.error_detail else ""
            break
        artifact = produced_path
    if len(results) == 1 and not records:
        return PhasesOutcome(session=results[0], phases=[])
    transcript = b"".join(r.transcript for r in results if r.transcript is not None)
    folded = SessionResult(
        ok=kind is None and len(results) == len(plans),
        usage=sum_usage([r.usage for r in results]),
        error_kind=kind,
        error_detail=detail if kind is not None else "",
        session_ids=tuple(s for r in results for s in r.session_ids),
        transcript=transcript if any(r.transcript is not None for r in results) else None,
        agent_version=next((r.agent_version for r in results if r.agent_version), None),
        wall_s=sum(r.wall_s for r in results),
    )
    return PhasesOutcome(session=folded, phases=records)
