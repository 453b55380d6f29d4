"""The gate on many experiments at once: Benjamini-Hochberg across a comparison, the empirical null of a sweep
without replicates, the sweep-wide shift, the small-sweep fallback (an A/A noise figure, or untested), compile
latency across replicates, and the committed A/A pair of ``benchmarks/gate_fdr.py``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import false_discovery_control, median_abs_deviation, norm
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.report import Report, write_report
from orchestrator.report.compare import (
    AA_NOISE,
    EMPIRICAL,
    MIN_SWEEP,
    ONE_SAMPLE,
    UNTESTED,
    WELCH,
    WILCOXON,
    Move,
    NoiseFigure,
    Thresholds,
    compare,
    judge,
    markdown,
    measure_noise,
    read_noise,
    rows,
    save_noise,
)
from tasks.stats import fdr_adjust, median_shift
from tests.report_data import make_report, make_result, make_runs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "gate-fdr"
runner = CliRunner()


def sweep_pair(changes: Sequence[float], sd: float = 0.02, seed: int = 0) -> tuple[Report, Report]:
    """Two reports of ``len(changes)`` experiments (seed.foo, params i), one run each: each run's speedup is 2.0
    times log-normal run-to-run noise of ``sd``, new's also times 1 + its change (negative: slower)."""
    rng = np.random.default_rng(seed)
    sides: tuple[list, list] = ([], [])
    for i, change in enumerate(changes):
        for side, factor in zip(sides, (1.0, 1 + change), strict=True):
            speedup = 2.0 * factor * math.exp(rng.normal(0, sd))
            side.append(make_result("seed.foo", speedup, params={"i": i}, noise=0.0005, n=5, sample_seed=i))
    return make_report(sides[0], name="base"), make_report(sides[1], name="new")


def regressions(c) -> list[str]:
    return [ch.kind for ch in c.regressions]


def test_fdr_adjust_is_scipy_benjamini_hochberg():
    ps = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.5, 0.9]
    assert fdr_adjust(ps) == pytest.approx(list(false_discovery_control(ps, method="bh")))
    assert fdr_adjust([0.01]) == [0.01] and fdr_adjust([]) == []


def test_four_hundred_unchanged_experiments_flag_nothing_where_alone_twenty_would_be_flagged():
    """One run a side, 400 experiments, nothing changed: about 5% of raw p-values fall below 0.05 (the empirical
    null is the sweep's own spread), none survives the false discovery rate, and the sweep did not shift."""
    base, new = sweep_pair([0.0] * 400, sd=0.03, seed=1)
    c = compare(base, new)
    assert c.regressions == [] and not c.fails and c.tests == {"speed": 400, "compile": 0}
    (noise,) = c.noise
    assert (noise.source, noise.experiments) == ("sweep", 400)
    moves = [Move(math.log(n.speedup / b.speedup), (1, 1)) for b, n in zip(base.results, new.results, strict=True)]
    raw = [p for p in judge("CPU (Xeon)", "speedup", moves, []).p if p is not None]
    assert 8 <= sum(p < 0.05 for p in raw) <= 35  # what testing each at alpha 0.05 on its own would flag


def test_planted_slowdowns_among_four_hundred_are_caught_and_nothing_else():
    planted = set(range(0, 400, 40))  # 10 experiments 20% slower, run-to-run noise 1% a run
    base, new = sweep_pair([-0.2 if i in planted else 0.0 for i in range(400)], sd=0.01, seed=2)
    c = compare(base, new)
    flagged = {int(json.loads(json.dumps(ch.target)).split("i=")[1]) for ch in c.regressions}
    assert flagged == planted
    assert all(ch.test == EMPIRICAL and ch.p_adjusted is not None and ch.p_adjusted < 0.05 for ch in c.regressions)
    assert all(ch.p_value is not None and ch.p_value <= ch.p_adjusted for ch in c.regressions)


