"""Review arms: the JSON output contract, the hidden labels, and the score (pure, no I/O but reads).

This reproduces the original harness's ``review_scoring.py`` (seed-system §13) exactly.

**Output contract** (``review-json-v1``): the reviewing agent writes one UTF-8 JSON object with
exactly ``schema_version`` (1), ``verdict`` (``approve`` | ``comment`` | ``request_changes``,
case-folded) and ``findings`` (≤ 100), each finding exactly ``id`` (≤ 128 bytes, unique),
``severity`` (``critical`` | ``high`` | ``medium`` | ``low``, case-folded), ``path`` (repo-relative
after ``\\``→``/`` and normalization; never absolute or escaping), ``line`` ≥ 1, ``end_line`` ≥
``line``, ``category`` (case-folded, ≤ 128 bytes), ``scenario``, ``evidence``, ``recommendation``
(each nonblank, ≤ 4096 bytes) and ``blocking`` (bool). ``approve`` has no findings;
``request_changes`` has at least one blocking finding. The file is at most 256 KiB, a regular file
(never a symlink). Every violation raises :class:`ReviewArtifactInvalid` with its own message; the
cell becomes ``review-evidence-invalid`` (excluded, systemic).

**Labels** (hidden, an oracle file): ``{schema_version: 1, findings: [{id, severity, path,
line_start, line_end, category}]}`` with exact keys, positive integers, ``line_end ≥ line_start``
and unique ids. An empty list is a *clean control*.

**Matching**: a finding can match a label iff same path and overlapping line ranges. Both lists
are sorted by their field tuples first, so the order of findings in the JSON never changes the
result. Each finding ranks its candidate labels by (category equal, severity equal, −|line −
label.line_start|, −label span, path, category, line_start), descending, and a
maximum-cardinality bipartite matching is found by augmenting paths (findings in sorted order,
each trying its labels in rank order): one more matched pair always beats a category preference.

**Metrics** (ratios rounded to 6 dp; ``None`` where undefined, never 0 for unknown): see
:func:`score_review`.

Why one file over 500 lines: it mirrors the original's ``review_scoring.py`` one-to-one — the
output contract, the labels, the matching, the score and the fold over repeats are one
specification, and each parsing rule is spelled out with its own message.
"""

import json
import math
import os
import posixpath
import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.kernel.errors import WfbenchError

SCHEMA_VERSION = 1
MAX_ARTIFACT_BYTES = 256 * 1024
MAX_FINDINGS = 100
MAX_ID_BYTES = 128
MAX_PATH_BYTES = 512
MAX_CATEGORY_BYTES = 128
MAX_TEXT_BYTES = 4096
SEVERITY_WEIGHTS = {"critical": 8, "high": 5, "medium": 2, "low": 1}
BLOCKER_SEVERITIES = frozenset({"critical", "high"})
VERDICTS = ("approve", "comment", "request_changes")
OUTPUT_KEYS = frozenset({"schema_version", "verdict", "findings"})
FINDING_KEYS = frozenset(
    {
        "id",
        "severity",
        "path",
        "line",
        "end_line",
        "category",
        "scenario",
        "evidence",
        "recommendation",
        "blocking",
    }
)
LABEL_KEYS = frozenset({"id", "severity", "path", "line_start", "line_end", "category"})

Severity = Literal["critical", "high", "medium", "low"]
Verdict = Literal["approve", "comment", "request_changes"]


class ReviewArtifactInvalid(WfbenchError):
    """The review artifact (or the labels) cannot be scored; the message says which rule broke."""


class Finding(BaseModel):
    """One parsed finding of the agent's review (normalized)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    severity: Severity
    path: str
    line: int
    end_line: int
    category: str
    scenario: str
    evidence: str
    recommendation: str
    blocking: bool


class ReviewOutput(BaseModel):
    """A parsed, valid review artifact."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    verdict: Verdict
    findings: tuple[Finding, ...]


