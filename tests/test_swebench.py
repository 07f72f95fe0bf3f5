"""`wfbench import swebench`, then grading gold, empty and wrong patches, then `wfbench export`."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.kernel.errors import InputError
from bench_assets.tasks.catalog import load_benchmark
from bench_assets.tasks.swebench import GOLD_FILE, import_instances, load_instances
from tests.swebench_fixture import build, write_jsonl

IDS = ["acme__shapes-1", "acme__shapes-2", "acme__shapes-3"]


def cli(*args: str) -> "object":
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture
def suite(tmp_path: Path) -> tuple[Path, Path, list[dict[str, object]]]:
    repos, instances = build(tmp_path)
    source = write_jsonl(tmp_path / "instances.jsonl", instances)
    return source, repos, instances


def test_import_writes_pinned_tasks_with_hidden_tests_and_gold_outside(
    tmp_path: Path, suite: tuple[Path, Path, list[dict[str, object]]]
) -> None:
    source, repos, instances = suite
    tasks = tmp_path / "tasks"
    out = cli("import", "swebench", str(source), "--repos", str(repos), "--tasks", str(tasks))
    assert out.stdout.count("created   acme__shapes-") == 3  # type: ignore[attr-defined]
    bench = load_benchmark(tasks)  # a valid benchmark, bench.yaml written for the fresh folder
    assert bench.task_ids() == IDS
    one = yaml.safe_load((tasks / IDS[0] / "task.yaml").read_text())
    assert one["ref"] == instances[0]["base_commit"] and one["repo"] == str(repos / "acme/shapes")
    assert one["prompt"] == instances[0]["problem_statement"]
    assert one["oracle"]["fail_to_pass"] == ["tests/test_shapes.py::test_area_square"]
    assert one["verify"] == {"pytest": ["tests/test_shapes.py"]}  # the tests visible at base
    # The oracle is the test file after the test patch: the new test is hidden from the agent.
    assert "test_area_square" in (tasks / IDS[0] / "oracle/tests/test_shapes.py").read_text()
    two = yaml.safe_load((tasks / IDS[1] / "task.yaml").read_text())
    # A listed test in a file the agent can read is graded by verify, never a hidden oracle file.
    assert two["oracle"] == {
        "files": ["tests/test_perimeter.py"],
        "fail_to_pass": ["tests/test_perimeter.py::test_perimeter"],
    }
    assert two["verify"] == {"pytest": ["tests/test_misc.py"]}
    gold = [json.loads(line) for line in (tasks / GOLD_FILE).read_text().splitlines()]
    assert [g["instance_id"] for g in gold] == IDS and gold[0]["model_patch"] == instances[0][
        "patch"
    ]
    assert not any("patch" in p.name for p in (tasks / IDS[0]).rglob("*"))


def test_reimport_is_idempotent_and_a_changed_instance_shows_its_diff(
    tmp_path: Path, suite: tuple[Path, Path, list[dict[str, object]]]
) -> None:
    source, repos, instances = suite
    tasks = tmp_path / "tasks"
    import_instances(source, repos, tasks)
    before = {p: p.read_bytes() for p in tasks.rglob("*") if p.is_file()}
    again = import_instances(source, repos, tasks)
    assert [r.status for r in again] == ["unchanged"] * 3
    assert before == {p: p.read_bytes() for p in tasks.rglob("*") if p.is_file()}
    instances[1] = {**instances[1], "problem_statement": "Add perimeter(side) for squares."}
    write_jsonl(source, instances)
    out = cli("import", "swebench", str(source), "--repos", str(repos), "--tasks", str(tasks))
    text = out.stdout  # type: ignore[attr-defined]
    assert "changed   acme__shapes-2" in text and "unchanged acme__shapes-1" in text
    assert "-prompt: Add perimeter(side), the perimeter of a square." in text
    assert "+prompt: Add perimeter(side) for squares." in text


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"base_commit": "0" * 40}, "acme__shapes-1: field 'base_commit'"),
        ({"repo": "acme/nothere"}, "no local repository for acme/nothere"),
        ({"FAIL_TO_PASS": '["test_x (tests.Case)"]'}, "field 'FAIL_TO_PASS': test id"),
        ({"FAIL_TO_PASS": "not json"}, "line 1 (acme__shapes-1): field 'FAIL_TO_PASS'"),
        ({"test_patch": "diff --git a/tests/x.py b/tests/x.py\n@@ nonsense"}, "field 'test_patch'"),
        ({"instance_id": "../evil"}, "field 'instance_id'"),
    ],
)
def test_bad_instances_are_refused_naming_instance_and_field_and_nothing_is_written(
    tmp_path: Path,
    suite: tuple[Path, Path, list[dict[str, object]]],
    change: dict[str, str],
    needle: str,
) -> None:
    source, repos, instances = suite
    write_jsonl(source, [{**instances[0], **change}, *instances[1:]])
    tasks = tmp_path / "tasks"
    with pytest.raises(InputError) as e:
        import_instances(source, repos, tasks)
    assert needle in str(e.value) and str(source) in str(e.value), str(e.value)
    assert not tasks.exists()


def test_an_instance_with_only_new_test_files_is_decided_by_the_oracle_alone(
    tmp_path: Path, suite: tuple[Path, Path, list[dict[str, object]]]
) -> None:
    source, repos, instances = suite
    write_jsonl(source, [{**instances[1], "PASS_TO_PASS": "[]"}])
    import_instances(source, repos, tmp_path / "tasks")
    doc = yaml.safe_load((tmp_path / "tasks" / IDS[1] / "task.yaml").read_text())
    assert doc["verify"] == 'python -c "pass"'
    assert doc["oracle"]["fail_to_pass"] == ["tests/test_perimeter.py::test_perimeter"]


def test_import_can_give_every_task_its_pyproject_environment(
    tmp_path: Path, suite: tuple[Path, Path, list[dict[str, object]]]
) -> None:
    source, repos, _ = suite
    tasks = tmp_path / "tasks"
    cli(
        "import",
        "swebench",
        str(source),
        "--repos",
        str(repos),
        "--tasks",
        str(tasks),
        "--pyproject-env",
    )
    doc = yaml.safe_load((tasks / IDS[0] / "task.yaml").read_text())
    assert doc["environment"] == {"pyproject": True}


def test_a_json_list_of_instances_reads_like_jsonl(
    tmp_path: Path, suite: tuple[Path, Path, list[dict[str, object]]]
) -> None:
    source, _, instances = suite
    as_list = tmp_path / "instances.json"
    as_list.write_text(json.dumps(instances))
    assert load_instances(as_list) == load_instances(source)


@pytest.mark.slow
def test_gold_resolves_every_instance_empty_and_wrong_do_not_and_export_says_so(
    tmp_path: Path,
    suite: tuple[Path, Path, list[dict[str, object]]],
    artifact_root: Path,
) -> None:
    source, repos, instances = suite
    tasks = tmp_path / "tasks"
    cli("import", "swebench", str(source), "--repos", str(repos), "--tasks", str(tasks))

    report = tmp_path / "gold-report.json"
    gold = tasks / GOLD_FILE
    cli("grade", "--predictions", str(gold), "--tasks", str(tasks), "--report", str(report))
    rep = json.loads(report.read_text())
    assert rep["resolved_ids"] == IDS and rep["resolved_instances"] == 3, rep

    wrong = instances[0]["patch"].replace("side * side", "side + side")  # type: ignore[union-attr]
    assert wrong != instances[0]["patch"]
    others = tmp_path / "others.json"  # SWE-agent's preds.json shape
    others.write_text(
        json.dumps(
            {
                IDS[0]: {"model_name_or_path": "agent", "model_patch": wrong},
                IDS[1]: {"model_name_or_path": "agent", "model_patch": None},
            }
        )
    )
    report2 = tmp_path / "others-report.json"
    cli("grade", "--predictions", str(others), "--tasks", str(tasks), "--report", str(report2))
    rep2 = json.loads(report2.read_text())
    assert rep2["unresolved_ids"] == [IDS[0]] and rep2["empty_patch_ids"] == [IDS[1]], rep2
    assert rep2["resolved_ids"] == [] and rep2["error_ids"] == []

    # The benchmark's own `gold` arm, materialized as cells, then exported.
    cli("cells", "--run", "--tasks", str(tasks))
    # No false alarm: every graded cell (gold, wrong, empty) ran canaries; on gold none passed,
    # and no cell is grader-tampered (the wrong patch's area(3) == 6 can equal a mutant of
    # `== 9`: with its original failing, that mutant proves nothing).
    records = [json.loads(p.read_text()) for p in artifact_root.rglob("record.json")]
    graded = [r for r in records if r["oracle_run"] is not None]
    gold = [r for r in graded if r["resolved"]]
    assert len(gold) >= 6 and all(r["canaries"] for r in graded)
    fired = [c for r in gold for c in r["canaries"] if c["outcome"] in ("passed", "xpassed")]
    assert fired == [] and all(r["error_kind"] != "grader-tampered" for r in records)
    exported = cli("export", "--tasks", str(tasks), "--format", "swebench")
    doc = json.loads(exported.stdout)  # type: ignore[attr-defined]
    assert doc["arms"]["gold"]["r0"]["resolved_ids"] == IDS, doc
    csv = tmp_path / "cells.csv"
    cli("export", "--tasks", str(tasks), "--format", "csv", "--out", str(csv))
    parquet = tmp_path / "cells.parquet"
    cli("export", "--tasks", str(tasks), "--format", "parquet", "--out", str(parquet))
    for frame in (pd.read_csv(csv), pd.read_parquet(parquet)):
        assert sorted(frame["task"]) == IDS
        assert set(frame["outcome"]) == {"resolved"} and set(frame["producer"]) == {"gold"}
        assert {"identity", "timings", "cost_usd", "resolved_sha"} <= set(frame.columns)
