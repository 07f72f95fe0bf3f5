"""JSON Schema files generated from the models, shipped in ``tasks/schema/`` for editors."""

import json
from pathlib import Path

from pydantic import BaseModel

from bench_assets.config.models import BenchConfig, CandidateSpec, TaskSpec
from bench_assets.kernel.fsutil import atomic_write_text

SCHEMAS: dict[str, type[BaseModel]] = {
    "bench.schema.json": BenchConfig,
    "task.schema.json": TaskSpec,
    "candidate.schema.json": CandidateSpec,
}


def render() -> dict[str, str]:
    """File name → schema text, exactly as shipped."""
    out = {}
    for name, model in SCHEMAS.items():
        schema = model.model_json_schema(by_alias=True, mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        out[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def stale(schema_dir: Path) -> list[str]:
    """Names of shipped schema files that differ from the models (or are missing)."""
    rendered = render()
    return sorted(
        n
        for n, text in rendered.items()
        if not (schema_dir / n).is_file() or (schema_dir / n).read_text(encoding="utf-8") != text
    )


def write(schema_dir: Path) -> list[Path]:
    """Regenerate every schema file."""
    return [atomic_write_text(schema_dir / n, t) for n, t in render().items()]
