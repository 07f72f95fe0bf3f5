"""Probes of gate rules that are not built: the calibration run with one rule of the v3 gate
replaced in this process only (issue 23's 10-task power row; README, "Where the defaults sit").

``python bench/gate_probes.py PROBE [gate_calibration.py arguments]`` with PROBE one of:

* ``veto-spent``: the per-task veto's ``regression_error`` spent over the looks (Pocock type on
  the candidate-run fraction ``t_k = (1 + (k − 1)·share)/(1 + (K − 1)·share)``; look k gets
  ``α(t_k) − α(t_{k−1})``) instead of checked in full at every look;
* ``veto-last``: the veto checked at the last look only;
* ``adaptive-prior``: the cost test's drift prior ``B²`` raised to ``B² + max(0, δ̂² − SE²)``
  (this look's drift estimate and its SE): an empirical-Bayes weight, ``drift_prior_sd`` its
  floor.

The gate itself is unchanged; a probe that measured well would become a ``PolicyConfig`` field
and a rule in :mod:`bench_assets.gate.paired3` with its own tests. The worker processes inherit
the replaced rule by fork (Linux).
"""

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import gate_calibration  # noqa: E402

from bench_assets.gate import paired3, regression  # noqa: E402
from bench_assets.gate.sequential import spent  # noqa: E402

PROBES = ("veto-spent", "veto-last", "adaptive-prior")
_now: dict[str, Any] = {}
_check_set, _screen = paired3.check_set, regression.screen
_drift, _weight = paired3._drift, paired3._weight


def _check(inp: Any, tasks: Any, outcomes: Any, findings: Any) -> Any:
    _now["inp"] = inp
    return _check_set(inp, tasks, outcomes, findings)


class _Veto:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def screen(self, counted: Any, error: float, method: Any) -> Any:
        inp = _now["inp"]
        p, k = inp.policy, inp.look
        last, share = p.max_looks, p.top_up_share

        def t(j: int) -> float:
            return 0.0 if j <= 0 else (1 + (j - 1) * share) / (1 + (last - 1) * share)

        if self.mode == "veto-spent":
            level = spent(error, t(k), p.spending) - spent(error, t(k - 1), p.spending)
        else:
            level = error if k == last else 0.0
        return _screen(counted, max(level, 1e-12), method)


def _probe_drift(tasks: Any, inp: Any, rows: Any) -> Any:
    _now["drift"] = d = _drift(tasks, inp, rows)
    return d


def _probe_weight(counted: Any, inp: Any, rows: Any, s2: float) -> Any:
    d = _now.get("drift")
    extra = 0.0
    if d is not None and d.estimate is not None and d.se is not None:
        extra = max(0.0, d.estimate**2 - d.se**2)
    b = (inp.policy.drift_prior_sd**2 + extra) ** 0.5
    policy = inp.policy.model_copy(update={"drift_prior_sd": b})
    return _weight(counted, inp.model_copy(update={"policy": policy}), rows, s2)


def main() -> None:
    """Entry point."""
    if len(sys.argv) < 2 or sys.argv[1] not in PROBES:
        raise SystemExit(f"usage: gate_probes.py {{{','.join(PROBES)}}} [gate_calibration args]")
    probe = sys.argv.pop(1)
    if probe.startswith("veto"):
        paired3.check_set = _check  # type: ignore[assignment]
        paired3.regression = _Veto(probe)  # type: ignore[assignment,attr-defined]
    else:
        paired3._drift = _probe_drift  # type: ignore[assignment]
        paired3._weight = _probe_weight  # type: ignore[assignment]
    gate_calibration.main()


if __name__ == "__main__":
    main()
