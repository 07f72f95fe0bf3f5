"""Cell partition keys and identity digests: the pure naming helpers shared by every consumer.

A cell is one (task, arm, run); within a task it is named by the partition key ``<arm>.r<run>``.
Its identity (built by :func:`bench_assets.cells.pipeline.cell_identity`) is reduced to one digest
that decides whether a stored record can be reused. Aggregation, the planner and the command line
need only these helpers, so they live here, apart from the cell runner and its sandbox.
"""

from collections.abc import Mapping
from typing import Any

from bench_assets.kernel.hashing import sha256_json


def cell_key(arm: str, run: int) -> str:
    """Partition key of a cell: ``<arm>.r<run>``."""
    return f"{arm}.r{run}"


def parse_cell_key(key: str) -> tuple[str, int]:
    """Inverse of :func:`cell_key`."""
    arm, _, run = key.rpartition(".r")
    if not arm or not run.isdigit():
        raise ValueError(f"bad cell key {key!r}; expected <arm>.r<run>")
    return arm, int(run)


def cell_keys(runs: Mapping[str, int]) -> list[str]:
    """Every cell key of each arm × its number of runs (in the mapping's order)."""
    return [cell_key(a, r) for a, n in runs.items() for r in range(n)]


def identity_digest(identity: dict[str, Any]) -> str:
    """Digest of a cell identity."""
    return sha256_json(identity)


def case_session_identity(
    *,
    allowed_tools: list[str],
    append_system_prompt: str | None,
    env: Mapping[str, str],
    max_turns: int | None,
    model: str | None,
) -> dict[str, Any] | None:
    """The identity part of a skill-eval case's session settings (``None`` when none is set).

    Each of them changes the session, so a changed setting is a changed cell, never reused.
    """
    body: dict[str, Any] = {
        "allowed_tools": list(allowed_tools),
        "append_system_prompt": append_system_prompt,
        "env": dict(sorted(env.items())),
        "max_turns": max_turns,
        "model": model,
    }
    if not any(body.values()):
        return None
    return body
