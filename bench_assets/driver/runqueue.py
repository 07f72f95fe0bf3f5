"""How the driver pays for work: materializations as Dagster runs, through one interface.

:class:`QueueExecutor` is the production path. Each job (one task's inputs, one cell) becomes a
run of the code location's asset job, submitted to the instance's run coordinator — with
``dagster_home/dagster.yaml`` that is the ``QueuedRunCoordinator``, so the ``agent_sessions`` and
``graph_build`` pools bound concurrency across every source (a generation, the UI, a sensor) and
the configured run launcher starts the runs (a local subprocess by default; Kubernetes, Docker or
ECS in a deployment, see ``deploy/``). A generation's runs carry the ``wfbench/generation`` tag, so
the UI lists them live and cancelling one there cancels the cell. The runs need a daemon to leave
the queue: when no healthy ``dagster-daemon`` heartbeats on the instance, the executor starts one
for its own duration (through :func:`bench_assets.sandbox.process.start_service`) and stops it at
the end.

:class:`InProcessExecutor` materializes each job in this process, one after another — for tests
and debugging (``wfbench evolve --in-process``): same assets, same records, no queue.

Both answer :meth:`submit` with a run id and :meth:`poll` with the jobs that finished since the
last call, so the generation loop (:mod:`bench_assets.driver.evolve`) does not know which it has.

What a job is and how one ended (:class:`~bench_assets.driver.runs.Job`,
:class:`~bench_assets.driver.runs.Finished`) are :mod:`bench_assets.driver.runs`', below both
executors and the batch modules they run (:mod:`~bench_assets.driver.cellbatch`,
:mod:`~bench_assets.driver.inputs`), so no import runs back from those to this module.
"""

import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import dagster as dg
import yaml

from bench_assets.driver import services
from bench_assets.driver.cellbatch import batch_job, batch_outcomes
from bench_assets.driver.instance import StepFailed, materialize

# Finished and Job are imported under their own names so that they stay this module's too:
# driver/paying.py reads them here with the Executor they go with.
from bench_assets.driver.runs import (
    Finished,
    Job,
    RunWatch,
    assets_by_name,
    cancel_failure,
    run_failure,
)
from bench_assets.kernel.fsutil import atomic_write_text
from bench_assets.sandbox import process as sandbox

ASSET_JOB = "__ASSET_JOB"
REPOSITORY = "__repository__"
LOCATION = "bench_assets"
DEFS_MODULE = "bench_assets.definitions"
DAEMON_START_TIMEOUT_S = 60.0
QUIET_WARNINGS = "ignore::Warning:dagster._core.definitions.sensor_definition"
_ENV_SET = (services.TOKEN_ENV, "WFBENCH_TASKS", "WFBENCH_ARTIFACTS", "PYTHONWARNINGS")
"""Variables :meth:`QueueExecutor.__enter__` sets in this process; ``__exit__`` restores them."""
HEARTBEAT_FRESH_S = 75.0
"""A daemon's heartbeat (every 30 s) older than this means no daemon is dequeuing."""
DAEMON_RECHECK_S = 30.0
POLL_INTERVAL_S = 0.5


class Executor(Protocol):
    """What the generation loop needs from a way of running jobs."""

    def submit(self, job: Job) -> str: ...

    def poll(self, timeout_s: float) -> list[Finished]: ...

    def pending(self) -> int: ...

    def cancel_all(self) -> list[str]: ...


def _run_config(job: Job, tasks_dir: str, artifact_root: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "resources": {"bench": {"config": {"tasks_dir": tasks_dir, "artifact_root": artifact_root}}}
    }
    if job.op_config:
        cfg["ops"] = {name: {"config": dict(c)} for name, c in job.op_config.items()}
    return cfg


