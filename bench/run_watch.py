"""What the driver's poll costs with many open runs: a plain read by id against a ``RunWatch``.

A generation at 1,000 tasks has about 9,000 open cells (claims) and 1,500 queued ``cell_batch``
runs; the queue executor reads them every poll (0.5 s). This script makes ``--ids`` runs in a
fresh sqlite instance (as many as open claims, most of which have no run yet: ``--with-runs``
of them do), changes ``--changed`` of them between two polls, and prints, side by side, the
milliseconds per poll (polls 0.5 s apart, as the driver's, after the runs were made) of reading
every id (``instance.get_runs(RunsFilter(run_ids=...))``, the code before) and of a
:class:`~bench_assets.driver.runs.RunWatch` between its full reads, and their ratio.

Run: ``.venv/bin/python bench/run_watch.py [--ids 9000] [--with-runs 3000] [--changed 10]
[--polls 10]``.
"""

import argparse
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg  # noqa: E402

from bench_assets.driver.runs import RunWatch  # noqa: E402

POLL_S = 0.5
"""The queue executor's poll interval."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ids", type=int, default=9000, help="open ids polled (default 9000)")
    ap.add_argument("--with-runs", type=int, default=3000, help="ids that have a run (3000)")
    ap.add_argument("--changed", type=int, default=10, help="runs changed between polls (10)")
    ap.add_argument("--polls", type=int, default=10, help="polls timed per reader (10)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as home:
        instance = dg.DagsterInstance.local_temp(home)
        ids = [str(uuid.uuid4()) for _ in range(args.ids)]
        started = time.monotonic()
        for rid in ids[: args.with_runs]:
            instance.add_run(
                dg.DagsterRun(job_name="j", run_id=rid, status=dg.DagsterRunStatus.STARTED)
            )
        print(
            f"[run_watch] {args.with_runs} runs made in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )
        time.sleep(RunWatch.MARGIN_S + 1)  # made a while ago, as in a generation's steady state
        watch = RunWatch(instance)
        watch.read(ids)  # the first, full read
        plain: list[float] = []
        watched: list[float] = []
        for k in range(args.polls):
            time.sleep(POLL_S)
            for rid in ids[k * args.changed : (k + 1) * args.changed]:
                run = instance.get_run_by_id(rid)
                if run is not None and not run.is_finished:
                    instance.report_run_canceled(run)
            t = time.perf_counter()
            a = {r.run_id: r for r in instance.get_runs(dg.RunsFilter(run_ids=ids))}
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            b = watch.read(ids)
            watched.append(time.perf_counter() - t)
            assert {i: r.status for i, r in a.items()} == {i: r.status for i, r in b.items()}
        p, w = statistics.median(plain) * 1000, statistics.median(watched) * 1000
        print(f"open ids {args.ids} ({args.with_runs} with a run), {args.changed} changed per poll")
        print(f"| reader (median of {args.polls} polls) | ms per poll |")
        print("| --- | ---: |")
        print(f"| every id read (before) | {p:.1f} |")
        print(f"| RunWatch between full reads | {w:.1f} |")
        print(f"| ratio before / watch | {p / w:.1f}x |")
        print(f"(a RunWatch also reads every id once per {RunWatch.FULL_EVERY_S:.0f} s)")


if __name__ == "__main__":
    main()
