"""What to ship: the decision of one group from its results, derived, never measured.

Method (``decide``):

1. **Candidates.** A configuration may be shipped when every one of its results in the group is
   ``ok``, judged correct (``correct: true``) and did not recompile inside its timed window: a
   configuration that failed, was wrong or went unchecked in any run is not shipped, whatever its
   speed (``ConfigDecision.excluded`` says why).
2. **Without ``decision.calls``** (basis ``lower_bound``): the candidate with the highest lower 95%
   bound of speedup, on the interval the group ranks by (``Ranked.ci``: between runs where there are
   replicates, else within the run), if that bound exceeds 1.0; else ``eager``. The lower bound, not
   the point, ranks: a 2.0x whose interval reaches down to 1.05x loses to a 1.8x known within 1.7-1.9x.
3. **With ``decision.calls`` N** (basis ``calls``): each candidate's time for N calls, its compile
   included (compile + N x compiled per call), against eager's (N x eager per call, as measured beside
   it). The candidate with the smallest share of eager's time wins if it takes less than eager (it pays
   for its compile within N calls) and its speedup is beyond noise where it has an interval (lower bound
   above 1.0: the budget weighs the compile, it does not waive the noise); else ``eager``.
4. **Replays** (``Result.replay``): per-call time is the traffic-weighted steady time, sum(w ms) over
   the values (weights normalised); the compile is ``replay.compile_s``, every compile of the first pass,
   recompiles included. At N equal to the replay's own calls, its first-pass totals (``total_ms``) are the
   time for N calls, measured rather than modelled, and are used. A group of replays without
   ``decision.calls`` is weighed over the replay's own calls: the traffic it replayed is the question it
   asks.
5. **Compile latency** (``compile_label``): a configuration's own, the median over its results, labelled
   as the caches served it (``warm: hit``; ``summary.compile_latencies`` picks the results). Where the
   group also measured the same configuration cold (``compile.cache: cold``), the cold latency is charged
   to the warm one as well, and the label says so (``cold: miss, from inductor+cold``): a warm hit is what
   a process pays with the compiled artifacts already on its disk, while a fresh machine, a new torch or a
   changed model pays the cold compile, and whether compiling pays has to hold for that process too. The
   cold run is then no candidate of its own: it is the same configuration, whose steady state the warm run
   measured too, so the recommendation names the configuration (``inductor``), not how its compile was
   timed. Where only the warm figure exists it is used, under its own label (optimistic for a fresh
   machine); a configuration measured cold only is a candidate under its own label.
6. **Break-even**: compile / (eager - compiled per call), in calls; None where compiled is not faster
   (or no compile latency was measured). Per-call times are medians over a configuration's timed results.
7. **Pareto set**: the candidates no other candidate dominates on speedup lower bound (higher), compile
   latency (lower) and the compiled side's peak memory (lower). A figure some candidate lacks is left out
   of the comparison for all, and ``notes`` says so: peak memory is measured on CUDA only; a replay has no
   interval, so the point speedup stands in for the lower bound. Eager is not a point of it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from orchestrator.report.models import ConfigDecision, Decision, Ranked
from tasks.models import Result

EAGER = "eager"
COLDEST_FIRST = ("cold", "shared", "warm")  # compile.cache states, the one that pays the most compile first
BEYOND_NOISE = 1.0  # a lower 95% bound of speedup above this: faster than eager beyond noise

# Reasons, one per way a decision ends; the ones that end in eager name what ruled each configuration out.
HIGHEST_LOWER_BOUND = "highest lower 95% bound of speedup, above 1.0"
LEAST_TIME = "least time for {calls:,} calls, compile included"
NOT_FASTER = "no configuration is faster beyond noise"
NOT_PAYING = "no configuration pays for its compile within {calls:,} calls"
NO_INTERVAL = "no configuration has a 95% interval of its speedup"
NO_FIGURES = "no configuration has the per-call and compile times to weigh {calls:,} calls"
EVERY_FAILED = "every configuration failed ({statuses})"
EVERY_INCORRECT = "every configuration failed its check"
NONE_CHECKED = "no configuration was checked correct"
EVERY_RECOMPILED = "every configuration recompiled while timed"
NONE_QUALIFIES = "no configuration is ok, checked correct and not recompiled ({why})"

LOWER_BOUND = "speedup lower bound"
POINT_SPEEDUP = "speedup"
COMPILE = "compile latency"
MEMORY = "peak memory"

Exclusion = Literal["incorrect", "failed", "recompiled", "unchecked", "untimed", "cold twin"]


def decide(ranked: Sequence[Ranked], configs: Mapping[str, Sequence[Result]]) -> Decision:
    """The decision of one group: ``ranked`` its timed configurations (``Group.ranked``), ``configs``
    every configuration's results in the group, in run order. See the module docstring."""
    calls, notes = decision_calls([r for rs in configs.values() for r in rs])
    by_label = {x.config: x for x in ranked}
    kinds: dict[str, Exclusion] = {}
    entries = []
    for label, rs in configs.items():
        entry, kind = describe(label, rs, by_label.get(label))
        entries.append(entry)
        if kind is not None:
            kinds[label] = kind
    by_config = {e.config: e for e in entries}
    for warm, twin in cold_twins(configs):
        kinds.setdefault(twin, "cold twin")
        note = charge_cold(by_config[warm], by_config[twin])
        notes += [note] if note else []
    for entry in entries:
        weigh(entry, configs[entry.config], calls)
    pareto, on, pareto_notes = pareto_set(entries)
    for entry in entries:
        entry.pareto = entry.config in pareto
    recommend, reason, lower = choose(entries, kinds, calls, configs)
    notes += unlike_bounds(recommend, ranked, kinds)
    return Decision(
        recommend=recommend,
        reason=reason,
        basis="lower_bound" if calls is None else "calls",
        calls=calls,
        lower=lower,
        configs=entries,
        pareto=pareto,
        pareto_on=on,
        notes=notes + pareto_notes,
    )


