"""Import SWE-bench-style instances as wfbench task folders (``wfbench import swebench``).

An instance (JSON or JSONL: ``instance_id``, ``repo``, ``base_commit``, ``problem_statement``,
``patch``, ``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, optional ``version`` and
``environment_setup_commit``; other dataset columns such as ``hints_text`` are ignored) becomes
``<tasks>/<instance_id>/``:

- ``task.yaml``: ``repo`` is the local repository ``--repos DIR`` maps ``owner/name`` to
  (``DIR/owner/name``, ``DIR/owner__name`` or ``DIR/name``; nothing is ever cloned from the
  network), ``ref`` is ``base_commit`` (checked to exist there), the problem statement is the
  prompt, ``oracle.fail_to_pass`` / ``oracle.pass_to_pass`` come from the instance;
- ``oracle/``: the hidden oracle is the test patch's Python files as they are after the patch,
  so the agent never sees the new tests;
- the visible ``verify`` runs, through the trusted runner, the tests an agent can already read:
  the base version of the files the test patch edits, and every file a FAIL_TO_PASS /
  PASS_TO_PASS test lives in that the test patch does not touch (such a file is in the sanitized
  clone, so it cannot be a hidden oracle file: the sanitizer refuses oracle bytes the agent could
  read; its listed tests are graded by ``verify``, where every test of the file must pass). An
  instance with none gets a verify that always passes, so resolution rests on the oracle alone —
  SWE-bench's own rule.

The gold patch is kept outside every task, in ``<tasks>/replays/swebench-gold.jsonl`` (a
predictions file, producer ``gold``), for a gold replay (``wfbench grade --predictions``).

Importing is idempotent: a task whose files would not change is left alone, and a changed
instance is rewritten with a unified diff of what changed (:class:`ImportedTask`). Every error
names the instances file, the instance and the field.
"""

import difflib
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bench_assets.config.models import TASK_ID_RE, TaskSpec
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.fsutil import atomic_write_bytes, atomic_write_text
from bench_assets.sandbox.gitrepo import git, resolve_commit

GOLD_FILE = "replays/swebench-gold.jsonl"
"""Where the gold patches go, relative to the tasks folder."""
TASK_CLASS = "swebench"
ALWAYS_PASSES = 'python -c "pass"'
"""The verify of an instance whose test patch only adds files (see module docstring)."""

