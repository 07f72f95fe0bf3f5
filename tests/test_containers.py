"""Cells in containers on a real Docker engine: ``deploy/docker`` as shipped, run for real.

The test starts its own ``dockerd`` (Debian's ``docker.io``; ``.ci/run`` installs it) on a private
socket, with no bridge and no iptables, builds the base and project images with
``deploy/docker/build-images.sh`` (cached by their inputs under ``$WFBENCH_IMAGE_CACHE``, and the
engine's data root is kept there too, so a second run builds nothing), and then runs the
deployment's shape with every long-running process in a container of the project image:

* a code server (``dagster code-server start --container-image <project image>``);
* ``dagster-daemon run`` with the engine's socket, whose run launcher is the one in
  ``deploy/docker/dagster.yaml`` (``WfbenchDockerRunLauncher``, its ``security_opt`` unchanged),
  with only the addresses, the image, the network (``host``: PostgreSQL and the code server are on
  loopback) and the shared folder swapped;
* PostgreSQL on loopback (``tests/pg.py``) and one shared folder mounted at the same path in every
  container (tasks, artifact root, ``DAGSTER_HOME``, compute logs).

``wfbench evolve --workspace`` then pays a generation through the queue. What the engine says
(its containers, their ``dagster/run_id`` labels, exit codes and times), not what the harness
says, proves one container per queued run; Dagster's run records prove that no more cells ran at
once than the ``agent_sessions`` pool allows; the decision equals the one the same bench gets in
process. A negative control runs a cell's containment check in a container of the same image
with every option but the unmasked ``/proc``: it fails closed, naming the fix.

Skipped, with the reason, where no engine can start (not root, no ``dockerd``, or the engine
refuses to start). dockerd is stopped by its PID at the end.
"""

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from bench_assets.documents import load_decision
from bench_assets.driver.evolve import evolve
from bench_assets.driver.transaction import GEN_TAG
from tests.conftest import REPO_ROOT, write_yaml
from tests.pg import PgServer, free_port, pg_server  # noqa: F401  (the session fixture)
from tests.test_deployment import code_server_up
from tests.test_postgres import generation_bench, normalize

# Slow, and under pytest-xdist (make test) on one worker: one engine and one image build per module.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("containers")]

BIN = Path(sys.executable).parent
CACHE = Path(
    os.environ.get("WFBENCH_IMAGE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wfbench" / "images"
)
POOL = 2
"""``agent_sessions`` limit of the test bench: three cells, at most two at once."""
ENGINE_START_S = 60.0
LOCK_WAIT_S = 1200.0
SERVER_START_S = 180.0
EVOLVE_S = 600.0
CONTAINED = (
    "from bench_assets.cells import ensure_contained; ensure_contained(); print('contained')"
)


@dataclass
class Engine:
    """A running dockerd of this test: its PID, socket and the ``docker`` command line."""

    pid: int
    host: str
    docker: str
    log: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "0"}

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        res = subprocess.run(
            [self.docker, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: exit {res.returncode}: {res.stderr}")
        return res.stdout


def _stop(proc: "subprocess.Popen[bytes]", grace_s: float = 20.0) -> None:
    """SIGTERM the engine by its PID, SIGKILL it if it has not exited after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _unmount_under(folder: Path) -> None:
    """Unmount whatever is still mounted below ``folder`` (deepest first)."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{folder}/")), reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """dockerd on a private socket, its data root (images) cached under ``CACHE``."""
    if os.geteuid() != 0:
        pytest.skip("starting dockerd needs root")
    dockerd, docker = shutil.which("dockerd"), shutil.which("docker")
    if dockerd is None or docker is None:
        pytest.skip("no dockerd/docker on PATH (Debian: apt-get install docker.io; .ci/run does)")
    CACHE.mkdir(parents=True, exist_ok=True)
    # One engine per data root: another test worker (xdist) or `make docker-demo` may hold it.
    lock = (CACHE / "engine.lock").open("w")
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                pytest.skip(f"another engine held {CACHE / 'engine.lock'} for {LOCK_WAIT_S:.0f} s")
            time.sleep(1)
    run = Path(tmp_path_factory.mktemp("dockerd", numbered=True))
    short = Path(f"/tmp/wfbench-dockerd-{os.getpid()}")  # a unix socket path must stay short
    short.mkdir(exist_ok=True)
    sock = short / "docker.sock"
    log = run / "dockerd.log"
    argv = [
        dockerd,
        "--storage-driver", "overlay2",
        "--bridge=none", "--iptables=false", "--ip-masq=false",
        "--host", f"unix://{sock}",
        "--data-root", str(CACHE / "engine"),
        "--exec-root", str(short / "exec"),
        "--pidfile", str(short / "dockerd.pid"),
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    eng = Engine(proc.pid, f"unix://{sock}", docker, log)
    try:
        deadline = time.monotonic() + ENGINE_START_S
        while eng("version", "--format", "{{.Server.Version}}", check=False).strip() == "":
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-1500:]
                pytest.skip(f"dockerd cannot start here (exit {proc.poll()}): {tail}")
            time.sleep(0.3)
        # The data root is kept between runs for its images; containers of an earlier run go.
        stale = eng("ps", "-aq").split()
        if stale:
            eng("rm", "-f", *stale)
        yield eng
        left = eng("ps", "-aq", check=False).split()
        if left:  # the run containers stay for inspection until the end of the module
            eng("rm", "-f", *left, check=False)
    finally:
        _stop(proc)
        _unmount_under(short)  # dockerd leaves its exec root's netns/default bind-mounted
        shutil.rmtree(short, ignore_errors=True)
        lock.close()


