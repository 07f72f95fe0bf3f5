"""Agent proposers: a sandboxed agent writes the next candidate overlay.

Proposing is the step of a generation (:mod:`bench_assets.driver.evolve`) that picks the
candidate, before anything is planned or paid for.

The proposer's workspace holds a copy of the incumbent skill tree (``skills/``), a bounded and
redacted evidence bundle from the previous generation (``evidence.json``: its decision reasons,
the worst cells — unresolved first, then the most expensive — and the previous proposal's title),
and its instructions (``PROPOSE.md``). It writes files under ``overlay/``, laid out like the skill
tree. The overlay is validated — only regular files, safe relative paths under the tree, at most
``max_files`` files of ``max_file_bytes`` each, at least one file different from the incumbent —
and stored as a new queued candidate (``origin: proposer``). Anything else stops the generation
before a single cell is paid for (:class:`~bench_assets.kernel.errors.InputError`).
"""

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from bench_assets.agents.base import SessionContext
from bench_assets.agents.command import CommandAdapter
from bench_assets.config.models import ClaudeCodeAgent, CommandAgent, safe_relative_path
from bench_assets.decision.documents import CellView, DecisionDocument
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.fsutil import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    remove_tree,
)
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import Benchmark

MAX_EVIDENCE_CELLS = 12
MAX_REASON_CHARS = 600

INSTRUCTIONS = """\
# Propose one improvement to the skill tree

`skills/` is the incumbent skill tree given to a coding agent (Claude Code skills: one folder per
skill with a SKILL.md). `evidence.json` summarizes the last benchmark generation: the decision and
its reasons, and the cells that went worst (unresolved first, then the most expensive).

Write your proposal under `overlay/`, laid out exactly like `skills/`: each file you write there
replaces the file at the same path in the tree, or adds it. Change as little as needed for one
clear hypothesis about making the agent cheaper or more often right. Also write `overlay.json`
with `{"title": "<one line>", "rationale": "<why this should help>"}` at the workspace root.
Do not write anywhere else.
"""


def evidence_bundle(
    decision: DecisionDocument | None, cells: list[CellView], redactor: Redactor
) -> dict[str, Any]:
    """A bounded, redacted summary of the previous generation for the proposer.

    The worst cells come first: unresolved before resolved, then the most expensive; a cell whose
    cost was not measured sorts after every measured one of its kind and says ``null``.
    """

    def badness(c: CellView) -> tuple[bool, bool, float]:
        cost = c.record.cost_usd
        return (c.record.resolved, cost is None, -(cost or 0.0))

    worst = sorted(cells, key=badness)[:MAX_EVIDENCE_CELLS]
    bundle = {
        "previous_generation": decision.generation if decision else None,
        "previous_candidate": decision.candidate if decision else None,
        "decision": decision.decision.decision if decision else None,
        "reasons": [r[:MAX_REASON_CHARS] for r in decision.decision.reasons] if decision else [],
        "worst_cells": [
            {
                "task": c.task,
                "arm": c.arm,
                "resolved": c.record.resolved,
                "verify_passed": c.record.verify_passed,
                "oracle_passed": c.record.oracle_passed,
                "error_kind": c.record.error_kind.value if c.record.error_kind else None,
                "cost_usd": c.record.cost_usd,
                "turns": c.record.turns,
            }
            for c in worst
        ],
    }
    redacted = redactor.deep(bundle)
    assert isinstance(redacted, dict)
    return redacted


