"""The regression gate on crafted pairs of reports: real regressions caught, noise let through."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, ttest_ind
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import Report, write_report
from orchestrator.report.compare import ONE_RUN, WELCH, Thresholds, compare, markdown, verdict, welch_log
from tests.report_data import make_report, make_result, make_runs

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def pair(base_kwargs: dict, new_kwargs: dict, **common):
    """Two one-result reports of the same experiment, with different samples."""
    base = make_report([make_result(**{**common, **base_kwargs}, sample_seed=1)], name="base")
    new = make_report([make_result(**{**common, **new_kwargs}, sample_seed=2)], name="new")
    return base, new


def kinds(comparison) -> list[tuple[str, bool]]:
    return [(c.kind, c.regression) for c in comparison.changes]


def slower_compiled(compiled_ms: float, eager_ms: float = 2.0) -> dict:
    """make_result's arguments for a run whose compiled side takes ``compiled_ms`` and eager side ``eager_ms``."""
    return {"compiled_ms": compiled_ms, "speedup": eager_ms / compiled_ms}


def measured(warnings: list[str]) -> list[str]:
    """The warnings about what the two reports measured, without the one about one run a side."""
    return [w for w in warnings if ONE_RUN not in w]


def test_one_run_a_side_without_noise_to_judge_by_is_untested_and_fails_only_beyond_the_large_bound():
    """One experiment, one run a side, no A/A figure: a 20% slower compiled side is listed, untested, and passes;
    40% slower is beyond UNTESTED_BOUND (25%) and fails."""
    base, new = pair(slower_compiled(1.0), slower_compiled(1.2))
    c = compare(base, new)
    assert kinds(c) == [("slower", False)] and not c.fails
    (change,) = c.changes
    assert re.fullmatch(r"speedup -1[67]\.\d% \(time \+(19|20)\.\d%\)", change.change), change.change
    assert (change.runs, change.test, change.p_value, change.note) == ((1, 1), "threshold", None, ONE_RUN)
    (noise,) = c.noise
    assert (noise.source, noise.experiments) == ("none", 1)
    base, new = pair(slower_compiled(1.0), slower_compiled(1.4))
    assert kinds(compare(base, new)) == [("slower", True)]


def test_a_speedup_that_dropped_40_percent_is_a_regression():
    base, new = pair({"speedup": 2.5}, {"speedup": 1.5}, compiled_ms=1.0)
    assert kinds(compare(base, new)) == [("slower", True)]


def test_one_percent_of_noise_is_not_flagged():
    base, new = pair(slower_compiled(1.0), slower_compiled(1.01), noise=0.02)
    c = compare(base, new)
    assert c.changes == [] and c.regressions == [] and c.matched == 1


def test_thousands_of_per_call_samples_of_one_run_a_side_give_no_p_value():
    """A 6% shift, 5,000 calls a side, one run each: a test on the calls said p ~ 0 (pseudo-replication);
    the calls of one process say nothing about the next run, so the move is judged by the threshold alone."""
    base, new = pair(slower_compiled(1.0), slower_compiled(1.06), noise=0.02, n=5000)
    c = compare(base, new)
    (change,) = c.changes
    assert (change.kind, change.regression, change.p_value, change.test) == ("slower", False, None, "threshold")
    assert change.note == "one run per side: run-to-run noise not measured"
    assert (
        "1 experiment(s) on CPU (Xeon) with one run per side: run-to-run noise not measured (or fewer than 3 runs a "
        "side), untested: fewer than the 20 experiments that measure the sweep's own noise, and no A/A noise figure "
        "for CPU (Xeon) (speedup); a slowdown fails the gate only beyond 25% (replicates, 3 or more on both sides, "
        "give a test; so does --noise FILE, from compare --save-noise FILE on two runs of the same code)"
    ) in c.warnings


def three_and_three(base_ms: list[float], new_ms: list[float], **kwargs) -> tuple[Report, Report]:
    """Two reports of one experiment with a run per value (compiled medians; eager 2.0 ms throughout)."""
    base = make_report(make_runs("seed.foo", base_ms, seed=1, **kwargs), name="base")
    new = make_report(make_runs("seed.foo", new_ms, seed=2, **kwargs), name="new")
    return base, new


