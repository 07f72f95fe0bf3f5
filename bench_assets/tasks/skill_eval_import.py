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
  (:class:`~bench_assets.scorers.skill_eval.SkillEvalGrading`) — hidden like an oracle.

The plugin's ``skills/<name>/`` become the incumbent skills (``<tasks>/skills/<name>/``).

``wfbench import skill-creator`` is :mod:`bench_assets.tasks.skill_eval_creator`; it shares this
module's task rendering and idempotent writing.

Nothing is dropped silently: a field this importer cannot honour (``history_file``, ``add_dirs``,
an unknown key, a ``schema_version`` other than 1.1, a scaffold's git state one base commit cannot
hold) is refused, and the error names the file and the field. MCP (:func:`mcp_declarations`): the
first-party tool reaches a plugin's MCP tools only through mocks and wfbench runs none, so MCP
servers in the plugin, ``mocks/`` folders and ``mock_calls`` targets are refused too.
Importing is idempotent and a changed case prints its diff (as ``import
swebench``: :func:`bench_assets.tasks.swebench._diff`).
"""

import json
import re
from pathlib import Path
from typing import Any

import yaml

from bench_assets.config.models import check_model_id
from bench_assets.kernel.errors import InputError
from bench_assets.tasks.skill_eval_scaffold import run_scaffold
from bench_assets.tasks.skill_eval_tasks import (
    LABELS_FILE,
    PLUGINS_DIR,
    _grading,
    _Planned,
    _refuse_unknown,
    _task_files,
    _task_id,
    _write,
    _write_skills,
    _write_tree,
    env_key_problem,
)
from bench_assets.tasks.swebench import ImportedTask

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
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?\n?(.*)\Z", re.S | re.M)


def _frontmatter(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM must not hide the frontmatter
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    m = _FRONTMATTER.match(text)
    if m is None:
        if re.match(r"\A---[ \t]*\r?\n", text):
            raise InputError(f"{path}: frontmatter: opened with --- but never closed by ---")
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
        doc = yaml.safe_load(path.read_text(encoding="utf-8-sig")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: cannot read YAML: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: must be a mapping")
    return doc


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


def _eval_dir(plugin: Path, manifest: dict[str, Any], flag: str | None = None) -> Path:
    """``--eval-dir`` (wins), else ``plugin.json`` ``experimental.evals``, else ``evals``."""
    if flag is not None:
        if not flag or flag.startswith("/") or ".." in flag.split("/"):
            raise InputError(f"--eval-dir {flag!r}: a folder inside the plugin, relative to it")
        return plugin / flag
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


MAX_TIMEOUT_S = 3600
"""``timeout_seconds`` is at most 3600 in ``claude plugin eval`` (reference §1.3)."""
CASE_SCHEMA = "1.1"


def _check_case_fields(case: dict[str, Any], where: Path) -> None:
    """The shared fields' types and limits as the reference gives them (§1.3)."""
    version = case.get("schema_version", CASE_SCHEMA)
    if str(version) != CASE_SCHEMA:
        raise InputError(
            f"{where}: field 'schema_version': {version!r} is not the case format wfbench reads "
            f"({CASE_SCHEMA!r})"
        )
    for key in ("name", "description", "expected_outcome"):
        if key in case and not isinstance(case[key], str):
            raise InputError(f"{where}: field '{key}': must be text")
    tags = case.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise InputError(f"{where}: field 'tags': a list of strings, e.g. [smoke]")
    for key, top in (("runs", 50), ("max_turns", 200), ("timeout_seconds", MAX_TIMEOUT_S)):
        v = case.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top):
            raise InputError(f"{where}: field '{key}': a whole number from 1 to {top}, not {v!r}")


