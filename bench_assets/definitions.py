"""The code location: everything under ``bench_assets/defs/`` plus the in-process executor."""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """Load every Dagster object in ``defs/``; runs execute in process (one step per asset)."""
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        dg.Definitions(executor=dg.in_process_executor),
    )