def test_three_runs_a_side_with_a_real_10_percent_shift_are_flagged_with_a_p_value():
    base, new = three_and_three([1.0, 1.01, 0.99], [1.1, 1.11, 1.09])
    c = compare(base, new)
    (change,) = c.changes
    assert (change.kind, change.regression, change.runs, change.test) == ("slower", True, (3, 3), WELCH)
    assert change.p_value is not None and change.p_value < 0.05 and change.note == ""
    assert change.change.startswith("speedup -9.")
    assert not any("run-to-run noise not measured" in w for w in c.warnings)
    assert c.runs == {"3 vs 3": 1}


def test_three_runs_a_side_whose_spread_exceeds_the_shift_are_not_flagged():
    """A 9% move of the geometric mean, but the runs scatter by 15%: beyond the threshold, not significant."""
    base, new = three_and_three([0.85, 1.0, 1.15], [0.93, 1.09, 1.25])
    assert welch_log([2 / x for x in (0.85, 1.0, 1.15)], [2 / x for x in (0.93, 1.09, 1.25)]).p > 0.3
    c = compare(base, new)
    assert c.changes == [] and not c.fails


@pytest.mark.parametrize("runs", [1, 3])
def test_a_machine_slower_on_both_sides_is_flagged_only_under_the_time_metric(runs):
    """Eager and compiled both 10% slower: the speedup did not move, the compiled median did."""
    spread = [1.0, 1.005, 0.995][:runs]
    base = make_report(make_runs("seed.foo", spread, [2 * x for x in spread], seed=1))
    new = make_report(make_runs("seed.foo", [1.1 * x for x in spread], [2.2 * x for x in spread], seed=2))
    assert compare(base, new).changes == []
    (change,) = compare(base, new, Thresholds(metric="time")).changes
    assert (change.kind, change.regression) == ("slower", runs == 3)  # one run a side: untested, within 25%
    assert change.change.startswith("time +10.") and "(speedup " in change.change
    assert (change.p_value is not None) == (runs == 3)


def test_fewer_runs_in_new_than_in_base_are_a_warning_and_judged_untested():
    base, new = three_and_three([1.0, 1.01, 0.99], [1.2, 1.21])
    c = compare(base, new)
    assert "1 experiment(s) ran fewer times in new than in base: seed.foo [inductor] (2 of 3)" in c.warnings
    (change,) = c.changes
    assert (change.kind, change.p_value, change.runs) == ("slower", None, (3, 2))
    assert change.note == "3 vs 2 runs: run-to-run noise not measured (a test needs 3 a side)"
    assert c.missing == [] and c.regressions == [] and c.runs == {"3 vs 2": 1}  # untested, within 25%


def test_one_failing_run_of_three_is_a_new_failure():
    base = make_report(make_runs("seed.foo", [1.0, 1.0, 1.0], seed=1))
    failing = make_result("seed.foo", None, status="oom", message="out of memory")
    failing.replicate = 1
    new_runs = make_runs("seed.foo", [1.0, 1.0, 1.0], seed=2)
    new = make_report([new_runs[0], failing, new_runs[2]])
    change, shipped = compare(base, new).changes
    assert shipped.kind == "recommendation" and shipped.change == "inductor -> eager"  # failed in 1 of 3 runs
    assert (change.kind, change.regression, change.base, change.new) == (
        "new_failure",
        True,
        "ok",
        "oom in 1 of 3 runs",
    )


def test_welch_log_is_scipy_welch_test_on_logs_and_says_what_it_can_detect():
    base, new = [2.0, 2.1, 1.95], [1.8, 1.85, 1.7, 1.9]
    test = welch_log(base, new)
    expected = ttest_ind(np.log(new), np.log(base), equal_var=False)
    assert test.p == pytest.approx(float(expected.pvalue)) and test.df == pytest.approx(float(expected.df))
    assert test.ratio == pytest.approx(np.exp(np.mean(np.log(new)) - np.mean(np.log(base))))
    # a shift of exactly the detectable ratio, spreads unchanged, sits at p = alpha
    shifted = [x * test.detectable for x in base]
    assert welch_log(base, shifted).p > 0.05 * 0.999
    assert welch_log([1.0] * 3, [1.0] * 3).p == 1.0 and welch_log([1.0] * 3, [1.1] * 3).p == 0.0


