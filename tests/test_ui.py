"""The Dagster UI in a real browser (headless Chromium through Playwright), as a user drives it.

On an instance with two generations (the second reuses comparator cells of the first): open
``task_bindings``, pick one partition, Materialize, launch, wait for the run to succeed; then
open ``promotion_decision``, check that no evidence row says "None", that every reused row names
the run its cell came from (and that run is the cell partition's own latest materialization), and
that the report link opens the HTML report. Screenshots of every step land in
``$WFBENCH_UI_SHOTS`` (default ``ui-screenshots/``, a CI artifact) when the test fails.

Needs Playwright (the ``dev`` extra) and a Chromium: Playwright's own (``playwright install
chromium``) or the system one (Debian ``chromium``, which ``.ci/run`` installs). Skips, saying
which is missing, only outside CI; under ``CI`` a missing browser fails.
"""

import datetime as dt
import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from bench_assets.config.cron import next_tick
from bench_assets.decision.documents import load_decision
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

RUN_TIMEOUT_MS = 240_000


def _chromium() -> str | None:
    """A system Chromium, or None to use Playwright's own download."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        except Error as e:
            if os.environ.get("CI"):
                raise
            pytest.skip(f"no Chromium for Playwright ({str(e)[:200]})")
        yield b
        b.close()


@pytest.fixture
def demo_ui(tmp_path: Path) -> Iterator[object]:
    from tests import ui_seed

    ui = ui_seed.start(tmp_path)
    yield ui
    ui.stop()


class Shots:
    """Numbered screenshots of each step, kept only when the test fails."""

    def __init__(self, page: object, folder: Path) -> None:
        self.page, self.folder, self.n = page, folder, 0

    def take(self, name: str) -> None:
        self.n += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(self.folder / f"{self.n:02d}-{name}.png"), full_page=True)  # type: ignore[attr-defined]


def test_rematerialize_one_partition_then_read_the_decision(
    demo_ui: object, browser: object, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    ui = demo_ui  # ui_seed.DemoUi
    shots_dir = Path(os.environ.get("WFBENCH_UI_SHOTS", REPO_ROOT / "ui-screenshots"))
    page = browser.new_page(viewport={"width": 1600, "height": 1000})  # type: ignore[attr-defined]
    # Dagster's one-time community dialog would cover the page: mark it seen, as "Skip" does.
    _graphql(ui.url, "mutation { setNuxSeen }")
    page.add_init_script("window.localStorage.setItem('communityNux', JSON.stringify('1'))")
    shots = Shots(page, tmp_path / "shots")
    try:
        _drive(page, shots, ui, expect)
        if os.environ.get("WFBENCH_UI_KEEP_SHOTS"):
            raise AssertionError("WFBENCH_UI_KEEP_SHOTS is set: keeping the screenshots")
    except BaseException:
        shots.take("failure")
        dest = shots_dir / request.node.name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(tmp_path / "shots", dest)
        for log in (tmp_path / "logs").glob("*.log"):
            shutil.copy(log, dest / log.name)
        raise


def _drive(page, shots: Shots, ui, expect) -> None:  # type: ignore[no-untyped-def]
    os.environ["DAGSTER_HOME"] = str(ui.home)
    with dg.DagsterInstance.get() as instance:
        before = {r.run_id for r in instance.get_runs()}

    # 1. task_bindings → Materialize… → one partition → Launch 1 run.
    page.goto(f"{ui.url}/assets/task_bindings")
    dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize task_bindings")
    for attempt in range(3):  # the community dialog can swallow the first click
        page.get_by_role("button", name="Materialize…").click(timeout=60_000)
        try:
            expect(dialog).to_be_visible(timeout=10_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    dialog.get_by_text("Select a partition or create one").click()
    page.get_by_role("menuitem").filter(has_text="alpha").click()
    shots.take("partition-picked")
    launch = dialog.get_by_role("button", name="Launch 1 run")
    expect(launch).to_be_enabled()
    launch.click()
    expect(dialog).to_be_hidden(timeout=90_000)
    shots.take("launched")

    # 2. The run: find it, open its page, wait for success there.
    with dg.DagsterInstance.get() as instance:
        new = [r for r in instance.get_runs() if r.run_id not in before]
    assert len(new) == 1, f"one run launched from the dialog, got {len(new)}"
    run = new[0]
    assert run.tags.get("dagster/partition") == "alpha"
    page.goto(f"{ui.url}/runs/{run.run_id}")
    expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    shots.take("run-succeeded")
    with dg.DagsterInstance.get() as instance:
        status = instance.get_run_by_id(run.run_id).status  # type: ignore[union-attr]
    assert status == dg.DagsterRunStatus.SUCCESS

    # 3. promotion_decision: evidence rows name their source run; the report link opens.
    page.goto(f"{ui.url}/assets/promotion_decision")
    evidence = page.locator("tr").filter(has=page.get_by_text("evidence", exact=True))
    expect(evidence.first).to_be_visible(timeout=60_000)
    shots.take("decision")
    text = evidence.first.inner_text()
    assert "None" not in text, text
    (shots.folder / "evidence.txt").write_text(text)
    rows = [ln.split("\t") for ln in text.splitlines() if ln.startswith("alpha · ")]
    reused_rows = [r for r in rows if r[4].startswith("reused from run ")]
    assert reused_rows, f"the second generation reuses incumbent cells:\n{text}"
    lineage = {(c.task, c.cell): c for c in _latest_decision(ui.home).lineage}
    for row in reused_rows:
        cell = row[0].split(" · ")[1]
        source = re.fullmatch(r"reused from run (\S+) \((g\d+)\)", row[4])
        assert source, row
        assert source[1] == lineage[("alpha", cell)].source_run_id, row
        # The reused cell's own page agrees: that run is its partition's latest materialization.
        assert _latest_run_of(ui.home, "alpha", cell) == source[1], row
    link = page.locator(f'a[href^="{ui.reports_url}/"]')
    expect(link.first).to_be_visible()
    with page.context.expect_page() as opened:
        link.first.click()
    report = opened.value
    report.wait_for_load_state()
    expect(report.get_by_role("heading", level=1)).to_contain_text("wfbench report")
    shots.page = report
    shots.take("report")

    # 4. The weekly run is a schedule, running, with bench.yaml's cron.
    shots.page = page
    page.goto(f"{ui.url}/automation")
    name = page.get_by_text("weekly_generation_schedule", exact=True)
    expect(name.first).to_be_visible(timeout=60_000)
    expect(page.get_by_text("At 03:00 AM UTC, only on Saturday")).to_be_visible()
    shots.take("automation")
    name.first.click()
    expect(page.get_by_text("Next tick").first).to_be_visible(timeout=60_000)
    shots.take("schedule")
    (shots.folder / "schedule.txt").write_text(page.locator("body").inner_text())
    body = page.locator("body").inner_text()
    tick = next_tick("0 3 * * 6", dt.datetime.now(dt.UTC))
    expected = f"{tick:%b} {tick.day}, 3:00:00 AM UTC"
    assert re.search(r"Next tick\s+" + re.escape(expected), body), (expected, body[:2000])


def _graphql(url: str, query: str) -> object:
    req = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _latest_decision(home: Path):  # type: ignore[no-untyped-def]
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        rec = instance.fetch_materializations(dg.AssetKey("promotion_decision"), limit=1).records
        path = rec[0].asset_materialization.metadata["decision_path"].value  # type: ignore[union-attr]
    return load_decision(Path(str(path)))


def _latest_run_of(home: Path, task: str, cell: str) -> str:
    key = str(dg.MultiPartitionKey({"task": task, "cell": cell}))
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        for asset in ("comparator_cells", "candidate_cells"):
            recs = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]),
                limit=1,
            ).records
            if recs:
                return recs[0].run_id
    raise AssertionError(f"no materialization of {task}|{cell}")
