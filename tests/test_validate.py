"""`wfbench validate`: every malformed input exits 2 naming the file and the field."""

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.kernel.errors import ValidationFailed
from bench_assets.tasks.catalog import collect_issues, load_benchmark
from tests.conftest import add_task, make_bench, write_yaml

Mutation = Callable[[Path], None]


def edit(path: Path, fn: Callable[[dict], None]) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    write_yaml(path, data)


def task_edit(fn: Callable[[dict], None]) -> Mutation:
    return lambda root: edit(root / "alpha" / "task.yaml", fn)


def bench_edit(fn: Callable[[dict], None]) -> Mutation:
    return lambda root: edit(root / "bench.yaml", fn)


def _symlink_oracle(root: Path) -> None:
    target = root / "alpha" / "oracle" / "test_oracle_alpha.py"
    real = root / "elsewhere.py"
    real.write_text("x = 1\n")
    target.unlink()
    target.symlink_to(real)


def _oversized_oracle(root: Path) -> None:
    edit(root / "bench.yaml", lambda d: d.setdefault("limits", {}).update(oracle_file_bytes=10))


def _duplicate_id(root: Path) -> None:
    add_task(root, "Alpha")


def _yaml_syntax(root: Path) -> None:
    (root / "alpha" / "task.yaml").write_text("id: alpha\nprompt: [unclosed\n")


def _not_mapping(root: Path) -> None:
    (root / "alpha" / "task.yaml").write_text("- id: alpha\n")


def _misnamed(root: Path) -> None:
    (root / "alpha" / "task.yaml").rename(root / "alpha" / "task.yml")


def _no_inline_repo(root: Path) -> None:
    import shutil

    shutil.rmtree(root / "alpha" / "repo")


def _repo_symlink(root: Path) -> None:
    (root / "alpha" / "repo" / "link").symlink_to("/etc/passwd")


def _missing_bench(root: Path) -> None:
    (root / "bench.yaml").unlink()


def _missing_predictions(root: Path) -> None:
    (root / "replays" / "b.jsonl").unlink()


def _missing_skills(root: Path) -> None:
    import shutil

    shutil.rmtree(root / "skills")


def _bad_folder_name(root: Path) -> None:
    add_task(root, "bad id!")


CASES: list[tuple[str, Mutation, str, str]] = [
    # (name, mutation, file suffix, field)
    ("missing prompt", task_edit(lambda d: d.pop("prompt")), "alpha/task.yaml", "prompt"),
    ("missing oracle", task_edit(lambda d: d.pop("oracle")), "alpha/task.yaml", "oracle"),
    ("unknown task key", task_edit(lambda d: d.update(colour="red")), "alpha/task.yaml", "colour"),
    ("unknown bench key", bench_edit(lambda d: d.update(arm=1)), "bench.yaml", "arm"),
    (
        "unknown nested key",
        task_edit(lambda d: d["oracle"].update(timeout=3)),
        "alpha/task.yaml",
        "oracle.timeout",
    ),
    ("bad id characters", _bad_folder_name, "bad id!/task.yaml", "id"),
    ("id != folder", task_edit(lambda d: d.update(id="beta")), "alpha/task.yaml", "id"),
    ("id with ..", task_edit(lambda d: d.update(id="a..b")), "alpha/task.yaml", "id"),
    ("duplicate id", _duplicate_id, "alpha/task.yaml", "id"),
    (
        "missing oracle file",
        task_edit(lambda d: d["oracle"].update(files=["nope.py"])),
        "alpha/task.yaml",
        "oracle.files.0",
    ),
    ("symlinked oracle file", _symlink_oracle, "alpha/task.yaml", "oracle.files.0"),
    ("oversized oracle file", _oversized_oracle, "alpha/task.yaml", "oracle.files.0"),
    (
        "absolute oracle path",
        task_edit(lambda d: d["oracle"].update(files=["/etc/passwd"])),
        "alpha/task.yaml",
        "oracle.files",
    ),
    (
        "dotdot oracle path",
        task_edit(lambda d: d["oracle"].update(files=["../task.yaml"])),
        "alpha/task.yaml",
        "oracle.files",
    ),
    (
        "no oracle files",
        task_edit(lambda d: d["oracle"].update(files=[])),
        "alpha/task.yaml",
        "oracle.files",
    ),
    (
        "empty oracle command",
        task_edit(lambda d: d["oracle"].update(command="  ")),
        "alpha/task.yaml",
        "oracle.command",
    ),
    ("empty prompt", task_edit(lambda d: d.update(prompt="   \n")), "alpha/task.yaml", "prompt"),
    ("empty setup", task_edit(lambda d: d.update(setup="")), "alpha/task.yaml", "setup"),
    (
        "absolute protected glob",
        task_edit(lambda d: d.update(protected=["/etc/*"])),
        "alpha/task.yaml",
        "protected.0",
    ),
    ("ref with inline repo", task_edit(lambda d: d.update(ref="main")), "alpha/task.yaml", ""),
    (
        "wrong type bool",
        task_edit(lambda d: d.update(expensive="yes")),
        "alpha/task.yaml",
        "expensive",
    ),
    (
        "wrong type list",
        task_edit(lambda d: d.update(protected="conftest.py")),
        "alpha/task.yaml",
        "protected",
    ),
    (
        "mutable alias latest",
        bench_edit(lambda d: d.update(model="claude-sonnet-latest")),
        "bench.yaml",
        "model",
    ),
    ("mutable alias auto", bench_edit(lambda d: d.update(model="auto")), "bench.yaml", "model"),
    ("runs < 1", bench_edit(lambda d: d.update(runs=0)), "bench.yaml", "runs"),
    ("runs as string", bench_edit(lambda d: d.update(runs="3")), "bench.yaml", "runs"),
    (
        "candidate without pairs_with",
        bench_edit(lambda d: d["arms"]["cand"].pop("pairs_with")),
        "bench.yaml",
        "arms.cand",
    ),
    (
        "pairs_with unknown arm",
        bench_edit(lambda d: d["arms"]["cand"].update(pairs_with="ghost")),
        "bench.yaml",
        "arms.cand.pairs_with",
    ),
    (
        "pairs_with non-incumbent arm",
        bench_edit(lambda d: d["arms"]["cand"].update(pairs_with="baseline")),
        "bench.yaml",
        "arms.cand.pairs_with",
    ),
    (
        "comparator with candidate skills",
        bench_edit(lambda d: d["arms"]["baseline"].update(skills="candidate")),
        "bench.yaml",
        "arms.baseline",
    ),
    (
        "arm name with dot",
        bench_edit(lambda d: d["arms"].update({"work.flow": d["arms"]["baseline"]})),
        "bench.yaml",
        "arms",
    ),
    (
        "unknown adapter",
        bench_edit(lambda d: d["arms"]["baseline"].update(agent={"adapter": "gpt"})),
        "bench.yaml",
        "arms.baseline.agent",
    ),
    (
        "bad cron value",
        bench_edit(lambda d: d.update(schedule={"cron": "0 25 * * 6"})),
        "bench.yaml",
        "schedule.cron",
    ),
    (
        "bad cron fields",
        bench_edit(lambda d: d.update(schedule={"cron": "0 3 * *"})),
        "bench.yaml",
        "schedule.cron",
    ),
    ("YAML syntax error", _yaml_syntax, "alpha/task.yaml", ""),
    ("not a mapping", _not_mapping, "alpha/task.yaml", ""),
    ("task.yml misnamed", _misnamed, "alpha/task.yml", ""),
    ("inline repo missing", _no_inline_repo, "alpha/task.yaml", "repo"),
    ("symlink in inline repo", _repo_symlink, "alpha/task.yaml", "repo"),
    ("bench.yaml missing", _missing_bench, "bench.yaml", ""),
    ("predictions missing", _missing_predictions, "bench.yaml", "arms.baseline.agent.predictions"),
    ("skill tree missing", _missing_skills, "bench.yaml", "skills.source"),
]


