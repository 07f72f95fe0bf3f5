"""The decision ledger: a clean ledger verifies, and every kind of tampering is named precisely."""

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from bench_assets.decision import ledger
from bench_assets.decision.ledger import (
    GENESIS,
    LedgerHead,
    append,
    head_path,
    read,
    repair,
    unanchored_entry,
    verify,
    verify_bytes,
)
from bench_assets.kernel.errors import IntegrityError, LedgerError
from bench_assets.kernel.fsutil import atomic_write_bytes
from bench_assets.kernel.hashing import canonical_json, sha256_json

DECISIONS = ["promote", "keep_incumbent", "insufficient_evidence", "promote"]


def decision_doc(i: int) -> dict[str, Any]:
    return {"schema_version": 1, "decision": DECISIONS[i % 4], "tasks": {"alpha": {"n": i}}}


def build(tmp_path: Path, n: int = 4, tag: str = "") -> Path:
    """A ledger of ``n`` entries with every field populated (and a non-ASCII payload byte)."""
    path = tmp_path / "ledger" / "decisions.jsonl"
    for i in range(n):
        append(
            path,
            decision=DECISIONS[i % 4],
            decision_json=decision_doc(i),
            generation=f"g{i + 1:04d}",
            candidate=f"overlay-{i}{tag}",
            payload={"reasons": [f"rule {i} ok", "café"], "cost_ratio": 0.8 + i / 100},
            recorded_at=f"2025-01-0{i + 1}T03:00:00+00:00",
            kind="generation",
        )
    return path


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def rewrite(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data)


def lines_hash(path: Path, seq: int) -> str:
    """The hash recorded on line ``seq`` of a ledger (no verification)."""
    return str(json.loads(lines_of(path)[seq - 1])["hash"])


def assert_bad(path: Path, line: int, seq: int | None, reason: str, **kw: Any) -> None:
    result = verify(path, **kw)
    assert not result.ok
    assert (result.first_bad_line, result.first_bad_seq) == (line, seq), result.reason
    assert reason in (result.reason or ""), result.reason
    assert result.entries == line - 1
    message = result.message(path)
    assert f"line {line} (seq {'?' if seq is None else seq})" in message
    with pytest.raises(LedgerError, match=f"line {line}"):
        read(path, **kw)


# --- the clean ledger ----------------------------------------------------------------------------


def test_clean_ledger_verifies_and_chains(tmp_path: Path) -> None:
    path = build(tmp_path)
    result = verify(path)
    assert result.ok and result.entries == 4 and result.reason is None
    entries = read(path)
    assert [e.seq for e in entries] == [1, 2, 3, 4]
    assert entries[0].prev_hash == GENESIS
    for before, after in zip(entries, entries[1:], strict=False):
        assert after.prev_hash == before.hash
    for raw, entry in zip(lines_of(path), entries, strict=True):
        obj = json.loads(raw)
        assert raw == (canonical_json(obj) + "\n").encode("utf-8")
        assert entry.hash == sha256_json({k: v for k, v in obj.items() if k != "hash"})
        assert set(obj) == {
            "schema_version",
            "seq",
            "recorded_at",
            "generation",
            "decision",
            "candidate",
            "decision_digest",
            "payload",
            "prev_hash",
            "hash",
            "kind",
        }
    assert entries[2].decision_digest == sha256_json(decision_doc(2))
    assert (entries[2].decision, entries[2].generation, entries[2].candidate) == (
        "insufficient_evidence",
        "g0003",
        "overlay-2",
    )
    assert result.head == LedgerHead(seq=4, hash=entries[-1].hash)
    assert json.loads(head_path(path).read_text()) == {"seq": 4, "hash": entries[-1].hash}
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert result.message(path).startswith(f"ledger {path}: OK, 4 entries, head seq 4")


def test_missing_ledger_is_empty_and_valid(tmp_path: Path) -> None:
    path = tmp_path / "none.jsonl"
    result = verify(path)
    assert result.ok and result.entries == 0 and result.head == LedgerHead(seq=0, hash=GENESIS)
    assert read(path) == []


