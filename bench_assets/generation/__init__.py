"""The pure parts of a generation: ids, queue and outage breaker (``queue``), the reuse
policy (``planner``), the proposer, applying a promotion (``apply``), progress.
The generation itself is driven by ``driver/``.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner, cells,
exports, decision.
"""
