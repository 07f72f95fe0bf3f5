"""Applying a promoted overlay: compare-and-swap against the decision's digests, full rollback."""

import os
import re
from pathlib import Path
from typing import Any

import pytest

from bench_assets.decision import ledger as ledger_store
from bench_assets.generation import apply as apply_mod
from bench_assets.generation.apply import (
    APPLIED,
    TEMP_TAG,
    ApplyJournal,
    ApplyPhase,
    ApplyResult,
    apply_overlay,
    find_leftovers,
    journal_path,
    plan_application,
    recover,
)
from bench_assets.kernel import fsutil
from bench_assets.kernel.errors import (
    ApplyFailed,
    ApplyRefused,
    InputError,
    IntegrityError,
    LedgerError,
)
from bench_assets.kernel.hashing import sha256_bytes, sha256_json, tree_manifest

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
        "kind": "generation",
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
        "apply_id": entry.payload["apply_id"],
        "files": [
            {"path": f.path, "old_sha256": f.old_sha256, "new_sha256": f.new_sha256}
            for f in result.files
        ],
    }
    # The apply_id is the journal's token, which also named the (now removed) temporary files.
    assert re.fullmatch(r"[0-9a-f]{12}", entry.payload["apply_id"])
    assert not journal_path(env["skills"]).exists()


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
        kind="generation",
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


def test_an_ad_hoc_promote_is_refused_saying_how_to_get_a_generations(
    env: dict[str, Path],
) -> None:
    """Issue 29: a promote that no generation's manifest backs is never applied."""
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, kind="ad_hoc", generation=None)
    assert "is ad hoc" in str(info.value) and "run `wfbench evolve`" in str(info.value)


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
        env["ledger"],
        decision="promote",
        decision_json=DECISION,
        generation="g1",
        candidate="c1",
        kind="generation",
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


# --- the journal: written first, settled by the same code after a failure or a crash ------------


def applied_entries(env: dict[str, Path]) -> list[ledger_store.LedgerEntry]:
    if not env["ledger"].exists():
        return []
    return [e for e in ledger_store.read(env["ledger"]) if e.decision == APPLIED]


def temps(root: Path) -> list[str]:
    return find_leftovers(root)


def after_tree(env: dict[str, Path]) -> dict[str, str]:
    return {rel: sha256_bytes(data) for rel, data in {**INCUMBENT, **OVERLAY}.items()}


def tree_of(root: Path) -> dict[str, str]:
    return {e["path"]: e["sha256"] for e in tree_manifest(root)}


