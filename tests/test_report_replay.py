"""The replay table and verdict (orchestrator.report.replay) on crafted replay results: no torch run."""

from __future__ import annotations

from orchestrator.report import read, write_report
from orchestrator.report.cells import markdown_table
from orchestrator.report.replay import replay_rows, traffic_groups, verdict
from orchestrator.report.summary import summarize
from tasks.models import CompileConfig, ReplayResult, ShapeTiming
from tests.report_data import make_report, make_result

SHAPES = [(32, 0.6, 4.0, 3.0), (64, 0.4, 8.0, 5.0)]  # value, weight, eager ms, compiled ms (warm)


def replayed(compile: dict, eager_total: float, compiled_total: float, status: str = "ok", **kw):
    """A result that replayed 1,000 calls of two sizes: first-pass totals in ms as given."""
    r = make_result("blocks.transformer_layer", params={"dim": 256}, status=status, **kw)
    per_shape = [
        ShapeTiming(value=v, weight=w, eager_ms=e, compiled_ms=c, drawn=int(w * 1000)) for v, w, e, c in SHAPES
    ]
    rp = ReplayResult(
        param="seq",
        calls=1000,
        total_ms={"eager": eager_total, "compiled": compiled_total},
        compile_s=2.0,
        recompiles=1,
        recompile_limit_hit=compile.get("dynamic") is False,
        per_shape=per_shape,
        weighted_speedup=(0.6 * 4 + 0.4 * 8) / (0.6 * 3 + 0.4 * 5),
        weighted_speedup_ci=(1.4, 1.55),
        break_even_calls=2000 / (0.6 * 1 + 0.4 * 3),
    )
    # as tasks.replay fills a result: the speedup is the weighted one, no single shape was timed
    update = {"replay": rp, "speedup": rp.weighted_speedup, "speedup_ci": None, "eager": None, "compiled": None}
    return r.model_copy(update={"compile": CompileConfig(**compile), **update})


def policies():
    return [
        replayed({"dynamic": False}, 5600.0, 9100.0),
        replayed({"dynamic": True}, 5500.0, 6300.0),
        replayed({}, 5400.0, 5200.0),
        replayed({"mark_dynamic": [[0, 1]]}, 5700.0, 4900.0),
    ]


def test_one_row_per_replay_with_its_totals_compiles_and_steady_state():
    rows = replay_rows([*policies(), make_result("seed.foo")])  # a result without a replay has no row
    assert rows.headers == [
        "target", "config", "calls", "eager total s", "compiled total s", "first-pass speedup", "compile s",
        "recompiles", "limit hit", "weighted speedup", "95% CI", "break-even calls", "status",
    ]  # fmt: skip
    assert len(rows.rows) == 4
    assert rows.rows[0] == [
        "blocks.transformer_layer dim=256", "inductor+static", "1,000", "5.60", "9.10", "0.62x", "2.00", "1", "yes",
        "1.47x", "1.40-1.55", "1,111", "ok",
    ]  # fmt: skip
    assert [row[1] for row in rows.rows][3] == "inductor+mark_dynamic=0:1"
    assert "| inductor+dynamic |" in markdown_table(rows)


def test_the_verdict_names_the_policy_that_serves_the_calls_fastest_compile_included():
    assert verdict(policies()) == (
        "blocks.transformer_layer dim=256, 1,000 calls: inductor+mark_dynamic=0:1 serves them fastest, compile "
        "included: 1.16x eager (4.90 s against 5.70 s); inductor 1.04x, inductor+dynamic 0.87x, inductor+static 0.62x"
    )


def test_the_verdict_compares_each_policy_with_its_own_eager_pass():
    # the faster compiled total ran while the machine was fast for both sides: it does not win
    results = [replayed({}, 2000.0, 1900.0), replayed({"dynamic": True}, 5000.0, 3000.0)]
    assert (verdict(results) or "").startswith("blocks.transformer_layer dim=256, 1,000 calls: inductor+dynamic")


def test_eager_wins_when_no_policy_pays_for_its_compiles():
    line = verdict([replayed({"dynamic": False}, 5000.0, 9000.0), replayed({"dynamic": True}, 5000.0, 7000.0)])
    assert line == (
        "blocks.transformer_layer dim=256, 1,000 calls: eager serves them fastest, compile included: every policy "
        "took longer (inductor+dynamic 0.71x, inductor+static 0.56x)"
    )


def test_a_policy_that_failed_its_check_is_never_the_verdict():
    results = [replayed({"dynamic": True}, 5000.0, 3000.0, status="incorrect"), replayed({}, 5000.0, 4000.0)]
    line = verdict(results) or ""
    assert "inductor serves them fastest" in line and "inductor+dynamic" not in line


def test_other_traffic_gets_a_verdict_of_its_own_and_no_replay_none():
    other = replayed({}, 100.0, 90.0, seed=1)  # another seed draws another sequence
    assert len(traffic_groups([*policies(), other])) == 2
    assert len((verdict([*policies(), other]) or "").splitlines()) == 2
    assert verdict([make_result("seed.foo")]) is None
    assert replay_rows([make_result("seed.foo")]).notes == []


def test_replay_results_rank_by_their_weighted_speedup_and_are_not_recompiled_ones():
    summary = summarize(policies())
    assert summary.recompiled == []
    (group,) = summary.groups
    assert group.best is not None and group.best.speedup == policies()[0].replay.weighted_speedup


def test_a_report_keeps_replays_and_an_old_report_reads_without_them(tmp_path):
    report = make_report(policies())
    write_report(report, tmp_path / "r.json")
    back = read(tmp_path / "r.json")
    assert back.results[3].replay == policies()[3].replay
    assert back.results[3].compile.mark_dynamic == [(0, 1)]
    plain = make_result("seed.foo")
    assert plain.replay is None and "replay" not in plain.model_dump(exclude_defaults=True)