def unlike_bounds(recommend: str, ranked: Sequence[Ranked], kinds: Mapping[str, Exclusion]) -> list[str]:
    """A note when the configuration shipped has a bound from one run and a rival's spans several: a
    within-run interval leaves run-to-run noise out and is the narrower, so the two are not alike."""
    chosen = next((x for x in ranked if x.config == recommend), None)
    if chosen is None or chosen.ci_between is not None:
        return []
    rivals = [x for x in ranked if x.config != recommend and x.config not in kinds and x.ci_between is not None]
    if not rivals:
        return []
    named = ", ".join(f"{x.config} over {x.replicates} runs" for x in rivals)
    return [
        f"{recommend}'s interval is from one run, without run-to-run noise; {named}: "
        f"replicate {recommend} to weigh them alike"
    ]


def decision_calls(results: Sequence[Result]) -> tuple[int | None, list[str]]:
    """The calls a group is weighed over, and a note where it is not plainly the spec's: the results'
    ``decision.calls`` (the most common where they differ), else a replay's own calls, else None."""
    asked = Counter(r.decision.calls for r in results if r.decision)
    if asked:
        calls = asked.most_common(1)[0][0]
        if len(asked) == 1:
            return calls, []
        given = ", ".join(f"{n:,}" for n in sorted(asked))
        return calls, [f"the results ask for different decision.calls ({given}): weighed over {calls:,}, the most"]
    replayed = Counter(r.replay.calls for r in results if r.replay)
    if not replayed:
        return None, []
    calls = replayed.most_common(1)[0][0]
    return calls, [f"weighed over the {calls:,} calls the replay served (no decision.calls)"]


