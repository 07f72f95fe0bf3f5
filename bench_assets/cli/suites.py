"""Commands that bring task suites in and results out: ``import swebench``, ``import commits``,
``export``."""

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bench_assets.cli.common import (
    EXIT_INVALID,
    fail,
    json_option,
    open_instance,
    progress,
    tasks_option,
)
from bench_assets.tasks.catalog import load_benchmark

if TYPE_CHECKING:
    from bench_assets.cells.records import CellRecord
    from bench_assets.mining.documents import CandidateLine


@click.group(name="import")
def import_group() -> None:
    """Turn another benchmark's tasks into wfbench task folders."""


def _print_imported(results: list, quiet: bool, noun: str, trailer: str) -> None:
    """One line per imported item (with its diff when it changed), then the counts."""
    for r in results:
        click.echo(f"{r.status:<9} {r.instance_id}")
        if r.diff and not quiet:
            click.echo(r.diff, nl=False)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("created", "changed")}
    unchanged = len(results) - sum(counts.values())
    click.echo(
        f"{len(results)} {noun}: {counts['created']} created, {counts['changed']} changed, "
        f"{unchanged} unchanged{trailer}"
    )


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
    from bench_assets.tasks.swebench import GOLD_FILE, ensure_bench, import_instances

    tasks_dir.mkdir(parents=True, exist_ok=True)
    env = {"pyproject": True} if pyproject_env else None
    results = import_instances(source, repos, tasks_dir, environment=env)
    made = ensure_bench(tasks_dir)
    if made is not None:
        progress(f"wrote {made} (one `gold` replay arm); edit its arms to benchmark agents")
    _print_imported(results, quiet, "instance(s)", f"; gold patches in {tasks_dir / GOLD_FILE}")


# -- import commits ------------------------------------------------------------------------------


