"""The generation planner: for every cell, ``run`` or ``reuse``, and exactly why.

The README section "Generations, reuse and the gate" gives the user's view of the same rules.

Pure: it compares each cell's identity now (:func:`bench_assets.cells.pipeline.cell_identity`) with
the identity stored in its latest record, and names what changed:

* ``missing`` — the cell was never recorded;
* ``excluded`` — the previous record's error kind is excluded (session/infra/…); valid negatives
  such as ``oracle-failed`` *are* reused;
* ``expired`` — older than ``reuse.max_age_days``;
* ``code`` — model, effort, arm config, agent identity (CLI version), sandbox backend, harness
  version, grader or resources changed (the field is named);
* ``upstream`` — a binding field (e.g. ``binding.prompt_digest``), the oracle, graph, incumbent
  skills or overlay changed (named);
* ``candidate`` — candidate cells always run for a new overlay;
* ``canary`` — reusable comparator cells paid anyway, rotated deterministically by generation
  number: ``reuse.gate_canaries_per_task`` per task of every comparator arm a candidate is gated
  against (``pairs_with``), the fresh evidence the gate's drift estimate compares the reused cells
  with (:func:`choose_gate_canaries`), and ``reuse.canaries`` per other comparator arm, to
  measure current health and a noise floor (:func:`choose_canaries`).
"""

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.cells.cellkeys import cell_key, identity_digest
from bench_assets.decision.documents import CellView
from bench_assets.kernel.errorkinds import ErrorKind, is_reusable

CODE_FIELDS = {
    "harness_version": "harness version",
    "grader": "grader",
    "arm": "arm config",
    "agent": "agent",
    "model": "model",
    "effort": "effort",
    "sandbox_backend": "sandbox backend",
    "resources": "resources",
    "skills_install_path": "skills install path",
    "graph_path": "graph path",
    "run": "run index",
}
UPSTREAM_FIELDS = {
    "binding": "binding",
    "oracle": "oracle digest",
    "graph": "graph",
    "sanitized_sha": "sanitized template",
    "skills": "incumbent skills",
    "overlay": "overlay",
}


PlanKind = Literal[
    "missing", "excluded", "expired", "code", "upstream", "candidate", "canary", "reusable", "drift"
]
"""Why a cell is paid or reused (``drift``: re-paid after comparator drift, driver/looks.py)."""


class PriorCell(BaseModel):
    """What the planner needs from a cell's latest record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    identity: dict[str, Any]
    identity_digest: str
    error_kind: ErrorKind | None
    recorded_at: datetime
    generation: str | None
    run_id: str | None = None
    data_version: str | None = None

    @classmethod
    def from_view(cls, view: CellView) -> "PriorCell":
        """What the planner needs from a partition's latest materialization and record."""
        return cls(
            identity=view.record.identity,
            identity_digest=view.materialization.identity_digest,
            error_kind=view.record.error_kind,
            recorded_at=datetime.fromisoformat(view.record.recorded_at),
            generation=view.record.generation,
            run_id=view.run_id,
            data_version=view.data_version or view.record.data_version,
        )


class PlannedCell(BaseModel):
    """One cell of a generation and the planner's verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    arm: str
    run: int
    cell: str
    role: Literal["comparator", "candidate"]
    action: Literal["run", "reuse"]
    reason: str
    kind: PlanKind
    changed: list[str]
    prior_generation: str | None
    prior_run_id: str | None
    identity_digest: str | None
    """The identity the cell has now: what its evidence must have been made for. None only in a
    plan that did not compute it (``wfbench plan`` for a task whose inputs were never built and
    none of whose cells has a record: such a cell runs whatever its identity); a generation
    always computes it."""


def identity_diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of every leaf that differs between two identities (sorted)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        path = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += identity_diff(a, b, path + ".")
        elif a != b:
            out.append(path)
    return out


def _describe(changed: list[str]) -> tuple[Literal["code", "upstream"], str]:
    code = [c for c in changed if c.split(".")[0] in CODE_FIELDS]
    upstream = [c for c in changed if c not in code]
    if code:
        return "code", "code identity changed: " + ", ".join(code)
    return "upstream", "upstream changed: " + ", ".join(upstream)


def _cli_move(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``"Claude Code CLI 2.1.197 → 2.1.332 (agents.claude_code.version): "`` when the cell's
    pinned CLI release moved (a deliberate upgrade re-pays the cells made with the old one)."""
    a, b = old.get("agent"), new.get("agent")
    if (
        not isinstance(a, Mapping)
        or not isinstance(b, Mapping)
        or b.get("adapter") != "claude-code"
    ):
        return ""
    if a.get("version") == b.get("version"):
        return ""
    return f"Claude Code CLI {a.get('version')} → {b.get('version')} (agents.claude_code.version): "


