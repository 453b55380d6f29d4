"""The regression gate: two reports' runs matched by experiment, and every change between them judged.

Speed is judged on the runs (``speed_change``: the geometric means over runs, Welch's t on their logs,
``tasks.stats.welch_log``), status and graph breaks by what changed, compile latency by its median
over runs with the phases that explain a move (``compile_phases``), what to ship by the two summaries'
decisions; what the gate could not judge becomes a warning. Imports the comparison's data
(``compare.models``), the summary, the compile phases and the cells (for the values a change shows);
nothing that draws.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from orchestrator.report.cells import ms, seconds, times
from orchestrator.report.compare.models import (
    KIND_TITLES,
    MIN_RUNS,
    ONE_RUN,
    WELCH,
    Change,
    Comparison,
    Kind,
    Metric,
    Thresholds,
)
from orchestrator.report.compile_phases import explain, explanation
from orchestrator.report.models import Group, Report, config_label, result_group
from orchestrator.report.summary import device_model, summarize
from tasks.models import Result
from tasks.stats import geomean, welch_log
from tasks.text import first_line

_MISSING = object()


def compare(
    base: Report, new: Report, thresholds: Thresholds | None = None, names: tuple[str, str] = ("", "")
) -> Comparison:
    """Match the two reports' runs by experiment id and list every change beyond the thresholds.

    - Speed (ok runs on both sides): see ``speed_change``; the speedup by default, the compiled
      median with ``metric="time"``, tested on the runs where both sides have ``MIN_RUNS``.
    - Status: every run ok -> some run failing is a new failure (a regression); the reverse a new pass.
    - Graph breaks: a count that grew is a regression.
    - Compile latency: a move of the median over runs beyond ``thresholds.compile`` is listed, with
      how the caches served it (``warm: hit``, ``cold: miss``) and the phases of the compile that
      account for 80% of the move (``orchestrator.report.compile_phases``); a regression only with
      ``gate_compile``. Warm never meets cold (their ids differ), and runs the caches served
      differently (a hit against a miss) are not compared but warned about, as are traced runs
      against untraced ones (a trace adds its cost to the compile).
    - Experiments of base that new lacks, and a new report marked incomplete, fail the comparison
      (``Comparison.fails``) unless ``allow_missing``; new with fewer runs of an experiment than base
      is a warning.
    """
    t = thresholds or Thresholds()
    base_runs, new_runs = runs_by_experiment(base), runs_by_experiment(new)
    changes: list[Change] = []
    not_compared: list[str] = []
    traced_apart: list[str] = []
    untested: Counter[tuple[int, int]] = Counter()
    fewer_runs: list[str] = []
    runs: Counter[str] = Counter()
    for exp_id, b in base_runs.items():
        n = new_runs.get(exp_id)
        if n is None:
            continue
        runs[f"{len(b)} vs {len(n)}"] += 1
        fewer_runs += [f"{_label(n[0])} ({len(n)} of {len(b)})"] if len(n) < len(b) else []
        changes.extend(_status_changes(b, n))
        changes.extend(_break_changes(b, n))
        b_timed, n_timed = _timed(b), _timed(n)
        if b_timed and n_timed:
            if min(len(b_timed), len(n_timed)) < MIN_RUNS:
                untested[(len(b_timed), len(n_timed))] += 1
            changes.extend(speed_change(b_timed, n_timed, t))
        compiled, apart = _compile_changes(b, n, t)
        changes.extend(compiled)
        not_compared += [apart] if apart else []
        traced_apart += [_label(n[0])] if _traced(b) != _traced(n) else []
    changes.extend(decision_changes(base, new))
    order = list(KIND_TITLES)
    changes.sort(key=lambda c: (not c.regression, order.index(c.kind)))
    missing = [_label(r[0]) for i, r in base_runs.items() if i not in new_runs]
    warnings = environment_warnings(base, new)
    warnings += _gate_warnings(missing, fewer_runs, untested, t)
    if not_compared:
        warnings.append(
            f"{len(not_compared)} compile latency pair(s) served differently by the caches: {_few(not_compared)}"
        )
    if traced_apart:
        warnings.append(
            f"{len(traced_apart)} experiment(s) traced (trace: true) on one side only; a traced compile's latency "
            f"includes the trace's cost: {_few(traced_apart)}"
        )
    return Comparison(
        base=names[0] or base.name,
        new=names[1] or new.name,
        thresholds={
            "speed": t.speed,
            "compile": t.compile,
            "alpha": t.alpha,
            "gate_compile": t.gate_compile,
            "metric": t.metric,
            "min_runs": MIN_RUNS,
        },
        matched=len(base_runs.keys() & new_runs.keys()),
        changes=changes,
        warnings=warnings,
        missing=missing,
        only_in_new=[_label(r[0]) for i, r in new_runs.items() if i not in base_runs],
        incomplete=not new.complete,
        allow_missing=t.allow_missing,
        runs=dict(runs),
    )


def decision_changes(base: Report, new: Report) -> list[Change]:
    """Groups (target, params, device model, phase, precision) whose recommendation differs: printed, never
    a regression by itself (the runs behind it are judged above). A summary written before decisions is
    derived again from its results."""
    decided = [_decided_groups(report) for report in (base, new)]
    changes = []
    for key, bg in decided[0].items():
        ng = decided[1].get(key)
        b, n = bg.decision, ng.decision if ng else None
        if ng is None or b is None or n is None or b.recommend == n.recommend:
            continue
        changes.append(
            Change(
                kind="recommendation",
                experiment_id="",
                target=bg.label,
                config="-",
                device_model=bg.device_model,
                base=f"{b.recommend} ({b.reason})",
                new=f"{n.recommend} ({n.reason})",
                change=f"{b.recommend} -> {n.recommend}",
                runs=(bg.results, ng.results),
                regression=False,
            )
        )
    return changes


def _decided_groups(report: Report) -> dict[tuple[str, str], Group]:
    summary = report.summary
    if any(g.decision is None for g in summary.groups):
        summary = summarize(report.results)
    return {(g.device_model, g.label): g for g in summary.groups if g.decision is not None}


def runs_by_experiment(report: Report) -> dict[str, list[Result]]:
    """Each experiment's results, one a run, in replicate order; experiments in report order."""
    out: dict[str, list[Result]] = {}
    for r in report.results:
        out.setdefault(r.experiment_id, []).append(r)
    return {exp_id: sorted(rs, key=lambda r: r.replicate) for exp_id, rs in out.items()}


