"""Find, parse and validate the benchmark directory (``tasks/``), reporting every problem at once.

Validation is all-or-nothing: :func:`load_benchmark` either returns a fully valid
:class:`Benchmark` or raises :class:`~bench_assets.kernel.errors.ValidationFailed` carrying every
:class:`Issue` found (``file: field.path: what is wrong``). Nothing downstream ever sees an invalid
file, so nothing is materialized from one.

Validation is linear in the number of tasks: YAML is parsed by libyaml when PyYAML has it (the
pure-Python parser only re-reads a file that fails, so error messages stay the same), and a
caller that needs one task (a cell or input run) loads ``bench.yaml``, the candidates and that
task only (``load_benchmark(root, tasks=[id])``), never all N.
"""

import os
import re
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from bench_assets.config.models import (
    RESERVED_DIRS,
    BenchConfig,
    CandidateSpec,
    ReplayAgent,
    TaskSpec,
)
from bench_assets.kernel.errors import Issue, UnknownTaskError, ValidationFailed
from bench_assets.tasks import suite_cache
from bench_assets.tasks.discovery import discover_tests

BENCH_FILE = "bench.yaml"
TASK_FILE = "task.yaml"
CANDIDATE_FILE = "candidate.yaml"
_PREFIXED_MSG = re.compile(r"^([A-Za-z0-9_.-]+): (.*)$", re.S)
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", None)


def _load_yaml(text: str) -> Any:
    """``yaml.safe_load`` through libyaml when available (about 10x faster).

    A document libyaml rejects is parsed again by the pure-Python loader, so syntax errors carry
    the same messages and positions whichever parser is installed.
    """
    if _FAST_LOADER is not None:
        try:
            return yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 - a safe loader
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


@dataclass(frozen=True)
class Task:
    """A validated task and where it lives."""

    spec: TaskSpec
    dir: Path

    @property
    def id(self) -> str:
        """The task id (equal to the folder name)."""
        return self.spec.id

    @property
    def file(self) -> Path:
        """Path of ``task.yaml``."""
        return self.dir / TASK_FILE

    @property
    def oracle_dir(self) -> Path:
        """Folder holding the hidden oracle files."""
        return self.dir / "oracle"

    @property
    def repo_dir(self) -> Path:
        """The repository: the inline ``repo/`` folder or the configured path."""
        if self.spec.is_inline:
            return self.dir / "repo"
        return (self.dir / os.path.expanduser(self.spec.repo)).resolve()


@dataclass(frozen=True)
class Candidate:
    """A queued candidate overlay."""

    spec: CandidateSpec
    dir: Path

    @property
    def files_dir(self) -> Path:
        """Overlay files, laid out like the skill tree."""
        return self.dir / "files"


@dataclass(frozen=True)
class Benchmark:
    """The validated benchmark directory (or, when ``partial``, bench.yaml and some tasks)."""

    root: Path
    config: BenchConfig
    tasks: dict[str, Task] = field(default_factory=dict)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    partial: bool = False
    """Only the tasks asked for were read (``load_benchmark(root, tasks=...)``); the others
    were neither read nor validated, so :meth:`task_ids` lists the loaded ones only."""

    @property
    def skills_dir(self) -> Path:
        """The incumbent skill tree."""
        return self.root / self.config.skills.source

    def task(self, task_id: str) -> Task:
        """The task with ``task_id``, or :class:`UnknownTaskError` listing the known ids."""
        try:
            return self.tasks[task_id]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTaskError(
                f"unknown task {task_id!r} in {self.root} (known: {known})"
            ) from None

    def arms_for(self, task_id: str) -> list[str]:
        """The arms that run on a task, sorted: review arms on review tasks, the others on the
        rest. The planner and the generation's progress total both count cells with this."""
        spec = self.task(task_id).spec
        return sorted(n for n, arm in self.config.arms.items() if arm.applies_to(spec))

    def task_ids(self, *, include_expensive: bool = True) -> list[str]:
        """Sorted task ids."""
        return sorted(t for t, v in self.tasks.items() if include_expensive or not v.spec.expensive)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root.parent).as_posix()
    except ValueError:
        return path.as_posix()


