"""Paying a generation's cells: submit the unpaid ones of a plan, watch each end, retry, stop.

:class:`CellPayer` is shared by the generation's first pass (:mod:`bench_assets.driver.evolve`:
inputs, then each task's planned cells as its inputs are ready) and its sequential looks
(:mod:`bench_assets.driver.looks`: top-up and re-paid comparator cells). Per cell that ends it
records a summary, re-pays a systemic failure up to ``policy.retries`` times, feeds the outage
breaker and the spend cap, and cancels everything queued or running when either trips.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets.cells.cellkeys import parse_cell_key
from bench_assets.decision.documents import load_cell
from bench_assets.decision.manifest import ManifestCell, accept
from bench_assets.defs.resources import latest_metadata
from bench_assets.driver.cellbatch import batch_job, cell_groups
from bench_assets.driver.inputs import run_pool_granularity
from bench_assets.driver.runqueue import Executor
from bench_assets.driver.runs import Finished, Job
from bench_assets.driver.transaction import GEN_TAG, candidates, orphan_record, paid_attempts
from bench_assets.generation.progress import GenerationTally
from bench_assets.generation.queue import OutageBreaker, SpendCap
from bench_assets.kernel.errorkinds import ErrorKind, is_systemic
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark

POLL_S = 1.0
LOOK_TAG = "wfbench/look"
"""Run tag of a cell planned by a sequential look (``ManifestCell.look``, 2 for the first)."""


def cell_summary(
    instance: dg.DagsterInstance, job: Job, run_id: str, failure: Any
) -> dict[str, Any]:
    """What a paid cell ended as (a failed run is an infra error of that cell)."""
    task, cell = job.label.split(" ", 1)
    if failure is not None:
        return {
            "task": task,
            "cell": cell,
            "run_id": run_id or None,
            "resolved": False,
            "error_kind": ErrorKind.INFRA_ERROR.value,
            "error_detail": str(failure),
            "cost_usd": None,
        }
    asset = job.assets[0]
    key = str(dg.MultiPartitionKey({"task": task, "cell": cell}))
    view = load_cell(task, cell, asset, latest_metadata(instance, asset, key))
    record = view.record if view else None
    return {
        "task": task,
        "cell": cell,
        "run_id": run_id or (view.run_id if view else None),
        "resolved": bool(record and record.resolved),
        "error_kind": record.error_kind.value if record and record.error_kind else None,
        "error_detail": record.error_detail if record else "record missing after the run",
        "cost_usd": record.spend_usd if record else None,  # agent + judge (skill-eval)
    }


def session_budget(bench: Benchmark, cell: str) -> float | None:
    """The cell's arm's per-session budget: what a cell of unknown cost may have spent at most."""
    arm, _ = parse_cell_key(cell)
    spec = bench.config.arms.get(arm)
    budget = getattr(spec.agent, "max_budget_usd", None) if spec else None
    if spec is not None and spec.phases:  # one session per phase, each with its own cap
        caps = [p.max_budget_usd if p.max_budget_usd is not None else budget for p in spec.phases]
        return None if any(c is None for c in caps) else float(sum(c for c in caps if c))
    return float(budget) if budget is not None else None


@dataclass
class CellPayer:
    """Submits a generation's unpaid cells and observes every one that ends."""

    ex: Executor
    bench: Benchmark
    instance: dg.DagsterInstance
    generation: str
    artifact_root: str
    progress: Callable[[str], None]
    tally: GenerationTally
    cells: list[dict[str, Any]] = field(default_factory=list)
    """One summary per paid cell (:func:`cell_summary`), in the order they ended."""
    submitted: int = 0
    tries: dict[str, int] = field(default_factory=dict)
    breaker: OutageBreaker = field(init=False)
    spend: SpendCap = field(init=False)

    def __post_init__(self) -> None:
        self.breaker = OutageBreaker(self.bench.config.limits.outage_streak)
        self.spend = SpendCap(self.bench.config.limits.max_spend_usd)

    @property
    def stopped(self) -> bool:
        """The outage breaker or the spend cap tripped: nothing more is paid."""
        return self.breaker.tripped or self.spend.tripped

    def stop_reason(self) -> str:
        """Why no further cell was scheduled (empty when nothing tripped)."""
        if self.breaker.tripped:
            return (
                f"outage breaker tripped after {self.breaker.streak} consecutive systemic "
                f"failures ({', '.join(self.breaker.trip_kinds)})"
            )
        return self.spend.reason if self.spend.tripped else ""

    def submit_planned(self, planned: list[ManifestCell]) -> int:
        """Submit every ``run`` cell of ``planned`` not already paid in this generation (verified
        like the decision verifies it); returns how many were submitted. A cell planned by a
        sequential look is tagged with it (:data:`LOOK_TAG`).

        A cell already paid whose evidence is a systemic failure (infra, session, cleanup: what
        :meth:`finished` re-pays) is paid again while its retries last, counted from the
        sessions it paid in this generation (:func:`paid_attempts`): a resumed generation
        re-pays what the killed one would have, and no more."""
        n = 0
        jobs: dict[str, list[Job]] = {}
        artifacts = ArtifactStore(Path(self.artifact_root))
        retries = self.bench.config.policy.retries
        for mc in planned:
            if mc.action != "run":
                continue
            label = f"{mc.task} {mc.cell}"
            known = candidates(self.instance, mc)
            paid, _ = accept(mc, self.generation, known)
            kind = paid.record.error_kind if paid is not None else None
            if paid is not None and (self.stopped or not is_systemic(kind)):
                self.progress(f"  {label}: already paid in {self.generation} (run {paid.run_id})")
                continue
            if paid is not None:  # a systemic failure: its retries survive the interruption
                used = max(paid_attempts(artifacts, mc, self.generation) - 1, 0)
                self.tries[label] = max(self.tries.get(label, 0), used)
            config: dict[str, Any] = {
                "force": mc.kind in ("canary", "drift") or paid is not None,
                "generation": self.generation,
            }
            orphan = orphan_record(artifacts, mc, self.generation, known)
            if orphan:
                self.progress(f"  {label}: adopting record {orphan} (paid before the interruption)")
                config["adopt_record_id"] = orphan
            elif paid is not None:
                if self.tries[label] >= retries:
                    self.progress(
                        f"  {label}: {kind} in {self.generation}; its {retries} retries are used"
                    )
                    continue
                self.tries[label] += 1
                self.tally.retry_planned()
                self.progress(
                    f"  {label}: {kind} before the interruption; retry {self.tries[label]} "
                    f"of {retries}"
                )
            tags = {
                GEN_TAG: self.generation,
                "dagster/partition/task": mc.task,
                "dagster/partition/cell": mc.cell,
            }
            if mc.look > 1:
                tags[LOOK_TAG] = str(mc.look)
            jobs.setdefault(mc.task, []).append(
                Job(
                    (mc.asset,),
                    str(dg.MultiPartitionKey({"task": mc.task, "cell": mc.cell})),
                    op_config={mc.asset: config},
                    tags=tags,
                    label=label,
                )
            )
            n += 1
        self._submit_cells(jobs)
        self.submitted += n
        return n

    def _submit_cells(self, jobs: dict[str, list[Job]]) -> None:
        """Submit each task's cell jobs, several cells of a task in one ``cell_batch`` run
        (:func:`~bench_assets.driver.cellbatch.cell_groups`) when the pools apply per run;
        under op granularity a batch's per-cell runs would each wait for a second slot of the
        pool the batch holds, so every cell is its own run there."""
        batched = run_pool_granularity(self.instance)
        slots = self.bench.config.limits.agent_sessions
        for task_jobs in jobs.values():
            groups = cell_groups(task_jobs, slots=slots) if batched else [[j] for j in task_jobs]
            for group in groups:
                self.ex.submit(group[0] if len(group) == 1 else batch_job(group))

    def finished(self, done: Finished) -> None:
        """One cell run ended: record it, retry a systemic failure, watch breaker and spend."""
        if done.canceled:
            return
        summary = cell_summary(self.instance, done.job, done.run_id, done.failure)
        self.cells.append(summary)
        verdict = "resolved" if summary["resolved"] else str(summary["error_kind"] or "unresolved")
        if self._retry(done.job, summary):
            # Not a cell done: the same cell is paid again (the tally counts it as a retry).
            self.submitted += 1
            self.tally.retried(cost_usd=summary["cost_usd"])
            verdict += f"; retry {self.tries[done.job.label]} of {self.bench.config.policy.retries}"
        else:
            self.tally.cell_done(
                resolved=summary["resolved"],
                error_kind=summary["error_kind"],
                cost_usd=summary["cost_usd"],
            )
        label = f"[{self.tally.done}/{self.tally.total}] {done.job.label}"
        self.progress(f"  {label}: {verdict} ({self.tally.brief()})")
        kind = summary["error_kind"]
        self.breaker.observe(ErrorKind(kind) if kind else None)
        self.spend.observe(
            done.job.label, summary["cost_usd"], session_budget(self.bench, summary["cell"])
        )
        if self.stopped and self.ex.pending():
            canceled = self.ex.cancel_all()
            self.progress(f"canceled {len(canceled)} queued or running cell(s)")

    def drain(self) -> None:
        """Wait for every submitted cell to end."""
        while self.ex.pending():
            for done in self.ex.poll(POLL_S):
                self.finished(done)

    def _retry(self, job: Job, summary: dict[str, Any]) -> bool:
        """Re-pay a cell that ended with a systemic (excluded) error, up to ``policy.retries``
        times within the generation, so one infrastructure hiccup does not end the candidate as
        insufficient evidence (issue 13, E4). The newest record of the generation is the
        evidence."""
        kind = summary["error_kind"]
        if self.stopped or kind is None or not is_systemic(ErrorKind(kind)):
            return False
        if self.tries.get(job.label, 0) >= self.bench.config.policy.retries:
            return False
        self.tries[job.label] = self.tries.get(job.label, 0) + 1
        # A retry pays a new session (``force``: the failed record is never "reused"), and never
        # re-adopts the record a resumed attempt left behind.
        config = {
            a: {**{k: v for k, v in c.items() if k != "adopt_record_id"}, "force": True}
            for a, c in job.op_config.items()
        }
        self.ex.submit(dataclasses.replace(job, op_config=config))
        return True
