"""Shape-traffic replay (tasks.replay), in-process: compiles and recompiles counted against what a
backend saw, the recompile limit, seeded draws, the derived figures, failures, spec errors; and one
replay end to end on Ray workers."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from orchestrator.plan.spec import SpecError, load_spec
from tasks.dynamo_watch import Snapshot
from tasks.models import CompileConfig, Experiment, ReplayConfig, ShapeTiming
from tasks.procedure import run_experiment
from tasks.replay import (
    CUMULATIVE_POINTS,
    FIRST_PASS_BLOCK,
    break_even_calls,
    cumulative,
    draw,
    sample_points,
    serve,
    weighted_speedup,
    weighted_speedup_ci,
)
from tasks.timers import CpuTimer
from tests import user_targets

SIZED = "tests.user_targets:make_sized"
COUNTING = "replay_counting_TESTING_ONLY"  # records each graph it compiles (tests/user_targets.py)


def replay(compile: dict | None = None, values: list | None = None, calls: int = 30, **kw):
    """A replay over ``values`` of make_sized's ``rows`` on the CPU, in this process. The cold cache skips
    the priming compile, so that the counting backend sees the measured compiles alone."""
    user_targets.REPLAY_GRAPHS.clear()
    exp = Experiment(
        target=SIZED,
        device="cpu",
        compile={"backend": COUNTING, "cache": "cold", **(compile or {})},
        timing={"warmup": 1, "repeats": 3},
        replay={"param": "rows", "values": values or [8, 16, 32], "calls": calls, **kw.pop("replay", {})},
        **kw,
    )
    return run_experiment(exp)


def test_a_static_policy_compiles_once_per_size_and_names_each_guard_failure():
    r = replay({"dynamic": False})
    assert r.status == "ok", r.error
    rp = r.replay
    assert sorted(user_targets.REPLAY_GRAPHS) == ["(16, 4)", "(32, 4)", "(8, 4)"]  # what the backend compiled
    assert (rp.compiles, rp.recompiles, r.graphs_compiled) == (3, 2, 3)
    assert len(rp.recompile_reasons) == 2
    for reason in rp.recompile_reasons:  # "0/0: tensor 'x' size mismatch at index 0. expected 32, actual 16"
        assert "size mismatch at index 0" in reason
        assert any(f"actual {v}" in reason for v in (8, 16, 32)), reason
    assert not rp.recompile_limit_hit
    assert r.recompiled is False and r.recompile_reasons == []  # recompiles are what a replay measures
    assert r.correct is True


def test_the_result_holds_both_passes_and_the_steady_state_per_value():
    r = replay({"dynamic": False}, replay={"weights": [3, 2, 1]})
    rp = r.replay
    assert [s.value for s in rp.per_shape] == [8, 16, 32]
    assert [s.weight for s in rp.per_shape] == pytest.approx([0.5, 1 / 3, 1 / 6])
    assert sum(s.drawn for s in rp.per_shape) == rp.calls == 30
    assert all(len(s.eager_samples_ms) == len(s.compiled_samples_ms) == 3 for s in rp.per_shape)
    assert rp.per_shape[0].eager_ms == sorted(rp.per_shape[0].eager_samples_ms)[1]  # the median of 3
    assert rp.cumulative_at == list(range(1, 31))
    assert rp.cumulative_ms["eager"][-1] == pytest.approx(rp.total_ms["eager"])
    assert rp.cumulative_ms["compiled"][-1] == pytest.approx(rp.total_ms["compiled"])
    assert rp.compile_s * 1e3 <= rp.total_ms["compiled"]
    assert r.compile_latency_s * 1e3 == pytest.approx(rp.cumulative_ms["compiled"][0])  # the first call
    assert r.speedup == rp.weighted_speedup == pytest.approx(weighted_speedup(rp.per_shape))
    assert r.speedup_ci == rp.weighted_speedup_ci and rp.weighted_speedup_ci[0] <= r.speedup
    assert r.eager is None and r.compiled is None  # no single shape was timed


@pytest.mark.parametrize("policy", [{"dynamic": True}, {"mark_dynamic": [[0, 0]]}], ids=["dynamic", "mark_dynamic"])
def test_a_dynamic_dimension_compiles_once_for_every_size(policy):
    r = replay(policy)
    assert r.status == "ok", r.error
    assert user_targets.REPLAY_GRAPHS == ["dynamic"]
    assert (r.replay.compiles, r.replay.recompiles, r.replay.recompile_reasons) == (1, 0, [])


def test_automatic_dynamic_recompiles_once_then_serves_every_size_from_a_dynamic_graph():
    r = replay({})  # dynamic: null, torch's default
    assert len(user_targets.REPLAY_GRAPHS) == 2 and user_targets.REPLAY_GRAPHS[1] == "dynamic"
    assert (r.replay.compiles, r.replay.recompiles, len(r.replay.recompile_reasons)) == (2, 1, 1)


def test_the_recompile_limit_is_flagged_and_its_refused_compiles_are_not_counted():
    with torch._dynamo.config.patch(recompile_limit=2):
        r = replay({"dynamic": False}, values=[8, 16, 32, 64], calls=40)
    assert r.status == "ok", r.error
    assert r.replay.recompile_limit_hit is True
    assert len(user_targets.REPLAY_GRAPHS) == 2  # Dynamo runs the other sizes eagerly
    assert (r.replay.compiles, r.replay.recompiles) == (2, 1)
    assert len(r.replay.per_shape) == 4


def test_the_limit_is_not_flagged_below_it():
    with torch._dynamo.config.patch(recompile_limit=4):
        r = replay({"dynamic": False}, values=[8, 16, 32, 64], calls=40)
    assert r.replay.recompile_limit_hit is False and r.replay.compiles == 4


def test_a_value_whose_build_fails_is_a_runtime_error_naming_it():
    r = replay(params={"broken_at": 16})
    assert r.status == "runtime_error"
    assert r.error.type == "tasks.replay.ReplayBuildError"
    assert r.error.message == (
        "building tests.user_targets:make_sized with rows=16 failed: ValueError: cannot build 16 rows"
    )
    assert r.replay is None


def test_an_eager_side_that_fails_in_the_first_pass_is_a_runtime_error():
    r = replay(params={"eager_fails": True}, check={"enabled": False})
    assert r.status == "runtime_error"
    assert (r.error.type, r.error.message) == ("builtins.RuntimeError", "only the eager side fails")


def test_a_wrong_compiled_output_is_incorrect_and_names_the_value():
    r = replay({"backend": "relu_accuracy_error_TESTING_ONLY"}, values=[8, 16])
    assert r.status == "incorrect" and r.correct is False
    assert r.error.message.startswith("rows=8: mismatch at outputs")
    assert r.replay is not None  # still timed


def test_an_unchecked_replay_says_so():
    r = replay(check={"enabled": False})
    assert r.status == "ok" and r.correct is None
    assert r.check_note == "not checked: check.enabled is false"


# ----------------------------------------------------------------------------- draws and arithmetic


def test_draws_are_reproducible_by_seed_and_follow_the_weights():
    cfg = ReplayConfig(param="n", values=[1, 2, 3], weights=[6, 3, 1], calls=30_000)
    first = draw(cfg, seed=7)
    assert first.sequence == draw(cfg, seed=7).sequence
    assert first.sequence != draw(cfg, seed=8).sequence
    assert first.weights == pytest.approx([0.6, 0.3, 0.1])
    counts = Counter(first.sequence)
    assert [counts[i] / cfg.calls for i in range(3)] == pytest.approx([0.6, 0.3, 0.1], abs=0.01)


def test_draws_without_weights_are_uniform():
    cfg = ReplayConfig(param="n", values=["a", "b"], calls=20_000)
    traffic = draw(cfg, seed=0)
    assert traffic.weights == [0.5, 0.5]
    assert traffic.sequence.count(0) / cfg.calls == pytest.approx(0.5, abs=0.01)


def test_values_first_seen_come_first_and_undrawn_ones_last():
    cfg = ReplayConfig(param="n", values=[1, 2, 3], weights=[1, 1e-9, 1], calls=50)
    traffic = draw(cfg, seed=0)
    assert 1 not in traffic.sequence
    assert traffic.first_seen()[-1] == 1 and sorted(traffic.first_seen()) == [0, 1, 2]


def shape(weight: float, eager_ms: float, compiled_ms: float) -> ShapeTiming:
    return ShapeTiming(value=0, weight=weight, eager_ms=eager_ms, compiled_ms=compiled_ms)


def test_weighted_speedup_weighs_each_size_by_its_traffic():
    shapes = [shape(0.75, 4.0, 2.0), shape(0.25, 10.0, 10.0)]
    assert weighted_speedup(shapes) == pytest.approx((0.75 * 4 + 0.25 * 10) / (0.75 * 2 + 0.25 * 10))  # 1.375
    assert weighted_speedup([shape(1.0, 1.0, 0.0)]) is None


def sampled(weight: float, eager: list[float], compiled: list[float]) -> ShapeTiming:
    """A size with its warm samples and their medians."""
    return ShapeTiming(
        value=0,
        weight=weight,
        eager_ms=float(np.median(eager)),
        compiled_ms=float(np.median(compiled)),
        eager_samples_ms=eager,
        compiled_samples_ms=compiled,
    )


def test_the_weighted_speedup_interval_resamples_every_size_and_holds_the_point():
    rng = np.random.default_rng(0)

    def noisy(ms: float) -> list[float]:
        return list(ms * (1 + 0.05 * rng.standard_normal(15)))

    shapes = [sampled(0.75, noisy(4.0), noisy(2.0)), sampled(0.25, noisy(10.0), noisy(10.0))]
    low, high = weighted_speedup_ci(shapes)
    assert low < weighted_speedup(shapes) < high and high - low < 0.2
    assert weighted_speedup_ci([sampled(1.0, [4.0] * 5, [2.0] * 5)]) == (2.0, 2.0)
    assert weighted_speedup_ci([shape(1.0, 4.0, 2.0)]) is None  # no samples


def test_the_first_pass_serves_the_same_calls_on_both_sides_a_block_at_a_time():
    seen: list[tuple[str, int]] = []
    frames = {"total": 0, "refused": 0}

    def side(name):
        def call(x):
            seen.append((name, x))
            if name == "compiled" and x in (2, 3) and ("compiled", x) not in seen[:-1]:
                frames["total"] += 1  # a first sight of 2 compiles; of 3, the recompile limit refuses
                frames["refused"] += x == 3

        return call

    def counters():
        return Snapshot(frames=frames["total"], graphs=0, limit_hits=frames["refused"])

    sequence = [i % 4 for i in range(FIRST_PASS_BLOCK * 2 + 7)]
    eager, compiled = serve(CpuTimer(), side("eager"), side("compiled"), [(0,), (1,), (2,), (3,)], sequence, counters)
    expected = []
    for start in range(0, len(sequence), FIRST_PASS_BLOCK):
        block = sequence[start : start + FIRST_PASS_BLOCK]
        expected += [("eager", i) for i in block] + [("compiled", i) for i in block]
    assert seen == expected
    assert len(eager.call_ms) == len(compiled.call_ms) == len(sequence)
    assert compiled.compiled_calls == [2] and eager.compiled_calls == []


def test_break_even_is_compile_time_over_the_weighted_time_saved():
    shapes = [shape(0.75, 4.0, 2.0), shape(0.25, 10.0, 10.0)]  # 1.5 ms saved per call on average
    assert break_even_calls(1.5, shapes) == pytest.approx(1000.0)
    assert break_even_calls(1.5, [shape(0.5, 4.0, 2.0), shape(0.5, 1.0, 5.0)]) is None  # compiled slower
    assert break_even_calls(1.5, [shape(1.0, 2.0, 2.0)]) is None  # no faster


def test_the_cumulative_curve_keeps_at_most_its_points_with_the_first_and_last_call():
    at = sample_points(1000)
    assert len(at) <= CUMULATIVE_POINTS and at[0] == 1 and at[-1] == 1000 and at == sorted(set(at))
    assert sample_points(5) == [1, 2, 3, 4, 5]
    assert all(len(sample_points(n)) <= CUMULATIVE_POINTS and sample_points(n)[-1] == n for n in range(195, 1300, 7))
    assert cumulative([1.0, 2.0, 3.0, 4.0], [1, 3, 4]) == [1.0, 6.0, 10.0]


# --------------------------------------------------------------------------------------- the spec


def test_mark_dynamic_is_part_of_the_configuration_label_and_old_ids_stay():
    assert CompileConfig(mark_dynamic=[[0, 1]]).label() == "inductor+mark_dynamic=0:1"
    assert CompileConfig(mark_dynamic=[[0, 1], [1, 0]]).label() == "inductor+mark_dynamic=0:1,1:0"
    assert Experiment(target="seed.foo").id == Experiment(target="seed.foo", replay=None).id
    assert "replay" not in Experiment(target="seed.foo").model_dump(exclude_defaults=True)


SPEC = """
name: r
experiments:
  - target: blocks.transformer_layer
    {extra}
    replay: {replay}
