"""Which tasks' stored inputs still stand: decided in bulk, before any input run is launched.

A generation materializes a task's four input assets (``task_bindings``, ``oracle_snapshots``,
``sanitized_graphs``, ``task_environments``) only when they are *stale*; :func:`stale_reasons`
says which tasks are and why, from what is already known, with no git call and no build:

* **source** — :func:`source_digests`: a digest of everything a task's inputs are built from
  outside the harness code: the task folder's files (``task.yaml``, ``repo/``, ``oracle/``, ...),
  its pin in ``bindings.lock``, the commit its ``ref`` names now (a path repository's moving ref;
  a full SHA or a pin names itself), and the bench.yaml settings the builds read (oracle size
  caps, ``sanitize``, ``graph``, the graph timeout). ``task_bindings`` records the digest it was
  built from (metadata ``source_digest``); a different one now makes the task stale.
* **code** — the ``dagster/code_version`` Dagster recorded on each partition's latest
  materialization against the asset's code version now (``defs/inputs.py``).
* **upstream** — the ``dagster/input_data_version/<upstream>`` Dagster recorded against the
  upstream partition's current data version (:func:`partition_input_version`).
* **stored** — a partition never materialized, or an artifact its metadata names
  (``record_path``, ``template_path``, ``graph_path``, ...) that no longer exists.

Why not Dagster's own staleness resolver (``CachingStaleStatusResolver``): it is the same rule
(code version, then each dependency's data version since the recorded event pointer), but it is
evaluated one partition at a time, with two to four event-log queries per partition and
dependency: about 12,000 queries for 1,000 tasks, against the four bulk reads here. And a
partitioned *observable source* (the task folders) cannot stand in for the source digest:
Dagster computes a partitioned dependency's input data version from materializations only
(``data_version_cache.py``: "TODO: this needs to account for observations also"), so the
observation a binding was built from is not recorded per partition. ``tests/test_inputs_stale.py``
checks that this rule and Dagster's resolver agree on what is stale.

Pure: no Dagster import; the driver reads the metadata (``driver/inputs.input_status``).
"""

import os
from collections.abc import Mapping
from typing import Any

from bench_assets.inputs import binding as binding_mod
from bench_assets.kernel.hashing import sha256_json, sha256_text, tree_digest
from bench_assets.sandbox import gitrepo
from bench_assets.tasks.catalog import Benchmark

INPUT_ASSETS = ("task_bindings", "oracle_snapshots", "sanitized_graphs", "task_environments")
"""A task's input assets, in build order."""

UPSTREAM: dict[str, tuple[str, ...]] = {
    "task_bindings": (),
    "oracle_snapshots": ("task_bindings",),
    "sanitized_graphs": ("task_bindings", "oracle_snapshots"),
    "task_environments": ("task_bindings",),
}
"""Each input asset's partitioned upstream assets (the ``deps`` of ``defs/inputs.py``)."""

SOURCE_KEY = "source_digest"
"""``task_bindings`` metadata: the :func:`source_digests` value the binding was built from."""

CODE_VERSION_TAG = "dagster/code_version"
INPUT_VERSION_TAG = "dagster/input_data_version/"
SOURCE_EXCLUDE = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git"})
"""Build litter a local test run leaves in a task folder: never part of its source digest."""


def partition_input_version(upstream_version: str) -> str:
    """The input data version Dagster records for a one-to-one partitioned dependency.

    For a dependency with partitions, Dagster records ``sha256`` of the upstream partitions' data
    versions joined in key order (``_get_partitions_data_version_from_keys``); with one upstream
    partition that is ``sha256(version)``.
    """
    return sha256_text(upstream_version)


def input_settings_digest(bench: Benchmark) -> str:
    """The bench.yaml settings the input builds read (oracle caps, sanitize, graph, timeout)."""
    limits = bench.config.limits
    return sha256_json(
        {
            "oracle_file_bytes": limits.oracle_file_bytes,
            "oracle_total_bytes": limits.oracle_total_bytes,
            "graph_timeout_s": limits.graph_timeout_s,
            "sanitize": bench.config.sanitize.model_dump(mode="json"),
            "graph": bench.config.graph.model_dump(mode="json"),
        }
    )


