"""Hidden checks: quote characters inside values, in both directions."""

import pytest

from tinycsv import Dialect, format_field, read_rows, split_line, write_rows


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('"say ""hi"""', ['say "hi"']),
        ('"""quoted"" start",x', ['"quoted" start', "x"]),
        ('a,"mid""dle",b', ["a", 'mid"dle', "b"]),
        ('""""', ['"']),
        ('"",x', ["", "x"]),
        ('"a,""b""",c', ['a,"b"', "c"]),
    ],
)
def test_doubled_quote_inside_quoted_field(line, expected):
    assert split_line(line) == expected


def test_value_with_quote_is_quoted_and_escaped():
    assert format_field('a"b') == '"a""b"'
    assert format_field('"') == '""""'


def test_value_with_delimiter_and_quote():
    assert format_field('1,5" pipe') == '"1,5"" pipe"'


@pytest.mark.parametrize(
    "value",
    ['say "hi"', '"', '""', 'a,"b"', '"lead', 'trail"', "plain", "x,y"],
)
def test_round_trip(value):
    rows = [[value, "next"], ["first", value]]
    assert read_rows(write_rows(rows)) == rows


def test_round_trip_other_dialect():
    dialect = Dialect(delimiter=";", quotechar="'")
    rows = [["it's", "a;b", "plain"]]
    assert read_rows(write_rows(rows, dialect), dialect) == rows
