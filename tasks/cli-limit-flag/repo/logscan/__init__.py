"""logscan: filter application log files."""

from logscan.records import LEVELS, Record, parse_line

__all__ = ["LEVELS", "Record", "parse_line"]