def test_a_quiet_experiments_move_is_judged_by_its_own_noise_not_by_the_noisiest():
    """One run a side, 120 experiments: 60 whose calls scatter by 0.5% a sample and 60 by 10% (31 samples each),
    each run's speedup as far off as its own samples make it. 5 quiet experiments 10% slower: 40 of their own
    standard errors, twice the noisy ones' spread. Standardized by each run's standard error (from its samples'
    IQR) the 5 are flagged and nothing else; judged on the raw moves, against the null every experiment
    shares, the noisy half's tails hide them."""
    planted = {0, 24, 48, 72, 96}  # even i: quiet
    sides: tuple[list, list] = ([], [])
    for i in range(120):
        for k, factor in enumerate((1.0, 0.9 if i in planted else 1.0)):
            noise = 0.005 if i % 2 == 0 else 0.10
            run = make_result("seed.foo", 2.0 * factor, params={"i": i}, noise=noise, n=31, sample_seed=2 * i + k)
            sides[k].append(run)
    base, new = make_report(sides[0], name="base"), make_report(sides[1], name="new")
    c = compare(base, new)
    assert {int(ch.target.split("i=")[1]) for ch in c.regressions} == planted
    (noise,) = c.noise
    assert noise.source == "sweep" and noise.se_spread is not None and noise.between is not None
    moves = [Move(math.log(n.speedup / b.speedup), (1, 1)) for b, n in zip(base.results, new.results, strict=True)]
    judged = judge("CPU (Xeon)", "speedup", moves, [])
    assert judged.noise.se_spread is None and judged.noise.df is not None  # heavy-tailed: Student's t
    adjusted = fdr_adjust([p for p in judged.p if p is not None])
    assert not any(adjusted[i] < 0.05 for i in planted)


def test_standardized_moves_fit_the_drift_beyond_their_own_noise_and_floor_a_zero_standard_error():
    """Moves that scatter by their own standard errors keep no run-to-run part; moves that drift by 5% beyond
    standard errors of 1% get one of about 5%, and then spread by 1; a standard error of 0 counts as the
    smallest other; one unknown standard error, or none above 0, leaves the moves unstandardized."""
    from orchestrator.report.compare.noise import standardized

    rng = np.random.default_rng(3)
    se = rng.uniform(0.01, 0.05, 400)
    own = standardized([Move(float(x), (1, 1), float(s)) for x, s in zip(rng.normal(0, se), se, strict=True)], 0.0)
    assert own is not None and own.between < 0.005
    drift = rng.normal(0, np.hypot(0.01, 0.05), 400)
    fitted = standardized([Move(float(x), (1, 1), 0.01) for x in drift], 0.0)
    assert fitted is not None and 0.04 < fitted.between < 0.06
    assert median_abs_deviation(fitted.values, scale="normal") == pytest.approx(1.0, abs=1e-6)
    floored = standardized([Move(0.02, (1, 1), 0.0), Move(0.02, (1, 1), 0.01), Move(-0.02, (1, 1), 0.04)], 0.0)
    assert floored is not None and floored.values[0] == floored.values[1]
    assert standardized([Move(0.02, (1, 1), None), Move(0.02, (1, 1), 0.01)], 0.0) is None
    assert standardized([Move(0.02, (1, 1), 0.0), Move(0.01, (1, 1), 0.0)], 0.0) is None


def test_a_change_significant_alone_is_not_flagged_among_twenty_tests_unless_the_fdr_allows(tmp_path):
    """3 runs a side: one experiment 9% slower with Welch's p near 0.015, 19 unchanged. Alone it is a regression;
    among 20 tests its adjusted p is 20 times its raw p, above 0.05; --fdr 0.5 flags it again."""
    moved = ([1.0, 1.03, 0.97], [1.07, 1.1, 1.13])
    lone = compare(*(make_report(make_runs("seed.foo", ms, seed=s)) for s, ms in enumerate(moved)))
    (alone,) = lone.regressions
    assert alone.test == WELCH and alone.p_value is not None and 0.0025 < alone.p_value < 0.05
    assert alone.p_adjusted == pytest.approx(alone.p_value)
    sides = []
    for s, ms in enumerate(moved):
        runs = make_runs("seed.foo", ms, seed=s)
        for i in range(19):
            runs += make_runs("seed.foo", [1.0, 1.01, 0.99], params={"i": i}, seed=s * 100 + i)
        sides.append(make_report(runs))
    assert compare(*sides).regressions == []
    loose = compare(*sides, Thresholds(fdr=0.5))
    (flagged,) = loose.regressions
    assert flagged.p_value == pytest.approx(alone.p_value)
    assert flagged.p_adjusted == pytest.approx(alone.p_value * 20)
    assert (alone.p_value * 20 > 0.05) and loose.tests["speed"] == 20
    write_report(sides[0], tmp_path / "base.json")
    write_report(sides[1], tmp_path / "new.json")
    args = ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")]
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, [*args, "--fdr", "0.5"]).exit_code == 1
    data = json.loads(runner.invoke(app, [*args, "--fdr", "0.5", "-f", "json"]).output)
    (change,) = [ch for ch in data["changes"] if ch["regression"]]
    assert change["p_adjusted"] == pytest.approx(alone.p_value * 20) and data["thresholds"]["fdr"] == 0.5


