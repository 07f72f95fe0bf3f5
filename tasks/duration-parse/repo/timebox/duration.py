"""Parse duration strings such as ``90s``, ``15m`` or ``2h`` into whole seconds."""

import re

from timebox.units import unit_seconds

_SINGLE = re.compile(r"(\d+)([a-z])")


def parse_duration(text: str) -> int:
    """Return the number of seconds ``text`` stands for.

    Accepted forms:
    - a bare non-negative integer, meaning seconds (``"90"``);
    - a non-negative integer followed by one unit: ``d``, ``h``, ``m`` or ``s`` (``"15m"``).

    Surrounding whitespace is ignored. Anything else raises ``ValueError``.
    """
    if not isinstance(text, str):
        raise TypeError(f"duration must be a string, not {type(text).__name__}")
    cleaned = text.strip().lower()
    if not cleaned:
        raise ValueError("empty duration")
    if cleaned.isdigit():
        return int(cleaned)
    match = _SINGLE.fullmatch(cleaned)
    if match is None:
        raise ValueError(f"invalid duration {text!r}")
    number, unit = match.groups()
    return int(number) * unit_seconds(unit)
