"""Commands on cells (task × arm × run): cells, grade, try."""

import json
from pathlib import Path
from typing import Any

import click

from bench_assets.cli.common import (
    EXIT_INVALID,
    artifact_store,
    cell_row,
    fail,
    fail_step,
    json_option,
    only_tasks_option,
    open_instance,
    print_cells,
    progress,
    record_row,
    selected_tasks,
    tasks_option,
)
from bench_assets.tasks.catalog import load_benchmark


@click.command()
@tasks_option
@click.option(
    "--run", "do_run", is_flag=True, help="Materialize every cell first (reusing unchanged ones)."
)
@click.option("--force", is_flag=True, help="With --run: pay for fresh cells even if reusable.")
@only_tasks_option()
@click.option("--generation", default="", help="Generation id recorded on fresh cells (--run).")
@click.option(
    "--candidate", default="", help="Queued candidate to evaluate (--run; default: first)."
)
@json_option("Print one JSON object per cell.")
def cells(
    tasks_dir: Path,
    do_run: bool,
    force: bool,
    only: tuple[str, ...],
    generation: str,
    candidate: str,
    as_json: bool,
) -> None:
    """List the latest record of every cell (task × arm × run).

    With --run, first materializes the input assets and every cell through the Dagster instance:
    an unchanged cell is re-recorded as reused without starting any agent; --force pays for all.
    The sandbox is checked before any cell runs (exit 2 if bubblewrap cannot contain it).
    """
    from bench_assets.driver.inputs import materialize_inputs
    from bench_assets.driver.instance import (
        StepFailed,
        latest_cells,
        materialize_cells,
        sync_instance,
    )

    bench = load_benchmark(tasks_dir)
    task_ids = selected_tasks(bench, only)
    instance = open_instance()
    if do_run:
        from bench_assets.sandbox import process as sandbox

        sandbox.preflight()
        sync_instance(instance, bench)
        root = str(artifact_store().root)
        try:
            materialize_inputs(
                instance, task_ids, tasks_dir=str(bench.root), artifact_root=root, progress=progress
            )
            materialize_cells(
                instance,
                task_ids,
                tasks_dir=str(bench.root),
                artifact_root=root,
                force=force,
                generation=generation,
                candidate=candidate,
                progress=progress,
            )
        except StepFailed as e:
            fail_step(e)
    views = latest_cells(instance, task_ids, str(bench.root))
    # Reused as evolve counts it: carried into the latest generation from an earlier one.
    current = max((v.record.generation for v in views if v.record.generation), default=None)
    rows = [cell_row(v, current) for v in views]
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    if not rows:
        click.echo("no cells materialized yet; run `wfbench cells --run`")
        return
    print_cells(rows, current)