def test_each_one_run_change_gets_a_p_value_against_the_sweeps_median_and_mad():
    changes = [0.0] * 59 + [-0.15]
    base, new = sweep_pair(changes, sd=0.01, seed=3)
    logs = [math.log(n.speedup / b.speedup) for b, n in zip(base.results, new.results, strict=True)]
    c = compare(base, new)
    (noise,) = c.noise
    centre, spread = float(np.median(logs)), float(median_abs_deviation(logs, scale="normal"))
    assert (noise.centre, noise.spread) == (pytest.approx(centre), pytest.approx(spread))
    (change,) = c.regressions
    assert change.test == EMPIRICAL and change.target == "seed.foo i=59"
    assert change.p_value == pytest.approx(2 * norm.sf(abs(logs[-1] - centre) / spread))
    ps = [2 * norm.sf(abs(x - centre) / spread) for x in logs]
    assert change.p_adjusted == pytest.approx(false_discovery_control(ps, method="bh")[-1])
    text = markdown(c)
    assert "judged against the sweep's own noise (empirical null)" in text and "| p adj |" in text
    assert rows(c).rows[0][-2:] == [f"{change.p_value:.2g}", f"{change.p_adjusted:.2g}"]


def test_every_experiment_a_little_slower_is_one_sweep_wide_verdict(tmp_path):
    """60 experiments each 5% slower, 1% noise a run: no experiment stands out of the sweep's spread, the median
    move does: one regression, the whole sweep's, from Wilcoxon's signed-rank test."""
    base, new = sweep_pair([-0.05] * 60, sd=0.01, seed=4)
    c = compare(base, new)
    (change,) = c.regressions
    assert (change.kind, change.test, change.runs) == ("sweep_slower", WILCOXON, (60, 60))
    assert change.change.startswith("median speedup -") and change.p_value is not None and change.p_value < 1e-6
    assert c.fails and "(1 of them the whole sweep's shift)" in markdown(c)
    assert median_shift([-0.05] * 3 + [0.01]).p > 0.05  # a few values cannot make one
    unchanged = compare(*sweep_pair([0.0] * 60, sd=0.01, seed=4))
    assert unchanged.regressions == [] and unchanged.noise[0].shift_p is not None
    write_report(base, tmp_path / "base.json")
    write_report(new, tmp_path / "new.json")
    result = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json")])
    assert result.exit_code == 1 and "the whole sweep slower" in result.output


def test_a_small_sweep_is_untested_without_an_aa_figure_and_judged_by_one_with_it(tmp_path):
    """5 experiments, one run a side (fewer than MIN_SWEEP): without a figure a 12% slowdown is listed untested and
    passes; with a stored A/A figure of 2% for the device model it is tested (centred on 0) and fails."""
    assert MIN_SWEEP == 20
    changes = [0.0, 0.0, -0.12, 0.0, 0.0]
    base, new = sweep_pair(changes, sd=0.002, seed=5)
    c = compare(base, new)
    (change,) = c.changes
    assert (change.regression, change.test, change.p_value) == (False, UNTESTED, None)
    assert c.noise[0].source == "none" and not c.fails
    figure = NoiseFigure(
        device_model="CPU (Xeon)",
        metric="speedup",
        spread=0.02,
        experiments=120,
        base="a.json",
        new="b.json",
        measured_at="2026-12-04T18:00:00+00:00",
    )
    judged = compare(base, new, noise=[figure])
    (change,) = judged.changes
    assert (change.regression, change.test) == (True, AA_NOISE)
    assert change.p_value == pytest.approx(
        2 * norm.sf(abs(math.log(new.results[2].speedup / base.results[2].speedup)) / 0.02)
    )
    assert judged.noise[0].source == "aa" and judged.noise[0].figure == figure
    assert "judged against the A/A noise figure, 2.0% a run against a run" in markdown(judged)
    other = figure.model_copy(update={"device_model": "H100"})
    assert compare(base, new, noise=[other]).noise[0].source == "none"  # another device model's figure is no use


