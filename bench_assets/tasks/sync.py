"""Keeping the Dagster ``tasks`` partition set equal to the validated task folders (pure part)."""

from dataclasses import dataclass

from bench_assets.config.models import TASK_ID_RE


@dataclass(frozen=True)
class SyncPlan:
    """Partition keys to add and to delete."""

    add: list[str]
    delete: list[str]

    @property
    def empty(self) -> bool:
        """Nothing to change."""
        return not self.add and not self.delete


def is_valid_partition_key(key: str) -> bool:
    """A task id Dagster can safely hold as a partition key (Dagster itself does not check)."""
    return bool(TASK_ID_RE.match(key)) and ".." not in key


def plan_sync(current: list[str], desired: list[str]) -> SyncPlan:
    """Keys to add/delete so ``current`` becomes ``desired``; invalid keys are never added.

    A stale invalid key already present (added by hand through the UI) is deleted.
    """
    want = {k for k in desired if is_valid_partition_key(k)}
    have = set(current)
    return SyncPlan(add=sorted(want - have), delete=sorted(have - want))
