"""The calibration's large-drift worlds (issue 23): old comparator evidence 20 %/30 % dearer.

A smaller drift prior leans the cost test on old comparator cells, so whether the re-payment path
carries large drift is measured at 10 and 50 tasks (``bench/gate_calibration.py --suite``). These
tests hold the worlds to what the README's rows say they are.
"""

import dataclasses
import math
from types import ModuleType

import numpy as np
import pytest

from tests.conftest import bench_script


def _calibration() -> ModuleType:
    return bench_script("gate_calibration")


@pytest.mark.parametrize("name, drift", [("drift20", 0.20), ("drift30", 0.30)])
def test_large_drift_world_makes_only_old_comparator_cells_dearer(name: str, drift: float) -> None:
    cal = _calibration()
    scenario = dataclasses.replace(cal.SCENARIOS[name], tasks=200)
    assert scenario.cost_multiplier == 1.0 and scenario.resolve_shift == 0.0  # an A/A world
    world = cal.World(scenario, 20260110, 0)
    fresh = world.draw("comparator", 50)
    old = world.draw("comparator", 50, old=True)
    cand = world.draw("candidate", 50)
    gap = float(np.log(old.metric).mean() - np.log(fresh.metric).mean())
    assert gap == pytest.approx(math.log1p(drift), abs=0.02)  # SE about 0.004
    assert float(np.log(cand.metric).mean() - np.log(fresh.metric).mean()) == pytest.approx(
        0.0, abs=0.02
    )


def test_the_suite_measures_large_drift_at_10_and_50_tasks() -> None:
    cal = _calibration()
    rows = {(t, h): set(sc) for t, _, h, sc in cal.SUITE}
    for tasks in (10, 50):
        assert {"drift10", "drift20", "drift30"} <= rows[(tasks, "pooled")]