@pytest.mark.parametrize(("name", "mutate", "file", "field"), CASES, ids=[c[0] for c in CASES])
def test_malformed_input_exits_2_naming_file_and_field(
    tmp_path: Path, name: str, mutate: Mutation, file: str, field: str
) -> None:
    root = make_bench(tmp_path / "tasks")
    assert CliRunner().invoke(main, ["validate", str(root)]).exit_code == 0
    mutate(root)
    result = CliRunner().invoke(main, ["validate", str(root), "--json"])
    assert result.exit_code == 2, result.output
    body = json.loads(result.output)
    assert body["ok"] is False
    matching = [
        e for e in body["errors"] if e["file"].endswith(file) and e["field"].startswith(field)
    ]
    assert matching, f"{name}: no error for {file}: {field} in {body['errors']}"
    assert all(e["message"] for e in body["errors"])
    # The plain form says the same, one `file: field: message` line per problem.
    plain = CliRunner().invoke(main, ["validate", str(root)])
    assert plain.exit_code == 2
    assert f"{matching[0]['file']}: {matching[0]['field'] or '(file)'}: " in plain.output


def test_all_errors_are_reported_at_once(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))
    edit(root / "alpha" / "task.yaml", lambda d: d.pop("prompt"))
    edit(root / "beta" / "task.yaml", lambda d: d.update(colour=1))
    edit(root / "bench.yaml", lambda d: d.update(runs=0))
    issues, bench = collect_issues(root)
    assert bench is None
    assert {(i.file.split("/", 1)[1], i.field) for i in issues} == {
        ("alpha/task.yaml", "prompt"),
        ("beta/task.yaml", "colour"),
        ("bench.yaml", "runs"),
    }
    with pytest.raises(ValidationFailed) as exc:
        load_benchmark(root)
    assert len(exc.value.issues) == 3


def test_valid_benchmark_exits_0(bench_dir: Path) -> None:
    result = CliRunner().invoke(main, ["validate", str(bench_dir), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output) == {"ok": True, "errors": []}


def test_demo_suite_is_valid() -> None:
    from tests.conftest import DEMO_TASKS

    result = CliRunner().invoke(main, ["validate", str(DEMO_TASKS)])
    assert result.exit_code == 0, result.output


def test_invalid_input_materializes_nothing(tmp_path: Path, artifact_root: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    edit(root / "alpha" / "task.yaml", lambda d: d.update(prompt=""))
    result = CliRunner().invoke(main, ["inputs", "--tasks", str(root)])
    assert result.exit_code == 2
    assert "alpha/task.yaml: prompt:" in result.output
    assert not artifact_root.exists() or not any(artifact_root.iterdir())
    import dagster as dg

    instance = dg.DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    assert instance.get_dynamic_partitions("tasks") == []
    assert not instance.get_asset_keys()
