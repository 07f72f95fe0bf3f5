"""Dagster objects only: every module here is loaded by ``bench_assets.definitions``.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner, cells,
exports, decision, generation, mining; and, at run time inside two ops only, the driver (the weekly
job's op and the input_batch op: docs/architecture.md, "The two calls that go up").
"""
