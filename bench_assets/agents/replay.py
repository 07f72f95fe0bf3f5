"""The ``replay`` adapter: apply a recorded prediction instead of running an agent.

Prediction files are in any common producer format (:mod:`bench_assets.agents.predictions`:
SWE-bench JSONL, a JSON list, a ``preds.json`` keyed by instance id, OpenHands ``output.jsonl``),
optionally extended with ``run``, ``usage`` (the recorded tokens, cost, turns and duration; missing
values stay unknown), ``phases`` (per phase of a multi-session arm: its patch and usage) and
``review_output`` (for a review arm: the text written to the review output file). The producer
(``model_name_or_path``) is reported to the cell record. The patch is applied with ``git apply``
inside the sandbox, so replaying untrusted predictions is as contained
as a live session. A patch that does not apply is ``patch-failed``: an unresolved cell, not an
excluded session error. Users can grade patches produced elsewhere this way (``wfbench grade``).

A predictions file is parsed once per process (:func:`cached_predictions`): planning builds an
adapter per task and arm, and re-reading a file of N tasks for each of them made planning
quadratic. The cache is keyed by the file's identity (path, inode, size, modification time), so
an edited file is read again.
"""

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from bench_assets.agents.base import SCRATCH, SessionContext, SessionResult, Usage, session_sandbox
from bench_assets.agents.predictions import Prediction, load_predictions
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.fsutil import atomic_write_text
from bench_assets.kernel.hashing import sha256_json
from bench_assets.sandbox.process import Isolation, run, sandbox_env

__all__ = ["Prediction", "ReplayAdapter", "cached_predictions", "load_predictions"]

_CACHE_SIZE = 16
_cache: dict[tuple[str, int, int, int], Mapping[tuple[str, int], Prediction]] = {}
_cache_lock = threading.Lock()


def cached_predictions(path: Path) -> Mapping[tuple[str, int], Prediction]:
    """:func:`load_predictions`, parsed once per process while the file is unchanged (read-only).

    Raises:
        InputError: The file cannot be read or a line is invalid (nothing is cached then).
    """
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read predictions: {e}") from e
    key = (str(Path(path).resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    loaded = MappingProxyType(load_predictions(path))
    with _cache_lock:
        for stale in [k for k in _cache if k[0] == key[0]]:
            del _cache[stale]
        while len(_cache) >= _CACHE_SIZE:
            del _cache[next(iter(_cache))]
        _cache[key] = loaded
    return loaded


class ReplayAdapter:
    """Applies recorded patches and reports the recorded usage."""

    name = "replay"

    def __init__(self, predictions: Mapping[tuple[str, int], Prediction], source: str) -> None:
        self._predictions = predictions
        self._source = source

    @classmethod
    def from_file(cls, path: Path) -> "ReplayAdapter":
        """An adapter over a predictions file (parsed once per process, see module docstring)."""
        return cls(cached_predictions(path), path.name)

    def identity(self) -> dict[str, object]:
        """The adapter kind and the predictions file name."""
        return {"adapter": self.name, "source": self._source}

    def cell_identity(self, task_id: str, run: int) -> dict[str, object]:
        """Identity of one cell's recorded input: the digest of its prediction line."""
        p = self._predictions.get((task_id, run))
        # Metadata (the producer's other fields) changes nothing graded, so it is not identity.
        digest = sha256_json(p.model_dump(exclude={"metadata"})) if p else None
        return {**self.identity(), "prediction": digest}

    def has(self, task_id: str, run: int) -> bool:
        """Whether a prediction exists for the cell."""
        return (task_id, run) in self._predictions

    def run(self, ctx: SessionContext) -> SessionResult:
        """Apply the cell's patch in the worktree."""
        p = self._predictions.get((ctx.task_id, ctx.run))
        if p is None:
            return SessionResult(
                ok=False,
                usage=Usage(),
                error_kind=ErrorKind.INFRA_ERROR,
                error_detail=f"no recorded prediction for {ctx.task_id} run {ctx.run} "
                f"in {self._source}",
            )
        patch, usage = p.model_patch, p.usage
        if ctx.phase is not None:
            phase = (p.phases or {}).get(ctx.phase)
            if phase is None:
                return SessionResult(
                    ok=False,
                    usage=Usage(),
                    error_kind=ErrorKind.INFRA_ERROR,
                    error_detail=f"no recorded prediction for {ctx.task_id} run {ctx.run} "
                    f"phase {ctx.phase} in {self._source}",
                )
            patch, usage = phase.model_patch, phase.usage
        transcript = _transcript(p, ctx.phase)
        producer = p.model_name_or_path
        if ctx.review_output is not None and p.review_output is not None:
            # The recorded bytes, as the agent wrote them: parsing them is the grader's job.
            atomic_write_text(ctx.review_output / "review-output.json", p.review_output)
        if not patch.strip():
            return SessionResult(ok=True, usage=usage, transcript=transcript, producer=producer)
        atomic_write_text(ctx.scratch / "patch.diff", patch)
        res = run(
            ["git", "apply", "--whitespace=nowarn", f"{SCRATCH}/patch.diff"],
            isolation=Isolation.SANDBOX,
            env=sandbox_env(),
            timeout_s=min(ctx.timeout_s, 300),
            sandbox=session_sandbox(ctx, network=False),
        )
        if not res.ok:
            return SessionResult(
                ok=False,
                usage=usage,
                error_kind=ErrorKind.PATCH_FAILED,
                error_detail=f"recorded patch does not apply: {res.tail(400)}",
                transcript=transcript,
                wall_s=res.duration_s,
                producer=producer,
            )
        return SessionResult(
            ok=True, usage=usage, transcript=transcript, wall_s=res.duration_s, producer=producer
        )


def _transcript(p: Prediction, phase: str | None) -> bytes:
    """What the replay stores as its transcript: the recorded stream-json transcript when the
    prediction carries one (skill-eval graders read it), else the producer, run, phase and the
    producer's metadata."""
    if p.transcript is not None and phase is None:
        return p.transcript.encode()
    doc = {"replayed": p.model_name_or_path, "run": p.run, "phase": phase, "metadata": p.metadata}
    return json.dumps(doc, default=str).encode()
