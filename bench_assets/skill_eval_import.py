"""Import skill-eval suites as wfbench tasks: ``claude plugin eval`` cases and skill-creator evals.

``wfbench import claude-plugin-eval PLUGIN_DIR`` reads ``<plugin>/<eval dir>/**`` (eval dir from
``plugin.json`` ``experimental.evals``, else ``evals``; ``results/`` and ``mocks/`` are not cases)
exactly as the reference (``skill-eval-formats.md`` §1.2–1.5) describes: a case is a folder with
``prompt.md`` and/or ``case.yaml``; prompt.md's frontmatter overrides case.yaml's fields and its
body is the prompt; ``graders/*.md`` are appended after case.yaml's ``graders``. Each case becomes
``<tasks>/<plugin>.<case>/``:

- ``task.yaml``: class ``skill-eval``, an inline repository, the prompt, a ``skill_eval`` section
  with the case's run settings (runs, max_turns, timeout, allowed tools, env, model, appended
  system prompt) and ``timeouts.session_s`` from ``timeout_seconds``;
- ``repo/``: the starting tree. Each run of the first-party tool starts in an empty directory; a
  ``context.scaffold_script`` is run **once, at import, inside the sandbox** (no network, the
  script alone mounted, the empty workspace as cwd) and its result becomes the inline repository,
  pinned by the task binding like any other (``.git`` of the scaffold is not kept);
- ``oracle/skill_eval.json``: the graders, threshold and ablation
  (:class:`~bench_assets.skill_eval.SkillEvalGrading`) — hidden like an oracle.

The plugin's ``skills/<name>/`` become the incumbent skills (``<tasks>/skills/<name>/``).

``wfbench import skill-creator EVALS_JSON`` reads ``evals/evals.json`` (§2.2): ``prompt``;
``files`` (relative to the skill root) copied into the starting tree at the same relative path;
``assertions`` or ``expectations`` (both spellings) as ``llm`` graders (string items), or as
``regex`` graders on the last message for object items ``{name, type: contains|not_contains,
value}``; a case with neither gets one ``llm`` grader on its ``expected_output`` (skill-creator's
grader compares against it). Task ids are ``<skill_name>.<id>``.

Nothing is dropped silently: a field this importer cannot honour (``history_file``, ``add_dirs``,
MCP ``mocks/``, a ``mock_calls`` target, an unknown key) is refused, and the error names the file
and the field. Importing is idempotent and a changed case prints its diff (as ``import
swebench``: :func:`bench_assets.swebench._diff`).
"""

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bench_assets.errors import InputError
from bench_assets.fsutil import atomic_write_bytes
from bench_assets.models import CLAUDE_CODE_VERSION, TASK_ID_RE, TaskSpec
from bench_assets.skill_eval import GRADING_FILE, SkillEvalGrading
from bench_assets.swebench import ImportedTask, _diff, _existing

TASK_CLASS = "skill-eval"
ALWAYS_PASSES = 'python -c "pass"'
SCAFFOLD_TIMEOUT_S = 300

PROMPT_KEYS = frozenset(
    {
        "schema_version", "name", "description", "tags", "plugins", "runs", "expected_outcome",
        "model", "max_turns", "timeout_seconds", "allowed_tools", "append_system_prompt", "env",
    }
)  # fmt: skip
TOP_KEYS = frozenset(
    {"schema_version", "name", "description", "tags", "plugins", "runs", "expected_outcome"}
)
EXECUTION_KEYS = frozenset(
    {"prompt", "model", "max_turns", "timeout_seconds", "allowed_tools", "append_system_prompt",
     "env"}
)  # fmt: skip
CONTEXT_KEYS = frozenset({"scaffold_script"})
REFUSED_CONTEXT = {
    "history_file": "resuming an earlier transcript is not supported by wfbench's agents",
    "add_dirs": "extra read-only directories are not supported (seed the workspace instead)",
}
_ENV_KEY = re.compile(r"^EVAL_[A-Z0-9_]*$")
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?\n?(.*)\Z", re.S | re.M)


@dataclass(frozen=True)
class _Planned:
    task_id: str
    files: dict[str, bytes]


