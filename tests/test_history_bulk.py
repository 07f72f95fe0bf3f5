"""The bulk history lookup (issue 13, pooled comparator history at scale): many partitions'
latest materializations in a few queries, exactly as the one-partition lookup returns them.

Each test runs both ways the lookup reads: storage ids from the SQL event log (``sql``) and
Dagster's ``fetch_materializations`` alone (``dagster``, what a non-SQL event log gets)."""

import dagster as dg
import pytest

from bench_assets.defs import resources
from bench_assets.defs.resources import (
    partition_materializations,
    partition_materializations_by_partition,
)


@pytest.fixture(params=["sql", "dagster"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "dagster":
        monkeypatch.setattr(resources, "_materialization_ids", lambda *a: None)
    return str(request.param)


@pytest.fixture
def instance(path: str):
    with dg.instance_for_test() as inst:
        yield inst


def _report(instance: dg.DagsterInstance, asset: str, partition: str, n: int) -> None:
    metadata: dict[str, object] = {"n": n, "record_path": f"/r/{partition}/{n}"}
    if n % 5 == 0:  # stored as an object: read through Dagster's deserializer
        metadata["json"] = {"n": [n]}
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset, partition=partition, metadata=metadata, tags={"dagster/data_version": f"v{n}"}
        )
    )


def _history(instance: dg.DagsterInstance) -> list[str]:
    """p0..p5 of "cells" with 1, 2, 3, 4, 5 and 7 materializations, interleaved across
    partitions; p6 never materialized; another asset's p0 in between."""
    keys = [f"p{i}" for i in range(7)]
    counts = {"p0": 1, "p1": 2, "p2": 3, "p3": 4, "p4": 5, "p5": 7}
    n = 0
    for round_ in range(7):
        for key, count in counts.items():
            if round_ < count:
                _report(instance, "cells", key, n)
                n += 1
        _report(instance, "other", "p0", 1000 + round_)
    return keys


