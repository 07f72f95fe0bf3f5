"""Resources, and the one way the Dagster layer reads an asset partition's latest materialization.

``BenchResource`` says where the benchmark definition and the artifact store are. The lookups are
partition-aware on purpose: ``get_latest_materialization_event`` and asset provenance ignore the
partition (dagster-notes Q2/Q6). Metadata comes back as plain values, with the materialization's
tags (``dagster/data_version``, ...) and two conveniences, ``data_version`` and ``run_id``.
"""

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from bench_assets.config.models import BenchConfig
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.hashing import sha256_text
from bench_assets.kernel.store import ArtifactStore, default_artifact_root
from bench_assets.tasks.catalog import Benchmark, load_benchmark


class BenchResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The benchmark directory and the artifact root.

    ``tasks_dir`` is relative to the process's working directory unless absolute (the code
    location runs from the repository root, see workspace.yaml); an empty ``artifact_root`` means
    ``$WFBENCH_ARTIFACTS`` or ``$DAGSTER_HOME/artifacts``.
    """

    tasks_dir: str = "tasks"
    artifact_root: str = ""

    def load_root(self) -> Path:
        """The benchmark directory."""
        return Path(self.tasks_dir).resolve()

    def load(self, tasks: Sequence[str] | None = None) -> Benchmark:
        """The validated benchmark; raises ValidationFailed listing every problem.

        ``tasks`` reads only bench.yaml, the candidates and those tasks (``[]``: no task): what
        a run of one partition needs, whatever the number of tasks.
        """
        return load_benchmark(self.load_root(), tasks)

    def artifacts(self) -> ArtifactStore:
        """The artifact store."""
        root = Path(self.artifact_root).resolve() if self.artifact_root else default_artifact_root()
        return ArtifactStore(root)


def location_tasks_dir(tasks_dir: str | None = None) -> Path:
    """The benchmark the code location serves: ``tasks_dir``, else ``$WFBENCH_TASKS`` (default
    ``tasks``)."""
    return Path(tasks_dir or os.environ.get("WFBENCH_TASKS", "tasks"))


def location_bench_config(tasks_dir: str | None = None) -> tuple[BenchConfig | None, str]:
    """bench.yaml as the code location loads it (its cell partitions, its schedule), or ``None``
    and why it could not be read. Never raises: an invalid benchmark must not stop the code
    location from loading (the sync sensor and ``wfbench validate`` report the details)."""
    path = location_tasks_dir(tasks_dir) / "bench.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return BenchConfig.model_validate(raw), ""
    except Exception as e:
        return None, f"{path} could not be read ({type(e).__name__})"


@dg.definitions
def resources() -> dg.Definitions:
    """Bind the resource keys once: the benchmark is ``$WFBENCH_TASKS`` (default ``tasks``).

    The same variable chooses the cell partitions (``defs/cells.py``), so the sensors, the UI
    and runs launched from it all see one benchmark.
    """
    return dg.Definitions(resources={"bench": BenchResource(tasks_dir=str(location_tasks_dir()))})


def _key(asset: str | dg.AssetKey) -> dg.AssetKey:
    return asset if isinstance(asset, dg.AssetKey) else dg.AssetKey(asset)


def latest_record(
    instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str | None
) -> Any:
    """The latest materialization record of one partition (or of an unpartitioned asset)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=_key(asset), asset_partitions=[partition] if partition is not None else None
        ),
        limit=1,
    ).records
    return records[0] if records and records[0].asset_materialization is not None else None


def record_metadata(record: Any) -> dict[str, Any]:
    """A record's metadata values, its tags, ``data_version`` and ``run_id``."""
    mat = record.asset_materialization
    out: dict[str, Any] = {k: v.value for k, v in mat.metadata.items()}
    tags = dict(mat.tags or {})
    out |= tags
    out["data_version"] = tags.get("dagster/data_version")
    out["run_id"] = record.run_id
    return out


def latest_metadata(
    instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str | None
) -> dict[str, Any]:
    """Metadata of the latest materialization; empty when there is none."""
    record = latest_record(instance, asset, partition)
    return record_metadata(record) if record is not None else {}


PAGE = 500
"""Storage ids (or partition keys) per query of :func:`latest_metadata_by_partition`."""


