import io

import pytest

from logscan.cli import main


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdout=out, stderr=err)
    return code, out.getvalue().splitlines(), err.getvalue()


def test_all_records(sample_log):
    code, lines, _ = run([sample_log])
    assert code == 0
    assert len(lines) == 7


def test_level_and_source(sample_log):
    code, lines, _ = run([sample_log, "--level", "WARN", "--source", "db"])
    assert code == 0
    assert lines == [
        "2024-05-01T10:00:03 WARN  db: slow query (812 ms)",
        "2024-05-01T10:02:41 ERROR db: connection reset",
    ]


def test_grep_and_count(sample_log):
    assert run([sample_log, "--grep", "REQUEST", "--count"])[1] == ["1"]
    assert run([sample_log, "--level", "ERROR", "--count"])[1] == ["2"]


def test_strict_rejects_noise(sample_log):
    code, _, err = run([sample_log, "--strict"])
    assert code == 1
    assert ":4: not a log line" in err


def test_missing_file(tmp_path):
    code, _, err = run([str(tmp_path / "nope.log")])
    assert code == 1
    assert "nope.log" in err


def test_unknown_level_is_a_usage_error(sample_log):
    with pytest.raises(SystemExit) as exc:
        run([sample_log, "--level", "LOUD"])
    assert exc.value.code == 2
