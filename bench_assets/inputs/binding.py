"""Task bindings: a task pinned to one commit plus digests of everything its meaning depends on.

A binding resolves the task's repository once to a full commit SHA (``repo: inline`` folders are
committed deterministically into a harness-owned bare repository) and records digests of the
prompt, setup, verify command, the task file and the oracle. Its :attr:`TaskBinding.digest` is
the data version of the ``task_bindings`` asset, so an unchanged task keeps its data version and
nothing downstream goes stale.

Pins: ``tasks/bindings.lock`` (written by ``wfbench pin``) records bindings a team wants to hold
fixed. A pinned repo path is bound to the pinned SHA even if its ref moved, and any other drift of
the definition is refused before paid work: ``task binding drifted for <id>: <field> …``.
"""

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.kernel.errors import BindingDriftError, BindingError, InputError
from bench_assets.kernel.fsutil import atomic_write_json
from bench_assets.kernel.hashing import sha256_json, sha256_text
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox import gitrepo
from bench_assets.tasks.catalog import Benchmark, Task

SCHEMA_VERSION = 1
LOCK_FILE = "bindings.lock"


class TaskBinding(BaseModel):
    """A task bound to a commit, with the digests of its definition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    task_id: str
    task_class: str
    repo_kind: Literal["inline", "path"]
    repo_identity: str
    """``inline:<task id>`` or the real path of the repository's top level."""
    ref: str | None
    resolved_sha: str
    prompt_digest: str
    setup_digest: str
    verify_digest: str
    task_file_digest: str
    """Digest of the parsed task file (comments and formatting do not count)."""
    oracle_digest: str
    oracle_command_digest: str
    oracle_manifest_digest: str
    oracle_files: list[str]
    protected: list[str]
    expensive: bool

    @property
    def digest(self) -> str:
        """Content digest of the whole binding: the asset's data version."""
        return sha256_json(self.model_dump(mode="json"))

    def fields_differing_from(self, other: "TaskBinding") -> list[str]:
        """Names of fields whose values differ (in declaration order)."""
        mine, theirs = self.model_dump(mode="json"), other.model_dump(mode="json")
        return [k for k in mine if mine[k] != theirs.get(k)]


def bind(
    task: Task,
    oracle: OracleSnapshot,
    artifacts: ArtifactStore,
    *,
    pin: TaskBinding | None = None,
) -> TaskBinding:
    """Bind ``task`` to a commit; with ``pin``, hold that commit and refuse any drift."""
    spec = task.spec
    if spec.is_inline:
        repo_kind: Literal["inline", "path"] = "inline"
        identity = f"inline:{spec.id}"
        sha = gitrepo.commit_tree_from_dir(
            task.repo_dir, artifacts.repo(spec.id), f"wfbench inline task {spec.id}\n"
        )
    else:
        repo_kind = "path"
        try:
            top = gitrepo.toplevel(task.repo_dir)
        except Exception as e:
            raise BindingError(
                f"{task.file}: repo: {spec.repo!r} is not a readable git repository: {e}"
            ) from e
        identity = str(top)
        ref = spec.ref or "HEAD"
        if pin is not None:
            sha = pin.resolved_sha
            if not gitrepo.resolve_commit(top, sha):
                raise BindingDriftError(
                    f"task binding drifted for {spec.id}: resolved_sha: pinned commit {sha} "
                    f"is unavailable in {top}"
                )
        else:
            resolved = gitrepo.resolve_commit(top, ref)
            if resolved is None:
                raise BindingError(
                    f"{task.file}: ref: {ref!r} does not name a commit in {top} "
                    "(pinned task commit is unavailable)"
                )
            sha = resolved
    binding = TaskBinding(
        task_id=spec.id,
        task_class=spec.class_,
        repo_kind=repo_kind,
        repo_identity=identity,
        ref=spec.ref,
        resolved_sha=sha,
        prompt_digest=sha256_text(spec.prompt),
        setup_digest=sha256_text(spec.setup or ""),
        verify_digest=(
            sha256_text(spec.verify)
            if isinstance(spec.verify, str)
            else sha256_json(spec.verify.model_dump(mode="json"))
        ),
        task_file_digest=task_file_digest(task),
        oracle_digest=oracle.digest,
        oracle_command_digest=oracle.command_digest,
        oracle_manifest_digest=oracle.manifest_digest,
        oracle_files=sorted(spec.oracle.files),
        protected=list(spec.protected),
        expensive=spec.expensive,
    )
    if pin is not None:
        check_pin(binding, pin)
    return binding


def task_file_digest(task: Task) -> str:
    """``TaskBinding.task_file_digest`` of the task as it is now: a binding whose digest differs
    was made from an earlier task file."""
    return sha256_json(task.spec.model_dump(mode="json", by_alias=True))


def check_pin(binding: TaskBinding, pin: TaskBinding) -> None:
    """Refuse a binding that differs from its pin, naming the task and every drifted field."""
    drifted = binding.fields_differing_from(pin)
    if drifted:
        mine, theirs = binding.model_dump(mode="json"), pin.model_dump(mode="json")
        detail = "; ".join(f"{f} (pinned {theirs[f]!r}, now {mine[f]!r})" for f in drifted)
        raise BindingDriftError(f"task binding drifted for {binding.task_id}: {detail}")


def save(binding: TaskBinding, artifacts: ArtifactStore) -> Path:
    """Store the binding record under ``bindings/<task>/<digest>.json``."""
    path = artifacts.binding(binding.task_id, binding.digest)
    if not path.exists():
        atomic_write_json(path, binding.model_dump(mode="json"))
    return path


def load(path: Path) -> TaskBinding:
    """Read a stored binding record."""
    return TaskBinding.model_validate_json(path.read_text(encoding="utf-8"))


def source_git_dir(binding: TaskBinding, artifacts: ArtifactStore) -> Path:
    """The repository a binding's commit is read from."""
    if binding.repo_kind == "inline":
        return artifacts.repo(binding.task_id)
    return Path(binding.repo_identity)


# --------------------------------------------------------------------------------------------
# the lock file


def lock_path(bench: Benchmark) -> Path:
    """``tasks/bindings.lock``."""
    return bench.root / LOCK_FILE


def read_pins(bench: Benchmark) -> dict[str, TaskBinding]:
    """Pinned bindings by task id (empty when there is no lock file)."""
    path = lock_path(bench)
    if not path.exists():
        return {}
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or not isinstance(raw.get("bindings"), dict):
            raise ValueError("expected {'schema_version': 1, 'bindings': {task id: binding}}")
        return {k: TaskBinding.model_validate(v) for k, v in raw["bindings"].items()}
    except (ValueError, ValidationError) as e:
        raise InputError(f"{path}: bindings: invalid lock file: {e}") from e


def write_pins(bench: Benchmark, bindings: dict[str, TaskBinding]) -> Path:
    """Write the lock file holding ``bindings``."""
    body = {
        "schema_version": SCHEMA_VERSION,
        "bindings": {k: b.model_dump(mode="json") for k, b in sorted(bindings.items())},
    }
    return atomic_write_json(lock_path(bench), body)