_DIFF_HEADER = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$", re.M)
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _id_list(v: Any) -> Any:
    """SWE-bench's datasets store the test lists as JSON text; files written by hand, as lists."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON list of test ids: {e.msg}") from None
    return v


class SwebenchInstance(BaseModel):
    """One SWE-bench instance (the fields wfbench uses; other dataset columns are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    instance_id: str
    repo: str
    base_commit: str = Field(pattern=r"^[0-9a-f]{7,64}$")
    problem_statement: str = Field(min_length=1)
    patch: str = ""
    test_patch: str = Field(min_length=1)
    fail_to_pass: list[str] = Field(alias="FAIL_TO_PASS", min_length=1)
    pass_to_pass: list[str] = Field(alias="PASS_TO_PASS", default_factory=list)
    version: str | None = None
    environment_setup_commit: str | None = None

    @field_validator("instance_id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if not TASK_ID_RE.match(v) or ".." in v:
            raise ValueError(f"{v!r} is not a task id ([A-Za-z0-9][A-Za-z0-9._-]{{0,127}})")
        return v

    @field_validator("repo")
    @classmethod
    def _check_repo(cls, v: str) -> str:
        if not _REPO_RE.match(v) or ".." in v:
            raise ValueError(f"{v!r} is not owner/name")
        return v

    @field_validator("fail_to_pass", "pass_to_pass", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return _id_list(v)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) else v


def load_instances(path: Path) -> list[SwebenchInstance]:
    """The instances of a JSON list or JSONL file; errors name the file, line or entry and field.

    Raises:
        InputError: Unreadable, not JSON, an invalid or duplicate instance.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read SWE-bench instances: {e}") from None
    entries: list[tuple[str, Any]]
    stripped = text.lstrip()
    try:
        whole = json.loads(text) if stripped.startswith("[") else None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    if isinstance(whole, list):
        entries = [(f"entry {i}", o) for i, o in enumerate(whole)]
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append((f"line {n}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}: line {n}: not valid JSON: {e.msg}") from None
    out: list[SwebenchInstance] = []
    seen: set[str] = set()
    for where, obj in entries:
        name = obj.get("instance_id") if isinstance(obj, dict) else None
        label = f"{where} ({name})" if isinstance(name, str) else where
        try:
            inst = SwebenchInstance.model_validate(obj)
        except ValidationError as e:
            err = e.errors()[0]
            fld = ".".join(str(p) for p in err["loc"]) or "(instance)"
            raise InputError(f"{path}: {label}: field '{fld}': {err['msg']}") from None
        if inst.instance_id in seen:
            raise InputError(f"{path}: {label}: duplicate instance_id {inst.instance_id!r}")
        seen.add(inst.instance_id)
        out.append(inst)
    return out


def find_repository(repos: Path, name: str, where: str = "") -> Path:
    """The local repository for ``owner/name`` under ``repos`` (see module docstring)."""
    owner, short = name.split("/", 1)
    candidates = [repos / owner / short, repos / f"{owner}__{short}", repos / short]
    for c in candidates:
        if (c / ".git").exists() or (c / "HEAD").is_file():
            return c.resolve()
    tried = ", ".join(str(c) for c in candidates)
    prefix = f"{where}: field 'repo': " if where else ""
    raise InputError(f"{prefix}no local repository for {name} under {repos} (tried {tried})")


def _patch_files(patch: str) -> list[tuple[str, str]]:
    """(old path, new path) of every file a git patch touches."""
    return [(m["a"], m["b"]) for m in _DIFF_HEADER.finditer(patch)]


def _base_file(repo: Path, commit: str, rel: str) -> bytes | None:
    res = git(["cat-file", "blob", f"{commit}:{rel}"], cwd=repo, check=False)
    return res.stdout if res.ok else None


@dataclass(frozen=True)
class _Oracle:
    files: dict[str, bytes]
    existing_tests: list[str]


def _oracle_files(inst: SwebenchInstance, repo: Path, commit: str, where: str) -> _Oracle:
    """The test files after the test patch (and other files the listed tests live in)."""
    touched = _patch_files(inst.test_patch)
    if not touched:
        raise InputError(f"{where}: field 'test_patch': no 'diff --git' file header")
    existing = [b for a, b in touched if a == b and _base_file(repo, commit, a) is not None]
    with tempfile.TemporaryDirectory(prefix="wfbench-import-") as tmp:
        root = Path(tmp)
        for a, _ in touched:
            data = _base_file(repo, commit, a)
            if data is not None:
                dest = root / a
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
        (root / ".patch").write_text(inst.test_patch, encoding="utf-8")
        res = git(["apply", "--whitespace=nowarn", ".patch"], cwd=root, check=False)
        if not res.ok:
            raise InputError(
                f"{where}: field 'test_patch': does not apply at base_commit {commit[:12]}: "
                f"{res.tail(600)}"
            )
        files = {
            b: (root / b).read_bytes()
            for _, b in touched
            if b != "/dev/null" and (root / b).is_file() and b.endswith(".py")
        }
    visible: set[str] = {p for p in existing if p.endswith(".py")}
    for tid in [*inst.fail_to_pass, *inst.pass_to_pass]:
        rel = tid.split("::", 1)[0]
        if "::" not in tid or not rel.endswith(".py"):
            fld = "FAIL_TO_PASS" if tid in inst.fail_to_pass else "PASS_TO_PASS"
            raise InputError(
                f"{where}: field '{fld}': test id {tid!r} is not a pytest node id "
                "(<file>.py::<test>); only pytest-graded instances can be imported"
            )
        if rel not in files:
            if _base_file(repo, commit, rel) is None:
                raise InputError(
                    f"{where}: test id {tid!r} names {rel}, which neither the test patch nor "
                    "the base commit has"
                )
            visible.add(rel)  # the agent can read it already: graded by verify, not the oracle
    if not files:
        raise InputError(f"{where}: field 'test_patch': touches no Python test file")
    return _Oracle(files=files, existing_tests=sorted(visible))


def _in(test_id: str, files: dict[str, bytes]) -> bool:
    return test_id.split("::", 1)[0] in files


def task_document(
    inst: SwebenchInstance,
    repo: Path,
    commit: str,
    oracle: _Oracle,
    environment: dict[str, Any] | None = None,
) -> dict:
    """The task.yaml of an instance, validated as a :class:`TaskSpec`."""
    doc: dict[str, Any] = {
        "id": inst.instance_id,
        "class": TASK_CLASS,
        "repo": str(repo),
        "ref": commit,
        "prompt": inst.problem_statement,
        "verify": {"pytest": oracle.existing_tests} if oracle.existing_tests else ALWAYS_PASSES,
        "oracle": {
            "files": sorted(oracle.files),
            "fail_to_pass": [t for t in inst.fail_to_pass if _in(t, oracle.files)],
            "pass_to_pass": [t for t in inst.pass_to_pass if _in(t, oracle.files)],
        },
    }
    for key in ("fail_to_pass", "pass_to_pass"):
        if not doc["oracle"][key]:
            del doc["oracle"][key]
    if environment is not None:
        doc["environment"] = environment
    TaskSpec.model_validate(doc)
    return doc


@dataclass
class ImportedTask:
    """What importing one instance did: ``created``, ``changed`` (with a diff) or ``unchanged``."""

    instance_id: str
    status: str
    diff: str = ""
    files: list[str] = field(default_factory=list)


def _render(doc: dict, oracle: _Oracle) -> dict[str, bytes]:
    header = "# Imported by `wfbench import swebench`; re-import to update.\n"
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
    out = {"task.yaml": (header + body).encode()}
    out.update({f"oracle/{rel}": data for rel, data in oracle.files.items()})
    return out


def _existing(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _diff(old: dict[str, bytes], new: dict[str, bytes], task: str) -> str:
    lines: list[str] = []
    for rel in sorted(set(old) | set(new)):
        a = old.get(rel, b"").decode("utf-8", "replace").splitlines(keepends=True)
        b = new.get(rel, b"").decode("utf-8", "replace").splitlines(keepends=True)
        if a != b:
            lines += difflib.unified_diff(
                a,
                b,
                fromfile=f"a/{task}/{rel}" if rel in old else "/dev/null",
                tofile=f"b/{task}/{rel}" if rel in new else "/dev/null",
            )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def import_instances(
    source: Path, repos: Path, tasks: Path, *, environment: dict[str, Any] | None = None
) -> list[ImportedTask]:
    """Write one task folder per instance of ``source`` under ``tasks`` (module docstring).

    ``environment`` is written as every task's ``environment`` (e.g. ``{"pyproject": True}``: the
    repository's declared dependencies, built once per task by ``task_environments``).

    Raises:
        InputError: A bad instance, a missing repository or commit, or a test patch that does not
            apply; nothing is written for any instance then.
    """
    instances = load_instances(source)
    if not instances:
        raise InputError(f"{source}: no instances")
    planned: list[tuple[SwebenchInstance, dict[str, bytes]]] = []
    for inst in instances:
        where = f"{source}: {inst.instance_id}"
        repo = find_repository(repos, inst.repo, where)
        commit = resolve_commit(repo, inst.base_commit)
        if commit is None:
            raise InputError(
                f"{where}: field 'base_commit': {inst.base_commit} is not in {repo} "
                "(update the local mirror; nothing is fetched)"
            )
        oracle = _oracle_files(inst, repo, commit, where)
        doc = task_document(inst, repo, commit, oracle, environment)
        planned.append((inst, _render(doc, oracle)))
    results = []
    for inst, files in planned:
        folder = tasks / inst.instance_id
        old = _existing(folder)
        if old == files:
            results.append(ImportedTask(inst.instance_id, "unchanged", files=sorted(files)))
            continue
        for rel in set(old) - set(files):
            (folder / rel).unlink()
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(folder / rel, data)
        status = "changed" if old else "created"
        diff = _diff(old, files, inst.instance_id) if old else ""
        results.append(ImportedTask(inst.instance_id, status, diff, sorted(files)))
    _write_gold(tasks, [inst for inst, _ in planned])
    return results


def _write_gold(tasks: Path, instances: list[SwebenchInstance]) -> Path:
    """Merge the instances' gold patches into the gold predictions file (keyed by instance)."""
    path = tasks / GOLD_FILE
    entries: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                obj = json.loads(line)
                entries[obj["instance_id"]] = obj
    for inst in instances:
        entries[inst.instance_id] = {
            "instance_id": inst.instance_id,
            "model_name_or_path": "gold",
            "model_patch": inst.patch,
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(entries[k], sort_keys=True) + "\n" for k in sorted(entries))
    return atomic_write_text(path, text)


def ensure_bench(
    tasks: Path, *, gold_file: str = GOLD_FILE, importer: str = "swebench", empty_gold: bool = False
) -> Path | None:
    """A minimal bench.yaml (one ``gold`` replay arm reading ``gold_file``) for a fresh tasks
    folder; None if present. ``empty_gold`` creates an empty gold file when there is none yet."""
    bench = tasks / "bench.yaml"
    if bench.exists():
        return None
    (tasks / "skills").mkdir(parents=True, exist_ok=True)
    if empty_gold and not (tasks / gold_file).exists():
        (tasks / gold_file).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(tasks / gold_file, "")
    doc = {
        "model": "claude-sonnet-4-5-20250929",
        "runs": 1,
        "arms": {
            "gold": {"agent": {"adapter": "replay", "predictions": gold_file}, "skills": "none"}
        },
    }
    header = (
        f"# Written by `wfbench import {importer}` for a fresh folder: edit the arms to taste.\n"
    )
    return atomic_write_text(bench, header + yaml.safe_dump(doc, sort_keys=False))
