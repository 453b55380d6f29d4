"""The regression gate on a big sweep with one run a side: A/A false alarms, injected slowdowns caught, and a
sweep-wide slowdown seen as one verdict.

    python benchmarks/gate_fdr.py [--sweep blocks|tutorial] [--out DIR]   # a 120-experiment spec run twice, the table
    python benchmarks/gate_fdr.py --reports DIR    # the table again from an earlier run's a.json and b.json
    python benchmarks/gate_fdr.py --reports DIR --compact tests/data/gate-fdr   # and a compact copy of them
    python benchmarks/gate_fdr.py --simulate       # the empirical null on simulated sweeps of known noise (a minute)

Runs one spec of 120 cheap experiments (``SWEEPS``: the six building blocks at ten sizes each, 30 timed
samples a side, or the six tutorial targets at ten sizes each, 10 samples a side; compiled by the ``eager``
and ``aot_eager`` backends, CPU) twice through ``compilebench run``, each a fresh local Ray instance:
``a.json`` and ``b.json``, the same code minutes apart. Then, through ``compilebench compare`` at its
defaults (``-f json``):

- **A/A**: a.json against b.json. Every regression flagged is a false alarm (goal: at most 1, exit 0).
- **5 slower by 10%**: a.json against a copy of b.json whose compiled samples of 5 experiments (spread over
  the sweep, ``SLOWED``) are 10% longer (``slowed``: each sample times 1.1, the statistics derived again);
  how many of the 5 are flagged slower (goal: at least 4), and how many others are.
- **all 5% slower**: a.json against a copy of b.json with every compiled sample 5% longer: the sweep-wide
  verdict (goal: flagged, as one regression).

Each scenario's row gives the command that produced it; the reports and the copies stay in the folder.
``--compact DIR`` writes a.json, b.json and session.json again in DIR, small enough to commit (``compact``):
``tests/test_compare_fdr.py`` checks the same outcomes from them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.report import Report, read, write_report  # noqa: E402
from tasks.models import Result  # noqa: E402
from tasks.stats import describe  # noqa: E402

SIZES = [128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280]  # square shapes of the elementwise targets
BATCHES = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]  # seed.my_module's batch
LENGTHS = [10, 100, 1000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000]  # seed.bar's size
INJECTED = 1.10  # the 5 slowed experiments' compiled samples, times this
SWEEP = 1.05  # every compiled sample, times this
SLOWED_COUNT = 5


# The sweeps, each 6 targets x 10 sizes x 2 backends (eager, aot_eager) = 120 experiments, one run each:
# "tutorial": the seed targets, calls of 0.01-20 ms, 10 samples a side; "blocks": the building blocks at sizes
# whose calls take about 0.3-10 ms here, 30 samples a side.
TUTORIAL = [
    ("seed.foo", "shape", [[n, n] for n in SIZES]),
    ("seed.outer", "shape", [[n, n] for n in SIZES]),
    ("seed.foo3", "shape", [[n, n] for n in SIZES]),
    ("seed.my_module", "batch", BATCHES),
    ("seed.bar", "size", LENGTHS),
    ("seed.bar_fixed", "size", LENGTHS),
]
BLOCKS = [
    ("blocks.mlp", "dim", [128, 192, 256, 320, 384, 448, 512, 576, 640, 704]),
    ("blocks.softmax", "seq", [256, 320, 384, 448, 512, 576, 640, 704, 768, 832]),
    ("blocks.layernorm_gelu", "batch", [8, 12, 16, 20, 24, 28, 32, 36, 40, 44]),
    ("blocks.attention", "seq", [64, 96, 128, 160, 192, 224, 256, 288, 320, 352]),
    ("blocks.conv_bn_relu", "size", [16, 20, 24, 28, 32, 36, 40, 44, 48, 52]),
    ("blocks.transformer_layer", "seq", [64, 96, 128, 160, 192, 224, 256, 288, 320, 352]),
]
SWEEPS: dict[str, tuple[list[tuple[str, str, list[Any]]], int]] = {"tutorial": (TUTORIAL, 10), "blocks": (BLOCKS, 30)}


def spec_text(sweep: str = "blocks") -> str:
    """The spec of one of ``SWEEPS``: its targets at ten sizes each, both backends, its samples a side."""
    targets, repeats = SWEEPS[sweep]
    experiments = "".join(
        f"  - target: {target}\n    sweep:\n      params.{param}: {json.dumps(values)}\n"
        "      compile.backend: [eager, aot_eager]\n"
        for target, param, values in targets
    )
    timing = f"{{warmup: 2, repeats: {repeats}}}"
    return f"name: gate-fdr-{sweep}\ndefaults:\n  device: cpu\n  timing: {timing}\nexperiments:\n{experiments}"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )


def run_twice(out: Path, sweep: str) -> dict[str, Any]:
    """``compilebench run`` of the spec into a.json, then b.json; their durations and the load around them."""
    spec = out / "gate-fdr.yaml"
    spec.write_text(spec_text(sweep))
    session: dict[str, Any] = {"sweep": sweep, "load": [os.getloadavg()[0]], "seconds": []}
    for name in ("a", "b"):
        start = time.monotonic()
        proc = cli("run", str(spec), "--out", str(out / f"{name}.json"), "--overwrite")
        if proc.returncode != 0:
            sys.exit(f"run {name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        session["seconds"].append(time.monotonic() - start)
        session["load"].append(os.getloadavg()[0])
    (out / "session.json").write_text(json.dumps(session, indent=2) + "\n")
    return session


def slowed(report: Report, factor: float, ids: set[str] | None = None) -> Report:
    """The report as if the compiled side of the experiments ``ids`` (None: every one) had taken ``factor``
    times as long: each compiled sample (and first call) scaled, its statistics derived again
    (``tasks.stats.describe``), the speedup eager median / compiled median again."""

    def slow(r: Result) -> Result:
        if (ids is not None and r.experiment_id not in ids) or r.compiled is None or r.eager is None:
            return r
        samples = [s * factor for s in r.compiled.samples_ms]
        compiled = r.compiled.model_copy(
            update={
                **describe(samples).model_dump(),
                "samples_ms": samples,
                "first_call_ms": r.compiled.first_call_ms * factor,
            }
        )
        speedup = r.eager.median_ms / compiled.median_ms if r.speedup is not None else None
        return r.model_copy(update={"compiled": compiled, "speedup": speedup})

    return report.model_copy(update={"results": [slow(r) for r in report.results]})


def chosen(report: Report, count: int = SLOWED_COUNT) -> list[str]:
    """``count`` experiment ids spread evenly over the report's ok, timed results (every len/count-th, from
    the middle of the first stretch): one of each stretch of targets, never hand-picked."""
    ids = [r.experiment_id for r in report.results if r.status == "ok" and r.speedup]
    step = len(ids) / count
    return [ids[int(step / 2 + i * step)] for i in range(count)]


def compare_json(out: Path, base: str, new: str) -> tuple[int, dict[str, Any], str]:
    """``compilebench compare BASE NEW -f json`` in ``out``: its exit code, its JSON and the command."""
    proc = cli("compare", str(out / base), str(out / new), "-f", "json")
    if proc.returncode not in (0, 1):
        sys.exit(f"compare {base} {new} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode, json.loads(proc.stdout), f"compilebench compare {base} {new}"


def scenarios(out: Path) -> list[list[str]]:
    """Write the two slowed copies of b.json, compare each scenario through the CLI, and a row each."""
    b = read(out / "b.json")
    ids = chosen(b)
    write_report(slowed(b, INJECTED, set(ids)), out / "b-5-slower.json")
    write_report(slowed(b, SWEEP), out / "b-all-slower.json")
    rows = []
    for name, new, planted in (
        ("A/A", "b.json", []),
        (f"{SLOWED_COUNT} slower by {INJECTED - 1:.0%}", "b-5-slower.json", ids),
        (f"all slower by {SWEEP - 1:.0%}", "b-all-slower.json", []),
    ):
        code, data, command = compare_json(out, "a.json", new)
        flagged = [c for c in data["changes"] if c["regression"]]
        slower = {c["experiment_id"] for c in data["changes"] if c["kind"] == "slower"}
        sweep = next((c for c in data["changes"] if c["kind"].startswith("sweep")), None)
        (noise,) = [n for n in data["noise"] if n["source"] == "sweep"] or [None]
        median = f"median {math.expm1(noise['shift']):+.1%}, p={noise['shift_p']:.2g}" if noise else "no sweep null"
        shown = f"{sweep['kind'].replace('_', ' ')} ({median})" if sweep else f"none ({median})"
        spread = f"{noise['spread']:.1%}" if noise else "-"
        if noise and noise.get("se_spread") is not None:  # judged standardized by each run's own SE
            spread += f"; in own SEs {noise['se_spread']:.2f}, between-run {noise['between']:.1%}"
        spread += f", t({noise['df']:.1f})" if noise and noise["df"] else ""
        caught = f"{len(slower & set(planted))}/{len(planted)}" if planted else "-"
        others = len([c for c in flagged if c["experiment_id"] not in planted and not c["kind"].startswith("sweep")])
        rows.append([name, f"`{command}`", str(len(flagged)), caught, str(others), shown, spread, str(code)])
    return rows


NOISES = [
    ("normal", 0.02),
    ("normal", 0.03),
    ("t5", 0.02),
    ("t3", 0.02),
    ("t2", 0.02),
    ("t1.5", 0.2),
    ("outliers", 0.016),
]
FAR_OUTLIERS = 3  # "outliers": normal noise, and this many other experiments 6-8 spreads out either way (as measured)
SIMULATED = 300  # sweeps per row and null (--simulate)


def simulate(trials: int = SIMULATED, seed: int = 11, n: int = 120) -> list[list[str]]:
    """Sweeps of ``n`` one-run experiments with simulated log changes (normal, or Student's t of a few degrees
    of freedom: bursts of contention; or normal with ``FAR_OUTLIERS`` natural outliers far out, as the
    building-blocks sweep measured; times a scale), judged by a normal null from the median and 1.4826 MAD
    (``tasks.stats.normal_p``) and by the gate's (``tasks.stats.empirical_null``, Student's t where the tails
    are heavy), Benjamini-Hochberg at 0.05 and beyond 5% as the gate does: false alarms in A/A sweeps, and
    how many of 5 experiments 10% slower are caught."""
    import numpy as np
    from scipy.stats import median_abs_deviation

    from tasks.stats import empirical_null, fdr_adjust, normal_p

    rng = np.random.default_rng(seed)
    planted = np.arange(SLOWED_COUNT) * (n // SLOWED_COUNT) + n // (2 * SLOWED_COUNT)

    def flagged(d: Any, gate: bool) -> Any:
        p = (
            empirical_null(d).p(d)
            if gate
            else normal_p(d, float(np.median(d)), float(median_abs_deviation(d, scale="normal")))
        )
        return (np.asarray(fdr_adjust(p)) < 0.05) & (np.abs(np.expm1(d)) > 0.05)

    rows = []
    for shape, scale in NOISES:

        def draw(shape: str = shape, scale: float = scale) -> Any:
            if shape not in ("normal", "outliers"):
                return rng.standard_t(float(shape[1:]), n) * scale
            d = rng.normal(0, 1, n) * scale
            if shape == "outliers":
                far = rng.choice(np.setdiff1d(np.arange(n), planted), FAR_OUTLIERS, replace=False)
                d[far] = rng.choice([-1, 1], FAR_OUTLIERS) * rng.uniform(6, 8, FAR_OUTLIERS) * scale
            return d

        draws = [draw() for _ in range(2 * trials)]
        for gate in (False, True):
            alarms = np.array([flagged(d, gate).sum() for d in draws[:trials]])
            caught = []
            for d in draws[trials:]:
                d = d.copy()
                d[planted] -= np.log(INJECTED)
                caught.append(flagged(d, gate)[planted].sum())
            rows.append(
                [
                    f"{shape} {scale:.1%}" if shape == "outliers" else f"{shape} {scale:.0%}",
                    "the gate's" if gate else "normal",
                    f"{alarms.mean():.2f}",
                    f"{np.mean(alarms > 1):.0%}",
                    f"{np.mean(caught):.2f}",
                    f"{np.mean(np.asarray(caught) >= 4):.0%}",
                ]
            )
    return rows


UNEQUAL = [(30, 0.0), (10, 0.0), (30, 0.02)]  # (samples a side, run-to-run drift beyond them) per --simulate row
UNEQUAL_SPREADS = (0.04, 0.25)  # each experiment's per-sample scatter, log-uniform between these (both sides)
UNEQUAL_TRIALS = 100  # A/A sweeps and slowed sweeps per row (each draws every sample: slower than the rows above)


def simulate_unequal(trials: int = UNEQUAL_TRIALS, seed: int = 12, n: int = 120) -> list[list[str]]:
    """Sweeps of ``n`` one-run experiments that are not equally noisy, as a real sweep's are: each experiment's
    samples scatter by its own amount (log-normal, ``UNEQUAL_SPREADS``), each run's eager and compiled medians
    come from that many samples (``UNEQUAL``), and each run may drift by a normal amount beyond them. Every run
    digested as a report's is (its median, IQR and count: ``tasks.stats.describe``, ``log_median_se``), judged
    by the gate (``compare.noise.judge``) with each run's standard error and without it (the moves scaled to
    one run against one, the rule before), then Benjamini-Hochberg at 0.05 and beyond 5%: false alarms in A/A
    sweeps, and how many of 5 experiments 10% slower are caught."""
    import numpy as np

    from orchestrator.report.compare.noise import Move, judge
    from tasks.stats import describe, fdr_adjust, log_median_se

    rng = np.random.default_rng(seed)
    planted = np.arange(SLOWED_COUNT) * (n // SLOWED_COUNT) + n // (2 * SLOWED_COUNT)

    def run(spread: float, samples: int, drift: float) -> tuple[float, float]:
        """One run's log speedup and its standard error."""
        shift = rng.normal(0, drift)
        eager, compiled = (describe(np.exp(rng.normal(0, spread, samples) + d)) for d in (0.0, shift))
        se = math.hypot(log_median_se(eager) or 0.0, log_median_se(compiled) or 0.0)
        return math.log(eager.median_ms / compiled.median_ms), se

    rows = []
    for samples, drift in UNEQUAL:
        sweeps = []
        for _ in range(2 * trials):
            spreads = np.exp(rng.uniform(*np.log(UNEQUAL_SPREADS), n))
            pairs = [(run(s, samples, drift), run(s, samples, drift)) for s in spreads]
            sweeps.append([(new - base, math.hypot(b_se, n_se)) for (base, b_se), (new, n_se) in pairs])
        for standardize in (False, True):

            def flagged(moves: list[tuple[float, float]], standardize: bool = standardize) -> Any:
                judged = judge("sim", "speedup", [Move(c, (1, 1), se if standardize else None) for c, se in moves], [])
                change = np.array([c for c, _ in moves])
                adjusted = np.asarray(fdr_adjust([p if p is not None else 1.0 for p in judged.p]))
                return (adjusted < 0.05) & (np.abs(np.expm1(change)) > 0.05) & (np.array(judged.deviation) * change > 0)

            alarms = np.array([flagged(m).sum() for m in sweeps[:trials]])
            caught = []
            for moves in sweeps[trials:]:
                slowed = [(c - math.log(INJECTED), se) if i in planted else (c, se) for i, (c, se) in enumerate(moves)]
                caught.append(flagged(slowed)[planted].sum())
            rows.append(
                [
                    f"{samples} samples, drift {drift:.0%}",
                    "each run's own SE (the gate)" if standardize else "one spread for all (before)",
                    f"{alarms.mean():.2f}",
                    f"{np.mean(alarms > 1):.0%}",
                    f"{np.mean(caught):.2f}",
                    f"{np.mean(np.asarray(caught) >= 4):.0%}",
                ]
            )
    return rows


