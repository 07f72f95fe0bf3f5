"""What users read: the report link, `wfbench cells` reuse counts, messages with paths and hints."""

from pathlib import Path

import pytest

from bench_assets.report import REPORT_URL_ENV, report_url


def test_report_link_is_served_when_a_base_url_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    html = reports / "abc123" / "report.html"
    monkeypatch.delenv(REPORT_URL_ENV, raising=False)
    assert report_url(html, reports) == html.resolve().as_uri()
    monkeypatch.setenv(REPORT_URL_ENV, "http://127.0.0.1:3001/")
    assert report_url(html, reports) == "http://127.0.0.1:3001/abc123/report.html"