def _frontmatter(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    m = _FRONTMATTER.match(text)
    if m is None:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        raise InputError(f"{path}: frontmatter is not YAML: {e}") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: frontmatter must be a mapping")
    return meta, m.group(2)


def _yaml(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: cannot read YAML: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: must be a mapping")
    return doc


def _refuse_unknown(path: Path, keys: Any, allowed: frozenset[str], prefix: str = "") -> None:
    for k in keys:
        if k not in allowed:
            raise InputError(f"{path}: field '{prefix}{k}': not a field of this format")


def plugin_manifest(plugin: Path) -> dict[str, Any]:
    """``plugin.json`` (root or ``.claude-plugin/``); a skills-only folder gets its dir name."""
    for p in (plugin / ".claude-plugin" / "plugin.json", plugin / "plugin.json"):
        if p.is_file():
            try:
                doc = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise InputError(f"{p}: not valid JSON: {e}") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
                raise InputError(f"{p}: field 'name': a plugin manifest needs a string name")
            return doc
    if (plugin / "skills").is_dir():
        return {"name": plugin.resolve().name}
    raise InputError(f"{plugin}: no plugin.json, .claude-plugin/plugin.json or skills/ folder")


def _eval_dir(plugin: Path, manifest: dict[str, Any]) -> Path:
    name = (manifest.get("experimental") or {}).get("evals", "evals")
    if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
        raise InputError(f"{plugin}: field 'experimental.evals': {name!r} is not a relative dir")
    return plugin / name


def find_cases(evals: Path) -> list[Path]:
    """Case folders under the eval dir: any folder holding prompt.md or case.yaml."""
    out: list[Path] = []

    def walk(d: Path, top: bool) -> None:
        if (d / "prompt.md").is_file() or (d / "case.yaml").is_file():
            out.append(d)
            return
        for child in sorted(d.iterdir()):
            if child.is_dir() and not child.name.startswith("."):
                if top and child.name in ("results", "mocks"):
                    continue
                walk(child, False)

    if evals.is_dir():
        walk(evals, True)
    return out


def _task_id(*parts: str, where: str) -> str:
    tid = ".".join(re.sub(r"[^A-Za-z0-9._-]+", "-", p).strip("-.") for p in parts)
    if not TASK_ID_RE.match(tid) or ".." in tid:
        raise InputError(f"{where}: cannot make a task id from {parts!r}")
    return tid


def _grader_from_md(path: Path) -> dict[str, Any]:
    meta, body = _frontmatter(path)
    g = {"name": path.stem, **meta}
    body = body.strip()
    kind = g.get("type")
    if body:
        if kind == "llm" and "criteria" not in g:
            g["criteria"] = body
        elif kind == "regex" and "pattern" not in g:
            g["pattern"] = body
        elif kind == "baseline" and "criteria" not in g:
            g["criteria"] = body
        else:
            g["note"] = body
    return g


def _resolve_graders(raw: list[tuple[Any, Path]], case_dir: Path) -> list[dict[str, Any]]:
    out = []
    for i, (g, where) in enumerate(raw):
        if not isinstance(g, dict):
            raise InputError(f"{where}: field 'graders.{i}': must be a mapping")
        g = dict(g)
        label = f"{where}: field 'graders.{g.get('name')}"
        for key in ("target", "focus"):
            if g.get(key) == "mock_calls":
                raise InputError(
                    f"{label}.{key}': mock_calls needs MCP mocks, which wfbench does not run"
                )
        if g.get("type") == "baseline":
            ref = g.get("baseline_file")
            if not isinstance(ref, str) or ".." in ref.split("/") or ref.startswith("/"):
                raise InputError(f"{label}.baseline_file': a file in the case folder")
            try:
                g["baseline_transcript"] = (case_dir / ref).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(f"{label}.baseline_file': {e}") from None
        out.append(g)
    return out


LABELS_FILE = "human-labels.yaml"
PLUGINS_DIR = "_plugins"
"""Where the whole plugin goes under the tasks folder (a ``_`` folder is never a task)."""


def _labels(case_dir: Path) -> list[Any]:
    """wfbench's ``human-labels.yaml`` of a case: ``[{grader, session_id, passed}]``."""
    path = case_dir / LABELS_FILE
    if not path.is_file():
        return []
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: cannot read YAML: {e}") from None
    if not isinstance(doc, list):
        raise InputError(f"{path}: a list of {{grader, session_id, passed}}")
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            raise InputError(f"{path}: field '{i}': a mapping")
        _refuse_unknown(path, item, frozenset({"grader", "session_id", "passed"}), f"{i}.")
    return doc


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
        if loc[:1] == ["graders"] and len(loc) > 1 and loc[1].isdigit():
            i = int(loc[1])
            if sources is not None:
                where = sources[i]
            loc = [f"graders.{doc['graders'][i].get('name')}", *loc[3:]]  # drop the type tag
        raise InputError(f"{where}: field '{'.'.join(loc)}': {err['msg']}") from None


def _run_settings(case: dict[str, Any], where: Path) -> dict[str, Any]:
    env = case.get("env") or {}
    if not isinstance(env, dict):
        raise InputError(f"{where}: field 'env': must be a mapping")
    for k in env:
        if not isinstance(k, str) or not _ENV_KEY.match(k):
            raise InputError(f"{where}: field 'env.{k}': keys must match EVAL_[A-Z0-9_]*")
    out = {
        "source": "claude-plugin-eval",
        "case": case["name"],
        "runs": case.get("runs", 3),
        "max_turns": case.get("max_turns", 10),
        "allowed_tools": list(case.get("allowed_tools") or []),
        "env": {str(k): str(v) for k, v in env.items()},
    }
    for key in ("model", "append_system_prompt", "description", "expected_outcome"):
        if case.get(key) is not None:
            out[key] = case[key]
    if case.get("tags"):
        out["tags"] = list(case["tags"])
    return out


def load_case(
    case_dir: Path, plugin: Path
) -> tuple[dict[str, Any], str, list[tuple[Any, Path]], str | None]:
    """(merged case fields, prompt, raw graders with their file, scaffold script) of one case."""
    case: dict[str, Any] = {}
    graders: list[tuple[Any, Path]] = []
    scaffold = None
    prompt = None
    cy = case_dir / "case.yaml"
    if cy.is_file():
        doc = _yaml(cy)
        _refuse_unknown(cy, doc, TOP_KEYS | {"execution", "context", "graders"})
        case.update({k: v for k, v in doc.items() if k in TOP_KEYS})
        execution = doc.get("execution") or {}
        context = doc.get("context") or {}
        _refuse_unknown(cy, execution, EXECUTION_KEYS, "execution.")
        for k in context:
            if k in REFUSED_CONTEXT:
                raise InputError(f"{cy}: field 'context.{k}': {REFUSED_CONTEXT[k]}")
        _refuse_unknown(cy, context, CONTEXT_KEYS, "context.")
        prompt = execution.pop("prompt", None) if isinstance(execution, dict) else None
        case.update(execution)
        scaffold = context.get("scaffold_script")
        graders += [(g, cy) for g in doc.get("graders") or []]
    pm = case_dir / "prompt.md"
    if pm.is_file():
        meta, body = _frontmatter(pm)
        _refuse_unknown(pm, meta, PROMPT_KEYS)
        case.update(meta)
        prompt = body.strip("\n")
    where = pm if pm.is_file() else cy
    if not prompt or not str(prompt).strip():
        raise InputError(f"{where}: field 'prompt': the case has no prompt")
    if (case_dir / "mocks").is_dir():
        raise InputError(f"{case_dir}/mocks: MCP mocks are not supported by wfbench")
    gdir = case_dir / "graders"
    if gdir.is_dir():
        graders += [(_grader_from_md(p), p) for p in sorted(gdir.glob("*.md"))]
    if not graders:
        raise InputError(f"{where}: field 'graders': a case needs at least one grader")
    case.setdefault("name", case_dir.name)
    for p in case.get("plugins") or []:
        if not isinstance(p, str) or (case_dir / p).resolve() != plugin.resolve():
            raise InputError(f"{where}: field 'plugins': {p!r} is not the imported plugin")
    return case, str(prompt), graders, scaffold


def run_scaffold(script: Path, where: str) -> dict[str, bytes]:
    """Run a scaffold script in the sandbox in an empty workspace; the files it left."""
    from bench_assets.sandbox import Isolation, Mount, SandboxSpec, run, sandbox_env

    with tempfile.TemporaryDirectory(prefix="wfbench-scaffold-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        res = run(
            ["bash", "/wfbench-scaffold/script.sh"],
            isolation=Isolation.SANDBOX,
            env=sandbox_env({}),
            timeout_s=SCAFFOLD_TIMEOUT_S,
            sandbox=SandboxSpec(
                workspace=ws, network=False, mounts=(Mount(script, "/wfbench-scaffold/script.sh"),)
            ),
        )
        if not res.ok:
            raise InputError(f"{where}: field 'context.scaffold_script': failed: {res.tail(600)}")
        out: dict[str, bytes] = {}
        for p in sorted(ws.rglob("*")):
            rel = p.relative_to(ws)
            if rel.parts[0] == ".git" or p.is_dir():
                continue
            if p.is_symlink() or not p.is_file():
                raise InputError(f"{where}: scaffold left {rel}, which is not a regular file")
            out[rel.as_posix()] = p.read_bytes()
        return out


def _task_files(
    task_id: str,
    prompt: str,
    settings: dict[str, Any],
    grading: SkillEvalGrading,
    tree: dict[str, bytes],
    timeout_s: int | None,
    tool: str,
) -> dict[str, bytes]:
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
        raise InputError(f"{task_id}: field '{fld}': {err['msg']}") from None
    header = f"# Imported by `wfbench import {tool}`; re-import to update.\n"
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
    grading_json = json.dumps(grading.model_dump(mode="json", exclude_none=True), indent=2)
    files = {"task.yaml": (header + body).encode(), f"oracle/{GRADING_FILE}": grading_json.encode()}
    files.update({f"repo/{rel}": data for rel, data in tree.items()})
    if not tree:
        files["repo/.keep"] = b""
    return files


def _plugin_tree(plugin: Path, evals: Path) -> dict[str, bytes]:
    """The plugin's files but its eval dir (and VCS folders), for ``plugin_dirs`` arms."""
    out: dict[str, bytes] = {}
    for p in sorted(plugin.rglob("*")):
        rel = p.relative_to(plugin)
        if rel.parts[0] in (".git", "node_modules") or p.is_relative_to(evals):
            continue
        if p.is_file() and not p.is_symlink():
            out[rel.as_posix()] = p.read_bytes()
    return out


def _plan_plugin(plugin: Path) -> tuple[str, list[_Planned], dict[str, bytes]]:
    manifest = plugin_manifest(plugin)
    pname = manifest["name"]
    evals = _eval_dir(plugin, manifest)
    cases = find_cases(evals)
    if not cases:
        raise InputError(f"{evals}: no case (a folder with prompt.md or case.yaml)")
    planned: list[_Planned] = []
    seen: dict[str, Path] = {}
    for case_dir in cases:
        case, prompt, raw, scaffold = load_case(case_dir, plugin)
        where = case_dir / ("prompt.md" if (case_dir / "prompt.md").is_file() else "case.yaml")
        tid = _task_id(pname, str(case["name"]), where=str(where))
        if tid in seen:
            raise InputError(f"{where}: field 'name': {case['name']!r} also names {seen[tid]}")
        seen[tid] = case_dir
        grading = _grading(
            {
                "source": "claude-plugin-eval",
                "case": case["name"],
                "graders": _resolve_graders(raw, case_dir),
                "labels": _labels(case_dir),
            },
            where,
            [p for _, p in raw],
        )
        tree: dict[str, bytes] = {}
        if scaffold is not None:
            script = case_dir / str(scaffold)
            if ".." in str(scaffold).split("/") or not script.is_file():
                raise InputError(f"{where}: field 'context.scaffold_script': no file {scaffold}")
            tree = run_scaffold(script, str(where))
        settings = _run_settings(case, where)
        timeout = case.get("timeout_seconds", 300)
        files = _task_files(tid, prompt, settings, grading, tree, timeout, "claude-plugin-eval")
        planned.append(_Planned(tid, files))
    skills: dict[str, bytes] = {}
    sdir = plugin / "skills"
    if sdir.is_dir():
        for p in sorted(sdir.rglob("*")):
            if p.is_file() and not p.is_symlink():
                skills[p.relative_to(sdir).as_posix()] = p.read_bytes()
    return pname, planned, skills


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


SC_TOP = frozenset({"skill_name", "evals"})
SC_CASE = frozenset(
    {"id", "prompt", "expected_output", "files", "assertions", "expectations", "name",
     "eval_name", "description"}
)  # fmt: skip


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
        files = _task_files(tid, prompt, settings, grading, tree, None, "skill-creator")
        planned.append(_Planned(tid, files))
    return skill, planned, root


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


def import_plugin(plugin: Path, tasks: Path) -> list[ImportedTask]:
    """Import every case of a plugin's eval suite (module docstring); nothing written on error."""
    name, planned, skills = _plan_plugin(plugin)
    results = _write(tasks, planned)
    made = _write_skills(tasks, skills, "skills (incumbent plugin tree)")
    whole = _plugin_tree(plugin, _eval_dir(plugin, plugin_manifest(plugin)))
    tree = _write_tree(tasks / PLUGINS_DIR / name, whole, f"{PLUGINS_DIR}/{name} (whole plugin)")
    return results + [r for r in (made, tree) if r is not None]


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


JUDGE_DEFAULT = {
    "model": "claude-haiku-4-5-20251001",
    "input_usd_per_mtok": 1.0,
    "output_usd_per_mtok": 5.0,
}
"""The judge a fresh bench.yaml pins when a case has llm/baseline graders: the small fast model
``claude plugin eval`` defaults to (reference §1.5), dated, at its list prices."""


def ensure_bench(
    tasks: Path, model: str = "claude-sonnet-4-5-20250929", *, judge: bool = True
) -> Path | None:
    """A bench.yaml with the two arms ``claude plugin eval`` compares, for a fresh folder (and
    the judge pinned when ``judge``: some imported case has llm/baseline graders)."""
    from bench_assets.fsutil import atomic_write_text

    bench = tasks / "bench.yaml"
    if bench.exists():
        return None
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