def latest_metadata_by_partition(
    instance: dg.DagsterInstance,
    asset: str | dg.AssetKey,
    partitions: Iterable[str] | None = None,
    *,
    page: int = PAGE,
) -> dict[str, dict[str, Any]]:
    """Metadata of the latest materialization of many partitions of one asset, in few queries.

    One query finds each partition's latest storage id
    (``get_latest_storage_id_by_partition``), then the records are fetched by storage id,
    ``page`` per query: about ``2 + n / page`` queries for ``n`` partitions instead of ``n``.
    Returns ``{partition: metadata}`` as :func:`latest_metadata` gives it, for the partitions
    asked for (``None``: every partition) that have a materialization; the others are absent.
    """
    key = _key(asset)
    wanted = None if partitions is None else set(partitions)
    if wanted is not None and not wanted:
        return {}
    event = dg.DagsterEventType.ASSET_MATERIALIZATION
    if wanted is None or len(wanted) > page:
        # One grouped scan of the asset's partitions beats many IN-lists; filter here.
        ids = instance.get_latest_storage_id_by_partition(key, event)
        if wanted is not None:
            ids = {p: i for p, i in ids.items() if p in wanted}
    else:
        ids = instance.get_latest_storage_id_by_partition(key, event, wanted)
    by_id = {i: p for p, i in ids.items()}
    found = _metadata_by_storage_id(instance, key, sorted(by_id), page)
    return {by_id[i]: md for i, md in found.items() if i in by_id}


# Dagster's stored form of scalar metadata values (serdes keeps the legacy ``metadata_entries``
# list for back-compatibility): entry class -> (field holding the value, accepted types).
_PLAIN_ENTRIES: dict[str, tuple[str | None, tuple[type, ...]]] = {
    "TextMetadataEntryData": ("text", (str,)),
    "PathMetadataEntryData": ("path", (str,)),
    "MarkdownMetadataEntryData": ("md_str", (str,)),
    "UrlMetadataEntryData": ("url", (str,)),
    "IntMetadataEntryData": ("value", (int,)),
    "FloatMetadataEntryData": ("value", (float, int)),
    "BoolMetadataEntryData": ("value", (bool,)),
    "NullMetadataEntryData": (None, ()),
}


def _read_plain_materializations(
    instance: dg.DagsterInstance, storage_ids: list[int]
) -> dict[int, dict[str, Any]]:
    """Metadata of materializations whose values are all scalars, read from the raw event JSON.

    Dagster's deserializer builds an object per metadata entry (about 0.3 ms for a cell's ~30
    entries, most of a bulk lookup's time); for values that are plain text, paths, markdown,
    numbers, booleans or null the stored JSON already holds them. Only for SQL event logs
    (sqlite, PostgreSQL); a record with any other value, or any unexpected shape, is left out
    and read through Dagster by the caller. ``tests/test_scale.py`` checks both agree.
    """
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable as T
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    storage = instance.event_log_storage
    if not storage_ids or not isinstance(storage, SqlEventLogStorage):
        return {}
    import sqlalchemy as sa

    query = sa.select(T.c.id, T.c.event).where(T.c.id.in_(storage_ids))
    with storage.index_connection() as conn:
        rows = conn.execute(query).fetchall()
    out: dict[int, dict[str, Any]] = {}
    for storage_id, raw in rows:
        key = sha256_text(raw)
        md = _PARSED.get(key)
        if md is None:
            md = _plain_metadata(raw)
            if md is None:
                continue
            if len(_PARSED) >= PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = md
        out[storage_id] = dict(md)
    return out


_PARSED: dict[str, dict[str, Any]] = {}
"""Plain metadata already parsed in this process, by the SHA-256 of the stored event's JSON. A
decision reads the same 9,000–14,000 cell events up to three times (the aggregates, the
decision's own check of its evidence rows, the pooled history); parsing them was 2.7 of its 14 s
at 1,000 tasks (profiled). Keyed by
the bytes, not the storage id, so a wiped or another instance's event log can never be served
a stale parse; the events themselves are still read every time (a new materialization is seen)."""
PARSED_MAX = 200_000
"""Entries kept before the cache starts again (about 100 MB at a cell event's size)."""


