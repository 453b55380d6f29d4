"""benchmarks/aa_noise.py: the injected target does its extra work on the compiled side only, the figures it
derives follow the gate's test, the gate flags nothing between unchanged runs and catches a slowdown larger
than the smallest it can see, and the tables print from a ``--quick`` run's reports (``tests/data/aa-noise``:
two A runs and one +10%, as ``python benchmarks/aa_noise.py --quick --out`` left them on the 2-core machine:
a smallest visible change of 57% on the speedup and 18% on the compiled median, from their spread)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import aa_noise, aa_targets
from orchestrator.plan.spec import load_spec
from orchestrator.report import Report
from tasks.models import Result
from tasks.stats import welch_log

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "aa-noise"


@pytest.mark.parametrize(("extra", "rounds"), [("", 20), ("0.05", 21), ("0.1", 22)])
def test_the_chain_runs_its_extra_rounds_only_when_compiled_and_its_outputs_stay_equal(monkeypatch, extra, rounds):
    import torch

    monkeypatch.setenv(aa_targets.EXTRA_ENV, extra)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    fn, (x,) = aa_targets.chain("cpu", n=64)
    out = torch.compile(fn, backend=backend)(x)
    (gm,) = graphs
    assert sum(node.target is torch.sin for node in gm.graph.nodes) == rounds
    assert torch.equal(out, fn(x))  # eager never runs the extra rounds, and they add zero
    assert aa_targets.extra_rounds() == rounds - 20


def test_minimum_detectable_effect_is_where_welch_on_three_runs_a_side_reaches_alpha():
    sd = 0.02
    mde = aa_noise.minimum_detectable(sd)
    base = [math.exp(x) for x in (-sd, 0.0, sd)]  # log values with sample SD exactly sd
    test = welch_log(base, [x * (1 + mde) for x in base])
    assert test.p == pytest.approx(0.05, rel=1e-6) and test.detectable == pytest.approx(1 + mde)
    assert aa_noise.pooled_sd([[1.0, 2.0, 3.0], [10.0, 12.0, 14.0], [5.0]]) == pytest.approx((5 / 2) ** 0.5)


def test_the_simulation_shows_welch_near_alpha_under_no_change_and_mann_whitney_never_flagging():
    rows = {(spread, shift): rates for spread, shift, *rates in aa_noise.simulate(trials=2000)}
    percent = {key: [float(r.rstrip("%")) for r in rates] for key, rates in rows.items()}
    welch, _student, gate, u = zip(*percent.values(), strict=True)
    assert set(u) == {0.0}  # 3 against 3: the smallest two-sided p is 0.1
    assert 1.5 < percent[("2%", "+0%")][0] < 6 and percent[("2%", "+10%")][0] > 90
    assert percent[("1% vs 6%", "+0%")][1] > percent[("1% vs 6%", "+0%")][0]  # Student's runs over with unequal spreads
    assert all(g <= w for g, w in zip(gate, welch, strict=True))


def slowed(report: Report, factor: float) -> Report:
    """The report as if the chain's compiled side had taken ``factor`` times as long in every run."""

    def slow(r: Result) -> Result:
        if r.target != aa_noise.CHAIN or r.compiled is None or r.speedup is None:
            return r
        times = ("median_ms", "min_ms", "mean_ms", "iqr_ms", "first_call_ms")
        scaled = {name: getattr(r.compiled, name) * factor for name in times}
        compiled = r.compiled.model_copy(update={**scaled, "samples_ms": [s * factor for s in r.compiled.samples_ms]})
        return r.model_copy(update={"compiled": compiled, "speedup": r.speedup / factor})

    return report.model_copy(update={"results": [slow(r) for r in report.results]})


