"""Applying a promoted overlay: compare-and-swap against the decision's digests, full rollback."""

import os
from pathlib import Path
from typing import Any

import pytest

from bench_assets import fsutil
from bench_assets import ledger as ledger_store
from bench_assets.apply import (
    APPLIED,
    TEMP_TAG,
    ApplyPhase,
    ApplyResult,
    apply_overlay,
    plan_application,
)
from bench_assets.errors import (
    ApplyFailed,
    ApplyRefused,
    InputError,
    IntegrityError,
    LedgerError,
)
from bench_assets.hashing import sha256_bytes, sha256_json, tree_manifest

INCUMBENT = {
    "workflow/SKILL.md": b"# workflow\nold workflow text\n",
    "review/SKILL.md": b"# review\nold review text\n",
    "untouched/SKILL.md": b"# untouched\n",
}
OVERLAY = {
    "review/SKILL.md": b"# review\nNEW review text\n",
    "workflow/SKILL.md": b"# workflow\nNEW workflow text\n",
    "workflow/extra/checklist.md": b"- [ ] new file in a new directory\n",
}
DECISION: dict[str, Any] = {"schema_version": 1, "decision": "promote", "candidate": "c1"}


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        fsutil.atomic_write_bytes(root / rel, data)
    return root


def snapshot(root: Path) -> str:
    """Digest of every file (path, bytes, exec bit), every directory and every file mode."""
    dirs: list[str] = []
    modes: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            dirs.append((Path(dirpath) / name).relative_to(root).as_posix())
        for name in filenames:
            full = Path(dirpath) / name
            modes[full.relative_to(root).as_posix()] = os.lstat(full).st_mode
    return sha256_json({"files": tree_manifest(root), "dirs": sorted(dirs), "modes": modes})


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, Path]:
    skills = write_tree(tmp_path / "tasks" / "skills", INCUMBENT)
    overlay = write_tree(tmp_path / "overlay" / "files", OVERLAY)
    return {"skills": skills, "overlay": overlay, "ledger": tmp_path / "ledger" / "ledger.jsonl"}


def run(
    env: dict[str, Path],
    expected: dict[str, str | None] | None = None,
    **kwargs: Any,
) -> ApplyResult:
    if expected is None:
        expected = plan_application(env["skills"], env["overlay"])
    args: dict[str, Any] = {
        "expected": expected,
        "decision": "promote",
        "ledger": env["ledger"],
        "decision_json": DECISION,
        "generation": "g0001",
        "candidate": "c1",
    }
    args.update(kwargs)
    return apply_overlay(env["skills"], env["overlay"], **args)


def assert_refused_untouched(
    env: dict[str, Path], before: str, exc_type: type = ApplyRefused, **kwargs: Any
) -> pytest.ExceptionInfo[BaseException]:
    """Run an application that must be refused, and check that nothing at all was written."""
    overlay_before = snapshot(env["overlay"])
    with pytest.raises(exc_type) as info:
        run(env, **kwargs)
    assert snapshot(env["skills"]) == before
    assert snapshot(env["overlay"]) == overlay_before
    assert not env["ledger"].exists()
    assert not ledger_store.head_path(env["ledger"]).exists()
    return info


# --- planning ----------------------------------------------------------------------------------


