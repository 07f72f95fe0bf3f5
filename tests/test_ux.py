"""What users read: the report link, `wfbench cells` reuse counts, messages with paths and hints."""

from pathlib import Path

import pytest

from bench_assets.decision.report import REPORT_URL_ENV, report_url


def test_report_link_is_served_when_a_base_url_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    html = reports / "abc123" / "report.html"
    monkeypatch.delenv(REPORT_URL_ENV, raising=False)
    assert report_url(html, reports) == html.resolve().as_uri()
    monkeypatch.setenv(REPORT_URL_ENV, "http://127.0.0.1:3001/")
    assert report_url(html, reports) == "http://127.0.0.1:3001/abc123/report.html"


def test_a_missing_tasks_dir_names_its_path_and_the_fix(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bench_assets.cli import main

    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(main, ["validate", str(missing)])
    assert result.exit_code == 2
    assert str(missing) in result.output and "--tasks" in result.output


def test_explain_of_an_unknown_generation_lists_the_known_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from bench_assets.cli import decision as decision_cli
    from bench_assets.cli import main
    from bench_assets.driver import instance as driver_instance

    monkeypatch.setattr(decision_cli, "open_instance", lambda: None)
    records = [{"generation": "g0002"}, {"generation": "g0001"}]
    monkeypatch.setattr(driver_instance, "decision_records", lambda inst: records)
    result = CliRunner().invoke(main, ["explain", "--generation", "g9999"])
    assert result.exit_code == 2
    assert "g9999" in result.output and "g0001, g0002" in result.output
    assert "wfbench decide" not in result.output


@pytest.mark.slow
def test_cells_counts_reuse_as_evolve_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a second generation, `wfbench cells` says as many cells were reused as evolve did."""
    import dagster as dg
    from click.testing import CliRunner

    from bench_assets.cli import main
    from bench_assets.driver.evolve import evolve
    from tests.ui_seed import seed_bench

    root = seed_bench(tmp_path)
    art = tmp_path / "art"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    with dg.DagsterInstance.get() as instance:
        evolve(str(root), artifact_root=str(art), instance=instance)
        g2 = evolve(str(root), artifact_root=str(art), instance=instance)
    assert g2.reused_cells > 0
    out = CliRunner().invoke(main, ["cells", "--tasks", str(root)])
    assert out.exit_code == 0, out.output
    assert f"{g2.reused_cells} reused into {g2.generation}" in out.output
    reused_lines = [ln for ln in out.output.splitlines() if " yes, run " in ln]
    assert len(reused_lines) == g2.reused_cells
