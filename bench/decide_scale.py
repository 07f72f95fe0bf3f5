"""``decide`` at 100 and 1,000 tasks, this tree next to another (main's HEAD), side by side.

A synthetic instance is built cheaply (once per ``--workdir``: a kept one is reused), with no
agent session and no input build: N copies of the demo task ``csv-quoted-fields`` (``t00000``
...) with the demo's three implementation arms (``baseline``, ``workflow``,
``candidate_workflow``; 3 runs each, 9 cells per task). For two generations it writes what a
paid generation leaves behind, directly:

* **g0001**: every cell fresh — a real ``record.json`` per cell (outcome and usage from the demo's
  replays and ``replays/expected.json``), a materialization of the cell partition carrying exactly
  the metadata the cell asset writes (``defs.cells.cell_metadata``) under one run id of the
  generation, and the generation's manifest (header + one task file each, every cell ``run``);
* **g0002** (candidate ``c0002-plan-budget``): candidate cells fresh, one gate canary per task
  (``workflow.r0``, paid fresh as the demo's g0002 does), the other comparator cells reused
  from g0001's materializations (a new materialization with ``reused: true``, as the cell asset
  writes one), the manifest naming g0001's run and data version for each reused cell.

The identity digests are synthetic (the manifest and the records agree), which is all a
generation's decision checks. ``incumbent_skills`` and ``candidate_overlay`` are real
materializations. Then, for each tree (``--baseline DIR``: another worktree, with its own
``.venv``), each generation is decided on a fresh copy of the instance and artifacts (restored at
the paths they were recorded at, as the cells' metadata name them), in its own
process: ``materialize_decision`` exactly as ``wfbench evolve`` calls it (aggregates, gate,
report, ledger). Printed: the decide call's wall seconds, the whole process's wall seconds and
peak RSS (``/usr/bin/time``), the verdict and the number of evidence cells (both trees must
agree), and the ratio baseline / this tree.

Also printed: the decide call's CPU seconds (user + system of the process during the call: what
load on a shared machine inflates least). ``--repeat K`` decides each generation K times per
tree, the trees interleaved, and shows the run with the median wall time (``--json`` lists every
run's wall and CPU seconds).

Run: ``.venv/bin/python bench/decide_scale.py [--sizes 100,1000] [--baseline ../wt-main]
[--workdir DIR] [--repeat K] [--json]``. Target (issue 24): decide at 1,000 tasks <= 10 s,
growth 100 to 1,000 <= 12x.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from scale import (  # noqa: E402  (shared with scale.py)
    copy_demo_task,
    replayed_fields,
    write_generation_header,  # noqa: E402
)
from scale import flush_events as _flush  # noqa: E402
from scale import store_event as _store  # noqa: E402

DEMO = REPO / "tasks"
DEMO_TASK = "csv-quoted-fields"
ARMS = ("baseline", "workflow", "candidate_workflow")
TARGET_S = 10.0
TARGET_GROWTH = 12.0


def _log(msg: str) -> None:
    print(f"[decide_scale] {msg}", file=sys.stderr, flush=True)


def make_suite(n: int, dest: Path) -> Path:
    """N copies of the demo task with the demo's implementation arms, skills and candidates."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    bench = yaml.safe_load((DEMO / "bench.yaml").read_text())
    bench["arms"] = {a: bench["arms"][a] for a in ARMS}
    (dest / "bench.yaml").write_text(yaml.safe_dump(bench, sort_keys=False))
    for name in ("skills", "candidates"):
        shutil.copytree(DEMO / name, dest / name)
    return copy_demo_task(dest, n)