def test_plan_records_incumbent_digests_and_none_for_new_files(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    assert plan == {
        "review/SKILL.md": sha256_bytes(INCUMBENT["review/SKILL.md"]),
        "workflow/SKILL.md": sha256_bytes(INCUMBENT["workflow/SKILL.md"]),
        "workflow/extra/checklist.md": None,
    }
    assert list(plan) == sorted(plan)


def test_plan_skips_litter(env: dict[str, Path]) -> None:
    fsutil.atomic_write_bytes(env["overlay"] / "__pycache__" / "x.pyc", b"\0")
    fsutil.atomic_write_bytes(env["overlay"] / "review" / ".DS_Store", b"\0")
    assert set(plan_application(env["skills"], env["overlay"])) == set(OVERLAY)


# --- the happy path ------------------------------------------------------------------------------


def test_apply_replaces_and_adds_files_and_records_them(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    os.chmod(env["skills"] / "review" / "SKILL.md", 0o600)
    result = run(env, expected=plan)

    for rel, data in OVERLAY.items():
        assert (env["skills"] / rel).read_bytes() == data
    untouched = "untouched/SKILL.md"
    assert (env["skills"] / untouched).read_bytes() == INCUMBENT[untouched]
    # A replaced file keeps the incumbent's permissions; an added one is an ordinary file.
    assert os.stat(env["skills"] / "review" / "SKILL.md").st_mode & 0o777 == 0o600
    assert os.stat(env["skills"] / "workflow" / "extra" / "checklist.md").st_mode & 0o777 == 0o644
    # No staged or backup file is left behind.
    assert not [e for e in tree_manifest(env["skills"]) if TEMP_TAG in e["path"]]

    assert result.replaced == ["review/SKILL.md", "workflow/SKILL.md"]
    assert result.added == ["workflow/extra/checklist.md"]
    assert {f.path: f.new_sha256 for f in result.files} == {
        rel: sha256_bytes(data) for rel, data in OVERLAY.items()
    }
    assert {f.path: f.old_sha256 for f in result.files} == plan

    verified = ledger_store.verify(env["ledger"])
    assert verified.ok, verified.reason
    (entry,) = ledger_store.read(env["ledger"])
    assert result.ledger_seq == entry.seq == 1
    assert entry.decision == APPLIED
    assert entry.candidate == "c1"
    assert entry.generation == "g0001"
    assert entry.decision_digest == sha256_json(DECISION)
    assert entry.payload == {
        "files": [
            {"path": f.path, "old_sha256": f.old_sha256, "new_sha256": f.new_sha256}
            for f in result.files
        ]
    }


def test_apply_without_ledger_records_nothing(env: dict[str, Path]) -> None:
    result = run(env, ledger=None)
    assert result.ledger_seq is None
    assert (env["skills"] / "review" / "SKILL.md").read_bytes() == OVERLAY["review/SKILL.md"]
    assert not env["ledger"].exists()


def test_apply_appends_after_earlier_decisions(env: dict[str, Path]) -> None:
    ledger_store.append(
        env["ledger"],
        decision="promote",
        decision_json=DECISION,
        generation="g0001",
        candidate="c1",
    )
    result = run(env)
    assert result.ledger_seq == 2
    assert ledger_store.verify(env["ledger"]).ok
    assert [e.decision for e in ledger_store.read(env["ledger"])] == ["promote", APPLIED]


def test_applying_the_same_overlay_twice_is_refused(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    run(env, expected=plan)
    after_first = snapshot(env["skills"])
    ledger_bytes = env["ledger"].read_bytes()
    with pytest.raises(ApplyRefused, match="differ from the digests") as info:
        run(env, expected=plan)
    message = str(info.value)
    assert "review/SKILL.md (changed since the decision)" in message
    assert "workflow/extra/checklist.md (appeared since the decision)" in message
    assert snapshot(env["skills"]) == after_first
    assert env["ledger"].read_bytes() == ledger_bytes


# --- refusals: nothing is written ---------------------------------------------------------------


def test_target_edited_after_the_decision_is_refused(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    fsutil.atomic_write_bytes(env["skills"] / "workflow" / "SKILL.md", b"edited by a person\n")
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, expected=plan)
    assert "workflow/SKILL.md (changed since the decision)" in str(info.value)
    assert "review/SKILL.md" not in str(info.value)
    assert isinstance(info.value, InputError)


def test_new_target_that_appeared_since_the_decision_is_refused(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    fsutil.atomic_write_bytes(env["skills"] / "workflow" / "extra" / "checklist.md", b"mine\n")
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, expected=plan)
    assert "workflow/extra/checklist.md (appeared since the decision)" in str(info.value)


def test_target_that_vanished_since_the_decision_is_refused(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    os.unlink(env["skills"] / "review" / "SKILL.md")
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, expected=plan)
    assert "review/SKILL.md (vanished since the decision)" in str(info.value)


@pytest.mark.parametrize("decision", ["keep_incumbent", "insufficient_evidence", "PROMOTE", ""])
def test_decision_other_than_promote_is_refused(env: dict[str, Path], decision: str) -> None:
    before = snapshot(env["skills"])
    assert_refused_untouched(env, before, decision=decision)


def test_overlay_and_decision_must_name_the_same_files(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    before = snapshot(env["skills"])
    fewer = dict(plan)
    del fewer["review/SKILL.md"]
    info = assert_refused_untouched(env, before, expected=fewer)
    assert "no digest for: ['review/SKILL.md']" in str(info.value)
    more = {**plan, "other/SKILL.md": None}
    info = assert_refused_untouched(env, before, expected=more)
    assert "not in the overlay: ['other/SKILL.md']" in str(info.value)


@pytest.mark.parametrize(
    "bad", ["../escape.md", "/etc/passwd", "a/../../escape.md", "./review/SKILL.md", "a//b.md"]
)
def test_escaping_target_paths_are_refused(env: dict[str, Path], bad: str) -> None:
    plan = {**plan_application(env["skills"], env["overlay"]), bad: None}
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, expected=plan)
    assert "escape" in str(info.value)


def test_malformed_expected_digest_is_refused(env: dict[str, Path]) -> None:
    plan: dict[str, str | None] = {**plan_application(env["skills"], env["overlay"])}
    plan["review/SKILL.md"] = "sha256:" + str(plan["review/SKILL.md"])
    assert_refused_untouched(env, snapshot(env["skills"]), expected=plan)


def test_symlinked_directory_on_the_way_is_refused(env: dict[str, Path], tmp_path: Path) -> None:
    outside = write_tree(tmp_path / "outside", {"SKILL.md": INCUMBENT["review/SKILL.md"]})
    fsutil.remove_tree(env["skills"] / "review")
    os.symlink(outside, env["skills"] / "review")
    before, outside_before = snapshot(env["skills"]), snapshot(outside)
    with pytest.raises(ApplyRefused, match="symlink"):
        plan_application(env["skills"], env["overlay"])
    expected = {rel: sha256_bytes(INCUMBENT.get(rel, b"")) for rel in OVERLAY}
    info = assert_refused_untouched(env, before, expected=expected)
    assert "'review' on the way is a symlink" in str(info.value)
    assert snapshot(outside) == outside_before


def test_symlink_target_is_refused(env: dict[str, Path], tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    fsutil.atomic_write_bytes(outside, INCUMBENT["review/SKILL.md"])
    os.unlink(env["skills"] / "review" / "SKILL.md")
    os.symlink(outside, env["skills"] / "review" / "SKILL.md")
    with pytest.raises(ApplyRefused, match="symlink"):
        plan_application(env["skills"], env["overlay"])
    expected: dict[str, str | None] = {
        rel: sha256_bytes(INCUMBENT.get(rel, b"")) for rel in OVERLAY
    }
    expected["workflow/extra/checklist.md"] = None
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, expected=expected)
    assert "target 'review/SKILL.md' is a symlink" in str(info.value)
    assert outside.read_bytes() == INCUMBENT["review/SKILL.md"]


def test_directory_target_is_refused(env: dict[str, Path]) -> None:
    (env["skills"] / "workflow" / "extra" / "checklist.md").mkdir(parents=True)
    with pytest.raises(ApplyRefused, match="is a directory"):
        plan_application(env["skills"], env["overlay"])
    plan = {rel: sha256_bytes(INCUMBENT[rel]) if rel in INCUMBENT else None for rel in OVERLAY}
    assert_refused_untouched(env, snapshot(env["skills"]), expected=plan)


def test_file_in_place_of_a_directory_is_refused(env: dict[str, Path]) -> None:
    fsutil.atomic_write_bytes(env["skills"] / "workflow" / "extra", b"a file, not a folder\n")
    with pytest.raises(ApplyRefused, match="not a directory"):
        plan_application(env["skills"], env["overlay"])


def test_symlink_overlay_file_is_refused(env: dict[str, Path], tmp_path: Path) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    secret = tmp_path / "secret.txt"
    fsutil.atomic_write_bytes(secret, b"not a skill\n")
    os.unlink(env["overlay"] / "review" / "SKILL.md")
    os.symlink(secret, env["overlay"] / "review" / "SKILL.md")
    with pytest.raises(ApplyRefused, match="overlay file 'review/SKILL.md' is a symlink"):
        plan_application(env["skills"], env["overlay"])
    assert_refused_untouched(env, snapshot(env["skills"]), expected=plan)


def test_symlink_overlay_directory_is_refused(env: dict[str, Path], tmp_path: Path) -> None:
    write_tree(tmp_path / "elsewhere", {"SKILL.md": b"smuggled\n"})
    os.symlink(tmp_path / "elsewhere", env["overlay"] / "smuggled")
    with pytest.raises(ApplyRefused, match="overlay directory 'smuggled' is a symlink"):
        plan_application(env["skills"], env["overlay"])


def test_empty_overlay_is_refused(env: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ApplyRefused, match="has no files"):
        plan_application(env["skills"], tmp_path / "empty")


def test_tampered_ledger_refuses_before_any_write(env: dict[str, Path]) -> None:
    ledger_store.append(
        env["ledger"], decision="promote", decision_json=DECISION, generation="g1", candidate="c1"
    )
    fsutil.atomic_write_bytes(env["ledger"], env["ledger"].read_bytes().replace(b"g1", b"g2"))
    ledger_bytes = env["ledger"].read_bytes()
    before = snapshot(env["skills"])
    with pytest.raises(LedgerError, match="refusing to apply"):
        run(env)
    assert snapshot(env["skills"]) == before
    assert env["ledger"].read_bytes() == ledger_bytes


def test_ledger_inside_the_skill_tree_is_refused(env: dict[str, Path]) -> None:
    before = snapshot(env["skills"])
    with pytest.raises(ApplyRefused, match="inside the skill tree"):
        run(env, ledger=env["skills"] / "ledger.jsonl")
    assert snapshot(env["skills"]) == before


def test_decision_document_must_be_plain_json(env: dict[str, Path]) -> None:
    before = snapshot(env["skills"])
    assert_refused_untouched(env, before, decision_json={"score": float("nan")})


# --- failures midway: everything is rolled back ------------------------------------------------


def failing_at(phase: ApplyPhase, k: int) -> Any:
    def hook(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == (phase, k):
            raise OSError(f"injected failure at {phase} {k} ({rel})")

    return hook


@pytest.mark.parametrize("k", [1, 2, 3])
def test_failure_after_k_of_3_files_replaced_restores_the_tree(
    env: dict[str, Path], k: int
) -> None:
    before = snapshot(env["skills"])
    with pytest.raises(ApplyFailed, match="every file was restored") as info:
        run(env, hook=failing_at("replaced", k))
    assert info.value.restored
    assert isinstance(info.value, IntegrityError)
    assert isinstance(info.value.__cause__, OSError)
    # Byte-identical, same modes, no leftover temp file, the added file and its new directory gone.
    assert snapshot(env["skills"]) == before
    assert not (env["skills"] / "workflow" / "extra").exists()
    assert not env["ledger"].exists()


def test_rollback_restores_the_original_files_themselves(env: dict[str, Path]) -> None:
    target = env["skills"] / "review" / "SKILL.md"
    inode, mtime = os.stat(target).st_ino, os.stat(target).st_mtime_ns
    with pytest.raises(ApplyFailed):
        run(env, hook=failing_at("replaced", 2))
    assert (os.stat(target).st_ino, os.stat(target).st_mtime_ns) == (inode, mtime)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_failure_while_staging_touches_no_target(env: dict[str, Path], k: int) -> None:
    before = snapshot(env["skills"])
    with pytest.raises(ApplyFailed, match="every file was restored") as info:
        run(env, hook=failing_at("staged", k))
    assert info.value.restored
    assert snapshot(env["skills"]) == before
    assert not env["ledger"].exists()


def test_disk_full_while_staging_is_rolled_back(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fsutil.atomic_write_bytes
    calls = {"n": 0}

    def flaky(path: Path, data: bytes, *, mode: int = 0o644) -> Path:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(path, data, mode=mode)

    before = snapshot(env["skills"])
    plan = plan_application(env["skills"], env["overlay"])
    monkeypatch.setattr(fsutil, "atomic_write_bytes", flaky)
    with pytest.raises(ApplyFailed, match="No space left on device") as info:
        run(env, expected=plan)
    assert info.value.restored
    assert snapshot(env["skills"]) == before


def test_rename_failure_midway_is_rolled_back(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.replace

    def flaky(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(src).endswith(".new") and Path(dst).parent.name == "workflow":
            raise OSError(5, "Input/output error")
        real(src, dst, **kwargs)

    before = snapshot(env["skills"])
    plan = plan_application(env["skills"], env["overlay"])
    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(ApplyFailed, match="Input/output error") as info:
        run(env, expected=plan)
    monkeypatch.undo()
    assert info.value.restored
    assert snapshot(env["skills"]) == before


def test_ledger_failure_after_all_files_replaced_is_rolled_back(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise LedgerError("ledger disk vanished")

    before = snapshot(env["skills"])
    plan = plan_application(env["skills"], env["overlay"])
    monkeypatch.setattr(ledger_store, "append", broken)
    with pytest.raises(ApplyFailed, match="ledger disk vanished") as info:
        run(env, expected=plan)
    assert info.value.restored
    assert snapshot(env["skills"]) == before


def test_interrupt_midway_is_rolled_back_and_propagates(env: dict[str, Path]) -> None:
    def interrupt(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == ("replaced", 2):
            raise KeyboardInterrupt

    before = snapshot(env["skills"])
    with pytest.raises(KeyboardInterrupt):
        run(env, hook=interrupt)
    assert snapshot(env["skills"]) == before
    assert not env["ledger"].exists()


# --- concurrent edits: compare-and-swap and a careful rollback -----------------------------------


def test_target_edited_while_staging_is_caught_by_compare_and_swap(env: dict[str, Path]) -> None:
    """Files are replaced in path order; workflow/SKILL.md changes after review/ was replaced."""
    edited = b"edited by a person during the application\n"

    def edit(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == ("staged", 3):
            fsutil.atomic_write_bytes(env["skills"] / "workflow" / "SKILL.md", edited)

    with pytest.raises(ApplyFailed, match="workflow/SKILL.md: changed since the decision") as info:
        run(env, hook=edit)
    assert info.value.restored
    expected_tree = dict(INCUMBENT, **{"workflow/SKILL.md": edited})
    assert {e["path"]: e["sha256"] for e in tree_manifest(env["skills"])} == {
        rel: sha256_bytes(data) for rel, data in expected_tree.items()
    }
    assert not (env["skills"] / "workflow" / "extra").exists()
    assert not env["ledger"].exists()


def test_new_file_that_appears_midway_is_kept_not_overwritten(env: dict[str, Path]) -> None:
    theirs = b"someone else's new file\n"

    def appear(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == ("replaced", 2):
            fsutil.atomic_write_bytes(env["skills"] / "workflow" / "extra" / "checklist.md", theirs)

    with pytest.raises(ApplyFailed, match="appeared since the decision") as info:
        run(env, hook=appear)
    assert info.value.restored
    assert (env["skills"] / "workflow" / "extra" / "checklist.md").read_bytes() == theirs
    for rel in ("review/SKILL.md", "workflow/SKILL.md"):
        assert (env["skills"] / rel).read_bytes() == INCUMBENT[rel]
    assert not [e for e in tree_manifest(env["skills"]) if TEMP_TAG in e["path"]]


def test_rollback_never_overwrites_a_file_edited_after_its_replacement(
    env: dict[str, Path],
) -> None:
    theirs = b"edited right after the application replaced it\n"

    def edit_then_fail(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == ("replaced", 2):
            fsutil.atomic_write_bytes(env["skills"] / "review" / "SKILL.md", theirs)
            raise OSError("injected failure")

    with pytest.raises(ApplyFailed, match="could NOT be fully rolled back") as info:
        run(env, hook=edit_then_fail)
    assert not info.value.restored
    message = str(info.value)
    assert "review/SKILL.md changed after it was replaced" in message
    # The concurrent edit survives; the other file is restored; the old bytes are kept for repair.
    assert (env["skills"] / "review" / "SKILL.md").read_bytes() == theirs
    assert (env["skills"] / "workflow" / "SKILL.md").read_bytes() == INCUMBENT["workflow/SKILL.md"]
    backups = [e for e in tree_manifest(env["skills"]) if e["path"].endswith(".bak")]
    assert [b["sha256"] for b in backups] == [sha256_bytes(INCUMBENT["review/SKILL.md"])]
    assert backups[0]["path"] in message
    assert not env["ledger"].exists()