@import_group.command(name="commits")
@click.argument("repo", type=click.Path(path_type=Path, exists=True, file_okay=False))
@tasks_option
@click.option(
    "--since",
    metavar="DATE",
    default=None,
    help="Only commits made since DATE (anything `git log --since` reads: 2024-01-01, "
    "'3 months ago').",
)
@click.option(
    "--range",
    "revrange",
    metavar="A..B",
    default=None,
    help="Only the first-parent commits of A..B (default: the whole first-parent history of "
    "HEAD). A later, new range adds tasks; the same range again changes nothing.",
)
@click.option(
    "--paths",
    multiple=True,
    metavar="GLOB",
    help="Only commits that touch a path matching GLOB, or under folder GLOB (repeatable).",
)
@click.option(
    "--max",
    "max_candidates",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Validate at most N new candidates in this run (already imported or cached ones do "
    "not count; the next run continues).",
)
@click.option(
    "--pyproject-env",
    is_flag=True,
    help="Give each task an environment with its base's declared dependencies "
    "(requirements*.txt and pyproject.toml [project] dependencies), built once per task from "
    "the package index (cells stay offline). Without it tasks use the harness's packages only.",
)
@json_option(
    "Print the report as JSON: every examined commit, accepted tasks, rejections by reason, "
    "the time spent."
)
def import_commits_cmd(
    repo: Path,
    tasks_dir: Path,
    since: str | None,
    revrange: str | None,
    paths: tuple[str, ...],
    max_candidates: int | None,
    pyproject_env: bool,
    as_json: bool,
) -> None:
    """Mine validated tasks from the fix commits of the git repository REPO.

    A candidate is a first-parent commit (a merge counts as its whole branch) that changes a
    test module (by the repository's pytest configuration and conventional paths) and a source
    file. Its task: base = the parent commit (pinned as ref), hidden oracle = the test files it
    changed, prompt = its message (oracle test names and quotes of the fix redacted), verify =
    the visible tests unrelated to the oracle that pass with the fix (else a default to edit),
    environment = the base's declared dependencies with --pyproject-env. The gold patch (the
    non-test diff) goes to
    TASKS/replays/commits-gold.jsonl.

    Each candidate is validated in the sandbox, on its sanitized template: the oracle runs 3
    times on the base and 3 times with the gold patch. fail_to_pass (fails before, passes
    after) and pass_to_pass are written to task.yaml, every run to TASKS/<id>/mined.json. A
    candidate with no fail_to_pass, a flaky test, a gold patch that does not apply or does not
    pass, or a base tree holding the fix is not imported. One line per commit says what
    happened and why, with the time it took.

    Re-running changes nothing: an imported task is never rewritten (edit its verify freely)
    and every verdict is remembered in TASKS/.wfbench-mined/, so only new commits are
    validated. Expect ~10-20 s per candidate on a small repository (bench/mine_commits.py
    measures yours); a commit that is not a candidate costs ~0.1 s.
    """
    from bench_assets.cli.common import artifact_store
    from bench_assets.mining.folders import GOLD_FILE, render_line
    from bench_assets.mining.importer import Options, import_commits
    from bench_assets.sandbox import process as sandbox

    if since and revrange:
        fail("--since and --range exclude each other: give one", EXIT_INVALID)
    sandbox.preflight()

    def show(line: "CandidateLine") -> None:
        if as_json:
            progress(render_line(line))
        else:
            click.echo(render_line(line))

    options = Options(
        since=since,
        revrange=revrange,
        paths=paths,
        max_candidates=max_candidates,
        pyproject_env=pyproject_env,
    )
    report = import_commits(repo, tasks_dir, artifact_store(), options, on_line=show)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return
    rejected = sum(len(v) for v in report.rejected_by_reason.values())
    by_reason = ", ".join(f"{k} {len(v)}" for k, v in sorted(report.rejected_by_reason.items()))
    per = (
        f"{report.seconds_per_candidate:.1f} s per validated candidate"
        if report.seconds_per_candidate is not None
        else "nothing validated"
    )
    click.echo(
        f"{report.commits} commit(s), {report.candidates} candidate(s): "
        f"{len(report.accepted)} accepted, {len(report.unchanged)} unchanged, {rejected} rejected"
        f"{f' ({by_reason})' if by_reason else ''}; {report.seconds:.1f} s ({per}); "
        f"gold patches in {tasks_dir / GOLD_FILE}"
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
    from bench_assets.exports.results import cell_rows, reports_by_arm
    from bench_assets.kernel.fsutil import atomic_write_text

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
    from bench_assets.decision.manifest import accept, load_complete
    from bench_assets.driver.transaction import candidates

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


@import_group.command(name="claude-plugin-eval")
@click.argument("plugin_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@tasks_option
@click.option(
    "--eval-dir",
    default=None,
    metavar="DIR",
    help="The suite's folder inside the plugin, as `claude plugin eval --eval-dir` (default: "
    "plugin.json's experimental.evals, else evals).",
)
@click.option("--quiet", is_flag=True, help="Do not print the diff of changed cases.")
def import_claude_plugin_eval(
    plugin_dir: Path, tasks_dir: Path, eval_dir: str | None, quiet: bool
) -> None:
    """Import a plugin's `claude plugin eval` suite (PLUGIN_DIR/evals/**) as task folders.

    Each case (a folder with prompt.md and/or case.yaml) becomes TASKS/<plugin>.<case>/: its
    prompt; its runs, max_turns, timeout, allowed tools, env and model in task.yaml's skill_eval
    section; the starting tree built once by its scaffold_script inside the sandbox; its graders
    (regex, tool_used, tool_order, file_exists, llm, baseline) as the task's HIDDEN grading
    (oracle/skill_eval.json), which the agent never sees. The plugin's skills/ become the
    incumbent skills (TASKS/skills/, installed by `skills: incumbent` arms); the whole plugin
    (agents, commands, hooks too, without its evals) is copied to TASKS/_plugins/<name>/ for a
    claude-code arm's `plugin_dirs`. A field wfbench cannot honour (history_file, add_dirs,
    an unknown key, a scaffold whose git history or uncommitted edit one base commit cannot
    hold) is refused with the file and field named. MCP: claude plugin eval reaches a plugin's
    MCP tools only through mocks, which wfbench does not run, so a plugin declaring MCP servers
    (.mcp.json, plugin.json mcpServers), mocks/ folders and mock_calls graders are refused. The run
    settings are applied to each claude-code session (allowed tools, appended system prompt,
    EVAL_* env, turn cap); a case's model must be bench.yaml's pinned model (validate refuses
    another), and env names of the harness (API URL, keys, HOME, PATH, proxy) are refused.
    Re-importing is idempotent; a changed case prints its diff. A fresh TASKS folder gets a
    bench.yaml with with_plugin / without_plugin arms (pinning the cases' model when they all
    name the same one).
    """
    from bench_assets.tasks.skill_eval_import import import_plugin
    from bench_assets.tasks.skill_eval_tasks import ensure_bench, needs_judge

    tasks_dir.mkdir(parents=True, exist_ok=True)
    results = import_plugin(plugin_dir, tasks_dir, eval_dir)
    made = ensure_bench(tasks_dir, judge=needs_judge(tasks_dir))
    if made is not None:
        progress(f"wrote {made} (with_plugin / without_plugin arms); edit its arms to taste")
    _print_imported(results, quiet, "item(s)", f" in {tasks_dir}")


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
    from bench_assets.tasks.skill_eval_creator import import_skill_creator
    from bench_assets.tasks.skill_eval_tasks import ensure_bench, needs_judge

    tasks_dir.mkdir(parents=True, exist_ok=True)
    results = import_skill_creator(evals_json, tasks_dir)
    made = ensure_bench(tasks_dir, judge=needs_judge(tasks_dir))
    if made is not None:
        progress(f"wrote {made} (with_plugin / without_plugin arms); edit its arms to taste")
    _print_imported(results, quiet, "item(s)", f" in {tasks_dir}")


def plugin_eval_export(
    tasks_dir: Path, records: list["CellRecord"], with_arm: str, without_arm: str | None
) -> dict:
    """The `claude plugin eval` result document for the skill-eval tasks of ``tasks_dir``."""
    from bench_assets.exports.plugin_eval import plugin_eval_document
    from bench_assets.scorers.skill_eval import parse_grading

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
