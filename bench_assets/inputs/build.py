"""Building the per-task input artifacts: binding, oracle snapshot, sanitized template and graph,
and the task environment.

These are the functions the ``task_bindings``, ``oracle_snapshots``, ``sanitized_graphs`` and
``task_environments`` assets call (and the CLI and benchmarks call directly). Each returns a small
record whose ``digest`` is the asset's data version and whose fields become readable metadata.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench_assets.inputs import binding as binding_mod
from bench_assets.inputs import oracle as oracle_mod
from bench_assets.inputs import sanitize
from bench_assets.inputs.binding import TaskBinding
from bench_assets.inputs.graph import GraphInfo, build_graph
from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.kernel.errors import BindingDriftError, OracleCaptureError
from bench_assets.kernel.fsutil import remove_tree
from bench_assets.kernel.hashing import sha256_json
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox import gitrepo
from bench_assets.tasks.catalog import Benchmark, Task

if TYPE_CHECKING:
    from bench_assets.inputs.environments import EnvironmentResult


@dataclass(frozen=True)
class BoundTask:
    """A task's binding and where its record is stored."""

    binding: TaskBinding
    path: Path


@dataclass(frozen=True)
class CapturedOracle:
    """A task's stored oracle snapshot."""

    snapshot: OracleSnapshot
    path: Path


@dataclass(frozen=True)
class SanitizedGraph:
    """A task's sanitized template and its code graph."""

    template: sanitize.Template
    graph: GraphInfo

    @property
    def digest(self) -> str:
        """Data version of the ``sanitized_graphs`` partition."""
        return sha256_json(
            {"sanitized_sha": self.template.info.sanitized_sha, "graph": self.graph.digest}
        )


def bind_task(bench: Benchmark, task_id: str, artifacts: ArtifactStore) -> BoundTask:
    """Bind one task (honouring ``tasks/bindings.lock``) and store the record."""
    task = bench.task(task_id)
    snapshot, _ = oracle_mod.capture(task, bench.config.limits)
    pin = binding_mod.read_pins(bench).get(task_id)
    b = binding_mod.bind(task, snapshot, artifacts, pin=pin)
    return BoundTask(b, binding_mod.save(b, artifacts))


def capture_oracle(
    bench: Benchmark, task_id: str, bound: TaskBinding, artifacts: ArtifactStore
) -> CapturedOracle:
    """Capture and store a task's oracle, refusing bytes that changed since binding."""
    task = bench.task(task_id)
    snapshot, payloads = oracle_mod.capture(task, bench.config.limits)
    if snapshot.digest != bound.oracle_digest:
        raise BindingDriftError(
            f"task binding drifted for {task_id}: oracle_digest (the oracle files or command "
            "changed after the task was bound; re-materialize task_bindings)"
        )
    return CapturedOracle(snapshot, oracle_mod.store(snapshot, payloads, artifacts))


def benchmark_paths(bench: Benchmark, task: Task, bound: TaskBinding) -> list[str]:
    """Repository paths removed from the template: configured ones plus the tasks folder."""
    paths = set(bench.config.sanitize.remove)
    if bound.repo_kind == "path":
        try:
            paths.add(bench.root.relative_to(Path(bound.repo_identity)).as_posix())
        except ValueError:
            pass
    return sorted(p for p in paths if p not in ("", "."))


def build_sanitized_graph(
    bench: Benchmark,
    task_id: str,
    bound: TaskBinding,
    captured: CapturedOracle,
    artifacts: ArtifactStore,
) -> SanitizedGraph:
    """Build (or reuse) the task's sanitized template, then index it into a clean graph."""
    task = bench.task(task_id)
    payloads = oracle_mod.verify_stored(captured.snapshot, artifacts)
    template = sanitize.build_template(
        binding_mod.source_git_dir(bound, artifacts),
        bound.resolved_sha,
        artifacts,
        remove=benchmark_paths(bench, task, bound),
        forbidden_blobs=payloads,
    )
    graph = build_graph(
        template,
        captured.snapshot,
        bench.config.graph,
        artifacts,
        timeout_s=bench.config.limits.graph_timeout_s,
    )
    return SanitizedGraph(template, graph)


def stored_input_faults(
    artifacts: ArtifactStore, snapshot: OracleSnapshot | None, sanitized_sha: str | None
) -> list[tuple[Path, str]]:
    """Re-verify a task's stored oracle snapshot and sanitized template; ``(path, why)`` each.

    Run at the start of a generation, before any cell is paid: an oracle file whose bytes no
    longer match its digest, or a template whose work tree or object store changed (``git
    status`` and ``git fsck``), would otherwise grade or seed every cell of the task silently.
    """
    faults: list[tuple[Path, str]] = []
    if snapshot is not None and artifacts.oracle(snapshot.digest).exists():
        try:
            oracle_mod.verify_stored(snapshot, artifacts)
        except (OracleCaptureError, OSError) as e:
            faults.append((artifacts.oracle(snapshot.digest), str(e)))
    template = sanitize.load_template(artifacts, sanitized_sha) if sanitized_sha else None
    if template is not None:
        tree = sanitize.template_tree(template)
        status = gitrepo.git(
            ["status", "--porcelain=v1", "--untracked-files=all"], cwd=tree, check=False
        )
        fsck = gitrepo.git(["fsck", "--no-progress", "--no-dangling"], cwd=tree, check=False)
        if status.returncode != 0 or status.text().strip():
            faults.append((template.path, f"work tree changed: {status.tail(200)}"))
        elif fsck.returncode != 0 or fsck.text().strip():
            faults.append((template.path, f"object store corrupt: {fsck.tail(200)}"))
    return faults


def discard_stored(path: Path) -> None:
    """Remove a corrupted, content-addressed input so its asset builds it again."""
    remove_tree(path)


NO_ENVIRONMENT = "no-environment"
"""The ``task_environments`` data version of a task that declares no environment."""


def build_environment(
    bench: Benchmark, task_id: str, bound: TaskBinding, artifacts: ArtifactStore
) -> "EnvironmentResult | None":
    """Reuse or build the task's environment (``task_environments``); None when it has none.

    Raises:
        EnvironmentBuildError: The build failed (with the build log's tail).
    """
    from bench_assets.inputs import environments

    task = bench.task(task_id)
    spec = task.spec.environment
    if spec is None:
        return None
    return environments.ensure_environment(
        spec,
        task_id=task_id,
        repo=binding_mod.source_git_dir(bound, artifacts),
        resolved_sha=bound.resolved_sha,
        artifacts=artifacts,
        timeout_s=float(task.spec.timeouts.setup_s or environments.DEFAULT_BUILD_TIMEOUT_S),
        memory_mb=task.spec.resources.memory_mb,
    )
