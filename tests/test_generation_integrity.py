"""A generation is a transaction: its own evidence set, one writer, verified reuse, kill -9.

Each test builds the fault the way it happens (a killed process, a second writer, a byte edited
in a stored record, an infra failure, a full disk) and shows the decision never rests on foreign
or corrupted evidence and no cell is paid twice.

Every scenario runs in process. Those whose course differs on the run-queue path — the default
users get, where cells are runs in their own processes under a daemon and code servers that
``evolve`` starts — run there too (:data:`BOTH_PATHS`, marked slow, the smallest suite that shows
it: 2 tasks x 1 run): a kill -9 of ``evolve`` mid-generation then ``decide``, ``apply`` and
``evolve``; a kill -9 while a cell runs; a kill -9 of a cell's run worker; a full disk then a
kill; a cancel. The others exercise code that is the same on both paths (the writer lock, record
verification, input verification, the task-file watch, run before any cell is paid or in the
decision), so a queued variant would add minutes of CI for no other code.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cells.records import load_record
from bench_assets.cli import main
from bench_assets.decision.documents import load_decision
from bench_assets.decision.ledger import read as read_ledger
from bench_assets.kernel.errors import RecordCorrupt
from bench_assets.kernel.store import ArtifactStore
from tests.conftest import add_task, write_yaml
from tests.test_dagster_cells import fix_patch, replay_bench
from tests.test_generation import QUEUED_INSTANCE

TASKS = ("alpha", "beta")


def two_task_bench(tmp_path: Path, runs: int = 2, canaries: int = 0) -> Path:
    """Two tasks × (baseline, workflow, cand) × ``runs``; two queued candidates c1, c2.

    ``canaries`` per generation of baseline and per task of workflow (cand's ``pairs_with``:
    gate canaries); 0 pays none."""
    root = replay_bench(tmp_path)
    add_task(root, "beta")
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["runs"] = runs
    data["reuse"] = {"canaries": canaries, "gate_canaries_per_task": canaries}
    write_yaml(root / "bench.yaml", data)
    patch = fix_patch(root)
    for name, p in (("b.jsonl", ""), ("w.jsonl", patch)):
        rows = [
            {
                "instance_id": t,
                "model_name_or_path": name,
                "run": r,
                "model_patch": p,
                "usage": {"cost_usd": 0.5 if p else 0.9, "turns": 3},
            }
            for t in TASKS
            for r in range(runs)
        ]
        (root / "replays" / name).write_text("".join(json.dumps(x) + "\n" for x in rows))
    c2 = root / "candidates" / "c2"
    (c2 / "files" / "plan").mkdir(parents=True)
    (c2 / "files" / "plan" / "SKILL.md").write_text("---\nname: plan\n---\nBudget.\n")
    write_yaml(c2 / "candidate.yaml", {"id": "c2", "title": "plan budget"})
    return root


def promoting_bench(tmp_path: Path, runs: int = 1) -> Path:
    """:func:`two_task_bench` whose candidate the gate promotes: its own replays, 40 % cheaper
    than ``workflow`` on every run, both resolving every task (the ``strict`` policy at
    ``min_runs`` = ``runs``, so two tasks can decide). One session at a time, so a kill after a
    cell finds the next one unrecorded on the queued path too."""
    root = two_task_bench(tmp_path, runs=runs)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["arms"]["cand"]["agent"]["predictions"] = "replays/c.jsonl"
    data["policy"] = {"name": "strict", "min_runs": runs}
    data["limits"] = {"agent_sessions": 1}
    write_yaml(root / "bench.yaml", data)
    patch = fix_patch(root)
    rows = [
        {
            "instance_id": t,
            "model_name_or_path": "c",
            "run": r,
            "model_patch": patch,
            "usage": {"cost_usd": 0.3, "turns": 3},
        }
        for t in TASKS
        for r in range(runs)
    ]
    (root / "replays" / "c.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return root


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench_assets.cli", *args]


def records_by_generation(art: Path) -> Counter[tuple[str, str, str | None]]:
    """How many records each (task, cell, generation) has: >1 means a cell was paid twice."""
    out: Counter[tuple[str, str, str | None]] = Counter()
    for path in (art / "cells").glob("*/*/*/record.json"):
        try:
            rec = load_record(path)
        except RecordCorrupt:
            continue
        out[(rec.task, rec.cell, rec.generation)] += 1
    return out


def decisions(art: Path) -> list[tuple[str | None, str]]:
    ledger = ArtifactStore(art).ledger()
    if not ledger.exists():
        return []
    return [(e.generation, e.decision) for e in read_ledger(ledger) if e.decision != "applied"]


def run_until(argv: list[str], env: dict[str, str], ready, timeout_s: float = 600) -> int:
    """Start ``argv``; SIGKILL it as soon as ``ready()`` holds. Returns its exit status."""
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if ready():
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    return proc.wait(timeout=30)


QUEUE = pytest.param("queue", marks=pytest.mark.slow)
BOTH_PATHS = pytest.mark.parametrize("env", ["in-process", QUEUE], indirect=True)
"""Run a fault scenario on both paths: in process, and through the run queue (the default users
get: a daemon, a code server, one run worker per cell; started by ``evolve`` itself)."""


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the ``wfbench`` commands a test runs: in process unless the test is
    parametrized with ``queue`` (:data:`BOTH_PATHS`); then ``WFBENCH_IN_PROCESS`` is unset and
    the instance has the queued run coordinator, like ``dagster_home/dagster.yaml``."""
    e = dict(os.environ)
    e["WFBENCH_ARTIFACTS"] = str(tmp_path / "art")
    path = getattr(request, "param", "in-process")
    if path == "in-process":
        e["WFBENCH_IN_PROCESS"] = "1"
        yield e
        return
    e.pop("WFBENCH_IN_PROCESS", None)
    home = tmp_path / "queued_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(QUEUED_INSTANCE)
    e["DAGSTER_HOME"] = str(home)
    try:
        yield e
    finally:  # a test that ends on a kill leaves the processes no next evolve ended
        from bench_assets.driver import services

        record = services.load(home)
        if record is not None and not record.alive():
            services.end(services.carrying(record.token))


