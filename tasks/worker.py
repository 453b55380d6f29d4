"""A long-lived worker: experiments one after another in one process, reset in between.

A worker holds its GPU (or its cores) for life and runs the experiments it is given in turn,
so that each pays neither a new process, nor ``import torch``, nor CUDA's initialisation. It
claims its cores once, before torch starts a thread pool, and every thread and process it starts
stays on them (``tasks.isolation``). After each experiment it puts the process back as it
started (``tasks.reset``).

Some experiments must not run in a process that has run others: ``compile.cache: cold`` (a true
cold compile needs a process that has compiled nothing, with an empty cache directory) and
``shared`` (a cold compile that first loads the run's shared cache: ``tasks.shared_cache``). The
worker runs those in a fresh Python process of its own (``run_in_fresh_process``): it inherits
the environment (``CUDA_VISIBLE_DEVICES`` included: the same GPU), the working directory,
``sys.path`` and the worker's cores, and is killed with its parent (``PR_SET_PDEATHSIG``), so
that a worker killed for a timeout takes it along. A death of that process is reported as a
death (``DIED``), the worker itself lives on. ``measurement.fresh_process`` stays true only for
the first experiment of a process; ``worker.experiments_before`` says how many ran before.

What a reset cannot give back (generated modules kept in ``sys.modules``, allocator arenas,
cuDNN's autotuner cache) is bounded by replacing the worker: after ``max_experiments``, after
its resident memory grew past ``max_rss_growth_mb``, or after a reset that raised (see
``Worker`` and ``tasks.models.WorkerLimits``). A worker that asks to be replaced hands its cores' locks
back with its last result (``tasks.isolation.release_claim``): its replacement may start on the same
cores before this process has exited, and would otherwise find them taken and run without exclusive cores.

Nothing here knows about Ray; ``orchestrator.execution.pool`` wraps a ``Worker`` in a Ray actor.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tasks.failures import DIED
from tasks.heap import collector_paused
from tasks.isolation import release_claim
from tasks.models import FRESH_PROCESS_CACHES
from tasks.reset import Baseline, reset
from tasks.text import error_line

RETIRE = "retire"  # key beside a result when the worker must be replaced after it: {..., RETIRE: why}
PR_SET_PDEATHSIG = 1  # prctl option, from linux/prctl.h

__all__ = ["DIED", "RETIRE", "Worker", "import_for_experiments", "resident_mb", "run_in_fresh_process", "run_payload"]


def resident_mb() -> float | None:
    """This process's resident memory in MiB (``VmRSS`` of /proc/self/status); None where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # the kernel counts in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


class Worker:
    """Runs experiments (as plain JSON data) one after another in this process.

    ``placement`` is what the scheduler gave the worker for life: ``node_id``, ``gpu_ids``,
    ``cpus`` (cores each experiment claims), ``gpu_model`` (the node's accelerator type),
    ``limits`` (the run's ``WorkerLimits`` as plain data; an experiment's own ``worker``
    limits win over them) and ``calibrate`` (probe the device first: ``tasks.calibration``; the
    entry goes with every result, ``worker.calibration``). Start-up imports what every
    experiment needs, so that an experiment's clock (its timeout) starts on a warm worker.

    After each experiment run in this process, the worker resets the process, then asks to be
    replaced (``RETIRE`` beside the result, which stands) when it has run ``max_experiments``,
    when its resident memory has grown more than ``max_rss_growth_mb`` since it started, or
    when the reset raised (a sticky CUDA error raises in its ``synchronize``): a process whose
    reset failed cannot be trusted with the next experiment.
    """

    def __init__(self, placement: dict[str, Any]) -> None:
        from tasks.isolation import claim_worker_cores

        claim_worker_cores(placement.get("cpus"))  # for life, pinning every thread, before torch starts its pools
        import_for_experiments()  # paid once, here
        from tasks.models import WorkerLimits

        self.placement = placement
        self.limits = WorkerLimits.model_validate(placement.get("limits") or {})
        self.calibration: dict[str, Any] | None = None  # its device's probe, with run --calibrate
        if placement.get("calibrate"):
            from tasks.calibration import probe

            self.calibration = probe(placement).model_dump(mode="json")  # before the baseline: not a leak
        self.baseline = Baseline()
        self.experiments = 0  # run in this process (not those sent to a fresh one)
        self.last_reset_s: float | None = None
        gc.collect()
        gc.freeze()  # what exists now lives as long as the worker: keep it out of later collections
        self.started_mb = resident_mb()

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        if payload.get("compile", {}).get("cache") in FRESH_PROCESS_CACHES:
            return self._calibrated(run_in_fresh_process(payload, self.placement))
        self.experiments += 1
        result = run_payload(payload, self.placement)  # never raises; if it did, the pool would replace the worker
        why = self._reset() or self._over_limits(payload.get("worker") or {})
        if why is not None:
            result[RETIRE] = why
            release_claim()  # its cores free for its replacement at once, not when this process has exited
        return self._calibrated(result)

    def _calibrated(self, result: dict[str, Any]) -> dict[str, Any]:
        """The result with its device's calibration entry beside where it ran, when there is one."""
        if self.calibration is not None and isinstance(result.get("worker"), dict):
            result["worker"]["calibration"] = self.calibration
        return result

    def _reset(self) -> str | None:
        """Reset the process (``reset``); why the worker must go if that raised."""
        started = time.perf_counter()
        try:
            reset(self.baseline)
        except Exception as e:
            return f"the reset after this experiment raised {error_line(e, fallback='', with_type=True)}"
        finally:
            self.last_reset_s = time.perf_counter() - started
        return None

    def _over_limits(self, own: dict[str, Any]) -> str | None:
        """Which limit the worker has reached, the experiment's own ``worker`` limits first; None if none."""
        from tasks.models import DEFAULT_MAX_EXPERIMENTS, DEFAULT_MAX_RSS_GROWTH_MB

        most = own.get("max_experiments") or self.limits.max_experiments or DEFAULT_MAX_EXPERIMENTS
        if self.experiments >= most:
            return f"ran {self.experiments} experiments (max_experiments={most})"
        growth_mb = own.get("max_rss_growth_mb") or self.limits.max_rss_growth_mb or DEFAULT_MAX_RSS_GROWTH_MB
        now_mb = resident_mb()
        if now_mb is not None and self.started_mb is not None and now_mb - self.started_mb > growth_mb:
            return (
                f"resident memory grew {now_mb - self.started_mb:.0f} MiB since the worker started "
                f"(max_rss_growth_mb={growth_mb:g})"
            )
        return None


