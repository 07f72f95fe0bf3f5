"""Oracle snapshots: the hidden test files of a task, captured safely and stored read-only.

Capture reads exactly the declared files from ``<task>/oracle/``: each path component must be a
real folder, the leaf a regular file opened without following symlinks, its identity (device,
inode, size, mtime) unchanged between ``lstat`` and the read, and sizes bounded per file and per
task. Three digests describe a snapshot (framed hashes, see :mod:`bench_assets.kernel.hashing`):

* ``command_digest`` — how the oracle runs: the custom command (or none: the trusted pytest
  runner) and the declared ``fail_to_pass`` / ``pass_to_pass`` tests;
* ``manifest_digest`` — names, content hashes and sizes of the files;
* ``digest`` — the content digest: how it runs, then every name and its bytes. It names the stored
  snapshot folder (content-addressed), outside any worktree.
"""

import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.config.models import LimitsConfig
from bench_assets.kernel.errors import OracleCaptureError
from bench_assets.kernel.fsutil import (
    atomic_write_bytes,
    atomic_write_json,
    make_tree_readonly,
    publish_dir,
)
from bench_assets.kernel.hashing import framed, sha256_bytes, sha256_json
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Task

SCHEMA_VERSION = 2


class OracleFile(BaseModel):
    """One captured oracle file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    sha256: str
    size: int


class OracleSnapshot(BaseModel):
    """Identity of a captured oracle (the bytes live in the content-addressed store)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    task_id: str
    command: str | None
    """A custom runner's command (``{oracle_dir}`` not yet replaced); None: the trusted runner."""
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    files: list[OracleFile]
    command_digest: str
    manifest_digest: str
    digest: str


def _read_regular(root: Path, name: str) -> bytes:
    current = root
    for part in ["", *name.split("/")[:-1]]:
        current = current / part if part else current
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise OracleCaptureError(f"oracle folder {current} does not exist") from None
        if not stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            raise OracleCaptureError(f"{current} is not a real folder (symlinks are refused)")
    path = root / name
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise OracleCaptureError(f"oracle file {path} does not exist") from None
    if stat.S_ISLNK(before.st_mode) or not stat.S_ISREG(before.st_mode):
        raise OracleCaptureError(f"oracle file {path} is not a regular file (symlinks are refused)")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        opened = os.fstat(fd)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read()
        after = os.fstat(fd)
    finally:
        os.close(fd)
    ident = (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns)
    for st in (opened, after):
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != ident:
            raise OracleCaptureError(f"oracle file {path} changed while it was being captured")
    if len(data) != before.st_size:
        raise OracleCaptureError(f"oracle file {path} changed size while it was being captured")
    return data


def capture(task: Task, limits: LimitsConfig) -> tuple[OracleSnapshot, dict[str, bytes]]:
    """Read a task's declared oracle files; return the snapshot identity and the bytes."""
    payloads: dict[str, bytes] = {}
    total = 0
    for name in sorted(task.spec.oracle.files):
        data = _read_regular(task.oracle_dir, name)
        if len(data) > limits.oracle_file_bytes:
            raise OracleCaptureError(
                f"{task.file}: oracle.files: {name!r} is {len(data)} bytes; "
                f"limit {limits.oracle_file_bytes} (limits.oracle_file_bytes)"
            )
        total += len(data)
        payloads[name] = data
    if total > limits.oracle_total_bytes:
        raise OracleCaptureError(
            f"{task.file}: oracle.files: {total} bytes in all; "
            f"limit {limits.oracle_total_bytes} (limits.oracle_total_bytes)"
        )
    oracle = task.spec.oracle
    files = [OracleFile(name=n, sha256=sha256_bytes(b), size=len(b)) for n, b in payloads.items()]
    command_digest = sha256_json(
        {
            "command": oracle.command,
            "fail_to_pass": list(oracle.fail_to_pass),
            "pass_to_pass": list(oracle.pass_to_pass),
        }
    )
    manifest_parts: list[str] = []
    content_parts: list[bytes | str] = [command_digest]
    for f in files:
        manifest_parts += [f.name, f.sha256, str(f.size)]
        content_parts += [f.name, payloads[f.name]]
    snapshot = OracleSnapshot(
        task_id=task.id,
        command=oracle.command,
        fail_to_pass=list(oracle.fail_to_pass),
        pass_to_pass=list(oracle.pass_to_pass),
        files=files,
        command_digest=command_digest,
        manifest_digest=framed(manifest_parts),
        digest=framed(content_parts),
    )
    return snapshot, payloads


def store(snapshot: OracleSnapshot, payloads: dict[str, bytes], artifacts: ArtifactStore) -> Path:
    """Publish the snapshot read-only under ``oracles/<digest>/``; idempotent."""
    final = artifacts.oracle(snapshot.digest)
    if (final / "manifest.json").is_file():
        return final
    staging = artifacts.staging("oracle")
    for name, data in payloads.items():
        atomic_write_bytes(staging / "files" / name, data, mode=0o444)
    atomic_write_json(staging / "manifest.json", snapshot.model_dump(mode="json"), mode=0o444)
    make_tree_readonly(staging)
    return publish_dir(staging, final, record="manifest.json")


def verify_stored(snapshot: OracleSnapshot, artifacts: ArtifactStore) -> dict[str, bytes]:
    """Re-read a stored snapshot and prove its bytes still match; return them."""
    root = artifacts.oracle(snapshot.digest) / "files"
    out: dict[str, bytes] = {}
    for f in snapshot.files:
        data = _read_regular(root, f.name)
        if sha256_bytes(data) != f.sha256:
            raise OracleCaptureError(
                f"stored oracle snapshot {snapshot.digest[:12]} for task {snapshot.task_id}: "
                f"{f.name} no longer matches its digest"
            )
        out[f.name] = data
    return out
