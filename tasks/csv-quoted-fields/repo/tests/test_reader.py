import pytest

from tinycsv import Dialect, read_records, read_rows, split_line


def test_plain_fields():
    assert split_line("a,b,c") == ["a", "b", "c"]


def test_empty_fields_are_kept():
    assert split_line("a,,c,") == ["a", "", "c", ""]


def test_quoted_field_may_contain_the_delimiter():
    assert split_line('x,"1,5",y') == ["x", "1,5", "y"]


def test_tab_dialect():
    assert split_line("a\tb c", Dialect(delimiter="\t")) == ["a", "b c"]


def test_blank_lines_are_skipped():
    assert read_rows("a,b\n\n c,d\n") == [["a", "b"], [" c", "d"]]


def test_records_use_the_header():
    text = "name,city\nAda,London\nGrace,\"New York, NY\"\n"
    assert read_records(text) == [
        {"name": "Ada", "city": "London"},
        {"name": "Grace", "city": "New York, NY"},
    ]


def test_records_reject_ragged_rows():
    with pytest.raises(ValueError, match="row 3"):
        read_records("a,b\n1,2\n3\n")