def generation_number(generation: str) -> int:
    """The number in a generation id (``g0007`` → 7); 0 when there is none."""
    digits = "".join(ch for ch in generation if ch.isdigit())
    return int(digits) if digits else 0


def choose_canaries(
    tasks: list[str],
    comparator_arms: list[str],
    runs: int,
    generation: str,
    canaries: int,
    applies: Mapping[str, Collection[str]] | None = None,
) -> set[tuple[str, str, int]]:
    """``canaries`` cells per comparator arm for this generation, rotated by its number.

    Chosen over the whole generation (every task × run of the arm), so the choice does not
    depend on the order in which tasks become ready; a chosen cell that must run anyway is
    simply fresh already. ``applies`` (task → the arms that run on it,
    :meth:`~bench_assets.tasks.catalog.Benchmark.arms_for`) keeps a canary off a task where its arm
    has no cell (a review arm's canary on an implementation task would be lost).
    """
    chosen: set[tuple[str, str, int]] = set()
    n = generation_number(generation)
    for arm in sorted(comparator_arms):
        cells = [
            (t, arm, r)
            for t in sorted(tasks)
            if applies is None or arm in applies.get(t, ())
            for r in range(runs)
        ]
        if not cells:
            continue
        for j in range(min(canaries, len(cells))):
            chosen.add(cells[(n * canaries + j) % len(cells)])
    return chosen


def choose_gate_canaries(
    applies: Mapping[str, Collection[str]],
    gated_arms: Collection[str],
    runs: int,
    generation: str,
    per_task: int,
) -> set[tuple[str, str, int]]:
    """``per_task`` cells of every gated comparator arm on every task it applies to.

    ``applies`` maps each task of the generation to the arms that run on it; ``gated_arms`` are
    the comparator arms a candidate is judged against (its ``pairs_with``). The gate estimates the
    drift of reused comparator evidence per task from tasks with both fresh and reused runs, so
    every task gets fresh ones. Runs ``(n·per_task + j) mod runs`` for ``j < per_task`` (``n`` the
    generation number): distinct within a generation, and every run index is refreshed over
    ``⌈runs / per_task⌉`` generations. Each task's choice depends on that task alone, so it is
    independent of readiness order and linear in the tasks.
    """
    n = generation_number(generation)
    picks = {(n * per_task + j) % runs for j in range(min(per_task, runs))} if runs else set()
    return {
        (task, arm, r)
        for task, arms in applies.items()
        for arm in gated_arms
        if arm in arms
        for r in picks
    }


