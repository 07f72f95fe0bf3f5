"""Cell assets: ``candidate_overlay``, ``comparator_cells`` and ``candidate_cells``.

Cells are partitioned task × cell (``<arm>.r<k>``, from bench.yaml); comparator and candidate arms
are two assets so a new overlay makes only candidate cells stale. Each materialization first
computes the cell's identity and looks up its own latest materialization of the same partition:
if the identity is unchanged and the record is reusable and not too old, it re-records that result
as ``reused`` (same data version, no agent process) unless the run config says ``force: true``.
"""

import datetime as dt
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import dagster as dg

from bench_assets.cells.cellkeys import cell_keys, identity_digest, parse_cell_key
from bench_assets.cells.pipeline import CellInputs, cell_identity, make_adapter, run_cell
from bench_assets.cells.records import CellRecord, load_record
from bench_assets.decision.documents import CellMaterialization, CellView, load_cell
from bench_assets.defs.inputs import (
    incumbent_skills,
    oracle_snapshots,
    sanitized_graphs,
    task_bindings,
    task_environments,
)
from bench_assets.defs.partitions import task_partitions
from bench_assets.defs.resources import (
    BenchResource,
    latest_metadata_by_partition,
    latest_record,
    location_bench_config,
    record_metadata,
    upstream_metadata,
)
from bench_assets.generation.planner import PriorCell, reuse_verdict
from bench_assets.inputs import binding as binding_mod
from bench_assets.inputs import oracle as oracle_mod
from bench_assets.inputs import overlay as overlay_mod
from bench_assets.inputs.environments import EnvironmentRecord, load_environment
from bench_assets.inputs.graph import load_graph_info
from bench_assets.inputs.sanitize import load_template
from bench_assets.inputs.skills import SkillsSnapshot
from bench_assets.kernel.errors import InputError
from bench_assets.sandbox.redact import from_environment
from bench_assets.tasks.catalog import Benchmark

GROUP = "cells"
OWNERS = ["team:wfbench"]
CELL_CODE_VERSION = "cell-v1"
OVERLAY_CODE_VERSION = "overlay-v1"


class CellConfig(dg.Config):
    """Run config of a cell materialization."""

    force: bool = False
    """Pay for a fresh session even when the previous record could be reused."""
    generation: str = ""
    """Generation id recorded on fresh cells (e.g. g0007); empty for ad-hoc runs."""
    adopt_record_id: str = ""
    """Record this cell's finished record (its record id) instead of paying: the run that paid
    for it was killed after the record was written (the cell's commit point) but before Dagster
    recorded the materialization. Refused unless it was made for this identity and generation."""


class OverlayConfig(dg.Config):
    """Which queued candidate this generation evaluates."""

    candidate: str = ""
    """Candidate id under tasks/candidates/; empty = the first queued one (sorted)."""


