from logscan import parse_line


def test_parse_line():
    record = parse_line("2024-05-01T10:00:03 WARN  db: slow query (812 ms)\n")
    assert record.level == "WARN"
    assert record.source == "db"
    assert record.message == "slow query (812 ms)"
    assert record.format() == "2024-05-01T10:00:03 WARN  db: slow query (812 ms)"


def test_not_a_log_line():
    assert parse_line("hello") is None
    assert parse_line("2024-05-01T10:00:03 LOUD db: x") is None
    assert parse_line("2024-13-01T10:00:03 INFO db: x") is None
