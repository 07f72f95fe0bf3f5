"""Hidden checks for --limit: applied after filtering, across files, validated, with a summary."""

import io

import pytest

from logscan.cli import main

FIRST = """\
2024-05-01T10:00:00 INFO  web: started on :8080
2024-05-01T10:00:03 WARN  db: slow query (812 ms)
garbage
2024-05-01T10:01:10 INFO  web: GET /health 200
2024-05-01T10:02:41 ERROR db: connection reset
"""

SECOND = """\
2024-05-01T11:00:00 WARN  web: retrying request
2024-05-01T11:00:05 DEBUG db: pool size 4
2024-05-01T11:03:00 ERROR web: upstream timeout
2024-05-01T11:04:00 WARN  db: slow query (1204 ms)
"""


@pytest.fixture()
def logs(tmp_path):
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text(FIRST, encoding="utf-8")
    second.write_text(SECOND, encoding="utf-8")
    return str(first), str(second)


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdout=out, stderr=err)
    return code, out.getvalue().splitlines()


def test_limit_applies_after_filters(logs):
    code, lines = run([logs[0], logs[1], "--level", "WARN", "--limit", "2"])
    assert code == 0
    assert lines == [
        "2024-05-01T10:00:03 WARN  db: slow query (812 ms)",
        "2024-05-01T10:02:41 ERROR db: connection reset",
        "-- showing 2 of 5 matching records --",
    ]


def test_limit_spans_files(logs):
    code, lines = run([logs[0], logs[1], "--source", "web", "--limit", "3"])
    assert code == 0
    assert lines == [
        "2024-05-01T10:00:00 INFO  web: started on :8080",
        "2024-05-01T10:01:10 INFO  web: GET /health 200",
        "2024-05-01T11:00:00 WARN  web: retrying request",
        "-- showing 3 of 4 matching records --",
    ]


@pytest.mark.parametrize("limit", ["2", "3"])
def test_no_summary_when_nothing_is_hidden(logs, limit):
    code, lines = run([logs[0], logs[1], "--level", "ERROR", "--limit", limit])
    assert code == 0
    assert lines == [
        "2024-05-01T10:02:41 ERROR db: connection reset",
        "2024-05-01T11:03:00 ERROR web: upstream timeout",
    ]


def test_count_ignores_limit(logs):
    assert run([logs[0], logs[1], "--count", "--limit", "1"]) == (0, ["8"])


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1.5", ""])
def test_limit_must_be_a_positive_integer(logs, bad):
    with pytest.raises(SystemExit) as exc:
        run([logs[0], "--limit", bad])
    assert exc.value.code == 2


def test_without_limit_nothing_changes(logs):
    code, lines = run([logs[0], logs[1], "--level", "WARN"])
    assert code == 0
    assert len(lines) == 5
    assert not any(line.startswith("--") for line in lines)
