"""The skill-eval demo: the ``relnotes`` plugin's eval suite, replayed offline in two generations.

``make demo-skill-eval`` runs it. What it does, all offline and with no key:

1. ``wfbench import claude-plugin-eval`` the plugin in ``tests/data/skill_eval/plugins/relnotes``
   (one case per deterministic grader kind, and one ``llm`` judge case) into a fresh tasks folder;
2. writes a bench.yaml with three replay arms — ``with_plugin`` (incumbent plugin),
   ``with_candidate`` (a candidate overlay of its skill) and ``without_plugin`` (no skills) — whose
   predictions are the transcripts recorded from the real Claude Code CLI (the pin) against the
   mock Messages API, plus each run's patch;
3. pins a judge served by the mock Messages API on loopback (it votes PASS when the evidence
   names 4.2.0), so the judge case runs through the egress proxy like a real one;
4. ``wfbench evolve`` twice (the second generation reuses the comparator cells), then ``explain``
   (every grader's outcome), ``export --format claude-plugin-eval`` and the report.

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

from bench_assets.cli import main as wfbench
from bench_assets.skill_eval_import import import_plugin
from bench_assets.skill_eval_tasks import JUDGE_DEFAULT
from tests.mock_anthropic import MockMessagesAPI, Reply, text

HERE = Path(__file__).parent
T = HERE / "transcripts"
NOTES, QUIET, JUDGED = (
    "relnotes.patch-to-notes",
    "relnotes.unrelated-question",
    "relnotes.names-version",
)
RUNS = {
    # arm: {task: recorded scenario}
    "without_plugin": {NOTES: "patch-without", QUIET: "teapot-quiet", JUDGED: "teapot-quiet"},
    "with_plugin": {NOTES: "patch-with", QUIET: "teapot-skill", JUDGED: "patch-with"},
    "with_candidate": {NOTES: "patch-with", QUIET: "teapot-quiet", JUDGED: "patch-with"},
}
COST = {"without_plugin": 0.09, "with_plugin": 0.06, "with_candidate": 0.05}


def judge_script(body: dict[str, Any]) -> Reply:
    """The mock judge: PASS when the evidence it is shown names 4.2.0."""
    shown = json.dumps(body.get("messages", []))
    evidence = shown.split("<evidence", 1)[-1]
    return text("VERDICT: PASS" if "4.2.0" in evidence else "VERDICT: FAIL")


def build(tasks: Path, judge_url: str) -> None:
    """The demo's tasks folder (module docstring, steps 1–3)."""
    if tasks.exists():
        shutil.rmtree(tasks)
    import_plugin(HERE / "plugins" / "relnotes", tasks)
    (tasks / "replays").mkdir()
    for arm, runs in RUNS.items():
        rows = []
        for task, name in runs.items():
            tree = json.loads((T / f"{name}.tree.json").read_text())
            rows.append(
                {
                    "instance_id": task,
                    "run": 0,
                    "model_name_or_path": f"recorded:{name}",
                    "model_patch": tree["patch"],
                    "transcript": (T / f"{name}.jsonl").read_text(),
                    "usage": {"cost_usd": COST[arm], "turns": 4},
                }
            )
        (tasks / "replays" / f"{arm}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cand = tasks / "candidates" / "c0001-narrower-trigger"
    (cand / "files" / "draft-release-notes").mkdir(parents=True)
    (cand / "files" / "draft-release-notes" / "SKILL.md").write_text(
        "---\nname: draft-release-notes\ndescription: Draft a release-notes section from a "
        "patch. Use only when asked to add release notes.\n---\n\nRead the patch, pick the next "
        "semantic version, add a `## <version>` section to RELEASE_NOTES.md.\n"
    )
    (cand / "candidate.yaml").write_text(
        yaml.safe_dump({"id": "c0001-narrower-trigger", "title": "trigger only on release notes"})
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
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home.resolve())
    os.environ.setdefault("WFBENCH_IN_PROCESS", "1")
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-ant-demo-judge-key-not-a-real-key-000000")
    with MockMessagesAPI(judge_script) as judge:
        build(tasks, judge.url)
        run("validate", str(tasks))
        for _ in range(2):
            run("evolve", "--tasks", str(tasks))
        run("explain")
        out = tasks.parent / "claude-plugin-eval.json"
        run("export", "--format", "claude-plugin-eval", "--tasks", str(tasks), "--out", str(out),
            "--with-arm", "with_plugin", "--without-arm", "without_plugin")  # fmt: skip
        doc = json.loads(out.read_text())
        from bench_assets.skill_eval_export import plugin_eval_table

        print("\nclaude plugin eval's view of the latest cells (with_plugin vs without_plugin):")
        print(plugin_eval_table(doc))
        print(f"\nexported: {out}; judge calls served by the mock API: {len(judge.seen)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("skill-eval-demo/tasks"))