@dg.asset(
    group_name=GROUP,
    owners=OWNERS,
    kinds={"markdown"},
    code_version=OVERLAY_CODE_VERSION,
    deps=[incumbent_skills],
    description=(
        "This generation's candidate overlay: files that replace or add files of the incumbent "
        "skill tree, stored read-only, with origin, rationale and a diff against the incumbent. "
        "Data version = overlay digest, so a new overlay makes only candidate cells stale."
    ),
)
def candidate_overlay(
    context: dg.AssetExecutionContext, config: OverlayConfig, bench: BenchResource
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Snapshot the selected candidate overlay."""
    b = bench.load(tasks=[])
    if not b.candidates:
        raise InputError(f"no candidate overlays queued in {b.root / b.config.proposer.queue}")
    cid = config.candidate or sorted(b.candidates)[0]
    if cid not in b.candidates:
        raise InputError(f"unknown candidate {cid!r} (queued: {', '.join(sorted(b.candidates))})")
    skills_md = upstream_metadata(context.instance, incumbent_skills.key, None)
    snap, files = overlay_mod.snapshot(
        b.candidates[cid], b.skills_dir, str(skills_md["digest"]), bench.artifacts()
    )
    return dg.MaterializeResult(
        data_version=dg.DataVersion(snap.digest),
        metadata={
            "candidate": snap.candidate_id,
            "title": snap.title,
            "origin": snap.origin,
            "digest": snap.digest,
            "incumbent_digest": snap.incumbent_digest,
            "changed": ", ".join(snap.changed) or None,
            "added": ", ".join(snap.added) or None,
            "record_path": dg.MetadataValue.path(str(files.parent)),
            "diff": dg.MetadataValue.md(f"```diff\n{snap.diff}\n```"),
        },
    )


def bench_cell_keys(
    tasks_dir: str | None = None, *, top_ups: bool = False
) -> tuple[list[str], list[str]]:
    """Comparator and candidate cell keys from bench.yaml (empty when it cannot be read).

    ``top_ups``: every partition key, the sequential top-up cells of the implementation candidate
    included (``BenchConfig.arm_runs``) — what the assets are partitioned by; otherwise the
    ``runs`` cells every generation plans.
    """
    cfg, _ = location_bench_config(tasks_dir)
    if cfg is None:  # invalid or missing: the sync sensor and `wfbench validate` report it
        return [], []

    def keys(arms: list[str]) -> list[str]:
        return cell_keys({a: cfg.arm_runs(a) if top_ups else cfg.runs for a in arms})

    return keys(cfg.comparator_arms()), keys(cfg.candidate_arms())


def _partition(context: dg.AssetExecutionContext) -> tuple[str, str]:
    key = context.partition_key
    if not isinstance(key, dg.MultiPartitionKey):  # a run launched with a plain partition tag
        pdef = context.assets_def.partitions_def
        assert isinstance(pdef, dg.MultiPartitionsDefinition), pdef
        key = pdef.get_partition_key_from_str(str(key))
    dims = key.keys_by_dimension
    return dims["task"], dims["cell"]


Upstream = Callable[[dg.AssetKey, "str | None"], dict[str, Any]]
"""Reads an upstream's latest materialization metadata, raising when it has none."""


def prefetched_upstream(instance: dg.DagsterInstance, tasks: Iterable[str]) -> Upstream:
    """An :data:`Upstream` that reads every task's input metadata in bulk up front.

    One :func:`latest_metadata_by_partition` per partitioned input asset and one read per
    unpartitioned one, instead of five queries per task: an ad-hoc decision at 1,000 tasks asks
    for every task's inputs. A partition with no materialization raises exactly as
    :func:`upstream_metadata` does.
    """
    wanted = sorted(set(tasks))
    found: dict[tuple[dg.AssetKey, str | None], dict[str, Any]] = {}
    for key in (task_bindings.key, oracle_snapshots.key, sanitized_graphs.key):
        for part, md in latest_metadata_by_partition(instance, key, wanted).items():
            found[key, part] = md
    envs = latest_metadata_by_partition(instance, task_environments.key, wanted)
    found.update({(task_environments.key, p): md for p, md in envs.items()})

    def read(key: dg.AssetKey, partition: str | None) -> dict[str, Any]:
        if (key, partition) not in found:
            found[key, partition] = upstream_metadata(instance, key, partition)
        return found[key, partition]

    return read


def load_cell_inputs(
    instance: dg.DagsterInstance,
    bench: BenchResource,
    task: str,
    candidate: bool,
    *,
    upstream: Upstream | None = None,
    benchmark: Benchmark | None = None,
) -> CellInputs:
    """A task's cell inputs from the latest materializations of the upstream assets
    (``upstream``: a bulk reader from :func:`prefetched_upstream`, default one query each;
    ``benchmark``: the suite already loaded, default the task's file read again)."""
    up: Upstream = upstream or (lambda key, part: upstream_metadata(instance, key, part))
    artifacts = bench.artifacts()
    bound = binding_mod.load(Path(str(up(task_bindings.key, task)["record_path"])))
    manifest = Path(str(up(oracle_snapshots.key, task)["record_path"]))
    snapshot = oracle_mod.OracleSnapshot.model_validate(json.loads(manifest.read_text()))
    graph_md = up(sanitized_graphs.key, task)
    template = load_template(artifacts, str(graph_md["sanitized_sha"]))
    graph = load_graph_info(artifacts, str(graph_md["graph_digest"]))
    if template is None or graph is None:
        raise InputError(f"sanitized_graphs[{task}] artifacts are missing; re-materialize it")
    # The template is content-addressed by its sanitized SHA, so two tasks whose trees sanitize
    # identically share one; which task it was built from is this partition's metadata.
    source_sha = str(graph_md.get("source_sha") or template.info.source_sha)
    if snapshot.digest != bound.oracle_digest or source_sha != bound.resolved_sha:
        raise InputError(
            f"inputs of task {task} are out of step with task_bindings[{task}]; "
            "re-materialize oracle_snapshots and sanitized_graphs"
        )
    skills_md = up(incumbent_skills.key, None)
    skills_dir = Path(str(skills_md["record_path"]))
    skills = SkillsSnapshot.model_validate(json.loads((skills_dir / "manifest.json").read_text()))
    ov = ov_dir = None
    if candidate:
        ov_md = up(candidate_overlay.key, None)
        ov_root = Path(str(ov_md["record_path"]))
        ov = overlay_mod.OverlaySnapshot.model_validate(
            json.loads((ov_root / "overlay.json").read_text())
        )
        ov_dir = ov_root / "files"
    suite = benchmark if benchmark is not None and task in benchmark.tasks else None
    spec = (suite or bench.load(tasks=[task])).task(task).spec
    env, env_dir = _environment(up, spec.environment is not None, task, bound.resolved_sha)
    return CellInputs(
        binding=bound,
        oracle=snapshot,
        oracle_payloads=oracle_mod.verify_stored(snapshot, artifacts),
        template=template,
        graph=graph,
        graph_file=artifacts.graph(graph.digest) / "graph.json",
        skills=skills,
        skills_dir=skills_dir / "files",
        overlay=ov,
        overlay_dir=ov_dir,
        environment=env,
        environment_dir=env_dir,
    )


def _environment(
    up: Upstream, declared: bool, task: str, resolved_sha: str
) -> tuple[EnvironmentRecord | None, Path | None]:
    """The task environment from ``task_environments`` (none for a task that declares none)."""
    if not declared:
        return None, None
    md = up(task_environments.key, task)
    if not md.get("digest"):
        raise InputError(f"task_environments[{task}] has no environment; re-materialize it")
    env_dir = Path(str(md["record_path"]))
    record = load_environment(env_dir)
    if record.digest != md["digest"] or record.resolved_sha != resolved_sha:
        raise InputError(
            f"task_environments[{task}] is out of step with task_bindings[{task}]; "
            "re-materialize task_environments"
        )
    return record, env_dir


def cell_metadata(record: CellRecord, path: Path, lineage: CellMaterialization) -> dict[str, Any]:
    """What a reviewer reads on a cell partition in the UI: the lineage, then record facts.

    Only the lineage (:class:`~bench_assets.decision.documents.CellMaterialization`) is read back;
    the record facts are for display, derived from the record, ``None`` (null) when unmeasured.
    """
    md: dict[str, Any] = {
        "resolved": record.resolved,
        "verify_passed": record.verify_passed,
        "oracle_passed": record.oracle_passed,
        "error_detail": record.error_detail or None,
        "cost_usd": record.cost_usd,
        "total_tokens": record.total_tokens,
        "turns": record.turns,
        "churn": (
            f"{record.churn_files} files, +{record.churn_insertions} -{record.churn_deletions}"
        ),
        "protected_changed": ", ".join(record.protected_changed) or None,
        "binding_digest": record.binding_digest,
        "oracle_digest": record.oracle_digest,
        "graph_digest": record.graph_digest,
        "skills_digest": record.skills_digest,
        "overlay_digest": record.overlay_digest,
        "duration_s": record.duration_s,
        "verify_tests": record.verify_run.detail if record.verify_run is not None else None,
        "oracle_tests": record.oracle_run.detail if record.oracle_run is not None else None,
        "runner_files": (
            ", ".join(f"{c.path} ({c.change}, {c.action})" for c in record.runner_files) or None
        ),
    }
    md |= lineage.to_metadata()
    md["record_path"] = dg.MetadataValue.path(str(path))
    if record.patch is not None:
        md["patch_path"] = dg.MetadataValue.path(record.patch.path)
    if record.transcript is not None:
        md["transcript_path"] = dg.MetadataValue.path(record.transcript.path)
    return md


def _previous(context: dg.AssetExecutionContext, task: str, cell: str) -> CellView | None:
    """This partition's latest materialization with its record (None: none, or record gone)."""
    record = latest_record(context.instance, context.asset_key, str(context.partition_key))
    if record is None:
        return None
    return load_cell(task, cell, context.asset_key.to_user_string(), record_metadata(record))


def _materialize_cell(
    context: dg.AssetExecutionContext, config: CellConfig, bench: BenchResource, candidate: bool
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    task, cell = _partition(context)
    arm, run = parse_cell_key(cell)
    b = bench.load(tasks=[task])
    if arm not in b.config.arms:
        raise InputError(f"cell {cell}: arm {arm!r} is not in bench.yaml")
    inputs = load_cell_inputs(context.instance, bench, task, candidate)
    adapter = make_adapter(b, b.config.arms[arm])
    identity = cell_identity(b, task, arm, run, inputs, adapter)
    if config.adopt_record_id:
        return _adopt(context, bench, task, cell, config, identity_digest(identity))
    prev = _previous(context, task, cell)
    verdict = reuse_verdict(
        PriorCell.from_view(prev) if prev else None,
        identity,
        "candidate" if candidate else "comparator",
        arm=arm,
        canary=False,
        max_age_days=b.config.reuse.max_age_days,
        now=dt.datetime.now(dt.UTC),
    )
    if not config.force and verdict.reuse and prev is not None:
        mat = prev.materialization
        lineage = mat.model_copy(
            update={
                "reused": True,
                "reused_from_run": prev.source_run_id,
                "reused_data_version": prev.data_version,
                "ran_because": None,
            }
        )
        context.log.info(f"{task} {cell}: reused the record from run {prev.source_run_id}")
        return dg.MaterializeResult(
            data_version=dg.DataVersion(str(prev.data_version or prev.record.data_version)),
            metadata=cell_metadata(prev.record, Path(mat.record_path), lineage),
        )
    reason = "force: true" if config.force else verdict.reason
    context.log.info(f"{task} {cell}: running a fresh cell ({reason})")
    record, path = run_cell(
        b,
        task,
        arm,
        run,
        inputs,
        bench.artifacts(),
        generation=config.generation or None,
        redactor=from_environment(_secret_names(b)),
        adapter=adapter,
    )
    md = cell_metadata(record, path, CellMaterialization.fresh(record, path, reason))
    return dg.MaterializeResult(data_version=dg.DataVersion(record.data_version), metadata=md)


def _adopt(
    context: dg.AssetExecutionContext,
    bench: BenchResource,
    task: str,
    cell: str,
    config: CellConfig,
    identity: str,
) -> dg.MaterializeResult:  # type: ignore[type-arg]
    """Materialize a record an interrupted run wrote but never got recorded (no session runs)."""
    path = bench.artifacts().cell(task, cell, config.adopt_record_id) / "record.json"
    record = load_record(path)
    if (
        record.identity_digest != identity
        or record.generation != (config.generation or None)
        or record.ad_hoc
        or (record.task, record.cell) != (task, cell)
    ):
        raise InputError(
            f"{path}: cannot adopt: it was not made for {task} {cell} with this identity in "
            f"generation {config.generation or '(none)'}"
        )
    lineage = CellMaterialization.fresh(
        record, path, "adopted: the run that paid for it was killed before it was recorded"
    )
    context.log.info(f"{task} {cell}: adopted the finished record {config.adopt_record_id}")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(record.data_version),
        metadata=cell_metadata(record, path, lineage),
    )


def _secret_names(b: Any) -> list[str]:
    names: list[str] = []
    for arm in b.config.arms.values():
        names += list(getattr(arm.agent, "env", []) or [])
    return names


def build_cell_assets(
    comparator_keys: list[str], candidate_keys: list[str], *, pool: str | None = "agent_sessions"
) -> list[dg.AssetsDefinition]:
    """The two cell assets for the given cell keys (bench.yaml arms × runs).

    ``pool``: the concurrency pool a cell's op is in; ``None`` only for a cell paid inside a
    ``cell_batch`` run, which holds the ``agent_sessions`` slot for it
    (:mod:`bench_assets.driver.cellbatch`)."""
    task_dep = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="task")
    deps = [
        dg.AssetDep(task_bindings, partition_mapping=task_dep),
        dg.AssetDep(oracle_snapshots, partition_mapping=task_dep),
        dg.AssetDep(sanitized_graphs, partition_mapping=task_dep),
        dg.AssetDep(task_environments, partition_mapping=task_dep),
        dg.AssetDep(incumbent_skills),
    ]

    def partitions(keys: list[str]) -> dg.MultiPartitionsDefinition:  # type: ignore[type-arg]
        return dg.MultiPartitionsDefinition(
            {"task": task_partitions, "cell": dg.StaticPartitionsDefinition(keys)}
        )

    @dg.asset(
        name="comparator_cells",
        partitions_def=partitions(comparator_keys),
        deps=deps,
        group_name=GROUP,
        owners=OWNERS,
        kinds={"python", "git"},
        code_version=CELL_CODE_VERSION,
        pool=pool,
        description=(
            "One cell (task × <arm>.r<k>) of a comparator arm (incumbent, baseline): the agent "
            "session in a sandboxed worktree, graded by the visible verify command and the hidden "
            "oracle. Memoized: an unchanged identity re-records the previous result as reused."
        ),
    )
    def comparator_cells(
        context: dg.AssetExecutionContext, config: CellConfig, bench: BenchResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        return _materialize_cell(context, config, bench, candidate=False)

    @dg.asset(
        name="candidate_cells",
        partitions_def=partitions(candidate_keys),
        deps=[*deps, dg.AssetDep(candidate_overlay)],
        group_name=GROUP,
        owners=OWNERS,
        kinds={"python", "git"},
        code_version=CELL_CODE_VERSION,
        pool=pool,
        description=(
            "One cell of a candidate arm (incumbent skills + this generation's overlay), graded "
            "like comparator cells. A new overlay makes only these cells stale."
        ),
    )
    def candidate_cells(
        context: dg.AssetExecutionContext, config: CellConfig, bench: BenchResource
    ) -> dg.MaterializeResult:  # type: ignore[type-arg]
        return _materialize_cell(context, config, bench, candidate=True)

    return [comparator_cells, candidate_cells]


@dg.definitions
def cell_definitions() -> dg.Definitions:
    """Cell assets with keys from ``$WFBENCH_TASKS/bench.yaml`` (default ``tasks/``)."""
    comparator, candidate = bench_cell_keys(top_ups=True)
    return dg.Definitions(assets=[candidate_overlay, *build_cell_assets(comparator, candidate)])
