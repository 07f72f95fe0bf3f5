"""The driver: code that drives a Dagster instance from outside it.

``evolve`` runs a whole generation (plan, pay, decide, report, ledger, apply) and ``instance``
holds the operations on an instance that the CLI and the driver share (sync partitions,
materialize inputs, cells and the decision, read the latest cells and decisions). Layering:
``cli`` → ``driver`` → ``defs`` → core. The one call upward is the weekly job in
``defs/automation.py``, whose op runs :func:`bench_assets.driver.evolve.evolve` inside a run.

May import: every core room and defs (kernel, config, sandbox, scorers, gate, tasks, inputs,
agents, runner, cells, exports, decision, generation, mining, defs).
"""
