"""The one error tree for failures a user must act on.

Every message names the thing that is wrong and where to look (file, field, task id). The CLI maps
the classes to exit codes by type, in one place (``bench_assets.cli.common.exit_code_for``; README
section "The command line")::

    WfbenchError                      base; never raised directly
    ├── InputError                    exit 2: invalid input or configuration, before any paid work
    │   ├── ValidationFailed          one or more files failed validation (carries every issue)
    │   ├── UnknownTaskError          a task id that is not defined under tasks/
    │   ├── BindingError              a task's repository or ref cannot be bound to a commit
    │   │   └── BindingDriftError     a pinned binding no longer matches the task definition
    │   ├── OracleCaptureError        a declared oracle file is missing, unsafe or too large
    │   └── ApplyRefused              a promotion cannot be applied as decided; nothing written
    ├── IntegrityError                exit 1: a guarantee could not be established; nothing is kept
    │   ├── SanitizeError             the sanitized template failed a post-build check
    │   ├── GraphScrubError           the code graph contains a benchmark-owned marker
    │   ├── EvidenceError             cell evidence handed to aggregation is inconsistent
    │   ├── LedgerError               the decision ledger failed verification (edited, reordered)
    │   └── ApplyFailed               applying a promotion failed midway (rolled back, or not)
    ├── ContainmentError              exit 2: the sandbox cannot be established (fail closed)
    └── CommandError                  exit 1: a harness-owned command (git, indexer) failed

``IntegrityError`` subclasses are loud on purpose: they mean the harness could leak the answer to
an agent, so the materialization fails instead of producing a weaker artifact.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Issue:
    """One validation problem: the file, the dotted field path, and the rule broken.

    Defined here, beside :class:`ValidationFailed` that carries it, so the error tree imports
    nothing (the catalog builds issues; every room may raise them).
    """

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field or '(file)'}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        """JSON form used by ``wfbench validate --json``."""
        return {"file": self.file, "field": self.field, "message": self.message}


class WfbenchError(Exception):
    """Base class of every user-facing wfbench failure."""


class InputError(WfbenchError):
    """Invalid input or configuration, detected before any paid work."""


class ValidationFailed(InputError):
    """One or more benchmark files are invalid; ``issues`` lists every problem found."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        lines = [str(i) for i in issues]
        super().__init__(
            f"{len(issues)} validation error(s):\n  " + "\n  ".join(lines) if lines else "invalid"
        )


class UnknownTaskError(InputError):
    """A task id that is not defined in the benchmark directory."""


class BindingError(InputError):
    """The task's repository or ref cannot be bound to a commit."""


class BindingDriftError(BindingError):
    """A pinned binding no longer matches the task definition."""


class OracleCaptureError(InputError):
    """A declared oracle file is missing, not a regular file, unsafe, or too large."""


class IntegrityError(WfbenchError):
    """A guarantee the harness relies on could not be established."""


class SanitizeError(IntegrityError):
    """The sanitized template failed one of its post-build checks."""


class GraphScrubError(IntegrityError):
    """The code graph contains a benchmark-owned marker."""


class EvidenceError(IntegrityError):
    """Cell evidence handed to aggregation is inconsistent.

    A record of another task, an unplanned or duplicated cell, an ad-hoc ``wfbench try`` cell, or
    a record that claims ``resolved`` while carrying an error kind: aggregating it would silently
    produce wrong numbers, so the aggregate fails instead.
    """


class RecordCorrupt(IntegrityError):
    """A stored cell record is unreadable, truncated or not a record of this schema."""


class GenerationBusy(InputError):
    """Another wfbench process holds the instance's writer lock (it is named in the message)."""


class GenerationUnfinished(InputError):
    """A generation's decision was asked for while planned cells have no acceptable evidence
    (``wfbench decide --generation``; ``wfbench evolve`` finishes it). Nothing was decided."""


class StorageError(WfbenchError):
    """The artifact store or Dagster's storage cannot be written (full, read-only, missing)."""


class LedgerError(IntegrityError):
    """The decision ledger failed verification; the message names the first bad entry."""


class ApplyRefused(InputError):
    """A promotion cannot be applied as decided; no file was touched and nothing was recorded.

    The decision is not ``promote``, the overlay does not match the files the decision was made
    on, a target changed since the decision, or a path is unsafe (escapes the skill tree, is or
    passes through a symlink, is not a regular file).
    """


class ApplyFailed(IntegrityError):
    """Applying a promotion failed after files started to change.

    ``restored`` tells whether every file was put back byte for byte (the skill tree is as it was
    and nothing was recorded) or whether the message lists what a person must repair by hand.
    """

    def __init__(self, message: str, *, restored: bool) -> None:
        self.restored = restored
        super().__init__(message)


class ContainmentError(WfbenchError):
    """The sandbox cannot be established; the run stops before any paid work."""


class CommandError(WfbenchError):
    """A harness-owned command (git, an indexer) failed."""


class EnvironmentBuildError(WfbenchError):
    """A task environment could not be built (the message ends with the build log's tail)."""


def error_class(name: str) -> type[WfbenchError] | None:
    """The class of this tree called ``name``, or None when ``name`` is not one of them.

    A failed Dagster step reports only the class name of the error it raised; this turns the name
    back into the class, so callers match it by type (``issubclass``), never by string.
    """
    cls = globals().get(name)
    return cls if isinstance(cls, type) and issubclass(cls, WfbenchError) else None