def import_for_experiments() -> None:
    """Import what every experiment needs: torch, dynamo, inductor's configuration and the procedure.

    The cycle collector is paused meanwhile: the imports make some 300,000 tracked objects and little garbage
    (9,000 objects in cycles), and each collection they trigger walks all of them made so far again (a sixth
    of the imports' CPU time: 2.9 s to 2.4 s a process on the 2-core machine, paid by every worker and fresh
    process). The caller collects and freezes what they made once it has made the rest of what it keeps
    (``gc.freeze``)."""
    with collector_paused():
        import torch._dynamo
        import torch._inductor.config  # noqa: F401

        import tasks.procedure  # noqa: F401


def run_payload(payload: dict[str, Any], placement: dict[str, Any]) -> dict[str, Any]:
    """One experiment in this process, from plain data to plain data."""
    from tasks.models import Experiment
    from tasks.procedure import Placement, run_experiment

    where = Placement(
        node_id=placement.get("node_id"),
        gpu_ids=tuple(placement.get("gpu_ids") or ()),
        cpus=placement.get("cpus"),
        gpu_model=placement.get("gpu_model"),
        compile_cache=placement.get("compile_cache"),
    )
    return run_experiment(Experiment.model_validate(payload), where).model_dump(mode="json")


def run_in_fresh_process(payload: dict[str, Any], placement: dict[str, Any]) -> dict[str, Any]:
    """Run one experiment in a new Python process (same environment, GPU, directory and
    ``sys.path``) that dies with this one; its result, or ``{DIED: error}`` if it died."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with tempfile.TemporaryDirectory(prefix="compilebench-fresh-") as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.run(
            [sys.executable, "-m", "tasks.worker", str(os.getpid()), str(out)],
            input=json.dumps({"payload": payload, "placement": placement}),
            text=True,
            env=env,
            check=False,
        )
        if proc.returncode == 0 and out.exists():
            result: dict[str, Any] = json.loads(out.read_text())
            return result
    how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with code {proc.returncode}"
    message = f"the experiment's fresh process {how}"
    return {DIED: {"type": "ProcessDied", "message": message}}


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _main(argv: list[str]) -> None:
    """``python -m tasks.worker PARENT_PID RESULT_PATH``, the request on stdin."""
    parent, out = int(argv[0]), Path(argv[1])
    _die_with_parent(parent)
    from tasks.isolation import inherit_claim

    inherit_claim()  # the worker's cores, no lock of its own
    import_for_experiments()
    gc.collect()
    gc.freeze()  # as a worker does before its first experiment: the imports' objects out of later collections
    request = json.loads(sys.stdin.read())
    result = run_payload(request["payload"], request["placement"])
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
