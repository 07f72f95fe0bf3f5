"""The code location: everything under ``bench_assets/defs/``, the driver's jobs, and the
in-process executor.

The composition root, above both layers: ``defs/`` holds what Dagster sees of the core (assets,
partitions, the resource, sensors) and never imports the driver; the three jobs whose ops drive
Dagster (``weekly_generation`` with its schedule, ``input_batch``, ``cell_batch``) are the
driver's, defined beside the code their ops run, and joined to the rest here.
"""

from pathlib import Path

import dagster as dg

from bench_assets.driver.automation import build_weekly_schedule, weekly_generation
from bench_assets.driver.cellbatch import cell_batch
from bench_assets.driver.inputs import input_batch


@dg.definitions
def defs() -> dg.Definitions:
    """Load every Dagster object in ``defs/`` and the driver's jobs; runs execute in process (one
    step per asset). The weekly schedule reads ``$WFBENCH_TASKS/bench.yaml`` (default
    ``tasks/``)."""
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        dg.Definitions(
            jobs=[weekly_generation, input_batch, cell_batch],
            schedules=[build_weekly_schedule()],
            executor=dg.in_process_executor,
        ),
    )
