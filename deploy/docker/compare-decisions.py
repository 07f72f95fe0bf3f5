"""Compare the decisions of two wfbench runs of the same bench, field by field.

    .venv/bin/python deploy/docker/compare-decisions.py \\
        --artifacts dagster_home/artifacts dagster_home/docker-demo/artifacts \\
        --tasks tasks dagster_home/docker-demo/tasks

Made for "the demo's decision through containers equals the in-process decision" (`make demo`
against `make docker-demo`), and usable for any two runs of one bench (sqlite against PostgreSQL,
before and after an upgrade). Each side is an artifact root (its ``WFBENCH_ARTIFACTS``) and,
optionally, the tasks folder it ran from.

What is compared: each side's decision ledger (``ledger/decisions.jsonl``, its hash chain verified
on reading), entry by entry in order, and for every entry every JSON document in its decision
folder (``decision.json``, ``gate-input.json``, ``review-gate-input.<arm>.json``), each read
through its schema where wfbench has one. Two runs are equal when every field is equal after one
rule, applied the same way to both sides and printed with the result:

* a value under a VOLATILE key is masked (``None`` stays ``None``): the clock (``now``,
  ``recorded_at``, ``evidence_oldest``, ``evidence_expires_at``), an id minted per run (``run_id``,
  ``prior_run_id``, ``source_run_id``, ``pooled_run_id``, ``record_id``), or a digest of a
  document that contains one of those (a cell's ``data_version`` is the digest of its record; the
  ledger's ``decision_digest``, ``hash`` and ``prev_hash`` chain the decision documents'
  digests, and ``decision_path`` is named by one);
* inside any string, a timestamp, a record id or a run id (UUID) is replaced by a placeholder,
  and each side's own folders (its artifact root, its tasks folder) by ``<artifacts>`` and
  ``<tasks>``.

Everything else must be identical: verdicts, reasons, findings' text, per-task counts, costs and
statistics (floats compared exactly: both sides run the same arithmetic on the same replayed
numbers), content digests of the overlay and the skill tree, the lineage's cells and arms.

Exit status: 0 equal, 1 a difference (each printed with its field path), 2 bad input.
"""

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VOLATILE = frozenset(
    {
        "now",
        "recorded_at",
        "evidence_oldest",
        "evidence_expires_at",
        "run_id",
        "prior_run_id",
        "source_run_id",
        "pooled_run_id",
        "record_id",
        "data_version",
        "decision_digest",
        "hash",
        "prev_hash",
        "decision_path",
    }
)
"""Keys whose values differ between any two runs of the same bench (see the module docstring)."""

IN_STRINGS = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\d{8}T\d{6}\d*Z-[0-9a-f]{6}"), "<record_id>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<run_id>"),
)


@dataclass
class Side:
    """One run: its artifact root and the folders whose paths are masked in its strings."""

    artifacts: Path
    folders: dict[str, str] = field(default_factory=dict)
    masked: Counter[str] = field(default_factory=Counter)

    def normalize(self, value: Any) -> Any:
        """``value`` under the rule: volatile keys masked, times, ids and own folders replaced."""
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in VOLATILE and v is not None:
                    self.masked[k] += 1
                    out[k] = "<volatile>"
                else:
                    out[k] = self.normalize(v)
            return out
        if isinstance(value, list):
            return [self.normalize(v) for v in value]
        if isinstance(value, str):
            # Longest folder first: a tasks folder inside the artifact root stays <tasks>.
            for folder, name in sorted(self.folders.items(), key=lambda kv: -len(kv[0])):
                value = value.replace(folder, name)
            for pattern, placeholder in IN_STRINGS:
                value = pattern.sub(placeholder, value)
        return value


def differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Every field path where ``a`` and ``b`` differ (a missing key or list item included)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            sub = f"{path}.{k}"
            if k not in a or k not in b:
                out.append((sub, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                out += differences(a[k], b[k], sub)
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            sub = f"{path}[{i}]"
            if i >= len(a) or i >= len(b):
                out.append(
                    (sub, a[i] if i < len(a) else "<absent>", b[i] if i < len(b) else "<absent>")
                )
            else:
                out += differences(a[i], b[i], sub)
        return out
    if type(a) is not type(b) or a != b:
        return [(path or "<root>", a, b)]
    return []


def ledger(side: Side) -> list[dict[str, Any]]:
    """The ledger's entries, read (and its chain verified) by wfbench itself."""
    from bench_assets.decision import ledger as ledger_mod

    path = side.artifacts / "ledger" / "decisions.jsonl"
    if not path.is_file():
        raise SystemExit(f"compare-decisions: {path}: no decision ledger (was a decision made?)")
    return [e.model_dump(mode="json") for e in ledger_mod.read(path)]


def documents(side: Side, digest: str) -> dict[str, Any]:
    """Every JSON document of one decision folder, by file name (decision.json validated)."""
    from bench_assets.decision.documents import load_decision

    folder = side.artifacts / "decisions" / digest
    if not (folder / "decision.json").is_file():
        raise SystemExit(
            f"compare-decisions: {folder}: no decision.json for ledger digest {digest}"
        )
    out: dict[str, Any] = {}
    for f in sorted(folder.glob("*.json")):
        if f.name == "decision.json":
            out[f.name] = load_decision(f).model_dump(mode="json")
        else:
            out[f.name] = json.loads(f.read_text())
    return out


def compare(a: Side, b: Side) -> tuple[list[str], list[tuple[str, Any, Any]]]:
    """``(summary lines, differences)`` of the two runs' ledgers and decision documents."""
    la, lb = ledger(a), ledger(b)
    summary = []
    diffs: list[tuple[str, Any, Any]] = []
    if len(la) != len(lb):
        diffs.append(("ledger.entries", len(la), len(lb)))
    for ea, eb in zip(la, lb, strict=False):
        where = f"ledger[{ea['seq']}]"
        diffs += differences(a.normalize(ea), b.normalize(eb), where)
        da, db = documents(a, ea["decision_digest"]), documents(b, eb["decision_digest"])
        diffs += differences(a.normalize(da), b.normalize(db), f"{where}.documents")
        fields = sum(1 for _ in _leaves(da))
        summary.append(
            f"{where}: {ea['generation']} {ea['candidate']} {ea['kind']}: "
            f"{ea['decision']} / {eb['decision']}; {len(da)} document(s), {fields} field(s)"
        )
    return summary, diffs


def _leaves(value: Any) -> Any:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def side(artifacts: str, tasks: str | None) -> Side:
    root = Path(artifacts).resolve()
    if not root.is_dir():
        raise SystemExit(f"compare-decisions: {artifacts}: not a folder (an artifact root)")
    folders = {str(root): "<artifacts>"}
    if tasks is not None:
        folders[str(Path(tasks).resolve())] = "<tasks>"
    return Side(root, folders)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="The rule (what may differ and why) is in this script's docstring.",
    )
    parser.add_argument("--artifacts", nargs=2, required=True, metavar=("A", "B"),
                        help="the two artifact roots (WFBENCH_ARTIFACTS of each run)")  # fmt: skip
    parser.add_argument("--tasks", nargs=2, metavar=("A", "B"),
                        help="the tasks folder each run read (masked as <tasks>)")  # fmt: skip
    parser.add_argument("--max", type=int, default=40, help="differences to print (default 40)")
    args = parser.parse_args(argv)
    tasks = args.tasks or (None, None)
    try:
        a, b = side(args.artifacts[0], tasks[0]), side(args.artifacts[1], tasks[1])
        summary, diffs = compare(a, b)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    for line in summary:
        print(line)
    print(
        "masked by the rule (A / B): "
        + ", ".join(f"{k} {a.masked[k]}/{b.masked[k]}" for k in sorted(a.masked | b.masked))
    )
    if not diffs:
        print(f"equal: {len(summary)} decision(s), every field but the masked ones")
        return 0
    print(f"DIFFERENT: {len(diffs)} field(s)")
    for path, va, vb in diffs[: args.max]:
        print(f"  {path}: {json.dumps(va)[:200]} != {json.dumps(vb)[:200]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
