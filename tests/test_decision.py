"""What to ship (orchestrator.report.decision) on crafted results: no torch run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.plan.spec import load_spec
from orchestrator.report.decision import (
    EVERY_FAILED,
    EVERY_INCORRECT,
    EVERY_RECOMPILED,
    HIGHEST_LOWER_BOUND,
    LEAST_TIME,
    NONE_CHECKED,
    NOT_FASTER,
    NOT_PAYING,
    decide,
)
from orchestrator.report.models import Decision
from orchestrator.report.summary import summarize
from tasks.models import DecisionConfig, Experiment, Result, result_identity
from tests.report_data import make_replay_result, make_replicates, make_result


def decision_of(results: list[Result]) -> Decision:
    """The decision of the only group the results make."""
    (group,) = summarize(results).groups
    assert group.decision is not None
    return group.decision


def exact(speedup: float, compile_s: float, *, backend: str = "inductor", **kwargs) -> Result:
    """A result without noise: compiled 1 ms a call, eager ``speedup`` ms, the interval a point."""
    return make_result("t", speedup, backend=backend, noise=0.0, compile_s=compile_s, **kwargs)


def calls(results: list[Result], n: int) -> list[Result]:
    """The results as run with ``decision: {calls: n}``."""
    return [r.model_copy(update={"decision": DecisionConfig(calls=n)}) for r in results]


# ------------------------------------------------------------------------------ by lower bound


def test_a_configuration_faster_beyond_noise_is_recommended():
    d = decision_of([make_result("t", 2.0, noise=0.01), make_result("t", 1.02, backend="aot_eager", noise=0.05)])
    assert (d.recommend, d.reason, d.basis, d.calls) == ("inductor", HIGHEST_LOWER_BOUND, "lower_bound", None)
    inductor = d.config("inductor")
    assert inductor is not None and inductor.lower is not None and inductor.lower > 1.9
    assert d.lower == inductor.lower and inductor.interval == "within run"


def test_of_two_beyond_noise_the_higher_lower_bound_wins():
    d = decision_of([make_result("t", 2.0, noise=0.01), make_result("t", 1.9, backend="aot_eager", noise=0.005)])
    assert [c.lower is not None and c.lower > 1.0 for c in d.configs] == [True, True]
    assert d.recommend == "inductor"


def test_the_best_speedup_with_a_lower_lower_bound_loses():
    noisy = make_result("t", 2.2, noise=0.3)
    tight = make_result("t", 1.8, backend="aot_eager", noise=0.005)
    d = decision_of([noisy, tight])
    fast, sure = d.config("inductor"), d.config("aot_eager")
    assert fast and sure and fast.speedup and sure.speedup and fast.lower and sure.lower
    assert fast.speedup > sure.speedup and fast.lower < sure.lower  # the case this test is about
    assert d.recommend == "aot_eager"
    assert summarize([noisy, tight]).groups[0].best.config == "inductor"  # the fastest point is still the best


def test_the_lower_bound_is_the_groups_between_run_interval_with_replicates():
    runs = make_replicates([2.0, 2.6, 1.5], noise=0.002, target="t")
    steady = make_result("t", 1.8, backend="aot_eager", noise=0.005)
    group = summarize([*runs, steady]).groups[0]
    assert group.decision is not None
    replicated = group.decision.config("inductor")
    ranked = next(x for x in group.ranked if x.config == "inductor")
    assert replicated and ranked.ci and replicated.lower == ranked.ci[0] and replicated.interval == "between runs"
    assert group.decision.recommend == "aot_eager"  # three runs from 1.5x to 2.6x: the t-interval reaches below 1


def test_all_slower_is_eager():
    d = decision_of([make_result("t", 0.5), make_result("t", 0.9, backend="aot_eager")])
    assert (d.recommend, d.reason, d.lower) == ("eager", NOT_FASTER, None)


def test_faster_but_within_noise_is_eager():
    d = decision_of([make_result("t", 1.08, noise=0.15)])
    only = d.configs[0]
    assert only.speedup and only.lower and only.lower < 1.0 < only.speedup
    assert (d.recommend, d.reason) == ("eager", NOT_FASTER)


def test_all_incorrect_is_eager_and_says_so():
    d = decision_of(
        [make_result("t", 3.0, status="incorrect"), make_result("t", 2.0, backend="aot_eager", status="incorrect")]
    )
    assert (d.recommend, d.reason) == ("eager", EVERY_INCORRECT)
    assert [c.excluded for c in d.configs] == ["failed its check", "failed its check"]


def test_an_incorrect_configuration_is_passed_over_for_a_slower_correct_one():
    d = decision_of([make_result("t", 3.0, status="incorrect"), make_result("t", 1.5, backend="aot_eager")])
    assert d.recommend == "aot_eager"
    assert d.pareto == ["aot_eager"]  # only candidates are in the Pareto set


def test_every_configuration_failed_names_the_statuses():
    d = decision_of(
        [make_result("t", None, status="compile_error"), make_result("t", None, mode="max-autotune", status="timeout")]
    )
    assert (
        d.reason
        == EVERY_FAILED.format(statuses="compile_error, timeout")
        == ("every configuration failed (compile_error, timeout)")
    )
    assert d.recommend == "eager" and d.pareto == []


def test_unchecked_is_never_recommended():
    unchecked = make_result("t", 3.0).model_copy(update={"correct": None})
    d = decision_of([unchecked, make_result("t", 1.5, backend="aot_eager")])
    assert d.recommend == "aot_eager"
    assert d.config("inductor").excluded == "unchecked (correct: null)"
    alone = decision_of([unchecked])
    assert (alone.recommend, alone.reason) == ("eager", NONE_CHECKED)


def test_one_wrong_run_of_three_rules_a_configuration_out():
    runs = make_replicates([2.0, 2.1, 2.05], noise=0.002, target="t")
    runs[1] = runs[1].model_copy(update={"status": "incorrect", "correct": False})
    d = decision_of(runs)
    assert d.recommend == "eager" and d.configs[0].excluded == "failed its check in 1 of 3 runs"


def test_a_recompiled_configuration_is_excluded():
    d = decision_of([make_result("t", 3.0, recompiled=True), make_result("t", 1.5, backend="aot_eager")])
    assert d.recommend == "aot_eager" and d.config("inductor").excluded == "recompiled while timed"
    alone = decision_of([make_result("t", 3.0, recompiled=True)])
    assert (alone.recommend, alone.reason) == ("eager", EVERY_RECOMPILED)


def test_mixed_exclusions_name_each_configuration():
    d = decision_of([make_result("t", 3.0, recompiled=True), make_result("t", None, backend="aot_eager", status="oom")])
    why = "inductor: recompiled while timed; aot_eager: oom"
    assert d.reason == f"no configuration is ok, checked correct and not recompiled ({why})"


# ------------------------------------------------------------------------------ break-even


def test_break_even_is_compile_latency_over_the_time_saved_per_call():
    d = decision_of([exact(3.0, 30.0), exact(1.5, 0.1, backend="aot_eager"), exact(0.5, 1.0, mode="max-autotune")])
    inductor, aot, slower = (d.config(c) for c in ("inductor", "aot_eager", "inductor:max-autotune"))
    assert inductor and aot and slower
    assert (inductor.eager_ms, inductor.compiled_ms) == pytest.approx((3.0, 1.0))
    assert inductor.break_even_calls == pytest.approx(30_000 / (3.0 - 1.0))  # 15,000 calls
    assert aot.break_even_calls == pytest.approx(100 / (1.5 - 1.0))  # 200 calls
    assert slower.break_even_calls is None  # compiled is not faster: it never pays
    assert inductor.pays_within_calls is None and inductor.calls_ms is None  # no calls asked


def test_a_warm_configuration_is_charged_its_cold_twins_latency_and_says_so():
    warm = exact(2.0, 0.06, cache="warm", cache_outcome="hit")
    cold = exact(2.0, 8.0, cache="cold", cache_outcome="miss")
    d = decision_of([warm, cold])
    inductor, twin = d.config("inductor"), d.config("inductor+cold")
    assert inductor and twin
    assert (inductor.compile_s, inductor.compile_label) == (8.0, "cold: miss, from inductor+cold")
    assert inductor.break_even_calls == pytest.approx(8000 / (2.0 - 1.0))
    assert not twin.candidate and twin.excluded == "the cold compile of inductor (charged to it)"
    assert d.recommend == "inductor"  # the configuration, not how its compile was timed
    assert "inductor is charged the compile latency of inductor+cold, the same configuration compiled cold" in d.notes
    alone = decision_of([warm]).configs[0]
    assert (alone.compile_s, alone.compile_label) == (0.06, "warm: hit")
    assert alone.break_even_calls == pytest.approx(60 / (2.0 - 1.0))


def test_a_failed_cold_twin_keeps_its_reason_and_charges_nothing():
    d = decision_of(
        [exact(2.0, 0.06, cache_outcome="hit"), make_result("t", None, cache="cold", status="compile_error")]
    )
    assert d.config("inductor").compile_label == "warm: hit"
    assert d.config("inductor+cold").excluded == "compile_error"


# ------------------------------------------------------------------------------ calls budget


def test_a_calls_budget_flips_the_choice_to_what_pays_for_its_compile():
    """inductor: 3x a call, 30 s to compile (break-even 15,000 calls); aot_eager: 1.5x, 0.1 s (200 calls)."""
    results = [exact(3.0, 30.0), exact(1.5, 0.1, backend="aot_eager")]
    assert decision_of(results).recommend == "inductor"  # per call, inductor wins

    d = decision_of(calls(results, 1000))
    assert (d.recommend, d.reason, d.basis, d.calls) == ("aot_eager", LEAST_TIME.format(calls=1000), "calls", 1000)
    assert d.reason == "least time for 1,000 calls, compile included"
    inductor, aot = d.config("inductor"), d.config("aot_eager")
    assert (inductor.calls_ms, inductor.eager_calls_ms, inductor.pays_within_calls) == pytest.approx(
        (31_000, 3000, False)
    )
    assert (aot.calls_ms, aot.eager_calls_ms, aot.pays_within_calls) == pytest.approx((1100, 1500, True))

    assert decision_of(calls(results, 1_000_000)).recommend == "inductor"  # past both break-evens: per call again


def test_no_configuration_paying_within_the_calls_is_eager():
    d = decision_of(calls([exact(3.0, 30.0)], 100))
    assert (d.recommend, d.reason) == ("eager", NOT_PAYING.format(calls=100))
    assert d.reason == "no configuration pays for its compile within 100 calls"


def test_a_calls_budget_does_not_waive_the_noise():
    d = decision_of(calls([make_result("t", 1.08, noise=0.15, compile_s=0.001)], 10**9))
    only = d.configs[0]
    assert only.pays_within_calls and only.lower and only.lower < 1.0
    assert (d.recommend, d.reason) == ("eager", NOT_FASTER)


# ------------------------------------------------------------------------------ replays


def test_replays_are_decided_by_their_first_pass_totals_at_their_own_calls():
    """Modelled (compile + 1,000 x weighted steady time), static would win; its measured first pass,
    slowed by what the model does not see, loses to dynamic's."""
    static = make_replay_result(dynamic=False, compile_s=1.0, compiled_ms=(0.4, 0.8, 1.6), calls_asked=1000,
                                total_ms={"eager": 2000.0, "compiled": 2600.0})  # fmt: skip
    dynamic = make_replay_result(dynamic=True, compile_s=1.0, compiled_ms=(0.6, 1.2, 2.4), calls_asked=1000,
                                 total_ms={"eager": 2000.0, "compiled": 1900.0})  # fmt: skip
    d = decision_of([static, dynamic])
    assert (d.recommend, d.basis, d.calls) == ("inductor+dynamic", "calls", 1000)
    s, y = d.config("inductor+static"), d.config("inductor+dynamic")
    assert (s.calls_ms, s.eager_calls_ms, y.calls_ms) == (2600.0, 2000.0, 1900.0)
    assert s.compile_s == 1.0 and s.compile_label == "warm: hit, 1 compile in the replay"
    weighted_eager = 0.5 * 1.0 + 0.3 * 2.0 + 0.2 * 4.0
    assert s.eager_ms == pytest.approx(weighted_eager) and s.compiled_ms == pytest.approx(weighted_eager * 0.4)
    assert s.break_even_calls == pytest.approx(1000 / (weighted_eager * 0.6)) == static.replay.break_even_calls


