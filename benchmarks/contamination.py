"""Does a long-lived worker's history move its numbers? A fixed probe mix timed on a fresh worker,
then again on the same worker after other experiments, each time beside a twin that ran none, and
beside a control that differs from the twin in nothing.

    python benchmarks/contamination.py            # 3 rounds, 20 other experiments, 3 triples (~35 min on 2 cores)
    python benchmarks/contamination.py --quick    # 1 round, 4 probes, 4 others, 2 triples
    python benchmarks/contamination.py --positions  # the yardstick: one probe again and again in one worker
    python benchmarks/contamination.py --out run.json   # keep every result; --from run.json prints its tables again
    python benchmarks/contamination.py --from a.json b.json   # the rounds of several runs, pooled

Each round starts three long-lived workers of one CPU (``orchestrator.execution.actors.WorkerActor`` over
``tasks.worker.Worker``: the procedure, the reset and the core claim every run uses) and sends
them experiments one at a time:

1. the probes (``seed.foo3``, ``blocks.mlp``, ``blocks.attention``, ``models.gpt``, each in
   inference and in training) on the *aged* worker, fresh;
2. ``--others`` other experiments on it (other targets, modes, backends, precisions, dynamic
   shapes, graph breaks, optimizers: what a sweep leaves in a process);
3. ``--pairs`` times each probe on three workers, one right after the other: the *twin*, a worker
   that runs only the probes, in the middle, with the aged worker on one side of it and the
   *control*, which also runs only the probes, on the other (which side alternating).

Two identical processes on this machine, timing one call seconds apart, differ by up to 15-25%
(``fidelity.py drift``), so a late median compared with a fresh one minutes earlier says more
about the machine than about the worker. A pair is the same experiment on two histories, seconds
apart, on the same core (each worker has core locks of its own, so all claim the lowest core and
take turns on it); the median over the pairs of late / twin, with a 95% bootstrap interval that
resamples rounds, then pairs, is the figure. The twin's history is the probes themselves, so what
late / twin measures is what the others leave behind. Control / twin is the same figure for two
processes whose histories are the same: what a new process alone moves, measured in the same run,
beside the figure it judges. Late / fresh minutes apart (the aged worker's first late copy over its
fresh one) is shown in a table of its own. The graph counts (graphs traced, graph breaks, graphs
compiled, recompiles, correctness) must be identical in every copy. Target: every late/twin median
within 3%; out of it, the table says whether the control was out as far.

The results' ``worker.pid``, ``worker.experiments_before`` and ``measurement.cores`` show that a
round's aged worker was one process, in which position each probe ran, and that all workers used
the same core; a round where they do not is reported as such.

``--positions`` measures how far one worker's numbers move with no history to speak of: in one
worker, the same probes again and again (``models.gpt`` training, ``blocks.mlp`` inference) at
experiments 0, 12, 24 and 36, with ten trivial experiments (``seed.foo``, eager backend)
between, in three worker processes, through ``orchestrator.api.run``.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.own_state import in_own_state  # noqa: E402
from tasks.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, percentile_interval  # noqa: E402

WITHIN = 0.03  # late/twin medians must lie within 3% of each other
PROBE_TIMING = {"warmup_ms": 100, "repeats_ms": 1000}  # per side: ~1 s of samples, for medians steady to ~1%
LATE_TIMEOUT_S = 1799.0  # a --positions copy's only difference (the default is 1800 s): another id, nothing measured
ROUNDS, OTHERS, PAIRS = 3, 20, 3
QUICK_PROBES, QUICK_OTHERS, QUICK_PAIRS = 4, 4, 2

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


AGED, TWIN, CONTROL = "aged", "twin", "control"  # runs the others; runs only the probes; so does the control


@dataclass
class Round:
    """One round's probe results as plain data: probe ``i`` fresh on the aged worker, its late copies
    there after the others, the twin's copies each taken right beside a late one; where they ran."""

    fresh: list[dict[str, Any]]  # probe i on the aged worker before anything else: a fresh process
    late: list[list[dict[str, Any]]]  # probe i's copies on the aged worker, after the others
    twin: list[list[dict[str, Any]]]  # probe i's copies on the twin, each beside a late one
    pids: set[int]  # the aged worker's process(es)
    twin_pids: set[int]
    before: list[int | None]  # the aged worker's worker.experiments_before, in the order it ran them
    cores: set[tuple[int, ...]]  # the cores the round's experiments ran on, all workers
    control: list[list[dict[str, Any]]] = field(default_factory=list)  # probe i's copies on the control
    control_pids: set[int] = field(default_factory=set)

    @property
    def apart(self) -> bool:
        """Whether the twin (and the control, where there is one) is a process of its own."""
        if not self.twin_pids or self.twin_pids & self.pids:
            return False
        return not self.control or (bool(self.control_pids) and not self.control_pids & (self.pids | self.twin_pids))

    def pairs(self, i: int, who: str = AGED) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Probe ``i``'s (late, twin) pairs, or with ``who=CONTROL`` its (control, twin) pairs: two
        results of the same experiment seconds apart."""
        mine = self.late[i] if who == AGED else self.control[i] if self.control else []
        return list(zip(mine, self.twin[i][: len(mine)], strict=True))


def schedule(probes: int, others: int, pairs: int) -> list[tuple[str, str, int]]:
    """A round's experiments in order, as (worker, ``probe`` or ``other``, index): the probes on the
    aged worker (fresh), the others on it, then ``pairs`` times each probe on the three workers,
    one right after the other, the twin in the middle and the aged worker and the control on
    either side of it, which side alternating, so that a machine that drifts within a triple
    favours neither the aged worker nor the control."""
    steps = [(AGED, "probe", i) for i in range(probes)] + [(AGED, "other", j) for j in range(others)]
    for k in range(pairs):
        for i in range(probes):
            order = (AGED, TWIN, CONTROL) if (k + i) % 2 == 0 else (CONTROL, TWIN, AGED)
            steps += [(who, "probe", i) for who in order]
    return steps


def payloads(probes: list[dict[str, Any]], others: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    """The probes (timed with ``PROBE_TIMING``) then the others, through the spec loader, as a worker
    receives them: validated experiments as plain data."""
    from orchestrator.plan.spec import load_spec

    spec = {
        "name": "contamination",
        "defaults": {"device": "cpu"},
        "experiments": [*({**p, "timing": PROBE_TIMING} for p in probes), *others],
    }
    path = tmp / "contamination.json"
    path.write_text(json.dumps(spec))
    return [e.model_dump(mode="json") for e in load_spec(path).experiments]


def start_worker(state: Path) -> Any:
    """A long-lived worker of one core: ``orchestrator.execution.actors.WorkerActor`` over ``tasks.worker.Worker``,
    the procedure and reset every run uses. Its core locks and compile caches are its own
    (``COMPILEBENCH_STATE_DIR``), so that all workers of a round claim the same core, the lowest,
    and take turns on it: the pairs compare histories, not cores. Each result says
    ``exclusive_cores: true``, each lock being held in its own directory; they never run at once,
    since the benchmark sends one experiment at a time and waits for it."""
    from orchestrator.execution.actors import WorkerActor

    env = {"COMPILEBENCH_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    return WorkerActor.options(num_cpus=1, runtime_env={"env_vars": env}).remote(1, None, None)  # type: ignore[attr-defined]


def run_round(experiments: list[dict[str, Any]], probes: int, pairs: int, index: int, tmp: Path) -> Round:
    """One round on three new workers (aged, twin, control), driven one experiment at a time in
    ``schedule``'s order; all have started before the first experiment, and all are killed after
    the last."""
    import ray

    workers = {who: start_worker(tmp / f"{who}-{index}") for who in (AGED, TWIN, CONTROL)}
    ray.get([w.ready.remote() for w in workers.values()])
    fresh: list[dict[str, Any]] = []
    copies: dict[str, list[list[dict[str, Any]]]] = {who: [[] for _ in range(probes)] for who in workers}
    ran: dict[str, list[dict[str, Any]]] = {who: [] for who in workers}
    for step, (who, what, i) in enumerate(schedule(probes, len(experiments) - probes, pairs)):
        result = ray.get(workers[who].run.remote(experiments[i if what == "probe" else probes + i]))
        ran[who].append(result)
        if what == "probe":
            (fresh if step < probes else copies[who][i]).append(result)
    for w in workers.values():
        ray.kill(w)
    return Round(
        fresh=fresh,
        late=copies[AGED],
        twin=copies[TWIN],
        pids=_pids(ran[AGED]),
        twin_pids=_pids(ran[TWIN]),
        before=[(r.get("worker") or {}).get("experiments_before") for r in ran[AGED]],
        cores={tuple((r.get("measurement") or {}).get("cores") or ()) for x in ran.values() for r in x},
        control=copies[CONTROL],
        control_pids=_pids(ran[CONTROL]),
    )


def _pids(results: list[dict[str, Any]]) -> set[int]:
    return {r["worker"]["pid"] for r in results if r.get("worker")}


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


def pair_ratios(rounds: list[Round], i: int, side: str, who: str = AGED) -> list[list[float]]:
    """Late / twin of each pair of probe ``i`` (or control / twin, ``who=CONTROL``), a list per round."""
    groups = []
    for r in rounds:
        pairs = [(side_median(mine, side), side_median(twin, side)) for mine, twin in r.pairs(i, who)]
        groups.append([a / b for a, b in pairs if a and b])
    return groups


def apart_ratios(rounds: list[Round], i: int, side: str) -> list[float]:
    """The aged worker's first late copy of probe ``i`` / its fresh one, minutes apart, per round."""
    ratios = []
    for r in rounds:
        if r.late[i] and (a := side_median(r.late[i][0], side)) and (b := side_median(r.fresh[i], side)):
            ratios.append(a / b)
    return ratios