def test_append_returns_the_entry_written(tmp_path: Path) -> None:
    path = build(tmp_path, 2)
    entry = append(
        path,
        decision="promote",
        decision_json={"x": 1},
        generation="g0009",
        candidate=None,
        kind="generation",
    )
    assert entry == read(path)[-1]
    assert (entry.seq, entry.payload, entry.candidate) == (3, {}, None)
    assert entry.recorded_at.endswith("+00:00")


# --- edited bytes ---------------------------------------------------------------------------------

FIELDS = [
    "kind",
    "seq",
    "recorded_at",
    "generation",
    "decision",
    "candidate",
    "decision_digest",
    "payload",
    "prev_hash",
    "hash",
    "schema_version",
]


def _flip_in_field(raw: bytes, field: str) -> bytes:
    """Change one byte inside the value of ``field`` so the line stays valid JSON."""
    start = raw.index(f'"{field}":'.encode()) + len(field) + 3
    if raw[start : start + 1] in (b'"', b"{"):
        start += 1
    while not raw[start : start + 1].isalnum():
        start += 1
    old = raw[start : start + 1]
    new = b"7" if old.isdigit() and old != b"7" else b"8" if old.isdigit() else b"b"
    if old == b"b":
        new = b"c"
    return raw[:start] + new + raw[start + 1 :]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("index", range(4))
def test_editing_a_field_of_any_entry_is_named(tmp_path: Path, index: int, field: str) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    lines[index] = _flip_in_field(lines[index], field)
    rewrite(path, b"".join(lines))
    edited_seq = json.loads(lines[index])["seq"]
    if field != "seq":
        assert edited_seq == index + 1
    assert_bad(path, index + 1, edited_seq, "")


def test_edit_reasons(tmp_path: Path) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    lines[1] = _flip_in_field(lines[1], "decision")
    rewrite(path, b"".join(lines))
    assert_bad(path, 2, 2, "hash does not match the entry's content (the entry was edited)")


def test_whitespace_that_keeps_the_value_is_still_an_edit(tmp_path: Path) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    lines[2] = lines[2].replace(b'"seq":', b'"seq": ', 1)
    rewrite(path, b"".join(lines))
    assert_bad(path, 3, 3, "not in canonical form")


def test_every_single_byte_edit_is_detected(tmp_path: Path) -> None:
    """Property: for every byte position, each of several edits is caught on that byte's line.

    The mutated bytes are checked with :func:`verify_bytes` (what :func:`verify` runs on the file's
    content) against the ledger's real head anchor, so no file is rewritten per edit.
    """
    path = build(tmp_path, 3)
    original = path.read_bytes()
    head = verify(path).head
    assert verify_bytes(original, head=head).ok
    line_of: list[int] = []
    for number, raw in enumerate(original.splitlines(keepends=True), start=1):
        line_of += [number] * len(raw)
    tried = 0
    for pos in range(len(original)):
        for edit in (original[pos] ^ 0x01, original[pos] ^ 0x20, original[pos] ^ 0x80, 0x20):
            if edit == original[pos]:
                continue
            tried += 1
            result = verify_bytes(original[:pos] + bytes([edit]) + original[pos + 1 :], head=head)
            assert not result.ok, f"undetected edit at byte {pos} -> {edit:#x}"
            assert result.first_bad_line == line_of[pos], (pos, result.reason)
    assert tried > 3 * len(original)
    assert verify(path).ok


def test_every_single_byte_edit_of_the_head_anchor_is_detected(tmp_path: Path) -> None:
    path = build(tmp_path, 3)
    hp = head_path(path)
    original = hp.read_bytes()
    for pos in range(len(original)):
        for edit in (original[pos] ^ 0x01, original[pos] ^ 0x80):
            rewrite(hp, original[:pos] + bytes([edit]) + original[pos + 1 :])
            assert not verify(path).ok, f"undetected head edit at byte {pos}"
    rewrite(hp, original)
    assert verify(path).ok


# --- removed, reordered, truncated, forged -------------------------------------------------------


def test_removing_the_first_entry(tmp_path: Path) -> None:
    path = build(tmp_path)
    rewrite(path, b"".join(lines_of(path)[1:]))
    assert_bad(path, 1, 2, "seq 2 where 1 was expected")
    assert "prev_hash does not match the genesis hash" in (verify(path).reason or "")


