"""Turn CSV text into rows of strings."""

from tinycsv.dialect import Dialect, get_dialect


def split_line(line: str, dialect: "Dialect | None" = None) -> list[str]:
    """Split one physical line into its fields.

    A field may be wrapped in the dialect's quote character; inside quotes the delimiter is an
    ordinary character.
    """
    d = get_dialect(dialect)
    fields: list[str] = []
    buf: list[str] = []
    in_quotes = False
    for ch in line:
        if in_quotes:
            if ch == d.quotechar:
                in_quotes = False
            else:
                buf.append(ch)
        elif ch == d.quotechar:
            in_quotes = True
        elif ch == d.delimiter:
            fields.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    fields.append("".join(buf))
    return fields


def read_rows(text: str, dialect: "Dialect | None" = None) -> list[list[str]]:
    """Parse CSV text into a list of rows. Blank lines are skipped."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        rows.append(split_line(line, dialect))
    return rows


def read_records(text: str, dialect: "Dialect | None" = None) -> list[dict[str, str]]:
    """Parse CSV text whose first row is a header into one dict per data row."""
    rows = read_rows(text, dialect)
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    records = []
    for number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ValueError(
                f"row {number} has {len(row)} fields, the header has {len(header)}"
            )
        records.append(dict(zip(header, row)))
    return records