def test_replays_at_other_calls_are_modelled_from_their_steady_state_and_all_compiles():
    r = make_replay_result(dynamic=False, compile_s=9.0, compiles=8, calls_asked=50_000)
    d = decision_of([r])
    entry = d.configs[0]
    mean_eager, mean_compiled = 0.5 * 1.0 + 0.3 * 2.0 + 0.2 * 4.0, 0.5 * 0.5 + 0.3 * 1.0 + 0.2 * 2.0
    assert entry.calls_ms == pytest.approx(9000 + 50_000 * mean_compiled)
    assert entry.eager_calls_ms == pytest.approx(50_000 * mean_eager)
    assert entry.compile_label == "warm: hit, 8 compiles in the replay"
    assert d.recommend == "inductor+static"


def test_a_replay_whose_interval_reaches_below_one_is_not_shipped_though_its_totals_pay():
    noisy = make_replay_result(dynamic=True, compile_s=0.1, ci=(0.9, 2.5), calls_asked=1000)
    d = decision_of([noisy])
    entry = d.configs[0]
    assert entry.lower == 0.9 and entry.pays_within_calls
    assert (d.recommend, d.reason) == ("eager", NOT_FASTER)
    sure = make_replay_result(dynamic=True, compile_s=0.1, ci=(1.8, 2.2), calls_asked=1000)
    assert decision_of([sure]).recommend == "inductor+dynamic"