def test_removing_a_middle_entry(tmp_path: Path) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    del lines[2]
    rewrite(path, b"".join(lines))
    assert_bad(path, 3, 4, "seq 4 where 3 was expected")
    assert "prev_hash does not match the hash of seq 2" in (verify(path).reason or "")


def test_removing_the_last_entry(tmp_path: Path) -> None:
    path = build(tmp_path)
    rewrite(path, b"".join(lines_of(path)[:-1]))
    assert_bad(path, 4, 4, "ledger ends at seq 3 but the head anchor records seq 4")


def test_removing_every_entry(tmp_path: Path) -> None:
    path = build(tmp_path)
    rewrite(path, b"")
    assert_bad(path, 1, 1, "seq 1..4 removed")
    path.unlink()
    assert_bad(path, 1, 1, "seq 1..4 removed")


@pytest.mark.parametrize(("a", "b"), [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)])
def test_swapping_two_entries(tmp_path: Path, a: int, b: int) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    lines[a], lines[b] = lines[b], lines[a]
    rewrite(path, b"".join(lines))
    assert_bad(path, a + 1, b + 1, f"seq {b + 1} where {a + 1} was expected")


def test_truncating_mid_line(tmp_path: Path) -> None:
    path = build(tmp_path)
    data = path.read_bytes()
    last_start = data.rindex(b"\n", 0, len(data) - 1) + 1
    for cut in (last_start + 1, (last_start + len(data)) // 2, len(data) - 2):
        rewrite(path, data[:cut])
        assert_bad(path, 4, None, "not JSON")
    rewrite(path, data[:-1])  # only the final newline is gone
    assert_bad(path, 4, 4, "no newline at end of file")
    second = data.index(b"\n") + 1
    rewrite(path, data[: second + 30])
    assert_bad(path, 2, None, "no newline at end of file: truncated?")


def test_garbage_lines(tmp_path: Path) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    for junk, reason in [
        (b"\n", "not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"seq": 3}\n', "not a ledger entry"),
        (b"\xff\xfe\n", "not UTF-8"),
        (b"[" * 100_000 + b"\n", "not JSON (RecursionError)"),
    ]:
        rewrite(path, b"".join([*lines[:2], junk, *lines[2:]]))
        assert_bad(path, 3, 3 if b"seq" in junk else None, reason)


def _forged(prev_hash: str, seq: int, schema: int = 2) -> bytes:
    obj: dict[str, Any] = {
        "schema_version": schema,
        "seq": seq,
        "recorded_at": "2025-02-01T00:00:00+00:00",
        "generation": "g9999",
        "decision": "promote",
        "candidate": "evil",
        "decision_digest": sha256_json({"decision": "promote"}),
        "payload": {},
        "prev_hash": prev_hash,
    }
    if schema > 1:
        obj["kind"] = "generation"
    obj["hash"] = sha256_json(obj)
    return (canonical_json(obj) + "\n").encode("utf-8")


def test_forged_entry_with_a_wrong_prev_hash(tmp_path: Path) -> None:
    path = build(tmp_path)
    third = read(path)[2]
    rewrite(path, path.read_bytes() + _forged(third.hash, 5))
    assert_bad(path, 5, 5, "prev_hash does not match the hash of seq 4")


def test_forged_entry_with_a_correct_chain_is_caught_by_the_head(tmp_path: Path) -> None:
    path = build(tmp_path)
    last = read(path)[-1]
    rewrite(path, path.read_bytes() + _forged(last.hash, 5))
    assert_bad(path, 5, 5, "entry after the head recorded in the head anchor (seq 4)")
    with pytest.raises(LedgerError, match="refusing to append.*line 5"):
        append(
            path,
            decision="promote",
            decision_json={},
            generation="g5",
            candidate=None,
            kind="generation",
        )


def test_head_anchor_missing_or_garbled(tmp_path: Path) -> None:
    path = build(tmp_path)
    hp = head_path(path)
    saved = hp.read_bytes()
    hp.unlink()
    result = verify(path)
    assert not result.ok and "head anchor decisions.jsonl.head is missing" in (result.reason or "")
    assert result.message(path).endswith("is missing (4 entries verified)")
    rewrite(hp, b"{}")
    assert "unreadable" in (verify(path).reason or "")
    rewrite(hp, saved)
    assert verify(path).ok


def test_rewriting_ledger_and_head_together_needs_an_external_anchor(tmp_path: Path) -> None:
    path = build(tmp_path)
    anchor = verify(path).head
    rewrite(path, b"".join(lines_of(path)[:-1]))
    forged_head = {"seq": 3, "hash": lines_hash(path, 3)}
    rewrite(head_path(path), (canonical_json(forged_head) + "\n").encode())
    assert verify(path).ok  # the attacker also fixed the sidecar
    assert_bad(path, 4, 4, "the expected head records seq 4", expected_head=anchor)


def test_an_external_anchor_catches_a_rewritten_entry(tmp_path: Path) -> None:
    path = build(tmp_path)
    anchor = verify(path).head
    rebuilt = build(tmp_path / "other", tag="-forged")  # same seqs, other content
    rewrite(path, rebuilt.read_bytes())
    rewrite(head_path(path), head_path(rebuilt).read_bytes())
    assert verify(path).ok
    result = verify(path, expected_head=anchor)
    assert (result.ok, result.first_bad_line, result.first_bad_seq) == (False, 4, 4)
    assert "differs from the expected head" in (result.reason or "")


# --- durability, refusals, concurrency ------------------------------------------------------------


def test_crash_while_writing_leaves_the_old_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = build(tmp_path, 2)
    before = path.read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        append(
            path,
            decision="promote",
            decision_json={},
            generation="g3",
            candidate=None,
            kind="generation",
        )
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert verify(path).ok
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, head_path(path).name]


def test_append_refuses_a_tampered_ledger_and_writes_nothing(tmp_path: Path) -> None:
    path = build(tmp_path)
    lines = lines_of(path)
    lines[0] = _flip_in_field(lines[0], "payload")
    rewrite(path, b"".join(lines))
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"line 1 \(seq 1\)") as err:
        append(
            path,
            decision="promote",
            decision_json={},
            generation="g5",
            candidate=None,
            kind="generation",
        )
    assert isinstance(err.value, IntegrityError)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"x": float("nan")}, "non-finite"),
        ({"x": (1, 2)}, "tuple is not JSON"),
        ({"x": {1: "a"}}, "is not a string"),
        ({"x": "\ud800"}, "not valid Unicode"),
        ({"x": "a" * (ledger.MAX_PAYLOAD_BYTES + 1)}, "at most"),
    ],
)
def test_payload_must_be_small_plain_json(
    tmp_path: Path, payload: dict[str, Any], message: str
) -> None:
    path = tmp_path / "l.jsonl"
    with pytest.raises(ValueError, match=message):
        append(
            path,
            decision="promote",
            decision_json={},
            generation=None,
            candidate=None,
            payload=payload,
            kind="ad_hoc",
        )
    assert not path.exists()


