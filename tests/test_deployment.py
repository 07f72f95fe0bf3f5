"""A multi-process deployment over PostgreSQL: the shape of wfbench on several machines.

Four separate processes share nothing but the PostgreSQL database and the artifact root, exactly as
they would on separate machines:

* a code server (``dagster code-server start``, gRPC on 127.0.0.1) that loads
  ``bench_assets.definitions`` and launches every run as its own subprocess (DefaultRunLauncher);
* ``dagster-webserver`` and ``dagster-daemon run``, both reading a workspace that points at the
  code server through ``grpc_server`` (they never import the project's code themselves);
* this test process, which syncs the task partitions and pool limits (``wfbench sync``) and reads
  the results back, as an operator's laptop would.

Runs are launched as the UI launches them (GraphQL ``launchPipelineExecution``, dagster-notes Q7),
wait in the ``QueuedRunCoordinator`` and are dequeued by the daemon; the ``agent_sessions`` pool
(limit 1, run granularity) must keep the task's three cells strictly one after another. The second
test runs a whole generation with ``wfbench evolve --workspace`` against the same shape.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from bench_assets.decision.documents import load_cell
from bench_assets.defs.resources import latest_metadata
from bench_assets.driver.cellbatch import CELL_BATCH_TAG
from bench_assets.driver.inputs import BATCH_TAG, INPUT_BATCH_JOB
from bench_assets.driver.instance import sync_instance
from bench_assets.driver.transaction import GEN_TAG
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import write_yaml
from tests.pg import PgServer, free_port, pg_server  # noqa: F401  (the session fixture)
from tests.test_dagster_cells import replay_bench

pytestmark = pytest.mark.slow

LOCATION = "bench_assets"
SERVER_START_S = 180.0
RUNS_S = 420.0
BIN = Path(sys.executable).parent

LAUNCH = """
mutation LaunchPipelineExecution($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}
"""

WORKSPACE = """
{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""

RELOAD = """
mutation Reload($name: String!) {
  reloadRepositoryLocation(repositoryLocationName: $name) { __typename }
}
"""

DAEMONS = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }"


@dataclass
class Service:
    name: str
    proc: subprocess.Popen
    log: Path


@dataclass
class Deployment:
    """Separately started server processes, their logs, and their teardown."""

    base: Path
    env: dict[str, str]
    services: list[Service] = field(default_factory=list)

    def start(self, name: str, argv: list[str], cwd: Path) -> Service:
        log = self.base / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: teardown reaches its children
            )
        service = Service(name, proc, log)
        self.services.append(service)
        return service

    def check_alive(self) -> None:
        for s in self.services:
            if s.proc.poll() is not None:
                raise RuntimeError(f"{s.name} exited early with code {s.proc.returncode}")

    def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL whatever is left after a bounded wait."""
        for s in reversed(self.services):
            _signal_group(s.proc, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for s in reversed(self.services):
            try:
                s.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(s.proc, signal.SIGKILL)  # also any run worker left in the group
            s.proc.wait(timeout=10)

    def logs(self, limit: int = 6000) -> str:
        parts = []
        for s in self.services:
            text = s.log.read_text(errors="replace") if s.log.exists() else ""
            parts.append(f"----- {s.name} (exit {s.proc.poll()}) : last {limit} chars -----")
            parts.append(text[-limit:])
        return "\n".join(parts)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_until(what: str, check: Callable[[], Any], timeout_s: float, dep: Deployment) -> Any:
    """Poll ``check`` until it returns something truthy; fail when a service dies or time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        dep.check_alive()
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


