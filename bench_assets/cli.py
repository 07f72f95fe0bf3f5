"""``wfbench``: the command line, a thin layer over the core and the Dagster instance.

Exit codes (SPEC §11): 0 done; 1 a run failed; 2 invalid input or configuration (before any paid
work); 130 cancelled. Commands that report data take ``--json``. Dagster is imported only by the
commands that touch the instance, so ``wfbench validate`` stays fast.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from bench_assets import __version__
from bench_assets.catalog import collect_issues, load_benchmark
from bench_assets.errors import ValidationFailed, WfbenchError
from bench_assets.hashing import short

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_CANCELLED = 0, 1, 2, 130


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"wfbench: {message}", err=True)
    sys.exit(code)


def _progress(message: str) -> None:
    click.echo(f"  {message}", err=True)


def _instance() -> Any:
    import dagster as dg

    from bench_assets.defs.evolve import quiet_dagster_warnings

    quiet_dagster_warnings()
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        default = Path("dagster_home").resolve()
        if not (default / "dagster.yaml").is_file():
            _fail(
                "DAGSTER_HOME is not set and ./dagster_home/dagster.yaml does not exist; "
                "run from the repository root or export DAGSTER_HOME",
                EXIT_INVALID,
            )
        os.environ["DAGSTER_HOME"] = str(default)
    return dg.DagsterInstance.get()


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValidationFailed as e:
            click.echo(str(e), err=True)
            sys.exit(EXIT_INVALID)
        except WfbenchError as e:
            _fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            _fail("cancelled", EXIT_CANCELLED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wfbench")
def main() -> None:
    """Benchmark coding-agent skill text as Dagster assets.

    Typical flow: `wfbench validate` (check tasks/), `wfbench sync` (task partitions and pool
    limits into the Dagster instance), `wfbench inputs` (bindings, oracle snapshots and sanitized
    graphs for every task). The instance is $DAGSTER_HOME (default ./dagster_home).

    Exit codes: 0 done, 1 a run failed, 2 invalid input or configuration, 130 cancelled.
    """


@main.command()
@click.argument("tasks_dir", default="tasks", type=click.Path(path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print {ok, errors: [{file, field, message}]}."
)
def validate(tasks_dir: Path, as_json: bool) -> None:
    """Validate bench.yaml, every task and every candidate under TASKS_DIR (default: tasks).

    Reports every problem, one per line, as `file: field.path: what is wrong`, and exits 2 if
    there is any; exits 0 when everything is valid.
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


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
def sync(tasks_dir: Path, as_json: bool) -> None:
    """Make the Dagster `tasks` partitions equal to the task folders; apply pool limits.

    Refuses (exit 2, nothing changed) while any benchmark file is invalid. Partitions of removed
    tasks are deleted; their history stays in the event log.
    """
    from bench_assets.defs.instance_ops import sync_instance

    bench = load_benchmark(tasks_dir)
    plan, limits = sync_instance(_instance(), bench)
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


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--task", "only", multiple=True, help="Only this task (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the per-task table as JSON.")
def inputs(tasks_dir: Path, only: tuple[str, ...], as_json: bool) -> None:
    """Materialize the input assets of every task and print what they hold.

    Runs `incumbent_skills`, then `task_bindings`, `oracle_snapshots` and `sanitized_graphs` for
    each task partition against the instance, and prints binding SHA, oracle digest, sanitized SHA
    and graph size per task. Unchanged inputs keep their data versions.
    """
    from bench_assets.defs.instance_ops import StepFailed, materialize_inputs, sync_instance

    bench = load_benchmark(tasks_dir)
    task_ids = [bench.task(t).id for t in only] if only else bench.task_ids()
    instance = _instance()
    sync_instance(instance, bench)
    start = time.monotonic()
    try:
        out = materialize_inputs(
            instance,
            task_ids,
            tasks_dir=str(bench.root),
            artifact_root=os.environ.get("WFBENCH_ARTIFACTS", ""),
            progress=_progress,
        )
    except StepFailed as e:
        from bench_assets import errors

        cls = getattr(errors, e.cls_name, None)
        code = cls.exit_code if isinstance(cls, type) and issubclass(cls, WfbenchError) else 1
        _fail(f"{e.step}: {e.cls_name}: {e.message}", code)
    rows = []
    for task_id in task_ids:
        md = out[task_id]
        b, o, g = md["task_bindings"], md["oracle_snapshots"], md["sanitized_graphs"]
        rows.append(
            {
                "task": task_id,
                "binding_sha": b.get("resolved_sha"),
                "binding_version": b.get("data_version"),
                "oracle_digest": o.get("digest"),
                "sanitized_sha": g.get("sanitized_sha"),
                "graph_nodes": g.get("graph_nodes"),
                "graph_edges": g.get("graph_edges"),
                "graph_version": g.get("data_version"),
            }
        )
    skills = out[""]["incumbent_skills"]
    versions = [md for task_md in out.values() for md in task_md.values()]
    changed = sum(1 for md in versions if md.get("previous_data_version") != md.get("data_version"))
    for row, task_id in zip(rows, task_ids, strict=True):
        row["data_versions_changed"] = [
            k
            for k, md in out[task_id].items()
            if md.get("previous_data_version") != md.get("data_version")
        ]
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


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--task", "only", multiple=True, help="Only pin this task (repeatable).")
def pin(tasks_dir: Path, only: tuple[str, ...]) -> None:
    """Write tasks/bindings.lock: bind tasks now and hold those bindings fixed.

    A pinned task keeps its commit even if its ref moves; any later change to its prompt, setup,
    verify, task file or oracle is refused before paid work ("task binding drifted"). Delete the
    entry (or re-run pin) to accept a change.
    """
    from bench_assets import binding as binding_mod
    from bench_assets import oracle as oracle_mod
    from bench_assets.store import ArtifactStore, default_artifact_root

    bench = load_benchmark(tasks_dir)
    artifacts = ArtifactStore(default_artifact_root())
    pins = binding_mod.read_pins(bench)
    for task_id in [bench.task(t).id for t in only] if only else bench.task_ids():
        task = bench.task(task_id)
        snapshot, _ = oracle_mod.capture(task, bench.config.limits)
        # Bound without the old pin, so that re-pinning accepts the current definition.
        pins[task_id] = binding_mod.bind(task, snapshot, artifacts)
        click.echo(f"pinned {task_id} at {pins[task_id].resolved_sha}")
    click.echo(f"wrote {binding_mod.write_pins(bench, pins)}")


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--check", is_flag=True, help="Exit 1 if the shipped schema files are stale.")
def schema(tasks_dir: Path, check: bool) -> None:
    """Regenerate the JSON Schema files in TASKS/schema/ from the models (editor completion)."""
    from bench_assets import schema as schema_mod

    target = tasks_dir / "schema"
    if check:
        stale = schema_mod.stale(target)
        if stale:
            _fail(f"stale schema files in {target}: {', '.join(stale)}; run `wfbench schema`", 1)
        click.echo(f"{target}: up to date")
        return
    for path in schema_mod.write(target):
        click.echo(f"wrote {path}")


def _cell_row(md: dict[str, Any]) -> dict[str, Any]:
    from bench_assets.cells import parse_cell_key

    arm, run = parse_cell_key(str(md["cell"]))

    def measured(v: Any) -> Any:
        return None if v in (None, "unmeasured") else v

    return {
        "task": md["task"],
        "arm": arm,
        "run": run,
        "verify": md.get("verify_passed"),
        "oracle": md.get("oracle_passed"),
        "resolved": md.get("resolved"),
        "cost_usd": measured(md.get("cost_usd")),
        "tokens": measured(md.get("total_tokens")),
        "turns": measured(md.get("turns")),
        "error_kind": None if md.get("error_kind") in (None, "-") else md.get("error_kind"),
        "reused": bool(md.get("reused")),
        "generation": None if md.get("generation") in (None, "-") else md.get("generation"),
        "record_path": md.get("record_path"),
    }


def _print_cells(rows: list[dict[str, Any]]) -> None:
    def yn(v: Any) -> str:
        return "-" if v is None else ("yes" if v else "no")

    def num(v: Any, fmt: str) -> str:
        return "null" if v is None else format(v, fmt)

    header = (
        f"{'task':<22} {'arm':<20} {'run':>3} {'verify':>6} {'oracle':>6} {'resolved':>8} "
        f"{'cost $':>8} {'tokens':>8} {'turns':>5}  {'error kind':<18} {'gen':<6} reused"
    )
    click.echo(header)
    click.echo("-" * len(header))
    for r in rows:
        click.echo(
            f"{r['task']:<22} {r['arm']:<20} {r['run']:>3} {yn(r['verify']):>6} "
            f"{yn(r['oracle']):>6} {yn(r['resolved']):>8} {num(r['cost_usd'], '.4f'):>8} "
            f"{num(r['tokens'], 'd'):>8} {num(r['turns'], 'd'):>5}  "
            f"{r['error_kind'] or '-':<18} {r.get('generation') or '-':<6} "
            f"{'yes' if r['reused'] else 'no'}"
        )
    resolved = sum(1 for r in rows if r["resolved"])
    reused = sum(1 for r in rows if r["reused"])
    click.echo(f"{len(rows)} cell(s): {resolved} resolved, {reused} reused")


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option(
    "--run", "do_run", is_flag=True, help="Materialize every cell first (reusing unchanged ones)."
)
@click.option("--force", is_flag=True, help="With --run: pay for fresh cells even if reusable.")
@click.option("--task", "only", multiple=True, help="Only this task (repeatable).")
@click.option("--generation", default="", help="Generation id recorded on fresh cells (--run).")
@click.option(
    "--candidate", default="", help="Queued candidate to evaluate (--run; default: first)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per cell.")
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
    from bench_assets.defs.instance_ops import (
        StepFailed,
        latest_cells,
        materialize_cells,
        materialize_inputs,
        sync_instance,
    )

    bench = load_benchmark(tasks_dir)
    task_ids = [bench.task(t).id for t in only] if only else bench.task_ids()
    instance = _instance()
    if do_run:
        from bench_assets import sandbox

        sandbox.preflight()
        sync_instance(instance, bench)
        root = os.environ.get("WFBENCH_ARTIFACTS", "")
        try:
            materialize_inputs(
                instance,
                task_ids,
                tasks_dir=str(bench.root),
                artifact_root=root,
                progress=_progress,
            )
            materialize_cells(
                instance,
                task_ids,
                tasks_dir=str(bench.root),
                artifact_root=root,
                force=force,
                generation=generation,
                candidate=candidate,
                progress=_progress,
            )
        except StepFailed as e:
            _fail_step(e)
    rows = [_cell_row(md) for md in latest_cells(instance, task_ids, str(bench.root))]
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    if not rows:
        click.echo("no cells materialized yet; run `wfbench cells --run`")
        return
    _print_cells(rows)


def _fail_step(e: Any) -> NoReturn:
    from bench_assets import errors

    cls = getattr(errors, e.cls_name, None)
    code = cls.exit_code if isinstance(cls, type) and issubclass(cls, WfbenchError) else 1
    _fail(f"{e.step}: {e.cls_name}: {e.message}", code)


def _record_row(record: Any) -> dict[str, Any]:
    return {
        "task": record.task,
        "arm": record.arm,
        "run": record.run,
        "verify": record.verify_passed,
        "oracle": record.oracle_passed,
        "resolved": record.resolved,
        "cost_usd": record.cost_usd,
        "tokens": record.total_tokens,
        "turns": record.turns,
        "error_kind": record.error_kind.value if record.error_kind else None,
        "reused": False,
    }


@main.command()
@click.option(
    "--predictions",
    required=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="SWE-bench-style JSONL: instance_id, model_patch, model_name_or_path [, run, usage].",
)
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--json", "as_json", is_flag=True, help="Print one full cell record per line.")
def grade(predictions: Path, tasks_dir: Path, as_json: bool) -> None:
    """Grade predicted patches against the tasks, with no agent (like `swebench eval`).

    Each line's instance_id names a task; its patch is applied in a sanitized worktree inside the
    sandbox, then graded by the task's verify command and hidden oracle. Records are stored as
    ad-hoc cells (arm "grade"), never counted as evidence.
    """
    from bench_assets import sandbox
    from bench_assets.agents.replay import ReplayAdapter, load_predictions
    from bench_assets.cells import build_cell_inputs, run_cell
    from bench_assets.models import ArmSpec
    from bench_assets.redact import from_environment
    from bench_assets.store import ArtifactStore, default_artifact_root

    bench = load_benchmark(tasks_dir)
    preds = load_predictions(predictions)
    for task_id, _ in preds:
        bench.task(task_id)
    sandbox.preflight()
    artifacts = ArtifactStore(default_artifact_root())
    arm = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": predictions.name}, "skills": "none"}
    )
    inputs_by_task: dict[str, Any] = {}
    rows = []
    for i, ((task_id, run), pred) in enumerate(sorted(preds.items()), 1):
        _progress(f"[{i}/{len(preds)}] {task_id} run {run} ({pred.model_name_or_path})")
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
        rows.append(_record_row(record))
    if not as_json:
        _print_cells(rows)


