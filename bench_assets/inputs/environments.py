"""Task environments: a task's third-party packages, built once, mounted read-only into its cells.

A task whose code needs packages from an index declares them in ``task.yaml``
(:class:`~bench_assets.config.models.EnvironmentSpec`: explicit ``requirements`` and/or the
``[project] dependencies`` of the repository's ``pyproject.toml`` at the pinned commit, read as
data). :func:`ensure_environment` then

1. computes the environment's **key**: the digest of the resolved requirement list, the index,
   the base commit, the interpreter (implementation, version, machine) and the builder version —
   nothing else, so an unchanged task in a later generation finds the same key;
2. **reuses** ``environments/<key>/`` when it is already stored and its content still matches
   its record (no network, no pip);
3. otherwise **builds** it: ``pip install --target`` run by the harness interpreter inside the
   sandbox, whose only way out is the package-index proxy (:mod:`bench_assets.sandbox.index_egress`:
   CONNECT to the index's hosts on 443, nothing else), into a staging folder that is then
   published atomically and made read-only, with the build log beside it.

A build that fails raises :class:`~bench_assets.kernel.errors.EnvironmentBuildError` with the tail
of the build log, so the task's inputs fail before any paid cell. Cells mount the stored
``site-packages`` read-only at :data:`ENV_DEST` and put it on the import path after the task's own
code (:func:`cell_mounts`); cells never get the index network.
"""

import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.config.models import EnvironmentSpec
from bench_assets.kernel.errors import EnvironmentBuildError, InputError
from bench_assets.kernel.fsutil import (
    atomic_write_json,
    atomic_write_text,
    make_tree_readonly,
    publish_dir,
    read_model,
    remove_tree,
)
from bench_assets.kernel.hashing import sha256_json, tree_digest
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox import gitrepo
from bench_assets.sandbox.index_egress import IndexProxy, allowed_hosts
from bench_assets.sandbox.process import Isolation, Mount, SandboxSpec, run, sandbox_env

ENV_DEST = "/wfbench-env"
"""Where a task environment's ``site-packages`` is mounted (read-only) in every cell sandbox."""
BUILD_DEST = "/wfbench-env-build"
BUILDER = "pip-target-1"
"""How environments are built; part of the key, so a new builder never reuses an old build."""
RECORD = "env.json"
LOG = "build.log"
LOG_TAIL = 3000
DEFAULT_BUILD_TIMEOUT_S = 900.0


class EnvironmentRecord(BaseModel):
    """``env.json``: what an environment holds and how it was built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_schema: Literal[1] = 1
    key: str
    requirements: list[str]
    index_url: str
    resolved_sha: str
    python: str
    builder: str
    content_digest: str
    """Tree digest of ``site-packages``: checked again whenever the environment is reused."""
    installed: list[str]
    """``name-version`` of every installed distribution."""
    build_s: float
    built_at: str
    built_for: str
    """The task whose inputs first built it (another task with the same key reuses it)."""

    @property
    def digest(self) -> str:
        """The environment's data version: its key and its content."""
        return sha256_json({"key": self.key, "content": self.content_digest})


@dataclass(frozen=True)
class EnvironmentResult:
    """The environment a task's cells use, and whether this call built or reused it."""

    record: EnvironmentRecord
    path: Path
    reused: bool
    seconds: float


def python_tag() -> str:
    """The interpreter an environment is built for (and must be used with)."""
    v = sys.version_info
    return f"{sys.implementation.name}-{v.major}.{v.minor}-{platform.machine()}"


