"""Shared by the skill-eval importers: a case rendered as task files, written idempotently.

:func:`_task_files` renders one case (task.yaml with its ``skill_eval`` section, the hidden
``oracle/skill_eval.json``, the starting tree as the inline ``repo/``); :func:`_write` writes
planned cases, leaving an unchanged task alone and returning the unified diff of a changed one
(as ``wfbench import swebench`` does); :func:`ensure_bench` writes a fresh folder's bench.yaml.
Used by :mod:`bench_assets.tasks.skill_eval_import` and
:mod:`bench_assets.tasks.skill_eval_creator`.

:func:`case_session` is what a case's run settings become in its cells' sessions (the model, the
allowed tools, the appended system prompt, the ``EVAL_*`` environment, the turn cap), and
:func:`case_session_problems` why they cannot (``wfbench validate`` reports them before any paid
work). The model rule: a case's ``model`` must be bench.yaml's pinned ``model`` (or absent). A
verdict names one model, the one bench.yaml pins and every record carries, so a case cannot run
its cells on another; such a case is refused, never silently run on the pinned model.
"""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bench_assets.config.models import CLAUDE_CODE_VERSION, TASK_ID_RE, TaskSpec
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.fsutil import atomic_write_bytes
from bench_assets.scorers.skill_eval import GRADING_FILE, SkillEvalGrading
from bench_assets.tasks.swebench import ImportedTask, _diff, _existing

TASK_CLASS = "skill-eval"
ENV_KEY_RE = re.compile(r"^EVAL_[A-Z0-9_]*$")
"""A case's ``env`` keys (``claude plugin eval`` fails a run on any other key)."""
HARNESS_ENV = frozenset(
    {
        "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "HOME", "PATH", "USER", "LOGNAME", "TMPDIR", "SHELL", "CLAUDE_CONFIG_DIR", "IS_SANDBOX",
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
        "all_proxy", "no_proxy", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "PYTHONPATH",
    }
)  # fmt: skip
"""Variables the harness sets for a session (model API, credentials, home, path, proxy): a case
naming one is refused with its own message, not only for missing the ``EVAL_`` prefix."""

ALWAYS_PASSES = 'python -c "pass"'


@dataclass(frozen=True)
class _Planned:
    task_id: str
    files: dict[str, bytes]


def env_key_problem(key: object) -> str | None:
    """Why a case's ``env`` key cannot be used (``None`` when it can)."""
    if not isinstance(key, str):
        return "keys must be strings matching EVAL_[A-Z0-9_]*"
    if key in HARNESS_ENV or key.startswith(("ANTHROPIC_", "CLAUDE_")) or "PROXY" in key.upper():
        return (
            f"{key} is the harness's own variable (model API, credentials, HOME, PATH, proxy); "
            "a case may set only EVAL_[A-Z0-9_]* variables"
        )
    if not ENV_KEY_RE.match(key):
        return f"{key}: keys must match EVAL_[A-Z0-9_]*"
    return None


@dataclass(frozen=True)
class CaseSession:
    """A skill-eval case's settings for each of its sessions (empty for any other task)."""

    allowed_tools: tuple[str, ...] = ()
    """The tools the case grants (``--tools``/``--allowedTools``); empty: the arm's govern."""
    append_system_prompt: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    """``EVAL_*`` variables set in the session (never a harness variable)."""
    max_turns: int | None = None
    model: str | None = None
    """The case's model: always bench.yaml's pinned model when set (module docstring)."""


def case_session_problems(spec: TaskSpec, bench_model: str | None) -> list[tuple[str, str]]:
    """(field, message) of every case setting the session cannot honour, for ``validate``."""
    se = spec.skill_eval
    if se is None:
        return []
    out = [(f"skill_eval.env.{k}", p) for k in se.env if (p := env_key_problem(k)) is not None]
    if se.model is not None and bench_model is not None and se.model != bench_model:
        out.append(
            (
                "skill_eval.model",
                f"the case asks for model {se.model!r} but bench.yaml pins {bench_model!r}: "
                "every cell of a verdict runs on bench.yaml's model, so remove the case's model "
                "or pin that model in bench.yaml (a dated id)",
            )
        )
    if se.append_system_prompt is not None and not se.append_system_prompt.strip():
        out.append(("skill_eval.append_system_prompt", "blank; remove it or give the text"))
    return out