def _collect_overlay(
    overlay: Path, skills_dir: Path, max_files: int, max_bytes: int
) -> dict[str, bytes]:
    if not overlay.is_dir() or overlay.is_symlink():
        raise InputError("proposer wrote no overlay/ folder")
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(overlay):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                raise InputError(f"proposer overlay contains a symlink: {p.relative_to(overlay)}")
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise InputError(f"proposer overlay contains a special file: {name}")
        for name in filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(overlay).as_posix()
            try:
                safe_relative_path(rel, "overlay file")
            except ValueError as e:
                raise InputError(f"proposer overlay: {e}") from e
            size = p.stat().st_size
            if size > max_bytes:
                raise InputError(f"proposer overlay file {rel} is {size} bytes (max {max_bytes})")
            files[rel] = p.read_bytes()
    if not files:
        raise InputError("proposer overlay is empty")
    if len(files) > max_files:
        raise InputError(f"proposer overlay has {len(files)} files (max {max_files})")
    if all(
        (skills_dir / rel).is_file() and (skills_dir / rel).read_bytes() == data
        for rel, data in files.items()
    ):
        raise InputError("proposer overlay is identical to the incumbent skill tree")
    return files


def propose(
    bench: Benchmark,
    artifacts: ArtifactStore,
    generation: str,
    evidence: dict[str, Any],
    redactor: Redactor,
) -> str:
    """Run the configured proposer agent; store its overlay as a queued candidate; return its id."""
    cfg = bench.config.proposer
    work = artifacts.staging(f"proposer-{generation}")
    try:
        workspace = work / "workspace"
        shutil.copytree(bench.skills_dir, workspace / "skills")
        atomic_write_json(workspace / "evidence.json", evidence)
        atomic_write_text(workspace / "PROPOSE.md", INSTRUCTIONS)
        scratch = work / "scratch"
        scratch.mkdir()
        if cfg.kind == "command":
            adapter: Any = CommandAdapter(
                CommandAgent(
                    adapter="command",
                    argv=list(cfg.argv or []),
                    network=cfg.network,
                    env=list(cfg.env),
                )
            )
            names = list(cfg.env)
        elif cfg.kind == "claude-code":
            from bench_assets.agents.claude_code import ClaudeCodeAdapter

            spec = cfg.agent or ClaudeCodeAgent(
                adapter="claude-code", allowed_tools=["Read", "Glob", "Grep", "Write", "Edit"]
            )
            adapter = ClaudeCodeAdapter(spec, cli=bench.config.agents.claude_code)
            names = list(spec.env)
        else:
            raise InputError(f"proposer kind {cfg.kind!r} does not run an agent")
        ctx = SessionContext(
            task_id=f"proposal-{generation}",
            arm="proposer",
            run=0,
            prompt=INSTRUCTIONS,
            model=bench.config.model,
            effort=bench.config.effort,
            workdir=workspace,
            scratch=scratch,
            timeout_s=float(cfg.timeout_s),
            secrets_env={n: os.environ[n] for n in names if n in os.environ},
        )
        result = adapter.run(ctx)
        if not result.ok:
            raise InputError(
                f"proposer agent failed ({result.error_kind}): "
                f"{redactor.text(result.error_detail)[:500]}; no cell was paid for"
            )
        files = _collect_overlay(
            workspace / "overlay", bench.skills_dir, cfg.max_files, cfg.max_file_bytes
        )
        meta: dict[str, Any] = {}
        meta_file = workspace / "overlay.json"
        if meta_file.is_file() and not meta_file.is_symlink():
            try:
                meta = json.loads(meta_file.read_text(encoding="utf-8")[:20_000])
            except (json.JSONDecodeError, UnicodeDecodeError):
                meta = {}
        cid = f"{generation}-proposal"
        folder = bench.root / cfg.queue / cid
        if folder.exists():
            raise InputError(f"{folder} already exists; remove it or evaluate it from the queue")
        staging = bench.root / cfg.queue / f".{cid}.tmp"
        remove_tree(staging)
        for rel, data in files.items():
            atomic_write_bytes(staging / "files" / rel, data)
        title = redactor.text(str(meta.get("title") or f"proposal of {generation}"))[:200]
        rationale = redactor.text(str(meta.get("rationale") or ""))[:4000]
        body = (
            f"id: {cid}\ntitle: {json.dumps(title)}\norigin: proposer\n"
            f"rationale: {json.dumps(rationale)}\n"
        )
        atomic_write_text(staging / "candidate.yaml", body)
        os.rename(staging, folder)
        return cid
    finally:
        remove_tree(work)