@pytest.fixture(scope="module")
def images(engine: Engine) -> dict[str, str]:
    """``{"base": tag, "project": tag}`` built (or found) by deploy/docker/build-images.sh."""
    started = time.monotonic()
    res = subprocess.run(
        [str(REPO_ROOT / "deploy" / "docker" / "build-images.sh")],
        env={**engine.env(), "WFBENCH_IMAGE_CACHE": str(CACHE), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert res.returncode == 0, f"build-images.sh failed: {res.stderr[-4000:]}"
    tags = dict(line.split("=", 1) for line in res.stdout.split() if "=" in line)
    print(f"images ready in {time.monotonic() - started:.0f} s: {tags}\n{res.stderr}")
    return tags


def deployment_yaml(pg: PgServer, db: str, base: Path, image: str, root: Path) -> dict[str, Any]:
    """deploy/docker/dagster.yaml with only addresses, paths, image and network swapped.

    The launcher class and every sandbox option (``security_opt``) stay as shipped.
    """
    config = yaml.safe_load((REPO_ROOT / "deploy" / "docker" / "dagster.yaml").read_text())
    storage = config["storage"]["postgres"]["postgres_db"]
    storage |= {k: pg.postgres_db(db)[k] for k in ("hostname", "port", "username", "db_name")}
    config["run_coordinator"]["config"] = {"dequeue_interval_seconds": 1}
    config["compute_logs"]["config"]["base_dir"] = str(base / "compute-logs")
    launcher = config["run_launcher"]["config"]
    launcher["image"] = image
    launcher["network"] = "host"  # PostgreSQL and the code server listen on loopback
    launcher["env_vars"] = [
        "DAGSTER_PG_PASSWORD",
        f"DAGSTER_HOME={base / 'home'}",
        f"WFBENCH_ARTIFACTS={base / 'artifacts'}",
        f"WFBENCH_TASKS={root}",
    ]
    kwargs = launcher["container_kwargs"]
    kwargs["working_dir"] = str(root.parent)
    kwargs["volumes"] = [f"{base}:{base}:rw"]
    kwargs["mem_limit"] = "2g"
    return dict(config)


def start_service(engine: Engine, name: str, image: str, base: Path, env: dict[str, str],
                  argv: list[str], *, cwd: Path, socket: bool = False) -> str:  # fmt: skip
    """A long-running container of the deployment (code server, daemon) on the host network,
    with the shared folder at the same path as everywhere else."""
    args = ["run", "-d", "--name", name, "--network", "host", "-v", f"{base}:{base}:rw"]
    if socket:  # the daemon launches runs through the engine
        args += ["-v", f"{engine.host.removeprefix('unix://')}:/var/run/docker.sock"]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    return engine(*args, "-w", str(cwd), image, *argv).strip()


def container_facts(engine: Engine) -> dict[str, dict[str, Any]]:
    """Every run container the engine has, by its ``dagster/run_id`` label."""
    ids = engine("ps", "-aq", "--filter", "label=dagster/run_id").split()
    out: dict[str, dict[str, Any]] = {}
    for c in json.loads(engine("inspect", *ids)) if ids else []:
        run_id = c["Config"]["Labels"]["dagster/run_id"]
        assert run_id not in out, f"two containers for run {run_id}"
        out[run_id] = {
            "id": c["Id"],
            "exit": c["State"]["ExitCode"],
            "started": c["State"]["StartedAt"],
            "finished": c["State"]["FinishedAt"],
            "masked": c["HostConfig"].get("MaskedPaths"),
            "security_opt": c["HostConfig"].get("SecurityOpt"),
        }
    return out


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end at t closes before a start at t)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def launch_latency(instance: dg.DagsterInstance, run_id: str) -> float:
    """Seconds from the launcher being called (RUN_STARTING) to the run's process executing
    (RUN_START): for a container, create + start + the worker's imports."""
    ts = {}
    for kind in (dg.DagsterEventType.RUN_STARTING, dg.DagsterEventType.RUN_START):
        records = instance.get_records_for_run(run_id, of_type=kind).records
        ts[kind] = records[0].timestamp
    return ts[dg.DagsterEventType.RUN_START] - ts[dg.DagsterEventType.RUN_STARTING]


def decision_of(path: Path, base: Path) -> dict[str, Any]:
    doc = load_decision(path).model_dump(mode="json")
    return dict(normalize(doc, str(base)))


def in_process_decision(base: Path) -> dict[str, Any]:
    """The same bench, one generation, paid in this process (sqlite)."""
    root = generation_bench(base / "tasks-parent")
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["limits"] = {"agent_sessions": POOL, "graph_builds": 1}
    write_yaml(root / "bench.yaml", data)
    home = base / "home"
    home.mkdir(parents=True)
    write_yaml(home / "dagster.yaml", {"telemetry": {"enabled": False}})
    with dg.DagsterInstance.from_config(str(home)) as instance:
        res = evolve(str(root), artifact_root=str(base / "artifacts"), instance=instance,
                     in_process=True)  # fmt: skip
        md = latest_decision(instance)
    assert res.decision == "promote", res
    return decision_of(Path(str(md["decision_path"].value)), base)


def latest_decision(instance: dg.DagsterInstance) -> Any:
    record = instance.fetch_materializations(dg.AssetKey("promotion_decision"), limit=1).records
    return record[0].asset_materialization.metadata


def test_a_generation_pays_every_cell_in_its_own_container_and_decides_as_in_process(
    tmp_path: Path,
    engine: Engine,
    images: dict[str, str],
    pg_server: PgServer,  # noqa: F811
) -> None:
    image = images["project"]
    base = tmp_path / "docker"
    root = generation_bench(base / "tasks-parent")
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["limits"] = {"agent_sessions": POOL, "graph_builds": 1}
    write_yaml(root / "bench.yaml", data)
    home = base / "home"
    home.mkdir()
    (base / "compute-logs").mkdir()
    db = pg_server.create_database("containers")
    write_yaml(home / "dagster.yaml", deployment_yaml(pg_server, db, base, image, root))
    port = free_port()
    grpc = {"host": "127.0.0.1", "port": port, "location_name": "bench_assets"}
    write_yaml(base / "workspace.yaml", {"load_from": [{"grpc_server": grpc}]})
    env = {
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_PASSWORD": "",
        "WFBENCH_ARTIFACTS": str(base / "artifacts"),
        "WFBENCH_TASKS": str(root),
    }
    started = time.monotonic()
    names = [f"wfbench-code-{port}", f"wfbench-daemon-{port}"]
    try:
        start_service(engine, names[0], image, base, env, cwd=root.parent, argv=[
            "dagster", "code-server", "start", "-h", "127.0.0.1", "-p", str(port),
            "-m", "bench_assets.definitions", "--location-name", "bench_assets",
            "--container-image", image,
        ])  # fmt: skip
        deadline = time.monotonic() + SERVER_START_S
        while not code_server_up(port):
            assert time.monotonic() < deadline, engine("logs", names[0], check=False)
            time.sleep(0.5)
        daemon = ["dagster-daemon", "run", "-w", str(base / "workspace.yaml")]
        start_service(engine, names[1], image, base, env, cwd=base, socket=True, argv=daemon)
        evolve_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        evolve_env.pop("WFBENCH_IN_PROCESS", None)
        paid = subprocess.run(
            [str(BIN / "wfbench"), "evolve", "--tasks", str(root), "--json",
             "--workspace", str(base / "workspace.yaml")],
            env=evolve_env, cwd=root.parent, capture_output=True, text=True, timeout=EVOLVE_S,
            check=False,
        )  # fmt: skip
        wall = time.monotonic() - started
        assert paid.returncode == 0, paid.stderr[-4000:] + engine("logs", names[1], check=False)
    except BaseException:
        for name in names:
            print(f"----- {name} -----\n{engine('logs', name, check=False)[-4000:]}")
        raise
    finally:
        engine("rm", "-f", *names, check=False)

    body = json.loads(paid.stdout)
    assert (body["generation"], body["candidate"], body["decision"]) == ("g0001", "c1", "promote")
    assert (body["paid_cells"], body["reused_cells"]) == (3, 0), body
    assert "starting a dagster-daemon" not in paid.stderr, "the deployment's daemon serves"

    read = tmp_path / "read-home"  # the same database, without loading the Docker launcher
    read.mkdir()
    write_yaml(read / "dagster.yaml", {"storage": pg_server.storage_config(db)})
    facts = container_facts(engine)
    with dg.DagsterInstance.from_config(str(read)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={GEN_TAG: "g0001"}))
        cell_runs = [r for r in runs if "dagster/partition/cell" in r.tags]
        # The queued runs (the cheap unpartitioned steps and the decision run in evolve's own
        # process): every cell and every task's inputs.
        queued = [
            r
            for r in runs
            if instance.get_records_for_run(
                r.run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED
            ).records
        ]
        queued_ids = {r.run_id for r in queued}
        assert len(cell_runs) == 3 and {r.run_id for r in cell_runs} < queued_ids, [
            r.tags for r in runs
        ]
        # One container per queued run, as the engine reports it: labelled with the run, the
        # container the launcher tagged on the run, exited 0, /proc unmasked by the API.
        for run in queued:
            assert run.status == dg.DagsterRunStatus.SUCCESS, (run.run_id, run.status)
            fact = facts[run.run_id]
            assert run.tags["docker/container_id"] == fact["id"]
            assert fact["exit"] == 0, fact
            assert fact["masked"] == [] and "systempaths=unconfined" not in (
                fact["security_opt"] or []
            ), fact
            assert "seccomp=unconfined" in fact["security_opt"], fact
        assert len(facts) == len(queued), "a container the generation did not account for"
        # No more cells at once than the pool allows (Dagster's run spans).
        records = instance.get_run_records(dg.RunsFilter(run_ids=[r.run_id for r in cell_runs]))
        spans = [(r.start_time, r.end_time) for r in records]
        assert all(s and e for s, e in spans), spans
        assert max_overlap(spans) <= POOL, spans
        latency = sorted(launch_latency(instance, r.run_id) for r in cell_runs)
        decision = latest_decision(instance)
    through_containers = decision_of(Path(str(decision["decision_path"].value)), base)
    in_process = in_process_decision(tmp_path / "in-process")
    print(
        f"evolve through containers: {wall:.1f} s (services + generation); per cell run, "
        f"launch → running: {', '.join(f'{x:.1f}' for x in latency)} s; "
        f"cell run spans: {sorted((round(e - s, 1)) for s, e in spans)} s"
    )
    a, b = through_containers["decision"], in_process["decision"]
    assert (a["decision"], a["reasons"], a["tasks"]) == (b["decision"], b["reasons"], b["tasks"])
    assert a["evidence"] == b["evidence"]
    assert through_containers == in_process


def test_a_cell_without_an_unmasked_proc_fails_closed_naming_the_fix(
    engine: Engine, images: dict[str, str]
) -> None:
    """Negative control: every sandbox option but ``systempaths=unconfined``; the containment
    check every cell runs before starting an agent refuses, and says what is missing."""
    common = ["run", "--rm", "--network", "none", "--security-opt", "seccomp=unconfined",
              "--security-opt", "apparmor=unconfined"]  # fmt: skip
    cmd = [images["project"], "python", "-c", CONTAINED]
    out = subprocess.run(
        [engine.docker, *common, *cmd], env=engine.env(), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode != 0 and "contained" not in out.stdout, out
    assert "ContainmentError" in out.stderr and "Can't mount proc" in out.stderr, out.stderr
    assert "systempaths=unconfined" in out.stderr and "MaskedPaths=[]" in out.stderr, out.stderr
    # The positive twin: the same container with the option runs the check to the end.
    ok = engine(*common, "--security-opt", "systempaths=unconfined", *cmd)
    assert ok.strip() == "contained"
