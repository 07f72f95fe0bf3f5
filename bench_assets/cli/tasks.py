"""Commands on the benchmark definition and its inputs: validate, schema, pin, sync, inputs."""

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from bench_assets.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    artifact_store,
    fail,
    fail_step,
    json_option,
    only_tasks_option,
    open_instance,
    progress,
    selected_tasks,
    tasks_option,
)
from bench_assets.kernel.hashing import short
from bench_assets.tasks.catalog import collect_issues, load_benchmark


@click.command()
@click.argument("tasks_dir", default="tasks", type=click.Path(path_type=Path))
@json_option("Print {ok, errors: [{file, field, message}]}.")
def validate(tasks_dir: Path, as_json: bool) -> None:
    """Validate bench.yaml, every task and every candidate under TASKS_DIR (default: tasks).

    Reports every problem, one per line, as `file: field.path: what is wrong`, and exits 2 if
    there is any; exits 0 when everything is valid. Touches neither the network nor the Dagster
    instance.
    """
    issues, bench = collect_issues(tasks_dir)
    if as_json:
        click.echo(
            json.dumps({"ok": not issues, "errors": [i.as_dict() for i in issues]}, indent=2)
        )
    elif issues:
        for issue in issues:
            click.echo(str(issue), err=True)
        click.echo(f"{len(issues)} error(s) in {tasks_dir}", err=True)
    else:
        assert bench is not None
        click.echo(
            f"{tasks_dir}: ok — {len(bench.tasks)} task(s), {len(bench.config.arms)} arm(s), "
            f"{bench.config.runs} run(s) each, {len(bench.candidates)} queued candidate(s)"
        )
    sys.exit(EXIT_INVALID if issues else EXIT_OK)


@click.command()
@tasks_option
@click.option("--check", is_flag=True, help="Exit 1 if the shipped schema files are stale.")
def schema(tasks_dir: Path, check: bool) -> None:
    """Regenerate the JSON Schema files in TASKS/schema/ from the models (editor completion).

    With --check, write nothing: exit 1 naming the stale files, 0 when they are up to date.
    """
    from bench_assets.config import schema as schema_mod

    target = tasks_dir / "schema"
    if check:
        stale = schema_mod.stale(target)
        if stale:
            fail(
                f"stale schema files in {target}: {', '.join(stale)}; run `wfbench schema`",
                EXIT_FAILED,
            )
        click.echo(f"{target}: up to date")
        return
    for path in schema_mod.write(target):
        click.echo(f"wrote {path}")


@click.command()
@tasks_option
@only_tasks_option("Only pin this task (repeatable).")
def pin(tasks_dir: Path, only: tuple[str, ...]) -> None:
    """Write tasks/bindings.lock: bind tasks now and hold those bindings fixed.

    A pinned task keeps its commit even if its ref moves; any later change to its prompt, setup,
    verify, task file or oracle is refused before paid work ("task binding drifted"). Delete the
    entry (or re-run pin) to accept a change.
    """
    from bench_assets.inputs import binding as binding_mod
    from bench_assets.inputs import oracle as oracle_mod

    bench = load_benchmark(tasks_dir)
    artifacts = artifact_store()
    pins = binding_mod.read_pins(bench)
    for task_id in selected_tasks(bench, only):
        task = bench.task(task_id)
        snapshot, _ = oracle_mod.capture(task, bench.config.limits)
        # Bound without the old pin, so that re-pinning accepts the current definition.
        pins[task_id] = binding_mod.bind(task, snapshot, artifacts)
        click.echo(f"pinned {task_id} at {pins[task_id].resolved_sha}")
    click.echo(f"wrote {binding_mod.write_pins(bench, pins)}")


