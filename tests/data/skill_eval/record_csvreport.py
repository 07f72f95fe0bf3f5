"""Record the ``csvreport`` suite's runs from the REAL Claude Code CLI (the pin) and the mock API.

Run from the repository root (``WFBENCH_TOOLS`` set, bubblewrap available):

    .venv/bin/python -m tests.data.skill_eval.record_csvreport [CASE--ARM ...]

The ``csvreport`` plugin (``plugins/csvreport``, its suite under ``quality/evals``) was written
from the reference alone; ``make demo-skill-eval`` decides on it. For each case and each of the
demo's three arms this runs one real ``claude -p --output-format stream-json --verbose`` session
through wfbench's own adapter (sandbox, egress proxy) against ``tests/mock_anthropic.py``, in a
worktree holding the case's scaffold output (its ``scaffold_script`` run in the sandbox, as the
importer runs it) and the arm's skill:

- ``with_plugin``: the plugin's ``summarize-csv`` skill (the incumbent): it globs for every CSV
  first, and its broad description fires on a question that merely mentions CSV;
- ``with_candidate``: :data:`CANDIDATE_SKILL` (the overlay the demo proposes): no glob, and a
  description that fires only on a named CSV file;
- ``without_plugin``: no skill.

The mock plays the model: what each arm's model does is scripted here (:func:`script`); the
transcript is what the real CLI printed for it. The mock reports the tokens of what the CLI
actually sent (``len(json)/4`` in, the reply's size out), so each run's ``total_cost_usd`` is the
CLI's own list-price estimate of its real requests. Writes
``transcripts/csvreport/<case>--<arm>.jsonl`` and ``.tree.json``, and the judged case's
``reference.jsonl`` (a recorded run, as ``baseline_file`` wants). Re-record when the pin changes.
"""

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from bench_assets.tasks.skill_eval_scaffold import run_scaffold
from tests.data.skill_eval.record_transcripts import record_session
from tests.mock_anthropic import Reply, Script, is_main_loop, text, tool_use

HERE = Path(__file__).parent
PLUGIN = HERE / "plugins" / "csvreport"
EVALS = PLUGIN / "quality" / "evals"
OUT = HERE / "transcripts" / "csvreport"
W = "/workspace"
ARMS = ("with_plugin", "with_candidate", "without_plugin")
CANDIDATE_SKILL = (
    "---\nname: summarize-csv\ndescription: Write report.md with the totals of a CSV file the "
    "user names. Use only when asked for a report or a total of a named CSV file.\n---\n\n"
    "1. Read the CSV the user named; add up its `amount` column (or count its rows when asked).\n"
    "2. Write `report.md`: a `# Report` heading, one line per category, then `Total: <n>` with\n"
    "   thousands separators.\n3. Reply with the total in one sentence.\n"
)

# case folder -> (data file, report body, the reply naming the total, a wrong report)
POSITIVE = {
    "positive/sales-total": (
        "data/sales.csv",
        "# Report\n\n- books: 400\n- games: 600\n- music: 250\n\nTotal: 1,250\n",
        "The grand total of data/sales.csv is 1,250.",
        "# Report\n\nTotal: 1000\n",
    ),
    "positive/expense-total": (
        "data/expenses.csv",
        "# Report\n\n- rent: 700\n- food: 180\n- travel: 50\n\nTotal: 930\n",
        "The expenses add up to 930.",
        "# Report\n\n- rent: 700\n- food: 180\n\nTotal: 880\n",
    ),
    "positive/nested-quarter": (
        "data/2026/q3.csv",
        "# Report\n\n- hosting: 45\n- domains: 12\n- support: 20\n\nTotal: 77\n",
        "Q3 comes to 77.",
        "# Report\n\nTotal: 57\n",
    ),
    "positive/inventory-count": (
        "data/inventory.csv",
        "# Report\n\nTotal: 42\n",
        "There are 42 items in data/inventory.csv.",
        "# Report\n\nTotal: 43\n",
    ),
}
NEGATIVE = {
    "negative/git-stash": "`git stash pop` re-applies the most recent stash to your working "
    "tree and drops it from the stash list. If it conflicts, the stash is kept.",
    "negative/csv-dialect": "A dialect bundles the formatting rules of a CSV file (delimiter, "
    "quotechar, escaping, line terminator) so reader and writer agree on them.",
    "negative/unit-convert": "3.1",
}
JUDGED = "judged/one-line-summary"
JUDGED_REPLY = "The sales add up to 1,250, and games lead with 600."
JUDGED_REPLY_WITHOUT = (
    "I could not open the file reliably. It seems to list several categories. "
    "The total may be around 1,000. Books might be the largest."
)


