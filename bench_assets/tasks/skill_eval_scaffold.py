"""A ``claude plugin eval`` case's ``context.scaffold_script``, run once at import in the sandbox.

The first-party tool runs the script in each run's empty workspace before Claude starts; wfbench
runs it once, at import, inside the sandbox (no network, the script alone mounted, the empty
workspace as cwd), and its result becomes the task's inline repository, pinned by the task
binding like any other. A scaffold that leaves a git repository is accepted only when one base
commit of its files reproduces it (exactly one commit, nothing uncommitted): an uncommitted edit
or a history is part of such a case (``git reset --hard`` cases, "name the commit" cases), and
importing it as one commit would be a different case. Used by
:mod:`bench_assets.tasks.skill_eval_import`.
"""

import tempfile
from pathlib import Path

from bench_assets.kernel.errors import InputError

SCAFFOLD_TIMEOUT_S = 300


def run_scaffold(script: Path, where: str) -> dict[str, bytes]:
    """Run a scaffold script in the sandbox in an empty workspace; the files it left."""
    from bench_assets.sandbox.process import Isolation, Mount, SandboxSpec, run, sandbox_env

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
        if (ws / ".git").exists():
            problem = _scaffold_git_problem(ws)
            if problem is not None:
                raise InputError(
                    f"{where}: field 'context.scaffold_script': the scaffold left a git "
                    f"repository with {problem}; the agent's starting tree is one base commit "
                    "of the files, so that history or uncommitted state would not reach it "
                    "(refused rather than imported as a different case)"
                )
        out: dict[str, bytes] = {}
        for p in sorted(ws.rglob("*")):
            rel = p.relative_to(ws)
            if rel.parts[0] == ".git" or p.is_dir():
                continue
            if p.is_symlink() or not p.is_file():
                raise InputError(
                    f"{where}: field 'context.scaffold_script': the scaffold left {rel}, "
                    "which is not a regular file"
                )
            out[rel.as_posix()] = p.read_bytes()
        return out


def _scaffold_git_problem(ws: Path) -> str | None:
    """What of a scaffold's git repository one base commit of its files cannot reproduce: more
    or fewer than one commit, or anything uncommitted (``None``: one clean commit). Read by git
    inside the sandbox: the repository was written by the untrusted script."""
    from bench_assets.sandbox.process import Isolation, SandboxSpec, run, sandbox_env

    probe = (
        "git rev-list --all --count 2>/dev/null || echo 0; echo '--'; "
        "git status --porcelain --untracked-files=all 2>&1 | head -5"
    )
    res = run(
        ["bash", "-c", probe],
        isolation=Isolation.SANDBOX,
        env=sandbox_env({}),
        timeout_s=60,
        sandbox=SandboxSpec(workspace=ws, network=False),
    )
    head, _, status = res.text().partition("--")
    try:
        commits = int(head.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"a state git could not read ({res.tail(200)})"
    dirty = [line.strip() for line in status.splitlines() if line.strip()]
    if commits == 1 and not dirty:
        return None
    parts = [f"{commits} commit(s)"]
    if dirty:
        parts.append(f"uncommitted changes ({'; '.join(dirty)})")
    return " and ".join(parts)
