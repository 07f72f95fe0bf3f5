"""timebox: parse, format and add human-readable durations."""

from timebox.duration import parse_duration
from timebox.fmt import format_duration

__all__ = ["format_duration", "parse_duration"]