@dataclass
class GraphQL:
    url: str

    def __call__(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            out = json.loads(resp.read())
        if out.get("errors"):
            raise AssertionError(f"GraphQL errors: {out['errors']}")
        return dict(out["data"])

    def try_call(self, query: str) -> dict[str, Any] | None:
        try:
            return self(query)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def launch(
        self,
        assets: list[str],
        *,
        partition: str | None = None,
        run_config: dict[str, Any] | None = None,
    ) -> str:
        """Launch a run of ``assets`` as the UI's Materialize button does; returns its run id."""
        tags = [{"key": "dagster/partition", "value": partition}] if partition else []
        params = {
            "mode": "default",
            "runConfigData": json.dumps(run_config or {}),
            "executionMetadata": {"tags": tags},
            "selector": {
                "repositoryLocationName": LOCATION,
                "repositoryName": "__repository__",
                "pipelineName": "__ASSET_JOB",
                "assetSelection": [{"path": [a]} for a in assets],
                "assetCheckSelection": [],
            },
        }
        res = self(LAUNCH, {"executionParams": params})["launchPipelineExecution"]
        assert res["__typename"] == "LaunchRunSuccess", res
        return str(res["run"]["runId"])


def code_server_up(port: int) -> bool:
    """Whether the gRPC code server answers a ping (it then serves the loaded location)."""
    from dagster._grpc.client import DagsterGrpcClient

    try:
        return DagsterGrpcClient(port=port, host="127.0.0.1").ping("wfbench")["echo"] == "wfbench"
    except Exception:  # not listening yet: grpc raises its own errors
        return False


def location_loaded(gql: GraphQL) -> bool:
    """Whether the webserver serves the code location; a load error other than an unreachable
    server (which a reload, like the UI's "Reload" button, retries) fails at once."""
    data = gql.try_call(WORKSPACE)
    if not data:
        return False
    for entry in data["workspaceOrError"].get("locationEntries", []):
        loaded = entry["locationOrLoadError"]
        if entry["name"] == LOCATION and loaded:
            if loaded["__typename"] == "PythonError":
                if "Unreachable" not in loaded["message"]:
                    raise RuntimeError(f"code location failed to load: {loaded['message']}")
                gql(RELOAD, {"name": LOCATION})
                return False
            return loaded["__typename"] == "RepositoryLocation"
    return False


def daemon_healthy(gql: GraphQL) -> bool:
    data = gql.try_call(DAEMONS)
    if not data:
        return False
    statuses = data["instance"]["daemonHealth"]["allDaemonStatuses"]
    return any(s["daemonType"] == "QUEUED_RUN_COORDINATOR" and s["healthy"] for s in statuses)


def wait_for_runs(
    instance: dg.DagsterInstance, run_ids: list[str], dep: Deployment
) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        runs = {r: instance.get_run_by_id(r) for r in run_ids}
        if all(run is not None and run.is_finished for run in runs.values()):
            return runs
        return None

    runs = wait_until(f"runs {run_ids} to finish", done, RUNS_S, dep)
    bad = {
        r: run.status.value for r, run in runs.items() if run.status != dg.DagsterRunStatus.SUCCESS
    }
    assert not bad, f"runs did not succeed: {bad}"
    return runs


def assert_queued_then_started(instance: dg.DagsterInstance, run_ids: list[str]) -> None:
    """Each run was enqueued and started only after it left the queue (the webserver and the
    generation driver only enqueue; the daemon launches)."""
    for rid in run_ids:
        enqueued, starting = (
            instance.get_records_for_run(rid, of_type=kind).records
            for kind in (dg.DagsterEventType.RUN_ENQUEUED, dg.DagsterEventType.RUN_STARTING)
        )
        assert enqueued and starting, rid
        assert enqueued[0].storage_id < starting[0].storage_id, rid


def assert_one_at_a_time(
    instance: dg.DagsterInstance, run_ids: list[str], *, all_queued_first: bool = False
) -> None:
    """No two of these runs overlapped (the agent_sessions pool has one slot)."""
    records = instance.get_run_records(dg.RunsFilter(run_ids=run_ids))
    spans = sorted((r.start_time, r.end_time) for r in records)
    assert len(spans) == len(run_ids) and all(s and e for s, e in spans), spans
    for (_, prev_end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= prev_end, f"two agent sessions overlapped: {spans}"
    if all_queued_first:
        assert all(r.create_timestamp.timestamp() < spans[0][1] for r in records)


def generation_cell_started(instance: dg.DagsterInstance, generation: str) -> Any:
    """The record of a cell run of ``generation`` that is running now, if any."""
    for r in instance.get_run_records(
        dg.RunsFilter(tags={GEN_TAG: generation}, statuses=[dg.DagsterRunStatus.STARTED])
    ):
        if "dagster/partition/cell" in r.dagster_run.tags:
            return r
    return None


def instance_yaml(pg: PgServer, db: str) -> dict[str, Any]:
    """The deployment's dagster.yaml: PostgreSQL storage, the run queue, pools per run."""
    return {
        "telemetry": {"enabled": False},
        "storage": pg.storage_config(db),
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"dequeue_interval_seconds": 1},
        },
        "run_launcher": {"module": "dagster", "class": "DefaultRunLauncher"},
        "concurrency": {
            "runs": {"max_concurrent_runs": 8},
            "pools": {"granularity": "run", "default_limit": 2},
        },
    }


