"""The gang's process group: the rendezvous address, joining and leaving, and what the ranks agree on.

``join`` initialises ``torch.distributed`` over TCP from rank 0's address: ``gloo`` for CPU tensors
and, where this process sees a GPU, ``nccl`` for CUDA tensors (one group, ``cpu:gloo,cuda:nccl``), so
that one long-lived gang serves CPU and CUDA experiments alike. Its timeout is every collective's: a
rank left waiting for a peer that hangs or died gets an error after that many seconds instead of
waiting forever (NCCL's watchdog and gloo's operations both honour it).

``first_failed`` is where the ranks agree: each says whether it failed at a stage, and all learn the
lowest rank that did, so that a failure at a stage boundary (a target that raises while it is built on
one rank) stops every rank there, with the group still usable, instead of leaving the others in the
next collective until the timeout.
"""

from __future__ import annotations

import datetime
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist

BACKENDS_WITH_CUDA = "cpu:gloo,cuda:nccl"  # one group: gloo for CPU tensors, NCCL for CUDA tensors


def node_address() -> str:
    """This node's IP as Ray knows it where Ray runs this process, else the address its hostname resolves to
    (the gang is on one node: any local address serves its rendezvous)."""
    ray = sys.modules.get("ray")  # never imported here: a process Ray started has it
    if ray is not None and ray.is_initialized():
        return str(ray.util.get_node_ip_address())
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def free_port() -> int:
    """A TCP port no process listens on now (the kernel's pick; free until someone binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def join(master_addr: str, master_port: int, rank: int, world_size: int, timeout_s: float) -> dict[str, Any]:
    """Initialise the default process group by TCP rendezvous at rank 0's address; what was set up."""
    cuda = torch.cuda.is_available()
    backend = BACKENDS_WITH_CUDA if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(0)  # the one GPU Ray made visible to this process
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return {"backend": backend, "rank": rank, "world_size": world_size, "timeout_s": timeout_s}


def leave() -> None:
    """Destroy the default process group, if there is one."""
    if dist.is_initialized():
        dist.destroy_process_group()


def backend_for(device: torch.device) -> str:
    """The backend that carries this device's tensors: ``nccl`` for CUDA, ``gloo`` for the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def first_failed(failed: bool, rank: int, world_size: int, device: torch.device) -> int | None:
    """The lowest rank that says it failed (this one included), agreed by all ranks; None if none did."""
    flag = torch.tensor([rank if failed else world_size], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    found = int(flag.item())
    return found if found < world_size else None


def agreed_max(value: float, device: torch.device) -> float:
    """The largest of every rank's ``value``."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def barrier(device: torch.device) -> None:
    """Every rank waits here for the others (on the device's backend)."""
    if device.type == "cuda":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()