def ratio_cell(groups: list[list[float]]) -> tuple[str, float | None, tuple[float, float] | None]:
    """``median [95% interval] (n pairs; each round's median)``; the median and the interval."""
    ratios = [x for g in groups for x in g]
    if not ratios:
        return "-", None, None
    median = statistics.median(ratios)
    per_round = f"; rounds {', '.join(f'{statistics.median(g):.2f}' for g in groups if g)}" if len(groups) > 1 else ""
    if len(ratios) < 3:
        return f"{median:.3f} ({len(ratios)}{per_round})", median, None
    low, high = round_interval(groups)
    return f"{median:.3f} [{low:.3f}, {high:.3f}] ({len(ratios)}{per_round})", median, (low, high)


def round_interval(
    groups: list[list[float]], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """95% bootstrap interval of the median of all pairs, resampling rounds, then the pairs within each.

    The copies of one round share three processes, and where a process's memory lies can set a
    memory-bound probe's speed for its whole life (``fidelity.py drift``): a round, not a pair, is
    the unit that is drawn afresh. With one round this is the plain bootstrap of its pairs. Only the
    two-level draw is here: the generator, its defaults and the percentile interval are
    ``tasks.stats``'s, as every other interval of compilebench's."""
    rng = np.random.default_rng(seed)
    kept = [np.asarray(g, dtype=float) for g in groups if g]
    medians = np.empty(resamples)
    for k in range(resamples):
        picked = [kept[j] for j in rng.integers(0, len(kept), len(kept))]
        medians[k] = np.median(np.concatenate([g[rng.integers(0, len(g), len(g))] for g in picked]))
    return percentile_interval(medians)


def spread(values: list[float]) -> str:
    """How far fresh workers (one a round, each a new process) differ among themselves: max / min."""
    return f"{max(values) / min(values):.2f}x" if len(values) > 1 else "-"


def counts(result: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(result.get(key) for key in COUNTS)


def table(probes: list[dict[str, Any]], rounds: list[Round]) -> list[str]:
    """Per probe: each side's fresh median, late/twin and control/twin; the counts; the verdict.

    ``ok``: late/twin within ``WITHIN`` on every side, identical counts, every status ``ok``. Out
    of it, with counts and statuses as they should be: ``as the control`` where on every side out
    of ``WITHIN`` the control, which differs from the twin in nothing, lies at least as far from
    1.0 (the history moved the numbers no more than a second new process does); ``1.0 inside both
    intervals`` where the pairs show no difference either way; else ``OUT``."""
    rows = [
        "| probe | eager: fresh | late/twin | control/twin | compiled: fresh | late/twin | control/twin | "
        "speedup: fresh | late/twin | graphs, breaks, compiled, recompiled, correct | same counts | target |",
        "| --- | ---: | --- | --- | ---: | --- | --- | ---: | --- | --- | --- | --- |",
    ]
    for i, probe in enumerate(probes):
        cells: list[str] = []
        worst, noise, as_control = 0.0, True, True
        every = [x for r in rounds for x in (r.fresh[i], *r.late[i], *r.twin[i], *(r.control[i] if r.control else ()))]
        for side in ("eager", "compiled"):
            fresh = [m for r in rounds if (m := side_median(r.fresh[i], side))]
            shown, ratio, ci = ratio_cell(pair_ratios(rounds, i, side))
            control_shown, control, _ = ratio_cell(pair_ratios(rounds, i, side, CONTROL))
            cells += [f"{statistics.median(fresh):.3f} ms" if fresh else "-", shown, control_shown]
            off = abs(ratio - 1) if ratio is not None else float("inf")
            worst = max(worst, off)
            noise &= ci is not None and ci[0] <= 1.0 <= ci[1]
            as_control &= off <= WITHIN or (control is not None and abs(control - 1) >= off)
        speedups = [m for r in rounds if (m := side_median(r.fresh[i], "speedup"))]
        cells += [
            f"{statistics.median(speedups):.2f}x" if speedups else "-",
            ratio_cell(pair_ratios(rounds, i, "speedup"))[0],
        ]
        seen = {counts(x) for x in every}
        same = len(seen) == 1
        shown_counts = " / ".join(", ".join(str(v) for v in c) for c in sorted(seen, key=str))
        statuses = {x["status"] for x in every}
        if worst <= WITHIN and same and statuses == {"ok"}:
            verdict = "ok"
        elif as_control and same and statuses == {"ok"}:
            verdict = f"OUT of ±{WITHIN:.0%}, as the control"
        elif noise and same and statuses == {"ok"}:
            verdict = f"OUT of ±{WITHIN:.0%}; 1.0 inside both intervals"
        else:
            verdict = f"OUT (±{WITHIN:.0%}{', same counts' if same else ''})"
        if statuses != {"ok"}:
            verdict += f"; status {', '.join(sorted(statuses))}"
        same_cell = "yes" if same else "NO"
        rows.append(f"| {label(probe)} | {' | '.join(cells)} | {shown_counts} | {same_cell} | {verdict} |")
    return rows


def apart_table(probes: list[dict[str, Any]], rounds: list[Round]) -> list[str]:
    """Late / fresh minutes apart, per probe, side and round: what the pairs take the machine out of."""
    rows = ["| probe | eager: late/fresh | compiled: late/fresh |", "| --- | --- | --- |"]
    for i, probe in enumerate(probes):
        rows.append(
            f"| {label(probe)} | {_list(apart_ratios(rounds, i, 'eager'))} | "
            f"{_list(apart_ratios(rounds, i, 'compiled'))} |"
        )
    return rows


def control_within(probes: list[dict[str, Any]], rounds: list[Round]) -> tuple[int, int]:
    """How many probe sides (eager, compiled) of the control lie within ``WITHIN`` of the twin, of how many."""
    medians = [
        statistics.median(ratios)
        for i in range(len(probes))
        for side in ("eager", "compiled")
        if (ratios := [x for g in pair_ratios(rounds, i, side, CONTROL) for x in g])
    ]
    return sum(abs(m - 1) <= WITHIN for m in medians), len(medians)


def _list(ratios: list[float]) -> str:
    return ", ".join(f"{x:.3f}" for x in ratios) or "-"


def main() -> None:
    in_own_state("contamination")
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help="new aged, twin and control workers: this many times"
    )
    parser.add_argument("--others", type=int, default=OTHERS, help=f"experiments between (at most {OTHERS})")
    parser.add_argument("--pairs", type=int, default=PAIRS, help="late, twin, control triples of each probe in a round")
    parser.add_argument("--quick", action="store_true", help=f"1 round, {QUICK_PROBES} probes, {QUICK_OTHERS} others")
    parser.add_argument("--positions", action="store_true", help="the same probes again and again in one worker")
    parser.add_argument("--out", type=Path, help="also write every result of the run to this JSON file")
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        help="print the tables of runs written by --out, their rounds pooled",
    )
    args = parser.parse_args()
    if args.positions:
        positions_main()
        return
    if args.sources:
        try:
            data = pooled([json.loads(path.read_text()) for path in args.sources])
        except (OSError, ValueError) as e:
            parser.error(str(e))
    else:
        data = collect(args)
        if args.out:
            partial = args.out.with_name(args.out.name + ".partial")
            partial.write_text(json.dumps(data))
            partial.replace(args.out)
    render(data)


