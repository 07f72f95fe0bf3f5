"""Import a skill-creator / agentskills.io ``evals/evals.json`` as wfbench skill-eval tasks.

``wfbench import skill-creator EVALS_JSON`` reads the file (reference ``skill-eval-formats.md``
§2.2): ``prompt``; ``files`` (relative to the skill root) copied into the starting tree at the
same relative path; ``assertions`` or ``expectations`` (both spellings) as ``llm`` judge graders
(string items), or as ``regex`` graders on the last message for object items ``{name, type:
contains|not_contains, value}``; a case with neither gets one ``llm`` grader on its
``expected_output`` (skill-creator's grader compares against it). Task ids are
``<skill_name>.<id>``; the grading has ``ablation: none`` (the format has no two-arm
exclusions). The skill folder (the one holding ``evals/``) becomes the incumbent skill. Unknown
fields are refused naming the file and field; writing is shared with
:mod:`bench_assets.tasks.skill_eval_import` (idempotent, a changed case prints its diff).
"""

import json
import re
from pathlib import Path
from typing import Any

from bench_assets.kernel.errors import InputError
from bench_assets.tasks.skill_eval_tasks import (
    _grading,
    _Planned,
    _refuse_unknown,
    _task_files,
    _task_id,
    _write,
    _write_skills,
)
from bench_assets.tasks.swebench import ImportedTask


def _assertion_graders(items: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, a in enumerate(items, 1):
        if isinstance(a, str):
            out.append({"name": f"assertion-{i}", "type": "llm", "criteria": a})
        elif isinstance(a, dict) and a.get("type") in ("contains", "not_contains"):
            _refuse_unknown(Path(where), a, frozenset({"name", "type", "value"}), f"{i}.")
            if not isinstance(a.get("value"), str):
                raise InputError(f"{where}: field 'assertions.{i}.value': must be a string")
            out.append(
                {
                    "name": str(a.get("name") or f"assertion-{i}"),
                    "type": "regex",
                    "pattern": re.escape(a["value"]),
                    "match": a["type"],
                }
            )
        else:
            raise InputError(
                f"{where}: field 'assertions.{i}': a string, or {{type: contains|not_contains, "
                "value}}; map other shapes by hand"
            )
    return out


SC_TOP = frozenset({"skill_name", "evals", "version", "description"})
"""``version`` and ``description`` are descriptive keys real files add (reference §2.2)."""
SC_CASE = frozenset(
    {"id", "prompt", "expected_output", "files", "assertions", "expectations", "name",
     "eval_name", "description", "narration", "category"}
)  # fmt: skip
"""Beyond the schema: ``name``, ``eval_name``, ``description``, ``narration`` (human text, kept
as the task's description) and ``category`` (kept as its tag), as real files carry them."""
SC_REFUSED = {
    "scorers": "custom scorers are no part of the skill-creator format: write each as an "
    "assertion (a string for the judge, or {type: contains|not_contains, value})",
}


def _human_fields(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A case's descriptive keys as task settings (``description``, ``tags``)."""
    out: dict[str, Any] = {}
    texts = []
    for key in ("eval_name", "name", "description", "narration"):
        v = item.get(key)
        if v is None:
            continue
        if not isinstance(v, str):
            raise InputError(f"{where}: field '{key}': must be text")
        texts.append(v.strip())
    if texts:
        out["description"] = " — ".join(t for t in texts if t)
    cat = item.get("category")
    if cat is not None:
        if not isinstance(cat, str) or not cat.strip():
            raise InputError(f"{where}: field 'category': must be text")
        out["tags"] = [cat.strip()]
    return out


def _plan_skill_creator(evals_json: Path) -> tuple[str, list[_Planned], Path]:
    try:
        doc = json.loads(evals_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{evals_json}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{evals_json}: must be an object with skill_name and evals")
    _refuse_unknown(evals_json, doc, SC_TOP)
    skill = doc.get("skill_name")
    if not isinstance(skill, str) or not skill:
        raise InputError(f"{evals_json}: field 'skill_name': required string")
    items = doc.get("evals")
    if not isinstance(items, list) or not items:
        raise InputError(f"{evals_json}: field 'evals': a non-empty list")
    root = evals_json.parent.parent if evals_json.parent.name == "evals" else evals_json.parent
    planned: list[_Planned] = []
    seen: set[str] = set()
    for n, item in enumerate(items):
        where = f"{evals_json}: evals.{n}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: must be an object")
        for k in item:
            if k in SC_REFUSED:
                raise InputError(f"{where}: field '{k}': {SC_REFUSED[k]}")
            if k not in SC_CASE:
                raise InputError(f"{where}: field '{k}': not a field of this format")
        cid = item.get("id")
        if not isinstance(cid, (int, str)) or isinstance(cid, bool):
            raise InputError(f"{where}: field 'id': an integer or string")
        prompt = item.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(f"{where}: field 'prompt': required")
        if "assertions" in item and "expectations" in item:
            raise InputError(f"{where}: field 'expectations': give assertions or expectations")
        items_ = item.get("assertions", item.get("expectations")) or []
        if not isinstance(items_, list):
            raise InputError(f"{where}: field 'assertions': must be a list")
        graders = _assertion_graders(items_, where)
        expected = item.get("expected_output")
        if not graders:
            if not isinstance(expected, str) or not expected.strip():
                raise InputError(f"{where}: no assertions and no expected_output: nothing grades")
            graders = [{"name": "expected-output", "type": "llm", "criteria": expected}]
        tid = _task_id(skill, str(cid), where=where)
        if tid in seen:
            raise InputError(f"{where}: field 'id': {cid!r} used twice")
        seen.add(tid)
        tree: dict[str, bytes] = {}
        for rel in item.get("files") or []:
            if not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/"):
                raise InputError(f"{where}: field 'files': {rel!r} is not a relative path")
            src = root / rel
            if not src.is_file():
                raise InputError(f"{where}: field 'files': {src} does not exist")
            tree[rel] = src.read_bytes()
        grading = _grading(
            {"source": "skill-creator", "case": str(cid), "ablation": "none", "graders": graders},
            Path(where),
        )
        settings: dict[str, Any] = {"source": "skill-creator", "case": str(cid)}
        if isinstance(expected, str):
            settings["expected_outcome"] = expected
        settings.update(_human_fields(item, where))
        files = _task_files(tid, prompt, settings, grading, tree, None, "skill-creator")
        planned.append(_Planned(tid, files))
    return skill, planned, root


def import_skill_creator(evals_json: Path, tasks: Path) -> list[ImportedTask]:
    """Import a skill-creator ``evals.json`` (module docstring); the skill is the incumbent."""
    skill, planned, root = _plan_skill_creator(evals_json)
    results = _write(tasks, planned)
    skill_files = {}
    if (root / "SKILL.md").is_file():
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root)
            if p.is_file() and not p.is_symlink() and rel.parts[0] != "evals":
                skill_files[f"{skill}/{rel.as_posix()}"] = p.read_bytes()
    made = _write_skills(tasks, skill_files, "skills (incumbent skill tree)")
    return results + ([made] if made is not None else [])
