"""A content address holds nothing or a complete publication: never what a crash left of one.

The attack (or accident) is a folder at a content address without its record file: a removal
killed half-way, a hand-deleted file, a partial copy of the artifact store. Before this, the
publisher kept such a folder as "already published by another run" and the reader then found
no record ("artifacts are missing"), or worse, trusted what was left.
"""

import shutil
from pathlib import Path

import pytest

from bench_assets.config.models import LimitsConfig
from bench_assets.inputs import oracle, sanitize
from bench_assets.kernel import fsutil
from bench_assets.kernel.errors import ValidationFailed
from bench_assets.kernel.fsutil import publish_dir, remove_tree
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import make_bench
from tests.test_inputs_core import _template_from_path_repo


def _staged(parent: Path, payload: str) -> Path:
    staging = parent / f".staging-{payload}"
    staging.mkdir(parents=True)
    (staging / "data.txt").write_text(payload)
    (staging / "record.json").write_text("{}")
    return staging


def test_a_removal_killed_half_way_leaves_nothing_at_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "store" / "abc"
    (target / "deep").mkdir(parents=True)
    (target / "deep" / "f.txt").write_text("x")
    (target / "record.json").write_text("{}")

    def killed(path: str | Path, *a: object, **k: object) -> None:
        raise KeyboardInterrupt  # the process dies inside the delete

    monkeypatch.setattr(shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        remove_tree(target)
    assert not target.exists()
    left = [p.name for p in target.parent.iterdir()]
    assert len(left) == 1 and left[0].startswith(".removing.abc."), left


def test_an_incomplete_folder_at_the_address_is_replaced(tmp_path: Path) -> None:
    final = tmp_path / "store" / "abc"
    final.mkdir(parents=True)
    (final / "data.txt").write_text("what a crash left")  # no record.json
    publish_dir(_staged(tmp_path, "good"), final, record="record.json")
    assert (final / "data.txt").read_text() == "good"
    assert (final / "record.json").is_file()
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [".publish.lock", "abc"]


def test_racing_publishers_of_the_same_content_never_remove_each_others_work(
    tmp_path: Path,
) -> None:
    import threading

    for round_ in range(20):
        final = tmp_path / f"store{round_}" / "abc"
        final.mkdir(parents=True)
        (final / "data.txt").write_text("what a crash left")
        stagings = [_staged(tmp_path / f"s{round_}-{i}", "good") for i in range(4)]
        start = threading.Barrier(len(stagings))
        seen: list[str] = []

        def publish(staging: Path, final: Path, start: threading.Barrier, seen: list[str]) -> None:
            start.wait()
            out = publish_dir(staging, final, record="record.json")
            seen.append((out / "data.txt").read_text())  # what this publisher returns is there

        threads = [threading.Thread(target=publish, args=(s, final, start, seen)) for s in stagings]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == ["good"] * 4
        assert (final / "record.json").is_file()
        assert not [s for s in stagings if s.exists()]


def test_a_complete_folder_is_kept_and_the_staging_copy_discarded(tmp_path: Path) -> None:
    final = tmp_path / "store" / "abc"
    publish_dir(_staged(tmp_path, "first"), final, record="record.json")
    second = _staged(tmp_path, "second")
    publish_dir(second, final, record="record.json")
    assert (final / "data.txt").read_text() == "first"
    assert not second.exists()


def test_without_a_record_name_an_existing_folder_is_never_touched(tmp_path: Path) -> None:
    final = tmp_path / "tasks" / "mine"
    final.mkdir(parents=True)
    (final / "task.yaml").write_text("a user's own task")
    publish_dir(_staged(tmp_path, "mined"), final)
    assert (final / "task.yaml").read_text() == "a user's own task"


def test_a_staging_folder_without_its_record_is_not_published(tmp_path: Path) -> None:
    staging = _staged(tmp_path, "x")
    (staging / "record.json").unlink()
    with pytest.raises(ValueError, match="record.json"):
        publish_dir(staging, tmp_path / "store" / "abc", record="record.json")
    assert not (tmp_path / "store" / "abc").exists()


def test_a_template_whose_record_was_lost_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    built, *_ = _template_from_path_repo(tmp_path, store)
    sha = built.template.info.sanitized_sha
    record = built.template.path / sanitize.TEMPLATE_RECORD
    fsutil.make_tree_writable(built.template.path)
    record.unlink()
    (sanitize.template_tree(built.template) / "planted.txt").write_text("left behind")
    assert sanitize.load_template(store, sha) is None

    again, *_ = _template_from_path_repo(tmp_path / "again", store)
    assert again.template.info.sanitized_sha == sha
    loaded = sanitize.load_template(store, sha)
    assert loaded is not None and loaded.info == built.template.info
    assert not (sanitize.template_tree(loaded) / "planted.txt").exists()


def test_an_oracle_folder_without_its_manifest_is_replaced(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts")
    root = make_bench(tmp_path / "tasks")
    snap, payloads = oracle.capture(load_benchmark(root).task("alpha"), LimitsConfig())
    final = store.oracle(snap.digest)
    (final / "files").mkdir(parents=True)
    (final / "files" / "test_oracle_alpha.py").write_text("def test_x():\n    assert True\n")
    assert oracle.store(snap, payloads, store) == final
    assert (final / "manifest.json").is_file()
    assert oracle.verify_stored(snap, store) == payloads


def test_a_crash_leftover_in_the_candidate_queue_does_not_break_the_suite(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tasks"
    shutil.copytree(Path(__file__).parent.parent / "tasks", root)
    queue = root / "candidates"
    (queue / ".removing.c0009.tmp.1f2e").mkdir()  # a removal killed half-way
    (queue / ".c0009-proposal.tmp" / "files").mkdir(parents=True)  # a proposal being staged
    assert sorted(load_benchmark(root).candidates) == ["c0001-test-first", "c0002-plan-budget"]
    (queue / "c0009-broken").mkdir()  # a visible folder is a candidate, and must be valid
    with pytest.raises(ValidationFailed, match="c0009-broken/candidate.yaml"):
        load_benchmark(root)


@pytest.mark.parametrize("leftover", ["record-is-a-folder", "a-file-at-the-address"])
def test_other_shapes_of_a_broken_address_are_replaced_too(tmp_path: Path, leftover: str) -> None:
    final = tmp_path / "store" / "abc"
    final.parent.mkdir(parents=True)
    if leftover == "record-is-a-folder":
        (final / "record.json").mkdir(parents=True)  # the record's name, but not a file
    else:
        final.write_text("not a folder")
    publish_dir(_staged(tmp_path, "good"), final, record="record.json")
    assert (final / "data.txt").read_text() == "good" and (final / "record.json").is_file()