def test_replays_without_calls_are_weighed_over_the_calls_they_served():
    d = decision_of([make_replay_result(dynamic=True, compile_s=30.0)])
    assert (d.basis, d.calls, d.recommend) == ("calls", 1000, "eager")
    assert d.reason == NOT_PAYING.format(calls=1000)
    assert any("the 1,000 calls the replay served" in note for note in d.notes)


# ------------------------------------------------------------------------------ Pareto


def test_the_pareto_set_leaves_out_the_dominated_configuration():
    fast = exact(3.0, 10.0)  # best speedup, slowest compile
    quick = exact(2.0, 1.0, backend="aot_eager")  # quicker compile
    neither = exact(1.8, 5.0, mode="max-autotune")  # slower and slower to compile than quick: dominated
    d = decision_of([fast, quick, neither])
    assert d.pareto == ["inductor", "aot_eager"]
    assert d.pareto_on == ["speedup lower bound", "compile latency"]
    assert [c.pareto for c in d.configs] == [True, True, False]
    assert "peak memory not measured for any configuration: the Pareto set is compared on the other figures" in d.notes


def test_peak_memory_enters_the_pareto_set_where_measured():
    results = [exact(3.0, 10.0), exact(2.0, 1.0, backend="aot_eager"), exact(1.8, 5.0, mode="max-autotune")]
    for r, peak in zip(results, (900, 800, 100), strict=True):
        r.compiled.peak_memory_bytes = peak
    d = decision_of(results)
    assert d.pareto_on == ["speedup lower bound", "compile latency", "peak memory"]
    assert d.pareto == ["inductor", "aot_eager", "inductor:max-autotune"]  # the least memory: not dominated now
    assert d.config("inductor:max-autotune").peak_memory_bytes == 100


