"""benchmarks/aa_noise.py: the injected target does its extra work on the compiled side only, the
figures it derives follow the gate's test, and ``--quick`` runs end to end and prints its three tables."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import aa_noise, aa_targets
from orchestrator.report.compare import welch_log

ROOT = Path(__file__).resolve().parents[1]


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


def test_quick_run_prints_false_alarms_detection_and_minimum_detectable_effects(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "aa_noise.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("$ python benchmarks/aa_noise.py --quick\n")
    chain = r"benchmarks\.aa_targets:chain n=4096"
    assert re.search(rf"^\| {chain} \| 1 \| [01] \| [01] \| [01] \| [01] \|$", out, re.M), out
    move = r"[+-]\d+\.\d%"
    assert re.search(rf"^\| \+10% \| {move} \| {move} \| [0-2]/2 \| {move} \| [0-2]/2 \|$", out, re.M), out
    percent = r"\d+\.\d%"
    assert re.search(rf"^\| {chain} \| \d+\.\d\dx \|( {percent} \|){{4}}$", out, re.M), out
    assert len(list(tmp_path.glob("run*-extra*.json"))) == 3
    again = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "aa_noise.py"), "--reports", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.splitlines()[1:] == out.splitlines()[1:]  # the same tables from the same reports