def test_concurrent_appends_all_land_in_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(5):
                append(
                    path,
                    decision="keep_incumbent",
                    decision_json={"w": w, "i": i},
                    generation=f"w{w}",
                    candidate=str(i),
                    kind="generation",
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    result = verify(path)
    assert result.ok and result.entries == 30
    assert sorted((e.generation, e.candidate) for e in read(path)) == sorted(
        (f"w{w}", str(i)) for w in range(6) for i in range(5)
    )


# --- repair: only a missing head write is re-anchored --------------------------------------------


def interrupt_append(path: Path, n: int = 3) -> None:
    """Append one entry and stop right after the ledger write, before its head anchor."""

    def power_cut(entry: ledger.LedgerEntry) -> None:
        raise OSError("power cut between the ledger write and its head anchor")

    with pytest.raises(OSError, match="power cut"):
        append(
            path,
            decision="applied",
            decision_json={"n": n},
            generation=f"g{n:04d}",
            candidate=f"overlay-{n}",
            payload={"files": []},
            on_written=power_cut,
            kind="generation",
        )


def state(path: Path) -> tuple[bytes | None, bytes | None]:
    hp = head_path(path)
    return (
        path.read_bytes() if path.exists() else None,
        hp.read_bytes() if hp.exists() else None,
    )


def test_interrupted_append_is_loud_and_repair_reanchors(tmp_path: Path) -> None:
    path = build(tmp_path, 2)
    old_head = verify(path).head
    interrupt_append(path)
    assert_bad(path, 3, 3, "an append was interrupted (see `wfbench ledger repair`)")
    with pytest.raises(LedgerError, match="refusing to append"):
        append(
            path,
            decision="promote",
            decision_json={},
            generation="g4",
            candidate=None,
            kind="generation",
        )
    pending = unanchored_entry(path)
    assert pending is not None and pending.seq == 3

    result = repair(path)
    assert result.action == "reanchored"
    assert result.previous == old_head
    assert result.entry == pending == read(path)[-1]
    assert result.head == LedgerHead(seq=3, hash=pending.hash) == verify(path).head
    assert json.loads(head_path(path).read_text()) == {"seq": 3, "hash": pending.hash}
    assert stat.S_IMODE(head_path(path).stat().st_mode) == 0o444
    message = result.message(path)
    assert message.startswith(f"ledger {path}: re-anchored head at seq 3")
    assert "(was at seq 2)" in message and "applied of overlay-3 in g0003" in message
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, head_path(path).name]

    # A second repair has nothing to do and writes nothing; appends work again.
    before = state(path)
    again = repair(path)
    assert (again.action, again.entry, again.head.seq) == ("none", None, 3)
    assert again.message(path) == f"ledger {path}: OK, nothing to repair (head seq 3)"
    assert state(path) == before
    assert (
        append(
            path,
            decision="promote",
            decision_json={},
            generation="g4",
            candidate=None,
            kind="generation",
        ).seq
        == 4
    )