def test_welch_on_three_runs_holds_its_false_alarm_rate_and_detects_what_mann_whitney_cannot():
    """The choice checked by simulation: 3 runs a side, log-normal run-to-run noise of 2%.
    Under no change Welch flags about alpha; a 10% shift is flagged nearly always; Mann-Whitney U's
    smallest two-sided p for 3 against 3 is 0.1, so it never flags at 0.05."""
    rng = np.random.default_rng(0)
    trials, sd = 2000, 0.02
    null = [welch_log(np.exp(rng.normal(0, sd, 3)), np.exp(rng.normal(0, sd, 3))).p < 0.05 for _ in range(trials)]
    shift = [welch_log(np.exp(rng.normal(0, sd, 3)), np.exp(rng.normal(0.1, sd, 3))).p < 0.05 for _ in range(300)]
    assert 0.02 < np.mean(null) < 0.08
    assert np.mean(shift) > 0.9
    assert mannwhitneyu([1.0, 1.01, 0.99], [1.1, 1.11, 1.09], alternative="two-sided").pvalue == pytest.approx(0.1)


def test_a_faster_result_is_reported_and_not_a_regression():
    base, new = pair(slower_compiled(1.0), slower_compiled(0.7))
    assert kinds(compare(base, new)) == [("faster", False)]


def test_a_new_failure_is_always_a_regression_and_a_new_pass_is_not():
    base, new = pair({}, {"status": "compile_error", "speedup": None, "message": "Unsupported: boom"})
    c = compare(base, new)
    assert kinds(c) == [("new_failure", True), ("recommendation", False)]  # nothing left to ship but eager
    assert c.changes[0].change == "Unsupported: boom" and (c.changes[0].base, c.changes[0].new) == (
        "ok",
        "compile_error",
    )
    assert kinds(compare(new, base)) == [("new_pass", False), ("recommendation", False)]


def test_a_graph_break_count_that_grew_is_a_regression():
    base, new = pair({"graph_breaks": 0}, {"graph_breaks": 2}, compiled_ms=1.0)
    assert kinds(compare(base, new)) == [("breaks_grew", True)]
    assert kinds(compare(new, base)) == [("breaks_fell", False)]


def test_compile_latency_moves_are_listed_and_gated_only_when_asked():
    base, new = pair({"compile_s": 1.0}, {"compile_s": 1.5})
    assert kinds(compare(base, new)) == [("compile_slower", False)]
    assert kinds(compare(base, new, Thresholds(gate_compile=True))) == [("compile_slower", True)]
    assert kinds(compare(new, base)) == [("compile_faster", False)]
    base, new = pair({"compile_s": 1.0}, {"compile_s": 1.1})
    assert compare(base, new).changes == []


def test_mismatched_environments_are_warned():
    """The same experiments (any GPU) measured on other hardware with another torch."""
    results = []
    for model, torch in (("A100", "2.12.0"), ("H100", "2.13.0")):
        r = make_result("a", torch=torch)
        r.device, r.worker.gpu_model = "cuda", model
        results.append(r)
    c = compare(make_report(results[:1], torch="2.12.0"), make_report(results[1:]))
    assert measured(c.warnings) == ["device models differ: A100 vs H100", "torch versions differ: 2.12.0 vs 2.13.0"]
    assert c.matched == 1


