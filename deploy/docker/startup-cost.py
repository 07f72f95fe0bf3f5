"""Per-run start-up cost of two Dagster instances' runs, side by side (e.g. containers vs plain).

    .venv/bin/python deploy/docker/startup-cost.py \\
        plain=dagster_home containers=dagster_home/docker-demo/home

For every run of each instance (``DAGSTER_HOME`` folders; reading needs only their storage, not
their run launcher's package) the seconds from the launcher being called (``RUN_STARTING``) to
the run's process executing (``RUN_START``): for ``DefaultRunLauncher`` a subprocess and its
imports, for a Docker launcher the container's create and start plus the same imports. Cell runs
(tagged ``dagster/partition/cell``) and the other runs (inputs) are reported apart, with the
median, quartiles and n, and the ratio of the medians to the first instance. Also each kind's
median run span (``RUN_START`` to the run's end). Run the two instances at the same time on the
same machine, or the comparison measures the machine's load, not the launcher; ``--overlap``
keeps only the runs launched while every instance had runs going (from the latest first launch
to the earliest last end).
"""

import statistics
import sys
from typing import Any

import dagster as dg

CELL_TAG = "dagster/partition/cell"


Launch = tuple[str, float, float, float | None]
"""A launched run: ``(kind, RUN_STARTING time, RUN_START time, end time or None)``."""


def launches(home: str) -> list[Launch]:
    """Every launched run of one instance (``cell`` or ``other``) with its times."""
    out: list[Launch] = []
    with dg.DagsterInstance.from_config(home) as instance:
        for record in instance.get_run_records():
            run = record.dagster_run
            ts = {}
            for event in (dg.DagsterEventType.RUN_STARTING, dg.DagsterEventType.RUN_START):
                events = instance.get_records_for_run(run.run_id, of_type=event).records
                if events:
                    ts[event] = events[0].timestamp
            if len(ts) < 2:
                continue  # run in process, never launched (the decision step), or not started
            kind = "cell" if CELL_TAG in run.tags else "other"
            starting, start = (
                ts[dg.DagsterEventType.RUN_STARTING],
                ts[dg.DagsterEventType.RUN_START],
            )
            out.append((kind, starting, start, record.end_time))
    return out


def overlap(sides: dict[str, list[Launch]]) -> tuple[float, float]:
    """The span in which every instance had runs: latest first launch, earliest last end."""
    lo = max(min(r[1] for r in runs) for runs in sides.values() if runs)
    hi = min(max((r[3] or r[2]) for r in runs) for runs in sides.values() if runs)
    return lo, hi


def latencies(
    runs: list[Launch], window: tuple[float, float] | None
) -> dict[str, dict[str, list[float]]]:
    """``{"cell"|"other": {"startup": [...], "span": [...]}}`` of the runs launched in window."""
    out: dict[str, dict[str, list[float]]] = {
        k: {"startup": [], "span": []} for k in ("cell", "other")
    }
    for kind, starting, start, end in runs:
        if window is not None and not window[0] <= starting <= window[1]:
            continue
        out[kind]["startup"].append(start - starting)
        if end is not None:
            out[kind]["span"].append(end - start)
    return out


def summary(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"n": len(xs), "median": statistics.median(xs), "q1": q[0], "q3": q[2]}


def main(argv: list[str]) -> int:
    only_overlap = "--overlap" in argv
    argv = [a for a in argv if a != "--overlap"]
    if len(argv) < 1 or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    sides = [a.split("=", 1) for a in argv]
    runs = {name: launches(home) for name, home in sides}
    window = overlap(runs) if only_overlap else None
    if window is not None:
        print(f"runs launched between {window[0]:.0f} and {window[1]:.0f} (epoch s) only")
    data = {name: latencies(runs[name], window) for name, _ in sides}
    first = sides[0][0]
    for kind in ("cell", "other"):
        for measure in ("startup", "span"):
            ref = summary(data[first][kind][measure])
            for name, _ in sides:
                s = summary(data[name][kind][measure])
                if s["n"] == 0:
                    print(f"{kind:5} {measure:7} {name:12} n=0")
                    continue
                ratio = s["median"] / ref["median"] if ref.get("median") else float("nan")
                print(
                    f"{kind:5} {measure:7} {name:12} n={s['n']:3} median {s['median']:6.1f} s "
                    f"(quartiles {s['q1']:.1f}-{s['q3']:.1f}); x{ratio:.2f} of {first}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