DROPPED = {"check", "measurement", "compile_breakdown", "requested", "reserved", "work", "break_reasons"}


def compact(report: Report) -> dict[str, Any]:
    """The report as plain data, small: no summary (derived again when read), results without the fields
    compare does not read (``DROPPED``) or that hold their defaults, samples to 5 significant digits (the
    medians and speedups kept as measured)."""

    def result(r: Result) -> dict[str, Any]:
        data = r.model_dump(mode="json", exclude_defaults=True, exclude=DROPPED)
        for side in ("eager", "compiled"):
            if data.get(side):
                data[side]["samples_ms"] = [float(f"{x:.5g}") for x in data[side]["samples_ms"]]
        return data

    data = report.model_dump(mode="json", exclude={"results", "summary"})
    return {**data, "summary": None, "results": [result(r) for r in report.results]}


def write_compact(out: Path, folder: Path) -> None:
    """``compact`` copies of ``out``'s a.json and b.json, and its session.json, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a.json", "b.json"):
        (folder / name).write_text(json.dumps(compact(read(out / name)), separators=(",", ":")) + "\n")
    (folder / "session.json").write_text((out / "session.json").read_text())


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def analyse(out: Path, command: str) -> None:
    session = json.loads((out / "session.json").read_text())
    a = read(out / "a.json")
    seconds, load = session["seconds"], session["load"]
    print(f"$ {command}")
    what = {"tutorial": "the tutorial's targets, 10 samples a side", "blocks": "building blocks, 30 samples a side"}
    sweep = what[session.get("sweep", "tutorial")]
    print(
        f"{len(a.results)} experiments ({sweep}), one run each, run twice on {platform.machine()} with "
        f"{os.cpu_count()} cores "
        f"({seconds[0]:.0f} s and {seconds[1]:.0f} s; load average {', '.join(f'{x:.1f}' for x in load)} before, "
        f"between and after); compare at its defaults (5%, FDR q 0.05, sweep-wide 2%); reports in {out}\n"
    )
    headers = [
        "scenario",
        "command",
        "regressions",
        "slowed caught",
        "other experiments flagged",
        "sweep-wide verdict",
        "noise (spread)",
        "exit",
    ]
    print(markdown(headers, scenarios(out)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where the spec and reports go (default: a temp dir)")
    parser.add_argument("--reports", type=Path, default=None, help="print the table of an earlier run's --out again")
    parser.add_argument("--compact", type=Path, default=None, help="also write compact copies of the reports here")
    parser.add_argument("--simulate", action="store_true", help="only the null on simulated sweeps (a minute)")
    parser.add_argument("--sweep", choices=sorted(SWEEPS), default="blocks", help="the spec run twice (default blocks)")
    args = parser.parse_args()
    if args.simulate:
        print(
            f"$ python benchmarks/gate_fdr.py --simulate\n{SIMULATED} simulated A/A sweeps and {SIMULATED} with "
            f"{SLOWED_COUNT} experiments {INJECTED - 1:.0%} slower per row, 120 experiments one run a side:\n"
        )
        headers = ["log change noise", "null", "A/A flags (mean)", "A/A > 1", "slowed caught (mean)", ">= 4 caught"]
        print(markdown(headers, simulate()))
        print(
            f"\n{UNEQUAL_TRIALS} A/A sweeps and {UNEQUAL_TRIALS} with {SLOWED_COUNT} slowed per row, experiments not "
            f"equally noisy: per-sample scatter {UNEQUAL_SPREADS[0]:.0%}-{UNEQUAL_SPREADS[1]:.0%} (log-uniform), each "
            "run's medians from its samples, judged with and without each run's standard error:\n"
        )
        headers = ["runs", "moves judged by", *headers[2:]]
        print(markdown(headers, simulate_unequal()))
        return
    if args.reports is not None:
        analyse(args.reports, f"python benchmarks/gate_fdr.py --reports {args.reports}")
        if args.compact is not None:
            write_compact(args.reports, args.compact)
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="gate-fdr-"))
    out.mkdir(parents=True, exist_ok=True)
    run_twice(out, args.sweep)
    command = "python benchmarks/gate_fdr.py" + (f" --sweep {args.sweep}" if args.sweep != "blocks" else "")
    analyse(out, command + (f" --out {args.out}" if args.out else ""))
    if args.compact is not None:
        write_compact(out, args.compact)


if __name__ == "__main__":
    main()
