"""Commands that bring task suites in and results out: ``import swebench``, ``export``."""

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bench_assets.catalog import load_benchmark
from bench_assets.cli.common import EXIT_INVALID, fail, open_instance, progress, tasks_option

if TYPE_CHECKING:
    from bench_assets.records import CellRecord


@click.group(name="import")
def import_group() -> None:
    """Turn another benchmark's tasks into wfbench task folders."""


@import_group.command(name="swebench")
@click.argument("source", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--repos",
    required=True,
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    metavar="DIR",
    help="Local git repositories (mirrors) by name: DIR/owner/name, DIR/owner__name or DIR/name. "
    "Nothing is ever cloned from the network.",
)
@tasks_option
@click.option(
    "--pyproject-env",
    is_flag=True,
    help="Give every task an environment with its repository's pyproject dependencies "
    "(installed once per task from PyPI by task_environments; cells stay offline).",
)
@click.option("--quiet", is_flag=True, help="Do not print the diff of changed tasks.")
def import_swebench(
    source: Path, repos: Path, tasks_dir: Path, pyproject_env: bool, quiet: bool
) -> None:
    """Import SWE-bench-style instances from SOURCE (JSON list or JSONL) as task folders.

    Each instance (instance_id, repo, base_commit, problem_statement, patch, test_patch,
    FAIL_TO_PASS, PASS_TO_PASS) becomes TASKS/<instance_id>/: the repository from --repos pinned
    at base_commit, the problem statement as the prompt, the test patch's files as the hidden
    oracle with fail_to_pass/pass_to_pass. The gold patches go to TASKS/replays/swebench-gold.jsonl
    (grade them with `wfbench grade --predictions`). A fresh TASKS folder gets a minimal
    bench.yaml. Re-importing is idempotent; a changed instance prints its diff.
    """
    from bench_assets.swebench import GOLD_FILE, ensure_bench, import_instances

    tasks_dir.mkdir(parents=True, exist_ok=True)
    env = {"pyproject": True} if pyproject_env else None
    results = import_instances(source, repos, tasks_dir, environment=env)
    made = ensure_bench(tasks_dir)
    if made is not None:
        progress(f"wrote {made} (one `gold` replay arm); edit its arms to benchmark agents")
    for r in results:
        click.echo(f"{r.status:<9} {r.instance_id}")
        if r.diff and not quiet:
            click.echo(r.diff, nl=False)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("created", "changed")}
    unchanged = len(results) - sum(counts.values())
    click.echo(
        f"{len(results)} instance(s): {counts['created']} created, {counts['changed']} changed, "
        f"{unchanged} unchanged; gold patches in {tasks_dir / GOLD_FILE}"
    )


@click.command(name="export")
@tasks_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["swebench", "csv", "parquet", "claude-plugin-eval"]),
    default="swebench",
    show_default=True,
    help="swebench: SWE-bench's report (resolved/unresolved/empty-patch/error ids) per arm and "
    "run; csv/parquet: one row per cell with every record field; claude-plugin-eval: the "
    "aggregate-result.json shape of `claude plugin eval` for the skill-eval tasks (per case, "
    "arm, run and grader).",
)
@click.option(
    "--with-arm",
    default="with_plugin",
    show_default=True,
    help="claude-plugin-eval: the arm reported as 'with' the plugin.",
)
@click.option(
    "--without-arm",
    default="without_plugin",
    show_default=True,
    help="claude-plugin-eval: the arm reported as 'without' ('' for a one-arm document).",
)
@click.option(
    "--generation",
    default="",
    metavar="G",
    help="Export exactly the cells generation G planned (default: every cell's latest record).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Write here (default: stdout for swebench/csv; required for parquet).",
)
def export(
    tasks_dir: Path,
    fmt: str,
    generation: str,
    out: Path | None,
    with_arm: str,
    without_arm: str,
) -> None:
    """Export cell results for other tools: SWE-bench's report shape, CSV, Parquet, or
    `claude plugin eval`'s result JSON."""
    from bench_assets.export import cell_rows, reports_by_arm
    from bench_assets.fsutil import atomic_write_text

    if fmt == "parquet" and out is None:
        fail("--format parquet writes a binary file: give --out FILE", EXIT_INVALID)
    records = _records(tasks_dir, generation)
    if fmt == "claude-plugin-eval":
        doc = plugin_eval_export(tasks_dir, records, with_arm, without_arm or None)
        text = json.dumps(doc, indent=2) + "\n"
    elif fmt == "swebench":
        doc = {"generation": generation or None, "arms": reports_by_arm(records)}
        text = json.dumps(doc, indent=2) + "\n"
    else:
        import pandas as pd

        frame = pd.DataFrame(cell_rows(records))
        if fmt == "parquet":
            assert out is not None
            try:
                frame.to_parquet(out, index=False)
            except ImportError:
                fail("--format parquet needs pyarrow: pip install 'wfbench[parquet]'", EXIT_INVALID)
            progress(f"{len(records)} cell(s) written to {out}")
            return
        text = frame.to_csv(index=False)
    if out is None:
        click.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    progress(f"{len(records)} cell(s) written to {out}")


