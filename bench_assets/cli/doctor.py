"""``wfbench doctor``: is this machine ready to pay for a generation? Nothing it does is paid.

One line per check, ``ok`` or what to do: the bench loads; bubblewrap contains a process; the
model-API egress path (relay, socket, proxy) is the only way out of a session's sandbox; for a
bench with ``claude-code`` arms, the pinned CLI is installed and answers ``--version``, what the
release brings itself, each arm's session started up to ``system/init`` and stopped there
(permission mode, skills, tools, MCP servers and model, against what the arm declares), the
credentials and the upstream's TLS handshake (:mod:`bench_assets.agents.preflight`, which
``wfbench evolve`` runs too before it pays anything); the Dagster instance and its daemon.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bench_assets.cli.common import EXIT_INVALID, json_option, progress, tasks_option
from bench_assets.kernel.errors import WfbenchError

if TYPE_CHECKING:
    from bench_assets.agents.preflight import Check


def _sandbox() -> "Check":
    from bench_assets.agents.preflight import Check
    from bench_assets.sandbox import process as sandbox

    try:
        sandbox.preflight()
        path, source = sandbox.bwrap_binary()
    except WfbenchError as e:
        return Check(check="sandbox", ok=False, detail=str(e))
    if sandbox.unsafe_mode():
        return Check(
            check="sandbox",
            ok=False,
            detail=f"{sandbox.UNSAFE_ENV}=1: nothing is contained; unset it (evidence made "
            "without the sandbox is not evidence)",
        )
    return Check(
        check="sandbox",
        ok=True,
        detail=f"bubblewrap {path} ({source}) contains a process: no network, read-only "
        "system trees, its own pid namespace",
    )


def _egress() -> "Check":
    from bench_assets.agents.preflight import Check
    from bench_assets.sandbox.egress import preflight

    try:
        preflight()
    except WfbenchError as e:
        return Check(check="egress", ok=False, detail=str(e))
    return Check(
        check="egress",
        ok=True,
        detail="a model-API sandbox reaches the egress proxy through its relay and nothing "
        "else (a public address is unreachable; the proxy refuses other paths)",
    )


def _dagster() -> "list[Check]":
    from bench_assets.agents.preflight import Check
    from bench_assets.driver.runqueue import HEARTBEAT_FRESH_S

    home = os.environ.get("DAGSTER_HOME") or str(Path("dagster_home").resolve())
    if not (Path(home) / "dagster.yaml").is_file():
        return [
            Check(
                check="dagster",
                ok=False,
                detail=f"{home}/dagster.yaml does not exist: run from the repository root "
                "(./dagster_home) or export DAGSTER_HOME=<folder with dagster.yaml>",
            )
        ]
    os.environ["DAGSTER_HOME"] = home
    import dagster as dg

    from bench_assets.driver.evolve import quiet_dagster_warnings

    quiet_dagster_warnings()
    try:
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)
        beats = instance.get_daemon_heartbeats()
    except Exception as e:  # any storage or config failure is the line's finding
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return [
            Check(
                check="dagster",
                ok=False,
                detail=f"the instance in {home} cannot be opened: {first}: fix dagster.yaml or "
                "its storage",
            )
        ]
    storage = type(instance.run_storage).__name__
    checks = [Check(check="dagster", ok=True, detail=f"instance {home} opens ({storage})")]
    beat = beats.get("QUEUED_RUN_COORDINATOR")
    age = time.time() - beat.timestamp if beat is not None else None
    if age is not None and age <= HEARTBEAT_FRESH_S:
        checks.append(
            Check(check="daemon", ok=True, detail=f"dagster-daemon heartbeat {age:.0f}s ago")
        )
        return checks
    daemon = Path(sys.executable).parent / "dagster-daemon"
    if not daemon.is_file():
        checks.append(
            Check(
                check="daemon",
                ok=False,
                detail=f"no dagster-daemon runs and {daemon} is missing, so `wfbench evolve` "
                "cannot start one: reinstall wfbench's environment (`make bootstrap`)",
            )
        )
        return checks
    checks.append(
        Check(
            check="daemon",
            ok=True,
            detail="no dagster-daemon runs now; `wfbench evolve` starts one for its duration "
            f"({daemon}); the weekly schedule needs a long-running one (`make ui` or "
            "`dagster-daemon run`)",
        )
    )
    return checks


@click.command()
@tasks_option
@click.option(
    "--install",
    is_flag=True,
    help="Install the pinned Claude Code release (agents.claude_code.version) if it is missing.",
)
@json_option("Print {ready, checks: [{check, ok, detail}]}.")
def doctor(tasks_dir: Path, install: bool, as_json: bool) -> None:
    """Check, without any model call, that this machine can run the bench: each line is `ok` or
    says what to do (exit 2 when one is not ok).

    Checks: the bench loads; bubblewrap containment; the model-API egress path; for claude-code
    arms, the pinned CLI installed and answering --version (--install installs it), what that
    release brings itself, each arm's session started up to system/init and stopped there
    (permission mode, skills, tools, MCP servers, model against the arm's declaration), the
    credentials and the model API's TLS handshake; the Dagster instance and its daemon.
    `wfbench evolve` runs the same claude-code checks before it pays anything.
    """
    from bench_assets.agents.preflight import (
        Check,
        agent_checks,
        credential_check,
        install_check,
        live_arms,
    )
    from bench_assets.tasks.catalog import load_benchmark

    started = time.monotonic()
    checks: list[Check] = []
    bench = None
    try:
        bench = load_benchmark(tasks_dir)
        arms = live_arms(bench)
        checks.append(
            Check(
                check="bench",
                ok=True,
                detail=f"{tasks_dir}/bench.yaml: {len(bench.config.arms)} arm(s), "
                f"{len(bench.tasks)} task(s); claude-code arms: {', '.join(arms) or 'none'}",
            )
        )
    except WfbenchError as e:
        checks.append(
            Check(check="bench", ok=False, detail=f"{e} (`wfbench validate` lists every issue)")
        )
    contained = _sandbox()
    checks += [contained, _egress()]
    if bench is not None:
        if not live_arms(bench):
            checks.append(
                Check(
                    check="claude-code",
                    ok=True,
                    detail="no arm runs Claude Code (replay and command arms need no CLI): "
                    "nothing to install",
                )
            )
        elif not contained.ok:
            checks += install_check(bench)
            checks.append(credential_check(bench, live_arms(bench)))
        else:
            checks += agent_checks(bench, install=install, progress=progress)
    checks += _dagster()
    ready = all(c.ok for c in checks)
    if as_json:
        click.echo(json.dumps({"ready": ready, "checks": [c.model_dump() for c in checks]}))
    else:
        width = max(len(c.check) for c in checks)
        for c in checks:
            click.echo(f"{'ok' if c.ok else 'FIX':<4} {c.check:<{width}}  {c.detail}")
        verdict = "ready" if ready else "not ready: fix the FIX lines, then run it again"
        click.echo(f"{verdict} ({time.monotonic() - started:.0f}s, no model call)")
    if not ready:
        raise SystemExit(EXIT_INVALID)