"""


@pytest.mark.parametrize(
    ("replay", "extra", "message"),
    [
        (
            "{param: seq, values: [16, 32], weights: [1], calls: 10}",
            "",
            "spec.yaml: experiments[0].replay.weights: value error, 1 weights for 2 values (give one weight per value)",
        ),
        (
            "{param: seq, values: [16, 32], weights: [1, 0], calls: 10}",
            "",
            "spec.yaml: experiments[0].replay.weights: value error, every weight must be a finite number > 0, got 0.0",
        ),
        (
            "{param: seqlen, values: [16, 32], calls: 10}",
            "",
            "spec.yaml: experiments[0].replay.param: target 'blocks.transformer_layer' has no parameter 'seqlen' "
            "(it accepts: batch, seq, dim, heads, hidden, causal, dropout)",
        ),
        (
            "{param: seq, values: [], calls: 10}",
            "",
            "spec.yaml: experiments[0].replay.values: list should have at least 1 item after validation, not 0",
        ),
        (
            "{param: seq, values: [16, 32], calls: 10}",
            "phase: training",
            "spec.yaml: experiments[0].replay: replays inference calls (serving traffic), not phase 'training'",
        ),
    ],
    ids=["weights-length", "weight-zero", "unknown-param", "no-values", "training"],
)
def test_a_bad_replay_is_one_line_naming_its_field(write_spec, replay, extra, message):
    with pytest.raises(SpecError) as e:
        load_spec(write_spec(SPEC.format(replay=replay, extra=extra)))
    assert str(e.value) == message


def test_mark_dynamic_without_a_replay_is_an_error(write_spec):
    path = write_spec("name: r\nexperiments:\n  - target: seed.foo\n    compile: {mark_dynamic: [[0, 0]]}\n")
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert str(e.value) == (
        "spec.yaml: experiments[0].compile.mark_dynamic: marks the inputs of a replay's compiled calls; set replay too"
    )


def test_a_replay_param_may_supply_a_parameter_the_factory_requires(write_spec):
    path = write_spec(
        "name: r\nexperiments:\n  - target: tests.user_targets:make_sized\n"
        "    sweep: {compile.dynamic: [false, true, null]}\n"
        "    replay: {param: rows, values: [8, 16], weights: [2, 1], calls: 10}\n"
    )
    spec = load_spec(path)
    assert [e.compile.dynamic for e in spec.experiments] == [False, True, None]
    assert spec.experiments[0].replay == ReplayConfig(param="rows", values=[8, 16], weights=[2, 1], calls=10)


def test_the_example_spec_replays_four_policies():
    from pathlib import Path

    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / "dynamic.yaml")
    labels = [e.compile.label() for e in spec.experiments]
    assert labels == ["inductor+static", "inductor+dynamic", "inductor", "inductor+mark_dynamic=0:1"]
    for e in spec.experiments:
        assert e.target == "blocks.transformer_layer" and e.replay is not None
        assert (e.replay.param, len(e.replay.values), e.replay.calls) == ("seq", 8, 1000)
        weights = e.replay.weights or []
        assert [w / weights[0] for w in weights] == pytest.approx([1 / i for i in range(1, 9)], rel=1e-3)  # Zipf


# ------------------------------------------------------------------------------------ end to end


def test_a_replay_runs_on_ray_workers_and_its_report_keeps_it(write_spec, tmp_path, ray_cluster):
    from orchestrator import api
    from orchestrator.report import read

    spec = write_spec(
        """
        name: replayed
        defaults: {device: cpu, resources: {cpus: 1}, timing: {warmup: 1, repeats: 3}}
        experiments:
          - target: tests.user_targets:make_sized
            compile: {backend: eager, dynamic: false}
            replay: {param: rows, values: [8, 16, 32], weights: [3, 2, 1], calls: 20}
        """
    )
    out = tmp_path / "r.json"
    report = api.run(spec, out)
    (r,) = report.results
    assert r.status == "ok", r.error
    assert r.replay is not None and r.replay.compiles == 3 and r.replay.recompiles == 2
    assert read(out).results[0].replay == r.replay
    assert json.loads(out.read_text())["results"][0]["replay"]["calls"] == 20
