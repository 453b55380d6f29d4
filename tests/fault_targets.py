"""Test-only targets that misbehave as real experiments do, and a stub executor for the scheduler.

Targets follow the factory contract (``tests.fault_targets:make_...``); each fault happens when
the factory builds its target, inside the worker's process. torch is imported inside the
factories, so that ``StubWorker`` (which never touches torch) can live here too.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _noop(device):
    import torch

    return (lambda x: x + 1), (torch.ones(4, device=device),)


def make_noop(device):
    """Does nothing wrong."""
    return _noop(device)


def make_exit(device, code: int = 3):
    """Ends its own process at once, as a segfault or the kernel's OOM killer would."""
    os._exit(code)


def make_sigkill(device):
    os.kill(os.getpid(), signal.SIGKILL)


def make_segfault(device):
    import ctypes

    ctypes.string_at(0)  # reads address 0: SIGSEGV


def make_hang(device, seconds: float = 3600):
    """Blocks far longer than any test's timeout."""
    time.sleep(seconds)
    return _noop(device)


def make_oom(device):
    """Raises what PyTorch raises when the GPU's memory is exhausted."""
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB (test)")


def make_flaky(device, marker: str):
    """Dies the first time (no marker file yet), succeeds every time after."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        os._exit(7)
    return _noop(device)


def _wait_for(ready: Callable[[], bool], wait_s: float, poll_s: float = 0.02) -> bool:
    """Polls ``ready`` until it holds or ``wait_s`` have passed; whether it held."""
    deadline = time.monotonic() + wait_s
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def make_barrier(device, folder: str, parties: int, timeout_s: float = 120):
    """Waits until ``parties`` experiments are inside this factory at once (one file each in
    ``folder``): only that many concurrent workers get past it; fewer time out."""
    here = Path(folder)
    here.mkdir(parents=True, exist_ok=True)
    (here / f"{os.getpid()}-{time.monotonic_ns()}").touch()
    if not _wait_for(lambda: len(list(here.iterdir())) >= parties, timeout_s, poll_s=0.05):
        raise TimeoutError(f"only {len(list(here.iterdir()))} of {parties} experiments ran at once")
    return _noop(device)


def make_gated(device, gate: str = "", wait_s: float = 300.0):
    """Builds only once the file ``gate`` exists (at once without one): experiments that cannot finish
    until a test lets them, so that a driver is always interrupted mid-sweep, however fast the machine.
    Here, where torch is imported only as the target is built, a driver that checks its parameters imports
    no torch (3-4 s of CPU for each of the CLI runs that use it)."""
    _wait_for(lambda: not gate or Path(gate).exists(), wait_s)
    return _noop(device)


def _marked_nodes(folder: Path) -> int:
    """How many nodes have left a file in ``folder`` (each named ``<node id>-<pid>``)."""
    return len({p.name.rpartition("-")[0] for p in folder.iterdir()})


def mark(folder: str, node_id: str, nodes: int = 0, wait_s: float = 120.0) -> None:
    """Leaves a file named after its Ray node in ``folder``; with ``nodes``, then waits until that many nodes
    have left one (at most ``wait_s``): experiments that hold their workers so, the one node whose workers start
    last still takes an experiment, however loaded the machine."""
    here = Path(folder)
    here.mkdir(parents=True, exist_ok=True)
    (here / f"{node_id}-{os.getpid()}").touch()
    _wait_for(lambda: _marked_nodes(here) >= nodes, wait_s)


def make_mark_and_sleep(device, folder: str, seconds: float, nodes: int = 0):
    """Leaves a file named after its Ray node (``mark``), then sleeps (a test removes that node meanwhile)."""
    import ray

    mark(folder, ray.get_runtime_context().get_node_id(), nodes)
    time.sleep(seconds)
    return _noop(device)


def make_dirty(device):
    """Leaves process-wide state behind: a worker must reset it before the next experiment."""
    import torch
    import torch._inductor.config as inductor_config

    torch.set_default_dtype(torch.float64)
    torch.set_float32_matmul_precision("medium")
    inductor_config.unroll_reductions_threshold = 99
    os.environ["COMPILEBENCH_TEST_LEFTOVER"] = "1"
    return _noop(device)


def make_report_state(device):
    """Raises an error whose message is the process state ``make_dirty`` changes."""
    import torch
    import torch._inductor.config as inductor_config

    state = {
        "dtype": str(torch.get_default_dtype()),
        "matmul": torch.get_float32_matmul_precision(),
        "unroll": inductor_config.unroll_reductions_threshold,
        "leftover": os.environ.get("COMPILEBENCH_TEST_LEFTOVER"),
    }
    raise RuntimeError(repr(state))


def make_report_collector(device):
    """Raises an error whose message is the state of Python's cycle collector as the experiment starts: on, and
    what the process imported before it frozen out of its collections (``tasks.worker.import_for_experiments``)."""
    import gc

    raise RuntimeError(repr({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count() > 100_000}))


def make_poison_reset(device):
    """Runs fine, but leaves the process so that the worker's reset after it raises (as a sticky
    CUDA error makes ``torch.cuda.synchronize`` raise there)."""
    import numpy as np

    def broken(seed: int) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered (test)")

    np.random.seed = broken  # the reset reseeds numpy; nothing in an experiment does
    return _noop(device)


_HOARD: list[bytearray] = []  # what make_hoard keeps alive for the life of its process


def make_hoard(device, mb: int):
    """Keeps ``mb`` MiB of written (resident) memory for the life of its process, as a leak would."""
    _HOARD.append(bytearray(b"\x01") * (mb * 2**20))
    return _noop(device)


class StubWorker:
    """An executor for the scheduler's own tests: returns an ``ok`` result for each experiment
    after ``params['ms']`` milliseconds, without importing torch or running the procedure, so
    that a thousand experiments on 32 workers test the scheduling and not the benchmark."""

    def __init__(self, placement: dict[str, Any]) -> None:
        self.placement = placement
        self.count = 0

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        from tasks.models import Experiment

        exp = Experiment.model_validate(payload)
        started = time.time()
        time.sleep(float(exp.params.get("ms", 0)) / 1e3)
        self.count += 1
        return {
            "experiment_id": exp.id,
            "target": exp.target,
            "params": exp.params,
            "device": "cpu",
            "compile": payload.get("compile", {}),
            "timing": payload.get("timing", {}),
            "seed": exp.seed,
            "gpu_model": exp.gpu_model,
            "status": "ok",
            "started_at": started,
            "finished_at": time.time(),
            "worker": {
                "hostname": socket.gethostname(),
                "node_id": self.placement["node_id"],
                "pid": os.getpid(),
                "gpu_ids": self.placement["gpu_ids"],
                "threads": self.placement["cpus"],
                "gpu_model": self.placement["gpu_model"],
            },
            "measurement": {"timer": "perf_counter", "fresh_process": self.count == 1},
        }


class RetiringStub(StubWorker):
    """The stub executor asking to be replaced after every experiment, as a worker past its limits does."""

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        from tasks.worker import RETIRE

        return {**super().run(payload), RETIRE: "asked"}


SLOW_GPU = "1"  # the logical GPU whose probe CalibratedStub reports 10% slow


class CalibratedStub(StubWorker):
    """The stub executor on a fake GPU fleet: with ``calibrate``, each worker reports a probe of its
    GPU (fp32 19.5 TFLOP/s, bf16 700, copy 3,000 GB/s), 10% lower on logical GPU ``SLOW_GPU``."""

    def __init__(self, placement: dict[str, Any]) -> None:
        super().__init__(placement)
        self.calibration: dict[str, Any] | None = None
        if placement.get("calibrate"):
            gpu = (placement["gpu_ids"] or ["none"])[0]
            scale = 0.9 if gpu == SLOW_GPU else 1.0
            self.calibration = {
                "id": f"{placement['node_id'][:8]}/gpu{gpu}",
                "node_id": placement["node_id"],
                "hostname": socket.gethostname(),
                "device": "cuda",
                "gpu_id": gpu,
                "model": "FAKE-GPU",
                "figures": {"fp32_tflops": 19.5 * scale, "bf16_tflops": 700.0 * scale, "copy_gbps": 3000.0 * scale},
            }

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        result = super().run(payload)
        result["worker"]["calibration"] = self.calibration
        return result


class SkewedStub(StubWorker):
    """A worker whose compilebench is not the driver's: its results carry a field the driver does not know
    for experiments with ``params['skewed']``."""

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        result = super().run(payload)
        if payload.get("params", {}).get("skewed"):
            result["from_a_newer_version"] = None
        return result


# ------------------------------------------------------------------ faults of one rank of a gang


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _small_module(device, batch: int):
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(8, 8).to(device), (torch.randn(batch, 8, device=device),)


def make_raise_on_rank(device, rank: int = 1, batch: int = 4):
    """Raises while it is built on rank ``rank`` only; the other ranks build a small Linear."""
    if _rank() == rank:
        raise RuntimeError(f"the target fails on rank {rank} (test)")
    return _small_module(device, batch)


def make_hang_on_rank(device, rank: int = 1, seconds: float = 3600, batch: int = 4):
    """Blocks while it is built on rank ``rank``, far longer than any test's timeout: the other ranks wait
    for it in the collective where the ranks agree that the target was built."""
    if _rank() == rank:
        time.sleep(seconds)
    return _small_module(device, batch)


def make_exit_on_rank(device, rank: int = 1, code: int = 3, batch: int = 4):
    """Ends the process of rank ``rank`` while it is built, as a segfault or the OOM killer would."""
    if _rank() == rank:
        os._exit(code)
    return _small_module(device, batch)


class StubRank:
    """A gang's rank for the scheduler's own tests (``orchestrator.execution.actors.RankExecutor``), without
    torch: rank 0's address is a listening socket, and ``join`` is a rendezvous on it (rank 0 accepts
    every other rank's connection), so that a gang forms only when all its ranks join at once. ``run``
    sleeps ``params['ms']`` and misbehaves as ``params`` say: ``fail_rank`` returns an error outcome
    (the others wait as in a collective: ``params['wait_s']``), ``hang_rank`` never answers,
    ``die_rank`` ends its process (once, with ``marker``: the file it leaves, as ``make_flaky``), ``mark``
    leaves a file named after its node in that folder and waits for ``nodes`` nodes to have left one (``mark``)."""

    def __init__(self, placement: dict[str, Any], rank: int, world_size: int) -> None:
        self.placement, self.rank, self.world_size = placement, rank, world_size
        self.listener: socket.socket | None = None
        self.peers: list[socket.socket] = []
        self.count = 0

    def address(self) -> tuple[str, int]:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(self.world_size)
        return "127.0.0.1", self.listener.getsockname()[1]

    def join(self, master_addr: str, master_port: int, timeout_s: float) -> dict[str, Any]:
        if self.rank == 0:
            assert self.listener is not None
            self.listener.settimeout(timeout_s)
            self.peers = [self.listener.accept()[0] for _ in range(self.world_size - 1)]
        else:
            self.peers = [socket.create_connection((master_addr, master_port), timeout=timeout_s)]
        return {"rank": self.rank, "timeout_s": timeout_s}

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        params = payload.get("params", {})
        started = time.time()
        self.count += 1
        if params.get("die_rank") == self.rank:
            marker = params.get("marker")
            if marker is None or not Path(marker).exists():
                if marker is not None:
                    Path(marker).write_text(str(os.getpid()))
                os._exit(9)
        if params.get("hang_rank") == self.rank:
            time.sleep(3600)
        if params.get("mark"):  # a file named after its node, as make_mark_and_sleep leaves
            mark(params["mark"], self.placement["node_id"], int(params.get("nodes", 0)))
        error = None
        if params.get("fail_rank") == self.rank:
            error = {"type": "RuntimeError", "message": f"rank {self.rank} raised (test)"}
        elif "fail_rank" in params:
            time.sleep(float(params.get("wait_s", 0)))  # waits in a collective the failed rank never joins
        time.sleep(float(params.get("ms", 0)) / 1e3)
        return {
            "rank": self.rank,
            "status": "runtime_error" if error else "ok",
            "error": error,
            "figures": {"rank": self.rank, "hostname": socket.gethostname(), "pid": os.getpid()},
            "group_ok": True,
            "placement": {k: self.placement[k] for k in ("node_id", "gpu_ids", "cpus", "gpu_model")},
            "fresh": self.count == 1,
            "started_at": started,
        }

    def leave(self) -> None:
        for s in [*self.peers, *([self.listener] if self.listener else [])]:
            s.close()


def stub_combine(exp: Any, outcomes: list[dict[str, Any]], started_at: float, finished_at: float) -> Any:
    """The ranks' outcomes of ``StubRank`` as one result (``orchestrator.execution.gang.Combine``): ok when
    every rank's is, else the first failing rank's status and error (a rank that failed before one that
    did not answer); rank 0 stands for where it ran."""
    from tasks.models import DistributedResult, ErrorInfo, RankFigures, Result

    failing = sorted((o for o in outcomes if o.get("error")), key=lambda o: bool(o.get("peer_failure")))
    first = failing[0] if failing else None
    where = next((o["placement"] for o in outcomes if o.get("placement")), None)
    return Result(
        experiment_id=exp.id,
        target=exp.target,
        params=exp.params,
        device="cpu",
        compile=exp.compile,
        timing=exp.timing,
        seed=exp.seed,
        status=first["status"] if first else "ok",
        error=ErrorInfo.model_validate(first["error"]) if first else None,
        started_at=started_at,
        finished_at=finished_at,
        worker={
            "hostname": socket.gethostname(),
            "node_id": where["node_id"],
            "pid": (outcomes[0].get("figures") or {}).get("pid") or 0,
            "gpu_ids": [g for o in outcomes if o.get("placement") for g in o["placement"]["gpu_ids"]],
            "threads": where["cpus"],
            "gpu_model": where["gpu_model"],
        }
        if where
        else None,
        measurement={"timer": "perf_counter", "fresh_process": bool(outcomes[0].get("fresh"))},
        distributed=DistributedResult(
            config=exp.distributed,
            world_size=len(outcomes),
            backend="gloo",
            ranks=[
                RankFigures.model_validate(
                    {
                        **(o.get("figures") or {"rank": o["rank"]}),
                        "error": o.get("error"),
                        "gpu_ids": o.get("placement", {}).get("gpu_ids", []),
                    }
                )
                for o in outcomes
            ],
            failed_rank=first["rank"] if first else None,
        ),
    )
