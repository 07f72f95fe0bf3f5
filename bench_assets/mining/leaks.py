"""Leak control for mined tasks: what the agent gets must not hold the answer.

Two leaks are possible, and each is handled one way (the import line and ``mined.json`` say which):

- **The prompt** (the commit message) may name the hidden tests or quote the fix. It is
  **redacted**: every oracle test id, test name and oracle file name is replaced by
  :data:`HIDDEN_TEST`, and every line that quotes the gold diff (a diff header or hunk line, or a
  line equal to a line the fix adds or removes) is dropped. A prompt left blank is rejected.
- **The base tree** may already hold a blob of the fix or of the oracle (a copy elsewhere in the
  tree, a revert of a revert). The sanitized template is the base tree, so such a candidate is
  **rejected**: nothing can be redacted from a tree without changing the task.

Pure functions over strings and object ids; the caller reads git.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from bench_assets.mining.history import EMPTY_BLOB

HIDDEN_TEST = "<hidden test>"
MIN_QUOTED_LINE = 10
"""A prompt line is a quote of the fix only if it equals a changed line at least this long."""
_GENERIC_NAMES = frozenset({"test", "tests", "Test", "Tests", "testing"})
_DIFF_LINE = re.compile(
    r"^\s*(diff --git |index [0-9a-f]{7,}\.\.|--- (a/|/dev/null)|\+\+\+ (b/|/dev/null)|@@ )"
)
_PARAMS = re.compile(r"\[.*\]$", re.S)


@dataclass
class Redacted:
    """A prompt after redaction, and what was taken out."""

    text: str
    notes: list[str] = field(default_factory=list)


def oracle_names(test_ids: Iterable[str], oracle_files: Iterable[str]) -> list[str]:
    """Every identifier that names an oracle test, longest first (so ids go before names)."""
    names: set[str] = set()
    for tid in test_ids:
        names.add(tid)
        bare = _PARAMS.sub("", tid)
        names.add(bare)
        for part in bare.split("::")[1:]:
            names.add(part)
    for f in oracle_files:
        names.add(f)
        stem = PurePosixPath(f).name
        names.add(stem)
        names.add(stem.removesuffix(".py"))
    return sorted((n for n in names if n and n not in _GENERIC_NAMES), key=lambda n: (-len(n), n))


def changed_lines(patch: str) -> set[str]:
    """The stripped lines a unified diff adds or removes (headers left out)."""
    out: set[str] = set()
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith(("+", "-")):
            text = line[1:].strip()
            if len(text) >= MIN_QUOTED_LINE:
                out.add(text)
    return out


def _quoted(line: str, fix_lines: set[str]) -> bool:
    if _DIFF_LINE.match(line):
        return True
    text = line.strip().strip("`").strip()
    if text[:1] in ("+", "-", ">") and len(text) > 1:
        text = text[1:].strip()
    return len(text) >= MIN_QUOTED_LINE and text in fix_lines


def redact_prompt(message: str, names: Sequence[str], gold_patch: str) -> Redacted:
    """The message without oracle test names or quotes of the fix (see module docstring)."""
    fix_lines = changed_lines(gold_patch)
    kept: list[str] = []
    dropped = 0
    for line in message.splitlines():
        if _quoted(line, fix_lines):
            dropped += 1
            continue
        kept.append(line)
    text = "\n".join(kept)
    named: list[str] = []
    for name in names:
        pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")
        text, n = pattern.subn(HIDDEN_TEST, text)
        if n:
            named.append(name)
    out = Redacted(text.strip() + "\n" if text.strip() else "")
    if named:
        shown = ", ".join(named[:5]) + (", …" if len(named) > 5 else "")
        out.notes.append(f"named oracle test(s) {shown}: replaced by {HIDDEN_TEST!r}")
    if dropped:
        out.notes.append(f"{dropped} line(s) quoting the fix removed")
    return out


def base_leaks(
    base_blobs: Mapping[str, str],
    post_blobs: Mapping[str, str],
    removed: Sequence[str] = (),
) -> list[str]:
    """Files of the fix or oracle whose exact bytes the base tree (minus ``removed``) holds.

    ``base_blobs``: object id -> a base path holding it; ``post_blobs``: changed path -> its
    object id after the commit. The empty file carries no answer and is never a leak.
    """
    out = []
    for path, oid in sorted(post_blobs.items()):
        where = base_blobs.get(oid)
        if oid == EMPTY_BLOB or where is None:
            continue
        if any(where == r or where.startswith(r.rstrip("/") + "/") for r in removed):
            continue
        out.append(f"{path} (its content is {where} in the base)")
    return out
