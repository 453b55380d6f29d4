"""The benchmark scripts' own logic, without running them: the specs they write load, the scripts
they start are Python, and their verdicts follow from the figures they are given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import contamination, overhead
from benchmarks.fidelity_sections import reference, tables, workloads
from orchestrator.plan.spec import load_spec


def _load(tmp_path: Path, spec: dict[str, Any]):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return load_spec(path)


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


def test_contamination_round_is_probes_fresh_others_then_triples_with_the_twin_between_aged_and_control(
    tmp_path: Path,
) -> None:
    n, k = len(contamination.PROBES), len(contamination.OTHER_EXPERIMENTS)
    assert (n, k) == (8, 20)
    steps = contamination.schedule(n, k, 3)
    aged, twin, control = contamination.AGED, contamination.TWIN, contamination.CONTROL
    assert steps[:n] == [(aged, "probe", i) for i in range(n)]
    assert steps[n : n + k] == [(aged, "other", j) for j in range(k)]
    triples = [steps[j : j + 3] for j in range(n + k, len(steps), 3)]
    assert len(triples) == 3 * n and len(steps) == n + k + 9 * n
    for index, triple in enumerate(triples):
        assert {s[1:] for s in triple} == {("probe", index % n)}  # the same probe, one right after the other
        assert triple[1][0] == twin and {triple[0][0], triple[2][0]} == {aged, control}
    assert [t[0][0] for t in triples[:3]] == [aged, control, aged]  # which side the aged worker takes alternates
    assert [t[0][0] for t in triples[n : n + 2]] == [control, aged]  # and from one copy to the next
    experiments = contamination.payloads(contamination.PROBES, contamination.OTHER_EXPERIMENTS, tmp_path)
    assert len(experiments) == n + k and all(e["device"] == "cpu" for e in experiments)
    assert all(e["timing"]["repeats_ms"] == contamination.PROBE_TIMING["repeats_ms"] for e in experiments[:n])
    assert {(e["target"], e["phase"]) for e in experiments[:n]} == {
        (t, p) for _, t, _ in contamination.PROBE_TARGETS for p in ("inference", "training")
    }


def _round(
    fresh: dict[str, Any],
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    control: list[dict[str, Any]] | None = None,
) -> contamination.Round:
    """A round of one probe; the control reads as the twin unless given."""
    return contamination.Round(
        fresh=[fresh],
        late=[[late for late, _ in pairs]],
        twin=[[twin for _, twin in pairs]],
        pids={1},
        twin_pids={2},
        before=[0, 1, 2],
        cores={(0,)},
        control=[control if control is not None else [twin for _, twin in pairs]],
        control_pids={3},
    )


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
    row = contamination.table([probe], [_round(_result(1.0, 0.5), [(late, _result(1.0, 0.5))])])[2]
    assert verdict in row
    assert ("| NO |" in row) == (late["graph_count"] != 1)


def test_contamination_judges_late_against_its_twin_seconds_apart_not_against_fresh_minutes_before() -> None:
    """The machine slowed by 20% between the fresh probe and the late ones, twin and aged worker alike:
    late/twin reads 1.0, late/fresh 1.2 beside it. History that slows the eager side by 8% more
    than the twin is OUT whatever the drift."""
    probe = contamination.PROBES[0]
    drifted = [(_result(1.2, 0.6), _result(1.2, 0.6)), (_result(1.21, 0.6), _result(1.2, 0.6))]
    row = contamination.table([probe], [_round(_result(1.0, 0.5), drifted), _round(_result(1.0, 0.5), drifted)])[2]
    assert row.endswith("| ok |")
    rounds = [_round(_result(1.0, 0.5), drifted)] * 2
    apart = contamination.apart_table([probe], rounds)[2]
    assert apart.endswith("| 1.200, 1.200 | 1.200, 1.200 |")  # the first late copy / the fresh one, per round
    assert "| 2.00x | 1.004 [" in row  # the speedup fresh, and late/twin with its interval
    slowed = [(_result(1.3, 0.6), _result(1.2, 0.6))] * 4
    assert "OUT (±3%, same counts)" in contamination.table([probe], [_round(_result(1.0, 0.5), slowed)])[2]


def test_contamination_tells_pairs_whose_interval_holds_no_difference_apart() -> None:
    """Pairs scattered around 1.0 with a median 4% off: OUT of the 3% target, but the interval of the
    median holds 1.0, so the pairs show no difference either way."""
    probe = contamination.PROBES[0]
    twin = _result(1.0, 0.5)
    scattered = [(_result(e, 0.5 * e), twin) for e in (0.85, 1.04, 1.2, 0.95, 1.1, 1.04, 0.9)]
    row = contamination.table([probe], [_round(twin, scattered)])[2]
    assert "| 1.040 [" in row and row.endswith("| OUT of ±3%; 1.0 inside both intervals |")
    steady = [(_result(1.04, 0.52), twin)] * 7
    assert contamination.table([probe], [_round(twin, steady)])[2].endswith("| OUT (±3%, same counts) |")


def test_contamination_tells_a_late_difference_no_larger_than_the_controls_apart() -> None:
    """The control differs from the twin in nothing: where it is out as far as the aged worker on
    every side out of 3%, the history moved the numbers no more than a second new process does; where
    the control holds within 3%, the same late difference is OUT."""
    probe = contamination.PROBES[0]
    twin = _result(1.0, 0.5)
    late = [(_result(1.08, 0.5), twin)] * 4
    as_far = contamination.table([probe], [_round(twin, late, [_result(0.9, 0.5)] * 4)])[2]
    assert "| 1.080 [" in as_far and "| 0.900 [" in as_far
    assert as_far.endswith("| OUT of ±3%, as the control |")
    steady = contamination.table([probe], [_round(twin, late, [_result(1.01, 0.5)] * 4)])[2]
    assert steady.endswith("| OUT (±3%, same counts) |")
    both = contamination.table([probe], [_round(twin, [(_result(1.08, 0.56), twin)] * 4, [_result(1.1, 0.5)] * 4)])
    assert both[2].endswith("| OUT (±3%, same counts) |")  # compiled 12% off, the control's compiled within 3%
    rounds = [_round(twin, late, [_result(0.9, 0.5)] * 4), _round(twin, late, [_result(1.0, 0.5)] * 4)]
    assert contamination.control_within([probe], rounds) == (1, 2)  # compiled in; eager 0.95 (median of 0.9, 1.0) out


def test_contamination_resamples_rounds_not_only_pairs_and_shows_each_rounds_median() -> None:
    """Each round's pairs agree among themselves but the rounds do not (two processes each, whose
    placement in memory can set a probe's speed): the interval spans the rounds, not the pairs."""
    probe = contamination.PROBES[0]
    twin = _result(1.0, 0.5)
    rounds = [_round(twin, [(_result(e, 0.5), twin)] * 3) for e in (1.3, 0.9, 1.0)]
    row = contamination.table([probe], rounds)[2]
    assert "| 1.000 [0.900, 1.300] (9; rounds 1.30, 0.90, 1.00) |" in row
    low, high = contamination.round_interval([[1.3] * 3, [0.9] * 3, [1.0] * 3])
    assert (low, high) == (0.9, 1.3)
    data = {"rounds": [contamination.round_data(r) for r in rounds]}
    assert contamination.rounds_of(json.loads(json.dumps(data))) == rounds  # --out, then --from


