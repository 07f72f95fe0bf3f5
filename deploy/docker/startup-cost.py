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
same machine, or the comparison measures the machine's load, not the launcher.
"""

import statistics
import sys
from typing import Any

import dagster as dg

CELL_TAG = "dagster/partition/cell"


def latencies(home: str) -> dict[str, dict[str, list[float]]]:
    """``{"cell"|"other": {"startup": [...], "span": [...]}}`` of one instance's finished runs."""
    out: dict[str, dict[str, list[float]]] = {
        k: {"startup": [], "span": []} for k in ("cell", "other")
    }
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
            start = ts[dg.DagsterEventType.RUN_START]
            out[kind]["startup"].append(start - ts[dg.DagsterEventType.RUN_STARTING])
            if record.end_time is not None:
                out[kind]["span"].append(record.end_time - start)
    return out


def summary(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"n": len(xs), "median": statistics.median(xs), "q1": q[0], "q3": q[2]}


def main(argv: list[str]) -> int:
    if len(argv) < 1 or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    sides = [a.split("=", 1) for a in argv]
    data = {name: latencies(home) for name, home in sides}
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