def describe(label: str, results: Sequence[Result], ranked: Ranked | None) -> tuple[ConfigDecision, Exclusion | None]:
    """A configuration's figures (per-call times, compile, memory) and whether it is a candidate."""
    kind, why = exclusion(results, ranked)
    timed = timed_results(results)
    times = [t for t in map(per_call_ms, timed) if t is not None]
    compile_s, compile_label = own_compile(results)
    memory = [r.compiled.peak_memory_bytes for r in timed if r.compiled and r.compiled.peak_memory_bytes]
    entry = ConfigDecision(
        config=label,
        candidate=kind is None,
        excluded=why,
        speedup=ranked.speedup if ranked else None,
        lower=ranked.ci[0] if ranked and ranked.ci else None,
        interval=("between runs" if ranked.ci_between else "within run") if ranked and ranked.ci else None,
        eager_ms=statistics.median(e for e, _ in times) if times else None,
        compiled_ms=statistics.median(c for _, c in times) if times else None,
        compile_s=compile_s,
        compile_label=compile_label,
        peak_memory_bytes=int(statistics.median(memory)) if memory else None,
    )
    return entry, kind


def exclusion(results: Sequence[Result], ranked: Ranked | None) -> tuple[Exclusion | None, str | None]:
    """Why a configuration may not be shipped, first reason first: a failed check, a failure, a recompile
    inside the timed window, a result never checked, no speedup; (None, None) for a candidate."""
    n = len(results)

    def share(k: int) -> str:
        return f" in {k} of {n} runs" if k < n else ""

    wrong = sum(r.status == "incorrect" or r.correct is False for r in results)
    if wrong:
        return "incorrect", "failed its check" + share(wrong)
    failed = [r.status for r in results if r.status != "ok"]
    if failed:
        return "failed", ", ".join(sorted(set(failed))) + share(len(failed))
    recompiled = sum(r.recompiled for r in results)
    if recompiled:
        return "recompiled", "recompiled while timed" + share(recompiled)
    unchecked = sum(r.correct is None for r in results)
    if unchecked:
        return "unchecked", "unchecked (correct: null)" + share(unchecked)
    if ranked is None:
        return "untimed", "no speedup"
    return None, None


def timed_results(results: Sequence[Result]) -> list[Result]:
    """The results whose two sides were timed with nothing compiled inside the timed window (a wrong
    result's times are shown too: it is excluded, not unmeasured)."""
    return [r for r in results if r.speedup and not r.recompiled and r.status in ("ok", "incorrect")]


def per_call_ms(r: Result) -> tuple[float, float] | None:
    """Eager's and compiled's time per call: the medians, or for a replay the traffic-weighted steady
    times, sum(w eager_ms) and sum(w compiled_ms) with the weights normalised; None where not timed."""
    if r.replay is not None:
        shapes = r.replay.per_shape
        total = sum(s.weight for s in shapes)
        if not total:
            return None
        return (
            sum(s.weight * s.eager_ms for s in shapes) / total,
            sum(s.weight * s.compiled_ms for s in shapes) / total,
        )
    if r.eager is None or r.compiled is None:
        return None
    return r.eager.median_ms, r.compiled.median_ms


def compile_latencies(results: Sequence[Result]) -> tuple[list[float], str | None]:
    """The compile latencies one mean may take, and its label: never cold and warm together (a
    configuration is one or the other; the coldest takes precedence if a caller mixes them), and, of the
    results whose caches were recorded, those served as most were (``warm: hit`` over a stray miss)."""
    timed = [r for r in results if r.compile_latency_s]
    if not timed:
        return [], None
    states = {r.compile.cache for r in timed}
    state = next((s for s in COLDEST_FIRST if s in states), min(states))
    timed = [r for r in timed if r.compile.cache == state]
    outcomes = Counter(r.compile_cache.outcome for r in timed if r.compile_cache)
    if not outcomes:
        return [r.compile_latency_s or 0.0 for r in timed], state
    outcome = outcomes.most_common(1)[0][0]
    kept = [r for r in timed if r.compile_cache and r.compile_cache.outcome == outcome]
    label = f"{state}: {outcome}" + (f" ({len(timed) - len(kept)} other left out)" if len(kept) < len(timed) else "")
    return [r.compile_latency_s or 0.0 for r in kept], label


