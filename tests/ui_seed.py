"""A small demo instance for the browser test: two generations (so evidence is reused), a served
reports folder and a dagster-webserver over it. Also runnable by hand to look at the UI:

    python -m tests.ui_seed /tmp/ui   # prints the URL; Ctrl-C stops the servers
"""

import json
import os
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench_assets.decision.report import REPORT_URL_ENV
from bench_assets.sandbox import process as sandbox
from tests.conftest import REPO_ROOT, write_yaml
from tests.pg import free_port
from tests.test_dagster_cells import replay_bench

DEFAULT_COORDINATOR = """\
telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""


@dataclass
class DemoUi:
    url: str
    reports_url: str
    root: Path
    artifacts: Path
    home: Path
    services: list[sandbox.Service]

    def stop(self) -> None:
        for s in self.services:
            s.stop()


def seed_bench(base: Path) -> Path:
    """A replay bench with runs=2 and two queued candidates (c1, c2)."""
    root = replay_bench(base)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["runs"] = 2
    data["reuse"] = {"canaries": 1}
    write_yaml(root / "bench.yaml", data)
    for f in ("w.jsonl", "b.jsonl"):
        rows = [json.loads(x) for x in (root / "replays" / f).read_text().splitlines()]
        rows.append({**rows[0], "run": 1})
        (root / "replays" / f).write_text("".join(json.dumps(r) + "\n" for r in rows))
    second = root / "candidates" / "c2"
    (second / "files" / "plan").mkdir(parents=True)
    (second / "files" / "plan" / "SKILL.md").write_text("---\nname: plan\n---\nBudget.\n")
    write_yaml(second / "candidate.yaml", {"id": "c2", "title": "plan budget"})
    return root


def seed(base: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """Two generations on a replay bench (runs=2): g0002 reuses comparator cells of g0001."""
    root = seed_bench(base)
    home = base / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(DEFAULT_COORDINATOR)
    art = base / "art"
    reports_port = free_port()
    env = {
        "DAGSTER_HOME": str(home),
        "WFBENCH_TASKS": str(root),
        "WFBENCH_ARTIFACTS": str(art),
        REPORT_URL_ENV: f"http://127.0.0.1:{reports_port}",
        "WFBENCH_IN_PROCESS": "1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import dagster as dg

        from bench_assets.driver.evolve import evolve

        with dg.DagsterInstance.get() as instance:
            for _ in range(2):
                evolve(str(root), artifact_root=str(art), instance=instance)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return root, art, home, env


def _wait_http(url: str, deadline_s: float, service: sandbox.Service) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not service.alive():
            raise RuntimeError(f"{url}: server exited; log:\n{service.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=3):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {deadline_s} s; log:\n{service.log.read_text()}")


def start(base: Path) -> DemoUi:
    """Seed the instance, then serve reports and the Dagster UI over it."""
    root, art, home, env = seed(base)
    run_env = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CI", "WFBENCH_BWRAP")
    }
    run_env |= env
    run_env.pop("WFBENCH_IN_PROCESS")
    run_env["PYTHONPATH"] = str(REPO_ROOT)
    reports = art / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    reports_url = env[REPORT_URL_ENV]
    port = reports_url.rsplit(":", 1)[1]
    py = sys.executable
    services: list[sandbox.Service] = []
    try:
        services.append(
            sandbox.start_service(
                [py, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(reports), port],
                env=run_env,
                cwd=reports,
                log=base / "logs" / "reports.log",
            )
        )
        ui_port = free_port()
        webserver = Path(py).parent / "dagster-webserver"
        services.append(
            sandbox.start_service(
                [str(webserver), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(ui_port)],
                env=run_env,
                cwd=REPO_ROOT,
                log=base / "logs" / "webserver.log",
            )
        )
        url = f"http://127.0.0.1:{ui_port}"
        _wait_http(reports_url + "/", 30, services[0])
        _wait_http(url + "/server_info", 180, services[1])
    except BaseException:
        for s in services:
            s.stop()
        raise
    return DemoUi(url, reports_url, root, art, home, services)


if __name__ == "__main__":
    ui = start(Path(sys.argv[1]))
    print(ui.url, ui.reports_url, flush=True)
    try:
        while True:
            time.sleep(60)
    finally:
        ui.stop()
