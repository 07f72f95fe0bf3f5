"""Which commits of a repository are candidate tasks, and what each one changed.

The history walked is the **first-parent** line of the tip (``HEAD``, or ``B`` of ``--range
A..B``), oldest first: a non-merge commit is compared with its parent, a merge with its first
parent (the whole merged branch as one change, its prompt the merge message plus the messages of
the commits it brings in). Commits of a merged branch are not visited one by one, so a fix is
never mined twice.

A changed file is a **test** when the repository's pytest configuration says so (``python_files``
and ``testpaths`` from ``pytest.ini``, ``pyproject.toml`` ``[tool.pytest.ini_options]``,
``tox.ini`` ``[pytest]`` or ``setup.cfg`` ``[tool:pytest]``, read at the parent commit as data)
or by convention (a ``tests``/``test``/``testing`` folder, ``conftest.py``); its ``pythonpath``
becomes the task's import paths. A **test module** is
a test file pytest would collect (a ``.py`` file matching ``python_files``, default
``test_*.py *_test.py``). A candidate changes at least one test module and at least one non-test
Python file (the source); ``--paths`` keeps only commits touching a matching path.

Every git call goes through :mod:`bench_assets.sandbox.gitrepo` (neutral configuration, no hooks).
"""

import configparser
import fnmatch
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from bench_assets.kernel.errors import InputError
from bench_assets.sandbox.gitrepo import git

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
TEST_DIRS = frozenset({"tests", "test", "testing"})
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
MAX_MERGED_MESSAGES = 20
"""Messages of a merged branch's commits added to a merge's prompt (the first ones)."""

_DIFF_FLAGS = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
)
"""Explicit diff options, so a repository's own config (noprefix, renames, …) changes nothing."""


@dataclass(frozen=True)
class TestRules:
    """How this repository recognises its tests (see module docstring)."""

    __test__ = False  # not a pytest test class
    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    testpaths: tuple[str, ...] = ()
    source: str = "pytest defaults"
    pythonpath: tuple[str, ...] = ()
    """pytest's ``pythonpath`` option: folders the tests import from (the task's import paths;
    the trusted runner reads no ``pyproject.toml``/``setup.cfg``, so they must be declared)."""

    def is_test_module(self, path: str) -> bool:
        """A file pytest would collect tests from."""
        name = PurePosixPath(path).name
        return (
            path.endswith(".py")
            and name != "conftest.py"
            and any(fnmatch.fnmatchcase(name, g) for g in self.python_files)
        )

    def is_test(self, path: str) -> bool:
        """A test module or a file of the test side (test folders, ``conftest.py``)."""
        parts = PurePosixPath(path).parts
        if self.is_test_module(path) or parts[-1] == "conftest.py":
            return True
        if any(p in TEST_DIRS for p in parts[:-1]):
            return True
        return any(path.startswith(t.rstrip("/") + "/") for t in self.testpaths if t)


