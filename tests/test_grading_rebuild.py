"""Grade what is recorded: the patch is captured first (ignored files included) and the tests run
in a tree rebuilt from the base and that patch; tamper canaries run in both phases and are
recorded; the patch's binary files are flagged."""

import json
import textwrap
from pathlib import Path

from bench_assets.agents.replay import Prediction, ReplayAdapter
from bench_assets.cells import grading
from bench_assets.cells.pipeline import build_cell_inputs, run_cell
from bench_assets.cells.records import CellRecord
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import make_bench

FIX = "open('calc/__init__.py', 'w').write('def add(a, b):\\n    return a + b\\n')\n"


def _agent(code: str) -> ArmSpec:
    return ArmSpec.model_validate(
        {"agent": {"adapter": "command", "argv": ["python", "-c", code]}, "skills": "none"}
    )


def _cell(root: Path, store: ArtifactStore, arm: ArmSpec, adapter=None) -> CellRecord:
    bench = load_benchmark(root)
    record, _ = run_cell(
        bench,
        "alpha",
        "try",
        0,
        build_cell_inputs(bench, "alpha", store),
        store,
        generation=None,
        redactor=Redactor(),
        adapter=adapter,
        arm_spec=arm,
        ad_hoc=True,
    )
    return record


def _replay(patch: str) -> tuple[ArmSpec, ReplayAdapter]:
    pred = Prediction(instance_id="alpha", model_patch=patch, model_name_or_path="stored", run=0)
    arm = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": "replays/b.jsonl"}, "skills": "none"}
    )
    return arm, ReplayAdapter({("alpha", 0): pred}, "stored")


def _real_tests(rec: CellRecord) -> dict[str, list[tuple[str, str]]]:
    assert rec.verify_run is not None and rec.oracle_run is not None
    return {
        "verify": sorted((t.id, t.outcome) for t in rec.verify_run.tests),
        "oracle": sorted((t.id, t.outcome) for t in rec.oracle_run.tests),
    }


def test_a_stored_patch_graded_again_gives_the_same_per_test_outcomes(tmp_path: Path) -> None:
    """The recorded patch reproduces its own grade: replaying it is graded test for test alike,
    and canaries ran in both phases each time (none passed)."""
    root = make_bench(tmp_path / "tasks")
    store = ArtifactStore(tmp_path / "art")
    first = _cell(root, store, _agent(FIX))
    assert first.resolved, first.error_detail
    assert first.patch is not None
    stored = Path(first.patch.path).read_text()
    arm, adapter = _replay(stored)
    again = _cell(root, store, arm, adapter)
    assert again.resolved, again.error_detail
    assert _real_tests(again) == _real_tests(first)
    for rec in (first, again):
        assert rec.canaries, "canaries ran"
        assert {c.phase for c in rec.canaries} == {"verify", "oracle"}
        assert {c.kind for c in rec.canaries} >= {"always-fails", "mutant"}
        assert all(c.outcome in ("failed", "error") for c in rec.canaries), rec.canaries
        assert rec.tampered == []
        # canaries are not counted as tests: the oracle expects exactly its one test
        assert rec.oracle_run is not None and [t.id for t in rec.oracle_run.tests] == [
            "test_oracle_alpha.py::test_add"
        ]


HIDDEN_FIX = textwrap.dedent(
    """\
    import os
    open('.gitignore', 'w').write('calc/_impl.py\\n')
    open('calc/_impl.py', 'w').write('def add(a, b):\\n    return a + b\\n')
    open('calc/__init__.py', 'w').write('from calc._impl import add\\n')
    """
)


def test_a_file_the_patchs_own_ignore_rules_hide_is_recorded_and_graded(tmp_path: Path) -> None:
    """The fix lives in a file the patch's .gitignore hides: it is in the recorded patch, so the
    rebuilt tree has it, and replaying the stored patch resolves again."""
    root = make_bench(tmp_path / "tasks")
    store = ArtifactStore(tmp_path / "art")
    rec = _cell(root, store, _agent(HIDDEN_FIX))
    assert rec.resolved, rec.error_detail
    assert rec.patch is not None
    patch = Path(rec.patch.path).read_text()
    assert "calc/_impl.py" in patch and "return a + b" in patch
    arm, adapter = _replay(patch)
    assert _cell(root, store, arm, adapter).resolved


NOT_RECORDED = textwrap.dedent(
    """\
    import os
    # A fix where capture never looks: inside .git, imported through a path file in the package.
    os.makedirs('.git/wfbench-hidden', exist_ok=True)
    open('.git/wfbench-hidden/calc_fix.py', 'w').write('def add(a, b):\\n    return a + b\\n')
    open('calc/__init__.py', 'w').write(
        'import sys\\nsys.path.insert(0, "/workspace/.git/wfbench-hidden")\\n'
        'from calc_fix import add\\n'
    )
    """
)