def test_bulk_history_equals_the_per_partition_lookup_for_every_partition(
    instance: dg.DagsterInstance, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = _history(instance)
    queries: list[dg.AssetRecordsFilter] = []
    real = instance.fetch_materializations

    def counting(records_filter, limit, *a, **kw):
        queries.append(records_filter)
        return real(records_filter, limit, *a, **kw)

    for limit in (1, 3, 5, 50):
        expected = {k: partition_materializations(instance, "cells", k, limit=limit) for k in keys}
        assert max(len(v) for v in expected.values()) == min(limit, 7)  # p5 is cut at the limit
        # pages of partitions and of records small enough to page, drop partitions, and end
        # on a full page; then the defaults (one query)
        for page, per_query in ((2, 2), (3, 4), (7, 5), (1, 1), (resources.PAGE, 1000)):
            monkeypatch.setattr(instance, "fetch_materializations", counting)
            queries.clear()
            got = partition_materializations_by_partition(
                instance, "cells", keys, limit, page=page, records_per_query=per_query
            )
            monkeypatch.setattr(instance, "fetch_materializations", real)
            assert got == expected, (limit, page, per_query)
            assert list(got) == keys
            chunks = -(-len(keys) // page)
            if path == "dagster" and per_query == 1000:
                assert len(queries) == chunks  # each chunk's records fit one query
            if path == "sql":  # Dagster reads only the non-plain records (n % 5 == 0)
                assert all(q.storage_ids and not q.asset_partitions for q in queries)
                read = {n for v in got.values() for n in (md["n"] for md in v) if n % 5 == 0}
                assert sum(len(q.storage_ids or []) for q in queries) == len(read)
    got = partition_materializations_by_partition(instance, "cells", keys, 3)
    assert [md["n"] for md in got["p5"]] == [21, 20, 19]  # newest first
    assert got["p6"] == [] and got["p0"][0]["data_version"] == "v0"
    assert got["p5"][1]["json"] == {"n": [20]} and "json" not in got["p5"][0]  # non-plain too


def test_bulk_history_of_nothing_and_of_repeated_partitions(instance: dg.DagsterInstance) -> None:
    keys = _history(instance)
    assert partition_materializations_by_partition(instance, "cells", [], 5) == {}
    assert partition_materializations_by_partition(instance, "never", keys[:2], 5) == {
        "p0": [],
        "p1": [],
    }
    twice = partition_materializations_by_partition(instance, "cells", ["p4", "p4"], 2)
    assert twice == {"p4": partition_materializations(instance, "cells", "p4", limit=2)}
    with pytest.raises(ValueError, match="limit"):
        partition_materializations_by_partition(instance, "cells", keys, 0)


def test_bulk_history_after_a_timestamp_keeps_only_what_came_later(
    instance: dg.DagsterInstance, path: str
) -> None:
    """The pooled history's age limit, applied by the read (both ways it reads)."""
    import time

    _report(instance, "cells", "p0", 1)
    _report(instance, "cells", "p1", 2)
    time.sleep(0.05)
    cut = time.time()
    time.sleep(0.05)
    _report(instance, "cells", "p0", 3)
    got = partition_materializations_by_partition(
        instance, "cells", ["p0", "p1"], 5, after_timestamp=cut
    )
    assert {k: [md["n"] for md in v] for k, v in got.items()} == {"p0": [3], "p1": []}
    whole = partition_materializations_by_partition(instance, "cells", ["p0", "p1"], 5)
    assert {k: [md["n"] for md in v] for k, v in whole.items()} == {"p0": [3, 1], "p1": [2]}


def test_materialization_ids_newest_first_with_their_runs(
    instance: dg.DagsterInstance, path: str
) -> None:
    """What a decision judges before reading an event body: ids and run ids, newest first, cut
    at the limit; no SQL event log, no ids (the caller reads the histories instead)."""
    keys = _history(instance)
    ids = resources.materialization_ids_by_partition(instance, "cells", keys, 3)
    if path == "dagster":
        assert ids is None
        return
    assert ids is not None
    history = partition_materializations_by_partition(instance, "cells", keys, 3)
    assert list(ids) == keys and ids["p6"] == []
    mds = resources.metadata_by_storage_id(
        instance, "cells", [i for found in ids.values() for i, _ in found]
    )
    for key in keys:
        assert [mds[i] for i, _ in ids[key]] == history[key]
        assert [run for _, run in ids[key]] == [md["run_id"] for md in history[key]]


@pytest.fixture(params=["sharded", "consolidated"])
def wipe_instance(request: pytest.FixtureRequest, path: str, tmp_path):
    """The default sqlite storage deletes a wiped asset's events; the consolidated one, like
    PostgreSQL, keeps them and filters them out by the wipe time."""
    overrides = None
    if request.param == "consolidated":
        overrides = {
            "event_log_storage": {
                "module": "dagster._core.storage.event_log",
                "class": "ConsolidatedSqliteEventLogStorage",
                "config": {"base_dir": str(tmp_path / "events")},
            }
        }
    with dg.instance_for_test(overrides=overrides) as inst:
        yield inst


def test_bulk_history_of_multi_partition_keys_after_a_wipe(
    wipe_instance: dg.DagsterInstance,
) -> None:
    """The cell assets' keys are MultiPartitionKeys; a wiped asset's older events are gone for
    both lookups alike."""
    instance = wipe_instance
    keys = [str(dg.MultiPartitionKey({"task": t, "cell": "a.r0"})) for t in ("t1", "t2")]
    for n in range(3):
        for key in keys:
            _report(instance, "comparator_cells", key, n)
    instance.wipe_assets([dg.AssetKey("comparator_cells")])
    _report(instance, "comparator_cells", keys[0], 9)
    got = partition_materializations_by_partition(
        instance, "comparator_cells", keys, 50, records_per_query=1
    )
    assert got == {k: partition_materializations(instance, "comparator_cells", k, 50) for k in keys}
    assert [md["n"] for md in got[keys[0]]] == [9] and got[keys[1]] == []
