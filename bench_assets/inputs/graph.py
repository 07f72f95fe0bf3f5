"""Sanitized code graphs: a code index of the sanitized template that cannot leak the benchmark.

The default indexer is the built-in Python indexer (:mod:`bench_assets.inputs.graph_index`); it only
parses source with :mod:`ast` and never executes target code, so it runs in-process. An external
indexer (``graph.indexer: command``) runs inside the sandbox with the network off, the scrubbed
tree mounted read-only at ``/workspace`` and an empty output folder at ``/out``; it must write
``/out/graph.json``.

Either way, files whose path or bytes contain a benchmark-owned marker are removed from what the
indexer sees, and the finished graph is checked to contain none of the markers
(:class:`~bench_assets.kernel.errors.GraphScrubError` otherwise). Graphs are stored read-only under
``graphs/<digest>/`` where the digest covers the graph bytes and the sanitized commit.
"""

import json
import os
import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.config.models import GraphConfig
from bench_assets.inputs.graph_index import (
    check_graph_clean,
    index_python_tree,
    scrub_predicate,
    write_graph,
)
from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.inputs.sanitize import Template, template_tree
from bench_assets.kernel.errors import CommandError
from bench_assets.kernel.fsutil import (
    atomic_write_json,
    make_tree_readonly,
    publish_dir,
    remove_tree,
)
from bench_assets.kernel.hashing import sha256_bytes, sha256_json
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.process import Isolation, Mount, SandboxSpec, run, sandbox_env

ORACLE_STAGING_PREFIX = ".wfbench-oracle-"
ORACLE_ENV = "WFBENCH_ORACLE_ROOT"


class GraphInfo(BaseModel):
    """Identity and statistics of a stored sanitized graph."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    graph_sha256: str
    sanitized_sha: str
    indexer: str
    stats: dict[str, int]
    markers_checked: int


def benchmark_markers(oracle: OracleSnapshot) -> list[str]:
    """Strings that would reveal the benchmark if they appeared in what an agent sees."""
    markers = {ORACLE_STAGING_PREFIX.rstrip("-"), ORACLE_ENV}
    if oracle.command:
        markers.add(oracle.command.strip())
    for f in oracle.files:
        markers.add(f.name)
        markers.add(os.path.basename(f.name))
        markers.add(f.sha256)
    return sorted(m for m in markers if m)


def build_graph(
    template: Template,
    oracle: OracleSnapshot,
    config: GraphConfig,
    artifacts: ArtifactStore,
    *,
    timeout_s: float = 1800,
) -> GraphInfo:
    """Index the template, prove it clean, and store it; reuses an identical stored graph."""
    markers = benchmark_markers(oracle)
    tree = template_tree(template)
    if config.indexer == "builtin":
        graph = index_python_tree(tree, skip=scrub_predicate(markers))
        indexer = str(graph.get("indexer", "builtin-python"))
    else:
        graph = _run_external(tree, markers, config, artifacts, timeout_s)
        indexer = "command:" + sha256_json(config.argv)[:12]
    check_graph_clean(graph, markers)
    stats = {k: int(v) for k, v in dict(graph.get("stats", {})).items() if isinstance(v, int)}
    staging = artifacts.staging("graph")
    try:
        _, graph_sha = write_graph(graph, staging)
        digest = sha256_json(
            {"graph": graph_sha, "sanitized_sha": template.info.sanitized_sha, "indexer": indexer}
        )
        info = GraphInfo(
            digest=digest,
            graph_sha256=graph_sha,
            sanitized_sha=template.info.sanitized_sha,
            indexer=indexer,
            stats=stats,
            markers_checked=len(markers),
        )
        final = artifacts.graph(digest)
        if (final / "graph-info.json").is_file():
            return info
        atomic_write_json(staging / "graph-info.json", info.model_dump(mode="json"))
        make_tree_readonly(staging)
        publish_dir(staging, final, record="graph-info.json")
        return info
    finally:
        if staging.exists():
            remove_tree(staging)


def _run_external(
    tree: Path, markers: list[str], config: GraphConfig, artifacts: ArtifactStore, timeout_s: float
) -> dict:
    assert config.argv
    seed = artifacts.staging("graph-seed")
    out = artifacts.staging("graph-out")
    try:
        skip = scrub_predicate(markers)
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in filenames:
                src = Path(dirpath) / name
                rel = src.relative_to(tree).as_posix()
                if src.is_symlink() or skip(rel, src.read_bytes()):
                    continue
                (seed / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, seed / rel)
        argv = [a.replace("{workdir}", "/workspace").replace("{out}", "/out") for a in config.argv]
        res = run(
            argv,
            isolation=Isolation.SANDBOX,
            env=sandbox_env(),
            timeout_s=timeout_s,
            sandbox=SandboxSpec(
                workspace=seed,
                workspace_writable=False,
                network=False,
                mounts=(Mount(out, "/out", writable=True),),
            ),
        )
        if not res.ok:
            why = "timed out" if res.timed_out else f"exited {res.returncode}"
            raise CommandError(f"graph indexer {config.argv[0]!r} {why}: {res.tail(800)}")
        produced = out / "graph.json"
        if not produced.is_file() or produced.is_symlink():
            raise CommandError(f"graph indexer {config.argv[0]!r} did not write /out/graph.json")
        raw = produced.read_bytes()
        try:
            graph = json.loads(raw)
        except json.JSONDecodeError as e:
            raise CommandError(f"graph indexer wrote invalid JSON: {e}") from e
        if not isinstance(graph, dict):
            raise CommandError("graph indexer must write a JSON object")
        graph.setdefault("stats", {"bytes": len(raw)})
        graph.setdefault("source_sha256", sha256_bytes(raw))
        return graph
    finally:
        remove_tree(seed)
        remove_tree(out)


def load_graph_info(artifacts: ArtifactStore, digest: str) -> GraphInfo | None:
    """A stored graph's info, if present."""
    path = artifacts.graph(digest) / "graph-info.json"
    if not path.is_file():
        return None
    return GraphInfo.model_validate_json(path.read_text(encoding="utf-8"))
