"""What the ``wfbench`` commands share: options, exit codes, instance, artifact store, tables.

Nothing here imports Dagster at module level; the commands that touch the instance import it when
they run, so ``wfbench validate`` and ``wfbench --help`` stay fast.

Exit codes (README section "The command line"): 0 done; 1 a run failed; 2 invalid input or
configuration, before any paid work; 130 cancelled. :func:`exit_code_for` is the one mapping from
an exception to its code, by its place in the :mod:`bench_assets.kernel.errors` tree.
"""

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from bench_assets.kernel.errors import ContainmentError, InputError, WfbenchError
from bench_assets.kernel.store import ArtifactStore, default_artifact_root
from bench_assets.tasks.catalog import Benchmark

if TYPE_CHECKING:
    import dagster as dg

    from bench_assets.cells.records import CellRecord
    from bench_assets.decision.documents import CellView
    from bench_assets.driver.instance import StepFailed

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_CANCELLED = 0, 1, 2, 130

EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (KeyboardInterrupt, EXIT_CANCELLED),
    (InputError, EXIT_INVALID),
    (ContainmentError, EXIT_INVALID),
    (WfbenchError, EXIT_FAILED),
)
"""Exit code by exception type, most specific first; anything else is a failed run (1)."""


def exit_code_for(error: BaseException | type[BaseException]) -> int:
    """The exit code of an exception (or exception class), by type: see :data:`EXIT_CODES`."""
    cls = error if isinstance(error, type) else type(error)
    return next((code for base, code in EXIT_CODES if issubclass(cls, base)), EXIT_FAILED)


def fail(message: str, code: int) -> NoReturn:
    """Print ``wfbench: message`` on stderr and exit with ``code``."""
    click.echo(f"wfbench: {message}", err=True)
    sys.exit(code)


def fail_step(e: "StepFailed") -> NoReturn:
    """Exit for a failed Dagster step, with the exit code of the wfbench error it failed with."""
    cls = e.error_class
    fail(f"{e.step}: {e.cls_name}: {e.message}", exit_code_for(cls) if cls else EXIT_FAILED)


def progress(message: str) -> None:
    """One progress line on stderr (stdout stays clean for ``--json``)."""
    click.echo(f"  {message}", err=True)


# -- options shared by several commands ---------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])


def tasks_option(f: F) -> F:
    """``--tasks DIR`` (default ``tasks``), passed as ``tasks_dir``."""
    return click.option(
        "--tasks",
        "tasks_dir",
        default="tasks",
        show_default=True,
        type=click.Path(path_type=Path),
        metavar="DIR",
        help="Benchmark folder: bench.yaml plus one folder per task.",
    )(f)


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json``, passed as ``as_json``; ``help_text`` says what the JSON holds."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def only_tasks_option(help_text: str = "Only this task (repeatable).") -> Callable[[F], F]:
    """``--task ID`` (repeatable), passed as ``only``; see :func:`selected_tasks`."""
    return click.option("--task", "only", multiple=True, help=help_text)


def selected_tasks(bench: Benchmark, only: tuple[str, ...]) -> list[str]:
    """The ``--task`` ids (an unknown id exits 2), or every task when none was given."""
    return [bench.task(t).id for t in only] if only else bench.task_ids()


# -- the instance and the artifact store --------------------------------------------------------


def open_instance() -> "dg.DagsterInstance":
    """The Dagster instance at $DAGSTER_HOME, defaulting to ./dagster_home (exit 2 if absent)."""
    import dagster as dg

    from bench_assets.driver.evolve import quiet_dagster_warnings

    quiet_dagster_warnings()
    if not os.environ.get("DAGSTER_HOME"):
        default = Path("dagster_home").resolve()
        if not (default / "dagster.yaml").is_file():
            fail(
                "DAGSTER_HOME is not set and ./dagster_home/dagster.yaml does not exist; "
                "run from the repository root or export DAGSTER_HOME",
                EXIT_INVALID,
            )
        os.environ["DAGSTER_HOME"] = str(default)
    return dg.DagsterInstance.get()


def artifact_store() -> ArtifactStore:
    """The artifact store: $WFBENCH_ARTIFACTS, else $DAGSTER_HOME/artifacts (see store.py).

    Commands that use the instance call this after :func:`open_instance`, which may set
    $DAGSTER_HOME.
    """
    return ArtifactStore(default_artifact_root())


# -- tables -------------------------------------------------------------------------------------


def cell_row(view: "CellView", current_generation: str | None = None) -> dict[str, Any]:
    """One materialized cell as a ``wfbench cells`` row (also its ``--json`` object).

    ``reused`` counts as evolve does: re-recorded as reused, or carried into
    ``current_generation`` from an earlier one (the planner starts no run for a reused cell).
    """
    r = view.record
    carried = current_generation is not None and r.generation != current_generation
    return {
        **record_row(r),
        "task": view.task,
        "reused": view.materialization.reused or carried,
        "generation": r.generation,
        "source_run_id": view.source_run_id,
        "record_path": view.materialization.record_path,
    }


def record_row(record: "CellRecord") -> dict[str, Any]:
    """A cell record that was never materialized (``grade``, ``try``) as a table row."""
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


def print_cells(rows: list[dict[str, Any]], current_generation: str | None = None) -> None:
    """The human table of cell rows, then a resolved/reused count."""

    def yn(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "no")

    def num(v: float | None, fmt: str) -> str:
        return "null" if v is None else format(v, fmt)

    # Columns as wide as the longest id, so a long SWE-bench instance id keeps the table aligned.
    tw = max([22, *(len(str(r["task"])) for r in rows)])
    aw = max([20, *(len(str(r["arm"])) for r in rows)])
    header = (
        f"{'task':<{tw}} {'arm':<{aw}} {'run':>3} {'verify':>6} {'oracle':>6} {'resolved':>8} "
        f"{'cost $':>8} {'tokens':>8} {'turns':>5}  {'error kind':<18} {'gen':<6} reused"
    )
    click.echo(header)
    click.echo("-" * len(header))
    for r in rows:
        click.echo(
            f"{r['task']:<{tw}} {r['arm']:<{aw}} {r['run']:>3} {yn(r['verify']):>6} "
            f"{yn(r['oracle']):>6} {yn(r['resolved']):>8} {num(r['cost_usd'], '.4f'):>8} "
            f"{num(r['tokens'], 'd'):>8} {num(r['turns'], 'd'):>5}  "
            f"{r['error_kind'] or '-':<18} {r.get('generation') or '-':<6} "
            + (f"yes, run {r['source_run_id']}" if r["reused"] else "no")
        )
    resolved = sum(1 for r in rows if r["resolved"])
    reused = sum(1 for r in rows if r["reused"])
    within = f" into {current_generation}" if current_generation else ""
    click.echo(f"{len(rows)} cell(s): {resolved} resolved, {reused} reused{within}")
