"""A decision's evidence from bulk reads (issue 24, build 4), still exactly the planned cells,
each verified: one lookup per cell asset rather than per cell, each record read once per process
and read again when its file changes. Cheap: cell materializations are reported directly, no
cell is run (``bench/decide_scale.py`` measures the times)."""

import json
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData

from bench_assets.cells.records import load_verified, write_record
from bench_assets.decision.documents import CellMaterialization
from bench_assets.decision.manifest import (
    ManifestCell,
    ManifestHeader,
    TaskManifest,
    write_header,
    write_task,
)
from bench_assets.defs import evidence
from bench_assets.defs.cells import cell_metadata
from bench_assets.kernel.store import ArtifactStore
from tests.test_aggregate import rec

RUN = "g0001-run-0001"


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _materialize(
    instance: dg.DagsterInstance, asset: str, task: str, cell: str, md, dv, run: str = RUN
) -> None:
    pk = str(dg.MultiPartitionKey({"task": task, "cell": cell}))
    mat = dg.AssetMaterialization(
        asset, partition=pk, metadata=md, tags={"dagster/data_version": dv}
    )
    instance.report_dagster_event(
        DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
            event_specific_data=StepMaterializationData(mat),
            job_name="__ASSET_JOB",
        ),
        run_id=run,
    )


def _generation(instance: dg.DagsterInstance, art: ArtifactStore) -> dict[tuple[str, str], Path]:
    """Two tasks x (a comparator and a candidate cell), paid in g0001, and its manifest."""
    paths = {}
    folder = art.generation("g0001")
    write_header(
        folder,
        ManifestHeader(
            generation="g0001",
            candidate="c1",
            overlay_digest="o",
            skills_digest="s",
            tasks=["alpha", "beta"],
            tasks_dir="tasks",
            tasks_digest="d",
            created_at="2026-12-01T00:00:00+00:00",
        ),
    )
    for task in ("alpha", "beta"):
        cells = []
        for arm in ("w", "cand"):
            base = rec(arm, 0, task=task, generation="g0001")
            record = base.model_copy(update={"identity_digest": f"id-{arm}"})
            path = write_record(art.cell(task, record.cell, record.record_id), record)
            asset = "candidate_cells" if arm == "cand" else "comparator_cells"
            md = cell_metadata(record, path, CellMaterialization.fresh(record, path, "missing"))
            _materialize(instance, asset, task, record.cell, md, record.data_version)
            paths[task, record.cell] = path
            cells.append(
                ManifestCell(
                    task=task,
                    cell=record.cell,
                    asset=asset,
                    role=record.role,
                    identity_digest=f"id-{arm}",
                    action="run",
                    kind="missing",
                )
            )
        write_task(folder, TaskManifest(generation="g0001", task=task, cells=cells))
    return paths


def test_a_record_is_read_once_and_again_after_it_is_rewritten(tmp_path: Path) -> None:
    record = rec("w", 0)
    path = write_record(tmp_path, record)
    first, digest = load_verified(path)
    assert digest == record.data_version and first == record
    assert load_verified(path)[0] is first  # unchanged file: the same object, not re-parsed
    body = json.loads(path.read_text())
    body["resolved"] = not body["resolved"]
    time.sleep(0.01)
    write_record(tmp_path, type(record).model_validate(body))  # rewritten after it was read
    again, digest2 = load_verified(path)
    assert digest2 != digest and again.resolved != record.resolved