def _split(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return tuple(str(value).split())


def read_rules(repo: Path, commit: str) -> TestRules:
    """The pytest configuration at ``commit`` (pytest's own precedence); defaults without one."""
    for name in ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
        data = blob(repo, commit, name)
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        section: dict[str, object] | None = None
        try:
            if name == "pyproject.toml":
                section = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options")
            else:
                parser = configparser.ConfigParser(interpolation=None)
                parser.read_string(text)
                key = "tool:pytest" if name == "setup.cfg" else "pytest"
                section = dict(parser[key]) if parser.has_section(key) else None
        except (tomllib.TOMLDecodeError, configparser.Error, AttributeError):
            section = None
        if section is None and name != "pytest.ini":
            continue
        section = section or {}
        files = _split(section.get("python_files", "")) or DEFAULT_PYTHON_FILES
        paths = _split(section.get("testpaths", ""))
        return TestRules(files, paths, name, _split(section.get("pythonpath", "")))
    return TestRules()


@dataclass(frozen=True)
class Change:
    """One file a commit changed (against its first parent)."""

    status: str
    """``A`` added, ``M`` modified, ``D`` deleted, ``T`` type changed."""
    path: str
    new_oid: str
    """The blob after the commit (zeros when deleted)."""


@dataclass(frozen=True)
class Commit:
    """A first-parent commit of the walked history."""

    sha: str
    parents: tuple[str, ...]

    @property
    def parent(self) -> str | None:
        """The first parent: the task's base (None for a root commit)."""
        return self.parents[0] if self.parents else None

    @property
    def merge(self) -> bool:
        """Whether the commit is a merge (compared with its first parent)."""
        return len(self.parents) > 1


@dataclass
class Split:
    """A commit's changes by side."""

    tests: list[Change] = field(default_factory=list)
    """Test-side files (test modules, conftests, test folders)."""
    sources: list[Change] = field(default_factory=list)
    """Non-test Python files."""
    others: list[Change] = field(default_factory=list)
    """Every other non-test file (docs, data, config): part of the gold patch too."""

    @property
    def gold(self) -> list[Change]:
        """What the gold patch holds: every non-test change."""
        return [*self.sources, *self.others]


def list_commits(repo: Path, *, since: str | None, revrange: str | None) -> list[Commit]:
    """The first-parent commits to examine, oldest first.

    Raises:
        InputError: The range or date does not name any history in ``repo``.
    """
    args = ["rev-list", "--first-parent", "--reverse", "--parents"]
    if since:
        args.append(f"--since={since}")
    tip = revrange or "HEAD"
    if tip.startswith("-"):
        raise InputError(f"--range {tip!r}: not a revision range (A..B)")
    res = git([*args, "--end-of-options", tip], cwd=repo, check=False)
    if not res.ok:
        raise InputError(f"{repo}: --range {tip!r} does not name history here: {res.tail(300)}")
    out = []
    for line in res.text().splitlines():
        shas = line.split()
        if shas:
            out.append(Commit(shas[0], tuple(shas[1:])))
    return out


def changes(repo: Path, commit: Commit) -> list[Change]:
    """Files ``commit`` changed against its first parent (renames as delete + add)."""
    assert commit.parent is not None
    res = git(
        ["diff-tree", "-r", "-z", "--raw", "--full-index", "--no-renames", "--no-commit-id"]
        + ["--no-ext-diff", commit.parent, commit.sha],
        cwd=repo,
    )
    fields = res.stdout.split(b"\0")
    out: list[Change] = []
    i = 0
    while i + 1 < len(fields):
        meta = fields[i].decode("ascii", "replace")
        if not meta.startswith(":"):
            i += 1
            continue
        parts = meta[1:].split()
        path = fields[i + 1].decode("utf-8", "surrogateescape")
        if len(parts) >= 5:
            out.append(Change(parts[4][:1], path, parts[3]))
        i += 2
    return out


def split(changes_: Sequence[Change], rules: TestRules) -> Split:
    """The changes by side (see :class:`Split`)."""
    out = Split()
    for c in changes_:
        if rules.is_test(c.path):
            out.tests.append(c)
        elif c.path.endswith(".py"):
            out.sources.append(c)
        else:
            out.others.append(c)
    return out


def matches_paths(changes_: Sequence[Change], globs: Sequence[str]) -> bool:
    """Whether any changed path matches a ``--paths`` glob (or lies under a named folder)."""
    if not globs:
        return True
    for c in changes_:
        for g in globs:
            if fnmatch.fnmatchcase(c.path, g) or c.path.startswith(g.rstrip("/") + "/"):
                return True
    return False


def skip_reason(commit: Commit, parts: Split, rules: TestRules) -> str | None:
    """Why a commit is not a candidate (None when it is one)."""
    if not any(rules.is_test_module(c.path) and c.status != "D" for c in parts.tests):
        return "no-test-change"
    if not parts.sources:
        return "no-source-change"
    return None


def message(repo: Path, commit: Commit) -> str:
    """The commit message; for a merge, followed by the messages of the commits it brings in."""
    text = git(["log", "-1", "--format=%B", commit.sha], cwd=repo).stdout
    out = text.decode("utf-8", "replace").strip()
    if commit.merge and commit.parent is not None:
        res = git(
            [
                "log",
                "--no-merges",
                "--reverse",
                "--format=%B%x00",
                f"{commit.parent}..{commit.sha}",
            ],
            cwd=repo,
        )
        merged = [m.strip() for m in res.stdout.decode("utf-8", "replace").split("\0")]
        merged = [m for m in merged if m][:MAX_MERGED_MESSAGES]
        if merged:
            out = "\n\n".join([out, *merged])
    return out


def subject(repo: Path, sha: str) -> str:
    """The first line of a commit's message."""
    return git(["log", "-1", "--format=%s", sha], cwd=repo).text().strip()


def blob(repo: Path, commit: str, path: str) -> bytes | None:
    """A file's bytes at ``commit`` (None when absent)."""
    res = git(["cat-file", "blob", f"{commit}:{path}"], cwd=repo, check=False)
    return res.stdout if res.ok else None


def tree_blobs(repo: Path, commit: str) -> dict[str, str]:
    """Every blob of ``commit``'s tree: object id -> the first path holding it."""
    res = git(["ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo)
    out: dict[str, str] = {}
    for entry in res.stdout.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        parts = meta.decode("ascii", "replace").split()
        if len(parts) == 3 and parts[1] == "blob":
            out.setdefault(parts[2], path.decode("utf-8", "surrogateescape"))
    return out


def gold_patch(repo: Path, commit: Commit, paths: Sequence[str]) -> bytes:
    """The diff of ``paths`` from the first parent to ``commit`` (binary-safe, full index)."""
    assert commit.parent is not None
    spec = [f":(literal){p}" for p in paths]
    res = git(
        ["diff", *_DIFF_FLAGS, "--binary", "--full-index", commit.parent, commit.sha, "--", *spec],
        cwd=repo,
    )
    return res.stdout