def run_values(runs: Sequence[Result], metric: Metric) -> list[float]:
    """One value a timed run: its speedup (eager median / compiled median), or its compiled median ("time")."""
    if metric == "speedup":
        return [r.speedup for r in runs if r.speedup]
    return [r.compiled.median_ms for r in runs if r.compiled]


def speed_change(b: Sequence[Result], n: Sequence[Result], t: Thresholds) -> list[Change]:
    """Slower or faster on the gated metric, from each side's ok, timed runs.

    The change is the ratio of the sides' geometric means over runs. With ``MIN_RUNS`` or more on
    both sides it counts when beyond ``t.speed`` and ``welch_log`` on the runs' values gives
    p < ``t.alpha``; with fewer, when beyond ``t.speed``, untested (p None, a note that run-to-run
    noise was not measured). The other metric's move is shown beside it, never gated.
    """
    speedup_ratio = geomean(run_values(n, "speedup")) / geomean(run_values(b, "speedup"))
    time_ratio = geomean(run_values(n, "time")) / geomean(run_values(b, "time"))
    if t.metric == "speedup":
        slower, faster = speedup_ratio < 1 - t.speed, speedup_ratio > 1 + t.speed
    else:
        slower, faster = time_ratio > 1 + t.speed, time_ratio < 1 - t.speed
    if not (slower or faster):
        return []
    runs = (len(b), len(n))
    p: float | None = None
    if min(runs) >= MIN_RUNS:
        p = welch_log(run_values(b, t.metric), run_values(n, t.metric), t.alpha).p
        if p >= t.alpha:
            return []
    moves = {"speedup": f"speedup {_percent(speedup_ratio)}", "time": f"time {_percent(time_ratio)}"}
    other = "time" if t.metric == "speedup" else "speedup"
    return [
        _change(
            "slower" if slower else "faster",
            n[0],
            _speed_text(b),
            _speed_text(n),
            f"{moves[t.metric]} ({moves[other]})",
            runs,
            regression=slower,
            p=p,
            test=WELCH if p is not None else "threshold",
            note="" if p is not None else untested_note(*runs),
        )
    ]


