"""Cell records in the shapes other tools read: SWE-bench's report, and one row per cell.

:func:`swebench_report` is the shape SWE-bench's harness writes after an evaluation
(``resolved_ids``, ``unresolved_ids``, ``empty_patch_ids``, ``error_ids`` and their counts), for
one group of cells; :func:`reports_by_arm` groups cells by arm and run first, the way a
generation holds them. :func:`cell_rows` flattens each record (every field; nested documents as
JSON text) for ``--format csv|parquet``.

An instance is ``error`` when its cell is excluded (the cell says nothing about the patch:
session or infrastructure errors, see :mod:`bench_assets.kernel.errorkinds`), ``empty_patch`` when
the cell produced no diff, else ``resolved`` or ``unresolved``.
"""

import json
from collections.abc import Iterable
from typing import Any, Literal

from bench_assets.cells.records import CellRecord
from bench_assets.kernel.errorkinds import is_excluded

SWEBENCH_REPORT_SCHEMA = 2
"""The ``schema_version`` SWE-bench's own reports carry for this shape."""

Outcome = Literal["resolved", "unresolved", "empty_patch", "error"]


def outcome(record: CellRecord) -> Outcome:
    """Which of SWE-bench's report lists a cell belongs to (module docstring)."""
    if is_excluded(record.error_kind):
        return "error"
    if record.resolved:
        return "resolved"
    if record.patch is None or record.patch.bytes == 0:
        return "empty_patch"
    return "unresolved"


def swebench_report(records: Iterable[CellRecord]) -> dict[str, Any]:
    """SWE-bench's report for one group of cells (one arm and run, or one predictions file).

    An instance appearing twice in the group (two runs graded together) is listed once per
    outcome it had; counts are of cells.
    """
    lists: dict[Outcome, list[str]] = {
        "resolved": [],
        "unresolved": [],
        "empty_patch": [],
        "error": [],
    }
    submitted: list[str] = []
    for r in records:
        submitted.append(r.task)
        lists[outcome(r)].append(r.task)
    completed = lists["resolved"] + lists["unresolved"]
    return {
        "total_instances": len(submitted),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(lists["resolved"]),
        "unresolved_instances": len(lists["unresolved"]),
        "empty_patch_instances": len(lists["empty_patch"]),
        "error_instances": len(lists["error"]),
        "submitted_ids": sorted(set(submitted)),
        "completed_ids": sorted(set(completed)),
        "resolved_ids": sorted(set(lists["resolved"])),
        "unresolved_ids": sorted(set(lists["unresolved"])),
        "empty_patch_ids": sorted(set(lists["empty_patch"])),
        "error_ids": sorted(set(lists["error"])),
        "schema_version": SWEBENCH_REPORT_SCHEMA,
    }


def reports_by_arm(records: Iterable[CellRecord]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{arm: {"r<run>": report}}``: one SWE-bench report per arm and run."""
    groups: dict[str, dict[int, list[CellRecord]]] = {}
    for r in records:
        groups.setdefault(r.arm, {}).setdefault(r.run, []).append(r)
    return {
        arm: {f"r{run}": swebench_report(cells) for run, cells in sorted(runs.items())}
        for arm, runs in sorted(groups.items())
    }


def cell_rows(records: Iterable[CellRecord]) -> list[dict[str, Any]]:
    """One flat row per cell: every record field, nested documents as JSON text, plus outcome."""
    rows = []
    for r in records:
        doc = r.model_dump(mode="json")
        row = {
            k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
            for k, v in doc.items()
        }
        row["outcome"] = outcome(r)
        rows.append(row)
    return rows
