import pytest

from timebox import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("0", 0), ("45s", 45), ("15m", 900), ("2h", 7200), ("1d", 86400), (" 3M ", 180)],
)
def test_single_unit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "   ", "m", "10x", "-5m", "1.5h", "ten minutes"])
def test_invalid(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_not_a_string():
    with pytest.raises(TypeError):
        parse_duration(90)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m"), (5400, "1h30m"), (90061, "1d1h1m1s"), (86400, "1d")],
)
def test_format(seconds, text):
    assert format_duration(seconds) == text