class Verdict(BaseModel):
    """Whether one cell is paid for or reused, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: PlanKind
    reason: str
    changed: list[str] = []

    @property
    def reuse(self) -> bool:
        """The previous record is the evidence; no session runs."""
        return self.kind == "reusable"


def unrecorded_verdict(role: Literal["comparator", "candidate"]) -> Verdict:
    """The verdict of a cell with no previous record, whatever its identity: it runs."""
    if role == "candidate":
        return Verdict(kind="candidate", reason="candidate cell: always paid for a new overlay")
    return Verdict(kind="missing", reason="no previous record")


def reuse_verdict(
    before: PriorCell | None,
    ident: Mapping[str, Any],
    role: Literal["comparator", "candidate"],
    *,
    arm: str,
    canary: bool,
    max_age_days: int,
    now: datetime,
    digest: str | None = None,
    gate_canary: bool = False,
) -> Verdict:
    """The one reuse policy: the planner and the cell assets both ask it.

    A record is reusable only when it exists, its error kind is reusable (a valid negative such as
    ``oracle-failed`` is; an infra or session error never is), it is younger than
    ``max_age_days`` and it was made for exactly this identity. A reusable comparator cell chosen
    as a canary is paid anyway (``gate_canary``: as the gate's fresh drift evidence).
    ``digest``: ``identity_digest(ident)`` when the caller has it.
    """
    if before is None:
        return unrecorded_verdict(role)
    digest = digest or identity_digest(dict(ident))
    if role == "candidate" and before.identity_digest != digest:
        return unrecorded_verdict(role)
    if not is_reusable(before.error_kind):
        kind = before.error_kind.value if before.error_kind else "?"
        return Verdict(kind="excluded", reason=f"previous record is excluded ({kind})")
    if now - before.recorded_at > timedelta(days=max_age_days):
        return Verdict(kind="expired", reason=f"previous record is older than {max_age_days} days")
    since = (
        f"generation {before.generation}"
        if before.generation
        else "a materialization outside any generation"
    )
    if before.identity_digest != digest:
        changed = identity_diff(before.identity, ident)
        kind, reason = _describe(changed)
        return Verdict(
            kind=kind, reason=_cli_move(before.identity, ident) + reason, changed=changed
        )
    if role == "candidate":
        return Verdict(kind="reusable", reason="unchanged candidate cell (same overlay)")
    if gate_canary:
        return Verdict(
            kind="canary",
            reason=f"gate canary for arm {arm}: reusable from {since}, paid fresh as the "
            "evidence the gate's drift estimate compares the reused comparator cells with",
        )
    if canary:
        return Verdict(
            kind="canary",
            reason=f"canary for arm {arm}: reusable from {since}, "
            "paid fresh to measure current health and the noise floor",
        )
    return Verdict(kind="reusable", reason=f"unchanged since {since}")


def plan_generation(
    *,
    current: Mapping[tuple[str, str, int], dict[str, Any] | None],
    prior: Mapping[tuple[str, str, int], PriorCell | None],
    roles: Mapping[str, Literal["comparator", "candidate"]],
    canary_cells: Collection[tuple[str, str, int]],
    max_age_days: int,
    now: datetime,
    gate_canary_cells: Collection[tuple[str, str, int]] = frozenset(),
) -> list[PlannedCell]:
    """Plan every cell (keys are (task, arm, run)) with :func:`reuse_verdict`.

    A cell whose identity is ``None`` (not computed) must have no record: it runs
    (:func:`unrecorded_verdict`); one with a record raises ``ValueError``, since reuse can only
    be judged against the identity the cell has now.
    """
    planned: list[PlannedCell] = []
    for key in sorted(current):
        task, arm, run = key
        before = prior.get(key)
        ident = current[key]
        digest: str | None = None
        if ident is None:
            if before is not None:
                raise ValueError(f"cell {key} has a record but no identity to compare it with")
            v = unrecorded_verdict(roles[arm])
        else:
            digest = identity_digest(dict(ident))
            v = reuse_verdict(
                before,
                ident,
                roles[arm],
                arm=arm,
                canary=key in canary_cells,
                max_age_days=max_age_days,
                now=now,
                digest=digest,
                gate_canary=key in gate_canary_cells,
            )
        planned.append(
            PlannedCell(
                task=task,
                arm=arm,
                run=run,
                cell=cell_key(arm, run),
                role=roles[arm],
                action="reuse" if v.reuse else "run",
                reason=v.reason,
                kind=v.kind,
                changed=v.changed,
                prior_generation=before.generation if before else None,
                prior_run_id=before.run_id if before else None,
                identity_digest=digest,
            )
        )
    return planned


def summary(plan: list[PlannedCell]) -> dict[str, int]:
    """Counts by action and kind."""
    out: dict[str, int] = {"run": 0, "reuse": 0}
    for c in plan:
        out[c.action] += 1
        out[c.kind] = out.get(c.kind, 0) + 1
    return out
