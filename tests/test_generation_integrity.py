"""A generation is a transaction: its own evidence set, one writer, verified reuse, kill -9.

Each test builds the fault the way it happens (a killed process, a second writer, a byte edited
in a stored record, an infra failure) and shows the decision never rests on foreign or corrupted
evidence and no cell is paid twice.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.documents import load_decision
from bench_assets.errors import RecordCorrupt
from bench_assets.ledger import read as read_ledger
from bench_assets.records import load_record
from bench_assets.store import ArtifactStore
from tests.conftest import add_task, write_yaml
from tests.test_dagster_cells import fix_patch, replay_bench

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


def run_until(argv: list[str], env: dict[str, str], ready, timeout_s: float = 180) -> int:
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


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e["WFBENCH_ARTIFACTS"] = str(tmp_path / "art")
    e["WFBENCH_IN_PROCESS"] = "1"
    return e


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
            "from bench_assets.generation import writer_lock\n"
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


@pytest.mark.parametrize("point", ["30%", "80%", "during a cell", "during the decision"])
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
    edited = text.replace('"turns": 3', '"turns": 4', 1)
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


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM with SIGINT ignored"])
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
    from bench_assets.driver.runqueue import assets_by_name

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
    from bench_assets.errors import InputError
    from bench_assets.skills import describe

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
