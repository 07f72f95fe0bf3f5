"""The skill-eval demo: a plugin suite decided by the gate, replayed offline from real-CLI runs.

``make demo-skill-eval`` runs it. What it does, all offline and with no key:

1. ``wfbench import claude-plugin-eval`` the ``csvreport`` plugin in
   ``tests/data/skill_eval/plugins/csvreport`` (its suite under ``quality/evals``, written from the
   reference alone: eight cases over every grader kind, an ``llm`` and a ``baseline`` judge
   case) into a fresh tasks folder;
2. writes a bench.yaml with three replay arms: ``with_plugin`` (the incumbent plugin),
   ``with_candidate`` (a candidate overlay of its skill: no exploratory glob, a trigger limited to
   named CSV files) and ``without_plugin`` (no skills). Each arm's predictions are the sessions
   recorded from the real Claude Code CLI (the pin) against the mock Messages API
   (``record_csvreport.py``): the stream-json transcript, the patch of the files it wrote, and the
   usage the CLI itself reported in its ``result`` event (cost, tokens, turns);
3. pins a judge served by the mock Messages API on loopback (:func:`judge_script`), so the judge
   cases run through the egress proxy like a real one;
4. ``wfbench plan`` (the gate's power report for this suite), ``wfbench evolve`` (generation 1:
   24 cells, the gate's decision), ``wfbench cells`` (each cell's record: outcome, the CLI's
   cost, tokens and turns, generation), ``wfbench plan`` again (the next generation: which
   comparator cells it reuses from generation 1 and which it re-pays as canaries), ``explain``
   (the decision, its evidence cells with run ids and data versions, and every grader's outcome),
   ``export --format claude-plugin-eval`` and the table that tool would print.

The gate decides (here: keep_incumbent — a 25 % saving over eight tasks is not shown at gate
v3's 97.5 % bound; never left at insufficient evidence): eight counted tasks, one look that
answers. Lineage is Dagster's: every cell is an asset materialization of the demo's
own instance (``dagster_home`` beside the tasks folder; ``DAGSTER_HOME=... make ui`` shows it),
and ``explain`` names the run and data version of each evidence cell.

Usage: ``python -m tests.data.skill_eval.demo [TASKS_DIR]`` (default ``skill-eval-demo/tasks``;
the folder is replaced; its Dagster instance is ``TASKS_DIR/../dagster_home``).
"""

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from bench_assets.agents.claude_stream import parse_stream
from bench_assets.cli import main as wfbench
from bench_assets.tasks.skill_eval_import import import_plugin
from bench_assets.tasks.skill_eval_tasks import JUDGE_DEFAULT
from tests.data.skill_eval.record_csvreport import ARMS, CANDIDATE_SKILL, all_runs
from tests.mock_anthropic import MockMessagesAPI, Reply, text

HERE = Path(__file__).parent
PLUGIN = HERE / "plugins" / "csvreport"
T = HERE / "transcripts" / "csvreport"
CASE_NAMES = {"nested-quarter": "q3-total"}
"""Case folders whose case sets another ``name`` (the task id is ``csvreport.<name>``)."""
JUDGE_RULES = {
    # a phrase of the rubric -> what the evidence must hold for the mock judge to vote PASS
    "1,250 as the total": ("1,250", "games"),
    "at least as briefly as the reference": ("1,250",),
}


def judge_script(body: dict[str, Any]) -> Reply:
    """The mock judge: PASS when the evidence holds what its rubric asks (:data:`JUDGE_RULES`)."""
    shown = json.dumps(body.get("messages", []))
    # An llm vote shows <evidence ...>, a baseline vote the run's <run_last_message>.
    marker = "<evidence" if "<evidence" in shown else "<run_last_message>"
    rubric, _, evidence = shown.partition(marker)
    for phrase, needed in JUDGE_RULES.items():
        if phrase in rubric:
            ok = all(n in evidence for n in needed)
            return text("VERDICT: PASS" if ok else "VERDICT: FAIL")
    return text("No rule for this rubric.\nVERDICT: FAIL")


def prediction(name: str) -> dict[str, Any]:
    """One recorded session as a prediction row: patch, transcript, and the CLI's own usage."""
    short, _arm = name.split("--")
    tree = json.loads((T / f"{name}.tree.json").read_text())
    transcript = (T / f"{name}.jsonl").read_bytes()
    usage = parse_stream(transcript).usage()
    return {
        "instance_id": f"csvreport.{CASE_NAMES.get(short, short)}",
        "run": 0,
        "model_name_or_path": f"recorded:{name}",
        "model_patch": tree["patch"],
        "transcript": transcript.decode(),
        "usage": usage.model_dump(mode="json", exclude_none=True),
    }


