"""Resources: where the benchmark definition and the artifact store are."""

from pathlib import Path

import dagster as dg

from bench_assets.catalog import Benchmark, load_benchmark
from bench_assets.store import ArtifactStore, default_artifact_root


class BenchResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The benchmark directory and the artifact root.

    ``tasks_dir`` is relative to the process's working directory unless absolute (the code
    location runs from the repository root, see workspace.yaml); an empty ``artifact_root`` means
    ``$WFBENCH_ARTIFACTS`` or ``$DAGSTER_HOME/artifacts``.
    """

    tasks_dir: str = "tasks"
    artifact_root: str = ""

    def load_root(self) -> Path:
        """The benchmark directory."""
        return Path(self.tasks_dir).resolve()

    def load(self) -> Benchmark:
        """The validated benchmark; raises ValidationFailed listing every problem."""
        return load_benchmark(self.load_root())

    def artifacts(self) -> ArtifactStore:
        """The artifact store."""
        root = Path(self.artifact_root).resolve() if self.artifact_root else default_artifact_root()
        return ArtifactStore(root)


@dg.definitions
def resources() -> dg.Definitions:
    """Bind the resource keys once."""
    return dg.Definitions(resources={"bench": BenchResource()})
