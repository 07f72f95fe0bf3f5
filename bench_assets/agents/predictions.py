"""Predictions files in every common producer format, read into one typed shape.

Users of agent benchmarks already hold predictions in SWE-bench's formats; each one is accepted as
it is written by its producer:

- **JSON Lines** (SWE-bench ``predictions.jsonl``): one object per line with ``instance_id``,
  ``model_patch``, ``model_name_or_path``;
- **a JSON list** of those objects;
- **a JSON object keyed by instance id** (SWE-agent / mini-swe-agent ``preds.json``); a value's own
  ``instance_id``, when present, must equal its key;
- **OpenHands** ``output.jsonl``: the patch is ``test_result.git_patch``, the producer
  ``metadata.llm_config.model``, the cost ``metrics.accumulated_cost``.

In every format ``model_patch: null`` or a missing patch is an empty patch (graded as no work),
``model_name_or_path`` is optional and recorded in the cell record as the producer, ``run``,
``usage``, ``phases`` (per phase of a multi-session arm: its patch and usage) and ``review_output``
(for a review arm: the text written to the review output file) and ``transcript`` (the run's
stream-json events, read by skill-eval graders) are wfbench's own optional
fields, and every other field is kept as metadata (never an error). Several runs of one instance
come either from ``run`` or from repeated instance ids, which
take the next free run number in file order. Errors name the file, the line (or key, or list
index) and the field.
"""

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench_assets.agents.base import Usage
from bench_assets.kernel.errors import InputError

MAX_METADATA_BYTES = 16_384
"""Metadata beyond this (serialized) is dropped field by field, largest first, and the dropped
names listed under ``_dropped``: producers put whole trajectories there (``history``)."""

OWN_FIELDS = (
    "instance_id",
    "model_patch",
    "model_name_or_path",
    "run",
    "usage",
    "phases",
    "review_output",
    "transcript",
)


class PhasePrediction(BaseModel):
    """What one phase of a multi-session arm recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_patch: str = ""
    usage: Usage = Field(default_factory=Usage)


class Prediction(BaseModel):
    """One prediction, whatever format it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str = Field(min_length=1)
    model_patch: str = ""
    model_name_or_path: str | None = None
    run: int = Field(default=0, ge=0)
    usage: Usage = Field(default_factory=Usage)
    phases: dict[str, PhasePrediction] | None = None
    """For an arm with phases: each phase's patch and usage (``model_patch`` is then unused)."""
    review_output: str | None = None
    """For a review arm: the text the agent wrote to ``/review-output/review-output.json``
    (absent: it wrote nothing)."""
    transcript: str | None = None
    """The run's ``claude -p --output-format stream-json --verbose`` events, one JSON object per
    line, exactly as printed (a list of event objects is accepted and written one per line). The
    replay stores it as the cell's transcript; skill-eval graders read it."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The producer's other fields (bounded, see :data:`MAX_METADATA_BYTES`)."""


Predictions = dict[tuple[str, int], Prediction]


def _bounded(extra: dict[str, Any]) -> dict[str, Any]:
    sizes = {k: len(json.dumps(v, default=str)) for k, v in extra.items()}
    kept = dict(extra)
    dropped: list[str] = []
    for k in sorted(sizes, key=lambda k: -sizes[k]):
        if sum(sizes[j] for j in kept) <= MAX_METADATA_BYTES:
            break
        del kept[k]
        dropped.append(k)
    if dropped:
        kept["_dropped"] = sorted(dropped)
    return kept


def _openhands(obj: dict[str, Any]) -> dict[str, Any]:
    """An OpenHands ``output.jsonl`` record in the common shape (its other fields as metadata)."""
    out = {k: v for k, v in obj.items() if k not in ("test_result",)}
    result = obj.get("test_result")
    if isinstance(result, dict):
        out["model_patch"] = result.get("git_patch")
        rest = {k: v for k, v in result.items() if k != "git_patch"}
        if rest:
            out["test_result"] = rest
    meta = obj.get("metadata")
    if "model_name_or_path" not in obj and isinstance(meta, dict):
        llm = meta.get("llm_config")
        model = llm.get("model") if isinstance(llm, dict) else None
        out["model_name_or_path"] = model if isinstance(model, str) else meta.get("model_name")
    metrics = obj.get("metrics")
    cost = metrics.get("accumulated_cost") if isinstance(metrics, dict) else None
    if "usage" not in obj and isinstance(cost, (int, float)) and not isinstance(cost, bool):
        out["usage"] = {"cost_usd": float(cost)}
    return out


