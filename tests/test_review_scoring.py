"""The §13 review scoring: hand-computed cases, parsing attacks, and properties.

Every expected number below was computed by hand from the rules in seed-system §13 (the working is
in the comment above each case), not by running the code.
"""

import itertools
import json
import os
import random

import pytest

from bench_assets.scorers.review_scoring import (
    Finding,
    Label,
    ReviewArtifactInvalid,
    ReviewOutput,
    match_findings,
    parse_labels,
    parse_review_bytes,
    parse_review_output,
    reduce_scores,
    score_review,
)


def F(fid, sev, path, line, end, cat="correctness", blocking=False, evidence="see line"):
    return Finding(
        id=fid,
        severity=sev,
        path=path,
        line=line,
        end_line=end,
        category=cat,
        scenario="when x",
        evidence=evidence,
        recommendation="fix it",
        blocking=blocking,
    )


def L(lid, sev, path, start, end, cat="correctness"):
    return Label(id=lid, severity=sev, path=path, line_start=start, line_end=end, category=cat)


def R(verdict, *findings):
    return ReviewOutput(verdict=verdict, findings=tuple(findings))


def score(review, labels):
    return score_review(review, labels).model_dump()


# ---------------------------------------------------------------------------------------------
# hand-computed cases


def test_case01_perfect_blocker_review():
    s = score(
        R("request_changes", F("f1", "high", "a.py", 11, 11, blocking=True)),
        [L("l1", "high", "a.py", 10, 12)],
    )
    assert s == {
        "true_positives": 1,
        "false_positives": 0,
        "false_negatives": 0,
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "weighted_precision": 1.0,
        "weighted_recall": 1.0,
        "weighted_f1": 1.0,
        "blocker_recall": 1.0,
        "severity_accuracy": 1.0,
        "category_accuracy": 1.0,
        "grounded_evidence": 1.0,
        "verdict_correct": True,
        "clean_control": False,
        "clean_pass": False,
        "score_finite": True,
    }
    assert score_review(
        R("request_changes", F("f1", "high", "a.py", 11, 11, blocking=True)),
        [L("l1", "high", "a.py", 10, 12)],
    ).oracle_passed


def test_case02_downgraded_severity_earns_only_its_reported_weight():
    # critical label (8) found as low (1): matched weight min(1, 8) = 1, no FP weight →
    # wP = 1/1 = 1, wR = 1/8 = 0.125, wF1 = 2·1·0.125/1.125 = 0.2222…; blocker recall 0/1 (a low
    # finding does not count for a blocker); verdict comment ≠ request_changes.
    s = score(
        R("comment", F("f1", "low", "a.py", 5, 5, "security")),
        [L("l1", "critical", "a.py", 5, 5, "security")],
    )
    assert (s["true_positives"], s["false_positives"], s["false_negatives"]) == (1, 0, 0)
    assert s["precision"] == 1.0 and s["recall"] == 1.0 and s["f1"] == 1.0
    assert s["weighted_precision"] == 1.0
    assert s["weighted_recall"] == 0.125
    assert s["weighted_f1"] == 0.222222
    assert s["blocker_recall"] == 0.0
    assert s["severity_accuracy"] == 0.0 and s["category_accuracy"] == 1.0
    assert s["verdict_correct"] is False


def test_case03_upgraded_severity_is_capped_by_the_label():
    # low label (1) reported critical (8): matched min(8, 1) = 1 → wP 1, wR 1, wF1 1; no blocker
    # labels → blocker recall None; labels all low → expected verdict comment.
    s = score(
        R("request_changes", F("f1", "critical", "a.py", 3, 4, blocking=True)),
        [L("l1", "low", "a.py", 4, 9)],
    )
    assert s["weighted_precision"] == 1.0 and s["weighted_recall"] == 1.0
    assert s["weighted_f1"] == 1.0
    assert s["blocker_recall"] is None
    assert s["verdict_correct"] is False