def test_interrupted_first_append_leaves_no_anchor_and_repair_accepts(tmp_path: Path) -> None:
    path = tmp_path / "ledger" / "decisions.jsonl"
    interrupt_append(path, 1)
    assert not head_path(path).exists()
    assert "head anchor decisions.jsonl.head is missing" in (verify(path).reason or "")
    result = repair(path)
    assert (result.action, result.previous, result.head.seq) == ("reanchored", None, 1)
    assert "(was missing)" in result.message(path)
    assert verify(path).ok


def test_repair_of_a_missing_or_clean_ledger_does_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "decisions.jsonl"
    assert repair(missing).action == "none"
    assert not missing.parent.exists()
    path = build(tmp_path, 2)
    before = state(path)
    assert repair(path).action == "none" and unanchored_entry(path) is None
    assert state(path) == before


def test_repair_accepts_only_the_expected_entry(tmp_path: Path) -> None:
    path = build(tmp_path, 2)
    interrupt_append(path)
    pending = unanchored_entry(path)
    assert pending is not None
    before = state(path)
    with pytest.raises(LedgerError, match=r"seq 3, hash [0-9a-f]{12}\) is not the one expected"):
        repair(path, expect_hash="0" * 64)
    assert state(path) == before
    assert repair(path, expect_hash=pending.hash).action == "reanchored"


def _broken_chain(path: Path) -> None:
    lines = lines_of(path)
    del lines[1]
    rewrite(path, b"".join(lines))


def _edited_entry(path: Path) -> None:
    lines = lines_of(path)
    lines[0] = _flip_in_field(lines[0], "candidate")
    rewrite(path, b"".join(lines))


def _anchor_ahead(path: Path) -> None:
    rewrite(path, b"".join(lines_of(path)[:-1]))


def _anchor_two_behind(path: Path) -> None:
    forged_head = {"seq": 2, "hash": lines_hash(path, 2)}
    rewrite(head_path(path), (canonical_json(forged_head) + "\n").encode())


def _anchor_missing_beside_many(path: Path) -> None:
    head_path(path).unlink()


def _anchor_garbled(path: Path) -> None:
    rewrite(head_path(path), b'{"seq": 4}\n')


def _anchor_of_another_ledger(path: Path) -> None:
    forged_head = {"seq": 4, "hash": "ab" * 32}
    rewrite(head_path(path), (canonical_json(forged_head) + "\n").encode())


