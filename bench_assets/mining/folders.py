"""Files ``wfbench import commits`` writes: task folders, the gold replays, the ledger, bench.yaml.

A task folder is built in a staging folder beside the ledger and moved into place at once, so a
killed import never leaves a half-written task; ``task.yaml`` is written with the prompt as a
literal block and a header saying where the task came from.
"""

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bench_assets.kernel.errors import InputError
from bench_assets.kernel.fsutil import (
    atomic_write_bytes,
    atomic_write_text,
    publish_dir,
    remove_tree,
)
from bench_assets.mining.documents import CandidateLine, MinedTask, MineLedger
from bench_assets.tasks import swebench

GOLD_FILE = "replays/commits-gold.jsonl"
"""Where the gold patches go, relative to the tasks folder."""
LEDGER_DIR = ".wfbench-mined"
MINED_FILE = "mined.json"


def ensure_bench(tasks: Path) -> Path | None:
    """A minimal bench.yaml (one ``gold`` replay arm) for a fresh tasks folder; None if present."""
    return swebench.ensure_bench(tasks, gold_file=GOLD_FILE, importer="commits", empty_gold=True)


def read_mined(folder: Path) -> MinedTask | None:
    """A task folder's ``mined.json`` (None when absent or unreadable)."""
    path = folder / MINED_FILE
    if not path.is_file():
        return None
    try:
        return MinedTask.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValidationError, OSError, UnicodeDecodeError):
        return None


def load_ledger(path: Path, top: Path) -> MineLedger:
    """The import ledger of one repository (empty when absent)."""
    if not path.is_file():
        return MineLedger(repo=str(top))
    try:
        return MineLedger.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as e:
        raise InputError(
            f"{path}: not a valid import ledger ({e.errors()[0]['msg']}); "
            "delete it to examine every commit again"
        ) from None


def save_ledger(path: Path, ledger: MineLedger) -> None:
    """Write the ledger atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, ledger.model_dump_json(indent=1) + "\n")


def publish_task(
    tasks: Path,
    task_id: str,
    doc: dict[str, Any],
    oracle: dict[str, bytes],
    mined: MinedTask,
) -> Path:
    """Write the task folder in a staging folder, then move it into place at once."""
    staging = tasks / LEDGER_DIR / f"staging-{task_id}"
    if staging.exists():
        remove_tree(staging)
    src = mined.source
    header = (
        f"# Mined by `wfbench import commits` from {src.repo} commit {src.commit}\n"
        f"# (base = its parent, pinned as ref; gold patch in {GOLD_FILE}; see mined.json).\n"
        f"# verify: {mined.validation.verify_detail}. Edit it freely: a re-import never "
        "rewrites this task.\n"
    )
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    for name, data in oracle.items():
        atomic_write_bytes(staging / "oracle" / name, data)
    atomic_write_text(staging / MINED_FILE, mined.model_dump_json(indent=1) + "\n")
    atomic_write_text(staging / "task.yaml", header + body)
    return publish_dir(staging, tasks / task_id)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the prompt) as literal blocks, as a person would write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def write_gold(tasks: Path, patches: dict[str, str]) -> Path:
    """Merge gold patches into the gold predictions file (keyed by task id)."""
    path = tasks / GOLD_FILE
    entries: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                obj = json.loads(line)
                entries[obj["instance_id"]] = obj
    for task_id, patch in patches.items():
        entries[task_id] = {
            "instance_id": task_id,
            "model_name_or_path": "gold",
            "model_patch": patch,
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(entries[k], sort_keys=True) + "\n" for k in sorted(entries))
    return atomic_write_text(path, text)


def render_line(line: CandidateLine) -> str:
    """The one printed line of a commit's verdict."""
    what = line.task_id or line.reason or ""
    cached = " (cached)" if line.cached and line.status == "rejected" else ""
    detail = f": {line.detail}" if line.detail else ""
    subject = line.subject if len(line.subject) <= 50 else line.subject[:49] + "…"
    merge = " [merge]" if line.merge else ""
    return (
        f"{line.status:<9} {line.commit[:12]} {line.seconds:6.1f}s {what}{cached}{detail}"
        f"  | {subject}{merge}"
    )