def test_case04_overlapping_ranges_cardinality_beats_category_preference():
    # f1 (10-19) overlaps A (10-20, same category) and B (18-30); f2 (12) overlaps only A.
    # Greedy by preference gives f1→A and leaves f2 unmatched (TP 1); the maximum matching is
    # f1→B, f2→A (TP 2). Category accuracy 1/2; all medium: weights 2+2 of 4.
    labels = [
        L("A", "medium", "x.py", 10, 20, "correctness"),
        L("B", "medium", "x.py", 18, 30, "tests"),
    ]
    review = R(
        "comment",
        F("f1", "medium", "x.py", 10, 19, "correctness"),
        F("f2", "medium", "x.py", 12, 12, "correctness"),
    )
    s = score(review, labels)
    assert (s["true_positives"], s["false_positives"], s["false_negatives"]) == (2, 0, 0)
    assert s["category_accuracy"] == 0.5 and s["severity_accuracy"] == 1.0
    assert s["weighted_f1"] == 1.0 and s["verdict_correct"] is True
    pairs = {(f.id, lb.id) for f, lb in match_findings(review.findings, labels)}
    assert pairs == {("f1", "B"), ("f2", "A")}


def test_case05_touching_ranges_overlap_and_disjoint_ones_do_not():
    # Label 10-12: a finding at 12-15 overlaps (line 12 ≤ 12 and end 15 ≥ 10); one at 13-15 does
    # not; a finding on another path never matches.
    labels = [L("l", "medium", "x.py", 10, 12)]
    assert score(R("comment", F("f", "medium", "x.py", 12, 15)), labels)["true_positives"] == 1
    assert score(R("comment", F("f", "medium", "x.py", 13, 15)), labels)["true_positives"] == 0
    assert score(R("comment", F("f", "medium", "y.py", 10, 12)), labels)["true_positives"] == 0


def test_case06_wrong_file_scores_zero_not_null():
    # One high finding on the wrong file: TP 0, FP 1, FN 1; precision 0/1, recall 0/1, F1 0.0
    # (labels exist); wP = 0/(0+5) = 0, wR = 0/5 = 0, wF1 0.0; blocker recall 0/1.
    s = score(
        R("request_changes", F("f1", "high", "b.py", 1, 1, blocking=True)),
        [L("l1", "high", "a.py", 1, 1)],
    )
    assert (s["true_positives"], s["false_positives"], s["false_negatives"]) == (0, 1, 1)
    assert s["precision"] == 0.0 and s["recall"] == 0.0 and s["f1"] == 0.0
    assert s["weighted_precision"] == 0.0 and s["weighted_recall"] == 0.0
    assert s["weighted_f1"] == 0.0 and s["blocker_recall"] == 0.0
    assert s["severity_accuracy"] is None and s["category_accuracy"] is None
    assert s["verdict_correct"] is True


def test_case07_clean_control_without_findings_passes():
    s = score(R("approve"), [])
    assert s == {
        "true_positives": 0,
        "false_positives": 0,
        "false_negatives": 0,
        "precision": None,
        "recall": None,
        "f1": None,
        "weighted_precision": None,
        "weighted_recall": None,
        "weighted_f1": None,
        "blocker_recall": None,
        "severity_accuracy": None,
        "category_accuracy": None,
        "grounded_evidence": None,
        "verdict_correct": True,
        "clean_control": True,
        "clean_pass": True,
        "score_finite": True,
    }


def test_case08_clean_control_with_a_finding_is_noisy():
    # No labels, one low finding: precision 0/1 = 0, recall None, F1 None (clean control);
    # wP = 0/(0+1) = 0 (a noisy clean control gets 0), wR None, wF1 None; expected verdict approve.
    review = R("comment", F("f1", "low", "a.py", 1, 1, "other"))
    s = score(review, [])
    assert (s["true_positives"], s["false_positives"], s["false_negatives"]) == (0, 1, 0)
    assert s["precision"] == 0.0 and s["recall"] is None and s["f1"] is None
    assert s["weighted_precision"] == 0.0 and s["weighted_recall"] is None
    assert s["weighted_f1"] is None
    assert s["clean_control"] is True and s["clean_pass"] is False
    assert s["verdict_correct"] is False
    assert not score_review(review, []).oracle_passed


def test_case09_complete_miss_scores_zero():
    # One medium label, no findings, approve: precision None (no findings), recall 0, F1 0.0;
    # wP None (0 matched, 0 FP weight), wR 0/2 = 0, wF1 0.0; expected verdict comment.
    s = score(R("approve"), [L("l1", "medium", "a.py", 1, 2)])
    assert s["precision"] is None and s["recall"] == 0.0 and s["f1"] == 0.0
    assert s["weighted_precision"] is None and s["weighted_recall"] == 0.0
    assert s["weighted_f1"] == 0.0
    assert s["grounded_evidence"] is None and s["verdict_correct"] is False


