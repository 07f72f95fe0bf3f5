"""Commands on generations of candidates: evolve, plan, apply."""

import json
import sys
import time
from pathlib import Path

import click

from bench_assets.cli.common import (
    EXIT_FAILED,
    artifact_store,
    fail_step,
    json_option,
    open_instance,
    progress,
    tasks_option,
)
from bench_assets.kernel.gcpause import gc_paused
from bench_assets.kernel.hashing import short
from bench_assets.tasks.catalog import load_benchmark

include_expensive_option = click.option(
    "--include-expensive",
    is_flag=True,
    help="Plan tasks marked `expensive: true` in their task.yaml too. Without it they are left "
    "out (said on stderr), as in the weekly scheduled run, and the decision rests on the others.",
)


@click.command()
@tasks_option
@json_option("Print generation, candidate, decision, paid_cells, reused_cells, aborted.")
@click.option(
    "--in-process",
    is_flag=True,
    envvar="WFBENCH_IN_PROCESS",
    help="Materialize inputs and cells in this process, one after another, instead of "
    "submitting runs to the instance's queue (debugging; no pools, no overlap).",
)
@click.option(
    "--workspace",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Workspace file naming the code location runs go to (e.g. a gRPC code server of a "
    "deployment). Default: the bench_assets.definitions module, loaded locally.",
)
@include_expensive_option
def evolve(
    tasks_dir: Path,
    as_json: bool,
    in_process: bool,
    workspace: Path | None,
    include_expensive: bool,
) -> None:
    """Run one generation now: plan, pay through the run queue, decide, report.

    Takes the next unevaluated candidate from the queue and pays only for the cells the planner
    says must run (plus canaries): each task's inputs and each such cell is a Dagster run
    submitted to the instance's run coordinator (tagged wfbench/generation, so the UI shows them
    live; the agent_sessions and graph_build pools bound concurrency with every other launch).
    When no dagster-daemon is running, one is started for the generation's duration. Then it
    aggregates, decides, reports and appends to the ledger. Exit 0 when done (whatever the
    decision), 1 when the outage breaker or the spend cap (limits.max_spend_usd) stopped it or
    the incumbent arm was unusable, 2 for invalid input. `wfbench plan` shows beforehand which
    cells would run and why. Tasks marked `expensive: true` are neither planned nor paid (nor
    decided on) unless --include-expensive is given; the weekly scheduled run leaves them out.

    Progress goes to stderr: on a terminal, a live line with cells done/total (the total is
    every cell, fixed up front; reused cells count as done when their task is planned), resolved,
    failed and reused counts, spend so far and an ETA; with --json, or when stderr is not a
    terminal, plain lines carrying the same counts.
    """
    from bench_assets.driver.evolve import NothingToEvaluate
    from bench_assets.driver.evolve import evolve as run_generation
    from bench_assets.driver.instance import StepFailed
    from bench_assets.generation.progress import LiveProgress
    from bench_assets.generation.queue import writer_lock

    start = time.monotonic()
    store = artifact_store()
    try:
        # The writer lock first: a second evolve must not even open (or create) the instance.
        with writer_lock(store.writer_lock(), "wfbench evolve"):
            open_instance()
            with LiveProgress(plain=as_json, tally=None) as live:
                res = run_generation(
                    str(tasks_dir),
                    artifact_root=str(store.root),
                    progress=live.message,
                    in_process=in_process,
                    workspace=workspace,
                    tally=live.tally,
                    include_expensive=include_expensive,
                )
    except NothingToEvaluate as e:
        if as_json:
            click.echo(json.dumps({"generation": None, "decision": None, "reason": str(e)}))
        else:
            click.echo(f"nothing to evaluate: {e}")
        return
    except StepFailed as e:
        fail_step(e)
    body = {
        "generation": res.generation,
        "candidate": res.candidate,
        "decision": res.decision,
        "paid_cells": res.paid_cells,
        "reused_cells": res.reused_cells,
        "aborted": res.aborted,
        "stop_reason": res.stop_reason or None,
        "unusable_incumbent": res.unusable or None,
        "applied": res.applied,
        "report": res.report,
        "wall_s": round(time.monotonic() - start, 1),
    }
    if as_json:
        click.echo(json.dumps(body, indent=2))
    else:
        click.echo(
            f"generation {res.generation}: {res.decision} for candidate {res.candidate} "
            f"({res.paid_cells} cells paid, {res.reused_cells} reused, {body['wall_s']} s)"
        )
        click.echo(f"report: {res.report}")
        if res.aborted:
            click.echo(f"ABORTED: {res.stop_reason}; the decision cannot promote")
        if res.unusable:
            click.echo(f"FAILED: {res.unusable}")
    if res.aborted or res.unusable:
        sys.exit(EXIT_FAILED)


@click.command()
@tasks_option
@click.option("--explain", "explain_all", is_flag=True, help="Print the reason for every cell.")
@json_option("Print a list of {task, arm, run, action, reason} objects.")
@include_expensive_option
@gc_paused(until_exit=True)
def plan(tasks_dir: Path, explain_all: bool, as_json: bool, include_expensive: bool) -> None:
    """Plan the next generation as `wfbench evolve` would: which cells run, which are reused, why.

    Reasons: missing, excluded (previous error kind), expired, code identity changed (field
    named), upstream changed (binding field, oracle, graph, skills or overlay named), candidate,
    canary (reuse.gate_canaries_per_task fresh cells per task of each arm a candidate is gated
    against, reuse.canaries of each other comparator arm). This is the first pass only: the
    gate's looks may add top-up candidate cells or re-pay drifted comparator cells (kind drift)
    after it, see the README's "Looks before the decision". Reads each task's inputs from the
    input assets' latest materializations and changes nothing: a task never materialized, or
    whose task file or oracle changed since, has its inputs built directly (said on stderr); run
    `wfbench inputs` after editing a task's repo/.
    With an empty candidate queue, plans the comparator cells only. Tasks marked
    `expensive: true` are left out unless --include-expensive is given, as in `wfbench evolve`.
    """
    import datetime as dt

    from bench_assets.driver.plan import (
        NothingToEvaluate,
        choose,
        generation_tasks,
        history,
        plan_cells,
    )
    from bench_assets.generation.planner import summary
    from bench_assets.generation.queue import next_generation

    bench = load_benchmark(tasks_dir)
    instance = open_instance()
    artifacts = artifact_store()
    candidate: str | None
    try:
        generation, candidate = choose(bench, instance, artifacts)
    except NothingToEvaluate as e:
        generation, candidate = next_generation(history(instance, artifacts)[0]), None
        click.echo(f"note: {e}; planning comparator cells only", err=True)
    roles = {n: a.role for n, a in bench.config.arms.items()}
    tasks = generation_tasks(bench, include_expensive=include_expensive)
    left_out = sorted(set(bench.task_ids()) - set(tasks))
    if left_out:
        progress(f"leaving out expensive task(s) {', '.join(left_out)} (--include-expensive)")
    cells_plan = plan_cells(
        bench,
        instance,
        artifacts,
        generation=generation,
        candidate=candidate,
        arms=[a for a in bench.config.arms if candidate or roles[a] == "comparator"],
        now=dt.datetime.now(dt.UTC),
        progress=progress,
        tasks=tasks,
    )
    if as_json:
        fields = ("task", "arm", "run", "action", "reason", "kind", "changed")
        click.echo(json.dumps([{f: getattr(c, f) for f in fields} for c in cells_plan], indent=2))
        return
    counts = summary(cells_plan)
    click.echo(
        f"generation {generation} (candidate {candidate}): {counts['run']} cell(s) to run, "
        f"{counts['reuse']} reused"
    )
    for c in cells_plan:
        if explain_all or c.action == "run":
            click.echo(f"  {c.action:<5} {c.task:<22} {c.cell:<24} {c.reason}")
    if not explain_all:
        click.echo("(use --explain for the reason of every reused cell too)")
    from bench_assets.driver.plan import power_lines

    for line in power_lines(bench, cells_plan, tasks):
        click.echo(line)


@click.command(name="apply")
@click.option(
    "--generation", default="", help="Apply this generation's decision (default: latest)."
)
def apply_cmd(generation: str) -> None:
    """Replace the incumbent skill files with a generation's promoted overlay, atomically.

    Applies the latest decision in the ledger (of generation G with --generation G). Refuses
    (exit 2), writing nothing, unless it is a finished generation's `promote`: an ad-hoc decision
    (`wfbench decide` without --generation) is never applied — run `wfbench evolve` to get a
    generation's; its decision document must be the one the ledger recorded, every evidence cell
    must verify against the generation's manifest (never another candidate's cell), and every
    target file must be exactly as it was when the decision was made (compare-and-swap on the
    recorded digests). Any failure midway restores every file (exit 1). The application is
    recorded in the ledger.
    """
    from bench_assets.driver.instance import apply_latest
    from bench_assets.generation.queue import writer_lock

    open_instance()  # resolves $DAGSTER_HOME, where the default artifact root is
    store = artifact_store()
    with writer_lock(store.writer_lock(), "wfbench apply"):
        result = apply_latest(str(store.root), generation)
    for f in result.files:
        verb = "added" if f.old_sha256 is None else "replaced"
        click.echo(f"{verb} {f.path} ({short(str(f.old_sha256))} -> {short(f.new_sha256)})")
    click.echo(f"ledger entry #{result.ledger_seq}")