def test_a_record_stored_canonical_is_verified_by_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record.json`` is the canonical JSON its data version digests: given that data version,
    the file's bytes verify it without serializing the record again; a record written indented
    (before records were stored canonical) still verifies by its content; an edit of either,
    even one of the same size, never does."""
    from bench_assets.cells import records as records_mod
    from bench_assets.kernel.hashing import canonical_json

    record = rec("w", 0)
    dv = record.data_version
    path = write_record(tmp_path / "canon", record)
    assert path.read_text() == canonical_json(record.model_dump(mode="json")) + "\n"

    legacy = tmp_path / "legacy" / "record.json"
    legacy.parent.mkdir()
    legacy.write_text(json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True))

    def no_serializing(_value):
        raise AssertionError("a canonical record matching its data version was serialized")

    monkeypatch.setattr(records_mod, "sha256_json", no_serializing)
    assert load_verified(path, dv) == (record, dv)
    monkeypatch.undo()
    assert load_verified(legacy, dv) == (record, dv)  # its content, digested as before
    assert load_verified(path) == (record, dv)  # no expected value: the content digest

    for p in (path, legacy):
        text = p.read_text()
        edited = text.replace('"rid-', '"rie-')  # the same size, another record id
        assert edited != text
        time.sleep(0.01)
        p.write_text(edited)
        assert load_verified(p, dv)[1] != dv, p


@pytest.mark.parametrize("attack", ["duplicate_key", "extra_field", "another_cells_record"])
def test_forged_record_bytes_never_verify_by_the_byte_path(tmp_path: Path, attack: str) -> None:
    """Attacks on the byte check the issue did not describe: JSON with a duplicate key (the
    parser keeps the last: a cheaper cost after the genuine one), a field the schema does not
    have, and the genuine canonical bytes of another cell's record put under this cell's data
    version. Each is refused: not the digest recorded, or not a record at all."""
    from bench_assets.cells.records import RecordCorrupt
    from bench_assets.kernel.hashing import canonical_json

    record = rec("w", 0)
    dv = record.data_version
    path = write_record(tmp_path / "cell", record)
    text = path.read_text().rstrip("\n")
    if attack == "duplicate_key":
        forged = text[:-1] + ',"cost_usd":0.01}'
    elif attack == "extra_field":
        forged = text[:-1] + ',"verified_by":"oracle"}'
    else:
        forged = canonical_json(rec("w", 1).model_dump(mode="json"))
    assert forged != text
    time.sleep(0.01)
    path.write_text(forged + "\n")
    if attack == "extra_field":
        with pytest.raises(RecordCorrupt):
            load_verified(path, dv)
        return
    loaded, digest = load_verified(path, dv)
    assert digest != dv
    if attack == "duplicate_key":
        assert loaded.cost_usd == 0.01  # what a reader would have been fooled into


def test_a_value_a_writer_remembers_is_served_only_while_its_file_is_unchanged(
    tmp_path: Path,
) -> None:
    """The aggregates and the decision remember what they just wrote (FileCache.put): the next
    read in the process gets it without parsing, and any later write — even one of the same
    size, as a tampered digit would be — is read from the file again."""
    from bench_assets.kernel.fsutil import FileCache

    path = tmp_path / "doc.json"
    path.write_text('{"n": 1}')
    cache: FileCache[dict[str, int]] = FileCache(4)
    written = {"n": 1}
    cache.put(path, written)
    assert cache.get(path, lambda p: pytest.fail("an unchanged file was parsed")) is written
    time.sleep(0.01)
    path.write_text('{"n": 2}')  # same size, new content
    assert cache.get(path, lambda p: json.loads(p.read_text())) == {"n": 2}


def test_manifest_evidence_is_read_per_asset_in_bulk_and_every_cell_verified(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    art = ArtifactStore(tmp_path / "art")
    paths = _generation(instance, art)
    # One cell's record edited after it was recorded: refused, named, never evidence.
    tampered = paths["beta", "cand.r0"]
    body = json.loads(tampered.read_text())
    body["resolved"] = not body["resolved"]
    time.sleep(0.01)
    tampered.write_text(json.dumps(body))

    calls: list[str] = []
    real = evidence.materialization_ids_by_partition

    def counting(inst, asset, partitions, *a, **kw):
        calls.append(str(asset))
        return real(inst, asset, partitions, *a, **kw)

    monkeypatch.setattr(evidence, "materialization_ids_by_partition", counting)
    from bench_assets.decision.manifest import load_complete

    manifest = load_complete(art.generation("g0001"))
    assert manifest is not None
    inputs, refused = evidence.collect_manifest_inputs(instance, manifest.tasks.values())
    assert sorted(calls) == ["candidate_cells", "comparator_cells"]  # not one per cell
    assert [i.record.cell for i in inputs["alpha"]] == ["w.r0", "cand.r0"]
    assert [i.record.cell for i in inputs["beta"]] == ["w.r0"]
    assert all(i.run_id == RUN and not i.reused for i in inputs["alpha"])
    assert refused == {"alpha": {}, "beta": {"cand.r0": refused["beta"]["cand.r0"]}}
    assert "does not match the data version" in refused["beta"]["cand.r0"]


def _newer(instance: dg.DagsterInstance, art: ArtifactStore, task: str, arm: str, run: str):
    """A later materialization of ``task``'s ``arm`` cell by ``run``: another generation's record
    with another identity (another candidate's cell, say)."""
    base = rec(arm, 0, task=task, generation="g0002")
    record = base.model_copy(
        update={"identity_digest": f"other-{arm}", "record_id": f"{base.record_id}-{run}"}
    )
    path = write_record(art.cell(task, record.cell, record.record_id), record)
    asset = "candidate_cells" if arm == "cand" else "comparator_cells"
    md = cell_metadata(record, path, CellMaterialization.fresh(record, path, "missing"))
    _materialize(instance, asset, task, record.cell, md, record.data_version, run=run)


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    reads: list[tuple[str, int]] = []
    real = evidence.metadata_by_storage_id

    def counting(inst, asset, ids):
        ids = list(ids)
        reads.append((str(asset), len(ids)))
        return real(inst, asset, ids)

    monkeypatch.setattr(evidence, "metadata_by_storage_id", counting)
    return reads


def test_evidence_is_found_in_rounds_one_event_per_cell_until_a_cell_needs_an_older_one(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision reads each cell's newest materialization first and goes further back only for
    the cells that refused it: here alpha's comparator cell was re-materialized by a later run
    for another identity, so that one cell is read twice and every other cell once — not
    every generation's event for every cell."""
    art = ArtifactStore(tmp_path / "art")
    _generation(instance, art)
    _newer(instance, art, "alpha", "w", "g0002-run-0001")
    reads = _counting_reads(monkeypatch)
    from bench_assets.decision.manifest import load_complete

    manifest = load_complete(art.generation("g0001"))
    assert manifest is not None
    inputs, refused = evidence.collect_manifest_inputs(instance, manifest.tasks.values())
    assert refused == {"alpha": {}, "beta": {}}
    assert {(t, i.record.cell, i.run_id) for t, rows in inputs.items() for i in rows} == {
        (t, c, RUN) for t in ("alpha", "beta") for c in ("w.r0", "cand.r0")
    }
    assert sorted(reads) == [
        ("candidate_cells", 2),
        ("comparator_cells", 1),
        ("comparator_cells", 2),
    ]


def test_a_reused_cell_reads_only_the_named_runs_materialization(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reused cell's evidence is the named run's materialization: later ones of the partition
    (another candidate's, a UI run's) are passed over by run id, before any is read."""
    art = ArtifactStore(tmp_path / "art")
    paths = _generation(instance, art)
    for run in ("g0002-run-0001", "g0003-run-0001"):
        _newer(instance, art, "alpha", "w", run)
    reads = _counting_reads(monkeypatch)
    record, digest = load_verified(paths["alpha", "w.r0"])
    cell = ManifestCell(
        task="alpha",
        cell="w.r0",
        asset="comparator_cells",
        role="comparator",
        identity_digest="id-w",
        action="reuse",
        kind="reusable",
        source_run_id=RUN,
        source_data_version=digest,
    )
    found = evidence.accept_manifest_cells(instance, [cell], "g0004")
    ok, why = found["alpha", "w.r0"]
    assert ok is not None and ok.run_id == RUN and ok.record == record and why == ""
    assert reads == [("comparator_cells", 1)]
    wrong = cell.model_copy(update={"source_run_id": "g0009-run-0001"})
    ok, why = evidence.accept_manifest_cells(instance, [wrong], "g0004")["alpha", "w.r0"]
    assert ok is None and why == "no materialization of the cell"


@pytest.mark.parametrize("ad_hoc", [False, True])
def test_rounds_give_what_reading_each_cells_whole_history_gives(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch, ad_hoc: bool
) -> None:
    """The same evidence and the same reasons as judging every partition's history at once (the
    path for event logs that are not SQL), with refused materializations on both sides of the
    accepted one and a cell whose only materialization is refused."""
    art = ArtifactStore(tmp_path / "art")
    paths = _generation(instance, art)
    _newer(instance, art, "alpha", "w", "g0002-run-0001")
    _newer(instance, art, "beta", "cand", "g0002-run-0001")
    tampered = paths["beta", "cand.r0"]
    body = json.loads(tampered.read_text())
    body["resolved"] = not body["resolved"]
    time.sleep(0.01)
    tampered.write_text(json.dumps(body))

    def judge_all() -> dict:
        if not ad_hoc:
            from bench_assets.decision.manifest import load_complete

            manifest = load_complete(art.generation("g0001"))
            assert manifest is not None
            return evidence.accept_manifest_cells(instance, manifest.cells(), "g0001")
        wanted = {
            str(dg.MultiPartitionKey({"task": t, "cell": c})): (t, c)
            for t in ("alpha", "beta")
            for c in ("w.r0", "cand.r0")
        }
        out = {}
        for asset in ("comparator_cells", "candidate_cells"):
            keys = {k: v for k, v in wanted.items() if (v[1] == "cand.r0") == (asset[:4] == "cand")}
            out |= evidence.first_acceptable(
                instance,
                asset,
                keys,
                lambda cell, c: evidence.manifest_mod.accept_current(f"id-{cell[1][:-3]}", [c]),
            )
        return out

    rounds = judge_all()
    monkeypatch.setattr(evidence, "materialization_ids_by_partition", lambda *a, **k: None)
    whole = judge_all()
    assert rounds == whole
    assert sum(ok is not None for ok, _ in rounds.values()) == 3
    assert [why for ok, why in rounds.values() if ok is None] == [
        next(why for ok, why in whole.values() if ok is None)
    ]
    assert "does not match the data version" in next(w for ok, w in rounds.values() if ok is None)


def _report_input(instance: dg.DagsterInstance, asset: str, task: str | None, n: int) -> None:
    mat = dg.AssetMaterialization(
        asset, partition=task, metadata={"record_path": f"/{asset}/{task}/{n}", "n": n}
    )
    instance.report_dagster_event(
        DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
            event_specific_data=StepMaterializationData(mat),
            job_name="__ASSET_JOB",
        ),
        run_id=f"run-{n}",
    )


def test_an_ad_hoc_decisions_inputs_are_read_in_bulk_and_equal_the_one_partition_reads(
    instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``current_identities`` reads every task's inputs through ``prefetched_upstream``: the
    same metadata as one lookup per partition, a never-materialized one the same error, and a
    number of queries that does not grow with the tasks (five per task before: 5,000 lookups
    for an ad-hoc decision at 1,000 tasks)."""
    from bench_assets.defs.cells import prefetched_upstream
    from bench_assets.defs.resources import upstream_metadata
    from bench_assets.kernel.errors import InputError

    assets = ("task_bindings", "oracle_snapshots", "sanitized_graphs", "task_environments")
    tasks = [f"t{i}" for i in range(12)]
    n = 0
    for _ in range(2):  # two materializations each: the reader must take the newest
        for task in tasks:
            for asset in assets:
                _report_input(instance, asset, task, n)
                n += 1
    _report_input(instance, "incumbent_skills", None, n)
    real = instance.fetch_materializations
    calls: list[object] = []

    def counting(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    def queries(some: list[str]) -> int:
        monkeypatch.setattr(instance, "fetch_materializations", counting)
        calls.clear()
        read = prefetched_upstream(instance, some)
        got = {(a, t): read(dg.AssetKey(a), t) for t in some for a in assets}
        skills = read(dg.AssetKey("incumbent_skills"), None)
        monkeypatch.setattr(instance, "fetch_materializations", real)
        for (a, t), md in got.items():
            assert md == upstream_metadata(instance, a, t)
            assert md["n"] >= 4 * len(tasks)  # the second round's, the newest
        assert skills == upstream_metadata(instance, "incumbent_skills", None)
        return len(calls)

    assert queries(tasks[:3]) == queries(tasks)  # bulk: not per task
    read = prefetched_upstream(instance, ["never"])
    with pytest.raises(InputError, match=r"task_bindings\[never\] has never been materialized"):
        read(dg.AssetKey("task_bindings"), "never")


def test_an_aggregate_set_is_parsed_once_and_read_again_when_its_file_changes(
    tmp_path: Path,
) -> None:
    from bench_assets.decision.documents import AggregateSet, RefusedCell, load_aggregate_set
    from bench_assets.kernel.errors import InputError
    from bench_assets.kernel.fsutil import atomic_write_json

    def write(reason: str) -> Path:
        aset = AggregateSet(
            generation="g0001",
            kind="generation",
            tasks=[],
            refused=[RefusedCell(task="t", cell="baseline.r0", reason=reason)],
        )
        return atomic_write_json(tmp_path / "set.json", aset.model_dump(mode="json"))

    path = write("first")
    first = load_aggregate_set(path)
    assert load_aggregate_set(path) is first
    write("other")  # same size, same path: a new file (inode, ctime) is read again
    assert load_aggregate_set(path).refused[0].reason == "other"
    path.write_text("{not json")
    with pytest.raises(InputError, match="set.json"):
        load_aggregate_set(path)