def _records(tasks_dir: Path, generation: str) -> list["CellRecord"]:
    """The records to export: the generation's verified evidence, or every latest cell."""
    bench = load_benchmark(tasks_dir)
    instance = open_instance()
    if not generation:
        from bench_assets.driver.instance import latest_cells

        return [v.record for v in latest_cells(instance, bench.task_ids(), str(bench.root))]
    from bench_assets.cli.common import artifact_store
    from bench_assets.driver.transaction import candidates
    from bench_assets.manifest import accept, load_complete

    manifest = load_complete(artifact_store().generation(generation))
    if manifest is None:
        fail(f"generation {generation} has no completed plan in the artifact store", EXIT_INVALID)
    out, missing = [], []
    for mc in manifest.cells():
        ok, why = accept(mc, generation, candidates(instance, mc))
        if ok is None:
            missing.append(f"{mc.task} {mc.cell}: {why}")
        else:
            out.append(ok.record)
    if missing:
        fail(
            f"generation {generation} is unfinished: {len(missing)} planned cell(s) have no "
            f"evidence ({'; '.join(missing[:3])})",
            EXIT_INVALID,
        )
    return out


# --- skill-eval suites (issue 26): `import claude-plugin-eval`, `import skill-creator` ---------


def _print_imported(results: list, tasks_dir: Path, quiet: bool) -> None:
    for r in results:
        click.echo(f"{r.status:<9} {r.instance_id}")
        if r.diff and not quiet:
            click.echo(r.diff, nl=False)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("created", "changed")}
    unchanged = len(results) - sum(counts.values())
    click.echo(
        f"{len(results)} item(s): {counts['created']} created, {counts['changed']} changed, "
        f"{unchanged} unchanged in {tasks_dir}"
    )


@import_group.command(name="claude-plugin-eval")
@click.argument("plugin_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@tasks_option
@click.option("--quiet", is_flag=True, help="Do not print the diff of changed cases.")
def import_claude_plugin_eval(plugin_dir: Path, tasks_dir: Path, quiet: bool) -> None:
    """Import a plugin's `claude plugin eval` suite (PLUGIN_DIR/evals/**) as task folders.

    Each case (a folder with prompt.md and/or case.yaml) becomes TASKS/<plugin>.<case>/: its
    prompt; its runs, max_turns, timeout, allowed tools, env and model in task.yaml's skill_eval
    section; the starting tree built once by its scaffold_script inside the sandbox; its graders
    (regex, tool_used, tool_order, file_exists, llm, baseline) as the task's HIDDEN grading
    (oracle/skill_eval.json), which the agent never sees. The plugin's skills/ become the
    incumbent skills (TASKS/skills/, installed by `skills: incumbent` arms); the whole plugin
    (agents, commands, hooks too, without its evals) is copied to TASKS/_plugins/<name>/ for a
    claude-code arm's `plugin_dirs`. A field wfbench cannot honour (history_file, add_dirs,
    MCP mocks, mock_calls, an unknown key) is refused with the file and field named. Re-importing
    is idempotent; a changed case prints its diff. A fresh TASKS folder gets a bench.yaml with
    with_plugin / without_plugin arms.
    """
    from bench_assets.skill_eval_import import import_plugin
    from bench_assets.skill_eval_tasks import ensure_bench, needs_judge

    tasks_dir.mkdir(parents=True, exist_ok=True)
    results = import_plugin(plugin_dir, tasks_dir)
    made = ensure_bench(tasks_dir, judge=needs_judge(tasks_dir))
    if made is not None:
        progress(f"wrote {made} (with_plugin / without_plugin arms); edit its arms to taste")
    _print_imported(results, tasks_dir, quiet)


@import_group.command(name="skill-creator")
@click.argument("evals_json", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@tasks_option
@click.option("--quiet", is_flag=True, help="Do not print the diff of changed cases.")
def import_skill_creator_cmd(evals_json: Path, tasks_dir: Path, quiet: bool) -> None:
    """Import a skill-creator / agentskills.io evals/evals.json as task folders.

    Each eval becomes TASKS/<skill_name>.<id>/: its prompt, its files (relative to the skill
    root) in the starting tree, its assertions (or expectations: both spellings) as hidden llm
    judge graders ({type: contains|not_contains, value} items as regex graders); an eval without
    either is judged on its expected_output. The skill folder (the one holding evals/) becomes
    the incumbent skill. Unknown fields are refused with the file and field named.
    """
    from bench_assets.skill_eval_creator import import_skill_creator
    from bench_assets.skill_eval_tasks import ensure_bench, needs_judge

    tasks_dir.mkdir(parents=True, exist_ok=True)
    results = import_skill_creator(evals_json, tasks_dir)
    made = ensure_bench(tasks_dir, judge=needs_judge(tasks_dir))
    if made is not None:
        progress(f"wrote {made} (with_plugin / without_plugin arms); edit its arms to taste")
    _print_imported(results, tasks_dir, quiet)


def plugin_eval_export(
    tasks_dir: Path, records: list["CellRecord"], with_arm: str, without_arm: str | None
) -> dict:
    """The `claude plugin eval` result document for the skill-eval tasks of ``tasks_dir``."""
    from bench_assets.skill_eval import parse_grading
    from bench_assets.skill_eval_export import plugin_eval_document

    bench = load_benchmark(tasks_dir)
    cases = {}
    for tid in bench.task_ids():
        task = bench.task(tid)
        se = task.spec.skill_eval
        if se is not None:
            path = task.oracle_dir / se.grading
            cases[tid] = (task.spec, parse_grading(path.read_bytes(), str(path)))
    if not cases:
        fail(f"{tasks_dir}: no skill-eval task (import one with `wfbench import`)", EXIT_INVALID)
    return plugin_eval_document(
        [r for r in records if r.task in cases],
        cases,
        with_arm=with_arm,
        without_arm=without_arm,
        root=str(bench.root),
    )
