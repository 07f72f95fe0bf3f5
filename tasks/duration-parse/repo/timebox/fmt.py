"""Format whole seconds as the shortest compound duration, e.g. ``1h30m``."""

from timebox.units import ORDER, UNITS


def format_duration(seconds: int) -> str:
    """``5400 -> "1h30m"``, ``0 -> "0s"``; zero-valued units are left out."""
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise TypeError("seconds must be an int")
    if seconds < 0:
        raise ValueError("seconds must not be negative")
    if seconds == 0:
        return "0s"
    parts = []
    rest = seconds
    for symbol in ORDER:
        count, rest = divmod(rest, UNITS[symbol])
        if count:
            parts.append(f"{count}{symbol}")
    return "".join(parts)