@click.command()
@click.option(
    "--predictions",
    required=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Predictions in any common format: SWE-bench JSONL, a JSON list, a preds.json keyed by "
    "instance id, or OpenHands output.jsonl.",
)
@tasks_option
@click.option(
    "--report",
    "report_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write SWE-bench's report (resolved_ids, unresolved_ids, empty_patch_ids, "
    "error_ids, counts) for the graded predictions to FILE.",
)
@click.option(
    "--skills",
    "skills",
    type=click.Choice(["none", "incumbent"]),
    default="none",
    show_default=True,
    help="The skill tree the graded runs had: skill-eval tasks grade a run 'with the plugin' "
    "(incumbent: the two-arm exclusions are shown, not scored) or 'without' (none: omitted).",
)
@json_option("Print one full cell record per line (skill-eval tasks: every grader's outcome).")
def grade(
    predictions: Path, tasks_dir: Path, report_file: Path | None, skills: str, as_json: bool
) -> None:
    """Grade predicted patches against the tasks, with no agent (like `swebench eval`).

    Each prediction's instance_id names a task; its patch is applied in a sanitized worktree
    inside the sandbox, then graded by the task's verify command and hidden oracle. A null or
    missing model_patch is an empty patch; model_name_or_path is recorded as the cell's producer;
    other fields are kept as metadata; repeated ids (or a `run` field) are several runs. Records
    are stored as ad-hoc cells (arm "grade"), never counted as evidence.

    A task imported from a skill-eval suite (`wfbench import claude-plugin-eval` / `skill-creator`)
    is graded by its hidden graders instead: they read the prediction's `transcript` (the run's
    `claude -p --output-format stream-json --verbose` events) and the tree the patch produced.
    """
    from bench_assets.agents.replay import ReplayAdapter, load_predictions
    from bench_assets.cells.pipeline import build_cell_inputs, run_cell
    from bench_assets.config.models import ArmSpec
    from bench_assets.sandbox import process as sandbox
    from bench_assets.sandbox.redact import from_environment

    bench = load_benchmark(tasks_dir)
    preds = load_predictions(predictions)
    if not preds:
        fail(f"{predictions}: no predictions in the file; nothing to grade", EXIT_INVALID)
    for task_id, _ in preds:
        bench.task(task_id)
    sandbox.preflight()
    artifacts = artifact_store()
    arm = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": predictions.name}, "skills": skills}
    )
    inputs_by_task: dict[str, Any] = {}
    rows = []
    records = []
    for i, ((task_id, run), pred) in enumerate(sorted(preds.items()), 1):
        producer = pred.model_name_or_path or "unknown producer"
        progress(f"[{i}/{len(preds)}] {task_id} run {run} ({producer})")
        if task_id not in inputs_by_task:
            inputs_by_task[task_id] = build_cell_inputs(bench, task_id, artifacts)
        record, _ = run_cell(
            bench,
            task_id,
            "grade",
            run,
            inputs_by_task[task_id],
            artifacts,
            generation=None,
            redactor=from_environment(),
            adapter=ReplayAdapter({(task_id, run): pred}, predictions.name),
            arm_spec=arm,
            ad_hoc=True,
        )
        if as_json:
            click.echo(record.model_dump_json())
        rows.append(record_row(record))
        records.append(record)
    if report_file is not None:
        from bench_assets.exports.results import swebench_report
        from bench_assets.kernel.fsutil import atomic_write_text

        report_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(report_file, json.dumps(swebench_report(records), indent=2) + "\n")
        progress(f"report: {report_file}")
    if not as_json:
        print_cells(rows)


@click.command(name="try")
@click.argument("task_id")
@click.option(
    "--command",
    "command",
    required=True,
    help="Agent command line; placeholders {prompt_file} {workdir} {model} {effort}.",
)
@tasks_option
@click.option(
    "--skills",
    type=click.Choice(["none", "incumbent"]),
    default="incumbent",
    show_default=True,
    help="Skill files given to the agent: none, or the incumbent skill tree.",
)
@click.option("--network", is_flag=True, help="Let the agent reach the network (e.g. a model API).")
@click.option(
    "--env", "env_names", multiple=True, help="Host variable passed to the agent (repeatable)."
)
@json_option("Print the full cell record.")
def try_cell(
    task_id: str,
    command: str,
    tasks_dir: Path,
    skills: str,
    network: bool,
    env_names: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run one ad-hoc cell of TASK_ID with a command agent and print its record.

    For people debugging an arm: the cell is sandboxed and graded exactly like a real one, stored
    under arm "try", and never counted as evidence. Values of the --env variables are redacted
    from everything recorded.
    """
    import shlex

    from bench_assets.cells.pipeline import build_cell_inputs, run_cell
    from bench_assets.config.models import ArmSpec
    from bench_assets.sandbox import process as sandbox
    from bench_assets.sandbox.redact import from_environment

    bench = load_benchmark(tasks_dir)
    bench.task(task_id)
    argv = shlex.split(command)
    if not argv:
        fail("--command is empty", EXIT_INVALID)
    arm = ArmSpec.model_validate(
        {
            "agent": {
                "adapter": "command",
                "argv": argv,
                "network": network,
                "env": list(env_names),
            },
            "skills": skills,
        }
    )
    sandbox.preflight()
    artifacts = artifact_store()
    inputs = build_cell_inputs(bench, task_id, artifacts)
    record, path = run_cell(
        bench,
        task_id,
        "try",
        0,
        inputs,
        artifacts,
        generation=None,
        redactor=from_environment(env_names),
        arm_spec=arm,
        ad_hoc=True,
    )
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        return
    print_cells([record_row(record)])
    if record.error_detail:
        click.echo(f"detail: {record.error_detail}")
    click.echo(f"record: {path}")
    if record.verify_tail and not record.verify_passed:
        click.echo("verify output (tail):\n" + record.verify_tail[-1500:])