# ------------------------------------------------------------------------------ spec and results


def test_decision_calls_is_an_experiment_field_that_leaves_the_id_alone(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ndefaults: {decision: {calls: 1000}}\nexperiments:\n  - target: seed.foo\n")
    (exp,) = load_spec(spec).experiments
    assert exp.decision == DecisionConfig(calls=1000)
    assert exp.id == Experiment(target="seed.foo").id
    assert Experiment(target="seed.foo", decision={"calls": 5}).id == exp.id
    assert result_identity(exp)["decision"] == DecisionConfig(calls=1000)
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Experiment(target="seed.foo", decision={"calls": 0})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Experiment(target="seed.foo", decision={"calls": 5, "budget": 1})


def test_decide_reads_the_groups_ranked_figures():
    results = [make_result("t", 2.0), make_result("t", 1.5, backend="aot_eager")]
    group = summarize(results).groups[0]
    again = decide(group.ranked, {"inductor": [results[0]], "aot_eager": [results[1]]})
    assert again == group.decision


def test_a_replay_is_a_group_of_its_own_beside_the_same_target_timed_on_one_shape():
    from orchestrator.report.summary import summarize
    from tasks.models import ReplayConfig

    from .report_data import make_replay_result, make_result

    plain = make_result("seed.foo3", 2.0)
    replayed = make_replay_result().model_copy(
        update={
            "target": "seed.foo3",
            "params": plain.params,
            "traffic": ReplayConfig(param="shape", values=[[8, 8], [16, 16]], calls=100),
        }
    )
    groups = summarize([plain, replayed]).groups
    assert [g.label for g in groups] == ["seed.foo3", "seed.foo3 replay(shape: 2 values, 100 calls)"]


def test_a_bound_from_one_run_against_one_over_runs_is_noted():
    replicated = [make_result("t", 2.4 + 0.1 * i, seed=0).model_copy(update={"replicate": i}) for i in range(3)]
    single = make_result("t", 2.8, mode="max-autotune-no-cudagraphs", seed=0)
    group = summarize([*replicated, single]).groups[0]
    assert group.decision.recommend == "inductor:max-autotune-no-cudagraphs"
    assert any("interval is from one run" in n and "inductor over 3 runs" in n for n in group.decision.notes)
    slower = make_result("t", 1.5, mode="max-autotune-no-cudagraphs", seed=0)
    alike = summarize([*replicated, slower]).groups[0]
    assert alike.decision.recommend == "inductor"
    assert not any("from one run" in n for n in alike.decision.notes)  # the replicated one ships: nothing unlike
