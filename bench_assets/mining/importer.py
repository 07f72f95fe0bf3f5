"""``wfbench import commits``: a repository's fix commits -> validated task folders.

For every first-parent commit of the range (:mod:`.history`), oldest first:

1. not a candidate (root commit, outside ``--paths``, no test module or no source changed) →
   ``skipped`` with the reason;
2. already imported (``<tasks>/<id>/mined.json`` names this commit) → ``unchanged``, untouched
   (a user's edit of ``verify`` survives a re-import); rejected before under the same miner and
   options (the ledger) → ``rejected`` again, nothing run;
3. otherwise the task is built and validated:

   - base = the first parent, pinned as the task's ``ref`` (a full SHA); ``repo`` is the
     repository's real path;
   - hidden oracle = the test-side files the commit added or changed, at their post-commit bytes
     (``oracle-too-large`` beyond the task format's 16 files or the benchmark's size caps). The
     oracle is staged in a folder of its own, not under the repository's test folder, so the
     base's ``conftest.py`` files of an oracle test's folder and its parents (the root one
     applies anyway) go with it, each with a comment appended (:data:`CONFTEST_MARK`);
   - gold = the diff of every non-test file, written to :data:`.folders.GOLD_FILE` outside the task
     folders (a predictions file: ``wfbench grade --predictions`` replays it);
   - prompt = the commit message (a merge: with its branch's messages), redacted
     (:mod:`.leaks`); blank after redaction → ``prompt-empty``;
   - environment (with ``--pyproject-env``; none otherwise, so an offline import needs no
     index) = the base's requirements files (``requirements*.txt``, ``requirements/*.txt``;
     ``pytest`` left out, the harness brings its own) and its ``pyproject.toml`` ``[project]``
     dependencies — the existing task environments, built once per task from the index; a
     build that fails rejects the candidate (``environment-failed``);
   - the sanitized template of the base is built with every oracle file and every file of the
     fix forbidden; the base holding one of them → ``leak-in-base``;
   - :func:`.validate.validate` decides ``fail_to_pass``, ``pass_to_pass`` and ``verify``.

An accepted task is published atomically as ``task.yaml``, ``oracle/`` and ``mined.json`` (the
validation record); every verdict goes to the ledger as soon as it is known, so an interrupted
import resumes where it stopped. ``--max N`` caps the candidates validated by one run (cached and
unchanged ones do not count), so a later run continues with the next ones.

Why a little over 500 lines: this is the import's one sequence (candidates, environment, staged
oracle and conftests, validation, publication, report); its pieces share the run's state and are
read top to bottom; history, leaks, validation and documents already live in their own modules.
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from bench_assets.config.models import EnvironmentSpec, TaskSpec, WorktreePath
from bench_assets.inputs.sanitize import build_template
from bench_assets.kernel.errors import (
    CommandError,
    EnvironmentBuildError,
    InputError,
    IntegrityError,
    SanitizeError,
)
from bench_assets.kernel.fsutil import remove_tree
from bench_assets.kernel.hashing import sha256_bytes, sha256_json, sha256_text
from bench_assets.kernel.store import ArtifactStore
from bench_assets.mining import folders, history, leaks
from bench_assets.mining.documents import (
    MINER,
    CandidateLine,
    LedgerEntry,
    MinedLeaks,
    MinedSource,
    MinedTask,
    MineLedger,
    MineReport,
    Status,
)
from bench_assets.mining.validate import Box, validate
from bench_assets.sandbox import gitrepo
from bench_assets.tasks.catalog import Benchmark, load_benchmark
from bench_assets.tasks.discovery import discover_tests

TASK_CLASS = "commit"
ALWAYS_PASSES = 'python -c "pass"'
MAX_ORACLE_FILES = 16
MAX_VERIFY_FILES = 64
REQUIREMENTS_FILES = (
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements_dev.txt",
    "requirements_test.txt",
    "dev-requirements.txt",
    "test-requirements.txt",
    "requirements/base.txt",
    "requirements/dev.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
)
_HARNESS_OWNED = frozenset({"pytest"})
CONFTEST_MARK = b"\n# wfbench: staged beside the hidden tests (the visible copy is not)\n"
"""Appended to a conftest copied into the oracle: its bytes then differ from the visible file's
(the sanitizer refuses oracle bytes the agent can read), its behaviour does not."""
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
_WORKTREE_PATH: TypeAdapter[str] = TypeAdapter(WorktreePath)


@dataclass(frozen=True)
class Options:
    """What to mine and how (the command's options)."""

    since: str | None = None
    revrange: str | None = None
    paths: tuple[str, ...] = ()
    max_candidates: int | None = None
    pyproject_env: bool = False
    repeats: int = 3

    def digest(self, bench: Benchmark) -> str:
        """What decides a validation's outcome (a cached rejection holds only while it holds)."""
        return sha256_json(
            {
                "pyproject_env": self.pyproject_env,
                "repeats": self.repeats,
                "remove": list(bench.config.sanitize.remove),
            }
        )[:16]


@dataclass
class _Run:
    top: Path
    tasks: Path
    bench: Benchmark
    artifacts: ArtifactStore
    options: Options
    slug: str
    ledger: MineLedger
    ledger_path: Path
    lines: list[CandidateLine] = field(default_factory=list)
    gold: dict[str, str] = field(default_factory=dict)


def repo_slug(top: Path) -> str:
    """A task-id prefix from the repository's folder name (``<name>-<sha12>`` ids)."""
    name = top.name.removesuffix(".git")
    if name in ("", "repo") and top.parent.name:
        name = top.parent.name.removesuffix(".git")
    slug = _SLUG.sub("-", name).strip("-._")[:40]
    return slug or "repo"


def import_commits(
    repo: Path,
    tasks: Path,
    artifacts: ArtifactStore,
    options: Options,
    *,
    on_line: Callable[[CandidateLine], None] | None = None,
) -> MineReport:
    """Mine ``repo`` into ``tasks`` (see module docstring); ``on_line`` sees each verdict.

    Raises:
        InputError: ``repo`` is not a git repository, the range names no history, or the tasks
            folder is not a valid benchmark (nothing is run then).
    """
    started = time.monotonic()
    try:
        top = gitrepo.toplevel(repo)
    except Exception as e:
        raise InputError(f"{repo}: not a readable git repository: {e}") from None
    tasks.mkdir(parents=True, exist_ok=True)
    folders.ensure_bench(tasks)
    bench = load_benchmark(tasks)
    slug = repo_slug(top)
    ledger_path = tasks / folders.LEDGER_DIR / f"{slug}-{sha256_text(str(top))[:8]}.json"
    ledger = folders.load_ledger(ledger_path, top)
    commits = history.list_commits(top, since=options.since, revrange=options.revrange)
    run = _Run(top, tasks, bench, artifacts, options, slug, ledger, ledger_path)
    validated = 0
    candidates = 0
    for commit in commits:
        if options.max_candidates is not None and validated >= options.max_candidates:
            break
        t0 = time.monotonic()
        line, did_validate = _examine(run, commit)
        line = line.model_copy(update={"seconds": round(time.monotonic() - t0, 3)})
        validated += did_validate
        candidates += line.status != "skipped"
        run.lines.append(line)
        if on_line is not None:
            on_line(line)
    return _report(run, repo, len(run.lines), candidates, time.monotonic() - started)


def _report(run: _Run, repo: Path, commits: int, candidates: int, seconds: float) -> MineReport:
    rejected: dict[str, list[str]] = {}
    skipped: dict[str, int] = {}
    for ln in run.lines:
        if ln.status == "rejected":
            rejected.setdefault(ln.reason or "?", []).append(ln.commit)
        elif ln.status == "skipped":
            skipped[ln.reason or "?"] = skipped.get(ln.reason or "?", 0) + 1
    paid = [
        ln.seconds for ln in run.lines if ln.status in ("accepted", "rejected") and not ln.cached
    ]
    return MineReport(
        repo=str(run.top),
        tasks_dir=str(run.tasks),
        range=run.options.revrange,
        since=run.options.since,
        paths=list(run.options.paths),
        commits=commits,
        candidates=candidates,
        accepted=[ln.task_id for ln in run.lines if ln.status == "accepted" and ln.task_id],
        unchanged=[ln.task_id for ln in run.lines if ln.status == "unchanged" and ln.task_id],
        rejected_by_reason=rejected,
        skipped_by_reason=skipped,
        seconds=round(seconds, 3),
        seconds_per_candidate=round(sum(paid) / len(paid), 3) if paid else None,
        lines=run.lines,
    )


def _line(commit: history.Commit, subject: str, status: Status, **kw: Any) -> CandidateLine:
    return CandidateLine(
        commit=commit.sha, subject=subject, merge=commit.merge, status=status, seconds=0.0, **kw
    )


def _examine(run: _Run, commit: history.Commit) -> tuple[CandidateLine, bool]:
    """One commit's verdict, and whether it was validated by this run."""
    subject = history.subject(run.top, commit.sha)
    if commit.parent is None:
        return _line(commit, subject, "skipped", reason="root-commit"), False
    changes = history.changes(run.top, commit)
    if not history.matches_paths(changes, run.options.paths):
        return _line(commit, subject, "skipped", reason="outside-paths"), False
    rules = history.read_rules(run.top, commit.parent)
    parts = history.split(changes, rules)
    why = history.skip_reason(commit, parts, rules)
    if why is not None:
        return _line(commit, subject, "skipped", reason=why), False
    task_id = f"{run.slug}-{commit.sha[:12]}"
    mined = folders.read_mined(run.tasks / task_id)
    if mined is not None and mined.source.commit == commit.sha:
        return _line(commit, subject, "unchanged", task_id=task_id, cached=True), False
    entry = run.ledger.entries.get(commit.sha)
    options = run.options.digest(run.bench)
    if entry and entry.status == "rejected" and entry.miner == MINER and entry.options == options:
        kw = {"reason": entry.reason, "detail": entry.detail, "cached": True}
        return _line(commit, subject, "rejected", **kw), False
    if (run.tasks / task_id).exists():
        detail = f"{run.tasks / task_id} exists and was not mined from this commit: left alone"
        return _line(commit, subject, "rejected", reason="task-exists", detail=detail), False
    try:
        reason, detail, notes = _candidate(run, commit, parts, rules, task_id, subject)
    except (CommandError, IntegrityError) as e:
        # A harness step failed on this commit (git, the sanitizer): say so, do not cache it
        # (it may not recur), and go on with the next commit.
        detail = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        return _line(commit, subject, "rejected", reason="harness-error", detail=detail), True
    status: Literal["accepted", "rejected"] = "accepted" if reason is None else "rejected"
    _record(
        run,
        commit.sha,
        LedgerEntry(
            status=status,
            reason=reason,
            detail=detail,
            task_id=task_id if reason is None else None,
            options=options,
        ),
    )
    if notes:
        detail = f"{detail}; prompt redacted: {'; '.join(notes)}"
    kw = {"reason": reason, "detail": detail}
    if reason is None:
        kw["task_id"] = task_id
    return _line(commit, subject, status, **kw), True


def _record(run: _Run, sha: str, entry: LedgerEntry) -> None:
    entries = {**run.ledger.entries, sha: entry}
    run.ledger = run.ledger.model_copy(update={"entries": entries})
    folders.save_ledger(run.ledger_path, run.ledger)


def _requirements(top: Path, parent: str) -> tuple[list[str], list[str]]:
    """Requirements named by the base's requirements files, and the lines left out."""
    from packaging.requirements import InvalidRequirement, Requirement

    reqs: list[str] = []
    skipped: list[str] = []
    for name in REQUIREMENTS_FILES:
        data = history.blob(top, parent, name)
        if data is None:
            continue
        for raw in data.decode("utf-8", "replace").splitlines():
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            try:
                req = Requirement(line)
            except InvalidRequirement:
                skipped.append(f"{name}: {line}")
                continue
            if req.url or line.startswith("-"):
                skipped.append(f"{name}: {line}")
            elif req.name.lower() not in _HARNESS_OWNED:
                reqs.append(line)
    return sorted(set(reqs))[:200], skipped


def _environment(run: _Run, parent: str) -> EnvironmentSpec | None:
    if not run.options.pyproject_env:
        return None
    reqs, _ = _requirements(run.top, parent)
    pyproject = history.blob(run.top, parent, "pyproject.toml") is not None
    if not reqs and not pyproject:
        return None
    return EnvironmentSpec(requirements=reqs, pyproject=bool(pyproject))


def _conftests(top: Path, parent: str, oracle: dict[str, bytes]) -> dict[str, bytes]:
    """Copies of the base's ``conftest.py`` files the oracle's tests need (module docstring)."""
    out: dict[str, bytes] = {}
    for name in list(oracle):
        folder = PurePosixPath(name).parent
        while str(folder) not in (".", ""):
            rel = f"{folder}/conftest.py"
            if rel not in oracle and rel not in out:
                data = history.blob(top, parent, rel)
                if data is not None:
                    out[rel] = data + CONFTEST_MARK
            folder = folder.parent
    return out


def _import_paths(base_blobs: dict[str, str], rules: history.TestRules) -> list[str]:
    """pytest's ``pythonpath`` folders, ``src`` for a src layout, and the top level."""
    paths = list(base_blobs.values())
    out: list[str] = []
    for p in rules.pythonpath:
        rel = p.strip("/").removeprefix("./") or "."
        if rel == "." or any(x.startswith(rel + "/") for x in paths):
            out.append(rel)
    if any(re.fullmatch(r"src/[^/]+/__init__\.py", p) for p in paths):
        out.append("src")
    out.append(".")
    valid = []
    for rel in dict.fromkeys(out):
        try:
            valid.append(_WORKTREE_PATH.validate_python(rel))
        except ValidationError:
            continue
    return valid


def _verify_candidates(
    base_paths: list[str],
    touched: set[str],
    oracle: list[str],
    rules: history.TestRules,
    removed: list[str],
) -> list[str]:
    dirs = {str(Path(f).parent) for f in oracle}
    visible = [
        p
        for p in base_paths
        if rules.is_test_module(p)
        and p not in touched
        and not any(p == r or p.startswith(r.rstrip("/") + "/") for r in removed)
    ]
    visible.sort(key=lambda p: (str(Path(p).parent) not in dirs, p))
    return sorted(visible[:MAX_VERIFY_FILES])


def _candidate(
    run: _Run,
    commit: history.Commit,
    parts: history.Split,
    rules: history.TestRules,
    task_id: str,
    subject: str,
) -> tuple[str | None, str, list[str]]:
    """Build and validate one candidate; (reject reason or None, detail, prompt notes)."""
    assert commit.parent is not None
    top, limits = run.top, run.bench.config.limits
    oracle_changes = [c for c in parts.tests if c.status != "D"]
    if len(oracle_changes) > MAX_ORACLE_FILES:
        return "oracle-too-large", f"{len(oracle_changes)} test files changed (max 16)", []
    oracle: dict[str, bytes] = {}
    for c in oracle_changes:
        data = history.blob(top, commit.sha, c.path)
        if data is None:
            return "not-text", f"{c.path} is not a file at {commit.sha[:12]} (a submodule?)", []
        oracle[c.path] = data
    oracle.update(_conftests(top, commit.parent, oracle))
    if len(oracle) > MAX_ORACLE_FILES:
        return "oracle-too-large", f"{len(oracle)} oracle files with their conftests (max 16)", []
    too_big = [n for n, d in oracle.items() if len(d) > limits.oracle_file_bytes]
    if too_big or sum(map(len, oracle.values())) > limits.oracle_total_bytes:
        return "oracle-too-large", f"oracle files over the size caps: {too_big or 'total'}", []
    gold_bytes = history.gold_patch(top, commit, [c.path for c in parts.gold])
    try:
        gold_text = gold_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return "not-text", "the gold patch is not UTF-8 text", []
    removed = list(run.bench.config.sanitize.remove)
    base_blobs = history.tree_blobs(top, commit.parent)
    post = {c.path: c.new_oid for c in [*parts.gold, *oracle_changes] if c.status != "D"}
    leaked = leaks.base_leaks(base_blobs, post, removed)
    if leaked:
        return "leak-in-base", "the base tree holds the fix or the oracle: " + "; ".join(leaked), []
    discovered: list[str] = []
    for name, data in oracle.items():
        if rules.is_test_module(name):
            try:
                discovered += discover_tests(name, data)
            except (SyntaxError, ValueError):
                pass
    message = history.message(top, commit)
    first = leaks.redact_prompt(message, leaks.oracle_names(discovered, oracle), gold_text)
    if not first.text.strip():
        return "prompt-empty", "nothing of the commit message is left after redaction", []
    forbidden = {f"oracle file {n}": d for n, d in oracle.items()}
    for c in parts.gold:
        if c.status != "D" and c.new_oid != history.EMPTY_BLOB:
            data = history.blob(top, commit.sha, c.path)
            if data is not None:
                forbidden[f"fixed file {c.path}"] = data
    try:
        template = build_template(
            top, commit.parent, run.artifacts, remove=removed, forbidden_blobs=forbidden
        )
    except SanitizeError as e:
        return "leak-in-base", str(e), []
    env_spec = _environment(run, commit.parent)
    box = Box(import_paths=tuple(_import_paths(base_blobs, rules)))
    if env_spec is not None:
        from bench_assets.inputs.environments import cell_mounts, ensure_environment

        try:
            env = ensure_environment(
                env_spec,
                task_id=task_id,
                repo=top,
                resolved_sha=commit.parent,
                artifacts=run.artifacts,
            )
        except (EnvironmentBuildError, InputError) as e:
            return "environment-failed", str(e).splitlines()[0][:300], []
        mounts, env_paths = cell_mounts(env.path)
        box = Box(import_paths=box.import_paths, env_mounts=mounts, env_paths=env_paths)
    touched = {c.path for c in [*parts.tests, *parts.gold]}
    verify_files = _verify_candidates(
        sorted(base_blobs.values()), touched, list(oracle), rules, removed
    )
    scratch = run.artifacts.staging("mine")
    try:
        verdict = validate(
            template,
            scratch,
            oracle=oracle,
            gold=gold_bytes,
            verify_candidates=verify_files,
            box=box,
            repeats=run.options.repeats,
        )
    finally:
        remove_tree(scratch)
    if verdict.reason is not None or verdict.validation is None:
        return verdict.reason or "run-incomplete", verdict.detail, []
    v = verdict.validation
    ids = sorted({*discovered, *(t for r in v.gold_runs for t in r)})
    prompt = leaks.redact_prompt(message, leaks.oracle_names(ids, oracle), gold_text)
    if not prompt.text.strip():
        return "prompt-empty", "nothing of the commit message is left after redaction", []
    doc: dict[str, Any] = {
        "id": task_id,
        "class": TASK_CLASS,
        "repo": str(top),
        "ref": commit.parent,
        "prompt": prompt.text,
        "verify": {"pytest": v.verify} if v.verify else ALWAYS_PASSES,
        "oracle": {"files": sorted(oracle), "fail_to_pass": v.fail_to_pass},
    }
    if v.pass_to_pass:
        doc["oracle"]["pass_to_pass"] = v.pass_to_pass
    if list(box.import_paths) != ["."]:
        doc["import_paths"] = list(box.import_paths)
    if env_spec is not None:
        doc["environment"] = env_spec.model_dump(mode="json", exclude_defaults=True) or {}
    try:
        TaskSpec.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return "invalid-task", f"task.yaml would be invalid: {where}: {err['msg']}", []
    mined = MinedTask(
        source=MinedSource(
            repo=str(top),
            commit=commit.sha,
            parent=commit.parent,
            merge=commit.merge,
            subject=subject,
        ),
        validation=v,
        leaks=MinedLeaks(
            prompt_redactions=prompt.notes,
            template_sha=template.info.sanitized_sha,
            template_checks=template.info.checks,
        ),
        gold_file=folders.GOLD_FILE,
        gold_sha256=sha256_bytes(gold_bytes),
    )
    folders.publish_task(run.tasks, task_id, doc, oracle, mined)
    folders.write_gold(run.tasks, {task_id: gold_text})
    return None, verdict.detail, prompt.notes