@main.command(name="try")
@click.argument("task_id")
@click.option(
    "--command",
    "command",
    required=True,
    help="Agent command line; placeholders {prompt_file} {workdir} {model} {effort}.",
)
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option(
    "--skills", type=click.Choice(["none", "incumbent"]), default="incumbent", show_default=True
)
@click.option("--network", is_flag=True, help="Let the agent reach the network (e.g. a model API).")
@click.option(
    "--env", "env_names", multiple=True, help="Host variable passed to the agent (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the full cell record.")
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
    under arm "try", and never counted as evidence.
    """
    import shlex

    from bench_assets import sandbox
    from bench_assets.cells import build_cell_inputs, run_cell
    from bench_assets.models import ArmSpec
    from bench_assets.redact import from_environment
    from bench_assets.store import ArtifactStore, default_artifact_root

    bench = load_benchmark(tasks_dir)
    bench.task(task_id)
    argv = shlex.split(command)
    if not argv:
        _fail("--command is empty", EXIT_INVALID)
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
    artifacts = ArtifactStore(default_artifact_root())
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
    _print_cells([_record_row(record)])
    if record.error_detail:
        click.echo(f"detail: {record.error_detail}")
    click.echo(f"record: {path}")
    if record.verify_tail and not record.verify_passed:
        click.echo("verify output (tail):\n" + record.verify_tail[-1500:])


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--generation", default="", help="Generation id recorded on the decision.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision metadata as JSON.")
def decide(tasks_dir: Path, generation: str, as_json: bool) -> None:
    """Aggregate every task's cells, run the promotion gate, write the report and ledger entry.

    Uses the latest record of every cell (run `wfbench cells --run` first). The decision is data,
    not an exit code: promote, keep_incumbent and insufficient_evidence all exit 0. An UNUSABLE
    incumbent arm fails (exit 1) after the evidence is written.
    """
    from bench_assets.defs.instance_ops import StepFailed, materialize_decision

    bench = load_benchmark(tasks_dir)
    instance = _instance()
    try:
        out = materialize_decision(
            instance,
            bench.task_ids(),
            tasks_dir=str(bench.root),
            artifact_root=os.environ.get("WFBENCH_ARTIFACTS", ""),
            generation=generation,
            aborted=False,
            progress=_progress,
        )
    except StepFailed as e:
        _fail_step(e)
    d: dict[str, Any] = dict(out["decision"])
    r: dict[str, Any] = dict(out["report"])
    if as_json:
        click.echo(json.dumps({"decision": d, "report": r}, indent=2, default=str))
        return
    click.echo(
        f"decision: {d.get('decision')} (policy {d.get('policy')}, candidate "
        f"{d.get('candidate')}, generation {d.get('generation')})"
    )
    click.echo(str(d.get("reasons", "")))
    click.echo(f"report: {r.get('html_path')}")
    click.echo(f"ledger entry #{d.get('ledger_seq')} {short(str(d.get('ledger_hash')))}")


def _find_decision(instance: Any, generation: str) -> dict[str, Any]:
    from bench_assets.defs.instance_ops import decision_records

    for md in decision_records(instance):
        if not generation or md.get("generation") == generation:
            return md
    which = f" for generation {generation}" if generation else ""
    _fail(f"no promotion decision{which} yet; run `wfbench decide`", EXIT_INVALID)


@main.command()
@click.option(
    "--generation", default="", help="Explain this generation's decision (default: latest)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the full decision document.")
def explain(generation: str, as_json: bool) -> None:
    """Why the candidate was (not) promoted: policy, per-task numbers, evidence cells.

    The same answer as the promotion_decision asset's metadata in the UI, from the stored
    decision document; reused evidence names the generation and run it came from.
    """
    md = _find_decision(_instance(), generation)
    body = json.loads(Path(str(md["decision_path"])).read_text(encoding="utf-8"))
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    d = body["decision"]
    click.echo(f"generation {body.get('generation') or '-'}: {d['decision']}")
    click.echo(
        f"candidate {body.get('candidate')} (overlay {short(str(body.get('overlay_digest')))}"
        f") as arm {d['candidate_arm']} vs incumbent arm {d['incumbent_arm']} "
        f"(skills {short(str(body.get('incumbent_skills_digest')))})"
    )
    pol = d["policy"]
    click.echo(
        f"policy {d['policy_name']}: metric {d['metric']}, min_runs {pol['min_runs']}, "
        f"min_improvement {pol['min_improvement']}, resolve_margin {pol['resolve_margin']}, "
        f"confidence {pol['confidence']}, seed {pol['seed']}"
    )
    click.echo(f"evidence expires {d.get('evidence_expires_at') or '-'}; run {md.get('run_id')}")
    click.echo("\nreasons:")
    for reason in d["reasons"]:
        click.echo(f"  - {reason}")
    from bench_assets.report import TASK_COLUMNS, task_rows

    click.echo("\ntasks:")
    rows = [TASK_COLUMNS[:-1], *[r[:-1] for r in task_rows(d)]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
        why = "" if n == 0 else f"  {task_rows(d)[n - 1][-1]}"
        click.echo(f"  {line}{why}")
    click.echo("\nevidence cells:")
    for e in d["evidence"]:
        origin = "reused" if e["reused"] else "fresh"
        outcome = e.get("error_kind") or "resolved"
        counted = "" if e["task_counted"] else " (task not counted)"
        click.echo(
            f"  {e['task']} {e['arm']}.r{e['run']}: {origin}, generation "
            f"{e.get('generation') or '-'}, data version {short(e['data_version'])}, "
            f"{outcome}{counted}"
        )


@main.command()
@click.option("--open", "open_it", is_flag=True, help="Open the HTML report in a browser.")
def report(open_it: bool) -> None:
    """Print the paths of the latest benchmark report (Markdown and self-contained HTML)."""
    from bench_assets.defs.lookup import latest_metadata

    md = latest_metadata(_instance(), "benchmark_report", None)
    if not md:
        _fail("no report yet; run `wfbench decide`", EXIT_INVALID)
    click.echo(f"html: {md['html_path']}")
    click.echo(f"markdown: {md['markdown_path']}")
    if open_it:
        click.launch(str(md["html_path"]))


@main.group()
def ledger() -> None:
    """The tamper-evident decision ledger."""


@ledger.command("verify")
@click.option(
    "--path",
    "path",
    type=click.Path(path_type=Path),
    default=None,
    help="Ledger file (default: <artifacts>/ledger/decisions.jsonl).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verification result as JSON.")
def ledger_verify(path: Path | None, as_json: bool) -> None:
    """Check every entry's hash and the chain; exit 1 naming the first bad entry."""
    from bench_assets import ledger as ledger_mod
    from bench_assets.defs.decision import ledger_path
    from bench_assets.store import ArtifactStore, default_artifact_root

    target = path or ledger_path(ArtifactStore(default_artifact_root()))
    if not target.exists():
        _fail(f"no ledger at {target}", EXIT_INVALID)
    result = ledger_mod.verify(target)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        click.echo(result.message(target))
    sys.exit(EXIT_OK if result.ok else EXIT_FAILED)


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print generation, candidate, decision, paid_cells, reused_cells, aborted.",
)
def evolve(tasks_dir: Path, as_json: bool) -> None:
    """Run one generation now, in-process, against the instance (no daemon needed).

    Takes the next unevaluated candidate from the queue, pays only for the cells the planner
    says must run (plus canaries), overlapping graph builds with agent sessions, then aggregates,
    decides, reports and appends to the ledger. Exit 0 when done (whatever the decision), 1 when
    the outage breaker tripped or the incumbent arm was unusable, 2 for invalid input.
    """
    from bench_assets.defs.evolve import NothingToEvaluate
    from bench_assets.defs.evolve import evolve as run_generation
    from bench_assets.defs.instance_ops import StepFailed

    _instance()
    start = time.monotonic()
    try:
        res = run_generation(
            str(tasks_dir),
            artifact_root=os.environ.get("WFBENCH_ARTIFACTS", ""),
            progress=_progress,
        )
    except NothingToEvaluate as e:
        if as_json:
            click.echo(json.dumps({"generation": None, "decision": None, "reason": str(e)}))
        else:
            click.echo(f"nothing to evaluate: {e}")
        return
    except StepFailed as e:
        _fail_step(e)
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


