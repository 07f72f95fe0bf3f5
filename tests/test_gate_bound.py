"""``bench/gate_bound.py``: the drift-robust ceiling on issue 23's 10-task power row is only as good
as its two oracles, so these hold each to its level and to the closed form it prints beside it."""

from types import ModuleType

import pytest

from tests.conftest import bench_script


def _bound() -> ModuleType:
    return bench_script("gate_bound")


COMMON = dict(tasks=10, comp_runs=12, generations=1500, seed=7, margin=0.10, resolve_error=0.20)


def test_the_non_inferiority_oracle_passes_a_candidate_exactly_at_the_margin_at_its_level() -> None:
    b = _bound()
    ni, _ = b.oracle("worse10_cheaper20", cells=46, canaries=1, **COMMON)
    assert float((ni > 0).mean()) == pytest.approx(0.20, abs=0.035)  # SE about 0.010
    ni_equal, _ = b.oracle("aa", cells=46, canaries=1, **COMMON)
    assert float((ni_equal > 0).mean()) > 0.55  # and it does pass equal candidates


@pytest.mark.parametrize("canaries", [1, 3])
def test_the_cost_oracle_matches_its_closed_form(canaries: int) -> None:
    b = _bound()
    alpha = 0.03
    z = b.NORMAL.inv_cdf(1 - alpha)
    _, cost = b.oracle("cheaper20", cells=46, canaries=canaries, **COMMON)
    assert float((cost < -z).mean()) == pytest.approx(b.analytic(10, 46, canaries, alpha), abs=0.04)
    _, cost_aa = b.oracle("aa", cells=46, canaries=canaries, **COMMON)
    assert float((cost_aa < -z).mean()) == pytest.approx(alpha, abs=0.015)


def test_the_cost_oracle_reads_only_fresh_cells_so_drift_cannot_move_it() -> None:
    b = _bound()
    _, aa = b.oracle("aa", cells=46, canaries=1, **COMMON)
    _, drift = b.oracle("drift30", cells=46, canaries=1, **COMMON)
    # drift30's old cells are 30 % dearer; a test that read them would see the candidate cheaper
    assert abs(float(drift.mean()) - float(aa.mean())) < 0.15  # each mean's SE about 0.026