def test_experiments_in_one_report_only_are_listed_and_those_missing_from_new_fail():
    c = compare(make_report([make_result("a"), make_result("b")]), make_report([make_result("a"), make_result("c")]))
    assert (c.matched, c.missing, c.only_in_new) == (1, ["b [inductor]"], ["c [inductor]"])
    assert c.regressions == [] and c.fails
    assert "1 experiment(s) of base missing from new: b [inductor]" in c.warnings
    assert (
        verdict(c) == "INCOMPLETE: 1 experiment(s) of base missing from new; no regressions in 1 matched experiment(s)"
    )
    allowed = compare(
        make_report([make_result("a"), make_result("b")]),
        make_report([make_result("a")]),
        Thresholds(allow_missing=True),
    )
    assert not allowed.fails and allowed.missing == ["b [inductor]"]


def test_thread_counts_that_differ_are_warned():
    base, new = pair({}, {})
    new.results[0].worker.threads = 2
    assert measured(compare(base, new).warnings) == ["worker threads differ: 1 vs 2"]


def test_compile_latency_of_a_hit_is_never_compared_with_a_miss():
    base, new = pair({"compile_s": 8.0, "cache_outcome": "miss"}, {"compile_s": 0.05, "cache_outcome": "hit"})
    comparison = compare(base, new, Thresholds(gate_compile=True))
    assert kinds(comparison) == []
    assert any("served differently by the caches" in w and "warm: miss vs warm: hit" in w for w in comparison.warnings)
    base, new = pair({"compile_s": 0.05, "cache_outcome": "hit"}, {"compile_s": 0.5, "cache_outcome": "hit"})
    (change,) = compare(base, new, Thresholds(gate_compile=True)).changes
    assert (change.kind, change.regression) == ("compile_slower", True)
    assert change.new.endswith("(warm: hit)")


def test_compile_options_that_differ_are_warned():
    base, new = pair({}, {})
    new.results[0].inductor_options = {"max_autotune": True}
    assert measured(compare(base, new).warnings) == [
        "compile options (inductor config) differ for 1 experiment(s) in max_autotune (e.g. seed.foo [inductor])"
    ]


def test_an_incomplete_new_report_fails_and_an_incomplete_base_is_warned():
    base, new = pair({}, {})
    new.complete = False
    c = compare(base, new)
    assert "the new report is incomplete (its run did not finish)" in c.warnings
    assert c.incomplete and c.fails and c.regressions == []
    assert not compare(new, base).fails


def test_markdown_is_a_pull_request_comment():
    base, new = pair(slower_compiled(1.0), slower_compiled(1.4))
    text = markdown(compare(base, new))
    assert text.startswith(":x:".join(["### ", " REGRESSION: 1 regression(s) in 1 matched experiment(s)"]))
    assert "| REGRESSION | slower | seed.foo | inductor |" in text
    assert "| 1 vs 1 | untested | - |" in text and "- runs per experiment (base vs new): 1 vs 1 for 1" in text
    assert "significant at a false discovery rate of 0.05 (Benjamini-Hochberg" in text
    assert "by Welch's t on log per-run values" in text
    quiet = markdown(compare(base, base))
    assert quiet.startswith("### :white_check_mark: no regressions") and "Nothing moved" in quiet


@pytest.mark.parametrize(
    ("new_kwargs", "code", "verdict"),
    [
        (slower_compiled(1.4), 1, "REGRESSION: 1 regression(s) in 1 matched experiment(s)"),
        (slower_compiled(1.005), 0, "no regressions in 1 matched experiment(s)"),
    ],
)
def test_compare_command_exit_codes(tmp_path, new_kwargs, code, verdict):
    base, new = pair(slower_compiled(1.0), new_kwargs)
    write_report(base, tmp_path / "base.json")
    write_report(new, tmp_path / "new.json")
    result = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")])
    assert result.exit_code == code, result.output
    assert verdict in result.output
    md = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "-f", "markdown"])
    assert md.exit_code == code and md.output.startswith("### ")


def test_compare_threshold_option(tmp_path):
    base, new = pair(slower_compiled(1.0), slower_compiled(1.2))
    write_report(base, tmp_path / "base.json")
    write_report(new, tmp_path / "new.json")
    args = ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "--threshold", "0.3"]
    assert runner.invoke(app, args).exit_code == 0


