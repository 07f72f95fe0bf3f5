"""Predicates over records, and a helper to combine them."""

from collections.abc import Callable, Iterable, Iterator

from logscan.records import LEVELS, Record

Predicate = Callable[[Record], bool]


def min_level(level: str) -> Predicate:
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; use one of {', '.join(LEVELS)}")
    threshold = LEVELS.index(level)
    return lambda record: record.severity >= threshold


def source_is(sources: Iterable[str]) -> Predicate:
    wanted = frozenset(sources)
    return lambda record: record.source in wanted


def contains(text: str) -> Predicate:
    needle = text.lower()
    return lambda record: needle in record.message.lower()


def select(records: Iterable[Record], predicates: Iterable[Predicate]) -> Iterator[Record]:
    """Yield the records every predicate accepts, in order."""
    checks = list(predicates)
    for record in records:
        if all(check(record) for check in checks):
            yield record
