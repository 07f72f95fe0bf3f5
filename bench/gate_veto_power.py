"""The per-task regression veto's power, exactly (issue 23, item 4).

The veto (``bench_assets.gate.paired2.hard_regressions``, read by gate v3 at
``regression_error`` over the counted tasks) fires on a task when the one-sided Fisher p that the
candidate resolves less is at most ``regression_error / tasks``. This script enumerates every
outcome of one broken task — the comparator at rate ``p`` (uniform over [0.3, 0.95], the
calibration's worlds, on a grid of 66 points), the candidate at ``--broken`` (0.1) — and prints
the chance that the veto fires, for comparator runs 3 (no history) and 12 (3 + 9 pooled) and
candidate runs 3 to 6 (the design's first and last look), and its false-veto rate on an
unbroken task at the comparator's rate.

Run: ``python bench/gate_veto_power.py [--tasks 10] [--error 0.10] [--broken 0.1]``.
"""

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_assets.gate.numerics import fisher_worse_p  # noqa: E402


def fires(comp_runs: int, cand_runs: int, p_comp: float, p_cand: float, level: float) -> float:
    """Chance that the Fisher veto fires on one task."""
    total = 0.0
    for rc in range(comp_runs + 1):
        w_c = math.comb(comp_runs, rc) * p_comp**rc * (1 - p_comp) ** (comp_runs - rc)
        for rk in range(cand_runs + 1):
            w_k = math.comb(cand_runs, rk) * p_cand**rk * (1 - p_cand) ** (cand_runs - rk)
            if fisher_worse_p(rc, comp_runs, rk, cand_runs) <= level:
                total += w_c * w_k
    return total


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--error", type=float, default=0.10)
    ap.add_argument("--broken", type=float, default=0.1)
    args = ap.parse_args()
    level = args.error / args.tasks
    grid = [0.3 + 0.01 * i for i in range(66)]
    print(
        f"veto at Fisher p <= {args.error}/{args.tasks} = {level:.4f}, comparator p in [0.3, 0.95]"
    )
    print("  comparator runs  candidate runs   fires on the broken task   false veto (unbroken)")
    for comp in (3, 12):
        for cand in (3, 4, 5, 6):
            hit = sum(fires(comp, cand, p, args.broken, level) for p in grid) / len(grid)
            false = sum(fires(comp, cand, p, p, level) for p in grid) / len(grid)
            print(f"  {comp:>15} {cand:>15} {hit:>26.1%} {false:>23.2%}")


if __name__ == "__main__":
    main()
