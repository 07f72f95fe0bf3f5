"""Input assets: incumbent skills, task bindings, oracle snapshots, sanitized graphs, task
environments.

Each asset calls one core function, stores its record in the artifact store, and returns the
record's content digest as its data version, so re-materializing unchanged input leaves every
downstream partition fresh. Downstream assets read their upstream record from the upstream
partition's latest materialization (``record_path`` metadata), never by recomputing it.
"""

import json
from pathlib import Path

import dagster as dg

from bench_assets.defs.partitions import task_partitions
from bench_assets.defs.resources import BenchResource, upstream_metadata
from bench_assets.inputs import binding as binding_mod
from bench_assets.inputs import build as core
from bench_assets.inputs import input_state
from bench_assets.inputs import oracle as oracle_mod
from bench_assets.inputs import skills as skills_mod
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.hashing import short

GROUP = "inputs"
OWNERS = ["team:wfbench"]

# Bump a code version whenever the function would produce a different record from the same input.
SKILLS_CODE_VERSION = "skills-v1"
BINDING_CODE_VERSION = "binding-v1"
ORACLE_CODE_VERSION = "oracle-v1"
GRAPH_CODE_VERSION = "graph-v1"
ENVIRONMENT_CODE_VERSION = "environment-v1"
CODE_VERSIONS = {
    "task_bindings": BINDING_CODE_VERSION,
    "oracle_snapshots": ORACLE_CODE_VERSION,
    "sanitized_graphs": GRAPH_CODE_VERSION,
    "task_environments": ENVIRONMENT_CODE_VERSION,
}
"""The per-task input assets' code versions, as
:func:`bench_assets.inputs.input_state.stale_reasons` compares them with the
``dagster/code_version`` each partition was materialized with."""


def _md_table(rows: list[tuple[str, str]]) -> str:
    lines = ["| field | value |", "| --- | --- |"]
    lines += [f"| {k} | `{v}` |" for k, v in rows]
    return "\n".join(lines)


