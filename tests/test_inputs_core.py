"""Bindings, oracle snapshots and sanitized templates, tested on the plain core (no Dagster)."""

import os
import stat
from pathlib import Path

import pytest

from bench_assets.config.models import LimitsConfig
from bench_assets.inputs import binding as binding_mod
from bench_assets.inputs import oracle, sanitize
from bench_assets.inputs.build import (
    benchmark_paths,
    bind_task,
    build_sanitized_graph,
    capture_oracle,
)
from bench_assets.kernel.errors import (
    BindingDriftError,
    BindingError,
    OracleCaptureError,
    SanitizeError,
)
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox import gitrepo
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import make_bench, write_yaml


def git_repo_with_history(path: Path) -> tuple[str, str]:
    """A repository: commit 1 has the bug, commit 2 (tagged, on a branch) has the fix."""
    path.mkdir(parents=True)
    gitrepo.git(["init", "-q", str(path)])
    (path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (path / "bench").mkdir()
    (path / "bench" / "notes.txt").write_text("benchmark-owned\n")
    gitrepo.git(["add", "-A"], cwd=path)
    gitrepo.git(["commit", "-q", "-m", "bug"], cwd=path)
    bug = gitrepo.git_out(["rev-parse", "HEAD"], cwd=path)
    (path / "calc.py").write_text("def add(a, b):\n    return a + b  # THE FIX\n")
    gitrepo.git(["commit", "-q", "-am", "fix"], cwd=path)
    gitrepo.git(["tag", "v1-fixed"], cwd=path)
    fix = gitrepo.git_out(["rev-parse", "HEAD"], cwd=path)
    return bug, fix


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


# --------------------------------------------------------------------------------------------
# bindings


def test_inline_commit_is_identical_across_machines(tmp_path: Path, monkeypatch) -> None:
    root_a = make_bench(tmp_path / "a" / "tasks")
    root_b = make_bench(tmp_path / "b" / "deeper" / "tasks")
    # A hostile user configuration must not leak into harness commits.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n name = Somebody Else\n email = x@y\n[commit]\n gpgsign = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    a = bind_task(load_benchmark(root_a), "alpha", ArtifactStore(tmp_path / "art-a")).binding
    b = bind_task(load_benchmark(root_b), "alpha", ArtifactStore(tmp_path / "art-b")).binding
    assert a.resolved_sha == b.resolved_sha
    assert a.digest == b.digest
    assert gitrepo.SHA_RE.match(a.resolved_sha)
    # Build litter from a local test run does not change the commit.
    (root_a / "alpha" / "repo" / "__pycache__").mkdir()
    (root_a / "alpha" / "repo" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    again = bind_task(load_benchmark(root_a), "alpha", ArtifactStore(tmp_path / "art-a")).binding
    assert again.resolved_sha == a.resolved_sha


def test_binding_digests_track_each_field(tmp_path: Path, store: ArtifactStore) -> None:
    root = make_bench(tmp_path / "tasks")
    before = bind_task(load_benchmark(root), "alpha", store).binding
    task_file = root / "alpha" / "task.yaml"
    task_file.write_text(task_file.read_text().replace("so that it adds", "so it adds"))
    after = bind_task(load_benchmark(root), "alpha", store).binding
    assert set(after.fields_differing_from(before)) == {"prompt_digest", "task_file_digest"}
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text("def test_x():\n    pass\n")
    later = bind_task(load_benchmark(root), "alpha", store).binding
    assert set(later.fields_differing_from(after)) == {"oracle_digest", "oracle_manifest_digest"}
    (root / "alpha" / "repo" / "calc" / "__init__.py").write_text("X = 1\n")
    last = bind_task(load_benchmark(root), "alpha", store).binding
    assert last.fields_differing_from(later) == ["resolved_sha"]


def test_pinned_binding_refuses_drift_naming_task_and_field(
    tmp_path: Path, store: ArtifactStore
) -> None:
    root = make_bench(tmp_path / "tasks")
    bench = load_benchmark(root)
    b = bind_task(bench, "alpha", store).binding
    binding_mod.write_pins(bench, {"alpha": b})
    assert bind_task(load_benchmark(root), "alpha", store).binding == b  # unchanged: accepted
    task_file = root / "alpha" / "task.yaml"
    text = task_file.read_text()
    assert "  - tests\n" in text
    task_file.write_text(text.replace("  - tests\n", "  - tests/test_calc.py\n"))
    with pytest.raises(BindingDriftError, match=r"task binding drifted for alpha: verify_digest"):
        bind_task(load_benchmark(root), "alpha", store)


def test_repo_path_resolves_ref_once_and_pins_it(tmp_path: Path, store: ArtifactStore) -> None:
    repo = tmp_path / "upstream"
    bug, fix = git_repo_with_history(repo)
    root = make_bench(tmp_path / "tasks")
    write_yaml(
        root / "alpha" / "task.yaml",
        {**_task_yaml(root), "repo": str(repo), "ref": "HEAD~1"},
    )
    bench = load_benchmark(root)
    b = bind_task(bench, "alpha", store).binding
    assert b.resolved_sha == bug and b.repo_kind == "path"
    binding_mod.write_pins(bench, {"alpha": b})
    # The ref moves; the pin holds the commit.
    (repo / "calc.py").write_text("changed\n")
    gitrepo.git(["commit", "-q", "-am", "later"], cwd=repo)
    assert bind_task(load_benchmark(root), "alpha", store).binding.resolved_sha == bug


def test_missing_ref_and_missing_pinned_commit_are_refused(
    tmp_path: Path, store: ArtifactStore
) -> None:
    repo = tmp_path / "upstream"
    git_repo_with_history(repo)
    root = make_bench(tmp_path / "tasks")
    write_yaml(root / "alpha" / "task.yaml", {**_task_yaml(root), "repo": str(repo), "ref": "nope"})
    with pytest.raises(BindingError, match="ref: 'nope' does not name a commit"):
        bind_task(load_benchmark(root), "alpha", store)
    data = _task_yaml(root)
    data.pop("ref")
    write_yaml(root / "alpha" / "task.yaml", data)
    bench = load_benchmark(root)
    b = bind_task(bench, "alpha", store).binding
    ghost = b.model_copy(update={"resolved_sha": "0" * 40})
    binding_mod.write_pins(bench, {"alpha": ghost})
    with pytest.raises(BindingDriftError, match="pinned commit 0{40} is unavailable"):
        bind_task(load_benchmark(root), "alpha", store)


def _task_yaml(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / "alpha" / "task.yaml").read_text())


# --------------------------------------------------------------------------------------------
# oracle snapshots


def test_oracle_digests_separate_command_and_bytes(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    limits = LimitsConfig()
    base, _ = oracle.capture(load_benchmark(root).task("alpha"), limits)
    data = _task_yaml(root)
    data["oracle"]["fail_to_pass"] = ["test_oracle_alpha.py::test_add"]
    write_yaml(root / "alpha" / "task.yaml", data)
    listed, _ = oracle.capture(load_benchmark(root).task("alpha"), limits)
    assert listed.digest != base.digest and listed.command_digest != base.command_digest
    assert listed.fail_to_pass == ["test_oracle_alpha.py::test_add"]
    del data["oracle"]["fail_to_pass"]
    data["oracle"]["command"] = "python -m pytest -x {oracle_dir}"
    write_yaml(root / "alpha" / "task.yaml", data)
    cmd, _ = oracle.capture(load_benchmark(root).task("alpha"), limits)
    assert cmd.digest != base.digest and cmd.command_digest != base.command_digest
    assert cmd.command_digest != listed.command_digest
    assert cmd.manifest_digest == base.manifest_digest
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text(
        "def test_changed():\n    pass\n"
    )
    byt, _ = oracle.capture(load_benchmark(root).task("alpha"), limits)
    assert byt.manifest_digest != cmd.manifest_digest and byt.digest != cmd.digest
    assert byt.command_digest == cmd.command_digest


def test_oracle_capture_refuses_symlinks_and_oversize(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    task = load_benchmark(root).task("alpha")
    with pytest.raises(OracleCaptureError, match="limits.oracle_file_bytes"):
        oracle.capture(task, LimitsConfig(oracle_file_bytes=5))
    with pytest.raises(OracleCaptureError, match="limits.oracle_total_bytes"):
        oracle.capture(task, LimitsConfig(oracle_total_bytes=5))
    target = task.oracle_dir / "test_oracle_alpha.py"
    target.rename(tmp_path / "real.py")
    target.symlink_to(tmp_path / "real.py")
    with pytest.raises(OracleCaptureError, match="not a regular file"):
        oracle.capture(task, LimitsConfig())


def test_oracle_snapshot_is_stored_read_only_and_content_addressed(
    tmp_path: Path, store: ArtifactStore
) -> None:
    root = make_bench(tmp_path / "tasks")
    snap, payloads = oracle.capture(load_benchmark(root).task("alpha"), LimitsConfig())
    path = oracle.store(snap, payloads, store)
    assert path == store.oracle(snap.digest)
    assert store.root in path.parents and root not in path.parents
    for p in [path, *path.rglob("*")]:
        assert not os.stat(p).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), p
    assert oracle.store(snap, payloads, store) == path  # idempotent
    assert oracle.verify_stored(snap, store) == payloads


def test_oracle_changed_after_binding_is_refused(tmp_path: Path, store: ArtifactStore) -> None:
    root = make_bench(tmp_path / "tasks")
    bench = load_benchmark(root)
    bound = bind_task(bench, "alpha", store).binding
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text(
        "def test_tampered():\n    pass\n"
    )
    with pytest.raises(BindingDriftError, match="drifted for alpha: oracle_digest"):
        capture_oracle(load_benchmark(root), "alpha", bound, store)


# --------------------------------------------------------------------------------------------
# sanitized templates


def _template_from_path_repo(tmp_path: Path, store: ArtifactStore):
    repo = tmp_path / "upstream"
    bug, fix = git_repo_with_history(repo)
    root = make_bench(tmp_path / "tasks")
    write_yaml(
        root / "alpha" / "task.yaml",
        {**_task_yaml(root), "repo": str(repo), "ref": bug},
    )
    write_yaml(
        root / "bench.yaml",
        {
            **__import__("yaml").safe_load((root / "bench.yaml").read_text()),
            "sanitize": {"remove": ["bench"]},
        },
    )
    bench = load_benchmark(root)
    bound = bind_task(bench, "alpha", store).binding
    captured = capture_oracle(bench, "alpha", bound, store)
    built = build_sanitized_graph(bench, "alpha", bound, captured, store)
    return built, bug, fix, repo


def test_sanitized_template_hides_history_refs_and_benchmark_paths(
    tmp_path: Path, store: ArtifactStore
) -> None:
    built, bug, fix, _ = _template_from_path_repo(tmp_path, store)
    tree = sanitize.template_tree(built.template)
    g = lambda *a: gitrepo.git_out(list(a), cwd=tree)  # noqa: E731
    head = g("rev-parse", "HEAD")
    assert head == built.template.info.sanitized_sha
    assert g("rev-list", "--parents", "-n", "1", "HEAD").split() == [head]
    assert g("for-each-ref") == "" and g("tag", "-l") == "" and g("remote") == ""
    assert g("reflog", "show", "--all") == ""
    assert not (tree / ".git" / "logs").exists()
    for oid in (bug, fix):
        assert not gitrepo.has_object(tree, oid), f"original commit {oid} is retrievable"
    fixed_blob = gitrepo.blob_id(tree, b"def add(a, b):\n    return a + b  # THE FIX\n")
    assert not gitrepo.has_object(tree, fixed_blob)
    assert "THE FIX" not in gitrepo.git(["log", "--all", "-p"], cwd=tree).text()
    assert not (tree / "bench").exists()
    assert "bench/notes.txt" not in g("ls-tree", "-r", "--name-only", "HEAD")
    assert not list(tree.rglob("test_oracle_*"))
    assert {"parentless", "no-refs", "original-unreachable", "oracle-blobs-absent"} <= set(
        built.template.info.checks
    )


def test_sanitized_sha_is_deterministic(tmp_path: Path) -> None:
    one, *_ = _template_from_path_repo(tmp_path / "x", ArtifactStore(tmp_path / "s1"))
    two, *_ = _template_from_path_repo(tmp_path / "y", ArtifactStore(tmp_path / "s2"))
    assert one.template.info.sanitized_sha == two.template.info.sanitized_sha
    assert one.graph.digest == two.graph.digest


def test_tasks_folder_inside_the_repo_is_benchmark_owned(tmp_path: Path) -> None:
    repo = tmp_path / "mono"
    git_repo_with_history(repo)
    root = make_bench(repo / "eval" / "tasks")
    write_yaml(root / "alpha" / "task.yaml", {**_task_yaml(root), "repo": str(repo)})
    bench = load_benchmark(root)
    bound = bind_task(bench, "alpha", ArtifactStore(tmp_path / "a")).binding
    assert benchmark_paths(bench, bench.task("alpha"), bound) == ["eval/tasks"]


# Negative controls: the verifier must fire on trees built to trip it.


def _plain_clone(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "upstream"
    bug, _ = git_repo_with_history(repo)
    clone = tmp_path / "clone"
    gitrepo.git(["clone", "-q", str(repo), str(clone)])
    return clone, bug


def test_verifier_fires_on_a_plain_clone(tmp_path: Path) -> None:
    clone, bug = _plain_clone(tmp_path)
    with pytest.raises(SanitizeError, match="check failed"):
        sanitize.verify_template(clone, bug, remove=[], forbidden_blobs={})


def test_verifier_fires_when_refs_remain(tmp_path: Path, store: ArtifactStore) -> None:
    built, bug, *_ = _template_from_path_repo(tmp_path, store)
    tree = sanitize.template_tree(built.template)
    gitrepo.git(["update-ref", "refs/heads/leak", "HEAD"], cwd=tree)
    with pytest.raises(SanitizeError, match="no-refs check failed"):
        sanitize.verify_template(tree, bug, remove=["bench"], forbidden_blobs={})


def test_verifier_fires_when_oracle_bytes_are_readable(
    tmp_path: Path, store: ArtifactStore
) -> None:
    built, bug, *_ = _template_from_path_repo(tmp_path, store)
    tree = sanitize.template_tree(built.template)
    secret = b"def test_hidden():\n    assert True\n"
    gitrepo.git(["hash-object", "-w", "--stdin"], cwd=tree, stdin=secret)
    with pytest.raises(SanitizeError, match="oracle-blobs-absent|no-unreachable-objects"):
        sanitize.verify_template(tree, bug, remove=[], forbidden_blobs={"o.py": secret})


def test_verifier_fires_when_benchmark_path_present(tmp_path: Path) -> None:
    clone, bug = _plain_clone(tmp_path)
    with pytest.raises(SanitizeError):
        sanitize.verify_template(clone, bug, remove=["bench"], forbidden_blobs={})


def test_worktree_copy_is_an_independent_tree(tmp_path: Path, store: ArtifactStore) -> None:
    built, *_ = _template_from_path_repo(tmp_path, store)
    wt = sanitize.copy_worktree(built.template, tmp_path / "wt")
    (wt / "calc.py").write_text("edited\n")
    assert "edited" not in (sanitize.template_tree(built.template) / "calc.py").read_text()
    status = gitrepo.git(["status", "--porcelain"], cwd=wt).text()
    assert status.strip() == "M calc.py"
