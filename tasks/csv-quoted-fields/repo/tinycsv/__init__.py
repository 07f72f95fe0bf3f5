"""tinycsv: read and write simple CSV text."""

from tinycsv.dialect import Dialect, DialectError
from tinycsv.reader import read_records, read_rows, split_line
from tinycsv.writer import format_field, format_row, write_rows

__all__ = [
    "Dialect",
    "DialectError",
    "format_field",
    "format_row",
    "read_records",
    "read_rows",
    "split_line",
    "write_rows",
]
