"""Turn rows of values into CSV text."""

from collections.abc import Iterable

from tinycsv.dialect import Dialect, get_dialect


def format_field(value: object, dialect: "Dialect | None" = None) -> str:
    """Render one value, quoting it when it contains the delimiter."""
    d = get_dialect(dialect)
    text = "" if value is None else str(value)
    if d.delimiter in text:
        return f"{d.quotechar}{text}{d.quotechar}"
    return text


def format_row(row: Iterable[object], dialect: "Dialect | None" = None) -> str:
    d = get_dialect(dialect)
    return d.delimiter.join(format_field(value, d) for value in row)


def write_rows(rows: Iterable[Iterable[object]], dialect: "Dialect | None" = None) -> str:
    """Render rows as CSV text, one line per row, each line terminated."""
    d = get_dialect(dialect)
    return "".join(format_row(row, d) + d.lineterminator for row in rows)