def untested_note(base_runs: int, new_runs: int) -> str:
    """Why a speed change has no p-value."""
    if base_runs == new_runs == 1:
        return ONE_RUN
    return f"{base_runs} vs {new_runs} runs: run-to-run noise not measured (a test needs {MIN_RUNS} a side)"


def environment_warnings(base: Report, new: Report) -> list[str]:
    """Differences that make the two reports measure different things: hardware, versions, threads, options."""
    warnings = []
    for report, which in ((base, "base"), (new, "new")):
        if not report.complete:
            warnings.append(f"the {which} report is incomplete (its run did not finish)")
    models = [sorted({device_model(r) or "unknown" for r in rep.results}) for rep in (base, new)]
    if models[0] != models[1]:
        warnings.append(f"device models differ: {', '.join(models[0])} vs {', '.join(models[1])}")
    for key in ("torch", "triton", "cuda"):
        versions = [_versions(rep, key) for rep in (base, new)]
        if versions[0] and versions[1] and versions[0] != versions[1]:
            warnings.append(f"{key} versions differ: {', '.join(versions[0])} vs {', '.join(versions[1])}")
    threads = [sorted({r.worker.threads for r in rep.results if r.worker}) for rep in (base, new)]
    if threads[0] and threads[1] and threads[0] != threads[1]:
        shown = [", ".join(map(str, t)) for t in threads]
        warnings.append(f"worker threads differ: {shown[0]} vs {shown[1]}")
    new_by_id = {r.experiment_id: r for r in new.results}
    keys: set[str] = set()
    differ = []
    for b in base.results:
        n = new_by_id.get(b.experiment_id)
        if n is not None and b.inductor_options != n.inductor_options:
            differ.append(b)
            both = b.inductor_options.keys() | n.inductor_options.keys()
            keys |= {k for k in both if b.inductor_options.get(k, _MISSING) != n.inductor_options.get(k, _MISSING)}
    if differ:
        warnings.append(
            f"compile options (inductor config) differ for {len(differ)} experiment(s) in "
            f"{', '.join(sorted(keys))} (e.g. {_label(differ[0])})"
        )
    return warnings


def _gate_warnings(
    missing: list[str], fewer_runs: list[str], untested: Counter[tuple[int, int]], t: Thresholds
) -> list[str]:
    """What the gate could not judge: experiments new lacks, runs new lacks, moves judged untested."""
    out = []
    if missing:
        allowed = " (allowed: --allow-missing)" if t.allow_missing else ""
        out.append(f"{len(missing)} experiment(s) of base missing from new{allowed}: {_few(missing)}")
    if fewer_runs:
        out.append(f"{len(fewer_runs)} experiment(s) ran fewer times in new than in base: {_few(fewer_runs)}")
    count = sum(untested.values())
    if count:
        why = (
            ONE_RUN
            if set(untested) == {(1, 1)}
            else f"fewer than {MIN_RUNS} runs on a side: run-to-run noise not measured"
        )
        out.append(
            f"{count} experiment(s) with {why}; speed judged by the {t.speed:.0%} threshold alone, no p-value "
            f"(replicates: {MIN_RUNS} or more on both sides gives a test)"
        )
    return out


def _timed(runs: Sequence[Result]) -> list[Result]:
    """The ok runs with both sides timed: the ones speed is judged on."""
    return [r for r in runs if r.status == "ok" and r.compiled and r.eager and r.speedup]


def _side_status(runs: Sequence[Result]) -> tuple[str, str]:
    """A side's status (ok when every run is, else the first other status) and how it reads."""
    failed = [r.status for r in runs if r.status != "ok"]
    if not failed:
        return "ok", "ok"
    status = failed[0]
    count = sum(s == status for s in failed)
    return status, status if count == len(runs) else f"{status} in {count} of {len(runs)} runs"


def _status_changes(b: Sequence[Result], n: Sequence[Result]) -> list[Change]:
    (b_status, b_text), (n_status, n_text) = _side_status(b), _side_status(n)
    if b_status == n_status:
        return []
    runs = (len(b), len(n))
    failing = next((r for r in n if r.status == n_status), n[0])
    message = first_line(failing.error.message, limit=100) if failing.error else ""
    if b_status == "ok":
        return [_change("new_failure", failing, b_text, n_text, message, runs, regression=True)]
    if n_status == "ok":
        return [_change("new_pass", n[0], b_text, n_text, "", runs, regression=False)]
    return [_change("status_changed", failing, b_text, n_text, message, runs, regression=False)]