def test_contamination_pools_the_rounds_of_runs_of_the_same_design() -> None:
    probe = contamination.PROBES[0]
    twin = _result(1.0, 0.5)
    runs = [
        {
            "command": f"run {k}",
            "probes": [probe],
            "others": 20,
            "pairs": 3,
            "machine": "m",
            "rounds": [contamination.round_data(_round(twin, [(_result(e, 0.5), twin)] * 3))],
        }
        for k, e in enumerate((1.3, 0.9))
    ]
    data = contamination.pooled(json.loads(json.dumps(runs)))
    assert data["command"] == "run 0 + run 1" and data["machine"] == "m"
    rows = contamination.table(data["probes"], contamination.rounds_of(data))
    assert "(6; rounds 1.30, 0.90)" in rows[2]
    with pytest.raises(ValueError, match="cannot be pooled"):
        contamination.pooled([runs[0], {**runs[1], "pairs": 2}])


def test_contamination_round_runs_on_three_real_workers_taking_turns_on_one_core(ray_cluster, tmp_path: Path) -> None:
    probe = {"target": "seed.foo", "compile": {"backend": "eager"}, "timing": {"warmup_ms": 5, "repeats_ms": 20}}
    other = {"target": "seed.outer", "compile": {"backend": "eager"}}
    experiments = contamination.payloads([], [probe, other], tmp_path)
    r = contamination.run_round(experiments, 1, 1, 0, tmp_path)
    assert len(r.pids) == 1 and r.apart  # one aged process, the twin another, the control a third
    assert len(r.control_pids) == 1 and not r.control_pids & (r.pids | r.twin_pids)
    assert r.before == [0, 1, 2]  # fresh probe, the other, the late copy
    assert len(r.cores) == 1 and len(next(iter(r.cores))) == 1  # one core, all three workers
    late, twin = r.pairs(0)[0]
    control, also_twin = r.pairs(0, contamination.CONTROL)[0]
    assert also_twin is twin
    assert late["status"] == twin["status"] == control["status"] == r.fresh[0]["status"] == "ok"
    assert twin["worker"]["experiments_before"] == control["worker"]["experiments_before"] == 0


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

    loaded = _load(tmp_path, json.loads(workloads.e2e_spec(workloads.E2E_WORKLOADS, seed=0)))
    assert [e.target for e in loaded.experiments] == [t for _, t, _ in workloads.E2E_WORKLOADS]
    work = build("benchmarks.fidelity_sections.workloads:gelu_mlp", torch.device("cpu"), {"rows": 8, "dim": 4})
    assert work.fn(*work.inputs).shape == (8, 4)


