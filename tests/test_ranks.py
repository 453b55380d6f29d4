"""Distributed results in the report: grouped by strategy and world size, ranked by the strategy's options,
a row a rank, and compile's speedup scaled from 1 to k ranks; on the HTML page and in history."""

from __future__ import annotations

from typing import Any

from orchestrator.report.history import build_history
from orchestrator.report.html import render_html
from orchestrator.report.models import gang_label, result_group
from orchestrator.report.ranks import rank_rows, scaling, scaling_rows
from orchestrator.report.views import views
from tasks.models import DistributedConfig, DistributedResult, RankFigures, Result
from tasks.stats import side_timing
from tests.report_data import make_report, make_result


def ranked_result(world_size: int, speedup: float, *, strategy: str = "ddp", seed: int = 0, **options: Any) -> Result:
    """A distributed result of ``models.gpt`` whose ranks ran ``speedup`` x faster compiled, rank 1 slower."""
    config = DistributedConfig(strategy=strategy, world_size=world_size, **options)
    r = make_result("models.gpt", speedup, compiled_ms=10.0, seed=seed)
    r.phase = "training"
    r.experiment_id = f"{r.experiment_id}-{config.label()}"
    ranks = [
        RankFigures(
            rank=i,
            hostname="node-1",
            gpu_ids=[str(i)],
            eager=side_timing(speedup * 10.0 * (1 + i / 10), [speedup * 10.0 * (1 + i / 10)] * 5, warmup=1),
            compiled=side_timing(10.0 * (1 + i / 10), [10.0 * (1 + i / 10)] * 5, warmup=1),
            compile_latency_s=4.0 + i,
            graph_count=2,
            graph_breaks=0,
            ddp_splits=1 if strategy == "ddp" else None,
        )
        for i in range(world_size)
    ]
    r.distributed = DistributedResult(
        config=config,
        world_size=world_size,
        backend="gloo",
        ranks=ranks,
        throughput={"eager": 100.0 * world_size / speedup, "compiled": 100.0 * world_size * 0.9},
        disagreements=["rank 1 recompiled once, rank 0 did not"] if world_size > 1 else [],
    )
    return r


def test_world_sizes_are_groups_of_their_own_and_options_are_configurations():
    one, two = ranked_result(1, 1.5), ranked_result(2, 1.2)
    reducer = ranked_result(2, 1.4, optimize_ddp="off")
    single = make_result("models.gpt", 1.6, compiled_ms=10.0)
    single.phase = "training"
    assert gang_label(two) == "ddp x2" and gang_label(single) is None
    assert result_group(two) == "models.gpt training ddp x2"
    assert reducer.config_label == "inductor+optimize_ddp=off" and two.config_label == "inductor"
    summary = make_report([single, one, two, reducer]).summary
    labels = [g.label for g in summary.groups]
    assert labels == ["models.gpt training", "models.gpt training ddp x1", "models.gpt training ddp x2"]
    at_two = summary.groups[2]
    assert at_two.gang == "ddp x2" and [r.config for r in at_two.ranked] == [
        "inductor+optimize_ddp=off",
        "inductor",
    ]


def test_a_row_a_rank_and_the_ranks_disagreements_as_notes():
    rows = rank_rows([ranked_result(2, 1.5), make_result()])
    assert [row[2] for row in rows.rows] == ["0", "1"]
    assert rows.rows[1][5:9] == ["16.5", "11.0", "1.50x", "5.00"]
    assert rows.rows[0][12] == "1" and rows.rows[0][-1] == "ok"
    assert any("rank 1 recompiled once" in note for note in rows.notes)
    assert rank_rows([make_result()]).rows == []


def test_scaling_lines_up_world_sizes_against_one_rank():
    results = [ranked_result(1, 1.5), ranked_result(2, 1.3), ranked_result(4, 1.1), ranked_result(2, 1.3, seed=1)]
    (series,) = scaling(results)
    assert series.label == "models.gpt training ddp" and [p.world_size for p in series.points] == [1, 2, 4]
    assert [p.results for p in series.points] == [1, 2, 1]
    assert [round(series.vs_one_rank(p) or 0, 2) for p in series.points] == [1.0, 2.0, 4.0]
    rows = scaling_rows(results)
    assert [row[2] for row in rows.rows] == ["1", "2", "4"] and [row[8] for row in rows.rows] == [
        "1.00x",
        "2.00x",
        "4.00x",
    ]


def test_the_report_and_its_page_show_ranks_and_scaling():
    report = make_report([ranked_result(1, 1.5), ranked_result(2, 1.3)])
    titles = [v.title for v in views(report)]
    assert "scaling across world sizes" in titles and "ranks of distributed experiments" in titles
    page = render_html(report)
    assert "chart-scaling" in page and "chart-ranks" in page and "Distributed experiments" in page


def test_history_keeps_a_series_per_world_size():
    reports = [(f"r{i}", make_report([ranked_result(1, 1.5), ranked_result(2, 1.2)])) for i in range(3)]
    history = build_history(reports)
    configs = {s.config for s in history.series}
    assert {"inductor ddp x1", "inductor ddp x2"} <= configs