def _break_changes(b: Sequence[Result], n: Sequence[Result]) -> list[Change]:
    """Graph breaks: each side's largest count over its runs."""
    b_breaks = max((r.graph_breaks for r in b if r.graph_breaks is not None), default=None)
    n_breaks = max((r.graph_breaks for r in n if r.graph_breaks is not None), default=None)
    if b_breaks is None or n_breaks is None or b_breaks == n_breaks:
        return []
    grew = n_breaks > b_breaks
    kind: Kind = "breaks_grew" if grew else "breaks_fell"
    runs = (len(b), len(n))
    return [_change(kind, n[0], str(b_breaks), str(n_breaks), f"{n_breaks - b_breaks:+d}", runs, regression=grew)]


def compile_comparable(b: Result, n: Result) -> str | None:
    """None when the two compile latencies were served alike (the same cache state, and each layer
    hit or missed alike); else why they measure different things. A report from before caches were
    recorded compares by state alone."""
    if b.compile.cache != n.compile.cache:
        return f"cache {b.compile.cache} vs {n.compile.cache}"
    if b.compile_cache and n.compile_cache and b.compile_cache.outcome != n.compile_cache.outcome:
        return f"{b.compile_cache.label} vs {n.compile_cache.label}"
    return None


def _compile_changes(b: Sequence[Result], n: Sequence[Result], t: Thresholds) -> tuple[list[Change], str | None]:
    """A move of the median compile latency over runs beyond the threshold, labelled with how the
    caches served it; runs served differently (a hit against a miss, on either side) are never
    compared: the reason comes back instead."""
    b_runs = [r for r in b if r.compile_latency_s]
    n_runs = [r for r in n if r.compile_latency_s]
    if not (b_runs and n_runs):
        return [], None
    apart = next((why for r in b_runs[1:] + n_runs if (why := compile_comparable(b_runs[0], r))), None)
    if apart is not None:
        return [], f"{_label(n_runs[0])}: compile latencies not compared ({apart})"
    b_s = statistics.median(r.compile_latency_s or 0.0 for r in b_runs)
    n_s = statistics.median(r.compile_latency_s or 0.0 for r in n_runs)
    ratio = n_s / b_s
    if abs(ratio - 1) <= t.compile:
        return [], None
    slower = ratio > 1
    kind: Kind = "compile_slower" if slower else "compile_faster"
    first = n_runs[0]
    how = first.compile_cache.label if first.compile_cache else first.compile.cache
    base_text, new_text = f"{seconds(b_s)} s", f"{seconds(n_s)} s ({how})"
    runs = (len(b_runs), len(n_runs))
    phases = explanation(explain(b_runs, n_runs, n_s - b_s))
    return [
        _change(kind, first, base_text, new_text, _percent(ratio), runs, slower and t.gate_compile, phases=phases)
    ], None


def _traced(runs: Sequence[Result]) -> bool:
    return any(r.trace is not None for r in runs)


def _speed_text(runs: Sequence[Result]) -> str:
    """A side's compiled median and speedup, geometric means over its runs."""
    return f"{ms(geomean(run_values(runs, 'time')))} ms, {times(geomean(run_values(runs, 'speedup')))}"


def _change(
    kind: Kind,
    r: Result,
    base: str,
    new: str,
    change: str,
    runs: tuple[int, int],
    regression: bool,
    p: float | None = None,
    test: str | None = None,
    note: str = "",
    phases: str = "",
) -> Change:
    return Change(
        kind=kind,
        experiment_id=r.experiment_id,
        target=result_group(r),
        config=config_label(r),
        device_model=device_model(r),
        base=base,
        new=new,
        change=change,
        runs=runs,
        test=test,
        p_value=p,
        note=note,
        phases=phases,
        regression=regression,
    )


def _versions(report: Report, key: str) -> list[str]:
    found = {r.worker.versions[key] for r in report.results if r.worker and key in r.worker.versions}
    if key == "torch" and report.environment.torch not in ("", "unknown"):
        found.add(report.environment.torch)
    return sorted(found)


def _label(r: Result) -> str:
    return f"{result_group(r)} [{config_label(r)}]"


def _few(items: Sequence[str], shown: int = 10) -> str:
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(items[:shown]) + more


def _percent(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"
