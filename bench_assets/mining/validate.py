"""Validate a candidate in the sandbox: which oracle tests the fix makes pass, reliably.

Both trees are copies of the candidate's **sanitized template** (the tree every cell starts from):
the *base* as it is, the *gold* tree with the gold patch applied (``git apply`` in the sandbox;
a patch that does not apply rejects the candidate). The oracle files are staged read-only at a
random folder of each tree and run through the **trusted runner**
(:func:`bench_assets.runner.trusted.run_phase`, phase ``oracle``, offline, worktree read-only) — the
same staging, ids and runner a cell's hidden oracle uses, so what validation finds is what grading
will see.

Order, cheapest rejection first:

1. base, once: no oracle test failed (and the oracle collected) → ``no-fail-to-pass``;
2. gold, once: no test failed on base and passed with gold → ``gold-fails`` when oracle tests
   fail or error with the gold patch, else ``no-fail-to-pass``;
3. both trees ``repeats - 1`` more times; then ``flaky`` (a test's outcome differs between runs of
   the same tree), ``gold-fails`` (an oracle test fails or errors with the gold patch, or the
   oracle does not collect), ``no-fail-to-pass``;
4. ``fail_to_pass`` = failed/errored in every base run and passed in every gold run;
   ``pass_to_pass`` = passed in every run. When the base cannot collect the oracle at all (a name
   the fix adds), pytest runs no test there and every oracle test counts as erroring on base —
   as SWE-bench counts such instances. A test name whose parametrizations all agree is listed
   once, without ``[params]`` (it stands for all of them);
5. ``verify``: the visible test files (unrelated to the oracle) run once on the gold tree; files
   with a passing test and no failing one are kept; none → the default that always passes.

A run that did not finish (timeout, the runner stopped early, pytest modified) rejects the
candidate as ``run-incomplete``: its outcomes prove nothing.
"""

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter, ValidationError

from bench_assets.config.models import OracleTestId
from bench_assets.inputs.sanitize import Template, copy_worktree
from bench_assets.kernel.fsutil import atomic_write_bytes, make_tree_readonly, make_tree_writable
from bench_assets.mining.documents import MinedValidation
from bench_assets.runner.trusted import Layout, Outcome, new_layout, run_phase
from bench_assets.sandbox.gitrepo import git_script_in_sandbox
from bench_assets.sandbox.process import Mount

GOLD_MOUNT = "/wfbench-gold"
PARALLEL_RUNS = 2
"""Sandboxed test runs at once (the base and the gold tree, each its own layout)."""
_FAILING: tuple[Outcome, ...] = ("failed", "error")
_TEST_ID = TypeAdapter(OracleTestId)


@dataclass(frozen=True)
class Box:
    """How the candidate's tests run (the task's import paths and environment)."""

    import_paths: Sequence[str] = (".",)
    env_mounts: tuple[Mount, ...] = ()
    env_paths: tuple[str, ...] = ()
    timeout_s: float = 300.0
    memory_mb: int | None = None


@dataclass
class Verdict:
    """The validation's outcome: ``reason`` None means accepted."""

    reason: str | None
    detail: str
    validation: MinedValidation | None = None
    runs: int = 0


@dataclass
class _Run:
    outcomes: dict[str, Outcome]
    collect_errors: int
    problem: str | None


@dataclass
class _Tree:
    name: str
    path: Path
    layout: Layout
    runs: list[_Run] = field(default_factory=list)


_RANK = {o: i for i, o in enumerate(("failed", "error", "xpassed", "xfailed", "skipped"))}


def _worst(a: Outcome | None, b: Outcome) -> Outcome:
    if a is None:
        return b
    return a if _RANK.get(a, 99) <= _RANK.get(b, 99) else b


def _tree(template: Template, scratch: Path, name: str, gold: bytes | None) -> _Tree | str:
    """A copy of the template (with the gold patch applied), or why the patch does not apply."""
    wt = copy_worktree(template, scratch / name / "wt")
    if gold is not None:
        patch_dir = scratch / name / "patch"
        atomic_write_bytes(patch_dir / "gold.diff", gold)
        res = git_script_in_sandbox(
            [["apply", "--whitespace=nowarn", "--binary", f"{GOLD_MOUNT}/gold.diff"]],
            wt,
            mounts=(Mount(patch_dir, GOLD_MOUNT),),
            check=False,
        )
        if not res.ok:
            return res.tail(400).strip() or f"git apply exit {res.returncode}"
    return _Tree(name, wt, new_layout(scratch / name / "host", wt))


def _stage(tree: _Tree, oracle: dict[str, bytes]) -> None:
    stage = tree.layout.stage
    make_tree_writable(stage)
    for name, data in oracle.items():
        atomic_write_bytes(stage / name, data, mode=0o444)
    make_tree_readonly(stage)


