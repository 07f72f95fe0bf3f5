"""Grading a review cell: the agent's JSON review against the task's hidden labels.

A review session runs with the worktree read-only; its only writable place (besides the adapter's
scratch folder) is a fresh folder outside the worktree, mounted at ``/review-output``. After the
session the artifact ``review-output.json`` is read from the host side of that folder — never
through a symlink, at most 256 KiB — parsed and scored by
:mod:`bench_assets.scorers.review_scoring`.

Outcome (seed-system §13): an artifact that is missing, empty or violates the contract, or labels
that do not parse, make the cell ``review-evidence-invalid`` (excluded, systemic); a scored review
is *resolved* only when it is perfect (no false positive, no miss, the right verdict), otherwise
``oracle-failed`` — a valid negative. The review gate judges the quality metrics, not resolution.
"""

from dataclasses import dataclass
from pathlib import Path

from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.scorers.review_scoring import (
    ReviewArtifactInvalid,
    ReviewScore,
    parse_labels,
    parse_review_bytes,
    read_artifact_bytes,
    score_review,
)

ARTIFACT_NAME = "review-output.json"

REVIEW_CONTRACT = """

Headless run: proceed without asking; do not post to GitHub or anywhere external. Review only the
local uncommitted changes of this repository (`git diff`); the repository is read-only.

Write your review to /review-output/review-output.json as UTF-8 JSON with exactly these keys:
{"schema_version": 1, "verdict": "approve" | "comment" | "request_changes", "findings": [
  {"id": "<unique>", "severity": "critical" | "high" | "medium" | "low",
   "path": "<repository-relative path>", "line": <first line, >= 1>, "end_line": <last line>,
   "category": "correctness" | "security" | "compatibility" | "performance" | "tests" | "other",
   "scenario": "<when it goes wrong>", "evidence": "<what in the code shows it>",
   "recommendation": "<the fix>", "blocking": true | false}]}
Use an empty findings list with "approve" when nothing is actionable; "request_changes" needs at
least one blocking finding. No Markdown, no other keys, and edit no other file.
"""
"""Appended to a review arm's prompt (after the task prompt): the output contract of
:mod:`bench_assets.scorers.review_scoring`, stated to the agent."""


@dataclass(frozen=True)
class ReviewGrade:
    """What grading a review found."""

    score: ReviewScore | None
    valid: bool
    """The artifact and the labels parsed (the review is admissible evidence)."""
    detail: str
    artifact: bytes | None
    """The artifact's bytes, to store beside the record (None when it could not be read)."""

    @property
    def error_kind(self) -> ErrorKind | None:
        """``review-evidence-invalid``, ``oracle-failed`` (imperfect review) or None (perfect)."""
        if not self.valid or self.score is None:
            return ErrorKind.REVIEW_EVIDENCE_INVALID
        return None if self.score.oracle_passed else ErrorKind.ORACLE_FAILED


def new_output_dir(parent: Path) -> Path:
    """A fresh, empty output folder (it must not exist before the session)."""
    out = parent / "review-output"
    out.mkdir(mode=0o700)
    return out


def grade_review(output_dir: Path, labels: bytes | None) -> ReviewGrade:
    """Parse the artifact in ``output_dir`` and score it against ``labels`` (the hidden file)."""
    try:
        data = read_artifact_bytes(output_dir / ARTIFACT_NAME)
    except ReviewArtifactInvalid as e:
        return ReviewGrade(None, False, str(e), None)
    try:
        review = parse_review_bytes(data)
    except ReviewArtifactInvalid as e:
        return ReviewGrade(None, False, str(e), data)
    if labels is None:
        return ReviewGrade(None, False, "the task's review labels file is not staged", data)
    try:
        expected = parse_labels(labels)
    except ReviewArtifactInvalid as e:
        return ReviewGrade(None, False, f"labels: {e}", data)
    score = score_review(review, expected)
    detail = (
        ""
        if score.oracle_passed
        else f"review: {score.true_positives} found, {score.false_positives} false, "
        f"{score.false_negatives} missed, verdict {review.verdict}"
        f"{'' if score.verdict_correct else ' (wrong)'}"
    )
    return ReviewGrade(score, True, detail, data)
