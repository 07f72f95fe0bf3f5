"""Duration units, largest first."""

UNITS: dict[str, int] = {
    "d": 86_400,
    "h": 3_600,
    "m": 60,
    "s": 1,
}

ORDER: tuple[str, ...] = tuple(UNITS)  # ("d", "h", "m", "s")


def unit_seconds(symbol: str) -> int:
    try:
        return UNITS[symbol]
    except KeyError:
        raise ValueError(f"unknown duration unit {symbol!r}; use one of {', '.join(ORDER)}")