def source_digests(bench: Benchmark, task_ids: list[str]) -> dict[str, str]:
    """Each task's source digest (see the module docstring), in one pass.

    Reads every file of each task folder and ``bindings.lock`` once. A path repository's ref is
    resolved with one git call per distinct (repository, ref) — none for a full SHA or a pinned
    task; an unresolvable ref enters the digest as unresolved, so the binding (which refuses it,
    naming the task) runs.
    """
    pins = binding_mod.read_pins(bench) if binding_mod.lock_path(bench).exists() else {}
    settings = input_settings_digest(bench)
    resolved: dict[tuple[str, str], str | None] = {}
    out: dict[str, str] = {}
    for task_id in task_ids:
        task = bench.task(task_id)
        pin = pins.get(task_id)
        commit: str | None = None
        if not task.spec.is_inline:
            ref = task.spec.ref or "HEAD"
            if pin is not None:
                commit = pin.resolved_sha
            elif gitrepo.SHA_RE.match(ref):
                commit = ref
            else:
                key = (str(task.repo_dir), ref)
                if key not in resolved:
                    try:
                        resolved[key] = gitrepo.resolve_commit(task.repo_dir, ref)
                    except Exception:  # not a repository: the binding names the problem
                        resolved[key] = None
                commit = resolved[key]
        out[task_id] = sha256_json(
            {
                "folder": tree_digest(task.dir, exclude=SOURCE_EXCLUDE),
                "pin": pin.digest if pin is not None else None,
                "commit": commit,
                "benchmark_root": None if task.spec.is_inline else str(bench.root),
                "settings": settings,
            }
        )
    return out


def _missing_path(md: Mapping[str, Any]) -> str | None:
    """The first artifact path a materialization's metadata names that does not exist."""
    for key, value in sorted(md.items()):
        if key.endswith("_path") and isinstance(value, str) and value and not os.path.exists(value):
            return f"{key} {value}"
    return None


def stale_reasons(
    task_ids: list[str],
    stored: Mapping[str, Mapping[str, Mapping[str, Any]]],
    *,
    code_versions: Mapping[str, str],
    sources: Mapping[str, str],
) -> dict[str, str]:
    """``{task: why}`` for every task whose inputs must be materialized; fresh tasks are absent.

    ``stored`` is ``{asset: {task: latest materialization metadata with its tags}}`` for the
    four :data:`INPUT_ASSETS`; ``code_versions`` the assets' code versions now; ``sources``
    :func:`source_digests`. The first reason found is given, in build order.
    """
    out: dict[str, str] = {}
    for task in task_ids:
        why = _task_reason(task, stored, code_versions, sources)
        if why is not None:
            out[task] = why
    return out


def _task_reason(
    task: str,
    stored: Mapping[str, Mapping[str, Mapping[str, Any]]],
    code_versions: Mapping[str, str],
    sources: Mapping[str, str],
) -> str | None:
    mds = {a: stored.get(a, {}).get(task) for a in INPUT_ASSETS}
    never = [a for a, md in mds.items() if not md]
    if never:
        return f"{never[0]} never materialized"
    for asset in INPUT_ASSETS:
        md = mds[asset]
        assert md is not None
        recorded = md.get(CODE_VERSION_TAG)
        if recorded != code_versions[asset]:
            return f"{asset}: code version {recorded} -> {code_versions[asset]}"
        if asset == "task_bindings":
            if md.get(SOURCE_KEY) is None:
                return "task_bindings: built before source digests were recorded"
            if md.get(SOURCE_KEY) != sources[task]:
                return "task folder, pinned ref or input settings changed"
        for up in UPSTREAM[asset]:
            up_md = mds[up]
            assert up_md is not None
            want = partition_input_version(str(up_md.get("data_version")))
            if md.get(INPUT_VERSION_TAG + up) != want:
                return f"{asset}: older than {up} (upstream data version changed)"
        missing = _missing_path(md)
        if missing is not None:
            return f"{asset}: stored artifact missing ({missing})"
    return None


def batches(tasks: list[str], *, slots: int, max_size: int) -> list[list[str]]:
    """``tasks`` split into batches that fill ``slots`` parallel builders, each at most
    ``max_size`` tasks (order kept): ``ceil(n / slots)`` per batch, bounded by ``max_size``.

    Fewer tasks than slots gives one task per batch; many tasks share run start-ups.
    """
    if not tasks:
        return []
    size = max(1, min(max_size, -(-len(tasks) // max(1, slots))))
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]