class InProcessExecutor:
    """Materialize jobs in this process, one per :meth:`poll`, in submission order (tests)."""

    def __init__(self, instance: dg.DagsterInstance, *, tasks_dir: str, artifact_root: str):
        self.instance = instance
        self.tasks_dir = tasks_dir
        self.artifact_root = artifact_root
        self._queue: list[Job] = []

    def __enter__(self) -> "InProcessExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, job: Job) -> str:
        """Queue the job (a batch's cells one by one); it runs at a later :meth:`poll` (no run
        id yet)."""
        self._queue.extend(job.cells or [job])
        return ""

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout_s: float) -> list[Finished]:
        """Run the next queued job to its end."""
        from bench_assets.defs.resources import BenchResource

        if not self._queue:
            return []
        job = self._queue.pop(0)
        resources = {
            "bench": BenchResource(tasks_dir=self.tasks_dir, artifact_root=self.artifact_root)
        }
        try:
            if job.job is not None:
                run_named_job(self.instance, job, resources)
            else:
                materialize(
                    self.instance,
                    assets_by_name(self.tasks_dir, job.assets),
                    resources,
                    partition_key=job.partition,
                    op_config={k: dict(v) for k, v in job.op_config.items()} or None,
                    tags=dict(job.tags) or None,
                )
            failure = None
        except StepFailed as e:
            failure = e
        runs = self.instance.get_runs(limit=1)
        run_id = runs[0].run_id if runs else ""
        return [Finished(job, run_id, failure is None, failure)]

    def cancel_all(self) -> list[str]:
        """Drop every job not yet run."""
        dropped = [j.label for j in self._queue]
        self._queue.clear()
        return dropped


