"""A/A noise figures: measured from two runs of the same code, stored in a file, read back.

A sweep too small to measure its own noise (``compare.noise``) is judged against run-to-run noise measured
earlier on the same device model: ``compilebench compare A1 A2 --save-noise FILE`` on two runs of the same
code stores it, ``compilebench compare BASE NEW --noise FILE`` uses it. A file given by name, not looked for
beside the reports: reports are often URLs or downloaded artifacts, and a gate should say which figure it
used (CI keeps the file beside its spec). Imports the comparison's data and the gate (the runs it matches).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import ValidationError

from orchestrator.report.compare.gate import runs_by_experiment, timed
from orchestrator.report.compare.models import MIN_NOISE_EXPERIMENTS, Metric, NoiseFigure, NoiseFile
from orchestrator.report.compare.verdicts import run_values
from orchestrator.report.digest import Glance, as_glance
from orchestrator.report.io import write_atomic
from orchestrator.report.models import Report
from orchestrator.store.storage import StorageError, location, open_location, read_bytes
from tasks.stats import normal_spread_about_zero
from tasks.text import validation_line

METRICS: tuple[Metric, ...] = ("speedup", "time")


class NoiseError(ValueError):
    """A noise file that cannot be read, or an A/A pair too small to measure noise from; one line."""


def measure_noise(base: Report | Glance, new: Report | Glance, names: tuple[str, str] = ("", "")) -> list[NoiseFigure]:
    """Run-to-run noise of one run against one, per device model and metric, from an A/A pair of reports.

    Method: every pair of runs of one experiment, replicate i of base against replicate i of new, both ok
    and timed, gives a log change of each metric (``run_values``); a device model's figure is their robust
    SD about 0, 1.4826 median |log change| (``tasks.stats.normal_spread_about_zero``): a shift of the whole
    second run (a busier machine) is noise a later comparison meets too, so it is not centred away. Device
    models with fewer than ``MIN_NOISE_EXPERIMENTS`` pairs, or a spread of 0 (a report against itself), get none.
    """
    base, new = as_glance(base), as_glance(new)
    changes: dict[tuple[str, Metric], list[float]] = {}
    new_runs = runs_by_experiment(new)
    for exp_id, b in runs_by_experiment(base).items():
        by_replicate = {r.replicate: r for r in timed(new_runs.get(exp_id, []))}
        for b_run in timed(b):
            n_run = by_replicate.get(b_run.replicate)
            if n_run is None:
                continue
            model = n_run.device_model or "unknown"
            for metric in METRICS:
                (before,), (after,) = run_values([b_run], metric), run_values([n_run], metric)
                changes.setdefault((model, metric), []).append(math.log(after / before))
    now = datetime.now(UTC).isoformat(timespec="seconds")
    figures = []
    for (model, metric), values in changes.items():
        spread = normal_spread_about_zero(values)
        if len(values) >= MIN_NOISE_EXPERIMENTS and spread > 0:  # 0: a report against itself measures nothing
            figure = NoiseFigure(
                device_model=model,
                metric=metric,
                spread=spread,
                experiments=len(values),
                base=names[0] or base.name,
                new=names[1] or new.name,
                measured_at=now,
            )
            figures.append(figure)
    return figures


def read_noise(path: str) -> list[NoiseFigure]:
    """The figures of a noise file (a path or a URL); ``NoiseError`` with one line naming it otherwise."""
    where = location(path)
    try:
        text = where.read_text(encoding="utf-8") if not isinstance(where, str) else read_bytes(where).decode()
    except StorageError as e:
        raise NoiseError(f"cannot read {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise NoiseError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return NoiseFile.model_validate(json.loads(text)).figures
    except json.JSONDecodeError as e:
        raise NoiseError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    except ValidationError as e:
        raise NoiseError(f"{path}: not a noise file: {validation_line(e)}") from None


def save_noise(path: str, figures: Sequence[NoiseFigure], existing: Sequence[NoiseFigure] = ()) -> None:
    """Write ``figures`` to ``path`` (atomically), keeping those of ``existing`` for other device models or
    metrics: one file can hold every device model's figure. Raises ``OSError`` (``StorageError``)."""
    keys = {(f.device_model, f.metric) for f in figures}
    kept = [f for f in existing if (f.device_model, f.metric) not in keys]
    write_atomic(path, NoiseFile(figures=[*kept, *figures]).model_dump_json(indent=2) + "\n")


def store_noise(
    path: str, base: Report | Glance, new: Report | Glance, names: tuple[str, str] = ("", "")
) -> list[NoiseFigure]:
    """Measure an A/A pair's noise (``measure_noise``) and save it in ``path``, keeping the figures already
    there for other device models and metrics; the figures stored. ``NoiseError`` (one line) when no device
    model has enough pairs of runs, or the file cannot be read or written."""
    figures = measure_noise(base, new, names)
    if not figures:
        raise NoiseError(
            f"{path}: no device model has {MIN_NOISE_EXPERIMENTS} experiments ok and timed in both reports, too few "
            "to measure run-to-run noise from"
        )
    existing = read_noise(path) if _exists(path) else []
    try:
        save_noise(path, figures, existing)
    except (StorageError, OSError) as e:
        raise NoiseError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    return figures


def _exists(path: str) -> bool:
    """Whether a file or object is at ``path``; a store that cannot be reached says no (writing says why)."""
    where = location(path)
    if not isinstance(where, str):
        return where.exists()
    try:
        fs, inner = open_location(where)
        return bool(fs.exists(inner))
    except (StorageError, OSError):
        return False
