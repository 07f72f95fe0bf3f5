import pytest

from timebox.cli import main


def test_add(capsys):
    assert main(["add", "90m", "45s"]) == 0
    assert capsys.readouterr().out == "1h30m45s\n"


def test_seconds(capsys):
    assert main(["seconds", "2h"]) == 0
    assert capsys.readouterr().out == "7200\n"


def test_invalid_duration_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["seconds", "soon"])
    assert exc.value.code == 2
    assert "invalid duration" in capsys.readouterr().err