def die_at(
    env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    phase: ApplyPhase,
    k: int,
    expected: dict[str, str | None],
) -> ApplyJournal:
    """Stop an application at a point as a kill would: nothing after it runs, nothing is settled.

    (tests/test_crash_apply.py kills real processes; this is the quick in-process stand-in.)
    """

    class Died(BaseException):
        pass

    def stop(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == (phase, k):
            raise Died

    def unsettled(*args: Any) -> ApplyResult:
        raise args[-1]

    monkeypatch.setattr(apply_mod, "_after_failure", unsettled)
    with pytest.raises(Died):
        run(env, expected=expected, hook=stop)
    monkeypatch.undo()
    return ApplyJournal.model_validate_json(journal_path(env["skills"]).read_bytes())


def test_journal_names_everything_before_the_first_write(env: dict[str, Path]) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    before = snapshot(env["skills"])
    seen: dict[str, ApplyJournal] = {}

    def look(at: ApplyPhase, n: int, rel: str) -> None:
        journal = ApplyJournal.model_validate_json(journal_path(env["skills"]).read_bytes())
        seen[f"{at}:{n}"] = journal
        if at == "journaled":
            assert snapshot(env["skills"]) == before  # the journal comes before any write

    run(env, expected=plan, hook=look)
    jpath = journal_path(env["skills"])
    assert jpath == env["skills"].parent / ".skills.wfbench-apply.journal.json"
    assert not jpath.exists()

    prepared = seen["journaled:1"]
    assert (prepared.schema_version, prepared.phase, prepared.candidate) == (1, "prepared", "c1")
    assert prepared.created_dirs == ["workflow/extra"]
    token = prepared.token
    assert [(f.path, f.before_sha256, f.after_sha256) for f in prepared.files] == [
        (rel, plan[rel], sha256_bytes(OVERLAY[rel])) for rel in sorted(OVERLAY)
    ]
    review = prepared.files[0]
    assert review.staged == f"review/.SKILL.md{TEMP_TAG}{token}.new"
    assert review.backup == f"review/.SKILL.md{TEMP_TAG}{token}.bak"
    assert prepared.files[2].backup is None and review.staged_inode is None
    assert prepared.ledger is not None
    assert prepared.ledger.path == str(env["ledger"].resolve())
    assert prepared.ledger.decision_digest == sha256_json(DECISION)
    assert seen["staged:3"].phase == "prepared"

    committing = seen["replaced:1"]
    assert committing.phase == "committing" and committing.token == token
    assert all(f.staged_inode for f in committing.files)
    (entry,) = applied_entries(env)
    assert entry.payload["apply_id"] == token
    assert entry.recorded_at == prepared.ledger.recorded_at


POINTS_BEFORE_COMMIT: list[tuple[ApplyPhase, int]] = [
    ("journaled", 1),
    ("staged", 1),
    ("staged", 3),
    ("replaced", 1),
    ("replaced", 3),
    ("synced", 1),
]


@pytest.mark.parametrize(("phase", "k"), POINTS_BEFORE_COMMIT)
def test_failure_before_the_commit_point_rolls_back(
    env: dict[str, Path], phase: ApplyPhase, k: int
) -> None:
    before = snapshot(env["skills"])
    with pytest.raises(ApplyFailed, match="every file was restored") as info:
        run(env, hook=failing_at(phase, k))
    assert info.value.restored
    assert snapshot(env["skills"]) == before
    assert not journal_path(env["skills"]).exists()
    assert not env["ledger"].exists()
    # Nothing was paid: the same decision applies cleanly afterwards, once.
    run(env)
    assert tree_of(env["skills"]) == after_tree(env) and len(applied_entries(env)) == 1


@pytest.mark.parametrize(("phase", "k"), [("ledger-written", 1), ("recorded", 1)])
def test_failure_after_the_commit_point_rolls_forward(
    env: dict[str, Path], phase: ApplyPhase, k: int
) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    result = run(env, expected=plan, hook=failing_at(phase, k))
    assert tree_of(env["skills"]) == after_tree(env)
    assert temps(env["skills"]) == [] and not journal_path(env["skills"]).exists()
    verified = ledger_store.verify(env["ledger"])
    assert verified.ok, verified.reason  # the head anchor was re-written after "ledger-written"
    (entry,) = applied_entries(env)
    assert result.ledger_seq == entry.seq == 1
    with pytest.raises(ApplyRefused, match="differ from the digests"):
        run(env, expected=plan)  # the same decision is never applied twice
    assert len(applied_entries(env)) == 1


def test_interrupt_after_the_commit_point_rolls_forward_and_propagates(
    env: dict[str, Path],
) -> None:
    def interrupt(at: ApplyPhase, n: int, rel: str) -> None:
        if at == "recorded":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(env, hook=interrupt)
    assert tree_of(env["skills"]) == after_tree(env) and temps(env["skills"]) == []
    assert len(applied_entries(env)) == 1 and ledger_store.verify(env["ledger"]).ok


def test_without_a_ledger_the_committed_journal_is_the_commit_point(env: dict[str, Path]) -> None:
    before = snapshot(env["skills"])
    with pytest.raises(ApplyFailed, match="every file was restored"):
        run(env, ledger=None, hook=failing_at("synced", 1))
    assert snapshot(env["skills"]) == before
    result = run(env, ledger=None, hook=failing_at("recorded", 1))
    assert result.ledger_seq is None
    assert tree_of(env["skills"]) == after_tree(env) and temps(env["skills"]) == []
    assert not journal_path(env["skills"]).exists() and not env["ledger"].exists()


def test_recover_without_a_journal_does_nothing(env: dict[str, Path], tmp_path: Path) -> None:
    before = snapshot(env["skills"])
    assert recover(env["skills"]) is None
    assert snapshot(env["skills"]) == before
    with pytest.raises(ApplyRefused, match="does not exist"):
        recover(tmp_path / "nowhere")


def test_a_disk_error_while_settling_keeps_the_journal_for_the_next_run(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.replace
    before = snapshot(env["skills"])

    def refuse_restore(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(src).endswith(".bak"):
            raise OSError(5, "Input/output error")
        real(src, dst, **kwargs)

    def fail_then_break_the_disk(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == ("replaced", 2):
            monkeypatch.setattr(os, "replace", refuse_restore)
            raise OSError("injected failure")

    with pytest.raises(ApplyFailed, match="could NOT be settled.*is kept") as info:
        run(env, hook=fail_then_break_the_disk)
    monkeypatch.undo()
    assert not info.value.restored
    assert journal_path(env["skills"]).exists() and temps(env["skills"])
    with pytest.raises(ApplyRefused, match="in the middle of an application"):
        plan_application(env["skills"], env["overlay"])

    recovery = recover(env["skills"])
    assert recovery is not None and recovery.action == "rolled_back" and not recovery.problems
    assert "rolled back: 3 file(s)" in recovery.message()
    assert snapshot(env["skills"]) == before
    assert not journal_path(env["skills"]).exists()


@pytest.mark.parametrize(
    ("garble", "named"),
    [
        (lambda raw: raw[: len(raw) // 2], "is not a valid journal"),
        (
            lambda raw: raw.replace(b'"schema_version": 1', b'"schema_version": 2'),
            "written by another wfbench version",
        ),
        (lambda raw: raw.replace(b'"path": "review/', b'"path": "../'), "may escape"),
        (lambda raw: raw.replace(b'"phase": "committing"', b'"phase": "done"'), "phase"),
        (
            lambda raw: raw.replace(b'.new"', b'.old"', 1),
            "staged or backup name does not match the token",
        ),
    ],
)
def test_a_bad_journal_is_refused_and_nothing_is_changed(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, garble: Any, named: str
) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    die_at(env, monkeypatch, "replaced", 2, plan)
    jpath = journal_path(env["skills"])
    fsutil.atomic_write_bytes(jpath, garble(jpath.read_bytes()))
    half = snapshot(env["skills"])
    journal_bytes = jpath.read_bytes()
    with pytest.raises(ApplyFailed) as info:
        recover(env["skills"])
    message = str(info.value)
    assert message.startswith(f"apply journal {jpath} ") and named in message, message
    assert not info.value.restored
    assert snapshot(env["skills"]) == half and jpath.read_bytes() == journal_bytes
    with pytest.raises(ApplyFailed, match=f"apply journal {jpath}"):
        run(env, expected=plan)  # every later application refuses too
    assert snapshot(env["skills"]) == half and not env["ledger"].exists()


def test_a_ledger_with_another_fault_blocks_recovery_and_changes_nothing(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    die_at(env, monkeypatch, "replaced", 3, plan)
    ledger_store.append(
        env["ledger"],
        decision="promote",
        decision_json=DECISION,
        generation="g1",
        candidate="c1",
        kind="generation",
    )
    fsutil.atomic_write_bytes(env["ledger"], env["ledger"].read_bytes().replace(b"g1", b"g2"))
    half = snapshot(env["skills"])
    with pytest.raises(LedgerError, match="cannot settle the interrupted application") as info:
        recover(env["skills"])
    assert str(journal_path(env["skills"])) in str(info.value)
    assert f"ledger {env['ledger']}: FAILED at line 1" in str(info.value)
    assert snapshot(env["skills"]) == half and journal_path(env["skills"]).exists()


def test_an_entry_with_our_id_but_other_content_is_refused(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    journal = die_at(env, monkeypatch, "synced", 1, plan)
    ledger_store.append(
        env["ledger"],
        decision=APPLIED,
        decision_json=DECISION,
        generation="g0001",
        candidate="c1",
        payload={"apply_id": journal.token, "files": []},
        kind="generation",
    )
    half = snapshot(env["skills"])
    with pytest.raises(LedgerError, match=f"carries its apply_id {journal.token} but not its"):
        recover(env["skills"])
    assert snapshot(env["skills"]) == half


def test_another_interrupted_append_is_left_for_a_person(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill fell before our record; the ledger's unanchored entry is someone else's."""
    plan = plan_application(env["skills"], env["overlay"])
    before = snapshot(env["skills"])
    die_at(env, monkeypatch, "synced", 1, plan)

    def power_cut(entry: ledger_store.LedgerEntry) -> None:
        raise OSError("power cut")

    with pytest.raises(OSError):
        ledger_store.append(
            env["ledger"],
            decision="promote",
            decision_json={"other": 1},
            generation="g0002",
            candidate="c2",
            on_written=power_cut,
            kind="generation",
        )
    recovery = recover(env["skills"])
    assert recovery is not None and recovery.action == "rolled_back"
    assert not recovery.ledger_reanchored
    assert snapshot(env["skills"]) == before
    pending = ledger_store.unanchored_entry(env["ledger"])
    assert pending is not None and pending.candidate == "c2"  # not ours: left as it was
    with pytest.raises(LedgerError, match="refusing to apply"):
        run(env, expected=plan)
    ledger_store.repair(env["ledger"])  # the person's `wfbench ledger repair`
    run(env, expected=plan)
    assert tree_of(env["skills"]) == after_tree(env) and len(applied_entries(env)) == 1


# --- leftovers never enter the incumbent -------------------------------------------------------


def test_orphan_leftovers_in_the_tree_are_refused_never_copied(env: dict[str, Path]) -> None:
    orphan_bak = env["skills"] / "review" / f".SKILL.md{TEMP_TAG}0123456789ab.bak"
    orphan_new = env["skills"] / f".x.md{TEMP_TAG}0123456789ab.new"
    fsutil.atomic_write_bytes(orphan_bak, b"the only copy of someone's bytes\n")
    fsutil.atomic_write_bytes(orphan_new, b"half of an old overlay\n")
    plan = {rel: sha256_bytes(INCUMBENT[rel]) if rel in INCUMBENT else None for rel in OVERLAY}
    assert find_leftovers(env["skills"]) == [
        orphan_new.name,
        f"review/{orphan_bak.name}",
    ]
    before = snapshot(env["skills"])
    info = assert_refused_untouched(env, before, expected=plan)
    message = str(info.value)
    assert f"skill tree {env['skills']} holds 2 leftover(s)" in message
    assert f"'review/{orphan_bak.name}'" in message and "never copied" in message
    with pytest.raises(ApplyRefused, match="holds 2 leftover"):
        recover(env["skills"])
    with pytest.raises(ApplyRefused, match="holds 2 leftover"):
        plan_application(env["skills"], env["overlay"])
    assert snapshot(env["skills"]) == before  # refused, never deleted: a person decides
    orphan_bak.unlink()
    orphan_new.unlink()
    run(env, expected=plan)
    assert tree_of(env["skills"]) == after_tree(env)


@pytest.mark.parametrize(
    "name",
    [
        f"review/.SKILL.md{TEMP_TAG}0123456789ab.bak",
        f"workflow/.SKILL.md{TEMP_TAG}0123456789ab.new",
        f"workflow/.x{TEMP_TAG}0123456789ab.new/SKILL.md",
    ],
)
def test_leftovers_in_an_overlay_are_refused(env: dict[str, Path], name: str) -> None:
    plan = plan_application(env["skills"], env["overlay"])
    fsutil.atomic_write_bytes(env["overlay"] / name, b"copied from a half-applied tree\n")
    shown = name if name.endswith((".bak", ".new")) else name.rsplit("/", 1)[0]
    with pytest.raises(ApplyRefused, match="leftover") as info:
        plan_application(env["skills"], env["overlay"])
    assert f"overlay folder {env['overlay']} holds 1 leftover(s)" in str(info.value)
    assert repr(shown) in str(info.value)
    assert_refused_untouched(env, snapshot(env["skills"]), expected=plan)


def test_a_rollback_that_met_an_edit_leaves_a_refused_backup(env: dict[str, Path]) -> None:
    theirs = b"edited right after the application replaced it\n"

    def edit_then_fail(at: ApplyPhase, n: int, rel: str) -> None:
        if (at, n) == ("replaced", 2):
            fsutil.atomic_write_bytes(env["skills"] / "review" / "SKILL.md", theirs)
            raise OSError("injected failure")

    with pytest.raises(ApplyFailed, match="could NOT be fully rolled back"):
        run(env, hook=edit_then_fail)
    assert not journal_path(env["skills"]).exists()
    (kept,) = find_leftovers(env["skills"])
    with pytest.raises(ApplyRefused, match=re.escape(kept)):
        recover(env["skills"])
    with pytest.raises(ApplyRefused, match=re.escape(kept)):
        run(env)