class _Collector:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.issues: list[Issue] = []

    def add(self, path: Path, fieldpath: str, message: str) -> None:
        self.issues.append(Issue(_rel(path, self.root), fieldpath, message))

    def parse(self, path: Path, model: type[BaseModel]) -> Any:
        """Read YAML at ``path`` and validate it; record issues and return None on failure."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.add(path, "", "file is missing")
            return None
        except (OSError, UnicodeDecodeError) as e:
            self.add(path, "", f"cannot be read: {e}")
            return None
        try:
            data = _load_yaml(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            self.add(path, "", f"YAML syntax error{where}: {problem}")
            return None
        if not isinstance(data, dict):
            self.add(path, "", f"must be a mapping, not {type(data).__name__}")
            return None
        try:
            return model.model_validate(data)
        except ValidationError as e:
            for err in e.errors():
                loc = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                m = _PREFIXED_MSG.match(msg)
                if not loc and m:
                    loc, msg = m.group(1), m.group(2)
                if err["type"] == "extra_forbidden":
                    msg = "unknown key"
                elif err["type"] == "missing":
                    msg = "required field is missing"
                self.add(path, loc, msg)
            return None


def _oracle_file_problem(oracle_dir: Path, name: str) -> tuple[str | None, int]:
    """Why ``oracle_dir/name`` cannot be captured (None if it can), and its size."""
    current = oracle_dir
    for part in [""] + name.split("/")[:-1]:
        current = current / part if part else current
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return f"oracle folder {current.name!r} does not exist", 0
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            return f"{current.name!r} on the way to oracle file {name!r} is not a real folder", 0
    try:
        st = os.lstat(oracle_dir / name)
    except FileNotFoundError:
        return f"oracle file {name!r} does not exist in oracle/", 0
    if stat.S_ISLNK(st.st_mode):
        return f"oracle file {name!r} is a symlink; only regular files are captured", 0
    if not stat.S_ISREG(st.st_mode):
        return f"oracle file {name!r} is not a regular file", 0
    return None, st.st_size


def _check_task(c: _Collector, task: Task, config: BenchConfig | None) -> None:
    spec = task.spec
    if spec.id != task.dir.name:
        c.add(task.file, "id", f"id {spec.id!r} must equal the folder name {task.dir.name!r}")
    limits = config.limits if config else None
    total = 0
    for i, name in enumerate(spec.oracle.files):
        problem, size = _oracle_file_problem(task.oracle_dir, name)
        if problem is not None:
            c.add(task.file, f"oracle.files.{i}", problem)
            continue
        total += size
        if limits and size > limits.oracle_file_bytes:
            c.add(
                task.file,
                f"oracle.files.{i}",
                f"oracle file {name!r} is {size} bytes; the limit is "
                f"{limits.oracle_file_bytes} (limits.oracle_file_bytes)",
            )
    if limits and total > limits.oracle_total_bytes:
        c.add(
            task.file,
            "oracle.files",
            f"oracle files total {total} bytes; the limit is {limits.oracle_total_bytes} "
            "(limits.oracle_total_bytes)",
        )
    if spec.review is not None:
        _check_review_labels(c, task)
    elif spec.skill_eval is not None:
        _check_skill_eval(c, task, config)
    else:
        _check_expected_tests(c, task)
    repo = task.repo_dir
    if spec.is_inline:
        if not repo.is_dir() or repo.is_symlink():
            c.add(task.file, "repo", "repo: inline needs a real folder repo/ beside task.yaml")
        else:
            _check_worktree_paths(c, task)
            for problem in inline_repo_problems(repo, task.dir):
                c.add(task.file, "repo", problem)
    elif (problem := external_repo_problem(task)) is not None:
        c.add(task.file, "repo", problem)


def inline_repo_problems(repo: Path, task_dir: Path) -> list[str]:
    """Symlinks and ``.git`` folders in an inline repository, in ``os.walk``'s order (top-down,
    subfolders then files, never into a symlinked folder), one ``scandir`` per folder: os.walk
    and a ``Path.is_symlink`` per entry were a quarter of a 1,000-task suite's validation."""
    out: list[str] = []

    def walk(top: str) -> None:
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            return  # as os.walk: an unreadable folder is skipped
        dirs: list[os.DirEntry[str]] = []
        files: list[os.DirEntry[str]] = []
        for entry in entries:
            try:
                (dirs if entry.is_dir() else files).append(entry)
            except OSError:
                files.append(entry)
        for entry in dirs + files:
            if entry.is_symlink():
                rel = Path(entry.path).relative_to(task_dir)
                out.append(f"inline repo contains a symlink: {rel}")
        out.extend("inline repo must not contain a .git folder" for d in dirs if d.name == ".git")
        for entry in (d for d in dirs if d.name != ".git" and not d.is_symlink()):
            walk(entry.path)

    walk(str(repo))
    return out


