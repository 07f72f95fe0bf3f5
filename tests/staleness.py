"""Test helper: per-partition staleness as the Dagster UI shows it (uses Dagster internals)."""

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView
from dagster._core.definitions.data_version import CachingStaleStatusResolver


def stale_status(
    instance: dg.DagsterInstance, defs: dg.Definitions, key: dg.AssetKey, partition: str | None
) -> tuple[str, list[str]]:
    """``(FRESH|STALE|MISSING, [reason, ...])`` for one asset partition, right now.

    Uses Dagster's internal resolver (there is no public per-partition API in 1.13); the reasons
    read like the UI's ("DATA: has a new dependency data version (task_bindings[alpha])").
    """
    view = AssetGraphView.for_test(defs, instance)
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), view)
    status = resolver.get_status(key, partition)
    causes = []
    for c in resolver.get_stale_causes(key, partition):
        dep = c.dependency
        via = f" ({dep.asset_key.to_user_string()}[{dep.partition_key}])" if dep else ""
        causes.append(f"{c.category.name}: {c.reason}{via}")
    return status.name, causes