def test_fidelity_e2e_judges_the_median_of_each_runs_own_ratio() -> None:
    """Each run's median is paired with the reference taken right after it: the machine drifts
    between runs, so the median of compilebench's runs over the median of the reference's runs
    (1.00 here) can hide a side that read 5.3% slow against its own reference in most runs."""
    ours = {(0, "eager"): [0.9, 1.2, 1.0], (0, "compiled"): [0.5, 0.5, 0.5]}
    refs = {(0, "eager"): [1.0, 1.1, 0.95], (0, "compiled"): [0.5, 0.51, 0.49]}
    eager, compiled = tables.e2e_table(["w"], ours, refs)[2:]
    assert "| 1.053 | 0.900, 1.091, 1.053 | OUT (±5%) |" in eager
    assert compiled.endswith("| 1.000 | 1.000, 0.980, 1.020 | ok |")
    assert tables.e2e_table(["w"], {}, {})[2] == "| w | eager | - | - | - | - | - | - | no result |"


def test_fidelity_inprocess_runs_the_whole_procedure_in_the_reference_process_and_times_both_after_it(
    tmp_path: Path,
) -> None:
    """The reference process answers an experiment through compilebench's procedure (both sides timed),
    then times its own callables again and runs the experiment once more, in the same process."""
    workload = ("seed.foo 16x16", "seed.foo", {"shape": [16, 16]})
    payload = workloads.e2e_payload(workload, tmp_path, seed=0)
    assert payload["target"] == "seed.foo" and payload["timing"]["repeats_ms"] == workloads.E2E_TIMING["repeats_ms"]
    payload["timing"] = {"warmup_ms": 5, "repeats_ms": 20}
    with reference.Reference("seed.foo", {"shape": [16, 16]}, 1, 0, None) as ref:
        ours = ref.ask({"experiment": payload})
        theirs = ref.time(1, 0.02)
        again = ref.ask({"experiment": payload})
    for medians in (ours, theirs, again):
        assert set(medians) == {"eager", "compiled"}
        assert all(0 < ms < 10 for ms in medians.values())  # finite and positive: both sides were timed


def test_fidelity_drift_pairs_neighbouring_windows_of_two_identical_processes() -> None:
    """A's windows are 10% slower than B's in every other pair and equal in the rest: the single pairs
    range 1.0-1.1, half within 3%, and each process's own movement is shown apart."""
    a = [{"eager": 1.1 if k % 2 else 1.0, "compiled": 0.5} for k in range(6)]
    b = [{"eager": 1.0, "compiled": 0.5 * (1 + k / 10)} for k in range(6)]
    eager, compiled = tables.drift_rows("w", {"a": a, "b": b})
    assert eager.startswith("| w | eager | 1.050 [") and eager.endswith("| 1.000-1.100 | 3/6 | 3/6 | 1.10x | 1.00x |")
    assert compiled.endswith("| 0.667-1.000 | 1/6 | 1/6 | 1.00x | 1.50x |")
    assert len(tables.drift_header()[0].split("|")) == len(eager.split("|"))


def test_fidelity_fragment_heap_keeps_every_other_tensor_of_its_mixed_sizes_alive() -> None:
    kept = reference.fragment_heap(count=20, passing=3)
    assert len(kept) == 10
    assert {t.numel() * 4 for t in kept} <= set(reference.HEAP_SIZES)
    assert all(bool((t == 1).all()) for t in kept)  # written, so that their pages were touched


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