def external_repo_problem(task: Task) -> str | None:
    """Why a task's repository outside the suite (``repo:`` a path) is unusable, or None."""
    repo = task.repo_dir
    if not repo.is_dir():
        return f"repository path {task.spec.repo!r} does not exist ({repo})"
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        return f"repository path {task.spec.repo!r} is not a git repository"
    return None


def _check_worktree_paths(c: _Collector, task: Task) -> None:
    """Inline repos: the trusted runner's test paths and import paths must exist."""
    spec = task.spec
    verify = spec.verify
    if not isinstance(verify, str):
        for i, rel in enumerate(verify.pytest):
            if not (task.repo_dir / rel).exists():
                c.add(task.file, f"verify.pytest.{i}", f"{rel!r} does not exist in repo/")
    for i, rel in enumerate(spec.import_paths):
        if not (task.repo_dir / rel).is_dir():
            c.add(task.file, f"import_paths.{i}", f"{rel!r} is not a folder of repo/")


def _check_review_labels(c: _Collector, task: Task) -> None:
    """Review tasks are graded by their labels file: it must parse before any cell is paid."""
    from bench_assets.scorers.review_scoring import ReviewArtifactInvalid, parse_labels

    assert task.spec.review is not None
    name = task.spec.review.labels
    if _oracle_file_problem(task.oracle_dir, name)[0] is not None:
        return  # already reported
    try:
        parse_labels((task.oracle_dir / name).read_bytes())
    except ReviewArtifactInvalid as e:
        c.add(task.file, "review.labels", f"labels file {name!r}: {e}")


def _check_skill_eval(c: _Collector, task: Task, config: BenchConfig | None) -> None:
    """Skill-eval cases are graded by their hidden graders file: it must parse before any cell,
    and a judge grader needs the judge pinned in bench.yaml (fail closed before paid work)."""
    from bench_assets.kernel.errors import InputError
    from bench_assets.scorers.skill_eval import parse_grading
    from bench_assets.tasks.skill_eval_tasks import case_session_problems

    assert task.spec.skill_eval is not None
    for fld, msg in case_session_problems(task.spec, config.model if config else None):
        c.add(task.file, fld, msg)
    name = task.spec.skill_eval.grading
    if _oracle_file_problem(task.oracle_dir, name)[0] is not None:
        return  # already reported
    try:
        grading = parse_grading((task.oracle_dir / name).read_bytes(), f"oracle/{name}")
    except InputError as e:
        c.add(task.file, "skill_eval.grading", str(e))
        return
    if grading.needs_judge and config is not None and config.judge is None:
        c.add(
            task.file,
            "skill_eval.grading",
            "the case has llm/baseline graders: pin their judge in bench.yaml "
            "(judge: {model: <dated id>, input_usd_per_mtok: ..., output_usd_per_mtok: ...})",
        )


def _check_expected_tests(c: _Collector, task: Task) -> None:
    """Trusted oracle without declared tests: the oracle files must parse and define a test."""
    oracle = task.spec.oracle
    if not oracle.trusted or oracle.fail_to_pass or oracle.pass_to_pass:
        return
    found = 0
    for i, name in enumerate(oracle.files):
        path = task.oracle_dir / name
        if _oracle_file_problem(task.oracle_dir, name)[0] is not None:
            return  # already reported
        try:
            found += len(discover_tests(name, path.read_bytes()))
        except SyntaxError as e:
            c.add(task.file, f"oracle.files.{i}", f"oracle file {name!r} does not parse: {e}")
            return
    if not found:
        c.add(
            task.file,
            "oracle",
            "no test found in the oracle files (pytest naming: test_*.py files, test* functions, "
            "Test* classes); declare oracle.fail_to_pass / pass_to_pass",
        )


def discover_task_dirs(root: Path) -> list[Path]:
    """Folders of ``root`` that are (or should be) tasks: all but reserved and hidden ones."""
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and p.name not in RESERVED_DIRS and not p.name.startswith((".", "_"))
    )


