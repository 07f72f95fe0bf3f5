"""Where artifacts live: one root folder, content-addressed below it.

Layout (all paths relative to the artifact root)::

    repos/<task>.git                 inline task repositories (deterministic commits)
    bindings/<task>/<digest>.json    task bindings
    oracles/<digest>/                oracle snapshots: files/ + manifest.json, read-only
    templates/<sanitized-sha>/       sanitized clone templates (a work tree with its .git)
    graphs/<digest>/graph.json       sanitized code graphs (+ stats.json), read-only
    skills/<digest>/                 incumbent skill snapshots, read-only
    overlays/<digest>/               candidate overlay snapshots, read-only
    environments/<key>/              task environments: site-packages/, env.json, build.log (r/o)
    cells/<task>/<cell>/<record>/    cell records and their artifacts
    work/<record>/                   live cell worktrees (removed when the cell ends)
    aggregates/sets/<digest>.json    every task's aggregate of one evidence set
    aggregates/<task>/<digest>.json  per-task aggregates (before aggregate sets)
    decisions/<digest>/              promotion decisions: decision.json + gate-input.json
    reports/<digest>/                benchmark reports: report.md + report.html
    ledger/decisions.jsonl           the hash-chained decision ledger (+ its head anchor)
    generations/<g>/                 a generation's manifest: manifest.json + tasks/<task>.json
    tasks/<digest>/                  read-only snapshots of the benchmark directory
    locks/writer.lock                the one-writer lock (owner pid/host/start time inside)
    tmp/                             staging areas; anything here may be deleted

The root defaults to ``$WFBENCH_ARTIFACTS``, else ``$DAGSTER_HOME/artifacts``, else
``./dagster_home/artifacts``; a shared volume can be configured for multi-machine runs.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from bench_assets.kernel.fsutil import staging_dir


def default_artifact_root() -> Path:
    """The artifact root from the environment (see module docstring)."""
    explicit = os.environ.get("WFBENCH_ARTIFACTS")
    if explicit:
        return Path(explicit).resolve()
    home = os.environ.get("DAGSTER_HOME")
    base = Path(home) if home else Path("dagster_home")
    return (base / "artifacts").resolve()


@dataclass(frozen=True)
class ArtifactStore:
    """Paths of every artifact kind under one root."""

    root: Path

    def repo(self, task_id: str) -> Path:
        """Bare repository holding an inline task's commits."""
        return self.root / "repos" / f"{task_id}.git"

    def binding(self, task_id: str, digest: str) -> Path:
        """A stored binding record."""
        return self.root / "bindings" / task_id / f"{digest}.json"

    def oracle(self, digest: str) -> Path:
        """An oracle snapshot folder."""
        return self.root / "oracles" / digest

    def template(self, sanitized_sha: str) -> Path:
        """A sanitized template work tree."""
        return self.root / "templates" / sanitized_sha

    def graph(self, digest: str) -> Path:
        """A sanitized graph folder."""
        return self.root / "graphs" / digest

    def skills(self, digest: str) -> Path:
        """A skill-tree snapshot folder."""
        return self.root / "skills" / digest

    def overlay(self, digest: str) -> Path:
        """A candidate-overlay snapshot folder."""
        return self.root / "overlays" / digest

    def environment(self, key: str) -> Path:
        """A task environment, keyed by its environment spec and base commit."""
        return self.root / "environments" / key

    def cell(self, task_id: str, cell: str, record_id: str) -> Path:
        """Folder holding one cell record (``record.json``) and its artifacts."""
        return self.cells_root() / task_id / cell / record_id

    def cells_root(self) -> Path:
        """Folder holding every cell record, ``<task>/<cell>/<record>/`` below it."""
        return self.root / "cells"

    def work(self, record_id: str) -> Path:
        """Private working folder of one running cell."""
        return self.work_root() / record_id

    def work_root(self) -> Path:
        """Folder holding the working folders of running (or killed) cells."""
        return self.root / "work"

    def aggregate(self, task_id: str, digest: str) -> Path:
        """A stored per-task aggregate."""
        return self.root / "aggregates" / task_id / f"{digest}.json"

    def aggregate_set(self, digest: str) -> Path:
        """A stored aggregate set: every task's aggregate of one evidence set."""
        return self.root / "aggregates" / "sets" / f"{digest}.json"

    def decision(self, digest: str) -> Path:
        """A promotion decision's folder (``decision.json`` and ``gate-input.json``)."""
        return self.root / "decisions" / digest

    def report(self, digest: str) -> Path:
        """A benchmark report's folder (``report.md`` and ``report.html``)."""
        return self.root / "reports" / digest

    def ledger(self) -> Path:
        """The decision ledger file."""
        return self.root / "ledger" / "decisions.jsonl"

    def writer_lock(self) -> Path:
        """The lock file of the one writer (evolve, decide, apply) of this store."""
        return self.root / "locks" / "writer.lock"

    def generation(self, generation: str) -> Path:
        """A generation's folder: its manifest (header + one file per planned task)."""
        return self.root / "generations" / generation

    def tasks_snapshot(self, digest: str) -> Path:
        """A read-only snapshot of the benchmark directory a generation's runs read."""
        return self.root / "tasks" / digest

    def staging(self, prefix: str) -> Path:
        """A fresh private staging folder on the same filesystem as the stores."""
        return staging_dir(self.root / "tmp", prefix)