@dg.asset(
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python", "markdown"},
    code_version=SKILLS_CODE_VERSION,
    description=(
        "Content-addressed, read-only snapshot of the incumbent skill tree (tasks/skills/ by "
        "default): the text a promotion would replace. Data version = tree digest."
    ),
)
def incumbent_skills(bench: BenchResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Snapshot the incumbent skill tree."""
    b = bench.load(tasks=[])
    snap, path = skills_mod.snapshot(b.skills_dir, bench.artifacts())
    files_md = "\n".join(
        ["| file | bytes | sha256 |", "| --- | --- | --- |"]
        + [f"| {e['path']} | {e['size']} | `{short(str(e['sha256']))}` |" for e in snap.files]
    )
    return dg.MaterializeResult(
        data_version=dg.DataVersion(snap.digest),
        metadata={
            "digest": snap.digest,
            "file_count": snap.file_count,
            "bytes": snap.bytes,
            "record_path": dg.MetadataValue.path(str(path)),
            "files": dg.MetadataValue.md(files_md),
        },
    )


@dg.asset(
    partitions_def=task_partitions,
    group_name=GROUP,
    owners=OWNERS,
    kinds={"git", "python"},
    code_version=BINDING_CODE_VERSION,
    description=(
        "A task pinned to one commit (inline repos are committed deterministically) with digests "
        "of its prompt, setup, verify command, task file and oracle. Honours tasks/bindings.lock: "
        "a pinned task whose definition drifted is refused. Data version = binding digest."
    ),
)
def task_bindings(context: dg.AssetExecutionContext, bench: BenchResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Bind one task to a commit."""
    task_id = context.partition_key
    loaded = bench.load(tasks=[task_id])
    # Digested before binding: an edit racing the build leaves a digest that no longer matches,
    # so the next generation rebuilds rather than trusting a binding of the older folder.
    source = input_state.source_digests(loaded, [task_id])[task_id]
    bound = core.bind_task(loaded, task_id, bench.artifacts())
    b = bound.binding
    return dg.MaterializeResult(
        data_version=dg.DataVersion(b.digest),
        metadata={
            input_state.SOURCE_KEY: source,
            "resolved_sha": b.resolved_sha,
            "repo": f"{b.repo_kind}: {b.repo_identity}",
            "digest": b.digest,
            "record_path": dg.MetadataValue.path(str(bound.path)),
            "binding": dg.MetadataValue.md(
                _md_table(
                    [
                        ("resolved_sha", b.resolved_sha),
                        ("prompt_digest", b.prompt_digest),
                        ("setup_digest", b.setup_digest),
                        ("verify_digest", b.verify_digest),
                        ("task_file_digest", b.task_file_digest),
                        ("oracle_digest", b.oracle_digest),
                        ("oracle_manifest_digest", b.oracle_manifest_digest),
                    ]
                )
            ),
        },
    )


@dg.asset(
    partitions_def=task_partitions,
    deps=[task_bindings],
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python"},
    code_version=ORACLE_CODE_VERSION,
    description=(
        "The task's hidden oracle files, captured (regular files only, bounded sizes) and stored "
        "read-only and content-addressed outside any worktree. Refuses bytes that changed since "
        "binding. Data version = oracle content digest."
    ),
)
def oracle_snapshots(
    context: dg.AssetExecutionContext, bench: BenchResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Capture one task's oracle."""
    task_id = context.partition_key
    up = upstream_metadata(context.instance, task_bindings.key, task_id)
    bound = binding_mod.load(Path(str(up["record_path"])))
    captured = core.capture_oracle(bench.load(tasks=[task_id]), task_id, bound, bench.artifacts())
    s = captured.snapshot
    return dg.MaterializeResult(
        data_version=dg.DataVersion(s.digest),
        metadata={
            "digest": s.digest,
            "command_digest": s.command_digest,
            "manifest_digest": s.manifest_digest,
            "file_count": len(s.files),
            "bytes": sum(f.size for f in s.files),
            "record_path": dg.MetadataValue.path(str(captured.path / "manifest.json")),
        },
    )


@dg.asset(
    partitions_def=task_partitions,
    deps=[task_bindings, oracle_snapshots],
    group_name=GROUP,
    owners=OWNERS,
    kinds={"git", "python"},
    code_version=GRAPH_CODE_VERSION,
    pool="graph_build",
    description=(
        "Sanitized clone template (one parentless deterministic commit; no refs, tags, remotes, "
        "reflogs or unreachable objects; benchmark-owned paths and oracle bytes absent; verified "
        "after building) plus a code graph of it, scrubbed and proven free of benchmark markers. "
        "Runs in the graph_build pool so builds overlap other tasks' agent sessions."
    ),
)
def sanitized_graphs(
    context: dg.AssetExecutionContext, bench: BenchResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Build one task's sanitized template and graph."""
    task_id = context.partition_key
    b = bench.load(tasks=[task_id])
    artifacts = bench.artifacts()
    bound = binding_mod.load(
        Path(str(upstream_metadata(context.instance, task_bindings.key, task_id)["record_path"]))
    )
    manifest = Path(
        str(upstream_metadata(context.instance, oracle_snapshots.key, task_id)["record_path"])
    )
    snapshot = oracle_mod.OracleSnapshot.model_validate(json.loads(manifest.read_text()))
    if snapshot.digest != bound.oracle_digest:
        raise InputError(
            f"oracle_snapshots[{task_id}] is older than task_bindings[{task_id}]; "
            "re-materialize oracle_snapshots first"
        )
    built = core.build_sanitized_graph(
        b, task_id, bound, core.CapturedOracle(snapshot, manifest.parent), artifacts
    )
    info, stats = built.template.info, built.graph.stats
    return dg.MaterializeResult(
        data_version=dg.DataVersion(built.digest),
        metadata={
            "sanitized_sha": info.sanitized_sha,
            "source_sha": info.source_sha,
            "template_files": info.files,
            "template_bytes": info.bytes,
            "checks_passed": ", ".join(info.checks),
            "graph_digest": built.graph.digest,
            "graph_nodes": stats.get("nodes", 0),
            "graph_edges": stats.get("edges", 0),
            "graph_indexer": built.graph.indexer,
            "markers_checked": built.graph.markers_checked,
            "template_path": dg.MetadataValue.path(str(built.template.path)),
            "graph_path": dg.MetadataValue.path(
                str(artifacts.graph(built.graph.digest) / "graph.json")
            ),
        },
    )


@dg.asset(
    partitions_def=task_partitions,
    deps=[task_bindings],
    group_name=GROUP,
    owners=OWNERS,
    kinds={"python"},
    code_version=ENVIRONMENT_CODE_VERSION,
    description=(
        "The task's third-party packages (task.yaml `environment`), built once with pip in a "
        "sandbox that can reach only the package index, keyed by the environment spec and the "
        "base commit, stored read-only and mounted into every cell of the task (cells never get "
        "that network). A failed build fails the task's inputs, with the build log's tail, "
        "before any cell is paid for. Data version = key + content digest (`no-environment` for "
        "a task without one), so an unchanged task reuses it without rebuilding."
    ),
)
def task_environments(
    context: dg.AssetExecutionContext, bench: BenchResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Reuse or build one task's environment."""
    task_id = context.partition_key
    bound = binding_mod.load(
        Path(str(upstream_metadata(context.instance, task_bindings.key, task_id)["record_path"]))
    )
    built = core.build_environment(bench.load(tasks=[task_id]), task_id, bound, bench.artifacts())
    if built is None:
        return dg.MaterializeResult(
            data_version=dg.DataVersion(core.NO_ENVIRONMENT),
            metadata={"environment": None},
        )
    rec = built.record
    context.log.info(
        f"{task_id}: environment {short(rec.key)} "
        f"{'reused' if built.reused else 'built'} in {built.seconds:.2f} s"
    )
    return dg.MaterializeResult(
        data_version=dg.DataVersion(rec.digest),
        metadata={
            "environment": rec.key,
            "digest": rec.digest,
            "reused": built.reused,
            "seconds": round(built.seconds, 3),
            "build_s": rec.build_s,
            "requirements": ", ".join(rec.requirements) or None,
            "installed": ", ".join(rec.installed) or None,
            "index_url": rec.index_url,
            "python": rec.python,
            "record_path": dg.MetadataValue.path(str(built.path)),
            "build_log": dg.MetadataValue.path(str(built.path / "build.log")),
        },
    )
