"""What ``validate`` shows of a spec's expansion: a row per experiment, or past a screenful, a row per target,
device and configuration with how many experiments each has and how many values each param takes.

Plain rows of text for the command line to draw; ``rows_json`` gives every experiment's row as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from tasks.experiment import Experiment

SCREENFUL: Final = 40  # experiments listed one a row; past it, the summary by target and configuration
COLUMNS: Final = ("id", "target", "params", "device", "config")
SUMMARY_COLUMNS: Final = ("target", "device", "config", "experiments", "params")


def device_text(exp: Experiment) -> str:
    """``cuda``, ``cuda on H100``, ``cuda on every GPU model``."""
    model = {None: "", "all": " on every GPU model"}.get(exp.gpu_model, f" on {exp.gpu_model}")
    return exp.device + model


def config_text(exp: Experiment) -> str:
    """The compile configuration, and a distributed experiment's gang (``inductor ddp x2``)."""
    return exp.compile.label() + (f" {exp.distributed.label()}" if exp.distributed else "")


def experiment_row(exp: Experiment) -> list[str]:
    """One experiment as ``validate`` lists it: id, target, params, device, configuration."""
    params = " ".join(f"{k}={v}" for k, v in exp.params.items())
    return [exp.id, exp.target, params, device_text(exp), config_text(exp)]


def summary_rows(experiments: Sequence[Experiment]) -> list[list[str]]:
    """One row per target, device and configuration, in the order the spec first names them: how many
    experiments, and how many distinct values each of their params takes (``shape: 10 values``)."""
    counts: dict[tuple[str, str, str], int] = {}
    values: dict[tuple[str, str, str], dict[str, set[str]]] = {}
    for exp in experiments:
        key = (exp.target, device_text(exp), config_text(exp))
        counts[key] = counts.get(key, 0) + 1
        seen = values.setdefault(key, {})
        for name, value in exp.params.items():
            seen.setdefault(name, set()).add(json.dumps(value, sort_keys=True, default=str))
    rows = []
    for key, n in counts.items():
        params = ", ".join(f"{name}: {_values(len(vs))}" for name, vs in values[key].items())
        rows.append([*key, f"{n:,}", params])
    return rows


def rows_json(experiments: Sequence[Experiment]) -> str:
    """Every experiment's row as a JSON list of objects (``COLUMNS``, params as their values, and the GPU
    model apart from the device)."""
    out: list[dict[str, Any]] = [
        {
            "id": exp.id,
            "target": exp.target,
            "params": exp.params,
            "device": exp.device,
            "gpu_model": exp.gpu_model,
            "config": config_text(exp),
        }
        for exp in experiments
    ]
    return json.dumps(out, indent=1, default=str) + "\n"


def _values(n: int) -> str:
    return "1 value" if n == 1 else f"{n:,} values"