def case_session(spec: TaskSpec, bench_model: str, where: str = "task.yaml") -> CaseSession:
    """The session settings of a task's cells; :class:`InputError` when one cannot be honoured."""
    se = spec.skill_eval
    if se is None:
        return CaseSession()
    problems = case_session_problems(spec, bench_model)
    if problems:
        fld, msg = problems[0]
        raise InputError(f"{where}: field '{fld}': {msg}")
    return CaseSession(
        allowed_tools=tuple(se.allowed_tools),
        append_system_prompt=se.append_system_prompt,
        env=dict(se.env),
        max_turns=se.max_turns,
        model=se.model,
    )


def _refuse_unknown(path: Path, keys: Any, allowed: frozenset[str], prefix: str = "") -> None:
    for k in keys:
        if k not in allowed:
            raise InputError(f"{path}: field '{prefix}{k}': not a field of this format")


def _task_id(*parts: str, where: str) -> str:
    tid = ".".join(re.sub(r"[^A-Za-z0-9._-]+", "-", p).strip("-.") for p in parts)
    if not TASK_ID_RE.match(tid) or ".." in tid:
        raise InputError(f"{where}: cannot make a task id from {parts!r}")
    return tid


LABELS_FILE = "human-labels.yaml"
PLUGINS_DIR = "_plugins"
"""Where the whole plugin goes under the tasks folder (a ``_`` folder is never a task)."""


def _grading(
    doc: dict[str, Any], where: Path, sources: list[Path] | None = None
) -> SkillEvalGrading:
    try:
        return SkillEvalGrading.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        if loc[:1] == ["labels"] or (loc[:1] == [] and "label" in err["msg"]):
            where = where.parent / LABELS_FILE if where.name != LABELS_FILE else where
        msg = err["msg"]
        if loc[:1] == ["graders"] and len(loc) > 1 and loc[1].isdigit():
            i = int(loc[1])
            if sources is not None:
                where = sources[i]
            loc = [f"graders.{doc['graders'][i].get('name')}", *loc[3:]]  # drop the type tag
            # A target/focus is a name or {source: file, path}: pydantic names the union branch.
            branch = [p for p in loc if p.startswith(("literal[", "FileTarget"))]
            if branch:
                loc = [p for p in loc if p not in branch]
                msg = f"{msg}; a target is last_message, trace, files or {{source: file, path: P}}"
        elif not loc:
            loc = ["graders"] if "grader" in msg else loc
        raise InputError(f"{where}: field '{'.'.join(loc)}': {msg}") from None


CASE_FIELD = {"timeouts.session_s": "timeout_seconds", "prompt": "prompt"}
"""A task.yaml field's name in the case file, for errors."""


def _task_files(
    task_id: str,
    prompt: str,
    settings: dict[str, Any],
    grading: SkillEvalGrading,
    tree: dict[str, bytes],
    timeout_s: int | None,
    tool: str,
    where: Path | None = None,
) -> dict[str, bytes]:
    """The task's files; an invalid setting is named by the case file (``where``) and the case's
    own field name when the case is known."""
    doc: dict[str, Any] = {
        "id": task_id,
        "class": TASK_CLASS,
        "repo": "inline",
        "prompt": prompt,
        "verify": ALWAYS_PASSES,
        "oracle": {"files": [GRADING_FILE]},
        "skill_eval": {"grading": GRADING_FILE, **settings},
    }
    if timeout_s is not None:
        doc["timeouts"] = {"session_s": timeout_s}
    try:
        TaskSpec.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        fld = ".".join(str(p) for p in err["loc"])
        fld = CASE_FIELD.get(fld, fld.removeprefix("skill_eval."))
        raise InputError(f"{where or task_id}: field '{fld}': {err['msg']}") from None
    header = f"# Imported by `wfbench import {tool}`; re-import to update.\n"
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
    grading_json = json.dumps(grading.model_dump(mode="json", exclude_none=True), indent=2)
    files = {"task.yaml": (header + body).encode(), f"oracle/{GRADING_FILE}": grading_json.encode()}
    files.update({f"repo/{rel}": data for rel, data in tree.items()})
    if not tree:
        files["repo/.keep"] = b""
    return files


