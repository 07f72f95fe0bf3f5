"""Cell worktrees: a private copy of the sanitized template prepared for one arm.

Preparation copies the template (copy-on-write where the filesystem allows), installs the arm's
skill tree (none / incumbent / incumbent + candidate overlay) at the configured path and places the
code graph, both listed in ``.git/info/exclude`` so the agent's ``git status`` starts clean and
skill files never count as its work, and no commit is added: the history the agent sees is the
sanitized commit alone. Then the task's ``setup`` runs in the sandbox (with the task environment, if
the task has one, mounted read-only and on ``PYTHONPATH``; :mod:`bench_assets.inputs.environments`).
The *base* every patch and churn figure is measured against is a tree object of that state, written
through a private index (the agent's own index is untouched); the protected files' contents and the
runner files (:mod:`bench_assets.runner.hygiene`) at the base are kept so grading can restore them.
With ``keep_base`` an untouched copy of that state is kept beside the worktree, out of the agent's
reach: grading rebuilds the graded tree from it and the recorded patch.
"""

import fnmatch
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bench_assets.inputs.environments import cell_mounts, env_pythonpath
from bench_assets.inputs.sanitize import Template, copy_worktree
from bench_assets.kernel.errors import CommandError
from bench_assets.kernel.fsutil import atomic_write_bytes, atomic_write_text, ensure_real_parents
from bench_assets.runner import hygiene
from bench_assets.sandbox.gitrepo import git_script_in_sandbox
from bench_assets.sandbox.process import ExecResult, Isolation, Mount, SandboxSpec, run, sandbox_env


@dataclass
class CellWorktree:
    """A prepared worktree."""

    path: Path
    base_sha: str
    """The base tree id (a tree object, not a commit)."""
    excluded_paths: list[str]
    """Worktree paths that are not the agent's work (skills, graph): out of patch and churn."""
    readonly_paths: list[str]
    protected_globs: list[str]
    protected_state: dict[str, bytes] = field(default_factory=dict)
    setup_result: ExecResult | None = None
    import_paths: list[str] = field(default_factory=lambda: ["."])
    """Worktree folders the trusted runner puts on the import path (import roots)."""
    runner_state: dict[str, hygiene.Entry] = field(default_factory=dict)
    """Runner files (conftest.py, runner modules, start-up hooks, …) before the agent ran."""
    env_mounts: tuple[Mount, ...] = ()
    """The task environment, mounted read-only in every sandbox of the cell (none by default)."""
    env_paths: tuple[str, ...] = ()
    """In-sandbox import paths of the task environment, after the task's own import paths."""
    base_path: Path | None = None
    """An untouched copy of the worktree at its base (template, skills, graph, ``setup``),
    which the agent never sees: grading applies the recorded patch to it and runs the tests
    there (:func:`bench_assets.cells.grading.grade_cell`). None when the cell runs no tests."""


CACHE_DIRS = ("__pycache__", ".pytest_cache")
"""Interpreter and runner caches: never part of a base or a patch. Nothing reads them at grading
(bytecode caches are off in the trusted runner), and leaving them out keeps the agent's own test
runs from filling its patch with binary noise."""


def capture_pathspec(excluded: list[str]) -> list[str]:
    """The pathspec of everything that is the cell's content: the whole tree, ignored files
    included, less harness-placed paths and caches (same for the base and the patch)."""
    caches = [f":(exclude,glob)**/{d}/**" for d in CACHE_DIRS]
    return ["--", ".", *[f":(exclude){p}" for p in excluded], *caches]