class QueueExecutor:
    """Submit jobs to the instance's run coordinator and follow their runs.

    Args:
        instance: The Dagster instance (its ``dagster.yaml`` chooses coordinator and launcher).
        tasks_dir: The benchmark directory, passed to every run as resource config and to the
            code location as ``WFBENCH_TASKS`` (the cell partitions come from its bench.yaml).
        artifact_root: The shared artifact root every run writes to.
        workspace: A workspace file naming the code location (e.g. a gRPC code server in a
            deployment); default: the ``bench_assets.definitions`` module, loaded locally.
        start_daemon: Start a daemon for the executor's lifetime when none is healthy.
    """

    def __init__(
        self,
        instance: dg.DagsterInstance,
        *,
        tasks_dir: str,
        artifact_root: str,
        workspace: Path | None = None,
        start_daemon: bool = True,
        progress: Any = None,
    ):
        self.instance = instance
        self.tasks_dir = tasks_dir
        self.artifact_root = artifact_root
        self.workspace = workspace
        self.start_daemon = start_daemon
        self.progress = progress or (lambda m: None)
        self._jobs: dict[str, Job] = {}
        self._reported: dict[str, set[str]] = {}
        # Runs read in bulk at a cost that follows what changed (9,000 cells at 1,000 tasks).
        self._watch_jobs = RunWatch(instance)
        self._watch_claims = RunWatch(instance)
        self._plans: dict[tuple[str, ...], Any] = {}
        self._daemon: sandbox.Service | None = None
        self._wpc: Any = None
        self._ctx: Any = None
        self._checked = time.monotonic()
        self._workspace_path = Path()
        self._record: services.DriverRecord | None = None
        self._distrusted: str | None = None
        self._previous_env: dict[str, str | None] = {}
        self._signals = services.SignalPipe()

    # -- lifecycle -------------------------------------------------------------------------

    def _workspace_file(self) -> Path:
        """The workspace both this process and a daemon it starts load (same location name)."""
        if self.workspace is not None:
            return self.workspace
        path = Path(self.instance.root_directory) / "wfbench-workspace.yaml"
        body = {
            "load_from": [
                {
                    "python_module": {
                        "module_name": DEFS_MODULE,
                        "working_directory": os.getcwd(),
                        "location_name": LOCATION,
                    }
                }
            ]
        }
        atomic_write_text(path, yaml.safe_dump(body, sort_keys=False))
        return path

    def __enter__(self) -> "QueueExecutor":
        from dagster._core.workspace.context import WorkspaceProcessContext

        root = self.instance.root_directory
        previous = services.end_orphaned(root, self.progress)
        self._distrusted = previous.dead_daemon() if previous is not None else None
        # Every process started from here on (code servers, daemon, run workers) carries the
        # token, so a next generation can end them if this one is killed (services module).
        token = services.new_token()
        # What this sets in the process environment is put back on exit (a test process, or a
        # CLI that opens a second executor, must not inherit another suite's tasks folder).
        self._previous_env = {k: os.environ.get(k) for k in _ENV_SET}
        # A Ctrl-C whose KeyboardInterrupt was dropped (raised inside SQLAlchemy's
        # garbage-collection callback while polling) is raised again at the next poll.
        self._signals.open()
        os.environ[services.TOKEN_ENV] = token
        self._record = services.DriverRecord(
            token=token, pid=os.getpid(), started=services.start_time(os.getpid())
        )
        services.save(root, self._record)
        os.environ["WFBENCH_TASKS"] = self.tasks_dir
        if self.artifact_root:
            os.environ["WFBENCH_ARTIFACTS"] = self.artifact_root
        from dagster._core.workspace.load_target import WorkspaceFileTarget

        self._workspace_path = self._workspace_file()
        # The daemon (its own process and code server) starts while this process loads the code
        # location: both are seconds of imports, tens of seconds on a loaded machine.
        if self.start_daemon and not self.daemon_healthy():
            self._spawn_daemon()
        # The code server it starts inherits this environment: keep Dagster's notice about a beta
        # parameter of its own sensors and its INFO lines off the user's terminal.
        os.environ.setdefault("PYTHONWARNINGS", QUIET_WARNINGS)
        self._wpc = WorkspaceProcessContext(
            self.instance,
            WorkspaceFileTarget([str(self._workspace_path)]),
            code_server_log_level="WARNING",
        )
        self._wpc.__enter__()
        self._ctx = self._wpc.create_request_context()
        error = self._ctx.get_code_location_error(LOCATION)
        if error is not None:
            self.__exit__(None, None, None)
            raise StepFailed("code location", "CodeLocationError", error.message.strip())
        if self._daemon is not None:
            try:
                self._await_daemon()
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self._jobs:
            # Ctrl-C, SIGTERM or a failure: nothing submitted may outlive the generation.
            self.cancel_all()
        if self._daemon is not None:
            self._daemon.stop()
            self._daemon = None
        if self._wpc is not None:
            self._wpc.__exit__(exc_type, exc, tb)
            self._wpc = None
        if self._record is not None:
            services.save(
                self.instance.root_directory, self._record.model_copy(update={"ended": True})
            )
            self._record = None
        self._signals.close()
        for key, value in self._previous_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._previous_env = {}

    def daemon_healthy(self) -> bool:
        """A daemon dequeues this instance's runs right now.

        Dagster's own health check tolerates a heartbeat 30 minutes old; a daemon that died a
        minute ago must not be trusted with a generation, so a heartbeat counts only while it is
        younger than two heartbeat intervals and a margin.
        """
        beat = self.instance.get_daemon_heartbeats().get("QUEUED_RUN_COORDINATOR")
        if beat is None or time.time() - beat.timestamp > HEARTBEAT_FRESH_S:
            return False
        # The fresh heartbeat of a daemon the last generation started and that is gone (it
        # stopped with that generation, or died with it) is not a daemon.
        return self._distrusted is None or beat.daemon_id != self._distrusted

    def _daemon_log(self) -> Path:
        return Path(self.instance.root_directory) / "wfbench-logs" / "daemon.log"

    def _start_daemon(self) -> None:
        self._spawn_daemon()
        self._await_daemon()

    def _spawn_daemon(self) -> None:
        exe = Path(sys.executable).parent / "dagster-daemon"
        env = dict(os.environ)
        env["DAGSTER_HOME"] = str(self.instance.root_directory)
        log = self._daemon_log()
        self.progress(f"starting a dagster-daemon for this generation (log: {log})")
        self._daemon = sandbox.start_service(
            [str(exe), "run", "-w", str(self._workspace_path)], env=env, cwd=Path.cwd(), log=log
        )

    def _await_daemon(self) -> None:
        """Wait until the daemon :meth:`_spawn_daemon` started heartbeats (fail if it exits)."""
        assert self._daemon is not None
        log = self._daemon_log()
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        while not self.daemon_healthy():
            if not self._daemon.alive():
                raise StepFailed(
                    "daemon", "DaemonError", f"dagster-daemon exited at start; see {log}"
                )
            if time.monotonic() > deadline:
                raise StepFailed(
                    "daemon", "DaemonError", f"dagster-daemon not healthy in 60 s; see {log}"
                )
            time.sleep(0.5)
        beat = self.instance.get_daemon_heartbeats().get("QUEUED_RUN_COORDINATOR")
        if self._record is not None and beat is not None:
            self._record = self._record.model_copy(update={"daemon_id": beat.daemon_id})
            services.save(self.instance.root_directory, self._record)

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: Job) -> str:
        """Create the run and hand it to the run coordinator (queued until a slot is free)."""
        from dagster._core.definitions.selector import JobSubsetSelector

        keys = frozenset(dg.AssetKey(a) for a in job.assets) if job.job is None else None
        location = self._ctx.get_code_location(LOCATION)
        repo = location.get_repository(REPOSITORY)
        plan_key = job.assets if job.job is None else (job.job,)
        if plan_key not in self._plans:
            selector = JobSubsetSelector(
                location_name=location.name,
                repository_name=repo.name,
                job_name=job.job or ASSET_JOB,
                op_selection=None,
                asset_selection=keys,
            )
            remote_job = location.get_job(selector)
            plan = location.get_execution_plan(
                remote_job,
                _run_config(job, self.tasks_dir, self.artifact_root),
                step_keys_to_execute=None,
                known_state=None,
                instance=self.instance,
            )
            self._plans[plan_key] = (remote_job, plan.execution_plan_snapshot)
        remote_job, snapshot = self._plans[plan_key]
        tags = {**remote_job.tags, **dict(job.tags)}
        if job.partition is not None:
            tags["dagster/partition"] = job.partition
        run = self.instance.create_run(
            job_name=remote_job.name,
            run_id=None,
            run_config=_run_config(job, self.tasks_dir, self.artifact_root),
            resolved_op_selection=remote_job.resolved_op_selection,
            step_keys_to_execute=snapshot.step_keys_to_execute,
            op_selection=None,
            status=None,
            root_run_id=None,
            parent_run_id=None,
            tags=tags,
            job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=keys,
            asset_check_selection=None,
            asset_graph=repo.asset_graph,
        )
        self.instance.submit_run(run.run_id, self._ctx)
        self._jobs[run.run_id] = job
        return run.run_id

    def pending(self) -> int:
        return len(self._jobs)

    def poll(self, timeout_s: float) -> list[Finished]:
        """Wait up to ``timeout_s`` for at least one submitted run to end; return those that did."""
        deadline = time.monotonic() + timeout_s
        if (
            self.start_daemon
            and self._daemon is None
            and time.monotonic() - self._checked > DAEMON_RECHECK_S
        ):
            self._checked = time.monotonic()
            if not self.daemon_healthy():
                self._start_daemon()  # the daemon we relied on stopped heartbeating
        while self._jobs:
            if self._signals.interrupted():
                raise KeyboardInterrupt
            runs = list(self._watch_jobs.read(self._jobs).values())
            ended = [r for r in runs if r.is_finished]
            batches = {rid: j for rid, j in self._jobs.items() if j.cells}
            # A batch stays pending after it ended until each of its cells is answered: another
            # batch may still be paying one it took (cellbatch module).
            out, again, closed = batch_outcomes(
                self.instance,
                batches,
                self._reported,
                {r.run_id: r for r in runs if r.run_id in batches},
                self._watch_claims,
            )
            out += [self._finished(r) for r in ended if r.run_id not in batches]
            for run_id in [r.run_id for r in ended if r.run_id not in batches] + closed:
                self._jobs.pop(run_id, None)
            if again:  # cells a dead batch never started: paid nothing, submitted again
                self.submit(again[0] if len(again) == 1 else batch_job(again))
            if out:
                return out
            if self._daemon is not None and not self._daemon.alive():
                raise StepFailed(
                    "daemon", "DaemonError", "the dagster-daemon started for this run died"
                )
            if time.monotonic() >= deadline:
                return []
            time.sleep(POLL_INTERVAL_S)
        return []

    def _finished(self, run: Any) -> Finished:
        job = self._jobs[run.run_id]
        if run.status == dg.DagsterRunStatus.SUCCESS:
            return Finished(job, run.run_id, True)
        if run.status == dg.DagsterRunStatus.CANCELED:
            return Finished(
                job,
                run.run_id,
                False,
                cancel_failure(run.run_id),
                canceled=True,
            )
        return Finished(job, run.run_id, False, run_failure(self.instance, run.run_id))

    def cancel_all(self) -> list[str]:
        """Cancel every run still queued or running (their sessions' process groups end)."""
        ids = list(self._jobs)
        for run_id in ids:
            try:
                self.instance.run_coordinator.cancel_run(run_id)
            except Exception:  # a run that finished meanwhile, or a launcher that cannot reach it
                continue
        return ids


def run_named_job(instance: dg.DagsterInstance, job: Job, resources: dict[str, Any]) -> None:
    """Execute a (non-asset) job of the code location in this process; raise like
    :func:`~bench_assets.driver.instance.materialize` on a failed step."""
    from bench_assets.driver.inputs import INPUT_BATCH_JOB, input_batch
    from bench_assets.driver.instance import QUIET, _interrupts_kept, _run

    jobs = {INPUT_BATCH_JOB: input_batch}
    run_config: dict[str, Any] = dict(QUIET)
    if job.op_config:
        run_config["ops"] = {name: {"config": dict(c)} for name, c in job.op_config.items()}
    with _interrupts_kept():
        result = jobs[str(job.job)].execute_in_process(
            run_config=run_config,
            instance=instance,
            resources=resources,
            tags=dict(job.tags) or None,
            raise_on_error=False,
        )
    _run(result)
