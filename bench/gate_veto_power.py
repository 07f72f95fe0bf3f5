"""The per-task regression veto's power and false-veto rate (issue 23, item 4).

Gate v3's veto (``bench_assets.gate.regression``, ``regression_test: min_p``) fires on a task
when the family-wise chance of a one-sided Fisher p as small as the task's, over every counted
task given its margins (the exact min-p / max-type statistic), is at most ``regression_error``.
v2's rule (``bonferroni``) fires when p ≤ ``regression_error / tasks``.

This script draws suites of ``--tasks`` tasks, each comparator rate uniform over [0.3, 0.95]
(the calibration's worlds), and prints for both rules, at the comparator runs 3 (no history) and
12 (3 + 9 pooled) and the candidate runs of the design's first look (3) and last (``--max-runs``,
6 = 3 + 3 top-ups at the default ``max_looks`` 4):

* **fires**: the chance the veto fires on one broken task (candidate rate ``--broken``, every
  other task unbroken) — its power;
* **false veto**: the chance it fires on any task of an A/A suite (every task unbroken).

It calls the gate's own functions, so it measures what ships. Monte Carlo over ``--draws``
suites (± is the 95 % binomial half-width).

Run: ``python bench/gate_veto_power.py [--tasks 10] [--error 0.10] [--broken 0.1] [--draws 2000]``.
"""

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_assets.gate.numerics import fisher_worse_p  # noqa: E402
from bench_assets.gate.regression import adjusted  # noqa: E402

Table = tuple[int, int, int, int]


def _binom(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def suite(
    rng: random.Random, tasks: int, comp: int, cand: int, broken: float | None
) -> list[Table]:
    """One suite's tables; task 0 has candidate rate ``broken`` (``None``: an A/A suite)."""
    out = []
    for i in range(tasks):
        p = rng.uniform(0.3, 0.95)
        q = broken if broken is not None and i == 0 else p
        out.append((_binom(rng, comp, p), comp, _binom(rng, cand, q), cand))
    return out


def fired(tables: list[Table], error: float, method: str) -> list[bool]:
    """Which tasks the veto fires on."""
    if method == "bonferroni":
        cut = error / len(tables)
        return [float(fisher_worse_p(*t)) <= cut for t in tables]
    return [a <= error for a in adjusted(tables, only_below=error)]


def _ci(hits: int, n: int) -> str:
    p = hits / n
    return f"{p:6.1%} ±{1.96 * math.sqrt(max(p * (1 - p), 1e-9) / n):.1%}"


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--error", type=float, default=0.10)
    ap.add_argument("--broken", type=float, default=0.1)
    ap.add_argument("--max-runs", type=int, default=6, help="candidate runs at the last look")
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20260123)
    args = ap.parse_args()
    print(
        f"veto at family error {args.error} over {args.tasks} tasks, broken task at candidate "
        f"rate {args.broken}, comparator rate in [0.3, 0.95], {args.draws} suites per cell"
    )
    print(
        "  comparator  candidate   min-p fires      min-p false veto   "
        "Bonferroni fires  Bonferroni false veto"
    )
    for comp in (3, 12):
        for cand in sorted({3, args.max_runs}):
            hits = {"min_p": [0, 0], "bonferroni": [0, 0]}
            rng = random.Random(args.seed + 1000 * comp + cand)
            for _ in range(args.draws):
                broken = suite(rng, args.tasks, comp, cand, args.broken)
                aa = suite(rng, args.tasks, comp, cand, None)
                for method, h in hits.items():
                    h[0] += fired(broken, args.error, method)[0]
                    h[1] += any(fired(aa, args.error, method))
            m, b = hits["min_p"], hits["bonferroni"]
            print(
                f"  {comp:>10} {cand:>10}   {_ci(m[0], args.draws):<16} "
                f"{_ci(m[1], args.draws):<18} {_ci(b[0], args.draws):<17} "
                f"{_ci(b[1], args.draws)}"
            )


if __name__ == "__main__":
    main()
