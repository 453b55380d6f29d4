"""The views of a report: each table a reader sees, built once as plain rows of text (``cells.Rows``)
from the report's results and summary, in reading order (``views``), whatever format draws them.

A view decides what a table holds (its columns, rows and notes); how a table is drawn is the
formats' job (``render`` for the terminal, Markdown and CSV; ``page`` and ``html`` for the HTML
page), so that a view can be drawn by any of them. Imports the cells, the models, the summary
and the replay and ranks views below it; nothing that draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final

from orchestrator.machines.calibration import SLOW_THRESHOLD
from orchestrator.report.cells import TIE_TEXT, Rows, figure, interval, ms, rate, seconds, times
from orchestrator.report.digest import Digest, digest
from orchestrator.report.models import (
    ConfigDecision,
    Decision,
    DeviceSummary,
    GeoMean,
    Outline,
    Ranked,
    Report,
    Summary,
    result_group,
)
from orchestrator.report.ranks import rank_rows, scaling_rows
from orchestrator.report.replay import replay_rows
from tasks.models import Calibration, Result
from tasks.text import first_line
from tasks.throughput import rates

REPLICATES_NOTE = (
    "95% CI over k runs: a Student t-interval on the log speedups of the experiment's k replicates, each run in "
    "another worker process (between runs; the speedup is their median); within one run: the bootstrap of that "
    "run's samples. within-run CI: the same figure's interval from each run's own samples alone. Ranking, ties "
    "and geometric means use the between-run interval where there is one."
)
DEVICE_NUMBERS = ("unchecked", "95% CI", "within-run CI", "GPU spread", "compile s", "memory ratio", "n")
SPREAD_NOTE = (
    "GPU spread: the fastest GPU's speedup over the slowest's, each GPU's the median of the replicates it ran."
)

SHIP_TITLE: Final = "what to ship"


def headline(report: Report) -> list[str]:
    """What a reader must see first: an interrupted run, environment warnings, the counts."""
    lines = []
    if not report.complete:
        lines.append("INCOMPLETE: the run did not finish; experiments of the spec may be missing from this report.")
    lines.extend(f"WARNING: {w}" for w in report.environment.warnings)
    count = report.unchecked if isinstance(report, Outline) else sum(unchecked(r) for r in report.results)
    lines.append(counts_text(report.summary, unchecked=count))
    return lines


def counts_text(summary: Summary, unchecked: int = 0) -> str:
    """``10 results: 9 ok, 1 compile_error``; ok results never checked for correctness said apart."""
    shown = ", ".join(
        f"{n} {status}" + (f" ({unchecked} unchecked)" if status == "ok" and unchecked else "")
        for status, n in summary.counts.items()
        if n
    )
    return f"{sum(summary.counts.values())} results: {shown or 'none'}"


def unchecked(r: Result) -> bool:
    """ok, but correctness was never judged (``correct: null``): not a pass."""
    return r.status == "ok" and r.correct is None


def has_replicates(results: Iterable[Result | Digest]) -> bool:
    """Some experiment ran more than once (a replicate number above 0)."""
    return any(r.replicate for r in results)


def slow_devices(calibration: Sequence[Calibration]) -> set[str]:
    """The ids of the calibration entries flagged slow."""
    return {c.id for c in calibration if c.slow}


def on_slow_device(r: Result | Digest, slow: set[str]) -> bool:
    """The result's worker calibrated slow: its own entry says so, or the report's entry of that id does."""
    if isinstance(r, Digest):
        return r.calibration is not None and bool(r.calibration_slow or r.calibration in slow)
    entry = r.worker.calibration if r.worker else None
    return bool(entry and (entry.slow or entry.id in slow))


def as_digests(results: Sequence[Result] | Sequence[Digest]) -> Sequence[Digest]:
    """What the page's table and charts read of each result (``digest.Digest``): results digested, digests as they
    are (a big compressed report's, read from its head without its results: ``skim.load_page``)."""
    return [r if isinstance(r, Digest) else digest(r) for r in results]


def results_rows(
    results: Sequence[Result] | Sequence[Digest], title: str = "results", calibration: Sequence[Calibration] = ()
) -> Rows:
    """One row a result: times, speedup and interval, compile latency, achieved throughput, status.

    TFLOP/s and GB/s are the compiled side's (eager's: divide by the speedup), shown when some
    result counted that kind of work. The replicate (``r0``, ``r1``) sits beside the configuration
    when some experiment ran more than once; ``slow device`` marks a result whose worker's device
    calibrated slow (its own entry, or ``calibration``'s entry of the same id). Each row is drawn from the
    result's digest, the results' or a big report's own (``as_digests``).
    """
    digests = as_digests(results)
    flops = any(d.flops for d in digests)
    bytes_ = any(d.work_bytes for d in digests)
    models = {d.device_model for d in digests}
    replicated = has_replicates(digests)
    slow = slow_devices(calibration)
    headers = ["target", *(["device"] if len(models) > 1 else []), "config", *(["replicate"] if replicated else [])]
    headers += ["eager ms", "compiled ms", "speedup", "95% CI", "compile s", "cache"]
    headers += [*(["TFLOP/s"] if flops else []), *(["GB/s"] if bytes_ else [])]
    headers += ["breaks", "status", "notes"]
    rows = []
    for d in digests:
        row = [d.group]
        if len(models) > 1:
            row.append(d.device_model or "-")
        row.append(d.config)
        if replicated:
            row.append(f"r{d.replicate}")
        row += [
            ms(d.eager_ms),
            ms(d.compiled_ms),
            times(d.speedup),
            interval(d.speedup_ci),
            seconds(d.compile_latency_s),
            cache_text(d),
        ]
        done = rates(d.flops, d.work_bytes, d.compiled_ms)
        row += [*([rate(done.tflops)] if flops else []), *([rate(done.gbps)] if bytes_ else [])]
        marks = [*notes(d), *(["slow device"] if on_slow_device(d, slow) else [])]
        row += ["-" if d.graph_breaks is None else str(d.graph_breaks), d.status, ", ".join(marks)]
        rows.append(row)
    right = {"eager ms", "compiled ms", "speedup", "95% CI", "compile s", "TFLOP/s", "GB/s", "breaks"}
    return Rows(title, headers, rows, right)


def cache_text(d: Digest) -> str:
    """How the compile caches served the measured compile: ``warm: hit``, ``cold: miss``; the state
    alone for a result from before they were recorded."""
    if d.compile_latency_s is None:
        return "-"
    return d.cache_label or d.cache


def groups_rows(summary: Summary, limit: int | None = None) -> Rows:
    """The best configuration of each group, and whether its lead is beyond noise.

    Where some configuration ran replicates, ``CI over`` says which interval ``95% CI`` is (over
    the runs, or within one run), the within-run interval sits beside it, and the GPU spread
    follows where replicates ran on two GPUs or more. ``limit``: the rows of the first so many groups
    alone (``Rows.total`` counts them all), the columns still chosen by every group.
    """
    multi = len({g.device_model for g in summary.groups}) > 1
    ranked = [x for g in summary.groups for x in (g.best, g.runner_up) if x]
    between = any(x.ci_between for x in ranked)
    spread = any(x.spread for x in ranked)
    headers = [*(["device"] if multi else []), "target", "best config", "speedup", "95% CI"]
    headers += [*(["CI over", "within-run CI"] if between else []), *(["GPU spread"] if spread else [])]
    headers += ["runner-up", "runner-up speedup", "verdict", "not ok"]
    rows = []
    for g in summary.groups[:limit]:
        best, second = g.best, g.runner_up
        if best is None:
            verdict = "no valid timing"
        elif second is None:
            verdict = "only one configuration timed" if len(g.ranked) < 2 else "no rival: the rest are cache twins"
        else:
            verdict = TIE_TEXT if g.tie else "best beyond noise"
        failed = ", ".join(f"{c}: {s}" for c, s in g.failed.items())
        row = [
            *([g.device_model] if multi else []),
            g.label,
            best.config if best else "-",
            times(best.speedup if best else None),
            interval(best.ci if best else None),
        ]
        if between:
            row += [ci_over(best) if best else "-", interval(best.ci_within if best else None)]
        if spread:
            row.append(spread_text(best.spread, best.gpus) if best else "-")
        row += [second.config if second else "-", times(second.speedup if second else None), verdict, failed]
        rows.append(row)
    right = {"speedup", "95% CI", "within-run CI", "GPU spread", "runner-up speedup"}
    notes = [REPLICATES_NOTE] if between else []
    notes += [SPREAD_NOTE] if spread else []
    return Rows("best configuration per group", headers, rows, right, notes, len(summary.groups))


def ship_rows(summary: Summary, limit: int | None = None) -> Rows:
    """What to ship per group (``Group.decision``): the configuration or eager, the reason, its lower bound
    and break-even, every configuration's break-even in short, and the Pareto set. Groups of a summary
    written before decisions have none and no row. ``limit``: the rows of the first so many alone
    (``Rows.total`` counts them all), the notes still of every group."""
    decided = [g for g in summary.groups if g.decision is not None]
    multi = len({g.device_model for g in decided}) > 1
    weighed = any(g.decision and g.decision.calls for g in decided)
    headers = [*(["device"] if multi else []), "target", "ship", "lower bound", "break-even calls", "compile s"]
    headers += [*(["weighed over", "time for the calls"] if weighed else []), "reason"]
    headers += ["every configuration", "Pareto set"]
    rows = []
    shared: dict[str, list[str]] = {}  # a decision's note -> the groups that have it
    for n, g in enumerate(decided):
        d = g.decision
        assert d is not None  # decided: for mypy
        label = g.label
        if limit is None or n < limit:
            chosen = d.config(d.recommend)
            row = [*([g.device_model] if multi else []), label, d.recommend, times(d.lower)]
            row += [break_even_text(chosen), seconds(chosen.compile_s if chosen else None)]
            if weighed:
                row += [f"{d.calls:,} calls" if d.calls else "lower bound", calls_time(d, chosen)]
            row += [d.reason, "; ".join(config_brief(c) for c in d.configs), ", ".join(d.pareto) or "-"]
            rows.append(row)
        for note in d.notes:
            shared.setdefault(note, []).append(label)
    notes = [SHIP_NOTE] if rows else []
    for note, labels in shared.items():
        where = "every group" if len(labels) == len(decided) > 1 else ", ".join(dict.fromkeys(labels))
        notes.append(f"{where}: {note}")
    right = {"lower bound", "break-even calls", "compile s", "time for the calls"}
    return Rows(SHIP_TITLE, headers, rows, right, notes, len(decided))


SHIP_NOTE = (
    "ship: of the configurations ok, checked correct and not recompiled in every run, the one with the highest "
    "lower 95% bound of speedup (over the runs where an experiment ran more than once), if it is above 1.0, else "
    "eager; with decision.calls N (or a replay's own calls), the one that serves N calls in the least time, "
    "compile included, if that is less than eager's and its speedup is beyond noise. break-even: compile latency "
    "over the time a call saves, with the compile latency named (a warm configuration is charged its cold "
    "twin's where the group measured one). Pareto set: not dominated on lower bound, compile latency and peak "
    "memory."
)


def break_even_text(c: ConfigDecision | None) -> str:
    """``1,234 (cold: miss)``: calls until the compile has paid for itself, and whose compile latency."""
    if c is None or c.break_even_calls is None:
        return "-"
    return f"{c.break_even_calls:,.0f}" + (f" ({c.compile_label})" if c.compile_label else "")


def calls_time(d: Decision, c: ConfigDecision | None) -> str:
    """The recommended configuration's time for the decision's calls against eager's: ``2.27 s vs 3.80 s``."""
    if c is None or c.calls_ms is None or c.eager_calls_ms is None:
        return "-"
    return f"{seconds(c.calls_ms / 1e3)} s vs eager {seconds(c.eager_calls_ms / 1e3)} s"


def config_brief(c: ConfigDecision) -> str:
    """One configuration in short: ``inductor >=1.87x, 910 calls`` or ``inductor+cold: compile_error``."""
    if not c.candidate:
        return f"{c.config}: {c.excluded or 'not a candidate'}"
    lower = f">={c.lower:.2f}x" if c.lower is not None else times(c.speedup)
    calls = "-" if c.break_even_calls is None else f"{c.break_even_calls:,.0f}"
    paid = "never pays" if c.break_even_calls is None else f"{calls} call" + ("" if calls == "1" else "s")
    return f"{c.config} {lower}, {paid}"


def replicates_rows(summary: Summary) -> Rows:
    """Every configuration whose figure is over replicates, ranked or not: its median speedup over the
    runs, the between-run interval beside the within-run one, and the GPU spread."""
    multi = len({g.device_model for g in summary.groups}) > 1
    headers = [*(["device"] if multi else []), "target", "config", "runs", "speedup (median)", "95% CI over runs"]
    headers += ["within-run CI", "GPU spread"]
    rows = [
        [
            *([g.device_model] if multi else []),
            g.label,
            x.config,
            str(x.replicates),
            times(x.speedup),
            interval(x.ci_between),
            interval(x.ci_within),
            spread_text(x.spread, x.gpus),
        ]
        for g in summary.groups
        for x in g.ranked
        if x.ci_between
    ]
    right = {"runs", "speedup (median)", "95% CI over runs", "within-run CI", "GPU spread"}
    return Rows("between runs: configurations with replicates", headers, rows, right, [REPLICATES_NOTE] if rows else [])


def ci_over(ranked: Ranked) -> str:
    """What a configuration's ranking interval is over: ``3 runs`` (its replicates) or ``one run``."""
    if ranked.ci_between is None:
        return "one run"
    return f"{ranked.replicates} runs" if ranked.replicates > 1 else "runs; some seeds one run"


def spread_text(spread: float | None, gpus: int = 0) -> str:
    if spread is None:
        return "-"
    return f"{spread:.3f}x" + (f" ({gpus} GPUs)" if gpus else "")


def device_rows(device: DeviceSummary) -> Rows:
    """Pass rate and geometric means of each configuration on one device model, over one set of groups.

    The pass rate counts results judged correct; ok results never checked get a column of their own
    when there are any. Where some group's figure comes from replicates, ``CI over`` says how many of
    the mean's groups are between runs, beside the within-run interval and the largest GPU spread.
    """
    comparable = bool(device.common)
    over = "common" if comparable else "own"
    means = [c.common if comparable else c.own for c in device.configs]
    checked_apart = any(c.unchecked for c in device.configs)
    between = any(g and g.between for g in means)
    spread = any(g and g.spread for g in means)
    headers = ["config", "pass rate", *(["unchecked"] if checked_apart else []), f"speedup ({over})", "95% CI"]
    headers += [*(["CI over", "within-run CI"] if between else []), *(["GPU spread"] if spread else [])]
    headers += ["compile s", "cache", "memory ratio", "n", "not ok"]
    rows = []
    for c, g in zip(device.configs, means, strict=True):
        passed = c.ok if c.passed is None else c.passed  # a summary written before: ok counted as passes
        row = [c.config, f"{passed}/{c.results} ({c.pass_rate:.0%})"]
        if checked_apart:
            row.append(str(c.unchecked or 0))
        row += [times(g.speedup if g else None), interval(g.ci if g else None)]
        if between:
            row += [mean_over(g), interval(g.ci_within if g else None)]
        if spread:
            row.append(spread_text(g.spread if g else None))
        row += [
            seconds(g.compile_latency_s if g else None),
            (g.compile_cache or "-") if g else "-",
            times(g.memory_ratio if g else None),
            str(g.n if g else 0),
            ", ".join(f"{n} {s}" for s, n in c.counts.items()),
        ]
        rows.append(row)
    notes = []
    if comparable:
        notes.append(
            f"Geometric means over the {len(device.common)} group(s) every configuration timed: "
            + ", ".join(device.common)
        )
    elif len(device.configs) > 1:
        notes.append(
            "No group was timed under every configuration: each mean is over the configuration's own "
            "groups (n) and the means are not comparable with each other."
        )
    if comparable:
        notes += [f"left out: {left.group} ({left.reason})" for left in device.left_out]
    if checked_apart or between:
        notes.append(
            "pass rate: results judged correct over all results, every replicate counted; "
            "unchecked: ok but never checked for correctness, not counted as passes."
        )
    if between:
        notes.append(
            "95% CI: combines each group's between-run interval (over its replicates) where it has one, "
            "else its within-run one; within-run CI: the same mean with within-run noise alone."
        )
    right = {f"speedup ({over})", *DEVICE_NUMBERS}
    return Rows(f"{device.device_model}: configurations", headers, rows, right, notes)


def mean_over(g: GeoMean | None) -> str:
    """What a geometric mean's interval is over: ``runs in every group`` (each group's replicates), ``one
    run``, or in how many of its groups it is over runs."""
    if g is None:
        return "-"
    if g.between == 0:
        return "one run"
    return "runs in every group" if g.between == g.n else f"runs in {g.between} of {g.n} groups"


def calibration_rows(calibration: Sequence[Calibration]) -> Rows:
    """Each calibrated worker's device: its probe's figures, and whether it is slow for its model, and why."""
    rows = [
        [
            c.id,
            c.model,
            ", ".join(f"{name} {figure(value)}" for name, value in c.figures.items()),
            "slow" if c.slow else "",
            "; ".join(c.slow_reasons),
        ]
        for c in calibration
    ]
    notes = [
        f"slow: a figure more than {SLOW_THRESHOLD:.0%} below the median of the other devices of the same model, "
        "or not measured where they measured it (the reasons say which)."
    ]
    return Rows("calibration", ["id", "model", "figures", "slow", "reasons"], rows, notes=notes)


def failures_rows(results: Sequence[Result]) -> Rows:
    """Every result that is not ok, with its error's type and first line."""
    rows = [
        [
            result_group(r),
            r.config_label,
            r.status,
            r.error.type.rsplit(".", 1)[-1] if r.error else "-",
            first_line(r.error.message, limit=160) if r.error else (r.check_note or ""),
        ]
        for r in results
        if r.status != "ok"
    ]
    return Rows("failures", ["target", "config", "status", "error", "message"], rows)


def recompiled_rows(summary: Summary) -> Rows:
    rows = [[r.target, r.config, r.experiment_id, "; ".join(r.reasons[:2])] for r in summary.recompiled]
    return Rows(
        "recompiled inside the timed window (kept out of bests and means)",
        ["target", "config", "id", "reasons"],
        rows,
    )


def views(report: Report, limit: int | None = None) -> Iterator[Rows]:
    """The summary views, in reading order; empty ones are skipped. ``limit``: the tables of a group a row
    made for their first so many rows alone (a terminal's screenful; ``Rows.total`` counts them all)."""
    summary = report.summary
    yield groups_rows(summary, limit)
    ship = ship_rows(summary, limit)
    if ship.rows:
        yield ship
    for extra in (replay_rows(report.results), scaling_rows(report.results), rank_rows(report.results)):
        if extra.rows:
            yield extra
    replicated = replicates_rows(summary)
    if replicated.rows:
        yield replicated
    for device in summary.devices:
        yield device_rows(device)
    calibration = calibration_rows(report.environment.calibration)
    for extra in (calibration, recompiled_rows(summary), failures_rows(report.results)):
        if extra.rows:
            yield extra


def notes(d: Digest) -> list[str]:
    """What a result's row notes: recompiled while timed, a noisy side, ok but never judged correct."""
    out = ["recompiled"] if d.recompiled else []
    if d.eager_noisy or d.compiled_noisy:  # IQR over 10% of the median (a row a result: no list made for it)
        side = "eager" if not d.compiled_noisy else "compiled" if not d.eager_noisy else "both"
        out.append(f"noisy {side}")
    if d.status == "ok" and d.correct is None:
        out.append("unchecked")
    return out