def collect_issues(
    root: Path, tasks: Collection[str] | None = None
) -> tuple[list[Issue], Benchmark | None]:
    """Validate everything under ``root``; return every issue and, when clean, the benchmark.

    With ``tasks``, only bench.yaml, the candidates and those task folders are read (a missing
    folder is an issue); the result is a ``partial`` benchmark.
    """
    root = Path(root).resolve()
    c = _Collector(root)
    if not root.is_dir():
        c.add(
            root,
            "",
            f"benchmark directory {root} does not exist (relative --tasks paths are read from "
            f"{Path.cwd()}); run from the repository root or pass --tasks /path/to/tasks",
        )
        return c.issues, None
    bench_path = root / BENCH_FILE
    config: BenchConfig | None = c.parse(bench_path, BenchConfig)
    if config is not None:
        skills = root / config.skills.source
        if not skills.is_dir():
            c.add(bench_path, "skills.source", f"skill tree {config.skills.source!r} is missing")
        for name, arm in config.arms.items():
            if isinstance(arm.agent, ReplayAgent) and not (root / arm.agent.predictions).is_file():
                c.add(
                    bench_path,
                    f"arms.{name}.agent.predictions",
                    f"predictions file {arm.agent.predictions!r} does not exist",
                )

    found: dict[str, Task] = {}
    seen_lower: dict[str, Path] = {}
    if tasks is None:
        task_dirs = discover_task_dirs(root)
    else:
        task_dirs = []
        for t in sorted(set(tasks)):
            d = root / t
            if not t or Path(t).name != t or t in RESERVED_DIRS or t.startswith((".", "_")):
                c.add(d, "", f"{t!r} is not a task folder name")
            elif not d.is_dir():
                c.add(d, "", "task folder does not exist")
            else:
                task_dirs.append(d)
    for d in task_dirs:
        path = d / TASK_FILE
        if not path.exists() and (d / "task.yml").exists():
            c.add(d / "task.yml", "", "task files are named task.yaml, not task.yml")
            continue
        spec: TaskSpec | None = c.parse(path, TaskSpec)
        if spec is None:
            continue
        task = Task(spec=spec, dir=d)
        _check_task(c, task, config)
        other = seen_lower.get(spec.id.lower())
        if other is not None:
            c.add(path, "id", f"duplicate task id {spec.id!r} (also in {_rel(other, root)})")
            continue
        seen_lower[spec.id.lower()] = path
        found[spec.id] = task

    candidates: dict[str, Candidate] = {}
    if config is not None:
        queue = root / config.proposer.queue
        # Hidden folders are the harness's own (a proposal being staged, a removal a crash
        # interrupted), never candidates: like hidden task folders, they are skipped.
        listed = sorted(queue.iterdir()) if queue.is_dir() else []
        for d in (p for p in listed if p.is_dir() and not p.name.startswith(".")):
            cspec: CandidateSpec | None = c.parse(d / CANDIDATE_FILE, CandidateSpec)
            if cspec is None:
                continue
            if cspec.id != d.name:
                c.add(d / CANDIDATE_FILE, "id", f"id {cspec.id!r} must equal the folder name")
                continue
            if not (d / "files").is_dir():
                c.add(d / CANDIDATE_FILE, "", "candidate overlay needs a files/ folder")
                continue
            candidates[cspec.id] = Candidate(spec=cspec, dir=d)

    if c.issues or config is None:
        return c.issues, None
    return [], Benchmark(
        root=root,
        config=config,
        tasks=found,
        candidates=candidates,
        partial=tasks is not None,
    )


def load_benchmark(root: Path, tasks: Collection[str] | None = None) -> Benchmark:
    """The validated benchmark at ``root``, or :class:`ValidationFailed` with every issue.

    ``tasks`` limits reading and validation to bench.yaml, the candidates and those tasks (see
    :func:`collect_issues`): what a run of one task's assets needs, in time independent of N.
    A suite validated already is served again while what it read is unchanged (read-only:
    :mod:`bench_assets.tasks.suite_cache`)."""
    resolved = Path(root).resolve()
    before = suite_cache.suite_fingerprint(resolved, tasks)
    hit: Benchmark | None = suite_cache.cached(resolved, tasks, before)
    if hit is not None and all(
        external_repo_problem(t) is None for t in hit.tasks.values() if not t.spec.is_inline
    ):
        return hit
    issues, bench = collect_issues(root, tasks)
    if bench is None:
        raise ValidationFailed(issues)
    if before is not None and suite_cache.suite_fingerprint(resolved, tasks) == before:
        suite_cache.store(resolved, tasks, before, bench)
    return bench
