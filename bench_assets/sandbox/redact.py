"""Redaction of secrets from every string the harness stores, logs or shows as metadata.

Three layers, applied in order:

1. **Known values** — the values of every environment variable an arm is allowed to pass, plus
   anything registered at runtime.
2. **Token shapes of today's providers** that the maintained rule set below does not know, or
   knows only in context: Anthropic, OpenAI project keys, GitHub fine-grained tokens, npm and
   Hugging Face tokens, Stripe test/restricted keys, Google API keys, whole JWTs, bearer headers,
   PEM private key blocks.
3. **detect-secrets' regex plugins** (Yelp's maintained rule set, pinned in pyproject.toml): AWS,
   Azure storage, basic-auth URLs, Discord, GitHub, GitLab, IBM, JWT, Mailchimp, npm (``.npmrc``),
   OpenAI, PyPI, SendGrid, Slack (tokens and webhooks), Square, Stripe, Telegram, Twilio, ....
   Deliberately *not* its entropy detectors (they would redact the sha256 digests stored in every
   record), its keyword detector (``password = x`` in ordinary code) or its public-IP detector
   (an address is not a secret).

A redacted secret becomes ``[REDACTED]``, together with whatever context its rule matched (for a
basic-auth URL, ``://user:password@``).
"""

import os
import re
from collections.abc import Iterable
from functools import cache

REDACTED = "[REDACTED]"
_MIN_SECRET = 8

_PATTERNS = [
    re.compile(p)
    for p in (
        r"-----BEGIN [A-Z ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?"
        r"-----END [A-Z ]*PRIVATE KEY( BLOCK)?-----",
        r"sk-ant-[A-Za-z0-9_\-]{8,}",
        r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
        r"gh[pousr]_[A-Za-z0-9]{20,}",
        r"github_pat_[A-Za-z0-9_]{20,}",
        r"xox[abposre]-[A-Za-z0-9\-]{10,}",
        r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])",
        r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}",
        r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
        r"(?<![A-Za-z0-9])whsec_[0-9A-Za-z]{24,}",
        r"AKIA[0-9A-Z]{16}",
        r"AIza[0-9A-Za-z_\-]{30,}",
        r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
        r"(?i)bearer\s+[A-Za-z0-9._\-~+/]{16,}=*",
    )
]
_SECRET_NAME = re.compile(r"(?i)(key|token|secret|password|passwd|credential|auth)")

_EXCLUDED_PLUGINS = frozenset(
    {
        "Base64HighEntropyString",
        "HexHighEntropyString",
        "KeywordDetector",
        "IPPublicDetector",
    }
)


@cache
def _rule_set() -> tuple[re.Pattern[str], ...]:
    """The denylist regexes of detect-secrets' regex-based plugins (minus the excluded ones)."""
    import importlib
    import inspect
    import pkgutil

    import detect_secrets.plugins as plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    found: list[re.Pattern[str]] = []
    for info in sorted(pkgutil.iter_modules(plugins.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{plugins.__name__}.{info.name}")
        for name, cls in sorted(inspect.getmembers(module, inspect.isclass)):
            if (
                cls.__module__ != module.__name__
                or not issubclass(cls, RegexBasedDetector)
                or cls is RegexBasedDetector
                or name in _EXCLUDED_PLUGINS
            ):
                continue
            found.extend(cls().denylist)
    if not found:
        raise RuntimeError("detect-secrets provides no regex rules; redaction would be blind")
    return tuple(found)


def _redact_rules(value: str) -> str:
    # The whole match goes, context included: some rules capture only a prefix (GitLab's group
    # is ``glpat``, not the token), so a captured group is not a safe measure of the secret.
    for rule in _rule_set():
        value = rule.sub(REDACTED, value)
    return value


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
        return _redact_rules(value)

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
