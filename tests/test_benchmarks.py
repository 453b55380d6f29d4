"""The benchmark scripts' own logic, without running them: the specs they write load, the scripts
they start are Python, and their verdicts follow from the figures they are given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import contamination, fidelity, overhead
from orchestrator.spec import load_spec


def _load(tmp_path: Path, spec: dict[str, Any]):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return load_spec(path)


def test_contamination_round_is_probes_others_then_the_same_probes_under_other_ids(tmp_path: Path) -> None:
    probes, others = contamination.PROBES, contamination.OTHER_EXPERIMENTS
    loaded = _load(tmp_path, contamination.round_spec(probes, others, 0))
    n = len(probes)
    assert len(loaded.experiments) == 2 * n + len(others) == 2 * 8 + 20
    fresh, late = loaded.experiments[:n], loaded.experiments[-n:]
    for early, again in zip(fresh, late, strict=True):
        assert early.id != again.id  # both kept: the spec refuses the same experiment twice
        assert early.model_dump(exclude={"timeout_s"}) == again.model_dump(exclude={"timeout_s"})
        assert early.timing.repeats_ms == contamination.PROBE_TIMING["repeats_ms"]
    assert {(e.target, e.phase) for e in fresh} == {
        (t, p) for _, t, _ in contamination.PROBE_TARGETS for p in ("inference", "training")
    }
    assert all(e.device == "cpu" for e in loaded.experiments)
    after = _load(tmp_path, contamination.after_spec(probes, 0))  # the new worker's: the probes once each
    assert [e.model_dump(exclude={"id"}) for e in after.experiments] == [e.model_dump(exclude={"id"}) for e in fresh]


def _result(eager: float, compiled: float, graphs: int = 1, status: str = "ok", at: float = 0.0) -> dict[str, Any]:
    return {
        "started_at": at,
        "finished_at": at + 1.0,
        "status": status,
        "eager": {"median_ms": eager},
        "compiled": {"median_ms": compiled},
        "speedup": eager / compiled,
        "graph_count": graphs,
        "graph_breaks": 0,
        "graphs_compiled": graphs,
        "recompiled": False,
        "correct": True,
    }


@pytest.mark.parametrize(
    ("late", "verdict"),
    [
        (_result(1.02, 0.49), "| ok |"),
        (_result(1.0, 0.54), "OUT"),  # compiled 8% slower late
        (_result(1.0, 0.5, graphs=2), "OUT"),  # counts differ
        (_result(1.0, 0.5, status="incorrect"), "status incorrect"),
    ],
)
def test_contamination_verdict_needs_every_ratio_within_3_percent_and_the_same_counts(
    late: dict[str, Any], verdict: str
) -> None:
    probe = contamination.PROBES[0]
    rounds = [
        contamination.Round(
            fresh=[_result(1.0, 0.5)], late=[late], after=[_result(1.0, 0.5)], pids={1}, before=[0, 1], after_pids={2}
        )
    ]
    row = contamination.table([probe], rounds)[2]
    assert verdict in row
    assert ("| NO |" in row) == (late["graph_count"] != 1)


def test_contamination_compares_a_late_median_with_the_fresh_ones_around_it_at_its_time() -> None:
    """The machine slows by 20% over the round, fresh workers and late alike: a late median halfway
    through reads 10% slow against the fresh one before it, and exactly fresh at its own time."""
    probe = contamination.PROBES[0]
    before, late, after = _result(1.0, 0.5, at=0.0), _result(1.1, 0.55, at=50.0), _result(1.2, 0.6, at=100.0)
    rounds = [contamination.Round(fresh=[before], late=[late], after=[after], pids={1}, before=[0, 1], after_pids={2})]
    assert contamination.ratio_cell(rounds, 0, "eager")[1] == pytest.approx(1.0)
    assert contamination.ratio_cell(rounds, 0, "eager", interpolated=False)[1] == pytest.approx(1.1)
    row = contamination.table([probe], rounds)[2]
    assert row.endswith("| ok |") and "| 1.100 |" in row  # the before-only ratio, shown beside
    assert "| 2.00x | 1.000 (1.000) |" in row  # the speedup, fresh and late/fresh: drift moves both sides
    moved = _result(1.3, 0.5, at=50.0)  # history slowed the eager side by 18% beyond the drift
    rounds[0].late = [moved]
    assert "OUT" in contamination.table([probe], rounds)[2]


def test_overhead_workloads_are_valid_specs_and_the_peer_scripts_are_python(tmp_path: Path) -> None:
    for workload in overhead.WORKLOADS:
        loaded = _load(tmp_path, {"name": workload, "experiments": overhead.spec_entries(workload, 3)})
        assert [e.seed for e in loaded.experiments] == [0, 1, 2]
        assert {e.compile.cache for e in loaded.experiments} == {"cold" if workload == "cold" else "warm"}
        assert {e.compile.backend for e in loaded.experiments} == {"eager" if workload == "trivial" else "inductor"}
    for name, source in overhead.PEER_SCRIPTS.items():
        compile(source, f"{name}.py", "exec")  # a SyntaxError fails the test


def test_overhead_per_experiment_is_wall_less_in_task_time_spread_over_the_slots() -> None:
    run = overhead.Run(wall_s=10.0, in_task_s=[4.0, 4.0, 4.0, 4.0], not_ok=0)
    assert run.overhead_ms(4) == pytest.approx((10.0 - 16.0 / 4) / 4 * 1e3)
    text = overhead.table({"compilebench": run, "floor": overhead.Run(6.0, [4.0] * 4, 0)}, 4, "trivial")
    assert "| trivial | compilebench | 4 | 10.0 | 16.0 | 1500 | 3.00 | 1.67 |" in text


def test_fidelity_end_to_end_spec_loads_and_its_own_target_builds(tmp_path: Path) -> None:
    import torch

    from tasks.targets import build

    loaded = _load(tmp_path, json.loads(fidelity.e2e_spec(fidelity.E2E_WORKLOADS, seed=0)))
    assert [e.target for e in loaded.experiments] == [t for _, t, _ in fidelity.E2E_WORKLOADS]
    work = build("benchmarks.fidelity:gelu_mlp", torch.device("cpu"), {"rows": 8, "dim": 4})
    assert work.fn(*work.inputs).shape == (8, 4)


def test_contamination_tells_a_late_median_inside_the_fresh_processes_range_apart() -> None:
    probe = contamination.PROBES[0]
    fresh = [_result(1.0, 0.5), _result(1.4, 0.7), _result(0.8, 0.4)]  # three new processes: 1.75x apart

    def rounds(late: dict[str, Any]) -> list[contamination.Round]:
        return [
            contamination.Round(fresh=[f], late=[late], after=[f], pids={1}, before=[0, 1], after_pids={2})
            for f in fresh
        ]

    row = contamination.table([probe], rounds(_result(1.2, 0.6)))[2]
    assert "| 1.75x |" in row and "late within the fresh processes' range" in row
    outside = rounds(_result(2.0, 1.0))
    assert "OUT (±3%, same counts)" in contamination.table([probe], outside)[2]


def test_fidelity_e2e_judges_the_median_of_each_runs_own_ratio() -> None:
    """Each run's median is paired with the reference taken right after it: the machine drifts
    between runs, so the median of compilebench's runs over the median of the reference's runs
    (1.00 here) can hide a side that read 5.3% slow against its own reference in most runs."""
    ours = {(0, "eager"): [0.9, 1.2, 1.0], (0, "compiled"): [0.5, 0.5, 0.5]}
    refs = {(0, "eager"): [1.0, 1.1, 0.95], (0, "compiled"): [0.5, 0.51, 0.49]}
    eager, compiled = fidelity.e2e_table(["w"], ours, refs)[2:]
    assert "| 1.053 | 0.900, 1.091, 1.053 | OUT (±5%) |" in eager
    assert compiled.endswith("| 1.000 | 1.000, 0.980, 1.020 | ok |")
    assert fidelity.e2e_table(["w"], {}, {})[2] == "| w | eager | - | - | - | - | - | - | no result |"


def test_contamination_positions_put_the_same_probes_at_experiments_0_12_24_and_36(tmp_path: Path) -> None:
    loaded = _load(tmp_path, contamination.positions_spec(0))
    at = [i for i, e in enumerate(loaded.experiments) if e.target != "seed.foo"]
    assert at == [0, 1, 12, 13, 24, 25, 36, 37]
    gpt = [loaded.experiments[i] for i in at[::2]]
    assert len({e.id for e in gpt}) == 4  # kept apart
    assert all(e.model_dump(exclude={"timeout_s"}) == gpt[0].model_dump(exclude={"timeout_s"}) for e in gpt)
    fillers = [e for e in loaded.experiments if e.target == "seed.foo"]
    assert len(fillers) == 30 and {e.compile.backend for e in fillers} == {"eager"}
    results = [
        {**_result(20.0 + k, 19.0), "target": e.target, "phase": e.phase, "worker": {"experiments_before": i}}
        for k, (i, e) in enumerate((i, loaded.experiments[i]) for i in at)
    ]
    rows = contamination.positions_rows([results])
    assert rows[2] == "| models.gpt, training | 1 | eager | [0, 12, 24, 36] | 20.000, 22.000, 24.000, 26.000 | 1.30x |"
    assert rows[4].startswith("| models.gpt, training | 1 | speedup | [0, 12, 24, 36] | 1.053, 1.158, 1.263, 1.368 |")