def test_case10_mixed_review():
    # Labels: L1 critical a.py 1-5 security, L2 medium a.py 40-42, L3 low b.py 7.
    # Findings: f1 high a.py 3 security (→L1), f2 medium a.py 41-45 (→L2), f3 medium c.py 1 (FP).
    # TP 2, FP 1, FN 1 → P = R = F1 = 2/3. Matched weight min(5,8)+min(2,2) = 7, FP weight 2,
    # label weight 8+2+1 = 11: wP = 7/9, wR = 7/11, wF1 = (98/99)/(140/99) = 0.7.
    # Blocker recall: L1 (critical) matched by a high finding → 1/1. Severity accuracy 1/2.
    labels = [
        L("L1", "critical", "a.py", 1, 5, "security"),
        L("L2", "medium", "a.py", 40, 42),
        L("L3", "low", "b.py", 7, 7, "tests"),
    ]
    review = R(
        "request_changes",
        F("f1", "high", "a.py", 3, 3, "security", blocking=True),
        F("f2", "medium", "a.py", 41, 45),
        F("f3", "medium", "c.py", 1, 1, "other"),
    )
    s = score(review, labels)
    assert (s["true_positives"], s["false_positives"], s["false_negatives"]) == (2, 1, 1)
    assert s["precision"] == 0.666667 and s["recall"] == 0.666667 and s["f1"] == 0.666667
    assert s["weighted_precision"] == 0.777778
    assert s["weighted_recall"] == 0.636364
    assert s["weighted_f1"] == 0.7
    assert s["blocker_recall"] == 1.0
    assert s["severity_accuracy"] == 0.5 and s["category_accuracy"] == 1.0
    assert s["verdict_correct"] is True


def test_case11_two_findings_on_one_label_the_second_is_a_false_positive():
    # Label high a.py 10-12. f1 low line 10 (sorted first) takes it; f2 high line 11 finds no
    # augmenting path. Matched min(1,5) = 1, FP weight 5: wP = 1/6, wR = 1/5, wF1 = 2/11.
    s = score(
        R(
            "request_changes",
            F("f1", "low", "a.py", 10, 10),
            F("f2", "high", "a.py", 11, 11, blocking=True),
        ),
        [L("l1", "high", "a.py", 10, 12)],
    )
    assert (s["true_positives"], s["false_positives"], s["false_negatives"]) == (1, 1, 0)
    assert s["weighted_precision"] == 0.166667
    assert s["weighted_recall"] == 0.2
    assert s["weighted_f1"] == 0.181818
    assert s["blocker_recall"] == 0.0


def test_case12_unparsable_artifacts_each_name_their_rule(tmp_path):
    ok = {
        "schema_version": 1,
        "verdict": "comment",
        "findings": [
            {
                "id": "f1",
                "severity": "low",
                "path": "a.py",
                "line": 1,
                "end_line": 1,
                "category": "other",
                "scenario": "s",
                "evidence": "e",
                "recommendation": "r",
                "blocking": False,
            }
        ],
    }

    def variant(**changes):
        d = json.loads(json.dumps(ok))
        for k, v in changes.items():
            if k.startswith("f_"):
                d["findings"][0][k[2:]] = v
            else:
                d[k] = v
        return json.dumps(d).encode()

    parse_review_bytes(variant())  # the base document is valid
    cases = [
        (b"", "is empty"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{\n "schema_version": 1,\n oops}', "not valid JSON (line 3"),
        (variant(extra=1), "exactly the keys"),
        (variant(schema_version=2), "schema_version must be 1"),
        (variant(schema_version=True), "schema_version must be 1"),
        (variant(verdict="lgtm"), "verdict must be"),
        (variant(verdict="approve"), "approve must have no findings"),
        (variant(verdict="request_changes"), "at least one blocking finding"),
        (variant(f_path="/etc/passwd"), "not absolute"),
        (variant(f_path="src/../../x.py"), "escapes the repository"),
        (variant(f_line=0), "line must be an integer >= 1"),
        (variant(f_line=True), "line must be an integer >= 1"),
        (variant(f_end_line=0), "end_line must be an integer >= 1"),
        (variant(f_line=5, f_end_line=4), "is before line"),
        (variant(f_severity="blocker"), "severity must be one of"),
        (variant(f_evidence="  "), "evidence must be a nonblank string"),
        (variant(f_recommendation="x" * 4097), "longer than 4096 bytes"),
        (variant(f_blocking="yes"), "blocking must be true or false"),
        (variant(f_id="x" * 129), "longer than 128 bytes"),
        (variant(findings=[ok["findings"][0]] * 2), "repeats finding ids"),
        (variant(findings=[{"id": "x"}]), "exactly the keys"),
        (b"[]", "must be a JSON object"),
        (b" " * (256 * 1024 + 1), "larger than"),
        (b"[" * 100_000, "nested too deeply|not valid JSON"),
    ]
    for data, msg in cases:
        with pytest.raises(ReviewArtifactInvalid, match=msg.replace("(", r"\(")):
            parse_review_bytes(data)
    # file-level rules
    with pytest.raises(ReviewArtifactInvalid, match="never written"):
        parse_review_output(tmp_path / "missing.json")
    target = tmp_path / "real.json"
    target.write_bytes(variant())
    link = tmp_path / "link.json"
    os.symlink(target, link)
    with pytest.raises(ReviewArtifactInvalid, match="symlink"):
        parse_review_output(link)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ReviewArtifactInvalid, match="not a regular file"):
        parse_review_output(tmp_path / "dir.json")


