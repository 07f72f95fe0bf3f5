"""Predictions in every common producer format read the same and grade the same."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench_assets.agents.predictions import MAX_METADATA_BYTES, load_predictions
from bench_assets.cli import main
from bench_assets.kernel.errors import InputError
from tests.conftest import make_bench, write_yaml
from tests.test_dagster_cells import fix_patch

FIX = "FIX"  # replaced by the real patch in the grading test


def producer_files(tmp: Path, fix: str) -> dict[str, Path]:
    """The same two predictions (alpha: the fix; beta: null patch) in the five producer formats."""
    tmp.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    common = [
        {"instance_id": "alpha", "model_name_or_path": "prod-x", "model_patch": fix},
        {"instance_id": "beta", "model_name_or_path": "prod-x", "model_patch": None},
    ]
    files["jsonl"] = tmp / "preds.jsonl"
    files["jsonl"].write_text("".join(json.dumps(p) + "\n" for p in common))
    files["list"] = tmp / "preds_list.json"
    files["list"].write_text(json.dumps(common, indent=2))
    files["dict"] = tmp / "preds.json"  # SWE-agent / mini-swe-agent: keyed by instance id
    files["dict"].write_text(
        json.dumps(
            {
                "alpha": {"model_name_or_path": "prod-x", "model_patch": fix, "full_output": "…"},
                "beta": {"instance_id": "beta", "model_name_or_path": "prod-x"},
            },
            indent=2,
        )
    )
    files["openhands"] = tmp / "output.jsonl"
    files["openhands"].write_text(
        "".join(
            json.dumps(
                {
                    "instance_id": iid,
                    "test_result": {"git_patch": patch},
                    "metadata": {"llm_config": {"model": "prod-x"}, "agent_class": "CodeActAgent"},
                    "history": [{"action": "run"}],
                    "error": None,
                }
            )
            + "\n"
            for iid, patch in (("alpha", fix), ("beta", ""))
        )
    )
    files["extras"] = tmp / "extras.jsonl"  # extra keys (cost fields) and a missing patch
    files["extras"].write_text(
        json.dumps({**common[0], "cost": 0.42, "instance_cost": 0.42, "exit_status": "submitted"})
        + "\n"
        + json.dumps({"instance_id": "beta", "model_name_or_path": "prod-x", "cost": 0.1})
        + "\n"
    )
    return files


def test_every_format_reads_to_the_same_patches_and_producer(tmp_path: Path) -> None:
    files = producer_files(tmp_path, FIX)
    seen = {}
    for name, f in files.items():
        preds = load_predictions(f)
        assert set(preds) == {("alpha", 0), ("beta", 0)}, name
        seen[name] = {k: (p.model_patch, p.model_name_or_path) for k, p in preds.items()}
    assert all(v == seen["jsonl"] for v in seen.values()), seen
    assert seen["jsonl"][("beta", 0)] == ("", "prod-x")  # null patch = empty patch
    extras = load_predictions(files["extras"])
    assert extras[("alpha", 0)].metadata == {
        "cost": 0.42,
        "instance_cost": 0.42,
        "exit_status": "submitted",
    }
    oh = load_predictions(files["openhands"])[("alpha", 0)]
    assert oh.metadata["metadata"]["agent_class"] == "CodeActAgent"
    assert load_predictions(files["dict"])[("alpha", 0)].metadata == {"full_output": "…"}


def test_openhands_cost_becomes_usage(tmp_path: Path) -> None:
    f = tmp_path / "output.jsonl"
    f.write_text(
        json.dumps(
            {
                "instance_id": "a",
                "test_result": {"git_patch": "diff"},
                "metrics": {"accumulated_cost": 1.25},
            }
        )
        + "\n"
    )
    assert load_predictions(f)[("a", 0)].usage.cost_usd == 1.25


def test_repeated_ids_are_runs_in_file_order_and_explicit_runs_are_kept(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    lines = [
        {"instance_id": "a", "model_patch": "first"},
        {"instance_id": "a", "model_patch": "second"},
        {"instance_id": "a", "model_patch": "explicit0", "run": 0},
        {"instance_id": "b", "model_patch": "b0"},
    ]
    f.write_text("".join(json.dumps(p) + "\n" for p in lines))
    preds = load_predictions(f)
    assert {k: p.model_patch for k, p in preds.items()} == {
        ("a", 0): "explicit0",
        ("a", 1): "first",
        ("a", 2): "second",
        ("b", 0): "b0",
    }
    assert preds[("a", 2)].run == 2
    assert preds[("b", 0)].model_name_or_path is None


def test_large_metadata_is_bounded_and_names_what_was_dropped(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    big = ["step"] * (MAX_METADATA_BYTES // 4)
    f.write_text(json.dumps({"instance_id": "a", "history": big, "cost": 1}) + "\n")
    meta = load_predictions(f)[("a", 0)].metadata
    assert meta == {"cost": 1, "_dropped": ["history"]}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"instance_id": "a", "run": 0}\n{"instance_id": "a", "run": 0}\n', "line 2"),
        ('{"instance_id": "a"}\n{"instance_id": 7}\n', "line 2: field 'instance_id'"),
        ('[{"instance_id": "a"}, {"instance_id": "b", "run": -1}]', "entry 1: field 'run'"),
        ('{"x": {"model_patch": 5}}', "key 'x': field 'model_patch'"),
        ('{"x": {"instance_id": "y"}}', "key 'x': field 'instance_id' is 'y'"),
        ('{\n  "a": {"model_patch": "p",}\n}\n', "not valid JSON, neither as one document (line 2"),
        ('{"instance_id": "a"}\nnot json\n', "line 2: invalid prediction: not valid JSON"),
        ("[1]", "entry 0: a prediction must be a JSON object"),
        ('{"instance_id": "a", "usage": {"cost_usd": "x"}}\n', "field 'usage.cost_usd'"),
    ],
)
def test_errors_name_the_file_the_place_and_the_field(
    tmp_path: Path, content: str, needle: str
) -> None:
    f = tmp_path / "p.json"
    f.write_text(content)
    with pytest.raises(InputError) as e:
        load_predictions(f)
    assert str(f) in str(e.value) and needle in str(e.value), str(e.value)


def test_the_five_formats_grade_identically_and_record_the_producer(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"), runs=1)
    fix = fix_patch(root)
    results = {}
    for name, f in producer_files(tmp_path / "preds", fix).items():
        report = tmp_path / f"report-{name}.json"
        out = CliRunner().invoke(
            main,
            [
                "grade",
                "--predictions",
                str(f),
                "--tasks",
                str(root),
                "--json",
                "--report",
                str(report),
            ],
        )
        assert out.exit_code == 0, (name, out.output)
        records = [json.loads(line) for line in out.stdout.splitlines()]
        results[name] = sorted(
            (r["task"], r["run"], r["resolved"], r["error_kind"], r["producer"], r["churn_files"])
            for r in records
        )
        rep = json.loads(report.read_text())
        assert rep["resolved_ids"] == ["alpha"] and rep["empty_patch_ids"] == ["beta"], name
        assert rep["resolved_instances"] == 1 and rep["error_ids"] == [], name
    assert results["jsonl"] == [
        ("alpha", 0, True, None, "prod-x", 1),
        ("beta", 0, False, "oracle-failed", "prod-x", 0),
    ]
    assert all(v == results["jsonl"] for v in results.values()), results


def test_grade_table_aligns_to_the_longest_id(tmp_path: Path) -> None:
    long_id = "astropy__astropy-12907-abcdefgh"  # 31 characters
    root = make_bench(tmp_path / "tasks", tasks=("alpha", long_id), runs=1)
    write_yaml(root / long_id / "task.yaml", {**_task_yaml(root / "alpha"), "id": long_id})
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"instance_id": "alpha"}) + "\n" + json.dumps({"instance_id": long_id}) + "\n"
    )
    out = CliRunner().invoke(main, ["grade", "--predictions", str(f), "--tasks", str(root)])
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("task", "alpha", long_id))]
    assert len(lines) == 3
    columns = {ln.index(" grade ") for ln in lines[1:]}
    assert len(columns) == 1 and lines[0].index("arm") == columns.pop() + 1


def _task_yaml(d: Path) -> dict[str, object]:
    import yaml

    return yaml.safe_load((d / "task.yaml").read_text())
