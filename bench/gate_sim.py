"""The calibration's world simulator: numpy only, no import from ``bench_assets``.

It shares no code with the gate on purpose (issue 13): a bug in the gate's statistics cannot hide
in a simulator that calls the same functions. It draws plain numbers; ``gate_calibration.py``
turns them into gate inputs and asks the real gate.

Noise model (the issue's): per task a resolve probability uniform in [p_low, p_high] (the
candidate's lowered by ``resolve_shift``, or set to 0.1 on the first task for ``regress_one``), a
task mean log cost ~ N(log 0.7, 0.5), and a per-run cost lognormal with sigma 0.3 (Student t with
3 degrees of freedom scaled to the same sigma for ``heavy_tails``). The candidate's cost is
multiplied by ``cost_multiplier`` (per task lognormal around it with sd 0.25 for
``heterogeneous``). Reused and pooled comparator evidence costs ``1 + drift`` times what a fresh
run of the same arm costs. Each paid cell fails for infrastructure reasons with ``infra_rate``.
With ``fail_cost`` ≠ 1 a run that does not resolve costs that many times more (cost and outcome
are not independent in real sessions: a failing agent keeps trying).
"""

import dataclasses
import math

import numpy as np

RUN_SIGMA = 0.3
TASK_MEAN_LOG = math.log(0.7)
TASK_SPREAD = 0.5
REGRESSED_P = 0.1
HETERO_SD = 0.25


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One simulated world."""

    name: str
    p_low: float
    p_high: float
    cost_multiplier: float = 1.0
    resolve_shift: float = 0.0
    regress_one: bool = False
    drift: float = 0.0
    infra_rate: float = 0.0
    heterogeneous: bool = False
    heavy_tails: bool = False
    tasks: int = 10
    fail_cost: float = 1.0


LO, HI = (0.3, 0.95), (0.95, 1.0)
SCENARIOS = {
    s.name: s
    for s in (
        Scenario("aa", *LO),
        Scenario("aa_hi", *HI),
        Scenario("cheaper20", *LO, cost_multiplier=0.8),
        Scenario("cheaper20_hi", *HI, cost_multiplier=0.8),
        # so much cheaper that the cost test always passes: what the resolve bound allows
        Scenario("cheaper60", *LO, cost_multiplier=0.4),
        Scenario("worse10_cheaper20", *LO, cost_multiplier=0.8, resolve_shift=0.10),
        Scenario("worse15_cheaper20", *LO, cost_multiplier=0.8, resolve_shift=0.15),
        Scenario("regress1", *LO, cost_multiplier=0.8, regress_one=True),
        Scenario("drift5", *LO, drift=0.05),
        Scenario("drift10", *LO, drift=0.10),
        # large drift: the cost test leans on old cells, so the re-payment path must carry it
        Scenario("drift20", *LO, drift=0.20),
        Scenario("drift30", *LO, drift=0.30),
        Scenario("infra1", *LO, cost_multiplier=0.8, infra_rate=0.01),
        Scenario("hetero20", *LO, cost_multiplier=0.8, heterogeneous=True),
        Scenario("heavytail20", *LO, cost_multiplier=0.8, heavy_tails=True),
        Scenario("aa_failcost", *LO, fail_cost=1.5),
        Scenario("drift10_failcost", *LO, drift=0.10, fail_cost=1.5),
        Scenario("cheaper20_failcost", *LO, cost_multiplier=0.8, fail_cost=1.5),
        Scenario("worse10_failcost", *LO, cost_multiplier=0.8, resolve_shift=0.10, fail_cost=1.5),
    )
}


@dataclasses.dataclass
class Cells:
    """Runs of one arm on every task: resolved, metric, infra failure (tasks x runs)."""

    resolved: np.ndarray
    metric: np.ndarray
    infra: np.ndarray


class World:
    """One generation's truth; draws cells on demand from its own stream."""

    def __init__(self, scenario: Scenario, seed: int, generation: int) -> None:
        self.s = scenario
        key = [seed, sum(map(ord, scenario.name)), scenario.tasks, generation]
        self.rng = np.random.default_rng(key)
        n = scenario.tasks
        self.p = self.rng.uniform(scenario.p_low, scenario.p_high, size=n)
        self.p_cand = np.clip(self.p - scenario.resolve_shift, 0.0, 1.0)
        if scenario.regress_one:
            self.p_cand[0] = REGRESSED_P
        self.mean_log = self.rng.normal(TASK_MEAN_LOG, TASK_SPREAD, size=n)
        mult = np.full(n, math.log(scenario.cost_multiplier))
        if scenario.heterogeneous:
            mult = mult + self.rng.normal(0.0, HETERO_SD, size=n)
        self.cand_shift = mult

    def _noise(self, shape: tuple[int, int]) -> np.ndarray:
        if self.s.heavy_tails:
            df = 3.0
            return self.rng.standard_t(df, size=shape) * math.sqrt((df - 2) / df)
        return self.rng.standard_normal(shape)

    def draw(self, arm: str, runs: int, *, old: bool = False) -> Cells:
        """``runs`` cells per task of ``arm`` (``candidate`` or ``comparator``); ``old`` cells are
        reused or pooled comparator evidence, dearer by the drift and never failing (they were
        valid when recorded)."""
        n = self.s.tasks
        p = self.p_cand if arm == "candidate" else self.p
        resolved = self.rng.random((n, runs)) < p[:, None]
        log_cost = self.mean_log[:, None] + RUN_SIGMA * self._noise((n, runs))
        if arm == "candidate":
            log_cost = log_cost + self.cand_shift[:, None]
        if self.s.fail_cost != 1.0:
            log_cost = log_cost + np.where(resolved, 0.0, math.log(self.s.fail_cost))
        if old:
            log_cost = log_cost + math.log1p(self.s.drift)
            infra = np.zeros((n, runs), dtype=bool)
        else:
            infra = self.rng.random((n, runs)) < self.s.infra_rate
        return Cells(resolved=resolved, metric=np.exp(log_cost), infra=infra)

    def redraw(self, arm: str, cells: Cells, tries: int) -> int:
        """Re-pay failed cells up to ``tries`` times each; returns the cells paid."""
        paid = 0
        for _ in range(tries):
            failed = np.argwhere(cells.infra)
            if failed.size == 0:
                break
            for t, r in failed:
                paid += 1
                again = self.draw(arm, 1)
                cells.resolved[t, r] = again.resolved[t, 0]
                cells.metric[t, r] = again.metric[t, 0]
                cells.infra[t, r] = again.infra[t, 0]
        return paid
