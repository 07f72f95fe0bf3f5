"""Redaction of secrets from every string the harness stores, logs or shows as metadata.

Two layers: exact values of known secrets (the values of every environment variable an arm is
allowed to pass, plus anything registered at runtime) and token-shaped patterns of common
providers, so a secret the harness never knew about is still caught.
"""

import os
import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"
_MIN_SECRET = 8

_PATTERNS = [
    re.compile(p)
    for p in (
        r"sk-ant-[A-Za-z0-9_\-]{8,}",
        r"sk-(?:proj-)?[A-Za-z0-9_\-]{20,}",
        r"gh[pousr]_[A-Za-z0-9]{20,}",
        r"github_pat_[A-Za-z0-9_]{20,}",
        r"xox[abposr]-[A-Za-z0-9\-]{10,}",
        r"AKIA[0-9A-Z]{16}",
        r"AIza[0-9A-Za-z_\-]{30,}",
        r"(?i)bearer\s+[A-Za-z0-9._\-]{16,}",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    )
]
_SECRET_NAME = re.compile(r"(?i)(key|token|secret|password|passwd|credential|auth)")


class Redactor:
    """Replaces known secret values and token-shaped strings with ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        for s in secrets:
            self.add(s)

    def add(self, secret: str | None) -> None:
        """Register a secret value (short values are ignored: they would redact noise)."""
        if secret and len(secret) >= _MIN_SECRET:
            self._secrets.add(secret)

    def text(self, value: str) -> str:
        """``value`` with every secret replaced."""
        for s in sorted(self._secrets, key=len, reverse=True):
            value = value.replace(s, REDACTED)
        for p in _PATTERNS:
            value = p.sub(REDACTED, value)
        return value

    def bytes(self, value: bytes) -> bytes:
        """Byte form of :meth:`text` (decoded leniently)."""
        return self.text(value.decode("utf-8", errors="replace")).encode("utf-8")

    def deep(self, value: object) -> object:
        """Redact every string inside nested dicts/lists."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.deep(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.deep(v) for v in value]
        return value


def from_environment(names: Iterable[str] = ()) -> Redactor:
    """A redactor knowing the values of ``names`` and of every secret-looking host variable."""
    r = Redactor()
    for name, value in os.environ.items():
        if name in set(names) or _SECRET_NAME.search(name):
            r.add(value)
    return r