def test_case13_normalization_case_folds_and_cleans_paths():
    doc = {
        "schema_version": 1,
        "verdict": "REQUEST_CHANGES",
        "findings": [
            {
                "id": "f1",
                "severity": "HIGH",
                "path": ".\\src\\a.py",
                "line": 2,
                "end_line": 3,
                "category": "Security",
                "scenario": "s",
                "evidence": "e",
                "recommendation": "r",
                "blocking": True,
            }
        ],
    }
    out = parse_review_bytes(json.dumps(doc).encode())
    f = out.findings[0]
    assert (out.verdict, f.severity, f.path, f.category) == (
        "request_changes",
        "high",
        "src/a.py",
        "security",
    )
    s = score_review(out, [L("l", "high", "src/a.py", 1, 2, "security")])
    assert s.oracle_passed


def test_labels_parse_rules():
    good = {
        "schema_version": 1,
        "findings": [
            {
                "id": "l1",
                "severity": "high",
                "path": "a.py",
                "line_start": 1,
                "line_end": 2,
                "category": "correctness",
            }
        ],
    }
    assert parse_labels(json.dumps(good).encode())[0].line_end == 2
    assert parse_labels(b'{"schema_version": 1, "findings": []}') == ()
    bad = json.loads(json.dumps(good))
    bad["findings"][0]["line_end"] = 0
    with pytest.raises(ReviewArtifactInvalid, match="line_end"):
        parse_labels(json.dumps(bad).encode())
    bad = json.loads(json.dumps(good))
    bad["findings"].append(dict(bad["findings"][0]))
    with pytest.raises(ReviewArtifactInvalid, match="repeat ids"):
        parse_labels(json.dumps(bad).encode())
    bad = json.loads(json.dumps(good))
    bad["findings"][0]["note"] = "x"
    with pytest.raises(ReviewArtifactInvalid, match="exactly the keys"):
        parse_labels(json.dumps(bad).encode())


# ---------------------------------------------------------------------------------------------
# properties (seeded random instances: reproducible, many shapes)

SEVS = ["critical", "high", "medium", "low"]
CATS = ["correctness", "security", "tests"]


def _random_instance(rng: random.Random, n_f: int, n_l: int):
    paths = ["a.py", "b.py"]
    labels = []
    for i in range(n_l):
        s = rng.randint(1, 30)
        labels.append(
            L(
                f"l{i}",
                rng.choice(SEVS),
                rng.choice(paths),
                s,
                s + rng.randint(0, 8),
                rng.choice(CATS),
            )
        )
    findings = []
    for i in range(n_f):
        s = rng.randint(1, 30)
        findings.append(
            F(
                f"f{i}",
                rng.choice(SEVS),
                rng.choice(paths),
                s,
                s + rng.randint(0, 5),
                rng.choice(CATS),
                blocking=True,
            )
        )
    return findings, labels


