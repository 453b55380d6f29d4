"""Does a long-lived worker's history move its numbers? A fixed probe mix timed on a fresh worker,
then again on the same worker after other experiments.

    python benchmarks/contamination.py            # 3 rounds, 20 other experiments between (~15 min on 2 cores)
    python benchmarks/contamination.py --quick    # 1 round, 4 probes, 4 others between
    python benchmarks/contamination.py --positions  # the yardstick: one probe again and again in one worker

Each round is one ``orchestrator.api.run`` on a local Ray instance of one CPU, so that every
experiment of the round lands on the same long-lived worker, one after another, in spec order:

1. the probes (``seed.foo3``, ``blocks.mlp``, ``blocks.attention``, ``models.gpt``, each in
   inference and in training), on the fresh worker;
2. ``--others`` other experiments (other targets, modes, backends, precisions, dynamic shapes,
   graph breaks, optimizers: what a sweep leaves in a process);
3. the probes again. The late copy of a probe differs from the early one only in ``timeout_s``,
   which is not measured: the spec then holds both under distinct ids;
4. right after, a second ``orchestrator.api.run`` of the probes alone: a new worker, fresh again.

The result's ``worker.pid`` and ``worker.experiments_before`` show that every experiment of a
round's first run ran in one process and in which position; a round where they do not is reported
as such. A late probe runs minutes after the fresh one, and this machine's speed drifts by more than
3% in minutes; so each late median is compared with the fresh medians before and after it,
interpolated to the time it was taken (results' ``started_at``/``finished_at``): drift that is
linear over the round cancels, a worker's history does not. Per probe and side: the median over
rounds of (late median / fresh median at the same time), and, for comparison, of (late / the fresh
median before it only); and the graph counts (graphs traced, graph breaks, graphs compiled,
recompiles, correctness), which must be identical. Target: every ratio within 3%. Beside each
side's fresh median, the fresh spread: how far the fresh workers (two a round, each a new process)
differ among themselves (max / min), the yardstick for a probe whose late ratio misses 3%: a late
median inside the fresh processes' range is one a new process could have given too.

``--positions`` measures the yardstick itself: in one worker, the same probes again and again
(``models.gpt`` training, ``blocks.mlp`` inference) at experiments 0, 12, 24 and 36, with ten
trivial experiments (``seed.foo``, eager backend) between, in three worker processes. A worker's
history barely changes between those positions; how far the medians move there is how far this
machine moves one experiment's numbers within minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WITHIN = 0.03  # late/fresh medians must lie within 3% of each other
PROBE_TIMING = {"warmup_ms": 100, "repeats_ms": 1000}  # per side: ~1 s of samples, for medians steady to ~1%
LATE_TIMEOUT_S = 1799.0  # the late copy's only difference (the default is 1800 s): another id, nothing measured
ROUNDS, OTHERS = 3, 20
QUICK_PROBES, QUICK_OTHERS = 4, 4

# (label, target, params): small sizes, milliseconds per call on one core.
PROBE_TARGETS: list[tuple[str, str, dict[str, Any]]] = [
    ("seed.foo3 1024x1024", "seed.foo3", {"shape": [1024, 1024]}),
    ("blocks.mlp", "blocks.mlp", {}),
    ("blocks.attention", "blocks.attention", {}),
    ("models.gpt", "models.gpt", {}),
]
PROBES: list[dict[str, Any]] = [
    {"target": target, "params": params, "phase": phase}
    for phase in ("inference", "training")
    for _, target, params in PROBE_TARGETS
]

# What a varied sweep runs between: each leaves something different behind in the process.
OTHER_EXPERIMENTS: list[dict[str, Any]] = [
    {"target": "seed.foo"},
    {"target": "seed.outer"},
    {"target": "seed.my_module", "compile": {"method": "module_compile"}},
    {"target": "seed.bar"},  # a graph break
    {"target": "seed.bar_fixed", "compile": {"fullgraph": True}},
    {"target": "seed.foo3", "params": {"shape": [512, 512]}, "compile": {"mode": "max-autotune-no-cudagraphs"}},
    {"target": "blocks.layernorm_gelu", "params": {"seq": 32}},
    {"target": "blocks.softmax"},
    {"target": "blocks.softmax", "phase": "training"},
    {"target": "blocks.conv_bn_relu"},
    {"target": "blocks.conv_bn_relu", "phase": "training", "optimizer": "sgd"},
    {"target": "blocks.transformer_layer", "params": {"seq": 64}},
    {"target": "blocks.mlp", "phase": "training", "optimizer": "adamw", "compile": {"scope": "step"}},
    {"target": "blocks.mlp", "precision": "bf16"},
    {"target": "blocks.attention", "compile": {"dynamic": True}},
    {"target": "models.gpt", "phase": "training", "params": {"dropout": 0.1}},  # random ops
    {"target": "seed.foo", "compile": {"backend": "aot_eager"}},
    {"target": "dynamic.foo3"},  # four shapes: recompiles
    {"target": "dynamic.foo3", "compile": {"dynamic": True}},
    {"target": "seed.outer", "compile": {"backend": "eager"}},
]
COUNTS = ("graph_count", "graph_breaks", "graphs_compiled", "recompiled", "correct")

POSITION_PROBES: list[dict[str, Any]] = [
    {"target": "models.gpt", "params": {}, "phase": "training"},
    {"target": "blocks.mlp", "params": {}, "phase": "inference"},
]
POSITIONS, POSITION_ROUNDS, POSITION_FILLERS = 4, 3, 10  # probes at experiments 0, 12, 24, 36 of a worker


def positions_spec(index: int) -> dict[str, Any]:
    """The probes ``POSITIONS`` times, ``POSITION_FILLERS`` trivial experiments between; each copy of
    a probe differs only in ``timeout_s`` (not measured), so that the spec keeps them apart."""
    experiments: list[dict[str, Any]] = []
    for k in range(POSITIONS):
        experiments += [{**p, "timing": PROBE_TIMING, "timeout_s": LATE_TIMEOUT_S - k} for p in POSITION_PROBES]
        if k < POSITIONS - 1:
            fillers = range(k * POSITION_FILLERS, (k + 1) * POSITION_FILLERS)
            experiments += [{"target": "seed.foo", "compile": {"backend": "eager"}, "seed": i} for i in fillers]
    return {"name": f"positions-{index}", "defaults": {"device": "cpu"}, "experiments": experiments}


def positions_rows(rounds: list[list[dict[str, Any]]]) -> list[str]:
    """Per probe, round and side: the medians at each position in one worker, and max / min; the
    speedups beside (each eager / compiled of one interleaved window)."""
    rows = [
        "| probe | round | side | experiments before | medians (ms; speedup: x) | max / min |",
        "| --- | ---: | --- | --- | --- | ---: |",
    ]
    for probe in POSITION_PROBES:
        for index, results in enumerate(rounds):
            mine = [r for r in results if r["target"] == probe["target"] and r["phase"] == probe["phase"]]
            before = [(r.get("worker") or {}).get("experiments_before") for r in mine]
            for side in ("eager", "compiled", "speedup"):
                medians = [m for r in mine if (m := side_median(r, side))]
                shown = ", ".join(f"{m:.3f}" for m in medians) or "-"
                rows.append(
                    f"| {label(probe)} | {index + 1} | {side} | {before} | {shown} | "
                    f"{spread(medians) if medians else '-'} |"
                )
    return rows


def run_positions(tmp: Path) -> list[list[dict[str, Any]]]:
    from orchestrator.api import run

    rounds = []
    for index in range(POSITION_ROUNDS):
        print(f"positions round {index + 1}/{POSITION_ROUNDS}...", file=sys.stderr, flush=True)
        spec = tmp / f"positions-{index}.json"
        spec.write_text(json.dumps(positions_spec(index)))
        report = run(spec, tmp / f"positions-{index}.report.json", num_cpus=1, overwrite=True)
        rounds.append([r.model_dump(mode="json") for r in report.results])
    return rounds


@dataclass
class Round:
    """One round's probe results, early and late, as plain data; whether one process ran it all."""

    fresh: list[dict[str, Any]]
    late: list[dict[str, Any]]
    after: list[dict[str, Any]]  # the probes on a new worker, right after the late ones
    pids: set[int]
    before: list[int | None]  # worker.experiments_before of each experiment, in spec order
    after_pids: set[int]

    @property
    def after_apart(self) -> bool:
        """Whether the probes after ran in a process of their own, not the round's worker."""
        return bool(self.after_pids) and not self.after_pids & self.pids

    def fresh_results(self, i: int) -> list[dict[str, Any]]:
        """Probe ``i``'s fresh results: on the round's worker before the others, and on the new one after."""
        return [self.fresh[i], *self.after[i : i + 1]]


