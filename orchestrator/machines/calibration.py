"""Which calibrated devices are slow for their model: the driver's judgement of ``run --calibrate``'s probes.

The rule: an entry is slow when, on any figure, it is more than ``SLOW_THRESHOLD`` below the median
of the *other* devices of its model (the same ``model`` string, a different ``id``). Devices of
different models are never compared. Leaving the entry out of its own median means:

- a model with a single device cannot be judged: it has no peers, it is never slow;
- with two devices, each is judged against the other: the slower is slow when it is more than 5%
  below the faster. (Against the median of both, it would be below by only half their gap and a
  10% gap would read as 5%.) Two cannot say which of them is off; keeping the faster one is the
  choice that keeps results comparable;
- with three or more, a slow device does not pull its own yardstick down, and one slow device
  never makes its healthy peers look fast or slow.

A figure an entry lacks (its probe step raised) while a peer of its model measured it is a reason
too: a device that cannot run the probe is not one to time a compiler on. The rule reads the entries
seen so far: a scheduler judging workers as they report in calls ``slow_reasons`` (or ``judge``)
again with each new entry, and a verdict can change as peers arrive.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from tasks.models import Calibration, Result

# More than 5% below the model's median on any figure is slow: the same line as the speed gate of
# ``compare`` (``orchestrator.report.compare.SPEED_THRESHOLD``) and PyTorch's dashboard (0.95x), so that
# a device alone cannot pass for a regression the gate would flag. "Identical" cloud GPUs differ by a
# few percent between boards: a tighter line would flag healthy devices in every fleet.
SLOW_THRESHOLD = 0.05


def judge(entries: Sequence[Calibration], threshold: float = SLOW_THRESHOLD) -> list[Calibration]:
    """Copies of ``entries``, in order, with ``slow`` and ``slow_reasons`` set by the rule of the module docstring."""
    judged = []
    for entry in entries:
        reasons = slow_reasons(entry, entries, threshold)
        judged.append(entry.model_copy(update={"slow": bool(reasons), "slow_reasons": reasons}))
    return judged


def is_slow(entry: Calibration, others: Sequence[Calibration], threshold: float = SLOW_THRESHOLD) -> bool:
    """Whether ``entry`` is slow next to ``others`` (which may hold ``entry`` itself and any model)."""
    return bool(slow_reasons(entry, others, threshold))


def slow_reasons(entry: Calibration, others: Sequence[Calibration], threshold: float = SLOW_THRESHOLD) -> list[str]:
    """Why ``entry`` is slow next to the entries of ``others`` of its model that are other devices;
    empty when it is not (or has no such peer). One reason per figure, in the entry's order, then
    figures it lacks, e.g. "bf16_tflops 712 is 9.8% below the H200 median 790 (of 3 others)"."""
    peers = [o for o in others if o.model == entry.model and o.id != entry.id]
    reasons = []
    for figure in _figures(entry, peers):
        values = [v for v in (_value(p, figure) for p in peers) if v is not None]
        if not values:
            continue
        median = statistics.median(values)
        value = _value(entry, figure)
        if value is None:
            errors = entry.conditions.get("errors")
            error = errors.get(figure) if isinstance(errors, dict) else None
            why = f" ({error})" if error else ""
            reasons.append(f"{figure} not measured{why}; {_peers(len(values), entry.model)} measured it")
            continue
        shortfall = 1 - value / median
        if shortfall > threshold:
            reasons.append(
                f"{figure} {_number(value)} is {shortfall:.1%} below the {entry.model} median "
                f"{_number(median)} (of {_others(len(values))})"
            )
    return reasons


def _figures(entry: Calibration, peers: Sequence[Calibration]) -> list[str]:
    """The entry's figures, then those only its peers have, each once."""
    names = list(entry.figures)
    for peer in peers:
        names += [name for name in peer.figures if name not in names]
    return names


def _value(entry: Calibration, figure: str) -> float | None:
    """The entry's figure; None where it has none, or one that is not a positive finite number."""
    value = entry.figures.get(figure)
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _number(value: float) -> str:
    """712.3 → "712", 53.21 → "53.2", 6.51 → "6.51": three figures, none lost from the integer part."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _others(count: int) -> str:
    return "1 other" if count == 1 else f"{count} others"


def _peers(count: int, model: str) -> str:
    return f"the other {model}" if count == 1 else f"{count} other {model} devices"


def calibrated(results: Sequence[Result], probes: Sequence[Calibration] = ()) -> tuple[list[Calibration], list[Result]]:
    """Every device probed (``probes``, and those the results' workers carry: a resumed run's earlier
    ones), one entry per id, judged together; and the results, each with its judged entry."""
    entries: dict[str, Calibration] = {}
    for entry in [*(r.worker.calibration for r in results if r.worker and r.worker.calibration), *probes]:
        entries[entry.id] = entry  # the latest probe of a device: a replacement worker probes it again
    judged = {entry.id: entry for entry in judge(list(entries.values()))}
    out = []
    for r in results:
        mine = r.worker.calibration if r.worker else None
        if r.worker is not None and mine is not None:
            r = r.model_copy(update={"worker": r.worker.model_copy(update={"calibration": judged[mine.id]})})
        out.append(r)
    return list(judged.values()), out
