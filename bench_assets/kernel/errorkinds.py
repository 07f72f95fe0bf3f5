"""The closed set of cell error kinds and their classes, defined once.

The kinds are listed in the README section "How a cell runs, and what it records".

Aggregation, reuse and the outage breaker all read these classes from here:

* **excluded** — the cell says nothing about the arm's quality: left out of medians and never
  reused (``session-error``, ``infra-error``, ``evidence-unverified``, ``cleanup-failure``,
  ``review-evidence-invalid``, ``cancelled``);
* **systemic** — counts toward the outage breaker's streak (``session-error``, ``infra-error``,
  ``cleanup-failure``, ``review-evidence-invalid``);
* everything else is a **valid negative**: the arm ran and did not resolve the task — including
  ``patch-failed``, a recorded patch that does not apply (SWE-bench counts it the same way).
  Running out of the arm's own turn or budget limit (``turn-limit``, ``budget-limit``) is one
  too: a skill that makes the agent loop must be charged with its failures, not have them erased.

For measurement health (computed in :mod:`bench_assets.decision.aggregate`) a fresh attempt is
*admissible* only if it is neither excluded nor ``skill-not-invoked``: the session ran, but not the
arm the benchmark meant to measure.
"""

import enum


class ErrorKind(enum.StrEnum):
    """Why a cell did not resolve its task."""

    SESSION_ERROR = "session-error"
    INFRA_ERROR = "infra-error"
    CANCELLED = "cancelled"
    CLEANUP_FAILURE = "cleanup-failure"
    EVIDENCE_UNVERIFIED = "evidence-unverified"
    SKILL_NOT_INVOKED = "skill-not-invoked"
    VERIFY_FAILED = "verify-failed"
    ORACLE_FAILED = "oracle-failed"
    ORACLE_UNAVAILABLE = "oracle-unavailable"
    NO_WORK_PRODUCED = "no-work-produced"
    PATCH_FAILED = "patch-failed"
    REVIEW_EVIDENCE_INVALID = "review-evidence-invalid"
    TURN_LIMIT = "turn-limit"
    """The agent used every turn the arm allows (``--max-turns``) without finishing."""
    BUDGET_LIMIT = "budget-limit"
    """The agent spent the arm's per-session budget (``--max-budget-usd``) without finishing."""
    PHASE_ARTIFACT_MISSING = "phase-artifact-missing"
    """A phase of a multi-session arm (e.g. ``plan``) did not produce exactly one document
    matching its declared ``artifact``; later phases did not run. A valid negative: the skill
    failed to deliver what the arm requires of it."""
    GRADER_TAMPERED = "grader-tampered"
    """A tamper canary (a test that must fail) reported *passed*, or the trusted runner saw its
    own machinery replaced: the code under test forged outcomes. A valid negative charged to the
    arm (never excluded, never retried, never reused as a clean result), and a gate veto for a
    candidate (:mod:`bench_assets.gate`)."""


EXCLUDED = frozenset(
    {
        ErrorKind.SESSION_ERROR,
        ErrorKind.INFRA_ERROR,
        ErrorKind.EVIDENCE_UNVERIFIED,
        ErrorKind.CLEANUP_FAILURE,
        ErrorKind.REVIEW_EVIDENCE_INVALID,
        ErrorKind.CANCELLED,
    }
)
SYSTEMIC = frozenset(
    {
        ErrorKind.SESSION_ERROR,
        ErrorKind.INFRA_ERROR,
        ErrorKind.CLEANUP_FAILURE,
        ErrorKind.REVIEW_EVIDENCE_INVALID,
    }
)


def is_excluded(kind: ErrorKind | None) -> bool:
    """Left out of medians and resolve rates."""
    return kind in EXCLUDED


def is_systemic(kind: ErrorKind | None) -> bool:
    """Counts toward the outage breaker."""
    return kind in SYSTEMIC


def is_reusable(kind: ErrorKind | None) -> bool:
    """A later generation may reuse the cell instead of paying for it again."""
    return kind not in EXCLUDED


def is_valid_negative(kind: ErrorKind | None) -> bool:
    """The arm ran properly and failed the task."""
    return kind is not None and kind not in EXCLUDED


def is_health_failure(kind: ErrorKind | None) -> bool:
    """A fresh attempt that says nothing about the arm's current health (not admissible)."""
    return kind in EXCLUDED or kind is ErrorKind.SKILL_NOT_INVOKED
