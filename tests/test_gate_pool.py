"""Pooled comparator history through Dagster (issue 13): earlier records of a comparator cell with
the same identity become extra, drift-checked comparator runs of the decision."""

from pathlib import Path

import dagster as dg
import pytest

from bench_assets.cells.cellkeys import cell_key
from bench_assets.decision.documents import load_decision
from bench_assets.decision.explain import v2_lines
from bench_assets.defs import decision as decision_defs
from bench_assets.driver.instance import decision_records
from tests.test_dagster_cells import cells, replay_bench, run_all
from tests.test_dagster_decision import decide


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.mark.slow
def test_earlier_records_of_the_same_identity_are_pooled(
    tmp_path: Path, instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, art = replay_bench(tmp_path), tmp_path / "art"
    run_all(instance, root, art)  # g0001 pays every cell
    cells(instance, root, art, force=True, generation="g0002")  # paid again: same identity
    lookups: list[tuple[str, list[str]]] = []
    bulk = decision_defs.partition_materializations_by_partition

    def recording(inst, asset, keys, **kw):
        lookups.append((asset, list(keys)))
        return bulk(inst, asset, keys, **kw)

    monkeypatch.setattr(decision_defs, "partition_materializations_by_partition", recording)
    decide(instance, root, art, "g0002")
    doc = load_decision(Path(str(decision_records(instance)[0]["decision_path"])))
    d = doc.decision
    # every comparator cell's history in one bulk lookup, not one query per cell
    inc_cells = sorted(
        str(dg.MultiPartitionKey({"task": e.task, "cell": cell_key(e.arm, e.run)}))
        for e in d.evidence
        if e.arm == d.incumbent_arm and not e.pooled
    )
    assert [(a, sorted(k)) for a, k in lookups] == [("comparator_cells", inc_cells)]
    assert d.policy_name == "paired" and d.paired_v2 is not None
    pool = d.paired_v2.pooled
    assert (pool.fresh_runs, pool.pooled_runs, pool.tasks_with_pool) == (1, 1, 1)
    pooled = [e for e in d.evidence if e.pooled]
    assert [(e.arm, e.generation) for e in pooled] == [(d.incumbent_arm, "g0001")]
    # it names the partition and the run it came from, never "fresh"
    (p,) = pooled
    g1_runs = {r.run_id for r in instance.get_runs() if r.tags.get("wfbench/generation") != "g0002"}
    assert p.pooled_from == "workflow.r0" and p.pooled_run_id in g1_runs
    assert p.origin().startswith("pooled from workflow.r0 (run ")
    # the g0002 record in use is never pooled with itself
    used = {e.record_id for e in d.evidence if not e.pooled}
    assert not used & {e.record_id for e in pooled}
    assert d.paired_v2.drift.verdict == "within"  # replayed costs: no drift
    text = "\n".join(v2_lines(d))
    assert "1 pooled earlier-generation runs" in text and "drift:" in text and "look 1/" in text


@pytest.mark.slow
def test_no_pool_when_disabled(tmp_path: Path, instance) -> None:
    import yaml

    from tests.conftest import write_yaml

    root, art = replay_bench(tmp_path), tmp_path / "art"
    run_all(instance, root, art)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["policy"] = {**(data.get("policy") or {}), "pooled_history": False}
    write_yaml(root / "bench.yaml", data)
    cells(instance, root, art, force=True, generation="g0002")
    decide(instance, root, art, "g0002")
    doc = load_decision(Path(str(decision_records(instance)[0]["decision_path"])))
    assert doc.decision.paired_v2 is not None
    assert doc.decision.paired_v2.pooled.pooled_runs == 0
