"""Keeping concurrent experiments on one node out of each other's way.

Ray reserves CPU *counts* but pins nothing, and inductor's caches default to one directory
per user shared by every process on the node. So a task claims actual cores (one lock file
per core, ``flock``ed: a lock dies with its process), pins itself and the compile workers it
spawns to them (``sched_setaffinity`` is inherited), sizes torch's threads and inductor's
compile pool to them, and compiles into a cache directory no concurrent experiment uses:
a fresh empty one for ``cache: cold``, and for ``warm`` the node's directory of its slot
(its GPU, or the first core it holds), which persists across experiments on that slot.

It also steadies glibc's allocator (``timing.allocator: steady``, the default): by default
glibc serves large blocks with fresh ``mmap``s and trims freed heap by thresholds it adjusts
as the process runs, so whether an eager call pays page faults for its temporaries depends on
the process's history; seen on foo3 2048x2048 on the CPU, the same experiment's speedup moved
between 2.3x and 4.7x from run to run (CV 22-30%). Heap-only allocation with no trimming (as
jemalloc and tcmalloc behave in steady state) makes every sample of a side pay the same.
``allocator: system`` leaves glibc as it is, to measure what an untuned process sees.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import torch

CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt parameters, from glibc's malloc.h
TRIM_NEVER = -1  # mallopt takes an int; glibc reads it as size_t, so -1 is SIZE_MAX: never trim
STEADY_ALLOCATOR = "glibc: heap only (M_MMAP_MAX=0), never trimmed (M_TRIM_THRESHOLD=SIZE_MAX)"
DEFAULT_MMAP_MAX, DEFAULT_TRIM_THRESHOLD = 65536, 128 * 1024  # glibc's defaults (malloc/malloc.c)
SYSTEM_ALLOCATOR = "C library defaults, untouched"
RESET_ALLOCATOR = (
    "glibc: defaults restored (M_MMAP_MAX=65536, M_TRIM_THRESHOLD=128 KiB) after a steady experiment "
    "in this process; its adaptive mmap threshold stays off"
)
_steadied = False  # steady_allocator() ran in this process


def state_root() -> Path:
    """Per-user, per-node directory for core locks and compile caches."""
    return Path(os.environ.get("COMPILEBENCH_STATE_DIR") or Path(tempfile.gettempdir()) / f"compilebench-{os.getuid()}")


@dataclass
class Isolation:
    cores: list[int]
    exclusive: bool
    cache_dir: str | None
    compile_threads: int | None
    allocator: str | None
    _locks: list[IO[str]] = field(default_factory=list, repr=False)


def claim_cores(count: int, allowed: Sequence[int], root: Path) -> tuple[list[int], list[IO[str]]]:
    """Lock up to ``count`` of the ``allowed`` cores that no other process holds."""
    lock_dir = root / "cores"
    lock_dir.mkdir(parents=True, exist_ok=True)
    cores: list[int] = []
    locks: list[IO[str]] = []
    for core in sorted(allowed):
        if len(cores) == count:
            break
        handle = open(lock_dir / f"{core}.lock", "a")  # noqa: SIM115  (held until release)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        cores.append(core)
        locks.append(handle)
    return cores, locks


@contextmanager
def isolate(cpus: int | None, cache: str, slot: str, allocator: str = "steady") -> Iterator[Isolation]:
    """Pin to ``cpus`` claimed cores, select the compile cache and set the C allocator
    (``allocator``: ``steady`` or ``system``) for the ``with`` body.

    ``cpus=None`` (not scheduled by compilebench, e.g. a direct in-process call) pins nothing
    and, for a warm cache, keeps inductor's own default directory. If fewer cores are free
    than requested (a node declaring more CPUs than it has), the claimed ones are used; if
    none is free, the task shares the node's cores and says so (``exclusive=False``).
    """
    root = state_root()
    allowed = sorted(os.sched_getaffinity(0))
    saved_env = {name: os.environ.get(name) for name in (*CACHE_ENV, "TORCHINDUCTOR_COMPILE_THREADS")}
    saved_threads = torch.get_num_threads()
    cores, locks = claim_cores(cpus, allowed, root) if cpus else ([], [])
    exclusive = bool(cores)
    cores = cores or allowed
    cold_dir = None
    try:
        if cpus:
            os.sched_setaffinity(0, cores)
            torch.set_num_threads(len(cores))
        compile_threads = _size_compile_pool(len(cores)) if cpus else None
        allocator_in_effect = set_allocator(allocator) if cpus else None
        if cache == "cold":
            cold_dir = tempfile.mkdtemp(prefix="cold-", dir=_mkdir(root / "cache"))
            cache_dir: str | None = cold_dir
        elif cpus:
            cache_dir = str(_mkdir(root / "cache" / _cache_slot(slot, cores, exclusive)))
        else:
            cache_dir = None
        if cache_dir:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir  # read at each use by inductor
            os.environ["TRITON_CACHE_DIR"] = str(Path(cache_dir) / "triton")
        yield Isolation(cores, exclusive, cache_dir, compile_threads, allocator_in_effect, locks)
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if cpus:
            os.sched_setaffinity(0, allowed)
            torch.set_num_threads(saved_threads)
        for handle in locks:
            handle.close()  # releases the flock
        if cold_dir:
            shutil.rmtree(cold_dir, ignore_errors=True)


def set_allocator(setting: str) -> str | None:
    """Apply ``timing.allocator`` to this process; what is in effect, for ``measurement.allocator``.

    ``steady``: ``steady_allocator()``. ``system``: nothing to do in a process that never
    steadied glibc; in one that did (a long-lived worker), glibc's documented defaults are set
    back, though its adaptive threshold stays off once set, and the result says so."""
    if setting == "steady":
        return steady_allocator()
    if not _steadied:
        return SYSTEM_ALLOCATOR
    return (
        RESET_ALLOCATOR
        if _mallopt((M_MMAP_MAX, DEFAULT_MMAP_MAX), (M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD))
        else None
    )


def steady_allocator() -> str | None:
    """Make glibc's malloc behave the same for every call of this process; what was set, or None
    where the C library is not glibc. Process-wide and kept: a scheduled worker runs only
    experiments."""
    global _steadied
    if not _mallopt((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_NEVER)):
        return None
    _steadied = True
    return STEADY_ALLOCATOR


def _mallopt(*settings: tuple[int, int]) -> bool:
    """glibc's ``mallopt`` for each (parameter, value); False where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return all(libc.mallopt(param, value) for param, value in settings)
    except (OSError, AttributeError, TypeError):
        return False


def _cache_slot(slot: str, cores: list[int], exclusive: bool) -> str:
    """A GPU slot is held by one task at a time; CPU tasks are told apart by the cores they hold
    (a task sharing cores it could not claim gets a directory of its own process)."""
    if slot != "cpu":
        return slot
    return f"cpu{cores[0]}" if exclusive else f"cpu-shared-{os.getpid()}"


def _size_compile_pool(threads: int) -> int:
    """Inductor compiles with at most ``threads`` workers: the cores this task owns."""
    import torch._inductor.config as inductor_config

    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)  # for processes it starts
    inductor_config.compile_threads = threads  # read when a compile pool is created
    return threads


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