@contextlib.contextmanager
def deployment(base: Path, pg: PgServer) -> Iterator[tuple[Deployment, dict[str, Any]]]:
    """PostgreSQL + code server + webserver + daemon over one artifact root.

    Always torn down; on any failure inside the block every service's log tail is printed.
    """
    work = base / "work"
    root = replay_bench(work)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["limits"] = {"agent_sessions": 1, "graph_builds": 1}
    write_yaml(root / "bench.yaml", data)
    home = base / "home"
    home.mkdir()
    db = pg.create_database("deploy")
    write_yaml(home / "dagster.yaml", instance_yaml(pg, db))
    artifacts = base / "shared-artifacts"
    logs = base / "logs"
    logs.mkdir()
    code_port, web_port = free_port(), free_port()
    grpc = {"host": "127.0.0.1", "port": code_port, "location_name": LOCATION}
    write_yaml(base / "workspace.yaml", {"load_from": [{"grpc_server": grpc}]})
    env = {
        **{k: v for k, v in os.environ.items() if k != "WFBENCH_IN_PROCESS"},
        "DAGSTER_HOME": str(home),
        "WFBENCH_ARTIFACTS": str(artifacts),
        "WFBENCH_TASKS": str(root),
        "PYTHONUNBUFFERED": "1",
    }
    dep = Deployment(logs, env)
    info = {
        "home": home,
        "root": root,
        "artifacts": artifacts,
        "db": db,
        "workspace": base / "workspace.yaml",
        "graphql": GraphQL(f"http://127.0.0.1:{web_port}/graphql"),
    }
    try:
        dep.start(
            "code-server",
            [
                str(BIN / "dagster"),
                "code-server",
                "start",
                "-h",
                "127.0.0.1",
                "-p",
                str(code_port),
                "-m",
                "bench_assets.definitions",
                "--location-name",
                LOCATION,
                "--use-python-environment-entry-point",
            ],
            cwd=work,  # BenchResource's default tasks_dir "tasks" resolves here, in every run
        )
        wait_until(
            "the code server to answer", lambda: code_server_up(code_port), SERVER_START_S, dep
        )
        ws = ["-w", str(base / "workspace.yaml")]
        dep.start(
            "webserver",
            [str(BIN / "dagster-webserver"), *ws, "-h", "127.0.0.1", "-p", str(web_port)],
            cwd=base,
        )
        dep.start("daemon", [str(BIN / "dagster-daemon"), "run", *ws], cwd=base)
        yield dep, info
    except BaseException:
        print(dep.logs())
        raise
    finally:
        dep.stop()


def test_ui_launched_cells_run_through_the_daemon_queue_one_session_at_a_time(
    tmp_path: Path,
    pg_server: PgServer,  # noqa: F811
) -> None:
    with (
        deployment(tmp_path, pg_server) as (dep, info),
        dg.DagsterInstance.from_config(str(info["home"])) as instance,
    ):
        gql: GraphQL = info["graphql"]
        root: Path = info["root"]
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        sync_instance(instance, load_benchmark(root))  # `wfbench sync`: partitions, pool limits
        assert instance.event_log_storage.get_concurrency_info("agent_sessions").slot_count == 1

        wait_until("the webserver to load the code location", lambda: location_loaded(gql),
                   SERVER_START_S, dep)  # fmt: skip
        wait_until("the daemon's run queue to heartbeat", lambda: daemon_healthy(gql),
                   SERVER_START_S, dep)  # fmt: skip

        # Inputs, as a user would materialize them from the UI.
        wait_for_runs(
            instance,
            [
                gql.launch(
                    ["task_bindings", "oracle_snapshots", "sanitized_graphs"], partition="alpha"
                ),
                gql.launch(["incumbent_skills"]),
                gql.launch(
                    ["candidate_overlay"],
                    run_config={"ops": {"candidate_overlay": {"config": {"candidate": "c1"}}}},
                ),
            ],
            dep,
        )

        # One task's cells, all launched at once; the pool must run them one at a time.
        cells = {
            "baseline.r0": "comparator_cells",
            "workflow.r0": "comparator_cells",
            "cand.r0": "candidate_cells",
        }
        keys = {c: str(dg.MultiPartitionKey({"task": "alpha", "cell": c})) for c in cells}
        run_ids = {c: gql.launch([cells[c]], partition=keys[c]) for c in cells}
        wait_for_runs(instance, list(run_ids.values()), dep)

        # Every run was queued, and the daemon started them one at a time although all three
        # were queued before the first one ended.
        assert_queued_then_started(instance, list(run_ids.values()))
        assert_one_at_a_time(instance, list(run_ids.values()), all_queued_first=True)

        # The records exist in the shared artifact root and say what each arm did.
        for cell, asset in cells.items():
            md = latest_metadata(instance, asset, keys[cell])
            assert md["run_id"] == run_ids[cell]
            view = load_cell("alpha", cell, asset, md)
            assert view is not None, f"{asset}[{cell}]: record missing: {md}"
            record_path = Path(view.materialization.record_path).resolve()
            assert record_path.is_relative_to(info["artifacts"].resolve()), record_path
            assert not view.materialization.reused
            assert view.record.resolved is (cell != "baseline.r0"), (cell, view.record)


