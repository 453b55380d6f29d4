"""The regression gate: two reports' runs matched by experiment, and every change between them listed.

Speed and compile latency are judged in ``compare.verdicts`` (the tests, the false discovery rate, the
sweep-wide shift), status and graph breaks by what changed, what to ship by the two summaries'
decisions; what the gate could not judge becomes a warning. Imports the comparison's data
(``compare.models``), the verdicts, the summary; nothing that draws.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from orchestrator.report.compare.models import (
    KIND_TITLES,
    MIN_RUNS,
    ONE_RUN,
    UNTESTED_BOUND,
    Change,
    Comparison,
    Kind,
    NoiseFigure,
    SweepNoise,
    Thresholds,
)
from orchestrator.report.compare.verdicts import (
    Candidate,
    compile_candidate,
    compile_changes,
    new_change,
    speed_candidate,
    speed_changes,
)
from orchestrator.report.digest import Digest, Glance, as_glance
from orchestrator.report.models import Report
from tasks.heap import collector_paused

_MISSING = object()


def compare(
    base: Report | Glance,
    new: Report | Glance,
    thresholds: Thresholds | None = None,
    names: tuple[str, str] = ("", ""),
    noise: Sequence[NoiseFigure] = (),
) -> Comparison:
    """Match the two reports' runs by experiment id and list every change beyond the thresholds.

    - Speed (ok runs on both sides): the speedup by default, the compiled median with ``metric="time"``;
      see ``speed_changes``. ``noise``: stored A/A figures, for device models with too few experiments
      without replicates to measure their own noise.
    - Status: every run ok -> some run failing is a new failure (a regression); the reverse a new pass.
    - Graph breaks: a count that grew is a regression.
    - Compile latency: see ``compile_changes``; a regression only with ``gate_compile``. Warm never meets
      cold (their ids differ), and runs the caches served differently (a hit against a miss) are not
      compared but warned about, as are traced runs against untraced ones (a trace adds its cost).
    - Experiments of base that new lacks, and a new report marked incomplete, fail the comparison
      (``Comparison.fails``) unless ``allow_missing``; new with fewer runs of an experiment than base
      is a warning.
    """
    with collector_paused():  # a candidate per experiment and none of it garbage: nothing to collect
        return _compared(as_glance(base), as_glance(new), thresholds or Thresholds(), names, noise)


def _compared(
    base: Glance, new: Glance, t: Thresholds, names: tuple[str, str], noise: Sequence[NoiseFigure]
) -> Comparison:
    base_runs, new_runs = runs_by_experiment(base), runs_by_experiment(new)
    changes: list[Change] = []
    speed: list[Candidate] = []
    compiles: list[Candidate] = []
    not_compared: list[str] = []
    traced_apart: list[str] = []
    fewer_runs: list[str] = []
    runs: Counter[str] = Counter()
    for exp_id, b in base_runs.items():
        n = new_runs.get(exp_id)
        if n is None:
            continue
        runs[f"{len(b)} vs {len(n)}"] += 1
        fewer_runs += [f"{n[0].label} ({len(n)} of {len(b)})"] if len(n) < len(b) else []
        changes.extend(_status_changes(b, n))
        changes.extend(_break_changes(b, n))
        b_timed, n_timed = timed(b), timed(n)
        if b_timed and n_timed:
            speed.append(speed_candidate(b_timed, n_timed, t.metric))
        candidate, apart = compile_candidate(b, n)
        compiles += [candidate] if candidate else []
        not_compared += [apart] if apart else []
        traced_apart += [n[0].label] if _traced(b) != _traced(n) else []
    found, swept = speed_changes(speed, t, noise)
    changes += found + compile_changes(compiles, t) + decision_changes(base, new)
    order = list(KIND_TITLES)
    changes.sort(key=lambda c: (not c.regression, order.index(c.kind)))
    missing = [r[0].label for i, r in base_runs.items() if i not in new_runs]
    warnings = environment_warnings(base, new)
    warnings += _gate_warnings(missing, fewer_runs, swept, t)
    if not_compared:
        warnings.append(
            f"{len(not_compared)} compile latency pair(s) served differently by the caches, not compared and not "
            f"gated: {_few(not_compared)}"
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
            "fdr": t.fdr,
            "sweep": t.sweep,
            "untested_bound": UNTESTED_BOUND,
            "gate_compile": t.gate_compile,
            "metric": t.metric,
            "min_runs": MIN_RUNS,
        },
        matched=len(base_runs.keys() & new_runs.keys()),
        changes=changes,
        warnings=warnings,
        missing=missing,
        only_in_new=[r[0].label for i, r in new_runs.items() if i not in base_runs],
        incomplete=not new.complete,
        allow_missing=t.allow_missing,
        runs=dict(runs),
        noise=swept,
        tests={
            "speed": sum(c.p is not None for c in speed),
            "compile": sum(c.p is not None for c in compiles),
        },
    )


def decision_changes(base: Glance, new: Glance) -> list[Change]:
    """Groups (target, params, device model, phase, precision) whose recommendation differs: printed, never
    a regression by itself (the runs behind it are judged above)."""
    changes = []
    for (model, label), (b_recommend, b_reason, b_results) in base.decided.items():
        found = new.decided.get((model, label))
        if found is None or found[0] == b_recommend:
            continue
        n_recommend, n_reason, n_results = found
        changes.append(
            Change(
                kind="recommendation",
                experiment_id="",
                target=label,
                config="-",
                device_model=model,
                base=f"{b_recommend} ({b_reason})",
                new=f"{n_recommend} ({n_reason})",
                change=f"{b_recommend} -> {n_recommend}",
                runs=(b_results, n_results),
                regression=False,
            )
        )
    return changes


def runs_by_experiment(report: Report | Glance) -> dict[str, list[Digest]]:
    """Each experiment's results, one a run, in replicate order; experiments in report order."""
    out: dict[str, list[Digest]] = {}
    for r in as_glance(report).digests:
        out.setdefault(r.experiment_id, []).append(r)
    return {exp_id: sorted(rs, key=lambda r: r.replicate) for exp_id, rs in out.items()}