def collect(args: argparse.Namespace) -> dict[str, Any]:
    """Run the rounds; everything ``render`` needs, as plain data."""
    rounds_n = 1 if args.quick else args.rounds
    pairs = QUICK_PAIRS if args.quick else args.pairs
    probes = PROBES[:QUICK_PROBES] if args.quick else PROBES
    others = OTHER_EXPERIMENTS[: QUICK_OTHERS if args.quick else min(args.others, len(OTHER_EXPERIMENTS))]
    load = os.getloadavg()[0]

    import ray

    from orchestrator.execution.cluster import connect

    rounds: list[Round] = []
    with tempfile.TemporaryDirectory() as tmp:
        connect(num_cpus=3)  # three workers of one CPU each; they take turns on one core
        experiments = payloads(probes, others, Path(tmp))
        for index in range(rounds_n):
            print(
                f"round {index + 1}/{rounds_n}: {len(probes)} probes fresh, {len(others)} others, "
                f"then {pairs} late, twin, control triple(s) of each probe...",
                file=sys.stderr,
                flush=True,
            )
            rounds.append(run_round(experiments, len(probes), pairs, index, Path(tmp)))
    ray.shutdown()
    return {
        "command": f"python benchmarks/contamination.py {shlex.join(sys.argv[1:])}".strip(),
        "probes": probes,
        "others": len(others),
        "pairs": pairs,
        "machine": f"{os.cpu_count()} cores, load average {load:.1f} at start; Ray {ray.__version__}, "
        f"Python {platform.python_version()}",
        "rounds": [round_data(r) for r in rounds],
    }


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs written by ``--out`` as one: their rounds, in order. Each round is two or three new
    processes, drawn afresh, so rounds of runs of the same probes, others and pairs pool as rounds of
    one run; runs that differ in those are refused."""
    first = runs[0]
    for run in runs[1:]:
        if any(run[key] != first[key] for key in ("probes", "others", "pairs")):
            raise ValueError("runs of different probes, others or pairs cannot be pooled")
    if len(runs) == 1:
        return first
    return {
        **first,
        "command": " + ".join(run["command"] for run in runs),
        "machine": " / ".join(dict.fromkeys(run["machine"] for run in runs)),
        "rounds": [r for run in runs for r in run["rounds"]],
    }


def round_data(r: Round) -> dict[str, Any]:
    """A round as JSON data (``rounds_of`` reads it back)."""
    return {
        **{name: getattr(r, name) for name in ("fresh", "late", "twin", "control", "before")},
        "pids": sorted(r.pids),
        "twin_pids": sorted(r.twin_pids),
        "control_pids": sorted(r.control_pids),
        "cores": [list(c) for c in sorted(r.cores)],
    }


def rounds_of(data: dict[str, Any]) -> list[Round]:
    return [
        Round(
            fresh=r["fresh"],
            late=r["late"],
            twin=r["twin"],
            pids=set(r["pids"]),
            twin_pids=set(r["twin_pids"]),
            before=r["before"],
            cores={tuple(c) for c in r["cores"]},
            control=r.get("control") or [],  # runs written before the control had none
            control_pids=set(r.get("control_pids") or ()),
        )
        for r in data["rounds"]
    ]


def render(data: dict[str, Any]) -> None:
    probes, rounds, pairs = data["probes"], rounds_of(data), data["pairs"]
    n, k = len(probes), data["others"]
    print(f"\n`{data['command']}`")
    print(
        f"\n{n} probes on a fresh worker (the aged one), then {k} other experiments on it, then {pairs} time(s) "
        "each probe on three workers one right after the other: the aged one, a twin that runs only the probes, "
        "and a control that runs only the probes too, the twin in the middle. late/twin: the median over the pairs "
        "of the aged worker's median / the twin's [95% bootstrap interval, rounds resampled, then pairs] (pairs; "
        "each round's median); control/twin: the same for two workers that differ in nothing, what a new process "
        f"alone moves. {len(rounds)} round(s), each with three new workers of one CPU and one thread, taking turns "
        f"on one core. Probe timing {PROBE_TIMING} per side. {data['machine']}\n"
    )
    for i, r in enumerate(rounds):
        one = "one process" if len(r.pids) == 1 else f"NOT one process: pids {sorted(r.pids)}"
        apart = "processes of their own" if r.apart else "NOT processes of their own"
        cores = ", ".join(str(list(c)) for c in sorted(r.cores))
        print(
            f"round {i + 1}: aged worker {one}; experiments before each probe: fresh {r.before[:n]}, "
            f"late {r.before[n + k]} to {r.before[-1]}; twin and control: {apart}; cores {cores}"
        )
    rows = table(probes, rounds)
    print()
    print("\n".join(rows))
    print("\nlate/fresh, minutes apart (the aged worker's first late median / its fresh one, per round):\n")
    print("\n".join(apart_table(probes, rounds)))
    same_process = all(len(r.pids) == 1 and r.apart and len(r.cores) == 1 for r in rounds)
    within = all(row.endswith("| ok |") for row in rows[2:])
    verdict = "met" if same_process and within else "NOT met"
    held, sides = control_within(probes, rounds)
    print(
        f"\ntarget (every late/twin median within {WITHIN:.0%}, identical counts, one aged worker a round, "
        f"all workers on one core): {verdict}. The control, no history apart, was within {WITHIN:.0%} of the "
        f"twin on {held} of {sides} sides."
    )


if __name__ == "__main__":
    main()