def _run(tree: _Tree, box: Box, phase: Literal["verify", "oracle"], paths: list[str]) -> _Run:
    res = run_phase(
        tree.layout,
        tree.path,
        phase=phase,
        pytest_paths=paths,
        command=None,
        import_paths=list(box.import_paths),
        timeout_s=box.timeout_s,
        max_output=4000,
        memory_mb=box.memory_mb,
        env_mounts=box.env_mounts,
        env_paths=box.env_paths,
    )
    rep, ex = res.report, res.result
    problem = None
    if res.infra_failed or rep is None:
        problem = f"the trusted test runner did not start: {ex.tail(300)}"
    elif ex.timed_out:
        problem = f"timed out after {box.timeout_s:g} s"
    elif not rep.finished:
        problem = f"the test run stopped before its end (exit {ex.returncode})"
    elif rep.tampered or rep.foreign_lines:
        problem = "pytest was modified during the run: " + ", ".join(rep.tampered[:3])
    outcomes: dict[str, Outcome] = {}
    for tid, o in rep.tests if rep is not None else []:
        outcomes[tid] = _worst(outcomes.get(tid), o)
    run = _Run(outcomes, rep.collect_errors if rep is not None else 0, problem)
    if phase == "oracle":
        tree.runs.append(run)
    return run


def _base_outcome(run: _Run, tid: str) -> Outcome:
    got = run.outcomes.get(tid)
    if got is not None:
        return got
    return "error" if run.collect_errors else "missing"


def _gold_outcome(run: _Run, tid: str) -> Outcome:
    return run.outcomes.get(tid, "missing")


def _collapse(ids: list[str], all_ids: Sequence[str]) -> list[str]:
    """Ids with every parametrization in ``ids`` listed once, as the bare name."""
    chosen = set(ids)
    by_base: dict[str, list[str]] = {}
    for tid in all_ids:
        base = tid.split("[", 1)[0] if tid.endswith("]") and "[" in tid else tid
        by_base.setdefault(base, []).append(tid)
    out = []
    for base, members in sorted(by_base.items()):
        if all(m in chosen for m in members) and len(members) > 1:
            out.append(base)
        else:
            out += [m for m in members if m in chosen]
    return out


def _ids_ok(ids: list[str]) -> tuple[list[str], list[str]]:
    good, bad = [], []
    for tid in ids:
        try:
            _TEST_ID.validate_python(tid)
            good.append(tid)
        except ValidationError:
            bad.append(tid)
    return good, bad


