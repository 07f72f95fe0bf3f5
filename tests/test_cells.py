"""Running cells: grading, containment during a session, timeouts, protected files, records."""

import json
import socket
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench_assets.cells.pipeline import build_cell_inputs, run_cell
from bench_assets.cells.records import CellRecord
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import from_environment
from bench_assets.tasks.catalog import Benchmark, load_benchmark
from tests.conftest import make_bench, write_yaml

FIXED_CALC = textwrap.dedent(
    """\
    import math


    def add(a, b):
        return a + b


    class Acc:
        def __init__(self):
            self.total = 0

        def push(self, x):
            self.total = add(self.total, x)
            return self.total
    """
)


def command_arm(code: str, *, skills: str = "none", env: list[str] | None = None) -> ArmSpec:
    return ArmSpec.model_validate(
        {
            "agent": {"adapter": "command", "argv": ["python", "-c", code], "env": env or []},
            "skills": skills,
        }
    )


WRITE_FIX = f"open('calc/__init__.py', 'w').write({FIXED_CALC!r})"


@pytest.fixture
def bench(tmp_path: Path) -> Benchmark:
    return load_benchmark(make_bench(tmp_path / "tasks"))


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def cell(
    bench: Benchmark,
    store: ArtifactStore,
    arm: ArmSpec,
    *,
    secrets: list[str] = (),
    task: str = "alpha",
) -> CellRecord:
    inputs = build_cell_inputs(bench, task, store)
    record, path = run_cell(
        bench,
        task,
        "try",
        0,
        inputs,
        store,
        generation="g0001",
        redactor=from_environment(list(secrets)),
        arm_spec=arm,
    )
    assert path.is_file() and json.loads(path.read_text())["record_id"] == record.record_id
    return record


def test_a_real_fix_resolves_and_is_measured(bench: Benchmark, store: ArtifactStore) -> None:
    rec = cell(bench, store, command_arm(WRITE_FIX))
    assert (rec.verify_passed, rec.oracle_passed, rec.resolved, rec.error_kind) == (
        True,
        True,
        True,
        None,
    )
    assert rec.churn_files == 1 and rec.churn_insertions == 1 and rec.churn_deletions == 1
    assert rec.patch is not None and "return a + b" in Path(rec.patch.path).read_text()
    # The agent reported no usage: unknown, never zero.
    assert rec.cost_usd is None and rec.total_tokens is None and rec.turns is None
    assert not store.work_root().exists() or not any(store.work_root().iterdir())


def test_a_wrong_patch_fails_the_oracle(bench: Benchmark, store: ArtifactStore) -> None:
    wrong = "open('calc/__init__.py', 'a').write('\\n# touched\\n')"
    rec = cell(bench, store, command_arm(wrong))
    assert rec.verify_passed and not rec.oracle_passed and not rec.resolved
    assert rec.error_kind is ErrorKind.ORACLE_FAILED


def test_editing_the_visible_test_passes_verify_but_not_the_oracle(
    bench: Benchmark, store: ArtifactStore
) -> None:
    cheat = "open('tests/test_calc.py', 'w').write('def test_ok():\\n    assert True\\n')"
    rec = cell(bench, store, command_arm(cheat))
    assert rec.verify_passed and not rec.oracle_passed
    assert rec.error_kind is ErrorKind.ORACLE_FAILED


def test_usage_file_is_read_and_partial_usage_stays_null(
    bench: Benchmark, store: ArtifactStore
) -> None:
    code = (
        WRITE_FIX + "; import json, os; json.dump({'input_tokens': 10, 'output_tokens': 5, "
        "'cost_usd': 0.25, 'turns': 3}, open(os.environ['WFBENCH_USAGE_FILE'], 'w'))"
    )
    rec = cell(bench, store, command_arm(code))
    assert (rec.input_tokens, rec.output_tokens, rec.cost_usd, rec.turns) == (10, 5, 0.25, 3)
    assert rec.cache_read_input_tokens is None and rec.total_tokens is None