class Label(BaseModel):
    """One hidden expected finding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    severity: Severity
    path: str
    line_start: int
    line_end: int
    category: str


class ReviewScore(BaseModel):
    """The §13 score of one review against its labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    true_positives: int
    false_positives: int
    false_negatives: int
    precision: float | None
    recall: float | None
    f1: float | None
    weighted_precision: float | None
    weighted_recall: float | None
    weighted_f1: float | None
    blocker_recall: float | None
    severity_accuracy: float | None
    category_accuracy: float | None
    grounded_evidence: float | None
    verdict_correct: bool
    clean_control: bool
    clean_pass: bool
    score_finite: bool

    @property
    def oracle_passed(self) -> bool:
        """The review is perfect: no false positive, no miss, and the right verdict."""
        return self.false_positives == 0 and self.false_negatives == 0 and self.verdict_correct


# ---------------------------------------------------------------------------------------------
# parsing


def _bad(msg: str) -> ReviewArtifactInvalid:
    return ReviewArtifactInvalid(msg)


def _bytes_len(s: str) -> int:
    return len(s.encode("utf-8"))


def _text(obj: dict[str, object], key: str, where: str, limit: int) -> str:
    v = obj[key]
    if not isinstance(v, str) or not v.strip():
        raise _bad(f"{where}.{key} must be a nonblank string")
    if _bytes_len(v) > limit:
        raise _bad(f"{where}.{key} is longer than {limit} bytes")
    return v