def _brute_force_max_matching(findings, labels) -> int:
    best = 0
    for k in range(min(len(findings), len(labels)), 0, -1):
        for fs in itertools.combinations(range(len(findings)), k):
            for ls in itertools.permutations(range(len(labels)), k):
                f_objs = [findings[i] for i in fs]
                l_objs = [labels[j] for j in ls]
                if all(
                    f.path == lb.path and f.line <= lb.line_end and f.end_line >= lb.line_start
                    for f, lb in zip(f_objs, l_objs, strict=True)
                ):
                    return k
    return best


def test_property_finding_and_label_order_never_change_the_score():
    rng = random.Random(1613)
    for _ in range(300):
        findings, labels = _random_instance(rng, rng.randint(0, 7), rng.randint(0, 7))
        verdict = "request_changes" if findings else "approve"
        base = score_review(R(verdict, *findings), labels)
        for _ in range(4):
            fs, ls = findings[:], labels[:]
            rng.shuffle(fs)
            rng.shuffle(ls)
            assert score_review(R(verdict, *fs), ls) == base


def test_property_matching_is_maximum_cardinality():
    rng = random.Random(16)
    for _ in range(200):
        findings, labels = _random_instance(rng, rng.randint(0, 5), rng.randint(0, 5))
        pairs = match_findings(findings, labels)
        assert len(pairs) == _brute_force_max_matching(findings, labels)
        assert len({f.id for f, _ in pairs}) == len(pairs) == len({lb.id for _, lb in pairs})
        for f, lb in pairs:
            assert f.path == lb.path and f.line <= lb.line_end and f.end_line >= lb.line_start


def test_property_metrics_are_bounded_and_consistent():
    rng = random.Random(7)
    for _ in range(300):
        findings, labels = _random_instance(rng, rng.randint(0, 6), rng.randint(0, 6))
        s = score_review(R("request_changes" if findings else "approve", *findings), labels)
        assert s.true_positives + s.false_positives == len(findings)
        assert s.true_positives + s.false_negatives == len(labels)
        for name in (
            "precision",
            "recall",
            "f1",
            "weighted_precision",
            "weighted_recall",
            "weighted_f1",
            "blocker_recall",
        ):
            v = getattr(s, name)
            assert v is None or 0.0 <= v <= 1.0, (name, v)
        assert s.score_finite
        if labels:
            assert s.f1 is not None and s.weighted_f1 is not None and s.recall is not None


def test_property_clean_controls():
    rng = random.Random(99)
    for _ in range(200):
        findings, _ = _random_instance(rng, rng.randint(0, 4), 0)
        verdict = rng.choice(["approve", "comment", "request_changes"]) if findings else "approve"
        s = score_review(R(verdict, *findings), [])
        assert s.clean_control is True
        assert s.recall is None and s.f1 is None and s.weighted_recall is None
        assert s.weighted_f1 is None and s.blocker_recall is None
        assert s.clean_pass is (not findings and verdict == "approve")
        assert s.verdict_correct is (verdict == "approve")
        if findings:
            assert s.precision == 0.0 and s.weighted_precision == 0.0
            assert not s.oracle_passed


def test_reduce_scores_uses_min_for_blocker_recall_and_all_for_flags():
    labels = [L("l1", "high", "a.py", 1, 1), L("l2", "medium", "a.py", 9, 9)]
    hit_both = R(
        "request_changes",
        F("f1", "high", "a.py", 1, 1, blocking=True),
        F("f2", "medium", "a.py", 9, 9),
    )
    miss_blocker = R("comment", F("f2", "medium", "a.py", 9, 9))
    scores = [
        score_review(hit_both, labels),
        score_review(miss_blocker, labels),
        score_review(hit_both, labels),
    ]
    red = reduce_scores(scores)
    assert red is not None
    assert red.blocker_recall == 0.0  # min, not median
    assert red.true_positives == 2.0  # median of 2, 1, 2
    assert red.verdict_correct is False  # one wrong verdict poisons the arm
    assert red.runs == 3
    # a repeat that could not be scored makes every metric unknown, never 0
    red2 = reduce_scores([scores[0], None])
    assert red2 is not None and red2.weighted_f1 is None and red2.verdict_correct is None
    assert reduce_scores([]) is None
