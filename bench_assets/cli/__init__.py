"""``wfbench``: the command line, a thin layer over the core and the Dagster instance.

One module per group of commands: :mod:`.tasks` (validate, schema, pin, sync, inputs),
:mod:`.cells` (cells, grade, try), :mod:`.decision` (decide, explain, report, ledger),
:mod:`.generation` (evolve, plan, apply), :mod:`.suites` (import swebench, export) and
:mod:`.doctor` (is this machine ready); what they share is in :mod:`.common`. Commands that
report data take ``--json``. Dagster is imported only when a command that touches the instance
runs, so importing this package (``wfbench validate``, ``wfbench --help``) stays fast.

Exit codes (README section "The command line"): 0 done; 1 a run failed; 2 invalid input or
configuration, before any paid work; 130 cancelled. The group below maps every wfbench error to its
code through :func:`.common.exit_code_for`.

May import: every room (the driver and Dagster only inside the commands that need them).
"""

import errno
import os
import signal
import sys
from typing import Any

import click

from bench_assets import __version__
from bench_assets.cli import cells, decision, doctor, generation, suites, tasks
from bench_assets.cli.common import EXIT_FAILED, exit_code_for, fail
from bench_assets.kernel.errors import ValidationFailed, WfbenchError
from bench_assets.kernel.gcpause import freeze_before_exit, process_exits_after_command

_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM ends a command like Ctrl-C: stop scheduling, cancel runs, exit 130."""
    raise KeyboardInterrupt


def _storage_message(e: BaseException) -> str | None:
    """One line for a full, read-only or failing disk (ours or Dagster's storage), else None."""
    if isinstance(e, OSError) and e.errno in _STORAGE_ERRNOS:
        where = e.filename or "the artifact store"
        return f"{where}: cannot write ({e.strerror}); free space or fix permissions, then re-run"
    text = f"{type(e).__module__}.{type(e).__name__}: {e}"
    if text.startswith("sqlalchemy.") and any(
        k in text for k in ("disk I/O error", "database or disk is full", "readonly database")
    ):
        home = os.environ.get("DAGSTER_HOME", "dagster_home")
        first = str(e).splitlines()[0][:160]
        return f"{home}: Dagster's storage cannot be written ({first}); free space, then re-run"
    return None


class _Group(click.Group):
    """Turns wfbench errors, a full disk, Ctrl-C and SIGTERM into one line and their exit code."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The console script (``wfbench``, ``python -m bench_assets.cli``): the process exits
        when the command returns, so its heap is frozen first
        (:func:`~bench_assets.kernel.gcpause.freeze_before_exit`), and a bounded command
        (``decide``, ``plan``) leaves the collector off to the end. Tests call ``main.main``."""
        process_exits_after_command()
        try:
            return super().__call__(*args, **kwargs)
        finally:
            freeze_before_exit()

    def invoke(self, ctx: click.Context) -> Any:
        previous = signal.signal(signal.SIGTERM, _terminate)
        # Started with SIGINT ignored (a script's background job): Dagster copies the SIGINT
        # handler onto SIGTERM while a run executes, so an ignored SIGINT would make SIGTERM
        # ignored too. Cancelling must always work.
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return super().invoke(ctx)
        except ValidationFailed as e:
            click.echo(str(e), err=True)  # already one line per problem, no prefix
            sys.exit(exit_code_for(e))
        except WfbenchError as e:
            fail(str(e), exit_code_for(e))
        except KeyboardInterrupt as e:
            fail("cancelled", exit_code_for(e))
        except Exception as e:
            message = _storage_message(e)
            if message is None:
                raise
            fail(message, EXIT_FAILED)
        finally:
            signal.signal(signal.SIGTERM, previous)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wfbench")
def main() -> None:
    """Benchmark coding-agent skill text as Dagster assets.

    Typical flow: `wfbench validate` (check tasks/), `wfbench sync` (task partitions and pool
    limits into the Dagster instance), `wfbench inputs` (bindings, oracle snapshots and sanitized
    graphs for every task), then `wfbench plan` and `wfbench evolve` (one generation: run or reuse
    cells, decide, report, append to the ledger) and `wfbench explain` (why). The instance is
    $DAGSTER_HOME (default ./dagster_home); artifacts live in $WFBENCH_ARTIFACTS (default
    $DAGSTER_HOME/artifacts).

    Exit codes: 0 done, 1 a run failed, 2 invalid input or configuration, 130 cancelled.
    """


for _command in (
    tasks.validate,
    tasks.schema,
    tasks.pin,
    tasks.sync,
    tasks.inputs,
    cells.cells,
    cells.grade,
    cells.try_cell,
    decision.decide,
    decision.explain,
    decision.report,
    decision.ledger,
    generation.evolve,
    generation.plan,
    generation.apply_cmd,
    suites.import_group,
    suites.export,
    doctor.doctor,
):
    main.add_command(_command)

__all__ = ["main"]