def _forged_after_interrupted(path: Path) -> None:
    """An interrupted append, then one more entry with a correct chain written by hand."""
    interrupt_append(path, 5)
    rewrite(path, path.read_bytes() + _forged(lines_hash(path, 5), 6))


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        (_broken_chain, "the chain itself does not verify"),
        (_edited_entry, "the chain itself does not verify"),
        (_anchor_ahead, "records seq 4: seq 4 removed (truncated ledger)"),
        (_anchor_two_behind, "entry after the head recorded in the head anchor (seq 2)"),
        (_anchor_missing_beside_many, "is missing beside 4 entries"),
        (_anchor_garbled, "head anchor decisions.jsonl.head is unreadable"),
        (_anchor_of_another_ledger, "hash of seq 4 differs from the head anchor"),
        (_forged_after_interrupted, "entry after the head recorded in the head anchor (seq 4)"),
    ],
)
def test_repair_refuses_every_other_fault_and_changes_nothing(
    tmp_path: Path, fault: Any, named: str
) -> None:
    path = build(tmp_path)
    fault(path)
    before = state(path)
    with pytest.raises(LedgerError) as err:
        repair(path)
    message = str(err.value)
    assert message.startswith(f"cannot repair ledger {path}")
    assert named in message, message
    assert isinstance(err.value, IntegrityError)
    assert state(path) == before
    with pytest.raises(LedgerError):
        unanchored_entry(path)


def test_repair_refuses_every_single_byte_edit(tmp_path: Path) -> None:
    """Property: on a ledger left by an interrupted append, no one-byte edit is ever accepted.

    The small ledger has one anchored entry and one unanchored one (what a kill between the two
    writes leaves); every byte of the ledger and of its head anchor is edited in turn.
    """
    path = build(tmp_path, 1)
    interrupt_append(path, 2)
    original, head = state(path)
    assert original is not None and head is not None

    def put(target: Path, data: bytes) -> None:  # fast and good enough for a test: no fsync
        target.unlink()
        target.write_bytes(data)

    tried = 0
    for target, good in ((path, original), (head_path(path), head)):
        for pos in range(len(good)):
            for edit in (good[pos] ^ 0x01, good[pos] ^ 0x80, 0x20):
                if edit == good[pos]:
                    continue
                edited = good[:pos] + bytes([edit]) + good[pos + 1 :]
                put(target, edited)
                tried += 1
                with pytest.raises(LedgerError, match=f"cannot repair ledger {path}"):
                    repair(path)
                assert target.read_bytes() == edited, f"repair wrote after an edit at {pos}"
        put(target, good)
    assert tried > 2 * (len(original) + len(head))
    assert state(path) == (original, head)
    assert repair(path).action == "reanchored" and verify(path).ok


# --- `wfbench ledger repair` ---------------------------------------------------------------------


def test_cli_ledger_repair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from bench_assets.cli import main

    path = build(tmp_path, 2)
    interrupt_append(path)
    runner = CliRunner()
    blocked = runner.invoke(main, ["ledger", "verify", "--path", str(path)])
    assert blocked.exit_code == 1 and "wfbench ledger repair" in blocked.output

    done = runner.invoke(main, ["ledger", "repair", "--path", str(path)])
    assert done.exit_code == 0, done.output
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"ledger {path}: re-anchored head at seq 3") and done.stderr == ""
    assert "accepted entry seq 3: applied of overlay-3 in g0003" in line
    assert verify(path).ok
    again = runner.invoke(main, ["ledger", "repair", "--path", str(path)])
    assert (again.exit_code, again.stdout) == (
        0,
        f"ledger {path}: OK, nothing to repair (head seq 3)\n",
    )

    # Refused: one line on stderr naming the file and the fault, exit 1, no traceback, no change.
    _broken_chain(path)
    before = state(path)
    refused = runner.invoke(main, ["ledger", "repair", "--path", str(path)])
    assert refused.exit_code == 1 and refused.exception is not None
    assert isinstance(refused.exception, SystemExit)
    assert refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith(
        f"wfbench: cannot repair ledger {path}: the chain itself does not verify"
    )
    assert "Traceback" not in refused.output
    assert state(path) == before

    # The default ledger is the artifact store's; a missing one is invalid input (exit 2).
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "empty-store"))
    missing = runner.invoke(main, ["ledger", "repair"])
    assert missing.exit_code == 2
    assert "no ledger at" in missing.stderr and "decisions.jsonl" in missing.stderr


# --- decision kinds (schema 2) --------------------------------------------------------------------