def _plain_metadata(raw: str) -> dict[str, Any] | None:
    """:func:`record_metadata` of one stored event, or None if it is not a plain one."""
    try:
        event = json.loads(raw)
        data = event["dagster_event"]["event_specific_data"]
        mat = data["materialization"]
        if (
            event.get("__class__") != "EventLogEntry"
            or data.get("__class__") != "StepMaterializationData"
            or mat.get("__class__") != "AssetMaterialization"
        ):
            return None
        out: dict[str, Any] = {}
        for entry in mat["metadata_entries"]:
            entry_data = entry["entry_data"]
            spec = _PLAIN_ENTRIES.get(entry_data.get("__class__"))
            if entry.get("__class__") != "EventMetadataEntry" or spec is None:
                return None
            field, types = spec
            value = None if field is None else entry_data[field]
            if field is not None and (
                not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
            ):
                return None
            out[entry["label"]] = value
        tags = mat.get("tags") or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            return None
        run_id = event["run_id"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    out |= tags
    out["data_version"] = tags.get("dagster/data_version")
    out["run_id"] = run_id
    return out


def upstream_metadata(
    instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str | None
) -> dict[str, Any]:
    """Like :func:`latest_metadata`, but an upstream that was never materialized is an error."""
    md = latest_metadata(instance, asset, partition)
    if not md:
        where = f"[{partition}]" if partition is not None else ""
        raise InputError(
            f"{_key(asset).to_user_string()}{where} has never been materialized; "
            "materialize it first"
        )
    return md


def partition_materializations(
    instance: dg.DagsterInstance, asset: str | dg.AssetKey, partition: str, limit: int = 25
) -> list[dict[str, Any]]:
    """The latest ``limit`` materializations of one partition, newest first, as metadata values.

    What a decision needs to pick *its* evidence among re-materializations (a canary, a UI run,
    another generation's cell), rather than trusting the latest one.
    """
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=_key(asset), asset_partitions=[partition]),
        limit=limit,
        ascending=False,
    ).records
    return [record_metadata(r) for r in records if r.asset_materialization is not None]


HISTORY_PAGE = 1000
"""Records per query of :func:`partition_materializations_by_partition` through Dagster."""