@main.command()
@click.option(
    "--tasks", "tasks_dir", default="tasks", show_default=True, type=click.Path(path_type=Path)
)
@click.option("--explain", "explain_all", is_flag=True, help="Print the reason for every cell.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a list of {task, arm, run, action, reason} objects.",
)
def plan(tasks_dir: Path, explain_all: bool, as_json: bool) -> None:
    """Plan the next generation as `wfbench evolve` would: which cells run, which are reused, why.

    Reasons: missing, excluded (previous error kind), expired, code identity changed (field
    named), upstream changed (binding field, oracle, graph, skills or overlay named), candidate,
    canary. Computes the current inputs without changing the Dagster instance.
    """
    import datetime as dt

    from bench_assets.cells import build_cell_inputs
    from bench_assets.defs.evolve import NothingToEvaluate, choose, plan_task, prior_cells
    from bench_assets.planner import summary
    from bench_assets.store import ArtifactStore, default_artifact_root

    bench = load_benchmark(tasks_dir)
    instance = _instance()
    artifacts = ArtifactStore(default_artifact_root())
    candidate: str | None
    try:
        generation, candidate = choose(bench, instance, artifacts)
    except NothingToEvaluate as e:
        from bench_assets.defs.evolve import history
        from bench_assets.generation import next_generation

        generation, candidate = next_generation(history(instance, artifacts)[0]), None
        click.echo(f"note: {e}; planning comparator cells only", err=True)
    now = dt.datetime.now(dt.UTC)
    roles = {n: a.role for n, a in bench.config.arms.items()}
    arms = [a for a in bench.config.arms if candidate or roles[a] == "comparator"]
    cells_plan = []
    for task in bench.task_ids():
        inputs = build_cell_inputs(bench, task, artifacts, candidate=candidate)
        keys = [(task, a, r) for a in arms for r in range(bench.config.runs)]
        cells_plan += plan_task(
            bench, task, inputs, prior_cells(instance, task, keys, roles), generation, now, arms
        )
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "task": c.task,
                        "arm": c.arm,
                        "run": c.run,
                        "action": c.action,
                        "reason": c.reason,
                        "kind": c.kind,
                        "changed": c.changed,
                    }
                    for c in cells_plan
                ],
                indent=2,
            )
        )
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


@main.command(name="apply")
@click.option(
    "--generation", default="", help="Apply this generation's decision (default: latest)."
)
def apply_cmd(generation: str) -> None:
    """Replace the incumbent skill files with a promoted overlay, atomically.

    Refuses, writing nothing, unless the decision is `promote` and every target file is exactly
    as it was when the decision was made (compare-and-swap on the recorded digests); any failure
    midway restores every file. The application is recorded in the ledger.
    """
    from bench_assets.defs.instance_ops import apply_latest

    result: Any = apply_latest(_instance(), os.environ.get("WFBENCH_ARTIFACTS", ""), generation)
    for f in result.files:
        verb = "added" if f.old_sha256 is None else "replaced"
        click.echo(f"{verb} {f.path} ({short(str(f.old_sha256))} -> {short(f.new_sha256)})")
    click.echo(f"ledger entry #{result.ledger_seq}")


if __name__ == "__main__":
    main()
