"""Parse one log line into a Record."""

import re
from dataclasses import dataclass
from datetime import datetime

LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARN", "ERROR")

_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\s+(?P<level>[A-Z]+)\s+"
    r"(?P<source>[\w.-]+):\s?(?P<message>.*)$"
)


@dataclass(frozen=True)
class Record:
    ts: datetime
    level: str
    source: str
    message: str

    @property
    def severity(self) -> int:
        return LEVELS.index(self.level)

    def format(self) -> str:
        return f"{self.ts.isoformat()} {self.level:<5} {self.source}: {self.message}"


def parse_line(line: str) -> "Record | None":
    """Return the record for ``line``, or None if it is not a log line."""
    match = _LINE.match(line.rstrip("\n"))
    if match is None or match["level"] not in LEVELS:
        return None
    try:
        ts = datetime.fromisoformat(match["ts"])
    except ValueError:
        return None
    return Record(ts, match["level"], match["source"], match["message"])
