"""Partitions: one per task (dynamic, kept equal to ``tasks/`` by a sensor and ``wfbench sync``)."""

import dagster as dg

TASKS_PARTITIONS_NAME = "tasks"

task_partitions = dg.DynamicPartitionsDefinition(name=TASKS_PARTITIONS_NAME)