def _write(tasks: Path, planned: list[_Planned]) -> list[ImportedTask]:
    results = []
    for p in planned:
        folder = tasks / p.task_id
        old = _existing(folder)
        if old == p.files:
            results.append(ImportedTask(p.task_id, "unchanged", files=sorted(p.files)))
            continue
        for rel in set(old) - set(p.files):
            (folder / rel).unlink()
        for rel, data in p.files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(folder / rel, data)
        status = "changed" if old else "created"
        diff = _diff(old, p.files, p.task_id) if old else ""
        results.append(ImportedTask(p.task_id, status, diff, sorted(p.files)))
    return results


def _write_tree(folder: Path, files: dict[str, bytes], label: str) -> ImportedTask:
    """Mirror ``files`` into ``folder`` exactly (idempotent, with a diff when it changed)."""
    old = _existing(folder)
    if old == files:
        return ImportedTask(label, "unchanged", files=sorted(files))
    for rel in set(old) - set(files):
        (folder / rel).unlink()
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / rel, data)
    return ImportedTask(
        label, "changed" if old else "created", _diff(old, files, label) if old else ""
    )


def _write_skills(tasks: Path, skills: dict[str, bytes], label: str) -> ImportedTask | None:
    """Merge the plugin's skills into the incumbent tree (``<tasks>/skills``), with a diff."""
    if not skills:
        return None
    folder = tasks / "skills"
    names = {rel.split("/", 1)[0] for rel in skills}
    old = {rel: data for rel, data in _existing(folder).items() if rel.split("/", 1)[0] in names}
    if old == skills:
        return ImportedTask(label, "unchanged", files=sorted(skills))
    for rel in set(old) - set(skills):
        (folder / rel).unlink()
    for rel, data in skills.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / rel, data)
    return ImportedTask(
        label, "changed" if old else "created", _diff(old, skills, "skills") if old else ""
    )


def needs_judge(tasks: Path) -> bool:
    """Whether any imported case under ``tasks`` has an llm/baseline grader."""
    for path in sorted(tasks.glob(f"*/oracle/{GRADING_FILE}")):
        try:
            if SkillEvalGrading.model_validate_json(path.read_bytes()).needs_judge:
                return True
        except ValidationError:
            continue
    return False


JUDGE_DEFAULT = {
    "model": "claude-haiku-4-5-20251001",
    "input_usd_per_mtok": 1.0,
    "output_usd_per_mtok": 5.0,
}
"""The judge a fresh bench.yaml pins when a case has llm/baseline graders: the small fast model
``claude plugin eval`` defaults to (reference §1.5), dated, at its list prices."""


def _cases_model(tasks: Path) -> str | None:
    """The one model the imported cases name, if they all name the same one (else ``None``)."""
    models = set()
    for path in sorted(tasks.glob("*/task.yaml")):
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        se = doc.get("skill_eval") if isinstance(doc, dict) else None
        if isinstance(se, dict) and isinstance(se.get("model"), str):
            models.add(se["model"])
    return models.pop() if len(models) == 1 else None


def ensure_bench(
    tasks: Path, model: str = "claude-sonnet-4-5-20250929", *, judge: bool = True
) -> Path | None:
    """A bench.yaml with the two arms ``claude plugin eval`` compares, for a fresh folder (and
    the judge pinned when ``judge``: some imported case has llm/baseline graders). Its ``model``
    is the one the imported cases name when they all name the same one, so they validate."""
    from bench_assets.kernel.fsutil import atomic_write_text

    bench = tasks / "bench.yaml"
    if bench.exists():
        return None
    model = _cases_model(tasks) or model
    (tasks / "skills").mkdir(parents=True, exist_ok=True)
    doc = {
        "model": model,
        "runs": 3,
        "arms": {
            "with_plugin": {"agent": {"adapter": "claude-code"}, "skills": "incumbent"},
            "without_plugin": {"agent": {"adapter": "claude-code"}, "skills": "none"},
        },
        "agents": {"claude_code": {"version": CLAUDE_CODE_VERSION}},
    }
    if judge:
        doc["judge"] = dict(JUDGE_DEFAULT)
    header = "# Written by `wfbench import` for a fresh folder: with and without the plugin.\n"
    return atomic_write_text(bench, header + yaml.safe_dump(doc, sort_keys=False))