def test_a_decision_never_rests_on_another_candidates_cells(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """g0002 is killed after planning, before any of its candidate cells is paid: deciding it
    must not borrow c1's candidate cells (the old 'latest record wins' promoted c2 on them)."""
    root, art = two_task_bench(tmp_path, runs=1), tmp_path / "art"
    first = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    generations = art / "generations" / "g0002" / "tasks"

    def planned_both() -> bool:
        return len(list(generations.glob("*.json"))) == len(TASKS)

    assert run_until(cli("evolve", "--tasks", str(root)), env, planned_both) == -signal.SIGKILL
    assert decisions(art) == [("g0001", decisions(art)[0][1])]
    refused = subprocess.run(
        cli("decide", "--tasks", str(root), "--generation", "g0002"), env=env, capture_output=True
    )
    assert refused.returncode == 2, refused.stdout.decode()
    assert "g0002 is unfinished" in refused.stderr.decode()
    assert len(decisions(art)) == 1, "no decision until every manifest cell exists"

    resumed = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=env, capture_output=True
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    body = json.loads(resumed.stdout)
    assert body["generation"] == "g0002" and body["candidate"] == "c2"
    assert_decided_on_own_evidence(art, "g0002")
    counts = records_by_generation(art)
    assert all(n == 1 for n in counts.values()), f"a cell was paid twice: {counts}"


def decision_of(art: Path, generation: str):  # type: ignore[no-untyped-def]
    entries = [e for e in read_ledger(ArtifactStore(art).ledger()) if e.generation == generation]
    assert len(entries) == 1, f"one decision per generation, got {len(entries)}"
    return load_decision(Path(entries[0].payload["decision_path"]))


def assert_decided_on_own_evidence(art: Path, generation: str) -> None:
    """Every evidence cell of the decision is verified, and candidate cells are this candidate's
    and were paid in this generation."""
    doc = decision_of(art, generation)
    assert doc.lineage, "the decision names its evidence"
    for lin in doc.lineage:
        folder = next((art / "cells" / lin.task / lin.cell).glob("*/record.json"))
        records = [
            load_record(p) for p in (art / "cells" / lin.task / lin.cell).glob("*/record.json")
        ]
        (rec,) = [r for r in records if r.data_version == lin.data_version]
        assert folder.exists()
        if rec.role == "candidate":
            assert rec.overlay_digest == doc.overlay_digest, f"{lin.task} {lin.cell}: foreign"
            assert rec.generation == generation


def skill_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def latest_decision(art: Path):  # type: ignore[no-untyped-def]
    """The newest decision in the ledger (not an application) and its document."""
    entry = [e for e in read_ledger(ArtifactStore(art).ledger()) if e.decision != "applied"][-1]
    return entry, load_decision(Path(entry.payload["decision_path"]))


def assert_cites_only_its_overlay(art: Path, doc) -> None:  # type: ignore[no-untyped-def]
    """Every candidate cell the decision cites is a record of the overlay it decides on."""
    for e in doc.decision.evidence:
        rec = load_record(
            art / "cells" / e.task / f"{e.arm}.r{e.run}" / e.record_id / "record.json"
        )
        assert rec.data_version == e.data_version
        if rec.role == "candidate":
            assert rec.overlay_digest == doc.overlay_digest, f"{e.task} {e.arm}.r{e.run}: foreign"


@BOTH_PATHS
def test_after_a_kill_no_decide_or_apply_rests_on_another_overlays_cells(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 29. ``evolve`` for c2 is killed after its first candidate cell; the ad-hoc
    ``decide`` (no --generation) used to promote c2 on c1's candidate cells and ``apply`` to apply
    it. Now every path verifies each cell against the identity its arm has now, and ``apply``
    applies only a generation-backed promote."""
    root, art = promoting_bench(tmp_path), tmp_path / "art"
    first = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=env, capture_output=True
    )
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    assert json.loads(first.stdout)["decision"] == "promote", "the fixture's candidate promotes"
    before = skill_tree(root / "skills")
    killed = run_until(cli("evolve", "--tasks", str(root)), env, lambda: g0002_paid(art) >= 1)
    assert killed == -signal.SIGKILL
    assert g0002_paid(art) == 1, "killed with one of c2's two candidate cells paid"

    # The UI path: promotion_decision alone, over the aggregates g0001 left (c1's cells).
    ui_decision(root, art, env)
    entry, doc = latest_decision(art)
    assert doc.candidate == "c2" and doc.verdict != "promote", doc.decision.reasons
    assert_cites_only_its_overlay(art, doc)
    assert (doc.kind, entry.kind) == ("ad_hoc", "ad_hoc")
    assert doc.refused, "the stale evidence is listed with its reason"

    # The CLI: ad-hoc decide, then apply with and without --generation.
    adhoc = subprocess.run(cli("decide", "--tasks", str(root)), env=env, capture_output=True)
    assert adhoc.returncode == 0, adhoc.stderr.decode()[-2000:]
    entry, doc = latest_decision(art)
    assert (doc.candidate, doc.generation, entry.kind) == ("c2", None, "ad_hoc")
    assert doc.verdict == "insufficient_evidence", doc.decision.reasons
    assert_cites_only_its_overlay(art, doc)
    refused = {(r.task, r.cell): r.reason for r in doc.refused}
    cited = {(e.task, f"{e.arm}.r{e.run}") for e in doc.decision.evidence if e.arm == "cand"}
    assert cited | set(refused) == {(t, "cand.r0") for t in TASKS} and not cited & set(refused)
    foreign = [k for k, why in refused.items() if "another identity (generation g0001" in why]
    assert foreign and len(foreign) == len(refused), refused
    assert b"refused" in adhoc.stdout, "decide says how many cells were not evidence"
    # An attack of the same family: the arms' identity changed (another model) since any cell
    # was paid. No record is evidence of the arm as it is now.
    bench_yaml = (root / "bench.yaml").read_text()
    model = yaml.safe_load(bench_yaml)["model"]
    (root / "bench.yaml").write_text(bench_yaml.replace(model, "claude-opus-4-1-20250805"))
    other = subprocess.run(cli("decide", "--tasks", str(root)), env=env, capture_output=True)
    (root / "bench.yaml").write_text(bench_yaml)
    assert other.returncode == 0, other.stderr.decode()[-2000:]
    _, doc = latest_decision(art)
    assert doc.decision.evidence == [] and doc.verdict == "insufficient_evidence"
    assert all("another identity" in r.reason for r in doc.refused) and len(doc.refused) == 6
    for args in (("apply",), ("apply", "--generation", "g0002")):
        res = subprocess.run(cli(*args), env=env, capture_output=True)
        assert res.returncode == 2, (args, res.stdout.decode(), res.stderr.decode())
        assert skill_tree(root / "skills") == before, f"{args} changed the incumbent"
    ad_hoc_apply = subprocess.run(cli("apply"), env=env, capture_output=True).stderr.decode()
    assert "ad hoc" in ad_hoc_apply and "wfbench evolve" in ad_hoc_apply, ad_hoc_apply
    refused_g = subprocess.run(
        cli("decide", "--tasks", str(root), "--generation", "g0002"), env=env, capture_output=True
    )
    assert refused_g.returncode == 2 and b"g0002 is unfinished" in refused_g.stderr

    # Resumed, g0002 decides on its own cells; that promote (generation-backed) is applied.
    resumed = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=env, capture_output=True
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert json.loads(resumed.stdout)["decision"] == "promote"
    assert_decided_on_own_evidence(art, "g0002")
    entry, doc = latest_decision(art)
    assert (entry.generation, entry.kind, doc.kind) == ("g0002", "generation", "generation")
    # Two attacks on apply's own checks, each undone after it is refused: the decision document
    # edited after the ledger recorded it, and a cited candidate record swapped for c1's.
    path = Path(entry.payload["decision_path"])
    cited = doc.lineage_of("alpha", "cand", 0)
    assert cited is not None and cited.generation == "g0002"
    mine = next(
        r
        for r in (art / "cells" / "alpha" / "cand.r0").glob("*/record.json")
        if load_record(r).data_version == cited.data_version
    )
    theirs = next(
        r
        for r in (art / "cells" / "alpha" / "cand.r0").glob("*/record.json")
        if load_record(r).generation == "g0001"
    )
    for target, forged, says in (
        (path, forged_reason(path), "edited since"),
        (mine, theirs.read_text(), "evidence cell alpha cand.r0 does not verify"),
    ):
        original = target.read_text()
        target.chmod(0o644)
        target.write_text(forged)
        res = subprocess.run(cli("apply"), env=env, capture_output=True)
        assert res.returncode == 2 and says in res.stderr.decode(), res.stderr.decode()
        assert skill_tree(root / "skills") == before
        target.write_text(original)
    applied = subprocess.run(cli("apply"), env=env, capture_output=True)
    assert applied.returncode == 0, applied.stderr.decode()[-2000:]
    assert skill_tree(root / "skills")["plan/SKILL.md"].endswith(b"Budget.\n"), "c2 applied"


def forged_reason(path: Path) -> str:
    """A decision document with one more reason: still a valid document, not the recorded one."""
    body = json.loads(path.read_text())
    body["decision"]["reasons"].append("forged after the decision")
    return json.dumps(body)


def ui_decision(root: Path, art: Path, env: dict[str, str]) -> None:
    """Materialize ``promotion_decision`` alone, as the UI's Materialize button does."""
    import dagster as dg

    from bench_assets.defs.resources import BenchResource
    from bench_assets.driver.instance import materialize
    from bench_assets.driver.runs import assets_by_name

    instance = dg.DagsterInstance.from_config(env.get("DAGSTER_HOME") or os.environ["DAGSTER_HOME"])
    try:
        materialize(
            instance,
            assets_by_name(str(root), ("promotion_decision",)),
            {"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
        )
    finally:
        instance.dispose()


FAULTS = Path(__file__).parent / "faults"
"""``sitecustomize.py`` injecting faults into every Python process of a test (see there)."""


def disk_full_env(env: dict[str, str], task: str, cell: str, flag: Path) -> dict[str, str]:
    """``env`` in which building ``task cell``'s worktree fails with ENOSPC while ``flag`` exists
    (in the ``wfbench`` process and in every run worker it starts)."""
    path = os.pathsep.join(p for p in (str(FAULTS), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "WFBENCH_TEST_DISK_FULL": f"{task} {cell} {flag}"}


def g0002_records(art: Path, task: str, cell: str) -> list:  # type: ignore[type-arg]
    """The records g0002 paid for one cell, oldest first."""
    out = []
    for path in sorted((art / "cells" / task / cell).glob("*/record.json")):
        rec = load_record(path)
        if rec.generation == "g0002":
            out.append(rec)
    return out


def progress_counts(stderr: str) -> list[tuple[int, int]]:
    """Every ``[done/total]`` of an ``evolve``'s progress lines."""
    return [(int(a), int(b)) for a, b in re.findall(r"\[(\d+)/(\d+)\]", stderr)]


@BOTH_PATHS
def test_a_full_disk_on_one_cell_then_a_kill_the_resumed_generation_re_pays_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 29: the disk holding the worktrees is full, so one candidate cell records
    ``infra-error``; the generation is killed before its retry is paid. The resumed ``evolve``
    re-pays the cell (its retries survived the crash) and the decision can promote; the progress
    never counts past its total."""
    root, art = promoting_bench(tmp_path), tmp_path / "art"
    first = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    flag = tmp_path / "disk-is-full"
    flag.touch()
    full = disk_full_env(env, "alpha", "cand.r0", flag)

    def recorded_then_next_cell() -> bool:
        """The infra-error is recorded (Dagster too: the next cell has started)."""
        failed = [r for r in g0002_records(art, "alpha", "cand.r0") if r.error_kind]
        return bool(failed) and any((art / "work").glob("*"))

    killed = run_until(cli("evolve", "--tasks", str(root)), full, recorded_then_next_cell)
    assert killed == -signal.SIGKILL
    failed = g0002_records(art, "alpha", "cand.r0")[0]
    assert failed.error_kind == "infra-error" and "No space left on device" in failed.error_detail
    assert [g for g, _ in decisions(art)] == ["g0001"]
    flag.unlink()  # space freed
    resumed = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=full, capture_output=True
    )
    err = resumed.stderr.decode()
    assert resumed.returncode == 0, err[-2000:]
    assert json.loads(resumed.stdout)["decision"] == "promote", err[-2000:]
    assert re.search(r"alpha cand\.r0: infra-error before the interruption; retry [12] of 2", err)
    assert all(done <= total for done, total in progress_counts(err)), progress_counts(err)
    *attempts, paid = g0002_records(art, "alpha", "cand.r0")
    assert attempts[0] == failed and paid.error_kind is None, "re-paid, and resolved"
    assert len(attempts) <= 2, "within policy.retries (2)"
    doc = decision_of(art, "g0002")
    lin = doc.lineage_of("alpha", "cand", 0)
    assert lin is not None and lin.data_version == paid.data_version
    assert_decided_on_own_evidence(art, "g0002")


def test_a_retry_counts_as_a_retry_not_as_a_cell_past_the_total(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A systemic failure re-paid within the generation: ``[done/total]`` never passes its total
    (it read ``[80/78]`` with retries), and the line says retried."""
    root = promoting_bench(tmp_path)
    flag = tmp_path / "disk-is-full"
    flag.touch()
    full = disk_full_env(env, "beta", "workflow.r0", flag)
    res = subprocess.run(cli("evolve", "--tasks", str(root)), env=full, capture_output=True)
    err = res.stderr.decode()
    assert res.returncode == 0, err[-2000:]
    counts = progress_counts(err)
    assert counts and all(done <= total for done, total in counts), counts
    assert counts[-1] == (6, 6), counts
    assert "beta workflow.r0: infra-error; retry 1 of 2" in err and "retry 2 of 2" in err
    assert "2 retried" in err, err[-2000:]


def cell_run_pids(home: Path, generation: str) -> dict[str, int]:
    """Run id -> worker pid of the generation's cell runs that are running now."""
    import dagster as dg

    out = {}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(
            filters=dg.RunsFilter(
                statuses=[dg.DagsterRunStatus.STARTED], tags={"wfbench/generation": generation}
            )
        )
        for run in runs:
            if "dagster/partition/cell" not in run.tags:
                continue
            # A cell paid in a cell_batch run is an in-process run of that run's worker.
            worker = run.tags.get("wfbench/cell_batch", run.run_id)
            for event in instance.all_logs(worker, of_type=dg.DagsterEventType.ENGINE_EVENT):
                found = re.search(r"Started process for run \(pid: (\d+)\)", event.message)
                if found:
                    out[run.run_id] = int(found.group(1))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("env", ["queue"], indirect=True)
def test_kill_9_of_a_cell_run_is_re_paid_and_the_generation_decides(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The run-queue path: one cell's run worker is killed with SIGKILL while it runs. Its code
    server fails the run, the generation re-pays the cell as a systemic failure, decides on
    its own cells, and pays no other cell twice."""
    root, art = promoting_bench(tmp_path), tmp_path / "art"
    home = Path(env["DAGSTER_HOME"])
    proc = subprocess.Popen(
        cli("evolve", "--tasks", str(root), "--json"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    killed: dict[str, int] = {}
    deadline = time.monotonic() + 600
    while not killed and proc.poll() is None and time.monotonic() < deadline:
        killed = cell_run_pids(home, "g0001")
        time.sleep(0.2)
    assert killed, "no cell run was seen running"
    run_id, pid = next(iter(killed.items()))
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert json.loads(out)["decision"] == "promote"
    assert "retry 1 of 2" in err.decode(), err.decode()[-3000:]
    assert all(n == 1 for n in records_by_generation(art).values())
    assert len(records_by_generation(art)) == 6, "every cell paid, the killed one once more"
    assert_decided_on_own_evidence(art, "g0001")
    with __import__("dagster").DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status.value == "FAILURE"


def test_a_second_writer_exits_2_naming_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = two_task_bench(tmp_path, runs=1)
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "art"))
    lock = ArtifactStore(tmp_path / "art").writer_lock()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from bench_assets.generation.queue import writer_lock\n"
            f"with writer_lock(Path({str(lock)!r}), 'wfbench evolve (the first)'):\n"
            "    print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        res = CliRunner().invoke(main, ["evolve", "--tasks", str(root)])
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert res.exit_code == 2, res.output
    assert "another wfbench writer is running: `wfbench evolve (the first)`" in res.output
    assert f"pid {holder.pid}" in res.output
    assert not (tmp_path / "art" / "cells").exists(), "nothing was paid"


def test_two_concurrent_evolves_one_runs_one_exits_2(tmp_path: Path, env: dict[str, str]) -> None:
    root, art = two_task_bench(tmp_path, runs=1), tmp_path / "art"
    procs = [
        subprocess.Popen(
            cli("evolve", "--tasks", str(root)),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [o[1].decode()[-500:] for o in outs]
    loser = next(o for p, o in zip(procs, outs, strict=True) if p.returncode == 2)
    assert "another wfbench writer is running" in loser[1].decode()
    assert decisions(art) == [("g0001", decisions(art)[0][1])], "one decision per generation"
    assert all(n == 1 for n in records_by_generation(art).values())


def g0002_paid(art: Path) -> int:
    return sum(n for (_, _, g), n in records_by_generation(art).items() if g == "g0002")


def aggregate_files(art: Path) -> int:
    return len(list((art / "aggregates").glob("*/*.json")))


@pytest.mark.parametrize(
    ("env", "point"),
    [
        *(("in-process", p) for p in ("30%", "80%", "during a cell", "during the decision")),
        pytest.param("queue", "during a cell", marks=pytest.mark.slow),
    ],
    indirect=["env"],
)
def test_kill_9_then_evolve_pays_nothing_twice_and_decides_on_own_cells(
    tmp_path: Path, env: dict[str, str], point: str
) -> None:
    """g0002 pays 4 candidate cells and 3 canaries (7: one of baseline, one gate canary of
    workflow per task); it is SIGKILLed at ``point``, then ``wfbench evolve`` resumes it: no cell
    (canaries included) is paid twice, and the decision cites only c2's cells, paid in g0002."""
    root, art = two_task_bench(tmp_path, runs=2, canaries=1), tmp_path / "art"
    first = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    before = aggregate_files(art)
    ready = {
        "30%": lambda: g0002_paid(art) >= 2,
        "80%": lambda: g0002_paid(art) >= 6,
        "during a cell": lambda: g0002_paid(art) >= 1 and any((art / "work").glob("*")),
        "during the decision": lambda: aggregate_files(art) > before,
    }[point]
    status = run_until(cli("evolve", "--tasks", str(root)), env, ready)
    assert status == -signal.SIGKILL, f"the run ended ({status}) before the kill point"
    assert [g for g, _ in decisions(art)] == ["g0001"]
    resumed = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=env, capture_output=True
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert json.loads(resumed.stdout)["generation"] == "g0002"
    counts = records_by_generation(art)
    assert all(n == 1 for n in counts.values()), f"a cell was paid twice: {counts}"
    assert g0002_paid(art) == 7
    assert_decided_on_own_evidence(art, "g0002")


def test_a_record_edited_by_one_byte_is_neither_reused_nor_evidence(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root, art = two_task_bench(tmp_path, runs=1), tmp_path / "art"
    assert subprocess.run(cli("evolve", "--tasks", str(root)), env=env).returncode == 0
    (path,) = list((art / "cells" / "alpha" / "workflow.r0").glob("*/record.json"))
    text = path.read_text()
    edited = text.replace('"turns":3', '"turns":4', 1)  # record.json is canonical (compact)
    assert edited != text
    path.chmod(0o644)
    path.write_text(edited)  # still valid JSON, still a valid record: only the digest tells
    res = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    counts = records_by_generation(art)
    assert counts[("alpha", "workflow.r0", "g0002")] == 1, "the edited cell was paid again"
    doc = decision_of(art, "g0002")
    lin = doc.lineage_of("alpha", "workflow", 0)
    assert lin is not None and lin.generation == "g0002" and not lin.reused


def test_a_truncated_record_is_paid_again_and_named_not_a_traceback(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root, art = two_task_bench(tmp_path, runs=1), tmp_path / "art"
    assert subprocess.run(cli("evolve", "--tasks", str(root)), env=env).returncode == 0
    (path,) = list((art / "cells" / "beta" / "baseline.r0").glob("*/record.json"))
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:100])
    listing = subprocess.run(cli("cells", "--tasks", str(root)), env=env, capture_output=True)
    assert listing.returncode == 0 and b"Traceback" not in listing.stderr
    res = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr.decode()[-2000:]
    assert records_by_generation(art)[("beta", "baseline.r0", "g0002")] == 1
    with pytest.raises(RecordCorrupt, match="record.json: not a valid cell record"):
        load_record(path)


@pytest.mark.parametrize(
    ("env", "how"),
    [
        ("in-process", "SIGINT"),
        ("in-process", "SIGTERM with SIGINT ignored"),
        pytest.param("queue", "SIGINT", marks=pytest.mark.slow),
    ],
    indirect=["env"],
)
def test_cancel_stops_at_once_with_one_line_and_exit_130(
    tmp_path: Path, env: dict[str, str], how: str
) -> None:
    """Ctrl-C (or SIGTERM, even from a script that ignores SIGINT): exit 130, one line, no
    traceback, no cell paid after it; the next evolve resumes the same generation."""
    root, art = two_task_bench(tmp_path, runs=2), tmp_path / "art"

    def ignore_sigint() -> None:
        if how != "SIGINT":
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        cli("evolve", "--tasks", str(root)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=ignore_sigint,  # noqa: PLW1509
    )
    deadline = time.monotonic() + 120
    while sum(records_by_generation(art).values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT if how == "SIGINT" else signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"Traceback" not in err and err.decode().rstrip().endswith("wfbench: cancelled")
    paid = sum(records_by_generation(art).values())
    time.sleep(2)
    assert sum(records_by_generation(art).values()) == paid, "nothing is paid after the cancel"
    assert decisions(art) == []
    again = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=env, capture_output=True
    )
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    assert json.loads(again.stdout)["generation"] == "g0001"
    assert all(n == 1 for n in records_by_generation(art).values())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_dagster_defers_past_its_last_checkpoint_still_cancels(
    monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    """Dagster holds a Ctrl-C that arrives during a run until its next checkpoint and drops it
    when there is none left (e.g. while it writes the last step's events); the run then
    succeeds. The driver must still stop, or the generation goes on paying cells (the cause of
    the test above exiting 0 under load)."""
    from types import SimpleNamespace

    from dagster._utils.interrupts import capture_interrupts

    from bench_assets.driver import instance as driver_instance

    def run_interrupted_after_its_last_step(*_args: object, **_kwargs: object) -> object:
        with capture_interrupts():
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        return SimpleNamespace(success=True, all_events=[])

    previous = signal.getsignal(signal.SIGTERM)  # Dagster leaves SIGTERM mapped to SIGINT's
    monkeypatch.setattr(driver_instance.dg, "materialize", run_interrupted_after_its_last_step)
    try:
        with pytest.raises(KeyboardInterrupt):
            driver_instance.materialize(None, [], {})  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 2 MB tmpfs (root only; skipped with the reason elsewhere)."""
    where = tmp_path / "tiny"
    where.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_artifact_store_is_one_line_and_exit_1(
    tmp_path: Path, env: dict[str, str], tiny_disk: Path
) -> None:
    root = two_task_bench(tmp_path, runs=1)
    (tiny_disk / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 64 * 1024))
    env = {**env, "WFBENCH_ARTIFACTS": str(tiny_disk / "art")}
    res = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    err = res.stderr.decode()
    assert res.returncode == 1, err[-2000:]
    assert "Traceback" not in err
    last = err.rstrip().splitlines()[-1]
    assert last.startswith("wfbench: "), last
    assert "No space left on device" in last or "Out of diskspace" in last, last
    assert str(tiny_disk) in last or "No space left" in last, "the message says where or why"


def test_corrupted_stored_oracle_and_template_are_rebuilt_before_any_cell(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root, art = two_task_bench(tmp_path, runs=1), tmp_path / "art"
    assert subprocess.run(cli("evolve", "--tasks", str(root)), env=env).returncode == 0
    (oracle_file,) = list((art / "oracles").glob("*/files/test_oracle_alpha.py"))
    good_oracle = oracle_file.read_bytes()
    (template_file,) = list((art / "templates").glob("*/tree/calc/__init__.py"))
    good_template = template_file.read_bytes()
    for path, data in ((oracle_file, good_oracle), (template_file, good_template)):
        path.chmod(0o644)
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
    res = subprocess.run(cli("evolve", "--tasks", str(root)), env=env, capture_output=True)
    err = res.stderr.decode()
    assert res.returncode == 0, err[-2000:]
    assert "failed verification" in err and "rebuilding it" in err
    # The first finished cell's progress line ("[5/6] alpha ...": reused cells count as done).
    first_cell = re.search(r"\[\d+/\d+\] \S+ \S+: ", err)
    assert first_cell, err[-2000:]
    before_cells = err.index("failed verification") < first_cell.start()
    assert before_cells, "verified before the first cell was paid"
    assert oracle_file.read_bytes() == good_oracle
    assert template_file.read_bytes() == good_template


def test_a_task_edited_during_the_generation_aborts_it_naming_the_file(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Cells must be graded with the files their records name: an edit to a task's verify
    command mid-generation stops it (no decision) and names the file; restoring it resumes."""
    root, art = two_task_bench(tmp_path, runs=2), tmp_path / "art"
    task_file = root / "beta" / "task.yaml"
    original = task_file.read_text()
    proc = subprocess.Popen(
        cli("evolve", "--tasks", str(root)), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not (art / "generations" / "g0001" / "tasks" / "alpha.json").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    edited = original.replace("  - tests\n", "  - tests/test_calc.py\n")  # verify: {pytest: [...]}
    assert edited != original
    task_file.write_text(edited)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err.decode()[-2000:]
    assert "changed during the generation (beta/task.yaml)" in err.decode()
    assert decisions(art) == []
    task_file.write_text(original)
    again = subprocess.run(
        cli("evolve", "--tasks", str(root), "--json"), env=env, capture_output=True
    )
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    assert json.loads(again.stdout)["generation"] == "g0001"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"instance_id": "alpha", "model_patch": "\xff\xfe"}\n', "line 1: not UTF-8"),
        (b"[" * 100000 + b"]" * 100000 + b"\n", "line 1: invalid prediction"),
        (b"", "no predictions in the file"),
    ],
    ids=["non-utf8", "deeply-nested", "empty"],
)
def test_bad_predictions_exit_2_naming_the_file(
    tmp_path: Path, env: dict[str, str], content: bytes, says: str
) -> None:
    root = two_task_bench(tmp_path, runs=1)
    preds = tmp_path / "preds.jsonl"
    preds.write_bytes(content)
    res = subprocess.run(
        cli("grade", "--tasks", str(root), "--predictions", str(preds)),
        env=env,
        capture_output=True,
    )
    err = res.stderr.decode()
    assert res.returncode == 2, err[-1000:]
    assert "Traceback" not in err and f"{preds}: " in err and says in err, err[-1000:]


def test_report_never_shows_an_older_generations_report_as_the_latest(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision whose report failed to write: `wfbench report` says so (exit 1) instead of
    printing the previous decision's report."""
    import dagster as dg

    from bench_assets.defs.resources import BenchResource
    from bench_assets.driver.instance import materialize
    from bench_assets.driver.runs import assets_by_name

    root, art = two_task_bench(tmp_path, runs=1), tmp_path / "art"
    assert subprocess.run(cli("evolve", "--tasks", str(root)), env=env).returncode == 0
    ok = subprocess.run(cli("report"), env=env, capture_output=True)
    assert ok.returncode == 0 and b"html:" in ok.stdout
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    instance = dg.DagsterInstance.get()
    try:  # a new decision, and (as if its report had failed to write) no report for it
        materialize(
            instance,
            assets_by_name(str(root), ("promotion_decision",)),
            {"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
        )
    finally:
        instance.dispose()
    stale = subprocess.run(cli("report"), env=env, capture_output=True)
    assert stale.returncode == 1, stale.stdout.decode()
    assert b"has no report" in stale.stderr and b"html:" not in stale.stdout


def test_apply_leftovers_never_enter_the_incumbent_snapshot(tmp_path: Path) -> None:
    from bench_assets.inputs.skills import describe
    from bench_assets.kernel.errors import InputError

    root = two_task_bench(tmp_path, runs=1)
    leftover = root / "skills" / "work" / ".SKILL.md.wfbench-apply-0123456789ab.bak"
    leftover.write_text("half-applied bytes")
    with pytest.raises(InputError, match="leftovers of an interrupted apply"):
        describe(root / "skills")


def test_runs_a_dead_driver_left_behind_are_ended_on_the_next_start(tmp_path: Path) -> None:
    """Runs left NOT_STARTED/STARTING/STARTED by a killed evolve used to stay so forever."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from bench_assets.driver.transaction import GEN_TAG, clear_orphans

    with dg.instance_for_test() as instance:
        ids = {}
        for status in (
            dg.DagsterRunStatus.NOT_STARTED,
            dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED,
        ):
            run = DagsterRun(job_name="__ASSET_JOB", status=status, tags={GEN_TAG: "g0001"})
            instance.add_run(run)
            ids[status] = run.run_id
        untagged = DagsterRun(job_name="__ASSET_JOB", status=dg.DagsterRunStatus.NOT_STARTED)
        instance.add_run(untagged)  # not a generation's run: a UI launch, left alone
        said: list[str] = []
        clear_orphans(instance, said.append)
        for run_id in ids.values():
            run = instance.get_run_by_id(run_id)
            assert run is not None and run.is_finished, run
        left = instance.get_run_by_id(untagged.run_id)
        assert left is not None and left.status == dg.DagsterRunStatus.NOT_STARTED
        assert said == ["ended 3 run(s) left by an interrupted generation"]


def test_pool_slots_a_killed_run_held_are_freed_on_the_next_start() -> None:
    """A run killed with its process never releases its ``agent_sessions`` slot; marked failed,
    it still held it, and a resumed generation with a pool of 1 waited forever for it."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from bench_assets.driver.transaction import GEN_TAG, clear_orphans

    with dg.instance_for_test() as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots("agent_sessions", 1)
        killed = DagsterRun(job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED)
        killed = killed.with_tags({GEN_TAG: "g0002"})
        instance.add_run(killed)
        assert storage.claim_concurrency_slot("agent_sessions", killed.run_id, "cells").is_claimed
        live = DagsterRun(job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED)
        instance.add_run(live)  # a UI launch, running: its claim (pending) is left alone
        storage.claim_concurrency_slot("agent_sessions", live.run_id, "cells")
        said: list[str] = []
        clear_orphans(instance, said.append)
        assert storage.get_concurrency_info("agent_sessions").active_run_ids == set()
        again = storage.claim_concurrency_slot("agent_sessions", live.run_id, "cells")
        assert again.is_claimed, "the killed run's slot is free for the live one"
        assert said == [
            "ended 1 run(s) left by an interrupted generation",
            "freed the pool slots 1 ended run(s) still held",
        ]