def test_unchanged_runs_flag_nothing_and_a_slowdown_beyond_what_the_gate_can_see_is_caught():
    runs, _ = aa_noise.read_runs(DATA)
    (exp_id,) = aa_noise.labels(runs[0].report)
    a, b = (run.report for run in runs if run.extra == 0)
    for metric in ("speedup", "time"):
        assert aa_noise.flagged(a, a, exp_id, metric) is None and aa_noise.flagged(a, b, exp_id, metric) is None
    *_, everything = aa_noise.false_alarms(runs)
    assert everything[:4] == ["all", "1", "0", "0"]  # one A/A pair, no false alarm on either metric

    def visible(metric: aa_noise.Metric) -> float:
        """A slowdown half as large again as the least the gate can see on ``metric``: the threshold, or the
        minimum detectable effect of the wider spread of the two A runs, whichever is larger."""
        sd = max(aa_noise.pooled_sd([aa_noise.log_values(report, metric)[exp_id]]) for report in (a, b))
        return 1 + 1.5 * max(aa_noise.minimum_detectable(sd), aa_noise.SPEED_THRESHOLD)

    for metric in ("speedup", "time"):
        assert aa_noise.flagged(a, slowed(a, visible(metric)), exp_id, metric) == "slower"
        assert aa_noise.flagged(slowed(a, visible(metric)), a, exp_id, metric) == "faster"
        assert aa_noise.flagged(a, slowed(a, 1 + aa_noise.SPEED_THRESHOLD / 2), exp_id, metric) is None  # within it
    factor = max(visible("speedup"), visible("time"))
    slow_runs = [aa_noise.Run(0.0, a), aa_noise.Run(0.0, b), aa_noise.Run(0.5, slowed(b, factor))]
    (row,) = aa_noise.detection(slow_runs, {})
    assert row[0] == "+50%" and row[3] == row[5] == "2/2"  # both A -> slowed comparisons caught, on both metrics


def test_quick_writes_its_spec_runs_in_order_and_notes_the_session(tmp_path, monkeypatch, capsys):
    """``run_all`` with each ``compilebench run`` served from the committed reports: the spec it writes, the
    order and ``session.json``, then the same tables as from the reports themselves."""
    ran = []

    def run_spec(spec: Path, out: Path, extra: float) -> aa_noise.Run:
        ran.append((spec.name, out.name, extra))
        out.write_bytes((DATA / out.name).read_bytes())
        return aa_noise.Run(extra, aa_noise.read(out))

    measured = json.loads((DATA / "session.json").read_text())["measured"]
    monkeypatch.setattr(aa_noise, "run_spec", run_spec)
    monkeypatch.setattr(aa_noise, "measure_extra", lambda extras, rounds, n: {e: measured[str(e)] for e in extras})
    aa_noise.run_all(tmp_path, quick=True)
    assert ran == [("aa-noise.yaml", f"run{i}-extra{e:g}.json", e) for i, e in enumerate(aa_noise.QUICK_ORDER)]
    (experiment,) = load_spec(tmp_path / "aa-noise.yaml").experiments
    assert (experiment.target, experiment.params, experiment.replicates) == (aa_noise.CHAIN, {"n": 4096}, 3)
    capsys.readouterr()
    aa_noise.analyse(tmp_path, "from the fakes")
    fakes = capsys.readouterr().out.splitlines()
    aa_noise.analyse(DATA, "from the reports")
    assert fakes[2:] == capsys.readouterr().out.splitlines()[2:]  # the same tables from the same reports


def test_the_reports_print_false_alarms_detection_and_minimum_detectable_effects():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "aa_noise.py"), "--reports", str(DATA)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith(f"$ python benchmarks/aa_noise.py --reports {DATA}\n")
    chain = r"benchmarks\.aa_targets:chain n=4096"
    assert re.search(rf"^\| {chain} \| 1 \| 0 \| 0 \| [01] \| [01] \|$", out, re.M), out
    move = r"[+-]\d+\.\d%"
    assert re.search(rf"^\| \+10% \| {move} \| {move} \| [0-2]/2 \| {move} \| [0-2]/2 \|$", out, re.M), out
    percent = r"\d+\.\d%"
    assert re.search(rf"^\| {chain} \| \d+\.\d\dx \|( {percent} \|){{4}}$", out, re.M), out
    assert len(list(DATA.glob("run*-extra*.json"))) == 3