def _check_requirement(value: str, where: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    if value.startswith("-"):
        raise InputError(f"{where}: {value!r} is a pip option, not a requirement")
    try:
        req = Requirement(value)
    except InvalidRequirement as e:
        raise InputError(f"{where}: {value!r} is not a valid requirement: {e}") from None
    if req.url:
        raise InputError(f"{where}: {value!r} names a URL; only the package index is reachable")
    return value


def pyproject_dependencies(repo: Path, commit: str, task_id: str) -> list[str]:
    """``[project] dependencies`` of ``pyproject.toml`` at ``commit`` (parsed, never executed)."""
    import tomllib

    res = gitrepo.git(["cat-file", "blob", f"{commit}:pyproject.toml"], cwd=repo, check=False)
    where = f"task {task_id}: pyproject.toml at {commit[:12]}"
    if not res.ok:
        raise InputError(f"{where}: not found (environment.pyproject is true)")
    try:
        doc = tomllib.loads(res.stdout.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{where}: not valid TOML: {e}") from None
    deps = doc.get("project", {}).get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise InputError(f"{where}: field 'project.dependencies' must be a list of strings")
    return [_check_requirement(d, f"{where}: project.dependencies") for d in deps]


def requirements_for(spec: EnvironmentSpec, task_id: str, repo: Path, commit: str) -> list[str]:
    """The full requirement list of a task environment, sorted and de-duplicated."""
    reqs = [
        _check_requirement(r, f"task {task_id}: environment.requirements")
        for r in spec.requirements
    ]
    if spec.pyproject:
        reqs += pyproject_dependencies(repo, commit, task_id)
    return sorted(set(reqs))


def environment_key(requirements: list[str], index_url: str, resolved_sha: str) -> str:
    """The key of an environment (see module docstring)."""
    return sha256_json(
        {
            "requirements": requirements,
            "index_url": index_url,
            "resolved_sha": resolved_sha,
            "python": python_tag(),
            "builder": BUILDER,
        }
    )


def load_environment(path: Path) -> EnvironmentRecord:
    """Read a stored ``env.json``; errors name the file."""
    return read_model(
        path / RECORD,
        EnvironmentRecord,
        what="task environment record",
        error=InputError,
        hint="re-materialize task_environments",
    )


def _stored(path: Path, key: str) -> EnvironmentRecord | None:
    """The stored environment at ``path`` if it is complete and unchanged, else None."""
    if not (path / RECORD).is_file():
        return None
    try:
        rec = load_environment(path)
    except InputError:
        return None
    if rec.key != key or tree_digest(path / "site-packages") != rec.content_digest:
        return None
    return rec


def ensure_environment(
    spec: EnvironmentSpec,
    *,
    task_id: str,
    repo: Path,
    resolved_sha: str,
    artifacts: ArtifactStore,
    timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    memory_mb: int | None = None,
) -> EnvironmentResult:
    """Reuse or build a task's environment (see module docstring).

    Raises:
        InputError: A requirement is invalid or the pyproject cannot be read.
        EnvironmentBuildError: pip failed; the message ends with the build log's tail.
    """
    started = time.monotonic()
    reqs = requirements_for(spec, task_id, repo, resolved_sha)
    key = environment_key(reqs, spec.index_url, resolved_sha)
    final = artifacts.environment(key)
    rec = _stored(final, key)
    if rec is not None:
        return EnvironmentResult(rec, final, True, time.monotonic() - started)
    if final.exists():  # incomplete or altered: never trusted, rebuilt from scratch
        remove_tree(final)
    staging = artifacts.staging("environment")
    try:
        (staging / "site-packages").mkdir()
        log, installed = _build(reqs, spec.index_url, staging, timeout_s, memory_mb)
        atomic_write_text(staging / LOG, log)
        if installed is None:
            tail = log[-LOG_TAIL:]
            raise EnvironmentBuildError(
                f"environment of task {task_id} failed to build ({len(reqs)} requirement(s) from "
                f"{spec.index_url}); build log tail:\n{tail}"
            )
        rec = EnvironmentRecord(
            key=key,
            requirements=reqs,
            index_url=spec.index_url,
            resolved_sha=resolved_sha,
            python=python_tag(),
            builder=BUILDER,
            content_digest=tree_digest(staging / "site-packages"),
            installed=installed,
            build_s=round(time.monotonic() - started, 3),
            built_at=_now(),
            built_for=task_id,
        )
        atomic_write_json(staging / RECORD, rec.model_dump(mode="json"))
        make_tree_readonly(staging)
        publish_dir(staging, final, record=RECORD)
    finally:
        if staging.exists():
            remove_tree(staging)
    stored = _stored(final, key)
    if stored is None:
        raise EnvironmentBuildError(f"environment {final} did not verify after publishing")
    return EnvironmentResult(stored, final, False, time.monotonic() - started)


def _build(
    reqs: list[str], index_url: str, staging: Path, timeout_s: float, memory_mb: int | None
) -> tuple[str, list[str] | None]:
    """Run pip in the sandbox behind the index proxy; the log, and what got installed (or None)."""
    if not reqs:
        return "no requirements: empty environment\n", []
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--no-cache-dir",
        "--no-compile",
        "--target",
        f"{BUILD_DEST}/site-packages",
        "--index-url",
        index_url,
        "--",
        *reqs,
    ]
    cert = ca_bundle()
    if cert is not None:
        argv[4:4] = ["--cert", cert]
    with IndexProxy(allowed_hosts(index_url)) as proxy:
        res = run(
            argv,
            isolation=Isolation.SANDBOX,
            env=sandbox_env({"PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": "/dev/null"}),
            timeout_s=timeout_s,
            max_output=256 * 1024,
            sandbox=SandboxSpec(
                network=False,
                mounts=(Mount(staging, BUILD_DEST, writable=True),),
                memory_mb=memory_mb,
                model_api=proxy.channel(),
            ),
        )
        stats = proxy.stats()
    text = (res.stdout + b"\n" + res.stderr).decode("utf-8", "replace")
    status = "timed out" if res.timed_out else f"exit {res.returncode}"
    log = f"$ pip install {' '.join(reqs)}\n{text.strip()}\n[{status}; {stats}]\n"
    if not res.ok:
        return log, None
    site = staging / "site-packages"
    installed = sorted(
        p.name.removesuffix(".dist-info") for p in site.glob("*.dist-info") if p.is_dir()
    )
    return log, installed


CA_VARIABLES = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
TRUST_ROOTS = ("/etc/ssl/", "/etc/ca-certificates/")
"""Host folders the sandbox mounts read-only, so a CA bundle there can be handed to pip."""


def ca_bundle() -> str | None:
    """The host's CA bundle for pip (a TLS-inspecting network adds its own root there), if any.

    The first of ``$PIP_CERT``, ``$REQUESTS_CA_BUNDLE``, ``$SSL_CERT_FILE`` that names a file in
    a trust folder the sandbox mounts; otherwise pip's own bundle is used. TLS stays end to end
    (the proxy only tunnels bytes), so only the host's own trust decision is reused.
    """
    import os

    for name in CA_VARIABLES:
        value = os.environ.get(name, "")
        if value.startswith(TRUST_ROOTS) and os.path.isfile(value):
            return value
    return None


def cell_mounts(env_path: Path | None) -> tuple[tuple[Mount, ...], tuple[str, ...]]:
    """The read-only mount and the import path a cell adds for its task environment."""
    if env_path is None:
        return (), ()
    return (Mount(env_path / "site-packages", ENV_DEST, writable=False),), (ENV_DEST,)


def env_pythonpath(env_paths: tuple[str, ...]) -> dict[str, str]:
    """``PYTHONPATH`` for a command that is not the trusted runner (setup, an agent session)."""
    return {"PYTHONPATH": ":".join(env_paths)} if env_paths else {}


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
