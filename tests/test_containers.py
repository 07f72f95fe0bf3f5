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

Skipped only for a named missing capability, each probed before the engine starts (not root; no
``dockerd``/``docker`` on PATH; the kernel refuses the namespaces every container needs, or an
overlay mount, which is the ``overlay2`` storage; no cgroup file system). Anything else fails: an
engine that does not start on a machine with all of them, an image build that breaks, the engine
lock held too long. So on a machine that can run containers a green run means these tests ran;
``WFBENCH_REQUIRE_CONTAINERS=1`` turns even the capability skips into failures (for a CI that
must prove containers). dockerd is stopped by its PID at the end.
"""

import contextlib
import fcntl
import importlib.util
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

from bench_assets.decision.documents import load_decision
from bench_assets.driver.cellbatch import CELL_BATCH_JOB, CELL_BATCH_TAG
from bench_assets.driver.evolve import evolve
from bench_assets.driver.transaction import GEN_TAG
from tests.conftest import REPO_ROOT, write_yaml
from tests.pg import PgServer, free_port, pg_server  # noqa: F401  (the session fixture)
from tests.test_deployment import code_server_up
from tests.test_postgres import generation_bench

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
CONTAINED = "from bench_assets.cells.pipeline import ensure_contained; ensure_contained(); print('contained')"  # noqa: E501


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


def missing_capability(scratch: Path) -> str | None:
    """What this machine lacks to run dockerd's containers, probed directly; ``None`` if nothing.

    Each probe is a capability the engine needs and a machine may legitimately lack (an
    unprivileged container, a sandboxed CI runner): root, the binaries, the namespaces runc
    creates for every container, an overlay mount (the ``overlay2`` storage driver) and a cgroup
    file system. A machine that passes them all is expected to run the engine.
    """
    if os.geteuid() != 0:
        return "starting dockerd needs root"
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        return "no dockerd/docker on PATH (Debian: apt-get install docker.io; .ci/run does)"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "no unshare (util-linux) to probe namespaces with"
    ns = subprocess.run([unshare, "--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "true"],
                        capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    if ns.returncode != 0:
        return f"the kernel refuses the namespaces a container needs: {ns.stderr.strip()}"
    for d in ("lower", "upper", "work", "merged"):
        (scratch / d).mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={scratch / 'lower'},upperdir={scratch / 'upper'},workdir={scratch / 'work'}"
    overlay = subprocess.run(
        [unshare, "--mount", "mount", "-t", "overlay", "overlay", "-o", opts,
         str(scratch / "merged")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if overlay.returncode != 0:
        return f"the kernel refuses an overlay mount (overlay2 storage): {overlay.stderr.strip()}"
    cgroup = Path("/sys/fs/cgroup")
    if not ((cgroup / "cgroup.controllers").exists() or (cgroup / "memory").is_dir()):
        return "no cgroup file system at /sys/fs/cgroup"
    return None


def skip_for(reason: str) -> None:
    """Skip for a missing capability, unless WFBENCH_REQUIRE_CONTAINERS=1 demands the test."""
    if os.environ.get("WFBENCH_REQUIRE_CONTAINERS") == "1":
        pytest.fail(f"WFBENCH_REQUIRE_CONTAINERS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """dockerd on a private socket, its data root (images) cached under ``CACHE``."""
    reason = missing_capability(tmp_path_factory.mktemp("probe"))
    if reason is not None:
        skip_for(reason)
    dockerd, docker = shutil.which("dockerd"), shutil.which("docker")
    assert dockerd is not None and docker is not None
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
                pytest.fail(
                    f"another engine held {CACHE / 'engine.lock'} for {LOCK_WAIT_S:.0f} s"
                    " (make docker-demo, or a second test run, on this data root)"
                )
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
                # Every capability it needs was probed: a failure here is a failure.
                tail = log.read_text(errors="replace")[-1500:]
                pytest.fail(f"dockerd did not start (exit {proc.poll()}): {tail}")
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


def daemon_heartbeating(read_home: Path) -> bool:
    """The deployment's run queue daemon has heartbeated within a minute (``read_home`` holds the
    deployment's storage only: this process need not load the Docker launcher)."""
    with dg.DagsterInstance.from_config(str(read_home)) as instance:
        beat = instance.get_daemon_heartbeats().get("QUEUED_RUN_COORDINATOR")
    return beat is not None and time.time() - beat.timestamp < 60


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


