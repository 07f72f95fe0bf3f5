"""Cron for the weekly schedule: validation with field-naming errors, ticks via croniter.

Tick arithmetic is croniter's (the maintained library Dagster itself vendors for schedules), with
Vixie cron's rule that when *both* day-of-month and day-of-week are restricted, a day matching
*either* is enough. The harness adds what croniter does not say clearly: an error that names the
bad field, and a rejection of expressions that parse but never fire (``0 0 31 2 *``).

No Dagster import: the Dagster schedule (``driver/automation.py``) is built from these values.
"""

import datetime as dt
import zoneinfo

from croniter import CroniterBadDateError, croniter

_CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    (
        "month",
        1,
        12,
        {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())},
    ),
    ("day of week", 0, 7, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}),
)
_NEVER_HORIZON_YEARS = 9
"""A valid cron fires at least once in any 9 years (Feb 29 skips at most one leap year, 2100)."""


def validate_cron(expr: str) -> None:
    """Validate a five-field cron expression; raise ``ValueError`` naming the bad field.

    Also rejects an expression that never fires (``0 0 31 2 *``: February has no 31st).
    """
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"cron {expr!r} must have 5 fields (minute hour dom month dow)")
    for text, (what, lo, hi, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in text.split(","):
            _validate_item(item, what, lo, hi, names, expr)
    if not croniter.is_valid(expr):
        raise ValueError(f"cron {expr!r} is not a valid cron expression")
    start = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    try:
        croniter(expr, start, max_years_between_matches=_NEVER_HORIZON_YEARS).get_next(dt.datetime)
    except CroniterBadDateError:
        raise ValueError(
            f"cron {expr!r} never fires: no date matches its day-of-month and month fields"
        ) from None


def _validate_item(
    item: str, what: str, lo: int, hi: int, names: dict[str, int], expr: str
) -> None:
    def value(tok: str) -> int:
        if tok.lower() in names:
            return names[tok.lower()]
        if not tok.isdigit():
            raise ValueError(f"cron {expr!r}: {what} value {tok!r} is not a number")
        n = int(tok)
        if not lo <= n <= hi:
            raise ValueError(f"cron {expr!r}: {what} value {n} is outside {lo}-{hi}")
        return n

    base, _, step = item.partition("/")
    if step and (not step.isdigit() or int(step) == 0):
        raise ValueError(f"cron {expr!r}: {what} step {step!r} must be a positive number")
    if base == "*":
        return
    start, dash, end = base.partition("-")
    a = value(start)
    if dash and value(end) < a:
        raise ValueError(f"cron {expr!r}: {what} range {base!r} runs backwards")


def validate_timezone(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is an IANA time zone (``UTC``, ``Europe/Berlin``)."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"timezone {name!r} is not an IANA time zone name (e.g. 'UTC', 'Europe/Berlin')"
        ) from None


def _local(when: dt.datetime, timezone: str) -> dt.datetime:
    if when.tzinfo is None:
        raise ValueError("cron times must be timezone-aware")
    return when.astimezone(zoneinfo.ZoneInfo(timezone))


def next_tick(expr: str, after: dt.datetime, timezone: str = "UTC") -> dt.datetime:
    """The first tick strictly after ``after``, evaluated in ``timezone``, returned in UTC."""
    tick: dt.datetime = croniter(expr, _local(after, timezone)).get_next(dt.datetime)
    return tick.astimezone(dt.UTC)


def latest_tick(expr: str, now: dt.datetime, timezone: str = "UTC") -> dt.datetime:
    """The most recent tick at or before ``now`` (to the minute), returned in UTC."""
    local = _local(now, timezone).replace(second=0, microsecond=0)
    if croniter.match(expr, local):
        return local.astimezone(dt.UTC)
    prev: dt.datetime = croniter(expr, local).get_prev(dt.datetime)
    return prev.astimezone(dt.UTC)


def matches(expr: str, when: dt.datetime, timezone: str = "UTC") -> bool:
    """Whether ``when`` (any seconds) falls in a minute that is a tick of ``expr``."""
    return bool(croniter.match(expr, _local(when, timezone)))