def build(n: int, work: Path) -> tuple[Path, Path, Path, dict[str, Path]]:
    """The suite, and a snapshot (home, artifacts) after each generation's cells are recorded."""
    from bench_assets.agents.replay import cached_predictions
    from bench_assets.cells.cellkeys import cell_key
    from bench_assets.cells.pipeline import SANDBOX_BACKEND
    from bench_assets.cells.records import CellRecord, new_record_id, now_iso, write_record
    from bench_assets.config.models import ReplayAgent
    from bench_assets.decision.documents import CellMaterialization
    from bench_assets.decision.manifest import (
        ManifestCell,
        TaskManifest,
        write_task,
    )
    from bench_assets.defs.cells import candidate_overlay, cell_metadata
    from bench_assets.defs.inputs import incumbent_skills
    from bench_assets.defs.partitions import TASKS_PARTITIONS_NAME
    from bench_assets.defs.resources import BenchResource, latest_metadata
    from bench_assets.driver.instance import materialize
    from bench_assets.kernel.hashing import sha256_json
    from bench_assets.kernel.store import ArtifactStore
    from bench_assets.tasks.catalog import load_benchmark

    done = work / f"built{n}.json"
    if done.exists():  # --workdir kept from an earlier run: the same instance, not rebuilt
        _log(f"{n}: reusing the instance built in {work}")
        snaps = {g: Path(p) for g, p in json.loads(done.read_text()).items()}
        return work / f"suite{n}", work / f"home{n}", work / f"art{n}", snaps
    _fast_setup()
    root = make_suite(n, work / f"suite{n}")
    home, art = work / f"home{n}", work / f"art{n}"
    for d in (home, art):
        shutil.rmtree(d, ignore_errors=True)
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    bench = load_benchmark(root)
    artifacts = ArtifactStore(art)
    tasks = bench.task_ids()
    expected = json.loads((root / "replays" / "expected.json").read_text())
    resources = {"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))}
    snapshots: dict[str, Path] = {}
    prev: dict[tuple[str, str], tuple[str, str]] = {}  # (task, cell) -> (run id, data version)
    pairs_with = bench.config.arms["candidate_workflow"].pairs_with
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(TASKS_PARTITIONS_NAME, tasks)
        materialize(instance, [incumbent_skills], resources)
        skills = str(latest_metadata(instance, "incumbent_skills", None)["digest"])
        for generation, candidate in (
            ("g0001", "c0001-test-first"),
            ("g0002", "c0002-plan-budget"),
        ):
            start = time.perf_counter()
            materialize(
                instance,
                [candidate_overlay],
                resources,
                op_config={"candidate_overlay": {"candidate": candidate}},
            )
            overlay = str(latest_metadata(instance, "candidate_overlay", None)["digest"])
            run_id = f"{generation}-synthetic-run-{n:05d}"
            folder = artifacts.generation(generation)
            write_generation_header(
                instance, folder, generation, candidate, tasks, root, sha256_json({"synthetic": n})
            )
            for task in tasks:
                cells: list[ManifestCell] = []
                for arm in ARMS:
                    spec = bench.config.arms[arm]
                    asset = "candidate_cells" if spec.role == "candidate" else "comparator_cells"
                    ident = {"synthetic": [task, arm, overlay if spec.role == "candidate" else ""]}
                    digest = sha256_json(ident)
                    for run in range(bench.config.runs):
                        cell = cell_key(arm, run)
                        pk = str(dg.MultiPartitionKey({"task": task, "cell": cell}))
                        canary = generation != "g0001" and arm == pairs_with and run == 0
                        if asset == "comparator_cells" and (task, cell) in prev and not canary:
                            src_run, src_dv = prev[task, cell]
                            mds = _cell_md(instance, asset, pk)
                            lineage = CellMaterialization.from_metadata(mds, pk).model_copy(
                                update={
                                    "reused": True,
                                    "reused_from_run": src_run,
                                    "reused_data_version": src_dv,
                                    "ran_because": None,
                                }
                            )
                            from bench_assets.cells.records import load_record

                            record = load_record(Path(lineage.record_path))
                            md = cell_metadata(record, Path(lineage.record_path), lineage)
                            _store(instance, asset, pk, md, src_dv, run_id)
                            cells.append(
                                ManifestCell(
                                    task=task,
                                    cell=cell,
                                    asset=asset,
                                    role=spec.role,
                                    identity_digest=digest,
                                    action="reuse",
                                    kind="reusable",
                                    source_run_id=src_run,
                                    source_data_version=src_dv,
                                )
                            )
                            continue
                        assert isinstance(spec.agent, ReplayAgent)
                        pred = cached_predictions(root / spec.agent.predictions)[(task, run)]
                        outcome = expected[arm][DEMO_TASK][run]
                        record = CellRecord(
                            record_id=new_record_id(),
                            **replayed_fields(bench, task, arm, run, generation, pred, outcome),
                            identity_digest=digest,
                            identity=ident,
                            skills_digest=skills,
                            overlay_digest=overlay if spec.role == "candidate" else None,
                            binding_digest="synthetic",
                            resolved_sha="0" * 40,
                            sanitized_sha="0" * 40,
                            oracle_digest="synthetic",
                            graph_digest="synthetic",
                            harness_version="synthetic",
                            agent_version=None,
                            sandbox_backend=SANDBOX_BACKEND,
                            timings={},
                            recorded_at=now_iso(),
                        )
                        path = write_record(artifacts.cell(task, cell, record.record_id), record)
                        lineage = CellMaterialization.fresh(record, path, "missing (synthetic)")
                        md = cell_metadata(record, path, lineage)
                        _store(instance, asset, pk, md, record.data_version, run_id)
                        prev[task, cell] = (run_id, record.data_version)
                        cells.append(
                            ManifestCell(
                                task=task,
                                cell=cell,
                                asset=asset,
                                role=spec.role,
                                identity_digest=digest,
                                action="run",
                                kind="missing"
                                if generation == "g0001"
                                else ("canary" if canary else "candidate"),
                            )
                        )
                write_task(folder, TaskManifest(generation=generation, task=task, cells=cells))
            _flush(instance)
            _log(f"{n}: recorded {generation} in {time.perf_counter() - start:.1f} s")
            snap = work / f"snap{n}-{generation}"
            shutil.rmtree(snap, ignore_errors=True)
            shutil.copytree(home, snap / "home")
            shutil.copytree(art, snap / "art")
            snapshots[generation] = snap
    done.write_text(json.dumps({g: str(p) for g, p in snapshots.items()}))
    return root, home, art, snapshots


def _fast_setup() -> None:
    """Setup only (never a timed decision, which runs in its own process): no fsync of record
    files and no synchronous sqlite commits, so 18,000 cells are recorded in minutes."""
    import sqlalchemy as sa

    os.fsync = lambda fd: None

    @sa.event.listens_for(sa.engine.Engine, "connect")
    def _no_sync(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=OFF")
        cur.close()


def _cell_md(instance: dg.DagsterInstance, asset: str, pk: str) -> dict[str, Any]:
    from bench_assets.defs.resources import latest_metadata

    return latest_metadata(instance, asset, pk)


DECIDE = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import dagster as dg
from bench_assets.driver.instance import materialize_decision
root, art, generation = sys.argv[1:4]
tasks = sorted(p.name for p in __import__("pathlib").Path(root).iterdir()
               if (p / "task.yaml").is_file())
with dg.DagsterInstance.get() as instance:
    start, cpu = time.perf_counter(), time.process_time()
    out = materialize_decision(instance, tasks, tasks_dir=root, artifact_root=art,
        generation=generation, aborted=False, progress=lambda m: print(m, file=sys.stderr))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
md = out["decision"]
doc = json.loads(open(md["decision_path"]).read())
print(json.dumps({"decide_s": wall, "decide_cpu_s": cpu, "decision": md.get("decision"),
    "evidence": len(doc["lineage"]), "refused": len(doc.get("refused") or [])}))
"""


def decide(
    tree: Path, snap: Path, root: Path, generation: str, home: Path, art: Path
) -> dict[str, Any]:
    """One decision in its own process, with ``tree``'s code, on ``snap`` restored where the
    instance was recorded (``home``, ``art``): the cells' metadata name their records by those
    paths, so the decision reads each record at the path a real instance's artifact store gives
    (a copy elsewhere made the evidence rows re-checked at other paths, reading every record
    twice)."""
    for name, dest in (("home", home), ("art", art)):
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(snap / name, dest)
    py = tree / ".venv" / "bin" / "python"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WFBENCH_ARTIFACTS": str(art),
        "WFBENCH_TASKS": str(root),
        "PYTHONPATH": str(tree),
    }
    with tempfile.NamedTemporaryFile(mode="r") as rss:
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, str(py), "-c", DECIDE]
            + [str(root), str(art), generation],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        words = rss.read().split()
    if proc.returncode:
        raise RuntimeError(f"decide with {tree} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out |= {"process_s": wall, "peak_mb": int(words[-1]) / 1024 if words else 0.0}
    return out


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median decide wall time (its own CPU, process and peak figures), and
    every run's wall and CPU seconds."""
    ordered = sorted(runs, key=lambda r: r["decide_s"])
    mid = ordered[(len(ordered) - 1) // 2]
    return {
        **mid,
        "runs_decide_s": [round(r["decide_s"], 2) for r in runs],
        "runs_cpu_s": [round(r["decide_cpu_s"], 2) for r in runs],
    }


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000", help="comma-separated task counts")
    ap.add_argument(
        "--baseline", type=Path, default=None, help="another worktree (with .venv) to compare"
    )
    ap.add_argument("--generations", default="g0001,g0002")
    ap.add_argument("--workdir", type=Path, default=None, help="keep suites and instances here")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="decide each generation this many times per tree, interleaved; the median is shown",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trees = {"this": REPO}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wfbench-decide-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for n in [int(s) for s in args.sizes.split(",")]:
        root, home, art, snaps = build(n, work)
        for generation in args.generations.split(","):
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
            for _ in range(args.repeat):  # A/B interleaved: load drifts alike for both trees
                for name, tree in trees.items():
                    got = decide(tree, snaps[generation], root, generation, home, art)
                    _log(f"{n} {generation} {name}: {got}")
                    runs[name].append(got)
            for name, got_all in runs.items():
                row = median_run(got_all)
                rows.append({"tasks": n, "generation": generation, "tree": name, **row})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(report(rows, list(trees)))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


def report(rows: list[dict[str, Any]], trees: list[str]) -> str:
    by = {(r["tasks"], r["generation"], r["tree"]): r for r in rows}
    head = f"{'tasks':>6} {'gen':<6}"
    for t in trees:
        head += f" {t + ' decide s':>17} {'cpu s':>8} {'process s':>10} {'peak MB':>8}"
    if "baseline" in trees:
        head += f" {'baseline/this':>14}"
    head += "  verdict (evidence cells)"
    lines = ["decide (materialize_decision) on synthetic suites, 9 cells per task", head]
    lines.append("-" * len(head))
    for tasks, gen in dict.fromkeys((r["tasks"], r["generation"]) for r in rows):
        line = f"{tasks:>6} {gen:<6}"
        verdicts = []
        for t in trees:
            r = by[tasks, gen, t]
            line += f" {r['decide_s']:>17.2f} {r['decide_cpu_s']:>8.2f}"
            line += f" {r['process_s']:>10.2f} {r['peak_mb']:>8.0f}"
            verdicts.append(f"{r['decision']} ({r['evidence']})")
        if "baseline" in trees:
            ratio = by[tasks, gen, "baseline"]["decide_s"] / by[tasks, gen, "this"]["decide_s"]
            line += f" {ratio:>13.1f}x"
        agree = len(set(verdicts)) == 1
        lines.append(line + "  " + " / ".join(verdicts) + ("" if agree else "  DISAGREE"))
    sizes = sorted({r["tasks"] for r in rows})
    if 1000 in sizes:
        lines.append("targets (this tree):")
        for gen in dict.fromkeys(r["generation"] for r in rows):
            big = by[1000, gen, "this"]["decide_s"]
            line = f"  {gen}: decide at 1,000 tasks {big:.2f} s <= {TARGET_S} s: "
            line += "met" if big <= TARGET_S else "NOT met"
            if 100 in sizes:
                g = big / by[100, gen, "this"]["decide_s"]
                line += f"; growth 1000/100 {g:.1f}x <= {TARGET_GROWTH}x: "
                line += "met" if g <= TARGET_GROWTH else "NOT met"
            lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
