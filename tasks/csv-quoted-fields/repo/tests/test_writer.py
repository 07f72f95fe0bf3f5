import pytest

from tinycsv import Dialect, DialectError, format_field, read_rows, write_rows


def test_plain_values_are_not_quoted():
    assert format_field("abc") == "abc"
    assert format_field(12) == "12"
    assert format_field(None) == ""


def test_value_with_delimiter_is_quoted():
    assert format_field("1,5") == '"1,5"'


def test_write_rows_terminates_every_line():
    assert write_rows([["a", "b"], [1, 2]]) == "a,b\n1,2\n"


def test_round_trip_with_commas():
    rows = [["name", "note"], ["Ada", "likes, commas"]]
    assert read_rows(write_rows(rows)) == rows


def test_crlf_dialect():
    assert write_rows([["a"]], Dialect(lineterminator="\r\n")) == "a\r\n"


def test_invalid_dialect_is_rejected():
    with pytest.raises(DialectError):
        write_rows([["a"]], Dialect(delimiter='"'))