def compare_decisions() -> Any:
    """deploy/docker/compare-decisions.py as a module (its name is not importable)."""
    path = REPO_ROOT / "deploy" / "docker" / "compare-decisions.py"
    spec = importlib.util.spec_from_file_location("compare_decisions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_process_decision(base: Path) -> Path:
    """The same bench, one generation, paid in this process (sqlite); its tasks folder."""
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
    assert load_decision(Path(str(md["decision_path"].value))).decision.decision == "promote"
    return root


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
    read = tmp_path / "read-home"  # the same database, without loading the Docker launcher
    read.mkdir()
    write_yaml(read / "dagster.yaml", {"storage": pg_server.storage_config(db)})
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
        # evolve starts a daemon of its own when none has heartbeated yet: wait for this one's.
        deadline = time.monotonic() + SERVER_START_S
        while not daemon_heartbeating(read):
            assert time.monotonic() < deadline, engine("logs", names[1], check=False)
            time.sleep(1)
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
        # A cell's run is queued itself, or is an in-process run of a queued cell_batch run
        # (several cells of a task share one run start-up, and so one container).
        cell_queued = {r.tags.get(CELL_BATCH_TAG, r.run_id) for r in cell_runs}
        assert len(cell_runs) == 3 and cell_queued < queued_ids, [r.tags for r in runs]
        # A queued cell_batch whose cells other batches all took (a free slot takes the next
        # unclaimed cell) is canceled before its launch: no container, and none of its cells
        # ran under it. Every other queued run was launched.
        taken = {
            r.run_id
            for r in queued
            if r.job_name == CELL_BATCH_JOB
            and r.status == dg.DagsterRunStatus.CANCELED
            and r.run_id not in facts
        }
        assert not taken & cell_queued, (taken, cell_queued)
        launched = [r for r in queued if r.run_id not in taken]
        # One container per launched run, as the engine reports it: labelled with the run, the
        # container the launcher tagged on the run, exited 0, /proc unmasked by the API.
        for run in launched:
            assert run.status == dg.DagsterRunStatus.SUCCESS, (run.run_id, run.status)
            fact = facts[run.run_id]
            assert run.tags["docker/container_id"] == fact["id"]
            assert fact["exit"] == 0, fact
            assert fact["masked"] == [] and "systempaths=unconfined" not in (
                fact["security_opt"] or []
            ), fact
            assert "seccomp=unconfined" in fact["security_opt"], fact
        assert len(facts) == len(launched), "a container the generation did not account for"
        # No more cells at once than the pool allows (Dagster's run spans).
        records = instance.get_run_records(dg.RunsFilter(run_ids=[r.run_id for r in cell_runs]))
        spans = [(r.start_time, r.end_time) for r in records]
        assert all(s and e for s, e in spans), spans
        assert max_overlap(spans) <= POOL, spans
        latency = sorted(launch_latency(instance, run_id) for run_id in cell_queued)
        decision = latest_decision(instance)
    assert load_decision(Path(str(decision["decision_path"].value))).decision.decision == "promote"
    in_process = in_process_decision(tmp_path / "in-process")
    print(
        f"evolve through containers: {wall:.1f} s (services + generation); per queued cell run, "
        f"launch → running: {', '.join(f'{x:.1f}' for x in latency)} s; "
        f"cell run spans: {sorted((round(e - s, 1)) for s, e in spans)} s"
    )
    # Ledger and every decision document, field by field, under the script's stated rule.
    cmp = compare_decisions()
    a = cmp.side(str(base / "artifacts"), str(root))
    b = cmp.side(str(tmp_path / "in-process" / "artifacts"), str(in_process))
    summary, diffs = cmp.compare(a, b)
    assert len(summary) == 1 and diffs == [], (summary, diffs[:20])
    assert a.masked == b.masked and a.masked["run_id"] > 0, (a.masked, b.masked)


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


def test_the_decision_comparison_masks_only_what_its_rule_names(tmp_path: Path) -> None:
    """compare-decisions.py (the check users repeat on `make demo` against `make docker-demo`):
    times, run and record ids and each side's own folders are masked; nothing else is."""
    cmp = compare_decisions()
    a = cmp.Side(tmp_path / "a", {str(tmp_path / "a"): "<artifacts>"})
    b = cmp.Side(tmp_path / "b", {str(tmp_path / "b"): "<artifacts>"})

    def doc(side: str, run_id: str, cost: float, **extra: Any) -> dict[str, Any]:
        return {
            "now": f"2026-12-0{run_id[-1]}T10:00:00Z",
            "overlay_files": f"{tmp_path / side}/overlays/abc",
            "evidence": [{"run_id": run_id, "cost_usd": cost, "pooled_run_id": None}],
            "reasons": [f"promote; record 20261201T182708552815Z-b9bcd{run_id[-1]} at 2026-1"],
            **extra,
        }

    same = cmp.differences(a.normalize(doc("a", "r1", 0.5)), b.normalize(doc("b", "r2", 0.5)))
    assert same == []
    assert a.masked == b.masked == {"now": 1, "run_id": 1}
    # A cost, a volatile key present on one side only, a field one side lacks: each reported.
    diff = cmp.differences(
        a.normalize(doc("a", "r1", 0.5, extra=1)),
        b.normalize({**doc("b", "r2", 0.50000001), "evidence": [{"run_id": "r2", "cost_usd": 0.5,
                                                                 "pooled_run_id": "p"}]}),
    )  # fmt: skip
    assert [d[0] for d in diff] == [".evidence[0].pooled_run_id", ".extra"], diff
    diff = cmp.differences(a.normalize(doc("a", "r1", 0.5)), b.normalize(doc("b", "r1", 0.51)))
    assert diff == [(".evidence[0].cost_usd", 0.5, 0.51)]


def test_only_a_named_missing_capability_skips_and_require_turns_it_into_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The capability probe names what is missing; WFBENCH_REQUIRE_CONTAINERS=1 fails instead."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert missing_capability(tmp_path) == "starting dockerd needs root"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))  # no dockerd, no docker
    assert "no dockerd/docker on PATH" in str(missing_capability(tmp_path))
    monkeypatch.delenv("WFBENCH_REQUIRE_CONTAINERS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        skip_for("starting dockerd needs root")
    monkeypatch.setenv("WFBENCH_REQUIRE_CONTAINERS", "1")
    with pytest.raises(
        pytest.fail.Exception, match="WFBENCH_REQUIRE_CONTAINERS=1 but .*needs root"
    ):
        skip_for("starting dockerd needs root")