def test_no_work_produced(tmp_path: Path, store: ArtifactStore) -> None:
    root = make_bench(tmp_path / "tasks2")
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text(
        "from calc import add\n\n\ndef test_zero_hidden():\n    assert add(0, 0) == 0\n"
    )
    rec = cell(load_benchmark(root), store, command_arm("pass"))
    assert rec.verify_passed and rec.oracle_passed and not rec.resolved
    assert rec.error_kind is ErrorKind.NO_WORK_PRODUCED


def test_oracle_that_collects_no_tests_is_a_failure(tmp_path: Path, store: ArtifactStore) -> None:
    root = make_bench(tmp_path / "tasks2")
    data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
    data["oracle"]["command"] = (
        "python -m pytest -q -p no:cacheprovider {oracle_dir} -k nothing_matches"
    )
    write_yaml(root / "alpha" / "task.yaml", data)
    rec = cell(load_benchmark(root), store, command_arm(WRITE_FIX))
    assert rec.verify_passed and not rec.oracle_passed
    assert rec.error_kind is ErrorKind.ORACLE_FAILED


DISARM = "open('conftest.py', 'w').write('import calc\\ncalc.add = lambda a, b: a + b\\n')"


def test_protected_files_are_restored_before_grading(
    bench: Benchmark, store: ArtifactStore
) -> None:
    rec = cell(bench, store, command_arm(DISARM))
    assert rec.protected_changed == ["conftest.py"]
    assert not rec.oracle_passed and rec.error_kind is ErrorKind.ORACLE_FAILED


def test_unprotected_conftest_is_restored_as_a_runner_file(
    bench: Benchmark, tmp_path: Path, store: ArtifactStore
) -> None:
    """Without `protected`, runner-file hygiene still restores the disarming conftest."""
    root = make_bench(tmp_path / "tasks2")
    data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
    data["protected"] = []
    write_yaml(root / "alpha" / "task.yaml", data)
    rec = cell(load_benchmark(root), store, command_arm(DISARM))
    assert not rec.oracle_passed and rec.protected_changed == []
    assert [(c.path, c.reason, c.change, c.action) for c in rec.runner_files] == [
        ("conftest.py", "conftest", "modified", "restored")
    ]


def test_negative_control_kept_runner_files_disarm_the_oracle(
    tmp_path: Path, store: ArtifactStore
) -> None:
    """With neither `protected` nor hygiene (`runner_files: keep`), the conftest makes the oracle
    pass: the restore is what stops it."""
    root = make_bench(tmp_path / "tasks2")
    data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
    data["protected"] = []
    data["runner_files"] = "keep"
    write_yaml(root / "alpha" / "task.yaml", data)
    rec = cell(load_benchmark(root), store, command_arm(DISARM))
    assert rec.oracle_passed and rec.protected_changed == []
    assert [(c.path, c.action) for c in rec.runner_files] == [("conftest.py", "kept")]


def test_session_timeout_kills_the_process_tree(tmp_path: Path, store: ArtifactStore) -> None:
    root = make_bench(tmp_path / "tasks2")
    data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
    data["timeouts"] = {"session_s": 1}
    write_yaml(root / "alpha" / "task.yaml", data)
    code = "import subprocess; subprocess.Popen(['sleep', '60']); import time; time.sleep(60)"
    rec = cell(load_benchmark(root), store, command_arm(code))
    assert rec.error_kind is ErrorKind.SESSION_ERROR
    assert "timed out" in rec.error_detail
    assert rec.timings["session_s"] < 10