def test_what_the_patch_does_not_show_does_not_exist_where_tests_run(tmp_path: Path) -> None:
    """Negative control of rebuilding: a file outside what capture records (inside .git) made the
    cell pass in the agent's worktree; in the rebuilt tree it is gone and the cell fails."""
    root = make_bench(tmp_path / "tasks")
    rec = _cell(root, ArtifactStore(tmp_path / "art"), _agent(NOT_RECORDED))
    assert not rec.resolved and rec.error_kind is ErrorKind.VERIFY_FAILED, rec.error_detail
    # graded in the agent's worktree as before, the hidden file is there and the cell resolves
    saved = grading.rebuild
    grading.rebuild = lambda wt, _patch, _grade: wt  # type: ignore[assignment]
    try:
        before = _cell(root, ArtifactStore(tmp_path / "art2"), _agent(NOT_RECORDED))
    finally:
        grading.rebuild = saved  # type: ignore[assignment]
    assert before.resolved, before.error_detail


BINARY = FIX + "open('calc/blob.bin', 'wb').write(bytes(range(256)))\n"


def test_binary_files_of_the_patch_are_flagged(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    rec = _cell(root, ArtifactStore(tmp_path / "art"), _agent(BINARY))
    assert rec.resolved, rec.error_detail
    assert rec.binary_files == ["calc/blob.bin"]


NO_COPYABLE_TEST = textwrap.dedent(
    """\
    from calc import add


    def test_add():
        for a, b in [(2, 3)]:
            assert add(a, b) == a + b
    """
)


def test_a_phase_without_a_mutable_test_still_gets_an_always_failing_canary(
    tmp_path: Path,
) -> None:
    root = make_bench(tmp_path / "tasks")
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text(NO_COPYABLE_TEST)
    rec = _cell(root, ArtifactStore(tmp_path / "art"), _agent(FIX))
    assert rec.resolved, rec.error_detail
    oracle = [c for c in (rec.canaries or []) if c.phase == "oracle"]
    assert oracle and {c.kind for c in oracle} == {"always-fails"}
    assert all(c.outcome == "failed" for c in oracle)


FORCE_PASS_ALL = textwrap.dedent(
    """\
    open('calc/__init__.py', 'a').write('''
    def _forge():
        import gc
        try:
            import _pytest.reports as r
        except ImportError:
            return
        old = r.TestReport.__init__
        def init(self, *a, **k):
            old(self, *a, **k)
            self.outcome = "passed"
            self.longrepr = None
        r.TestReport.__init__ = init
    _forge()
    ''')
    """
)


def test_a_force_pass_is_grader_tampered_and_names_the_canaries(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    rec = _cell(root, ArtifactStore(tmp_path / "art"), _agent(FORCE_PASS_ALL))
    assert not rec.resolved and rec.error_kind is ErrorKind.GRADER_TAMPERED, rec.error_detail
    fired = [c for c in rec.canaries or [] if c.outcome == "passed"]
    assert {c.phase for c in fired} == {"verify", "oracle"}
    assert any("canary" in t for t in rec.tampered)
    assert "forged test outcomes" in rec.error_detail
    assert json.loads(rec.model_dump_json())["canaries"]


def test_a_mutant_passing_beside_its_failing_original_is_an_honest_coincidence() -> None:
    """A wrong but honest answer can equal a mutant's changed literal (the SWE-bench fixture's
    ``side + side`` gives area(3) == 6, a mutant of ``== 9`` may ask for 6): the real test fails,
    so that mutant proves nothing. A forgery passes the original too; an always-fails canary
    that passed is evidence whatever the real tests did."""
    from bench_assets.runner.canaries import CanaryOutcome

    def mutant(outcome: str) -> CanaryOutcome:
        return CanaryOutcome(
            id="t.py::test_square_area", kind="mutant", copies="t.py::test_area", outcome=outcome
        )

    always = CanaryOutcome(
        id="t.py::test_area_one", kind="always-fails", copies=None, outcome="passed"
    )
    assert not grading._is_evidence(mutant("passed"), [("t.py::test_area", "failed")])
    assert grading._is_evidence(mutant("passed"), [("t.py::test_area", "passed")])
    assert grading._is_evidence(
        mutant("passed"), [("t.py::test_area[1]", "passed"), ("t.py::test_area[2]", "passed")]
    )
    assert not grading._is_evidence(
        mutant("passed"), [("t.py::test_area[1]", "passed"), ("t.py::test_area[2]", "failed")]
    )
    assert grading._is_evidence(always, [("t.py::test_area", "failed")])
