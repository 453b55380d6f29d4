"""A spec of any size for the scale benchmarks: one entry whose sweep expands to ``n`` experiments.

``cluster_scale.py`` runs it on a simulated cluster, ``read_scale.py`` validates it and builds reports of
its size: the same experiments, so that both measure the same sweep.
"""

from __future__ import annotations

from typing import Any

MODES = ["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune", "lite"]  # inductor's modes
SIZES = 10  # square shapes of seed.foo3, 64 to 640


def spec_of(n: int, name: str, device: str = "auto") -> dict[str, Any]:
    """``n`` experiments (a multiple of 100): seed.foo3 at ``SIZES`` shapes x ``MODES`` x fullgraph or not,
    times ``n // 100`` seeds."""
    if n % 100:
        raise SystemExit("the number of experiments must be a multiple of 100")
    return {
        "name": f"{name}-{n}",
        "defaults": {"device": device, "timing": {"warmup": 3, "repeats": 10}},
        "experiments": [
            {
                "target": "seed.foo3",
                "sweep": {
                    "params.shape": [[64 * (i + 1), 64 * (i + 1)] for i in range(SIZES)],
                    "compile.mode": MODES,
                    "compile.fullgraph": [False, True],
                    "seed": list(range(n // 100)),
                },
            }
        ],
    }