def test_unreadable_input_exits_2_with_one_line(tmp_path):
    write_report(make_report([make_result()]), tmp_path / "good.json")
    (tmp_path / "bad.json").write_text("not json")
    for args in (["bad.json", "good.json"], ["good.json", "missing.json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", "compare", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")
        assert proc.stdout == ""


def invoke(tmp_path: Path, base: Report, new: Report, *options: str):
    write_report(base, tmp_path / "base.json")
    write_report(new, tmp_path / "new.json")
    return runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), *options])


def test_experiments_missing_from_new_exit_1_and_are_named_unless_allowed(tmp_path):
    base = make_report([make_result("a"), make_result("b"), make_result("seed.foo3")])
    new = make_report([make_result("a")])
    result = invoke(tmp_path, base, new)
    assert result.exit_code == 1, result.output
    assert "2 experiment(s) of base missing from new: b [inductor]; seed.foo3 [inductor]" in result.output
    assert "INCOMPLETE: 2 experiment(s) of base missing from new; no regressions in 1 matched" in result.output
    allowed = invoke(tmp_path, base, new, "--allow-missing")
    assert allowed.exit_code == 0, allowed.output
    assert "missing from new (allowed: --allow-missing): b [inductor]" in allowed.output
    assert "no regressions in 1 matched experiment(s); 2 experiment(s) of base missing from new (allowed)" in (
        allowed.output
    )


def test_an_incomplete_new_report_exits_1_unless_allowed(tmp_path):
    base, new = pair({}, {})
    new.complete = False
    result = invoke(tmp_path, base, new)
    assert result.exit_code == 1 and "INCOMPLETE: the new run did not finish" in result.output
    assert invoke(tmp_path, base, new, "--allow-missing").exit_code == 0


def test_a_regression_still_exits_1_with_allow_missing(tmp_path):
    base, new = pair(slower_compiled(1.0), slower_compiled(1.4))
    assert invoke(tmp_path, base, new, "--allow-missing").exit_code == 1


def test_the_metric_option_and_json_output(tmp_path):
    base = make_report(make_runs("seed.foo", [1.0, 1.005, 0.995], [2.0, 2.01, 1.99], seed=1))
    new = make_report(make_runs("seed.foo", [1.1, 1.105, 1.095], [2.2, 2.21, 2.19], seed=2))
    quiet = invoke(tmp_path, base, new, "-f", "json")
    assert quiet.exit_code == 0, quiet.output
    data = json.loads(quiet.output)
    assert (data["fails"], data["changes"], data["thresholds"]["metric"], data["runs"]) == (
        False,
        [],
        "speedup",
        {"3 vs 3": 1},
    )
    flagged = invoke(tmp_path, base, new, "--metric", "time", "-f", "json")
    assert flagged.exit_code == 1
    (change,) = json.loads(flagged.output)["changes"]
    assert (change["kind"], change["runs"], change["test"]) == ("slower", [3, 3], WELCH)
    assert change["p_value"] < 0.05


def test_a_changed_recommendation_is_printed_and_is_no_regression_by_itself():
    from orchestrator.report.compare import rows

    from .report_data import make_report, make_result

    def report(speedup: float, name: str):
        return make_report([make_result("seed.foo", speedup), make_result("seed.bar", 0.5)], name=name)

    base, new = report(3.0, "base"), report(0.8, "new")  # inductor's lead on seed.foo gone: ship eager
    c = compare(base, new)
    (changed,) = [ch for ch in c.changes if ch.kind == "recommendation"]
    assert changed.change == "inductor -> eager" and not changed.regression
    assert changed.target == "seed.foo" and changed.new.startswith("eager (no configuration is faster beyond noise")
    assert any(row[1] == "what to ship changed" for row in rows(c).rows)
    assert [ch.kind for ch in compare(base, report(3.0, "again")).changes if ch.kind == "recommendation"] == []
    stored = base.model_copy(deep=True)
    for g in stored.summary.groups:
        g.decision = None  # a summary written before decisions: derived again from the results
    assert [ch.change for ch in compare(stored, new).changes if ch.kind == "recommendation"] == ["inductor -> eager"]