def own_compile(results: Sequence[Result]) -> tuple[float | None, str | None]:
    """A configuration's own compile latency in seconds (the median) and how the caches served it; for
    replays, every compile of the first pass (``replay.compile_s``), the count in the label."""
    latencies, label = compile_latencies(results)
    replays = [r.replay for r in results if r.replay is not None and r.compile_latency_s]
    if replays:
        compiles = round(statistics.median(x.compiles for x in replays))
        return statistics.median(
            x.compile_s for x in replays
        ), f"{label}, {compiles} compile{'s' * (compiles != 1)} in the replay"
    return (statistics.median(latencies), label) if latencies else (None, None)


def cold_twin(results: Sequence[Result]) -> str | None:
    """The label of the same configuration compiled cold, for a configuration whose results are all warm."""
    if not results or any(r.compile.cache != "warm" for r in results):
        return None
    return results[0].config_label_as("cold")


def cold_twins(configs: Mapping[str, Sequence[Result]]) -> list[tuple[str, str]]:
    """The (warm, cold) label pairs of configurations the group measured both warm and cold."""
    pairs = [(label, cold_twin(rs)) for label, rs in configs.items()]
    return [(warm, twin) for warm, twin in pairs if twin is not None and twin in configs]


def charge_cold(warm: ConfigDecision, twin: ConfigDecision) -> str | None:
    """Charge a warm configuration its cold twin's compile latency (module docstring, step 5), and set the
    twin aside: it is the same configuration, measured to learn its cold compile, no candidate of its own
    (a twin that failed keeps its own reason). A note when a latency was charged."""
    if twin.candidate:
        twin.candidate = False
        twin.excluded = f"the cold compile of {warm.config} (charged to it)"
    if twin.compile_s is None:
        return None
    warm.compile_s = twin.compile_s
    warm.compile_label = f"{twin.compile_label}, from {twin.config}"
    return f"{warm.config} is charged the compile latency of {twin.config}, the same configuration compiled cold"


def weigh(entry: ConfigDecision, results: Sequence[Result], calls: int | None) -> None:
    """Fill the entry's break-even and, with ``calls``, its time for that many calls against eager's.

    A replay of exactly ``calls`` calls takes its first-pass totals, its compiled total moved by any
    compile latency charged in place of its own (``charge_cold``)."""
    eager, compiled, compile_s = entry.eager_ms, entry.compiled_ms, entry.compile_s
    if eager is not None and compiled is not None and compile_s is not None and eager > compiled:
        entry.break_even_calls = compile_s * 1e3 / (eager - compiled)
    if calls is None:
        return
    timed = timed_results(results)
    totals = [r.replay.total_ms for r in timed if r.replay and r.replay.calls == calls]
    totals = [t for t in totals if "eager" in t and "compiled" in t]
    if totals:
        own, _ = own_compile(results)
        moved_ms = ((compile_s or 0.0) - (own or 0.0)) * 1e3
        entry.calls_ms = statistics.median(t["compiled"] for t in totals) + moved_ms
        entry.eager_calls_ms = statistics.median(t["eager"] for t in totals)
    elif eager is not None and compiled is not None and compile_s is not None:
        entry.calls_ms = compile_s * 1e3 + calls * compiled
        entry.eager_calls_ms = calls * eager
    if entry.calls_ms is not None and entry.eager_calls_ms is not None:
        entry.pays_within_calls = entry.calls_ms < entry.eager_calls_ms


