"""The regression gate on real runs: noise passes, a slowed-down target fails.

    python benchmarks/gate_demo.py [--out DIR]

Runs a three-experiment spec (3 replicates each: a sweep this small cannot measure its own run-to-run
noise, so with one run a side the gate leaves a move untested unless beyond 25%; with 3 runs a side
Welch's test judges it) three times through the CLI: ``base``, ``again`` (the same code:
only run-to-run noise differs) and ``slowed`` (the code ``gate_demo.chain``'s compiled side runs
does 5 rounds of work instead of 4, as a compiler change that made the generated code slower
would; eager is unchanged, and so is the experiment id: the speedup gate sees the loss). Then runs
``compilebench compare`` on base/again (expect exit 0) and base/slowed (expect exit 1) and prints
both outputs with their exit codes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLOW_ENV = "GATE_DEMO_SLOW"  # set: chain's compiled side does 5 rounds instead of 4 (25% more work)

SPEC = """\
name: gate-demo
defaults:
  device: cpu
  replicates: 3
  timing: {warmup: 3, repeats: 20}
experiments:
  - target: seed.foo3
    params: {shape: [2048, 2048]}
  - target: seed.bar_fixed
    compile: {fullgraph: true}
  - target: benchmarks.gate_demo:chain
"""


def chain(device: Any, n: int = 2048) -> tuple[Any, tuple[Any, ...]]:
    """A pointwise chain over an n x n tensor, 4 rounds; with GATE_DEMO_SLOW set, the code Dynamo traces
    runs a 5th on a copy of the result and adds it times zero (outputs unchanged, eager unchanged)."""
    import torch

    slow = bool(os.environ.get(SLOW_ENV))

    def fn(x: torch.Tensor) -> torch.Tensor:
        for _ in range(4):
            x = torch.sin(x) + torch.cos(x)
        if slow and torch.compiler.is_compiling():
            x = x + (torch.sin(x) + torch.cos(x)) * 0.0
        return x

    return fn, (torch.randn(n, n, device=device),)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="gate-demo-")))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "gate-demo.yaml"
    spec.write_text(SPEC)
    for name, env in (("base", {}), ("again", {}), ("slowed", {SLOW_ENV: "1"})):
        proc = cli("run", str(spec), "--out", str(out / f"{name}.json"), "--overwrite", env=env)
        if proc.returncode != 0:
            sys.exit(f"run {name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    for new in ("again", "slowed"):
        proc = cli("compare", str(out / "base.json"), str(out / f"{new}.json"), env={"COLUMNS": "150"})
        print(f"$ compilebench compare base.json {new}.json")
        print(proc.stdout.replace(str(out) + "/", ""), end="")
        print(f"$ echo $?\n{proc.returncode}\n")


if __name__ == "__main__":
    main()