PROBE = textwrap.dedent(
    """\
    import glob, json, os, socket, subprocess
    out = {}
    found = []
    for top in ['/workspace', '/tmp', '/home', '/wfbench', '/']:
        for dirpath, dirnames, filenames in os.walk(top):
            if dirpath.startswith(('/proc', '/sys', '/usr', '/dev')):
                dirnames[:] = []
                continue
            for n in dirnames + filenames:
                if '.wfbench-oracle' in n or n.startswith('test_oracle'):
                    found.append(os.path.join(dirpath, n))
    out['oracle_paths'] = found
    out['oracle_env'] = [k for k in os.environ if 'ORACLE' in k]
    git = lambda *a: subprocess.run(['git', *a], capture_output=True, text=True).stdout
    out['commits'] = git('rev-list', '--all').split()
    out['roots'] = git('rev-list', '--max-parents=0', '--all').split()
    out['log'] = git('log', '--all', '-p')
    writes = {}
    lib = os.path.dirname(os.__file__)
    for p in ['/usr/wfb', '/etc/wfb', '/wfb', '__HOST__/wfb', lib + '/wfb']:
        try:
            open(p, 'w').write('x'); writes[p] = 'WROTE'
        except OSError as e:
            writes[p] = type(e).__name__
    out['writes'] = writes
    try:
        socket.create_connection(('127.0.0.1', __PORT__), timeout=2); out['net'] = 'connected'
    except OSError as e:
        out['net'] = type(e).__name__
    out['env'] = dict(os.environ)
    print(json.dumps(out))
    open('leak.txt', 'w').write(os.environ.get('WFBENCH_TEST_ARM_SECRET', 'none'))
    """
)


def test_containment_during_a_session(
    bench: Benchmark, store: ArtifactStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm_secret = "sk-ant-api03-ARMSECRET0123456789abcdefghij"
    host_secret = "hs-HOSTSECRET-0123456789abcdef"
    monkeypatch.setenv("WFBENCH_TEST_ARM_SECRET", arm_secret)
    monkeypatch.setenv("WFBENCH_TEST_HOST_SECRET", host_secret)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[Any] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    probe = PROBE.replace("__PORT__", str(server.getsockname()[1])).replace(
        "__HOST__", str(tmp_path)
    )
    rec = cell(
        bench,
        store,
        command_arm(probe, skills="incumbent", env=["WFBENCH_TEST_ARM_SECRET"]),
        secrets=["WFBENCH_TEST_ARM_SECRET"],
    )
    server.close()
    assert rec.transcript is not None
    transcript = Path(rec.transcript.path).read_text()
    seen = json.loads(transcript.splitlines()[0])
    # The oracle does not exist anywhere the agent can look.
    assert seen["oracle_paths"] == [] and seen["oracle_env"] == []
    # History: nothing but the sanitized commit.
    inputs = build_cell_inputs(bench, "alpha", store)
    assert seen["commits"] == [inputs.template.info.sanitized_sha]
    assert seen["roots"] == [inputs.template.info.sanitized_sha]
    assert inputs.binding.resolved_sha not in seen["commits"]
    assert "assert add(2, 3) == 5" not in seen["log"]
    # Writes outside the worktree fail; the network is absent.
    assert "WROTE" not in seen["writes"].values(), seen["writes"]
    assert not (tmp_path / "wfb").exists()
    assert seen["net"] != "connected" and not accepted
    # Secrets: the harness's own secret never reaches the agent...
    assert host_secret not in json.dumps(seen["env"])
    assert "WFBENCH_TEST_HOST_SECRET" not in seen["env"]
    # ...and the arm's credential, which does, appears in no stored file.
    for path in store.cells_root().rglob("*"):
        if path.is_file():
            assert arm_secret not in path.read_text(errors="replace"), path
    assert "[REDACTED]" in transcript
    assert arm_secret not in rec.model_dump_json()


def test_secrets_in_verify_output_and_details_are_redacted(
    bench: Benchmark, store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    code = (
        "open('tests/test_leak.py', 'w').write("
        f'"def test_leak():\\n    assert False, {token!r}\\n")'
    )
    rec = cell(bench, store, command_arm(code))
    assert not rec.verify_passed
    assert token not in rec.model_dump_json()
    assert "[REDACTED]" in rec.verify_tail
