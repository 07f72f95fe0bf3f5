"""Git plumbing the harness needs, always through the sandbox gateway with a neutral config.

Every invocation disables hooks and fsmonitor and ignores system/global configuration, so that a
repository's own config cannot run code on the host and results do not depend on the machine.
Commits the harness creates use a fixed identity and date, so the same tree always yields the
same commit SHA on every machine.
"""

import re
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench_assets.kernel.errors import CommandError
from bench_assets.kernel.fsutil import atomic_write_text
from bench_assets.sandbox.process import ExecResult, Isolation, Mount, harness_env, run

FIXED_NAME = "wfbench"
FIXED_EMAIL = "wfbench@wfbench.invalid"
FIXED_DATE = "946684800 +0000"  # 2000-01-01T00:00:00Z
SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")

INLINE_EXCLUDES = (
    "__pycache__/",
    "*.pyc",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".DS_Store",
    ".wfbench-oracle-*",
)
"""Build litter never committed into an inline repository (so a local test run changes no SHA)."""

_SAFE_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.autocrlf=false",
    "core.filemode=true",
    "core.symlinks=true",
    "core.ignorecase=false",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "init.defaultBranch=main",
    "protocol.file.allow=always",
    "safe.directory=*",
)

_FIXED_IDENTITY = {
    "GIT_AUTHOR_NAME": FIXED_NAME,
    "GIT_AUTHOR_EMAIL": FIXED_EMAIL,
    "GIT_AUTHOR_DATE": FIXED_DATE,
    "GIT_COMMITTER_NAME": FIXED_NAME,
    "GIT_COMMITTER_EMAIL": FIXED_EMAIL,
    "GIT_COMMITTER_DATE": FIXED_DATE,
}


def git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    timeout_s: float = 600,
    stdin: bytes | None = None,
) -> ExecResult:
    """Run ``git <args>`` with the neutral configuration; raise CommandError if it fails."""
    argv = ["git"]
    for item in _SAFE_CONFIG:
        argv += ["-c", item]
    argv += list(args)
    res = run(
        argv,
        isolation=Isolation.HARNESS,
        cwd=cwd,
        env=harness_env({**_FIXED_IDENTITY, **(env or {})}),
        timeout_s=timeout_s,
        stdin=stdin,
        max_output=16 * 1024 * 1024,
    )
    if check and not res.ok:
        where = f" in {cwd}" if cwd else ""
        raise CommandError(f"git {' '.join(args)} failed{where}: {res.tail(1500)}")
    return res


def git_out(args: Sequence[str], *, cwd: Path | None = None, **kw: object) -> str:
    """Stripped stdout of a successful git command."""
    return git(args, cwd=cwd, **kw).text().strip()  # type: ignore[arg-type]


def init_bare(git_dir: Path) -> None:
    """Create (idempotently) a bare repository with no template hooks."""
    git(["init", "-q", "--bare", "--template=", str(git_dir)])


def commit_tree_from_dir(src: Path, git_dir: Path, message: str) -> str:
    """Commit the files of ``src`` into ``git_dir`` as one parentless, deterministic commit.

    Build litter (:data:`INLINE_EXCLUDES`) and files ignored by the tree's own ``.gitignore`` are
    left out. The commit is kept reachable under ``refs/wfbench/<sha>`` and ``refs/heads/main``.
    Returns the commit SHA.
    """
    init_bare(git_dir)
    atomic_write_text(git_dir / "info" / "exclude", "\n".join(INLINE_EXCLUDES) + "\n")
    index = git_dir / f"index.{uuid.uuid4().hex}.tmp"
    env = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(src), "GIT_INDEX_FILE": str(index)}
    try:
        git(["add", "-A", "--", "."], cwd=src, env=env)
        tree = git_out(["write-tree"], cwd=src, env=env)
    finally:
        index.unlink(missing_ok=True)
    sha = git_out(["commit-tree", tree, "-m", message], env={"GIT_DIR": str(git_dir)})
    git(["update-ref", f"refs/wfbench/{sha}", sha], env={"GIT_DIR": str(git_dir)})
    git(["update-ref", "refs/heads/main", sha], env={"GIT_DIR": str(git_dir)})
    return sha


def toplevel(repo: Path) -> Path:
    """The real path of a repository's top level (or of a bare repository)."""
    bare = git_out(["rev-parse", "--is-bare-repository"], cwd=repo)
    if bare == "true":
        return Path(git_out(["rev-parse", "--absolute-git-dir"], cwd=repo)).resolve()
    return Path(git_out(["rev-parse", "--show-toplevel"], cwd=repo)).resolve()


def resolve_commit(repo: Path, ref: str) -> str | None:
    """Full SHA of ``ref`` as a commit in ``repo``, or None when it does not name one."""
    res = git(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        cwd=repo,
        check=False,
    )
    sha = res.text().strip()
    return sha if res.ok and SHA_RE.match(sha) else None


def has_object(repo: Path, oid: str) -> bool:
    """Whether ``oid`` can be read from ``repo``."""
    return git(["cat-file", "-e", oid], cwd=repo, check=False).ok


def blob_id(repo: Path, data: bytes) -> str:
    """The git object id ``data`` would have as a blob in ``repo`` (nothing is written)."""
    return git_out(["hash-object", "--no-filters", "--stdin"], cwd=repo, stdin=data)


def _config_env() -> dict[str, str]:
    """The neutral configuration as GIT_CONFIG_* variables (same precedence as ``-c``)."""
    env = {"GIT_CONFIG_COUNT": str(len(_SAFE_CONFIG))}
    for i, item in enumerate(_SAFE_CONFIG):
        key, _, value = item.partition("=")
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def git_script_in_sandbox(
    steps: Sequence[Sequence[str]],
    workdir: Path,
    *,
    writable: bool = True,
    timeout_s: float = 300,
    check: bool = True,
    stdout_file: tuple[int, str] | None = None,
    mounts: tuple[Mount, ...] = (),
    private_index: bool = False,
) -> ExecResult:
    """Run several git commands (``&&``-chained) in ONE sandboxed process on a worktree.

    Starting bubblewrap costs ~20 ms, so the harness batches its git plumbing per cell phase.
    ``stdout_file=(i, path)`` redirects step ``i``'s output to ``path`` inside the sandbox (for a
    patch, which may hold any bytes). The neutral configuration travels as GIT_CONFIG_* variables.
    ``private_index`` runs the steps on a copy of the worktree's index in the sandbox's /tmp, so
    staging for a snapshot or a diff never changes what the agent (or a later step) sees.
    """
    import shlex

    from bench_assets.sandbox.process import SandboxSpec, sandbox_env

    parts = []
    for i, step in enumerate(steps):
        cmd = shlex.join(["git", *step])
        if stdout_file is not None and stdout_file[0] == i:
            cmd += f" > {shlex.quote(stdout_file[1])}"
        parts.append(cmd)
    argv = (
        ["/bin/sh", "-c", " && ".join(parts)]
        if len(parts) > 1 or stdout_file
        else ["git", *steps[0]]
    )
    res = run(
        argv,
        isolation=Isolation.SANDBOX,
        env=sandbox_env({**_FIXED_IDENTITY, **_config_env()}),
        timeout_s=timeout_s,
        max_output=16 * 1024 * 1024,
        sandbox=SandboxSpec(workspace=workdir, workspace_writable=writable, mounts=mounts),
    )
    if check and not res.ok:
        shown = "; ".join(" ".join(s) for s in steps)
        raise CommandError(f"git {shown} failed in worktree {workdir}: {res.tail(800)}")
    return res
