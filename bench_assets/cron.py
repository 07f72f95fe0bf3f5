"""Cron evaluation for the weekly trigger (five fields, UTC), pure and dependency-free.

Semantics follow cron(8): a time matches when minute, hour, month and the day fields match; as in
Vixie cron, when *both* day-of-month and day-of-week are restricted, a day matching *either* one
is enough.
"""

import datetime as dt

from bench_assets.models import validate_cron

_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())},
    {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())},
)


def _value(token: str, names: dict[str, int]) -> int:
    return int(token) if token.isdigit() else names[token.lower()]


def _field(text: str, index: int) -> tuple[set[int], bool]:
    lo, hi = _RANGES[index]
    names = _NAMES[index]
    values: set[int] = set()
    for item in text.split(","):
        base, _, step_s = item.partition("/")
        step = int(step_s) if step_s else 1
        if base == "*":
            start, end = lo, hi
        else:
            a, dash, b = base.partition("-")
            start = _value(a, names)
            end = _value(b, names) if dash else (start if not step_s else hi)
        values.update(range(start, end + 1, step))
    if index == 4 and 7 in values:
        values.add(0)
    return values, text != "*"


Compiled = tuple[tuple[set[int], bool], ...]


def compile_cron(expr: str) -> Compiled:
    """Validate and expand ``expr`` once."""
    validate_cron(expr)
    return tuple(_field(f, i) for i, f in enumerate(expr.split()))


def matches(expr: str | Compiled, when: dt.datetime) -> bool:
    """Whether ``when`` (UTC, any seconds) is a tick of ``expr``."""
    compiled = compile_cron(expr) if isinstance(expr, str) else expr
    (minute, _), (hour, _), (dom, dom_r), (month, _), (dow, dow_r) = compiled
    when = when.astimezone(dt.UTC)
    if when.minute not in minute or when.hour not in hour or when.month not in month:
        return False
    weekday = (when.weekday() + 1) % 7  # cron: Sunday = 0
    day_ok = when.day in dom
    dow_ok = weekday in dow
    if dom_r and dow_r:
        return day_ok or dow_ok
    return day_ok and dow_ok


def latest_tick(expr: str, now: dt.datetime, horizon_days: int = 366) -> dt.datetime | None:
    """The most recent tick at or before ``now`` (to the minute), within ``horizon_days``."""
    compiled = compile_cron(expr)
    t = now.astimezone(dt.UTC).replace(second=0, microsecond=0)
    for _ in range(horizon_days * 24 * 60):
        if matches(compiled, t):
            return t
        t -= dt.timedelta(minutes=1)
    return None
