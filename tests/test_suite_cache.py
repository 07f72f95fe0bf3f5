"""The validated-suite cache: a suite validated once per process is served again only while what
its validation read is unchanged (bench_assets/tasks/suite_cache.py)."""

from pathlib import Path

import pytest
import yaml

from bench_assets.kernel.errors import ValidationFailed
from bench_assets.tasks import suite_cache
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import make_bench, write_yaml


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    suite_cache.clear()


def _suite(tmp_path: Path) -> Path:
    return make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))


def _same_size_edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text and len(old) == len(new)
    path.write_text(text.replace(old, new, 1))


def test_a_second_load_reuses_the_validation_and_an_edit_is_seen(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    first = load_benchmark(root)
    assert load_benchmark(root) is first  # served from the cache
    task_file = root / "alpha" / "task.yaml"
    prompt = first.task("alpha").spec.prompt
    # same size, within the same second: only the bytes tell the two files apart
    _same_size_edit(task_file, prompt[:4], prompt[:4][::-1])
    edited = load_benchmark(root)
    assert edited is not first
    assert edited.task("alpha").spec.prompt == yaml.safe_load(task_file.read_text())["prompt"]
    assert edited.task("alpha").spec.prompt != prompt
    assert edited.task("beta").spec.prompt == prompt


def test_an_edit_that_breaks_the_suite_raises_instead_of_serving_the_cached_one(
    tmp_path: Path,
) -> None:
    root = _suite(tmp_path)
    load_benchmark(root)
    oracle = root / "beta" / "oracle" / "test_oracle_alpha.py"
    oracle.write_text("x = 1\n")  # no test any more
    with pytest.raises(ValidationFailed, match="no test found"):
        load_benchmark(root)
    oracle.write_text("def test_ok():\n    pass\n")
    assert load_benchmark(root).task("beta")


def test_a_symlink_planted_in_an_inline_repo_is_seen(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    load_benchmark(root)
    (root / "alpha" / "repo" / "link").symlink_to(tmp_path)
    with pytest.raises(ValidationFailed, match="symlink"):
        load_benchmark(root)


def test_a_corrupted_cache_entry_is_never_served(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    good = load_benchmark(root)
    [key] = suite_cache._cache
    fingerprint, _ = suite_cache._cache[key]
    # an entry whose key no longer matches the files: validated again
    suite_cache._cache[key] = ("0" * 64, "not a benchmark")
    again = load_benchmark(root)
    assert again is not good and again.task_ids() == ["alpha", "beta"]
    # an entry stored under the old fingerprint of files that have changed since: validated again
    suite_cache._cache[key] = (fingerprint, good)
    write_yaml(root / "beta" / "task.yaml", {"id": "beta"})
    with pytest.raises(ValidationFailed, match="beta/task.yaml"):
        load_benchmark(root)


def test_partial_loads_are_keyed_by_their_tasks(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    alpha = load_benchmark(root, ["alpha"])
    assert load_benchmark(root, ["alpha"]) is alpha
    # a task the partial load never read does not invalidate it
    _same_size_edit(root / "beta" / "task.yaml", "beta", "BETA")
    assert load_benchmark(root, ["alpha"]) is alpha
    with pytest.raises(ValidationFailed, match="beta"):
        load_benchmark(root)


def test_a_suite_with_a_symlink_is_never_cached(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    (root / "replays" / "b.jsonl").unlink()
    (root / "replays" / "b.jsonl").symlink_to(root / "replays" / "w.jsonl")
    assert suite_cache.suite_fingerprint(root.resolve(), None) is None
    assert load_benchmark(root) is not load_benchmark(root)


def test_a_repository_outside_the_suite_is_checked_on_every_hit(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    outside = tmp_path / "outside"
    (outside / ".git").mkdir(parents=True)
    task_file = root / "alpha" / "task.yaml"
    write_yaml(task_file, {**yaml.safe_load(task_file.read_text()), "repo": str(outside)})
    first = load_benchmark(root)
    assert load_benchmark(root) is first
    (outside / ".git").rmdir()
    with pytest.raises(ValidationFailed, match="not a git repository"):
        load_benchmark(root)


def _os_walk_problems(repo: Path, task_dir: Path) -> list[str]:
    """The inline-repo check as it was written with os.walk (the reference)."""
    import os

    out = []
    for dirpath, dirnames, filenames in os.walk(repo):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out.append(f"inline repo contains a symlink: {p.relative_to(task_dir)}")
        if ".git" in dirnames:
            out.append("inline repo must not contain a .git folder")
            dirnames.remove(".git")
    return out


def test_the_inline_repo_walk_finds_what_os_walk_found_in_its_order(tmp_path: Path) -> None:
    from bench_assets.tasks.catalog import inline_repo_problems

    task_dir = tmp_path / "alpha"
    repo = task_dir / "repo"
    (repo / "pkg" / "sub" / ".git").mkdir(parents=True)
    (repo / "pkg" / "sub" / ".git" / "link").symlink_to(tmp_path)  # inside .git: not walked
    (repo / ".git").mkdir()
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "pkg" / "to_file").symlink_to(repo / "pkg" / "a.py")
    (repo / "pkg" / "to_dir").symlink_to(tmp_path)  # a symlinked folder: reported, not entered
    (repo / "pkg" / "dangling").symlink_to(tmp_path / "nowhere")
    (repo / "z").mkdir()
    (repo / "z" / "deep").symlink_to(repo / "pkg")
    found = inline_repo_problems(repo, task_dir)
    assert found == _os_walk_problems(repo, task_dir)
    assert sum("symlink" in f for f in found) == 4
    assert sum(".git folder" in f for f in found) == 2