def partition_materializations_by_partition(
    instance: dg.DagsterInstance,
    asset: str | dg.AssetKey,
    partitions: Iterable[str],
    limit: int = 25,
    *,
    page: int = PAGE,
    records_per_query: int = HISTORY_PAGE,
    after_timestamp: float | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """:func:`partition_materializations` of many partitions of one asset, in few queries.

    Returns ``{partition: [metadata, newest first]}`` for every partition asked for (``[]`` when
    it has none), each list exactly what :func:`partition_materializations` gives for it with
    this ``limit``. The partitions are read ``page`` at a time. On SQL event logs one query lists
    the chunk's materialization storage ids (Dagster's own filter, no event bodies), each
    partition keeps its newest ``limit``, and their metadata is read like
    :func:`latest_metadata_by_partition` reads it (plain values from the stored JSON, the rest
    through Dagster): about ``2 + 2 * records / page`` queries. Other storages go through
    ``fetch_materializations``, ``records_per_query`` newest records of the chunk's partitions
    per query, a partition dropped from later queries once it has ``limit``.
    ``after_timestamp``: only materializations stored after it (Unix seconds).
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    key = _key(asset)
    wanted = list(dict.fromkeys(partitions))
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in wanted}
    ids = materialization_ids_by_partition(
        instance, key, wanted, limit, page=page, after_timestamp=after_timestamp
    )
    if ids is None:
        for start in range(0, len(wanted), page):
            chunk = wanted[start : start + page]
            _history_through_dagster(
                instance, key, chunk, limit, records_per_query, out, after_timestamp
            )
        return out
    by_id = {i: partition for partition, found in ids.items() for i, _ in found}
    mds = _metadata_by_storage_id(instance, key, sorted(by_id), page)
    for storage_id in sorted(by_id, reverse=True):
        if storage_id in mds:
            out[by_id[storage_id]].append(mds[storage_id])
    return out


def materialization_ids_by_partition(
    instance: dg.DagsterInstance,
    asset: str | dg.AssetKey,
    partitions: Iterable[str],
    limit: int = 25,
    *,
    page: int = PAGE,
    after_timestamp: float | None = None,
) -> dict[str, list[tuple[int, str]]] | None:
    """The storage and run ids of each partition's newest ``limit`` materializations (stored
    after ``after_timestamp`` when given), newest first (``[]`` for a partition with none),
    without reading a single event body: what lets a caller read only the materializations it
    will judge (:func:`metadata_by_storage_id`), not every partition's history. ``None`` when
    the event log is not SQL (then use :func:`partition_materializations_by_partition`)."""
    key = _key(asset)
    wanted = list(dict.fromkeys(partitions))
    out: dict[str, list[tuple[int, str]]] = {p: [] for p in wanted}
    for start in range(0, len(wanted), page):
        ids = _materialization_ids(instance, key, wanted[start : start + page], after_timestamp)
        if ids is None:
            return None
        for partition, found in ids.items():
            out[partition] = found[:limit]
    return out


def metadata_by_storage_id(
    instance: dg.DagsterInstance, asset: str | dg.AssetKey, storage_ids: Iterable[int]
) -> dict[int, dict[str, Any]]:
    """:func:`record_metadata` of these materializations of ``asset``, in few queries; a
    materialization Dagster cannot read is left out."""
    return _metadata_by_storage_id(instance, _key(asset), sorted(set(storage_ids)), PAGE)


def _materialization_ids(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partitions: list[str],
    after_timestamp: float | None,
) -> dict[str, list[tuple[int, str]]] | None:
    """Storage and run ids of every materialization of these partitions, newest first (the
    filter ``fetch_materializations`` applies: event type, asset, partitions, last wipe, and
    ``after_timestamp``); None when the event log is not SQL."""
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable as T
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        return None
    import sqlalchemy as sa

    records_filter = dg.EventRecordsFilter(
        event_type=dg.DagsterEventType.ASSET_MATERIALIZATION,
        asset_key=key,
        asset_partitions=partitions,
        after_timestamp=after_timestamp,
    )
    details = storage._get_assets_details([key])[0]
    query = storage._apply_filter_to_query(
        sa.select(T.c.id, T.c.partition, T.c.run_id), records_filter, asset_details=details
    )
    with storage.index_connection() as conn:
        rows = conn.execute(query).fetchall()
    out: dict[str, list[tuple[int, str]]] = {}
    for storage_id, partition, run_id in sorted(rows, reverse=True):
        out.setdefault(partition, []).append((storage_id, run_id))
    return out


def _metadata_by_storage_id(
    instance: dg.DagsterInstance, key: dg.AssetKey, storage_ids: list[int], page: int
) -> dict[int, dict[str, Any]]:
    """:func:`record_metadata` of these materializations, ``page`` ids per query: plain ones from
    the stored JSON, the others (and any Dagster cannot read: left out) through Dagster."""
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(storage_ids), page):
        chunk = storage_ids[start : start + page]
        out |= _read_plain_materializations(instance, chunk)
        rest = [i for i in chunk if i not in out]
        if not rest:
            continue
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, storage_ids=rest), limit=len(rest)
        ).records
        for record in records:
            if record.asset_materialization is not None:
                out[record.storage_id] = record_metadata(record)
    return out


def _history_through_dagster(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partitions: list[str],
    limit: int,
    records_per_query: int,
    out: dict[str, list[dict[str, Any]]],
    after_timestamp: float | None,
) -> None:
    """:func:`partition_materializations_by_partition` of one chunk, through Dagster alone."""
    open_ = set(partitions)
    taken = dict.fromkeys(partitions, 0)  # records counted against the limit, as SQL's LIMIT
    cursor = None
    while open_:
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=key, asset_partitions=sorted(open_), after_timestamp=after_timestamp
            ),
            limit=records_per_query,
            cursor=cursor,
            ascending=False,
        )
        for record in result.records:
            partition = record.partition_key
            if partition not in open_:
                continue
            taken[partition] += 1
            if record.asset_materialization is not None:
                out[partition].append(record_metadata(record))
            if taken[partition] >= limit:
                open_.discard(partition)
        if not result.has_more:
            break
        cursor = result.cursor
