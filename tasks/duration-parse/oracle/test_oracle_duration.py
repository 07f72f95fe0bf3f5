"""Hidden checks: compound durations, their grammar, and the round trip with format."""

import pytest

from timebox import format_duration, parse_duration
from timebox.cli import main


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h30m", 5400),
        ("2d4h", 187200),
        ("1d1h1m1s", 90061),
        ("45m10s", 2710),
        ("1h0m5s", 3605),
        ("0h5m", 300),
        ("1H30M", 5400),
        (" 2h15m ", 8100),
        ("90m", 5400),
        ("36h", 129600),
    ],
)
def test_compound(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["30m1h", "1s1m", "1h1h", "1h30", "1hm", "h30m", "1h30x", "1h-30m", "1h.5m", "1h30m ago"],
)
def test_invalid_compound(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_round_trip_with_format():
    for seconds in range(0, 400_000, 997):
        assert parse_duration(format_duration(seconds)) == seconds


def test_cli_adds_compound_durations(capsys):
    assert main(["add", "1h30m", "45m", "15s"]) == 0
    assert capsys.readouterr().out == "2h15m15s\n"


def test_cli_rejects_out_of_order(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["seconds", "30m1h"])
    assert exc.value.code == 2