def _int(obj: dict[str, object], key: str, where: str) -> int:
    v = obj[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise _bad(f"{where}.{key} must be an integer >= 1")
    return v


def _severity(obj: dict[str, object], where: str) -> Severity:
    v = obj["severity"]
    folded = v.casefold() if isinstance(v, str) else None
    if folded not in SEVERITY_WEIGHTS:
        raise _bad(f"{where}.severity must be one of critical, high, medium, low")
    return folded  # type: ignore[return-value]


def normalize_path(value: object, where: str) -> str:
    """A repo-relative POSIX path: ``\\`` becomes ``/``, normalized, never absolute or escaping."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise _bad(f"{where}.path must be a nonblank string without NUL")
    if _bytes_len(value) > MAX_PATH_BYTES:
        raise _bad(f"{where}.path is longer than {MAX_PATH_BYTES} bytes")
    p = value.replace("\\", "/")
    if p.startswith("/") or (len(p) > 1 and p[1] == ":"):
        raise _bad(f"{where}.path {value!r} must be repository-relative, not absolute")
    norm = posixpath.normpath(p)
    if norm in (".", "..") or norm.startswith("../"):
        raise _bad(f"{where}.path {value!r} escapes the repository")
    return norm


def _exact_keys(obj: object, keys: frozenset[str], where: str) -> dict[str, object]:
    if not isinstance(obj, dict):
        raise _bad(f"{where} must be a JSON object")
    got = set(obj)
    if got != keys:
        missing = sorted(keys - got)
        extra = sorted(got - keys)
        raise _bad(
            f"{where} must have exactly the keys {sorted(keys)} (missing {missing}, "
            f"unexpected {extra})"
        )
    return obj


def _finding(raw: object, i: int) -> Finding:
    where = f"findings[{i}]"
    obj = _exact_keys(raw, FINDING_KEYS, where)
    fid = obj["id"]
    if not isinstance(fid, str) or not fid.strip():
        raise _bad(f"{where}.id must be a nonblank string")
    if _bytes_len(fid) > MAX_ID_BYTES:
        raise _bad(f"{where}.id is longer than {MAX_ID_BYTES} bytes")
    line = _int(obj, "line", where)
    end_line = _int(obj, "end_line", where)
    if end_line < line:
        raise _bad(f"{where}.end_line {end_line} is before line {line}")
    category = obj["category"]
    if not isinstance(category, str) or not category.strip():
        raise _bad(f"{where}.category must be a nonblank string")
    if _bytes_len(category) > MAX_CATEGORY_BYTES:
        raise _bad(f"{where}.category is longer than {MAX_CATEGORY_BYTES} bytes")
    if not isinstance(obj["blocking"], bool):
        raise _bad(f"{where}.blocking must be true or false")
    return Finding(
        id=fid,
        severity=_severity(obj, where),
        path=normalize_path(obj["path"], where),
        line=line,
        end_line=end_line,
        category=category.casefold(),
        scenario=_text(obj, "scenario", where, MAX_TEXT_BYTES),
        evidence=_text(obj, "evidence", where, MAX_TEXT_BYTES),
        recommendation=_text(obj, "recommendation", where, MAX_TEXT_BYTES),
        blocking=obj["blocking"],  # type: ignore[arg-type]
    )


def _load_json(data: bytes, what: str) -> object:
    if not data:
        raise _bad(f"{what} is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(f"{what} is not UTF-8 (byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(f"{what} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise _bad(f"{what} is nested too deeply") from None


def parse_review_bytes(data: bytes) -> ReviewOutput:
    """Parse the bytes of a review artifact (see the module docstring for every rule)."""
    if len(data) > MAX_ARTIFACT_BYTES:
        raise _bad(f"review output is larger than {MAX_ARTIFACT_BYTES} bytes")
    top = _exact_keys(_load_json(data, "review output"), OUTPUT_KEYS, "review output")
    sv = top["schema_version"]
    if sv != SCHEMA_VERSION or isinstance(sv, bool) or not isinstance(sv, int):
        raise _bad(f"review output schema_version must be {SCHEMA_VERSION}")
    verdict = top["verdict"].casefold() if isinstance(top["verdict"], str) else None
    if verdict not in VERDICTS:
        raise _bad("review output verdict must be approve, comment or request_changes")
    raw = top["findings"]
    if not isinstance(raw, list):
        raise _bad("review output findings must be a list")
    if len(raw) > MAX_FINDINGS:
        raise _bad(f"review output has more than {MAX_FINDINGS} findings")
    findings = tuple(_finding(f, i) for i, f in enumerate(raw))
    ids = [f.id for f in findings]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _bad(f"review output repeats finding ids: {', '.join(dup)}")
    if verdict == "approve" and findings:
        raise _bad("verdict approve must have no findings")
    if verdict == "request_changes" and not any(f.blocking for f in findings):
        raise _bad("verdict request_changes needs at least one blocking finding")
    return ReviewOutput(verdict=verdict, findings=findings)  # type: ignore[arg-type]


def read_artifact_bytes(path: Path) -> bytes:
    """The bytes of the artifact at ``path``: a regular file ≤ 256 KiB, never through a symlink."""
    if path.is_symlink():
        raise _bad("review output is a symlink")
    if not path.exists():
        raise _bad("review output was never written")
    if not path.is_file():
        raise _bad("review output is not a regular file")
    try:
        if path.stat().st_size > MAX_ARTIFACT_BYTES:
            raise _bad(f"review output is larger than {MAX_ARTIFACT_BYTES} bytes")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_ARTIFACT_BYTES + 1)
    except OSError as e:
        raise _bad(f"review output is unreadable: {e.strerror or e}") from None
    if len(data) > MAX_ARTIFACT_BYTES:
        raise _bad(f"review output is larger than {MAX_ARTIFACT_BYTES} bytes")
    return data


def parse_review_output(path: Path) -> ReviewOutput:
    """Read and parse the artifact at ``path`` (each failure its own message)."""
    return parse_review_bytes(read_artifact_bytes(path))


def parse_labels(data: bytes) -> tuple[Label, ...]:
    """Parse a hidden labels file (exact keys, positive ints, end ≥ start, unique ids)."""
    top = _exact_keys(
        _load_json(data, "review labels"),
        frozenset({"schema_version", "findings"}),
        "review labels",
    )
    sv = top["schema_version"]
    if sv != SCHEMA_VERSION or isinstance(sv, bool) or not isinstance(sv, int):
        raise _bad(f"review labels schema_version must be {SCHEMA_VERSION}")
    raw = top["findings"]
    if not isinstance(raw, list):
        raise _bad("review labels findings must be a list")
    out: list[Label] = []
    for i, item in enumerate(raw):
        where = f"labels[{i}]"
        obj = _exact_keys(item, LABEL_KEYS, where)
        lid = obj["id"]
        if not isinstance(lid, str) or not lid.strip():
            raise _bad(f"{where}.id must be a nonblank string")
        start = _int(obj, "line_start", where)
        end = _int(obj, "line_end", where)
        if end < start:
            raise _bad(f"{where}.line_end {end} is before line_start {start}")
        cat = obj["category"]
        if not isinstance(cat, str) or not cat.strip():
            raise _bad(f"{where}.category must be a nonblank string")
        out.append(
            Label(
                id=lid,
                severity=_severity(obj, where),
                path=normalize_path(obj["path"], where),
                line_start=start,
                line_end=end,
                category=cat.casefold(),
            )
        )
    ids = [lb.id for lb in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise _bad(f"review labels repeat ids: {', '.join(dup)}")
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# matching and scoring


def _finding_key(f: Finding) -> tuple[object, ...]:
    return (f.path, f.line, f.end_line, f.category, f.severity, f.id, f.blocking, f.evidence)


def _label_key(lb: Label) -> tuple[object, ...]:
    return (lb.path, lb.line_start, lb.line_end, lb.category, lb.severity, lb.id)


def _can_match(f: Finding, lb: Label) -> bool:
    return f.path == lb.path and f.line <= lb.line_end and f.end_line >= lb.line_start


def _rank(f: Finding, lb: Label) -> tuple[object, ...]:
    return (
        f.category == lb.category,
        f.severity == lb.severity,
        -abs(f.line - lb.line_start),
        -(lb.line_end - lb.line_start),
        lb.path,
        lb.category,
        lb.line_start,
    )


def match_findings(
    findings: tuple[Finding, ...] | list[Finding], labels: tuple[Label, ...] | list[Label]
) -> list[tuple[Finding, Label]]:
    """A maximum-cardinality matching of findings to labels (see the module docstring)."""
    acts = sorted(findings, key=_finding_key)
    labs = sorted(labels, key=_label_key)
    ranked: list[list[int]] = []
    for f in acts:
        cands = [j for j, lb in enumerate(labs) if _can_match(f, lb)]
        # Stable sort: equal ranks keep the labels' sorted order.
        cands.sort(key=lambda j, f=f: _rank(f, labs[j]), reverse=True)  # type: ignore[misc]
        ranked.append(cands)
    owner: list[int | None] = [None] * len(labs)

    def augment(i: int, seen: set[int]) -> bool:
        for j in ranked[i]:
            if j in seen:
                continue
            seen.add(j)
            prev = owner[j]
            if prev is None or augment(prev, seen):
                owner[j] = i
                return True
        return False

    for i in range(len(acts)):
        augment(i, set())
    return sorted(
        ((acts[i], labs[j]) for j, i in enumerate(owner) if i is not None),
        key=lambda p: _finding_key(p[0]),
    )


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else num / den


def _f1(p: float | None, r: float | None, has_labels: bool) -> float | None:
    if p is not None and r is not None and p + r > 0:
        return 2 * p * r / (p + r)
    return 0.0 if has_labels else None


def _r6(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def expected_verdict(labels: tuple[Label, ...] | list[Label]) -> Verdict:
    """No labels → approve; any critical/high label → request_changes; else comment."""
    if not labels:
        return "approve"
    if any(lb.severity in BLOCKER_SEVERITIES for lb in labels):
        return "request_changes"
    return "comment"


def score_review(review: ReviewOutput, labels: tuple[Label, ...] | list[Label]) -> ReviewScore:
    """Score a parsed review against its labels (seed-system §13).

    TP = matched pairs, FP = findings − TP, FN = labels − TP; precision (None without findings),
    recall (None without labels), F1 = harmonic mean when both are defined and sum > 0, else 0.0
    when labels exist and None on a clean control. Weights critical 8, high 5, medium 2, low 1: a
    matched pair earns min(weight(finding), weight(label)) (a downgraded finding earns only its
    reported severity), an unmatched finding costs its weight; weighted precision is None only
    when both sums are 0 (a noisy clean control scores 0), weighted recall is None on a clean
    control, weighted F1 follows the F1 rule. Blocker recall = share of critical/high labels
    matched by a critical/high finding (None without blocker labels). Severity and category
    accuracy over matched pairs (None when TP = 0); grounded evidence over findings (None without
    findings).
    """
    findings = review.findings
    pairs = match_findings(findings, labels)
    tp = len(pairs)
    fp = len(findings) - tp
    fn = len(labels) - tp
    has_labels = bool(labels)
    precision = _ratio(tp, tp + fp)
    recall = _ratio(tp, tp + fn)
    w = SEVERITY_WEIGHTS
    matched_w = sum(min(w[f.severity], w[lb.severity]) for f, lb in pairs)
    matched_ids = {f.id for f, _ in pairs}
    fp_w = sum(w[f.severity] for f in findings if f.id not in matched_ids)
    label_w = sum(w[lb.severity] for lb in labels)
    wp = _ratio(matched_w, matched_w + fp_w)
    wr = _ratio(matched_w, label_w) if has_labels else None
    blockers = [lb for lb in labels if lb.severity in BLOCKER_SEVERITIES]
    blockers_hit = sum(
        1
        for f, lb in pairs
        if lb.severity in BLOCKER_SEVERITIES and f.severity in BLOCKER_SEVERITIES
    )
    grounded = sum(1 for f in findings if f.path and f.line > 0 and f.evidence.strip())
    f1 = _f1(precision, recall, has_labels)
    wf1 = _f1(wp, wr, has_labels)
    clean = not has_labels
    return ReviewScore(
        true_positives=tp,
        false_positives=fp,
        false_negatives=fn,
        precision=_r6(precision),
        recall=_r6(recall),
        f1=_r6(f1),
        weighted_precision=_r6(wp),
        weighted_recall=_r6(wr),
        weighted_f1=_r6(wf1),
        blocker_recall=_r6(_ratio(blockers_hit, len(blockers))),
        severity_accuracy=_r6(_ratio(sum(f.severity == lb.severity for f, lb in pairs), tp)),
        category_accuracy=_r6(_ratio(sum(f.category == lb.category for f, lb in pairs), tp)),
        grounded_evidence=_r6(_ratio(grounded, len(findings))),
        verdict_correct=review.verdict == expected_verdict(labels),
        clean_control=clean,
        clean_pass=clean and not findings and review.verdict == "approve",
        score_finite=all(v is None or math.isfinite(v) for v in (precision, recall, wf1)),
    )


REDUCED_METRICS = (
    "true_positives",
    "false_positives",
    "false_negatives",
    "precision",
    "recall",
    "f1",
    "weighted_precision",
    "weighted_recall",
    "weighted_f1",
    "blocker_recall",
    "severity_accuracy",
    "category_accuracy",
    "grounded_evidence",
)
"""Numeric score keys folded across repeats: ``min`` for blocker recall, median otherwise."""


class ReviewSummary(BaseModel):
    """One arm's review metrics on one task, folded over its valid repeats (seed-system §8)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int
    """Valid repeats folded."""
    true_positives: float | None
    false_positives: float | None
    false_negatives: float | None
    precision: float | None
    recall: float | None
    f1: float | None
    weighted_precision: float | None
    weighted_recall: float | None
    weighted_f1: float | None
    blocker_recall: float | None
    severity_accuracy: float | None
    category_accuracy: float | None
    grounded_evidence: float | None
    verdict_correct: bool | None
    clean_control: bool | None
    clean_pass: bool | None


def reduce_scores(scores: list[ReviewScore | None]) -> ReviewSummary | None:
    """Fold the valid repeats' scores of one task and arm (seed-system §8).

    A numeric metric is the median (``min`` for blocker recall) over repeats, but ``None`` unless
    *every* repeat had a value; ``verdict_correct``, ``clean_control`` and ``clean_pass`` are
    ``all()`` (``None`` unless every repeat was scored). ``None`` when no repeat was scored.
    """
    if not scores or all(s is None for s in scores):
        return None
    out: dict[str, float | bool | int | None] = {"runs": len(scores)}
    complete = all(s is not None for s in scores)
    for key in REDUCED_METRICS:
        vals = [getattr(s, key) for s in scores if s is not None]
        if not complete or any(v is None for v in vals):
            out[key] = None
            continue
        red = min(vals) if key == "blocker_recall" else statistics.median(vals)
        out[key] = round(float(red), 6)
    for key in ("verdict_correct", "clean_control", "clean_pass"):
        out[key] = all(getattr(s, key) for s in scores) if complete else None
    return ReviewSummary.model_validate(out)