@click.command()
@tasks_option
@json_option("Print the changes as JSON.")
def sync(tasks_dir: Path, as_json: bool) -> None:
    """Make the Dagster `tasks` partitions equal to the task folders; apply pool limits.

    Refuses (exit 2, nothing changed) while any benchmark file is invalid. Partitions of removed
    tasks are deleted; their history stays in the event log. The pool limits (agent sessions,
    graph builds) come from bench.yaml `limits`.
    """
    from bench_assets.driver.instance import sync_instance

    bench = load_benchmark(tasks_dir)
    plan, limits = sync_instance(open_instance(), bench)
    body = {"added": plan.add, "deleted": plan.delete, "tasks": bench.task_ids(), "pools": limits}
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(
        f"task partitions: {len(bench.tasks)} ({len(plan.add)} added, {len(plan.delete)} deleted)"
    )
    for name in plan.add:
        click.echo(f"  + {name}")
    for name in plan.delete:
        click.echo(f"  - {name}")
    click.echo("pools: " + ", ".join(f"{k}={v}" for k, v in limits.items()))


@click.command()
@tasks_option
@only_tasks_option()
@json_option("Print the per-task table as JSON.")
def inputs(tasks_dir: Path, only: tuple[str, ...], as_json: bool) -> None:
    """Materialize the input assets of every task and print what they hold.

    Runs `incumbent_skills`, then `task_bindings`, `oracle_snapshots`, `sanitized_graphs` and
    `task_environments` (a task's declared packages, built once from the package index) for each
    task partition against the instance, and prints binding SHA, oracle digest, sanitized SHA and
    graph size per task. Unchanged inputs keep their data versions, which leaves every cell
    downstream of them fresh.
    """
    from bench_assets.driver.inputs import materialize_inputs
    from bench_assets.driver.instance import StepFailed, sync_instance

    bench = load_benchmark(tasks_dir)
    task_ids = selected_tasks(bench, only)
    instance = open_instance()
    sync_instance(instance, bench)
    start = time.monotonic()
    try:
        out = materialize_inputs(
            instance,
            task_ids,
            tasks_dir=str(bench.root),
            artifact_root=str(artifact_store().root),
            progress=progress,
        )
    except StepFailed as e:
        fail_step(e)
    rows = [_input_row(task_id, out[task_id]) for task_id in task_ids]
    skills = out[""]["incumbent_skills"]
    versions = [md for task_md in out.values() for md in task_md.values()]
    changed = sum(1 for md in versions if _changed(md))
    if as_json:
        click.echo(json.dumps({"skills_digest": skills.get("digest"), "tasks": rows}, indent=2))
        return
    header = (
        f"{'task':<28} {'binding sha':<14} {'oracle':<14} {'sanitized sha':<14} "
        f"{'nodes':>6} {'edges':>6}"
    )
    click.echo(header)
    click.echo("-" * len(header))
    for r in rows:
        click.echo(
            f"{r['task']:<28} {short(str(r['binding_sha'])):<14} "
            f"{short(str(r['oracle_digest'])):<14} "
            f"{short(str(r['sanitized_sha'])):<14} {r['graph_nodes']!s:>6} {r['graph_edges']!s:>6}"
        )
    click.echo(
        f"incumbent skills {short(str(skills.get('digest')))} ({skills.get('file_count')} files); "
        f"{len(rows)} task(s) in {time.monotonic() - start:.1f} s"
    )
    click.echo(
        f"data versions: {len(versions) - changed} unchanged, {changed} new or changed "
        "(an unchanged input leaves everything downstream fresh)"
    )


def _changed(md: dict[str, object]) -> bool:
    """The materialization produced a new data version (or the asset's first one)."""
    return md.get("previous_data_version") != md.get("data_version")


def _input_row(task_id: str, assets: dict[str, dict[str, object]]) -> dict[str, Any]:
    """One task's input assets as a ``wfbench inputs`` row (also its ``--json`` object)."""
    b, o, g = assets["task_bindings"], assets["oracle_snapshots"], assets["sanitized_graphs"]
    return {
        "task": task_id,
        "binding_sha": b.get("resolved_sha"),
        "binding_version": b.get("data_version"),
        "oracle_digest": o.get("digest"),
        "sanitized_sha": g.get("sanitized_sha"),
        "graph_nodes": g.get("graph_nodes"),
        "graph_edges": g.get("graph_edges"),
        "graph_version": g.get("data_version"),
        "environment": assets.get("task_environments", {}).get("environment"),
        "data_versions_changed": [k for k, md in assets.items() if _changed(md)],
    }