def _legacy(tmp_path: Path, n: int) -> Path:
    """A ledger written before entries had a kind (schema 1), with its head anchor."""
    path = tmp_path / "ledger" / "decisions.jsonl"
    prev, lines = GENESIS, []
    for i in range(n):
        line = _forged(prev, i + 1, schema=1)
        prev = json.loads(line)["hash"]
        lines.append(line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    head_path(path).write_text(canonical_json({"hash": prev, "seq": n}) + "\n")
    return path


def test_a_schema_1_ledger_still_verifies_and_grows_with_schema_2_entries(tmp_path: Path) -> None:
    path = _legacy(tmp_path, 2)
    assert verify(path).ok
    old = read(path)
    assert [(e.schema_version, e.kind, e.basis) for e in old] == [(1, None, "generation")] * 2
    append(
        path,
        decision="promote",
        decision_json={},
        generation=None,
        candidate="c9",
        kind="ad_hoc",
    )
    entries = read(path)
    assert (entries[-1].schema_version, entries[-1].kind, entries[-1].basis) == (
        2,
        "ad_hoc",
        "ad_hoc",
    )
    assert entries[:2] == old


def test_a_schema_1_entry_after_a_schema_2_one_is_a_fault(tmp_path: Path) -> None:
    """Appending an entry in the old format (no kind) behind the API's back is caught even when
    its chain and the head anchor are re-written to match."""
    path = build(tmp_path)
    last = read(path)[-1]
    forged = _forged(last.hash, 5, schema=1)
    rewrite(path, path.read_bytes() + forged)
    head_path(path).chmod(0o644)
    head_path(path).write_text(
        canonical_json({"hash": json.loads(forged)["hash"], "seq": 5}) + "\n"
    )
    assert_bad(path, 5, 5, "schema 1 after an entry of schema 2")


@pytest.mark.parametrize(
    ("schema", "kind", "why"),
    [
        (2, None, "-: Value error, kind is required from schema 2 on"),
        (1, "generation", "-: Value error, a schema-1 entry has no kind"),
        (3, "generation", "schema_version"),
    ],
)
def test_kind_and_schema_must_agree(
    tmp_path: Path, schema: int, kind: str | None, why: str
) -> None:
    obj: dict[str, Any] = json.loads(_forged(GENESIS, 1, schema=1))
    obj["schema_version"] = schema
    obj.pop("hash")
    if kind is not None:
        obj["kind"] = kind
    obj["hash"] = sha256_json(obj)
    path = tmp_path / "l.jsonl"
    path.write_text(canonical_json(obj) + "\n")
    assert_bad(path, 1, 1, f"not a ledger entry (bad fields: {why}")


def test_a_schema_1_decision_document_still_loads_and_schema_2_needs_its_kind(
    tmp_path: Path,
) -> None:
    """decision.json written before ``kind``/``refused`` (schema 1) is read as before (explain,
    apply); a schema-2 document without its kind is not a decision document."""
    import datetime as dt

    from bench_assets import gate
    from bench_assets.config.models import PolicyConfig
    from bench_assets.decision.documents import DecisionDocument, load_decision
    from bench_assets.kernel.errors import InputError

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    decision = gate.decide(
        gate.GateInput(
            policy=PolicyConfig(),
            model="m",
            incumbent_arm="workflow",
            candidate_arm="cand",
            tasks=[],
            outcomes=[],
            aborted=False,
            now=now,
            max_age_days=90,
        )
    )
    body = DecisionDocument(
        kind="ad_hoc",
        generation=None,
        candidate="c1",
        overlay_digest="0" * 64,
        incumbent_skills_digest="1" * 64,
        overlay_files="/o",
        skills_dir="/s",
        target_base_digests={},
        decision=decision,
        lineage=[],
    ).model_dump(mode="json")
    legacy = {k: v for k, v in body.items() if k not in ("kind", "refused")}
    for generation, basis in (("g0003", "generation"), (None, "ad_hoc")):
        path = tmp_path / f"{generation}.json"
        path.write_text(json.dumps({**legacy, "decision_schema": 1, "generation": generation}))
        doc = load_decision(path)
        assert (doc.decision_schema, doc.kind, doc.basis) == (1, None, basis)
    path = tmp_path / "no-kind.json"
    path.write_text(json.dumps({**legacy, "decision_schema": 2}))
    with pytest.raises(InputError, match="not a valid decision document"):
        load_decision(path)