def _normalize(obj: Any, where: str, key_id: str | None) -> tuple[dict[str, Any], bool]:
    """The common shape of one entry, and whether its run was given explicitly."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a prediction must be a JSON object, not {type(obj).__name__}")
    if "test_result" in obj and "model_patch" not in obj:
        obj = _openhands(obj)
    if key_id is not None:
        own = obj.get("instance_id")
        if own is not None and own != key_id:
            raise InputError(
                f"{where}: field 'instance_id' is {own!r} but the entry is keyed {key_id!r}"
            )
        obj = {**obj, "instance_id": key_id}
    common = {k: obj[k] for k in OWN_FIELDS if k in obj}
    events = common.get("transcript")
    if isinstance(events, list):
        if not all(isinstance(e, dict) for e in events):
            raise InputError(f"{where}: field 'transcript': a list must hold event objects")
        common["transcript"] = "".join(
            json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in events
        )
    if common.get("model_patch") is None:
        common["model_patch"] = ""
    if common.get("model_name_or_path") is None:
        common.pop("model_name_or_path", None)
    extra = {k: v for k, v in obj.items() if k not in OWN_FIELDS}
    if extra:
        common["metadata"] = _bounded(extra)
    return common, "run" in obj and obj["run"] is not None


def _validate(common: dict[str, Any], where: str) -> Prediction:
    try:
        return Prediction.model_validate(common)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(entry)"
        raise InputError(f"{where}: field '{field}': {err['msg']}") from None


def _entries(path: Path, text: str) -> list[tuple[str, Any, str | None]]:
    """(where, object, key) for every entry, in file order, whatever the container format."""
    stripped = text.lstrip()
    if not stripped:
        return []
    whole: Any = None
    whole_error: json.JSONDecodeError | None = None
    if stripped[0] in "[{":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as e:
            whole_error = e
        except RecursionError:
            raise InputError(f"{path}: line 1: invalid prediction: nested too deeply") from None
    if isinstance(whole, list):
        return [(f"{path}: entry {i}", o, None) for i, o in enumerate(whole)]
    if isinstance(whole, dict):
        if "instance_id" in whole or "test_result" in whole:
            return [(f"{path}: line 1", whole, None)]  # a one-line JSONL file
        return [(f"{path}: key {k!r}", v, k) for k, v in whole.items()]
    out: list[tuple[str, Any, str | None]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"{path}: line {n}", json.loads(line), None))
        except json.JSONDecodeError as e:
            if whole_error is not None and n == 1 and len(text.splitlines()) > 1:
                raise InputError(
                    f"{path}: not valid JSON, neither as one document (line {whole_error.lineno} "
                    f"column {whole_error.colno}: {whole_error.msg}) nor as JSON Lines (line 1: "
                    f"{e.msg}); predictions are JSONL, a JSON list or an object keyed by "
                    "instance id"
                ) from None
            raise InputError(
                f"{path}: line {n}: invalid prediction: not valid JSON: {e.msg}"
            ) from None
        except RecursionError:
            raise InputError(f"{path}: line {n}: invalid prediction: nested too deeply") from None
    return out


def load_predictions(path: Path) -> Predictions:
    """Predictions keyed by (instance id, run), from any supported format (module docstring).

    Raises:
        InputError: The file cannot be read, is not UTF-8 or not JSON, or an entry is invalid or
            a duplicate (naming the file, the line or key, and the field).
    """
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read predictions: {e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad_line = raw[: e.start].count(b"\n") + 1
        raise InputError(
            f"{path}: line {bad_line}: not UTF-8 (byte 0x{raw[e.start]:02x}); predictions are "
            "JSON in UTF-8"
        ) from None
    text = text.removeprefix("\ufeff")
    out: Predictions = {}
    explicit: list[tuple[str, dict[str, Any]]] = []
    implicit: list[tuple[str, dict[str, Any]]] = []
    for where, obj, key in _entries(path, text):
        common, has_run = _normalize(obj, where, key)
        (explicit if has_run else implicit).append((where, common))
    # Explicit runs first, so an implicit repeat never takes a number an explicit entry names.
    for where, common in explicit:
        p = _validate(common, where)
        if (p.instance_id, p.run) in out:
            raise InputError(
                f"{where}: duplicate prediction for {p.instance_id} run {p.run} (field 'run')"
            )
        out[(p.instance_id, p.run)] = p
    for where, common in implicit:
        p = _validate(common, where)
        run = 0
        while (p.instance_id, run) in out:
            run += 1
        out[(p.instance_id, run)] = p.model_copy(update={"run": run})
    return out