def _run_settings(case: dict[str, Any], where: Path) -> dict[str, Any]:
    _check_case_fields(case, where)
    env = case.get("env") or {}
    if not isinstance(env, dict):
        raise InputError(f"{where}: field 'env': must be a mapping")
    for k in env:
        problem = env_key_problem(k)
        if problem is not None:
            raise InputError(f"{where}: field 'env.{k}': {problem}")
    tools = case.get("allowed_tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, str) and t.strip() for t in tools):
        raise InputError(f"{where}: field 'allowed_tools': a list of tool names")
    asp = case.get("append_system_prompt")
    if asp is not None and (not isinstance(asp, str) or not asp.strip()):
        raise InputError(f"{where}: field 'append_system_prompt': non-blank text")
    if case.get("model") is not None:
        try:
            check_model_id(str(case["model"]))
        except ValueError as e:
            raise InputError(
                f"{where}: field 'model': {e} (the case's model must also be bench.yaml's)"
            ) from None
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
        raise InputError(
            f"{case_dir / 'mocks'}: case {case_dir.name!r}, field 'mocks': per-case MCP mocks "
            "are not run by wfbench (a case's MCP tools exist only through them)"
        )
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


MCP_REFUSAL = (
    "claude plugin eval starts no real MCP server: a case reaches the plugin's MCP tools only "
    "through mocks (evals/mocks, <case>/mocks), which wfbench does not run, so the runs would "
    "not be the ones the suite measured; remove the MCP servers from the imported copy of the "
    "plugin, or leave this suite to claude plugin eval"
)


def mcp_declarations(plugin: Path, manifest: dict[str, Any], evals: Path) -> list[str]:
    """Where the plugin or its suite declares MCP servers or mocks (``file: field 'x'`` each).

    ``claude plugin eval`` never starts a plugin's real MCP servers by default; their tools exist
    only through mocks (reference §1.7). wfbench runs no mocks, and an arm given the plugin
    folder would start the real servers: either way the runs differ from the suite's, so
    every declaration is refused, never ignored."""
    found = []
    manifest_path = next(
        (
            p
            for p in (plugin / ".claude-plugin" / "plugin.json", plugin / "plugin.json")
            if p.is_file()
        ),
        None,
    )
    if manifest_path is not None and manifest.get("mcpServers"):
        servers = manifest["mcpServers"]
        names = sorted(servers) if isinstance(servers, dict) else [str(servers)]
        found.append(f"{manifest_path}: field 'mcpServers' ({', '.join(names)})")
    mcp_json = plugin / ".mcp.json"
    if mcp_json.is_file():
        try:
            doc = json.loads(mcp_json.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = None
        servers = doc.get("mcpServers", doc) if isinstance(doc, dict) else None
        names = sorted(servers) if isinstance(servers, dict) else ["?"]
        found.append(f"{mcp_json}: field 'mcpServers' ({', '.join(names)})")
    if (evals / "mocks").is_dir():
        servers = sorted(p.name for p in (evals / "mocks").iterdir() if p.is_dir())
        found.append(f"{evals / 'mocks'}: suite-wide MCP mocks ({', '.join(servers) or 'empty'})")
    return found


def _plan_plugin(
    plugin: Path, eval_dir: str | None = None
) -> tuple[str, list[_Planned], dict[str, bytes]]:
    manifest = plugin_manifest(plugin)
    pname = manifest["name"]
    evals = _eval_dir(plugin, manifest, eval_dir)
    mcp = mcp_declarations(plugin, manifest, evals)
    if mcp:
        raise InputError(f"{mcp[0]}: {MCP_REFUSAL}" + "".join(f"\n  also {m}" for m in mcp[1:]))
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
            cy = case_dir / "case.yaml"  # context.* lives only there
            if ".." in str(scaffold).split("/") or not script.is_file():
                raise InputError(f"{cy}: field 'context.scaffold_script': no file {scaffold}")
            tree = run_scaffold(script, str(cy))
        settings = _run_settings(case, where)
        timeout = case.get("timeout_seconds", 300)
        files = _task_files(
            tid, prompt, settings, grading, tree, timeout, "claude-plugin-eval", where
        )
        planned.append(_Planned(tid, files))
    skills: dict[str, bytes] = {}
    sdir = plugin / "skills"
    if sdir.is_dir():
        for p in sorted(sdir.rglob("*")):
            if p.is_file() and not p.is_symlink():
                skills[p.relative_to(sdir).as_posix()] = p.read_bytes()
    return pname, planned, skills


def import_plugin(plugin: Path, tasks: Path, eval_dir: str | None = None) -> list[ImportedTask]:
    """Import every case of a plugin's eval suite (module docstring); nothing written on error.
    ``eval_dir``: the suite's folder inside the plugin, as ``claude plugin eval --eval-dir``."""
    name, planned, skills = _plan_plugin(plugin, eval_dir)
    results = _write(tasks, planned)
    made = _write_skills(tasks, skills, "skills (incumbent plugin tree)")
    whole = _plugin_tree(plugin, _eval_dir(plugin, plugin_manifest(plugin), eval_dir))
    tree = _write_tree(tasks / PLUGINS_DIR / name, whole, f"{PLUGINS_DIR}/{name} (whole plugin)")
    return results + [r for r in (made, tree) if r is not None]