def test_save_noise_stores_an_aa_pairs_spread_and_noise_uses_it(tmp_path):
    aa_base, aa_new = sweep_pair([0.0] * 30, sd=0.02, seed=6)
    (speedup,) = measure_noise(aa_base, aa_new)  # no time figure: both sides' compiled samples are the same
    logs = [math.log(n.speedup / b.speedup) for b, n in zip(aa_base.results, aa_new.results, strict=True)]
    assert speedup.spread == pytest.approx(float(np.median(np.abs(logs))) / norm.ppf(0.75))
    assert (speedup.experiments, speedup.device_model, speedup.metric) == (30, "CPU (Xeon)", "speedup")
    assert measure_noise(aa_base, aa_base) == []  # a report against itself measures nothing
    for name, report in (("a.json", aa_base), ("b.json", aa_new)):
        write_report(report, tmp_path / name)
    noise = str(tmp_path / "noise.json")
    h100 = speedup.model_copy(update={"device_model": "H100"})
    save_noise(noise, [h100])
    saved = runner.invoke(app, ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--save-noise", noise])
    assert saved.exit_code == 0, saved.output
    assert "A/A noise of CPU (Xeon) (speedup): " in saved.output
    assert [(f.device_model, f.metric) for f in read_noise(noise)] == [("H100", "speedup"), ("CPU (Xeon)", "speedup")]
    base, new = sweep_pair([0.0, -0.3, 0.0], sd=0.002, seed=7)
    write_report(base, tmp_path / "base.json")
    write_report(new, tmp_path / "new.json")
    args = ["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "-f", "json"]
    data = json.loads(runner.invoke(app, [*args, "--noise", noise]).output)
    assert data["noise"][0]["source"] == "aa" and data["noise"][0]["figure"]["experiments"] == 30
    (change,) = data["changes"]
    assert change["test"] == AA_NOISE and change["regression"] and change["p_adjusted"] is not None
    bad = runner.invoke(app, [*args, "--noise", str(tmp_path / "base.json")])
    assert bad.exit_code == 2 and "--noise: " in bad.output and "not a noise file" in bad.output
    too_few = runner.invoke(app, [*args, "--save-noise", str(tmp_path / "few.json")])
    assert too_few.exit_code == 2 and "too few to measure run-to-run noise" in too_few.output


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.1"])
def test_a_bad_fdr_is_one_line_and_exit_2(tmp_path, value):
    write_report(make_report([make_result()]), tmp_path / "r.json")
    result = runner.invoke(app, ["compare", str(tmp_path / "r.json"), str(tmp_path / "r.json"), "--fdr", value])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line == f"error: --fdr {float(value):g}: the false discovery rate must be between 0 and 1 (e.g. 0.05)"


def compile_runs(latencies: Sequence[float], seed: int, **kwargs) -> list:
    runs = make_runs("seed.foo", [1.0] * len(latencies), seed=seed, **kwargs)
    for r, s in zip(runs, latencies, strict=True):
        r.compile_latency_s = s
    return runs


def test_compile_latency_with_replicates_is_tested_like_the_timings():
    """3 runs a side: a 30% slower compile whose runs agree is flagged with Welch's p (adjusted); one whose runs
    scatter more than it moved is not; one run a side is "one sample", by the 15% threshold alone."""
    steady = compare(
        make_report(compile_runs([1.0, 1.02, 0.98], 1)),
        make_report(compile_runs([1.3, 1.32, 1.28], 2)),
        Thresholds(gate_compile=True),
    )
    (change,) = steady.changes
    assert (change.kind, change.regression, change.test, change.runs) == ("compile_slower", True, WELCH, (3, 3))
    assert change.p_value is not None and change.p_value < 0.01 and change.p_adjusted == pytest.approx(change.p_value)
    assert steady.tests == {"speed": 1, "compile": 1}
    scattered = compare(make_report(compile_runs([0.6, 1.0, 1.4], 1)), make_report(compile_runs([0.8, 1.3, 1.8], 2)))
    assert [ch.kind for ch in scattered.changes] == []
    one = compare(make_report(compile_runs([1.0], 1)), make_report(compile_runs([1.3], 2)))
    (change,) = one.changes
    assert (change.kind, change.test, change.note, change.p_value) == ("compile_slower", UNTESTED, ONE_SAMPLE, None)
    assert rows(one).rows[0][-2:] == ["one sample", "-"]


def test_a_cold_compile_is_never_compared_with_a_warm_one():
    """The same experiment whose compile ran cold on one side (a report from before cache states were part of
    the id, or an edited one) and warm on the other: not compared, not gated, and said so."""
    base = make_report(compile_runs([0.05, 0.05, 0.05], 1))
    cold = [
        r.model_copy(update={"compile": r.compile.model_copy(update={"cache": "cold"})})
        for r in compile_runs([8.0] * 3, 2)
    ]
    c = compare(base, make_report(cold), Thresholds(gate_compile=True))
    assert [ch.kind for ch in c.changes if ch.kind.startswith("compile")] == [] and not c.regressions
    (warning,) = [w for w in c.warnings if "compile latency" in w]
    assert "not compared and not gated" in warning and "cache warm vs cold" in warning


def test_the_committed_aa_pair_passes_the_gate_and_the_injected_slowdowns_hide_in_its_noise(tmp_path):
    """``benchmarks/gate_fdr.py``'s two runs of one 120-experiment spec on the 2-core machine at a load average
    of 10-15 (``tests/data/gate-fdr``, compact copies), through the CLI, the outcomes it printed: the A/A pair
    exits 0 with no regression (its moves spread by 86% a run; standardized by each run's own standard error
    they still spread more than those account for, so a run-to-run part is fitted, making their spread 1);
    5 experiments made 10% slower in a copy of b, and every experiment made 5% slower, are within that noise:
    nothing is flagged, the sweep's median move is not significant."""
    from benchmarks import gate_fdr

    a, b = DATA / "a.json", DATA / "b.json"
    result = runner.invoke(app, ["compare", str(a), str(b), "-f", "json"])
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["regressions"] <= 1 and data["matched"] == 120
    (noise,) = data["noise"]
    assert noise["source"] == "sweep" and noise["spread"] > 0.5
    assert noise["se_spread"] == pytest.approx(1.0) and noise["between"] > 0.01
    report = gate_fdr.read(b)
    ids = gate_fdr.chosen(report)
    write_report(gate_fdr.slowed(report, gate_fdr.INJECTED, set(ids)), tmp_path / "five.json")
    write_report(gate_fdr.slowed(report, gate_fdr.SWEEP), tmp_path / "all.json")
    for name in ("five.json", "all.json"):
        judged = runner.invoke(app, ["compare", str(a), str(tmp_path / name), "-f", "json"])
        assert judged.exit_code == 0 and json.loads(judged.output)["regressions"] == 0
    slowed = {r.experiment_id: r for r in gate_fdr.read(tmp_path / "five.json").results}
    for r in report.results:
        factor = 1.1 if r.experiment_id in ids else 1.0
        assert slowed[r.experiment_id].compiled.median_ms == pytest.approx(r.compiled.median_ms * factor, rel=1e-4)


def test_the_committed_building_blocks_pair_meets_every_goal_of_the_gate(tmp_path):
    """``benchmarks/gate_fdr.py``'s building-blocks sweep (120 experiments, 30 samples a side) run twice on the
    2-core machine, quiet (``tests/data/gate-fdr-blocks``, compact copies), through the CLI: the A/A pair exits 0
    with no regression; with 5 experiments made 10% slower in a copy of b, at least 4 of them are flagged and
    nothing else; with every experiment 5% slower, the sweep-wide verdict. Each run's moves are judged in units
    of their own standard error (no run-to-run part needed: they spread by less than 1 of them)."""
    from benchmarks import gate_fdr

    folder = ROOT / "tests" / "data" / "gate-fdr-blocks"
    a, b = folder / "a.json", folder / "b.json"
    result = runner.invoke(app, ["compare", str(a), str(b), "-f", "json"])
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["regressions"] == 0 and data["matched"] == 120
    (noise,) = data["noise"]
    assert noise["source"] == "sweep" and noise["se_spread"] < 1 and noise["between"] == 0
    report = gate_fdr.read(b)
    ids = gate_fdr.chosen(report)
    write_report(gate_fdr.slowed(report, gate_fdr.INJECTED, set(ids)), tmp_path / "five.json")
    write_report(gate_fdr.slowed(report, gate_fdr.SWEEP), tmp_path / "all.json")
    five = json.loads(runner.invoke(app, ["compare", str(a), str(tmp_path / "five.json"), "-f", "json"]).output)
    flagged = {c["experiment_id"] for c in five["changes"] if c["regression"]}
    assert len(flagged & set(ids)) >= 4 and flagged <= set(ids)
    every = json.loads(runner.invoke(app, ["compare", str(a), str(tmp_path / "all.json"), "-f", "json"]).output)
    (sweep,) = [c for c in every["changes"] if c["kind"] == "sweep_slower"]
    assert sweep["regression"] and sweep["p_value"] < 1e-10
