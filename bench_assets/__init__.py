"""wfbench: a benchmark of coding-agent skill text, built as Dagster assets.

Everything in this package except ``bench_assets.defs`` and ``bench_assets.definitions`` is plain
Python with no Dagster import; the ``defs`` package only wires that core into assets, checks,
partitions, sensors, schedules and resources.
"""

__version__ = "0.1.0"