def sized(script: Script) -> Script:
    """``script`` reporting the tokens of the request it answers (json length / 4) and of its
    own reply, so the CLI's cost estimate follows what the session really sent."""

    def run(body: dict[str, Any]) -> Any:
        reply = script(body)
        if not isinstance(reply, Reply):
            return reply
        return dataclasses.replace(
            reply,
            input_tokens=max(1, len(json.dumps(body)) // 4),
            output_tokens=max(1, len(json.dumps(reply.blocks)) // 4),
        )

    return run


def _steps(*replies: Reply) -> Script:
    def script(body: dict[str, Any]) -> Reply:
        if not is_main_loop(body):
            return text("ok")
        n = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        return replies[n] if n < len(replies) else text("Done.")

    return sized(script)


def _skill() -> Reply:
    return tool_use("toolu_s1", "Skill", {"skill": "summarize-csv"})


def script(case: str, arm: str) -> Script:
    """What the model does in ``case`` under ``arm`` (module docstring)."""
    if case in POSITIVE:
        data, report, reply, wrong = POSITIVE[case]
        read = tool_use("toolu_r1", "Read", {"file_path": f"{W}/{data}"})
        write = tool_use("toolu_w1", "Write", {"file_path": f"{W}/report.md", "content": report})
        if arm == "with_plugin":
            glob = tool_use("toolu_g1", "Glob", {"pattern": "**/*.csv"})
            return _steps(_skill(), glob, read, write, text(reply))
        if arm == "with_candidate":
            return _steps(_skill(), read, write, text(reply))
        bad = tool_use("toolu_w1", "Write", {"file_path": f"{W}/report.md", "content": wrong})
        return _steps(bad, text("I wrote report.md."))
    if case in NEGATIVE:
        answer = NEGATIVE[case]
        if arm == "with_plugin" and case == "negative/csv-dialect":
            glob = tool_use("toolu_g1", "Glob", {"pattern": "**/*.csv"})
            return _steps(_skill(), glob, text(answer))
        return _steps(text(answer))
    assert case == JUDGED
    read = tool_use("toolu_r1", "Read", {"file_path": f"{W}/data/sales.csv"})
    if arm == "with_plugin":
        glob = tool_use("toolu_g1", "Glob", {"pattern": "**/*.csv"})
        return _steps(_skill(), glob, read, text(JUDGED_REPLY))
    if arm == "with_candidate":
        return _steps(_skill(), read, text(JUDGED_REPLY))
    return _steps(text(JUDGED_REPLY_WITHOUT))


def case_prompt_and_seed(case: str) -> tuple[str, dict[str, str]]:
    """The case's prompt and starting tree, read as the importer reads them."""
    from bench_assets.tasks.skill_eval_import import load_case

    folder = EVALS / case
    _, prompt, _, scaffold = load_case(folder, PLUGIN)
    seed: dict[str, str] = {}
    if scaffold is not None:
        tree = run_scaffold(folder / scaffold, str(folder))
        seed = {rel: data.decode() for rel, data in tree.items()}
    return prompt, seed


def skills_of(arm: str) -> dict[str, bytes]:
    if arm == "with_plugin":
        return {"summarize-csv": (PLUGIN / "skills" / "summarize-csv" / "SKILL.md").read_bytes()}
    if arm == "with_candidate":
        return {"summarize-csv": CANDIDATE_SKILL.encode()}
    return {}


def all_runs() -> list[str]:
    cases = [*POSITIVE, *NEGATIVE, JUDGED]
    return [f"{c.split('/')[1]}--{a}" for c in cases for a in ARMS]


def record_one(name: str) -> dict[str, Any]:
    short, arm = name.split("--")
    case = next(c for c in [*POSITIVE, *NEGATIVE, JUDGED] if c.split("/")[1] == short)
    prompt, seed = case_prompt_and_seed(case)
    transcript, tree = record_session(
        prompt, script(case, arm), seed, skills_of(arm), task_id=f"csvreport.{short}"
    )
    (OUT / f"{name}.jsonl").write_bytes(transcript)
    (OUT / f"{name}.tree.json").write_text(json.dumps(tree, indent=2, sort_keys=True) + "\n")
    return tree


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or all_runs():
        tree = record_one(name)
        print(f"{name}: ok={tree['session_ok']} created={tree['created']}", flush=True)
    # The judged case's reference run: the candidate's recorded session, as a baseline_file.
    ref = OUT / "one-line-summary--with_candidate.jsonl"
    if ref.is_file():
        (EVALS / JUDGED / "reference.jsonl").write_bytes(ref.read_bytes())


if __name__ == "__main__":
    main(sys.argv[1:])