def choose(
    entries: Sequence[ConfigDecision],
    kinds: Mapping[str, Exclusion],
    calls: int | None,
    configs: Mapping[str, Sequence[Result]],
) -> tuple[str, str, float | None]:
    """The configuration to ship (or ``eager``), the reason, and its lower bound (module docstring, 2-3)."""
    candidates = [e for e in entries if e.candidate]
    if not candidates:
        return EAGER, none_qualifies(entries, kinds, configs), None
    if calls is None:
        judged = [e for e in candidates if e.lower is not None]
        if not judged:
            return EAGER, NO_INTERVAL, None
        best = max(judged, key=lambda e: e.lower or 0.0)
        if (best.lower or 0.0) > BEYOND_NOISE:
            return best.config, HIGHEST_LOWER_BOUND, best.lower
        return EAGER, NOT_FASTER, None
    weighed = [e for e in candidates if e.calls_ms is not None and e.eager_calls_ms]
    if not weighed:
        return EAGER, NO_FIGURES.format(calls=calls), None
    beyond = [e for e in weighed if e.lower is None or e.lower > BEYOND_NOISE]
    if not beyond:
        return EAGER, NOT_FASTER, None
    paying = [e for e in beyond if e.pays_within_calls]
    if not paying:
        return EAGER, NOT_PAYING.format(calls=calls), None
    best = min(paying, key=lambda e: (e.calls_ms or 0.0) / (e.eager_calls_ms or 1.0))
    return best.config, LEAST_TIME.format(calls=calls), best.lower


def none_qualifies(
    entries: Sequence[ConfigDecision], kinds: Mapping[str, Exclusion], configs: Mapping[str, Sequence[Result]]
) -> str:
    """Why no configuration is a candidate, in the words of what ruled them out (a cold twin stands with
    the configuration it measured, never for itself)."""
    seen = {kind for kind in kinds.values() if kind != "cold twin"}
    if seen == {"failed"}:
        statuses = sorted({r.status for rs in configs.values() for r in rs if r.status != "ok"})
        return EVERY_FAILED.format(statuses=", ".join(statuses))
    if seen == {"incorrect"}:
        return EVERY_INCORRECT
    if seen <= {"incorrect", "unchecked"}:
        return NONE_CHECKED
    if seen == {"recompiled"}:
        return EVERY_RECOMPILED
    why = "; ".join(f"{e.config}: {e.excluded}" for e in entries if kinds.get(e.config) != "cold twin")
    return NONE_QUALIFIES.format(why=why)


def pareto_set(entries: Sequence[ConfigDecision]) -> tuple[list[str], list[str], list[str]]:
    """The candidates not dominated (module docstring, step 7): their labels, the figures compared, and
    a note for each figure left out because some candidate lacks it."""
    candidates = [e for e in entries if e.candidate]
    if not candidates:
        return [], [], []
    figures: list[tuple[str, Callable[[ConfigDecision], float | None]]] = [
        (LOWER_BOUND, lambda e: e.lower),
        (COMPILE, lambda e: -e.compile_s if e.compile_s is not None else None),
        (MEMORY, lambda e: -float(e.peak_memory_bytes) if e.peak_memory_bytes is not None else None),
    ]
    notes = []
    if any(e.lower is None for e in candidates):
        figures[0] = (POINT_SPEEDUP, lambda e: e.speedup)
        notes.append("no 95% interval for every configuration: the Pareto set compares the point speedup")
    kept = []
    for name, key in figures:
        missing = [e.config for e in candidates if key(e) is None]
        if not missing:
            kept.append((name, key))
            continue
        who = "any configuration" if len(missing) == len(candidates) else ", ".join(missing)
        notes.append(f"{name} not measured for {who}: the Pareto set is compared on the other figures")
    on = [name for name, _ in kept]
    values = {e.config: [key(e) or 0.0 for _, key in kept] for e in candidates}

    def dominated(mine: list[float]) -> bool:
        return any(all(o >= m for o, m in zip(other, mine, strict=True)) and other != mine for other in values.values())

    return [e.config for e in candidates if not dominated(values[e.config])], on, notes