def environment_warnings(base: Glance, new: Glance) -> list[str]:
    """Differences that make the two reports measure different things: hardware, versions, threads, options."""
    warnings = []
    for report, which in ((base, "base"), (new, "new")):
        if not report.complete:
            warnings.append(f"the {which} report is incomplete (its run did not finish)")
    models = [sorted({r.device_model or "unknown" for r in rep.digests}) for rep in (base, new)]
    if models[0] != models[1]:
        warnings.append(f"device models differ: {', '.join(models[0])} vs {', '.join(models[1])}")
    for key in ("torch", "triton", "cuda"):
        versions = [_versions(rep, key) for rep in (base, new)]
        if versions[0] and versions[1] and versions[0] != versions[1]:
            warnings.append(f"{key} versions differ: {', '.join(versions[0])} vs {', '.join(versions[1])}")
    threads = [sorted({r.threads for r in rep.digests if r.threads is not None}) for rep in (base, new)]
    if threads[0] and threads[1] and threads[0] != threads[1]:
        shown = [", ".join(map(str, t)) for t in threads]
        warnings.append(f"worker threads differ: {shown[0]} vs {shown[1]}")
    new_by_id = {r.experiment_id: r for r in new.digests}
    keys: set[str] = set()
    differ = []
    for b in base.digests:
        n = new_by_id.get(b.experiment_id)
        if n is not None and b.inductor_options != n.inductor_options:
            differ.append(b)
            both = b.inductor_options.keys() | n.inductor_options.keys()
            keys |= {k for k in both if b.inductor_options.get(k, _MISSING) != n.inductor_options.get(k, _MISSING)}
    if differ:
        warnings.append(
            f"compile options (inductor config) differ for {len(differ)} experiment(s) in "
            f"{', '.join(sorted(keys))} (e.g. {differ[0].label})"
        )
    return warnings


def _gate_warnings(missing: list[str], fewer_runs: list[str], swept: list[SweepNoise], t: Thresholds) -> list[str]:
    """What the gate could not judge: experiments new lacks, runs new lacks, moves left untested."""
    out = []
    if missing:
        allowed = " (allowed: --allow-missing)" if t.allow_missing else ""
        out.append(f"{len(missing)} experiment(s) of base missing from new{allowed}: {_few(missing)}")
    if fewer_runs:
        out.append(f"{len(fewer_runs)} experiment(s) ran fewer times in new than in base: {_few(fewer_runs)}")
    for noise in swept:
        if noise.source == "none":
            out.append(
                f"{noise.experiments} experiment(s) on {noise.device_model} with {ONE_RUN} (or fewer than {MIN_RUNS} "
                f"runs a side), untested: {noise.why}; a slowdown fails the gate only beyond {UNTESTED_BOUND:.0%} "
                f"(replicates, {MIN_RUNS} or more on both sides, give a test; so does --noise FILE, from compare "
                "--save-noise FILE on two runs of the same code)"
            )
    return out


def timed(runs: Sequence[Digest]) -> list[Digest]:
    """The ok runs with both sides timed: the ones speed is judged on."""
    return [r for r in runs if r.timed]


def _side_status(runs: Sequence[Digest]) -> tuple[str, str]:
    """A side's status (ok when every run is, else the first other status) and how it reads."""
    failed = [r.status for r in runs if r.status != "ok"]
    if not failed:
        return "ok", "ok"
    status = failed[0]
    count = sum(s == status for s in failed)
    return status, status if count == len(runs) else f"{status} in {count} of {len(runs)} runs"


def _status_changes(b: Sequence[Digest], n: Sequence[Digest]) -> list[Change]:
    (b_status, b_text), (n_status, n_text) = _side_status(b), _side_status(n)
    if b_status == n_status:
        return []
    runs = (len(b), len(n))
    failing = next((r for r in n if r.status == n_status), n[0])
    message = failing.error
    if b_status == "ok":
        return [new_change("new_failure", failing, b_text, n_text, message, runs, regression=True)]
    if n_status == "ok":
        return [new_change("new_pass", n[0], b_text, n_text, "", runs, regression=False)]
    return [new_change("status_changed", failing, b_text, n_text, message, runs, regression=False)]


def _break_changes(b: Sequence[Digest], n: Sequence[Digest]) -> list[Change]:
    """Graph breaks: each side's largest count over its runs."""
    b_breaks = max((r.graph_breaks for r in b if r.graph_breaks is not None), default=None)
    n_breaks = max((r.graph_breaks for r in n if r.graph_breaks is not None), default=None)
    if b_breaks is None or n_breaks is None or b_breaks == n_breaks:
        return []
    grew = n_breaks > b_breaks
    kind: Kind = "breaks_grew" if grew else "breaks_fell"
    runs = (len(b), len(n))
    return [new_change(kind, n[0], str(b_breaks), str(n_breaks), f"{n_breaks - b_breaks:+d}", runs, regression=grew)]


def _traced(runs: Sequence[Digest]) -> bool:
    return any(r.traced for r in runs)


def _versions(report: Glance, key: str) -> list[str]:
    found = {r.versions[key] for r in report.digests if key in r.versions}
    if key == "torch" and report.environment.torch not in ("", "unknown"):
        found.add(report.environment.torch)
    return sorted(found)


def _few(items: Sequence[str], shown: int = 10) -> str:
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(items[:shown]) + more