def _install_tree(src: Path, dest: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(src):
        for name in filenames:
            s = Path(dirpath) / name
            rel = s.relative_to(src)
            mode = 0o755 if os.access(s, os.X_OK) else 0o644
            atomic_write_bytes(dest / rel, s.read_bytes(), mode=mode)


def protected_files(root: Path, globs: list[str]) -> list[str]:
    """Worktree-relative files matching any protected glob (never inside ``.git``)."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if any(fnmatch.fnmatch(rel, g) for g in globs):
                out.append(rel)
    return sorted(out)


def prepare(
    template: Template,
    dest: Path,
    *,
    skill_layers: list[Path],
    install_path: str,
    graph_file: Path | None,
    graph_path: str,
    setup: str | None,
    setup_timeout_s: float,
    protected: list[str],
    memory_mb: int | None = None,
    import_paths: list[str] | None = None,
    environment: Path | None = None,
    keep_base: bool = False,
) -> CellWorktree:
    """Copy the template to ``dest`` and prepare it for one cell (see module docstring)."""
    copy_worktree(template, dest)
    excluded: list[str] = []
    readonly: list[str] = []
    if skill_layers:
        target = dest / install_path
        for layer in skill_layers:
            _install_tree(layer, target)
        excluded.append(install_path)
        readonly.append(install_path)
    if graph_file is not None:
        atomic_write_bytes(dest / graph_path, graph_file.read_bytes(), mode=0o444)
        excluded.append(graph_path)
        readonly.append(graph_path)
    if excluded:
        # Harness-placed files stay out of `git status` and of every diff without a commit, so
        # the history the agent sees is the sanitized commit alone.
        exclude_file = dest / ".git" / "info" / "exclude"
        previous = exclude_file.read_text() if exclude_file.is_file() else ""
        lines = "".join(f"/{p}\n" for p in excluded)
        atomic_write_text(exclude_file, previous + "# wfbench: harness-placed files\n" + lines)
    setup_result = None
    env_mounts, env_paths = cell_mounts(environment)
    if setup:
        setup_result = run(
            ["/bin/sh", "-c", setup],
            isolation=Isolation.SANDBOX,
            env=sandbox_env(env_pythonpath(env_paths)),
            timeout_s=setup_timeout_s,
            sandbox=SandboxSpec(
                workspace=dest, network=False, memory_mb=memory_mb, mounts=env_mounts
            ),
        )
        if not setup_result.ok:
            why = "timed out" if setup_result.timed_out else f"exited {setup_result.returncode}"
            raise CommandError(f"task setup {why}: {setup_result.tail(600)}")
    # The base is a tree object (no commit): the template plus whatever setup changed, files the
    # tree's ignore rules hide included (a patch is captured the same way, so an ignored file the
    # agent adds or changes is recorded, and graded only because it is recorded).
    snapshot = git_script_in_sandbox(
        [["add", "-A", "-f", *capture_pathspec(excluded)], ["write-tree"]],
        dest,
        private_index=True,
    )
    base = snapshot.text().strip().splitlines()[-1]
    base_path = None
    if keep_base:
        base_path = dest.with_name(dest.name + "-base")
        copy = run(
            ["cp", "-a", "--reflink=auto", str(dest), str(base_path)],
            isolation=Isolation.HARNESS,
            timeout_s=600,
        )
        if not copy.ok:
            raise CommandError(f"copying the base worktree {dest} failed: {copy.tail(600)}")
    wt = CellWorktree(
        dest,
        base,
        excluded,
        readonly,
        list(protected),
        setup_result=setup_result,
        env_mounts=env_mounts,
        env_paths=env_paths,
        base_path=base_path,
    )
    wt.protected_state = {p: (dest / p).read_bytes() for p in protected_files(dest, protected)}
    wt.import_paths = list(import_paths or ["."])
    wt.runner_state = hygiene.snapshot(dest, wt.import_paths)
    return wt


def restore_protected(wt: CellWorktree) -> list[str]:
    """Put protected files back to their base state; return those the agent changed."""
    changed: list[str] = []
    now = set(protected_files(wt.path, wt.protected_globs))
    for rel in sorted(now | set(wt.protected_state)):
        # A parent the agent replaced by a symlink must not carry the write outside the worktree.
        p = ensure_real_parents(wt.path, rel)
        want = wt.protected_state.get(rel)
        have = p.read_bytes() if p.is_file() and not p.is_symlink() else None
        if have == want and not p.is_symlink():
            continue
        changed.append(rel)
        if p.is_symlink() or p.exists():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        if want is not None:
            atomic_write_bytes(p, want)
    return changed