def build(tasks: Path, judge_url: str) -> None:
    """The demo's tasks folder (module docstring, steps 1–3)."""
    if tasks.exists():
        shutil.rmtree(tasks)
    import_plugin(PLUGIN, tasks)
    (tasks / "replays").mkdir()
    for arm_name in ARMS:
        rows = [prediction(n) for n in all_runs() if n.endswith(f"--{arm_name}")]
        (tasks / "replays" / f"{arm_name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    cand = tasks / "candidates" / "c0001-named-csv-only"
    (cand / "files" / "summarize-csv").mkdir(parents=True)
    (cand / "files" / "summarize-csv" / "SKILL.md").write_text(CANDIDATE_SKILL)
    (cand / "candidate.yaml").write_text(
        yaml.safe_dump({"id": "c0001-named-csv-only", "title": "no glob; named CSV files only"})
    )

    def arm(name: str, skills: str, **extra: str) -> dict[str, Any]:
        agent = {"adapter": "replay", "predictions": f"replays/{name}.jsonl"}
        return {"agent": agent, "skills": skills, **extra}

    bench = {
        "model": "claude-sonnet-4-5-20250929",
        "runs": 1,
        "arms": {
            "without_plugin": arm("without_plugin", "none"),
            "with_plugin": arm("with_plugin", "incumbent"),
            "with_candidate": arm(
                "with_candidate", "candidate", role="candidate", pairs_with="with_plugin"
            ),
        },
        "policy": {"min_runs": 1, "max_looks": 1},
        "judge": {**JUDGE_DEFAULT, "api_base_url": judge_url},
    }
    header = "# The skill-eval demo (tests/data/skill_eval/demo.py): replayed, offline.\n"
    (tasks / "bench.yaml").write_text(header + yaml.safe_dump(bench, sort_keys=False))


def print_lineage() -> None:
    """The decision's lineage as Dagster recorded it: each asset's latest materialization, its
    run, its data version and the data versions of the inputs it was computed from."""
    from dagster import AssetKey, DagsterInstance

    inst = DagsterInstance.get()

    def show(key: str, indent: str) -> dict[str, str]:
        ev = inst.get_latest_materialization_event(AssetKey(key))
        assert ev is not None and ev.asset_materialization is not None
        tags = dict(ev.asset_materialization.tags or {})
        print(
            f"{indent}{key}: run {ev.run_id[:8]}, data version {tags['dagster/data_version'][:12]}"
        )
        ups = {
            t.rsplit("/", 1)[1]: v[:12]
            for t, v in tags.items()
            if t.startswith("dagster/input_data_version/")
        }
        for up, version in sorted(ups.items()):
            done = inst.get_materialized_partitions(AssetKey(up))
            # A partitioned input's tag holds one partition's version: name the count instead.
            shown = f"{len(done)} partitions, each a cell record" if done else version
            print(f"{indent}  <- {up} {shown}")
        return ups

    print("\nLineage in Dagster (the demo's instance):")
    ups = show("promotion_decision", "  ")
    agg = inst.get_latest_materialization_event(AssetKey("aggregates"))
    assert agg is not None and agg.asset_materialization is not None
    mine = (agg.asset_materialization.tags or {})["dagster/data_version"][:12]
    assert ups["aggregates"] == mine, "the decision was computed from another aggregates version"
    show("aggregates", "    ")


def run(*args: str) -> str:
    res = CliRunner().invoke(wfbench, list(args))
    print(res.output, end="")
    if res.exit_code != 0:
        raise SystemExit(f"wfbench {' '.join(args)} exited {res.exit_code}")
    return res.stdout


def main(tasks: Path) -> None:
    # Its own Dagster instance beside the tasks folder: `wfbench sync` keeps the task partitions
    # equal to one tasks folder, so the code demo's instance is left alone.
    home = tasks.parent / "dagster_home"
    if home.exists():
        shutil.rmtree(home)  # the demo's own instance: each demo starts at generation 1
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home.resolve())
    os.environ.setdefault("WFBENCH_IN_PROCESS", "1")
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-ant-demo-judge-key-not-a-real-key-000000")
    with MockMessagesAPI(judge_script) as judge:
        build(tasks, judge.url)
        run("validate", str(tasks))
        run("plan", "--tasks", str(tasks))
        run("evolve", "--tasks", str(tasks))
        run("cells", "--tasks", str(tasks))
        print("\nThe next generation after the decision (what it would reuse, what it re-pays):")
        run("plan", "--tasks", str(tasks))
        run("explain")
        print_lineage()
        out = tasks.parent / "claude-plugin-eval.json"
        run("export", "--format", "claude-plugin-eval", "--tasks", str(tasks), "--out", str(out),
            "--with-arm", "with_plugin", "--without-arm", "without_plugin")  # fmt: skip
        doc = json.loads(out.read_text())
        from bench_assets.exports.plugin_eval import plugin_eval_table

        print("\nclaude plugin eval's view of the latest cells (with_plugin vs without_plugin):")
        print(plugin_eval_table(doc))
        print(f"\nexported: {out}; judge calls served by the mock API: {len(judge.seen)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("skill-eval-demo/tasks"))