def test_wfbench_evolve_pays_a_generation_through_the_deployments_queue(
    tmp_path: Path,
    pg_server: PgServer,  # noqa: F811
) -> None:
    """``wfbench evolve --workspace`` against the deployment: the generation's input and cell runs
    go to the same queue, the deployment's daemon launches them through the code server, and the
    pool still holds the cells to one at a time."""
    with (
        deployment(tmp_path, pg_server) as (dep, info),
        dg.DagsterInstance.from_config(str(info["home"])) as instance,
    ):
        root: Path = info["root"]
        gql: GraphQL = info["graphql"]
        wait_until("the webserver to load the code location", lambda: location_loaded(gql),
                   SERVER_START_S, dep)  # fmt: skip
        wait_until("the daemon's run queue to heartbeat", lambda: daemon_healthy(gql),
                   SERVER_START_S, dep)  # fmt: skip
        proc = subprocess.Popen(
            [str(BIN / "wfbench"), "evolve", "--tasks", str(root), "--json",
             "--workspace", str(info["workspace"])],
            env=dep.env, cwd=root.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        # While a generation cell holds the pool's one slot, a user re-materializes one cell
        # partition of the same task from the UI: it must wait in the queue for the slot.
        busy = wait_until(
            "a generation cell run to start",
            lambda: generation_cell_started(instance, "g0001") or proc.poll() is not None,
            RUNS_S,
            dep,
        )
        assert busy is not True, "the generation ended before any of its cells was seen running"
        ui_key = str(dg.MultiPartitionKey({"task": "alpha", "cell": "workflow.r0"}))
        ui_run = gql.launch(["comparator_cells"], partition=ui_key)
        try:
            out, err = proc.communicate(timeout=RUNS_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"evolve did not finish in {RUNS_S} s: {err[-4000:]}")
        evolve = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        assert evolve.returncode == 0, evolve.stderr[-4000:]
        body = json.loads(evolve.stdout)
        assert (body["generation"], body["candidate"]) == ("g0001", "c1"), body
        assert body["decision"] and not body["aborted"], body
        assert (body["paid_cells"], body["reused_cells"]) == (3, 0), body
        assert "starting a dagster-daemon" not in evolve.stderr, "the deployment's daemon serves"
        generation = instance.get_runs(filters=dg.RunsFilter(tags={"wfbench/generation": "g0001"}))
        # Inputs (one queued `input_batch` run for the suite's one task, whose per-task run it
        # tags with its own id) and cells are queued runs; the cheap unpartitioned steps and the
        # decision are materialized in the driver's process.
        cell_runs = [r.run_id for r in generation if "dagster/partition/cell" in r.tags]
        input_runs = [r.run_id for r in generation if r.job_name == INPUT_BATCH_JOB]
        assert len(cell_runs) == 3 and len(input_runs) == 1, [r.tags for r in generation]
        batched = [r for r in generation if r.tags.get(BATCH_TAG) == input_runs[0]]
        assert [r.tags["dagster/partition"] for r in batched] == ["alpha"], [
            r.tags for r in batched
        ]
        # A cell's run is queued itself, or is an in-process run of a queued cell_batch run.
        cell_queued = sorted(
            {r.tags.get(CELL_BATCH_TAG, r.run_id) for r in generation if r.run_id in cell_runs}
        )
        assert_queued_then_started(instance, cell_queued + input_runs + [ui_run])
        wait_for_runs(instance, [ui_run], dep)
        # The UI's run was queued while a generation cell ran, and started only when the slot
        # was free: no two agent sessions overlapped, whoever launched them.
        assert_one_at_a_time(instance, cell_runs + [ui_run])
        ui = instance.get_run_record_by_id(ui_run)
        assert busy.start_time is not None and ui.create_timestamp.timestamp() > busy.start_time
        assert ui.start_time >= instance.get_run_record_by_id(busy.dagster_run.run_id).end_time
        assert GEN_TAG not in ui.dagster_run.tags, "the UI run is not part of the generation"
        decision = latest_metadata(instance, "promotion_decision", None)
        assert decision["generation"] == "g0001" and decision["decision"] == body["decision"]
