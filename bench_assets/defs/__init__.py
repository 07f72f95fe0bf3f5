"""Dagster objects only: every module here is loaded by ``bench_assets.definitions``.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner, cells,
exports, decision, generation, mining; never the driver, not even inside a function (the jobs
whose ops drive Dagster are the driver's: docs/architecture.md, "The jobs that drive Dagster").
"""
