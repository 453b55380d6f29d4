"""The regression gate on crafted pairs of reports: real regressions caught, noise let through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import write_report
from orchestrator.report.compare import Thresholds, compare, mann_whitney_p, markdown
from tests.report_data import make_report, make_result

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def pair(base_kwargs: dict, new_kwargs: dict, **common):
    """Two one-result reports of the same experiment, with different samples."""
    base = make_report([make_result(**{**common, **base_kwargs}, sample_seed=1)], name="base")
    new = make_report([make_result(**{**common, **new_kwargs}, sample_seed=2)], name="new")
    return base, new


def kinds(comparison) -> list[tuple[str, bool]]:
    return [(c.kind, c.regression) for c in comparison.changes]


def test_a_real_20_percent_slowdown_is_a_regression():
    base, new = pair({"compiled_ms": 1.0}, {"compiled_ms": 1.2}, speedup=2.0)
    c = compare(base, new)
    assert kinds(c) == [("slower", True)]
    (change,) = c.regressions
    assert change.change == "time +20.0%, speedup +0.2%" or change.change.startswith("time +")
    assert change.p_value is not None and change.p_value < 0.001


def test_a_speedup_that_dropped_20_percent_is_a_regression():
    base, new = pair({"speedup": 2.5}, {"speedup": 2.0}, compiled_ms=1.0)
    assert kinds(compare(base, new)) == [("slower", True)]


def test_one_percent_of_noise_is_not_flagged():
    base, new = pair({"compiled_ms": 1.0}, {"compiled_ms": 1.01}, speedup=2.0, noise=0.02)
    c = compare(base, new)
    assert c.changes == [] and c.regressions == [] and c.matched == 1


def test_a_large_move_that_is_not_significant_is_not_flagged():
    """10% slower medians, but from 3 very noisy samples a side: beyond the threshold, not significant."""
    base, new = pair({"compiled_ms": 1.0}, {"compiled_ms": 1.1}, speedup=2.0, noise=0.3, n=3)
    c = compare(base, new)
    assert c.regressions == []
    assert any("fewer than 9 samples" in w for w in c.warnings)


def test_a_faster_result_is_reported_and_not_a_regression():
    base, new = pair({"compiled_ms": 1.0}, {"compiled_ms": 0.7}, speedup=2.0)
    assert kinds(compare(base, new)) == [("faster", False)]


def test_a_new_failure_is_always_a_regression_and_a_new_pass_is_not():
    base, new = pair({}, {"status": "compile_error", "speedup": None, "message": "Unsupported: boom"})
    c = compare(base, new)
    assert kinds(c) == [("new_failure", True)]
    assert c.changes[0].change == "Unsupported: boom" and (c.changes[0].base, c.changes[0].new) == (
        "ok",
        "compile_error",
    )
    assert kinds(compare(new, base)) == [("new_pass", False)]


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
    assert c.warnings == ["device models differ: A100 vs H100", "torch versions differ: 2.12.0 vs 2.13.0"]
    assert c.matched == 1


def test_experiments_in_one_report_only_are_listed():
    c = compare(make_report([make_result("a"), make_result("b")]), make_report([make_result("a"), make_result("c")]))
    assert (c.matched, c.only_in_base, c.only_in_new) == (1, ["b [inductor]"], ["c [inductor]"])


def test_thread_counts_that_differ_are_warned():
    base, new = pair({}, {})
    new.results[0].worker.threads = 2
    assert compare(base, new).warnings == ["worker threads differ: 1 vs 2"]


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
    assert compare(base, new).warnings == [
        "compile options (inductor config) differ for 1 experiment(s) in max_autotune (e.g. seed.foo [inductor])"
    ]


def test_an_incomplete_report_is_warned():
    base, new = pair({}, {})
    new.complete = False
    assert "the new report is incomplete (its run did not finish)" in compare(base, new).warnings


def test_mann_whitney_on_identical_or_missing_samples_is_not_significant():
    assert mann_whitney_p([1.0] * 10, [1.0] * 10) == 1.0
    assert mann_whitney_p([], [1.0]) == 1.0
    assert mann_whitney_p([1.0, 1.1, 1.2] * 5, [2.0, 2.1, 2.2] * 5) < 0.001


def test_markdown_is_a_pull_request_comment():
    base, new = pair({"compiled_ms": 1.0}, {"compiled_ms": 1.2}, speedup=2.0)
    text = markdown(compare(base, new))
    assert text.startswith(":x:".join(["### ", " REGRESSION: 1 regression(s) in 1 matched experiment(s)"]))
    assert "| REGRESSION | slower | seed.foo | inductor |" in text
    quiet = markdown(compare(base, base))
    assert quiet.startswith("### :white_check_mark: no regressions") and "Nothing moved" in quiet


@pytest.mark.parametrize(
    ("new_kwargs", "code", "verdict"),
    [
        ({"compiled_ms": 1.2}, 1, "REGRESSION: 1 regression(s) in 1 matched experiment(s)"),
        ({"compiled_ms": 1.005}, 0, "no regressions in 1 matched experiment(s)"),
    ],
)
def test_compare_command_exit_codes(tmp_path, new_kwargs, code, verdict):
    base, new = pair({"compiled_ms": 1.0}, new_kwargs, speedup=2.0)
    write_report(base, tmp_path / "base.json")
    write_report(new, tmp_path / "new.json")
    result = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")])
    assert result.exit_code == code, result.output
    assert verdict in result.output
    md = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "-f", "markdown"])
    assert md.exit_code == code and md.output.startswith("### ")


def test_compare_threshold_option(tmp_path):
    base, new = pair({"compiled_ms": 1.0}, {"compiled_ms": 1.2}, speedup=2.0)
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