def round_spec(probes: list[dict[str, Any]], others: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """Probes, others, the probes again (late copies with ``LATE_TIMEOUT_S``), all on the CPU."""
    timed = [{**p, "timing": PROBE_TIMING} for p in probes]
    return {
        "name": f"contamination-{index}",
        "defaults": {"device": "cpu"},
        "experiments": [*timed, *others, *({**p, "timeout_s": LATE_TIMEOUT_S} for p in timed)],
    }


def after_spec(probes: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """The probes alone, once each, as the round timed them: for the new worker after a round."""
    timed = [{**p, "timing": PROBE_TIMING} for p in probes]
    return {"name": f"contamination-{index}-after", "defaults": {"device": "cpu"}, "experiments": timed}


def run_round(probes: list[dict[str, Any]], others: list[dict[str, Any]], index: int, tmp: Path) -> Round:
    """One round through ``orchestrator.api.run`` on a one-CPU local instance: one worker, in order."""
    from orchestrator.api import run

    spec = tmp / f"round-{index}.json"
    spec.write_text(json.dumps(round_spec(probes, others, index)))
    report = run(spec, tmp / f"round-{index}.report.json", num_cpus=1, overwrite=True)
    results = [r.model_dump(mode="json") for r in report.results]
    again = tmp / f"round-{index}-after.json"
    again.write_text(json.dumps(after_spec(probes, index)))
    after_report = run(again, tmp / f"round-{index}-after.report.json", num_cpus=1, overwrite=True)
    after = [r.model_dump(mode="json") for r in after_report.results]
    n = len(probes)
    return Round(
        fresh=results[:n],
        late=results[-n:],
        after=after,
        pids={r["worker"]["pid"] for r in results if r.get("worker")},
        before=[(r.get("worker") or {}).get("experiments_before") for r in results],
        after_pids={r["worker"]["pid"] for r in after if r.get("worker")},
    )


def side_median(result: dict[str, Any], side: str) -> float | None:
    """A side's median (ms), or with ``side="speedup"`` the result's speedup."""
    if side == "speedup":
        speedup: float | None = result.get("speedup")
        return speedup
    timing = result.get(side)
    return timing["median_ms"] if timing else None


def label(probe: dict[str, Any]) -> str:
    name = next(lbl for lbl, target, params in PROBE_TARGETS if target == probe["target"] and params == probe["params"])
    return f"{name}, {probe['phase']}"


def positions_main() -> None:
    import ray

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rounds = run_positions(Path(tmp))
    ray.shutdown()
    print("\n`python benchmarks/contamination.py --positions`")
    print(
        f"\nThe same probes at {POSITIONS} positions of one worker, {POSITION_FILLERS} trivial experiments between, "
        f"{POSITION_ROUNDS} worker processes (one CPU, one thread). Probe timing {PROBE_TIMING} per side. "
        f"{os.cpu_count()} cores, load average {load:.1f} at start.\n"
    )
    print("\n".join(positions_rows(rounds)))


def midpoint(result: dict[str, Any]) -> float:
    return (result["started_at"] + result["finished_at"]) / 2


def fresh_at(before: dict[str, Any], after: dict[str, Any] | None, when: float, side: str) -> float | None:
    """The fresh median at time ``when``: interpolated between the fresh result before it and the one
    after it (each from a new worker), or the one before alone where there is no after."""
    first = side_median(before, side)
    if after is None or not first or not (last := side_median(after, side)):
        return first
    t0, t1 = midpoint(before), midpoint(after)
    share = min(1.0, max(0.0, (when - t0) / (t1 - t0))) if t1 > t0 else 0.5
    return first + (last - first) * share


def ratio_cell(rounds: list[Round], i: int, side: str, interpolated: bool = True) -> tuple[str, float | None]:
    """Late / fresh per round, and their median: the fresh median at the late one's time, or the one
    before it only."""
    ratios = []
    for r in rounds:
        after = r.after[i] if interpolated and i < len(r.after) else None
        fresh = fresh_at(r.fresh[i], after, midpoint(r.late[i]), side)
        late = side_median(r.late[i], side)
        if fresh and late:
            ratios.append(late / fresh)
    if not ratios:
        return "-", None
    ratio = statistics.median(ratios)
    return f"{ratio:.3f} ({', '.join(f'{x:.3f}' for x in ratios)})", ratio


def spread(values: list[float]) -> str:
    """How far fresh workers (one a round, each a new process) differ among themselves: max / min."""
    return f"{max(values) / min(values):.2f}x" if len(values) > 1 else "-"


def counts(result: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(result.get(key) for key in COUNTS)


def table(probes: list[dict[str, Any]], rounds: list[Round]) -> list[str]:
    rows = [
        "| probe | eager: fresh | fresh spread | late/fresh at the same time | late/fresh before | "
        "compiled: fresh | fresh spread | late/fresh at the same time | late/fresh before | "
        "speedup: fresh | late/fresh at the same time | graphs, breaks, compiled, recompiled, correct | same counts | "
        "target |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- | --- | --- |",
    ]
    for i, probe in enumerate(probes):
        cells, worst, within_spread = [], 0.0, True
        fresh_all = [x for r in rounds for x in r.fresh_results(i)]
        for side in ("eager", "compiled"):
            fresh = [m for x in fresh_all if (m := side_median(x, side))]
            late = [m for r in rounds if (m := side_median(r.late[i], side))]
            shown, ratio = ratio_cell(rounds, i, side)
            _, before_only = ratio_cell(rounds, i, side, interpolated=False)
            before_shown = f"{before_only:.3f}" if before_only is not None else "-"
            cells += [f"{statistics.median(fresh):.3f} ms" if fresh else "-", spread(fresh), shown, before_shown]
            worst = max(worst, abs(ratio - 1) if ratio is not None else float("inf"))
            within_spread &= bool(fresh and late) and min(fresh) <= statistics.median(late) <= max(fresh)
        speedups = [m for x in fresh_all if (m := side_median(x, "speedup"))]
        cells += [f"{statistics.median(speedups):.2f}x" if speedups else "-", ratio_cell(rounds, i, "speedup")[0]]
        seen = {counts(x) for x in fresh_all} | {counts(r.late[i]) for r in rounds}
        same = len(seen) == 1
        shown_counts = " / ".join(", ".join(str(v) for v in c) for c in sorted(seen, key=str))
        statuses = {x["status"] for x in fresh_all} | {r.late[i]["status"] for r in rounds}
        if worst <= WITHIN and same and statuses == {"ok"}:
            verdict = "ok"
        elif within_spread and len(rounds) > 1 and same and statuses == {"ok"}:
            verdict = f"OUT of ±{WITHIN:.0%}; late within the fresh processes' range"
        else:
            verdict = f"OUT (±{WITHIN:.0%}, same counts)"
        if statuses != {"ok"}:
            verdict += f"; status {', '.join(sorted(statuses))}"
        rows.append(
            f"| {label(probe)} | {' | '.join(cells)} | {shown_counts} | {'yes' if same else 'NO'} | {verdict} |"
        )
    return rows


def in_own_state() -> None:
    """Run from the checkout (Ray's local workers start in the driver's directory) with core locks
    and compile caches of this benchmark's own, apart from any other compilebench process."""
    os.chdir(ROOT)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("COMPILEBENCH_STATE_DIR", tempfile.mkdtemp(prefix="compilebench-contamination-"))


def main() -> None:
    in_own_state()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="fresh worker, others, late probes: this many times")
    parser.add_argument("--others", type=int, default=OTHERS, help=f"experiments between (at most {OTHERS})")
    parser.add_argument("--quick", action="store_true", help=f"1 round, {QUICK_PROBES} probes, {QUICK_OTHERS} others")
    parser.add_argument("--positions", action="store_true", help="the same probes again and again in one worker")
    args = parser.parse_args()
    if args.positions:
        positions_main()
        return
    rounds_n = 1 if args.quick else args.rounds
    probes = PROBES[:QUICK_PROBES] if args.quick else PROBES
    others = OTHER_EXPERIMENTS[: QUICK_OTHERS if args.quick else min(args.others, len(OTHER_EXPERIMENTS))]
    load = os.getloadavg()[0]

    import ray

    rounds: list[Round] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(rounds_n):
            print(
                f"round {index + 1}/{rounds_n}: {len(probes)} probes, {len(others)} others, the probes again...",
                file=sys.stderr,
                flush=True,
            )
            rounds.append(run_round(probes, others, index, Path(tmp)))
    ray.shutdown()

    print(f"\n`python benchmarks/contamination.py {shlex.join(sys.argv[1:])}`".replace(" `", "`"))
    print(
        f"\n{len(probes)} probes on a fresh worker, then after {len(others)} other experiments on the same worker, "
        "then on a new worker again; late/fresh at the same time: the late median over the fresh medians before and "
        f"after it, interpolated to its time. {rounds_n} round(s), each with new workers (one CPU, one thread). "
        f"Probe timing {PROBE_TIMING} per side. "
        f"{os.cpu_count()} cores, load average {load:.1f} at start; Ray {ray.__version__}, "
        f"Python {platform.python_version()}\n"
    )
    for i, r in enumerate(rounds):
        n = len(probes)
        one = "one process" if len(r.pids) == 1 else f"NOT one process: pids {sorted(r.pids)}"
        fresh_pos, late_pos = r.before[:n], r.before[-n:]
        apart = "a new process" if r.after_apart else "NOT a new process"
        print(
            f"round {i + 1}: {one}; experiments before each probe: fresh {fresh_pos}, late {late_pos}; "
            f"the probes after: {apart}"
        )
    print()
    print("\n".join(table(probes, rounds)))
    same_process = all(len(r.pids) == 1 and r.after_apart for r in rounds)
    within = all(row.endswith("| ok |") for row in table(probes, rounds)[2:])
    verdict = "met" if same_process and within else "NOT met"
    print(f"\ntarget (every late/fresh median within {WITHIN:.0%}, identical counts, one worker per round): {verdict}")


if __name__ == "__main__":
    main()