def _short(ids: Sequence[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (f" (+{len(ids) - n} more)" if len(ids) > n else "")


def validate(
    template: Template,
    scratch: Path,
    *,
    oracle: dict[str, bytes],
    gold: bytes,
    verify_candidates: list[str],
    box: Box,
    repeats: int = 3,
) -> Verdict:
    """Run the validation (see module docstring) in ``scratch`` (the caller removes it)."""
    started = time.monotonic()
    base = _tree(template, scratch, "base", None)
    assert isinstance(base, _Tree)
    _stage(base, oracle)
    first = _run(base, box, "oracle", [base.layout.stage_name])
    if first.problem:
        return Verdict("run-incomplete", f"on the base: {first.problem}", runs=1)
    if not first.collect_errors and not any(o in _FAILING for o in first.outcomes.values()):
        n = len(first.outcomes)
        return Verdict("no-fail-to-pass", f"every oracle test passes before the fix ({n})", runs=1)
    gold_tree = _tree(template, scratch, "gold", gold)
    if isinstance(gold_tree, str):
        return Verdict("gold-does-not-apply", gold_tree, runs=1)
    _stage(gold_tree, oracle)
    oracle_paths = {t.name: [t.layout.stage_name] for t in (base, gold_tree)}

    def more(tree: _Tree) -> str | None:
        while len(tree.runs) < repeats:
            got = _run(tree, box, "oracle", oracle_paths[tree.name])
            if got.problem:
                return f"{tree.name} run {len(tree.runs)}: {got.problem}"
        return None

    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        # The first gold run decides whether repeating is worth it; the base's second run
        # starts beside it (wasted only when the candidate is rejected here).
        gold_first = pool.submit(_run, gold_tree, box, "oracle", oracle_paths["gold"])
        base_second = pool.submit(more, base) if repeats > 1 else None
        run = gold_first.result()
        if run.problem:
            if base_second is not None:
                base_second.result()
            return Verdict("run-incomplete", f"with the gold patch: {run.problem}", runs=2)
        if not _fail_to_pass(base.runs[:1], gold_tree.runs[:1]):
            if base_second is not None:
                base_second.result()
            return _no_fail_to_pass(base.runs[:1], gold_tree.runs[:1])
        verify_run = pool.submit(_verify_run, gold_tree, box, verify_candidates, scratch)
        problems = [p for p in (more(gold_tree), base_second and base_second.result()) if p]
        verify = verify_run.result()
    if problems:
        return Verdict("run-incomplete", problems[0])
    return _judge(base, gold_tree, verify, repeats, started)


def _all_ids(base: list[_Run], gold: list[_Run]) -> list[str]:
    ids: set[str] = set()
    for r in [*base, *gold]:
        ids |= set(r.outcomes)
    return sorted(ids)


def _fail_to_pass(base: list[_Run], gold: list[_Run]) -> list[str]:
    return [
        t
        for t in _all_ids(base, gold)
        if all(_base_outcome(r, t) in _FAILING for r in base)
        and all(_gold_outcome(r, t) == "passed" for r in gold)
    ]


def _no_fail_to_pass(base: list[_Run], gold: list[_Run]) -> Verdict:
    """``gold-fails`` when the fix leaves oracle tests failing, else ``no-fail-to-pass``."""
    failing = [t for t in _all_ids(base, gold) if _gold_outcome(gold[0], t) in _FAILING]
    if gold[0].collect_errors:
        n = gold[0].collect_errors
        return Verdict("gold-fails", f"the oracle has {n} collection error(s) with the gold patch")
    if failing:
        return Verdict(
            "gold-fails",
            f"{len(failing)} oracle test(s) fail with the gold patch: {_short(failing)}",
        )
    return Verdict("no-fail-to-pass", _why_none(base, gold))


def _why_none(base: list[_Run], gold: list[_Run]) -> str:
    failing = [t for t in _all_ids(base, gold) if _base_outcome(base[0], t) in _FAILING]
    return (
        f"no oracle test fails before the fix and passes with it "
        f"({len(failing)} fail before: {_short(failing) or 'none'})"
    )


def _judge(
    base: _Tree,
    gold: _Tree,
    verify: tuple[list[str] | None, str, bool],
    repeats: int,
    started: float,
) -> Verdict:
    ids = _all_ids(base.runs, gold.runs)
    runs = len(base.runs) + len(gold.runs)
    flaky = [
        t
        for t in ids
        if len({_base_outcome(r, t) for r in base.runs}) > 1
        or len({_gold_outcome(r, t) for r in gold.runs}) > 1
    ]
    if flaky:
        return Verdict(
            "flaky", f"{len(flaky)} test(s) change outcome over {repeats} runs: {_short(flaky)}"
        )
    if any(r.collect_errors for r in gold.runs):
        n = gold.runs[0].collect_errors
        return Verdict("gold-fails", f"the oracle has {n} collection error(s) with the gold patch")
    failing = [t for t in ids if _gold_outcome(gold.runs[0], t) in _FAILING]
    if failing:
        return Verdict(
            "gold-fails",
            f"{len(failing)} oracle test(s) fail with the gold patch: {_short(failing)}",
            runs=runs,
        )
    f2p = _fail_to_pass(base.runs, gold.runs)
    p2p = [
        t
        for t in ids
        if all(_base_outcome(r, t) == "passed" for r in base.runs)
        and all(_gold_outcome(r, t) == "passed" for r in gold.runs)
    ]
    not_expected = {
        t: f"base {_base_outcome(base.runs[0], t)}, gold {_gold_outcome(gold.runs[0], t)}"
        for t in ids
        if t not in f2p and t not in p2p
    }
    f2p_ids, bad = _ids_ok(_collapse(f2p, ids))
    p2p_ids, bad2 = _ids_ok(_collapse(p2p, ids))
    for t in [*bad, *bad2]:
        not_expected[t] = "not a test id task.yaml can hold"
    if not f2p_ids:
        return Verdict(
            "bad-test-ids" if bad else "no-fail-to-pass", _why_none(base.runs, gold.runs)
        )
    verify_files, verify_detail, verify_ran = verify
    validation = MinedValidation(
        repeats=repeats,
        base_runs=[r.outcomes for r in base.runs],
        base_collect_errors=[r.collect_errors for r in base.runs],
        gold_runs=[r.outcomes for r in gold.runs],
        gold_collect_errors=[r.collect_errors for r in gold.runs],
        fail_to_pass=f2p_ids,
        pass_to_pass=p2p_ids,
        not_expected=not_expected,
        verify=verify_files,
        verify_detail=verify_detail,
        seconds=round(time.monotonic() - started, 3),
    )
    detail = f"{len(f2p)} fail_to_pass, {len(p2p)} pass_to_pass"
    return Verdict(None, detail, validation, runs=runs + int(verify_ran))


def _verify_run(
    gold: _Tree, box: Box, candidates: list[str], scratch: Path
) -> tuple[list[str] | None, str, bool]:
    """The visible test files that pass with the gold patch (module docstring, step 5): their
    paths (None: the default), why, and whether a run was paid. Its own layout, so it can run
    beside the gold tree's oracle runs."""
    if not candidates:
        return (
            None,
            "no visible test file unrelated to the oracle: the default always passes",
            False,
        )
    tree = _Tree("verify", gold.path, new_layout(scratch / "verify" / "host", gold.path))
    run = _run(tree, box, "verify", candidates)
    if run.problem or run.collect_errors:
        why = run.problem or f"{run.collect_errors} collection error(s)"
        return None, f"the visible tests did not run cleanly with the fix ({why}): default", True
    kept = []
    for f in candidates:
        mine = [o for t, o in run.outcomes.items() if t.split("::", 1)[0] == f]
        if "passed" in mine and not any(o in _FAILING for o in mine):
            kept.append(f)
    if not kept:
        return None, "no visible test file passes cleanly with the fix: default", True
    dropped = len(candidates) - len(kept)
    return kept, f"{len(kept)} visible test file(s) pass with the fix ({dropped} left out)", True
