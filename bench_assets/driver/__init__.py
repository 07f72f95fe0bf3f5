"""The driver: code that drives a Dagster instance from outside it.

``evolve`` runs a whole generation (plan, pay, decide, report, ledger, apply) and ``instance``
holds the operations on an instance that the CLI and the driver share (sync partitions,
materialize cells and the decision, read the latest cells and decisions). Layering:
``cli`` → ``driver`` → ``defs`` → core, and nothing calls back up. The three jobs whose ops drive
Dagster from inside a run are defined here, beside the code they run: ``automation`` (the
``weekly_generation`` job and its schedule; the op runs :func:`bench_assets.driver.evolve.evolve`),
``inputs`` (``input_batch``) and ``cellbatch`` (``cell_batch``). The code location
``bench_assets/definitions.py``, above both layers, joins them to ``defs/``. The executors
(``runqueue``) stand above the batch modules they run; what both need (``Job``, ``Finished``) is
``runs``', below both, so no module of the room imports back.

May import: every core room and defs (kernel, config, sandbox, scorers, gate, tasks, inputs,
agents, runner, cells, exports, decision, generation, mining, defs).
"""
