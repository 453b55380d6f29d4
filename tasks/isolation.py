"""Keeping concurrent experiments on one node out of each other's way.

Ray reserves CPU *counts* but pins nothing, and inductor's caches default to one directory
per user shared by every process on the node. So a worker claims actual cores once, for its
life (``claim_worker_cores``: one lock file per core, ``flock``ed: a lock dies with its
process), before it starts a thread pool of its own, and pins every thread of its process to
them. Every thread, because ``sched_setaffinity`` sets the mask of one thread and only threads
created afterwards inherit it: seen with torch 2.13 on a CPU, ``import torch`` already starts
OpenBLAS's pool (numpy's, when ``OMP_NUM_THREADS`` > 1), ``torch.set_num_threads`` and the
first parallel op start OpenMP's, and Ray's own threads exist before a worker's constructor
runs. Processes started later inherit the mask of the thread that starts them: inductor's
compile workers (``SubprocPool``'s sidecar ``python -m torch._inductor.compile_worker`` and its
process pool, for Triton; on a CPU a thread pool in the process, which runs ``g++``), and the
fresh process of ``compile.cache: cold``, which takes its parent's claim as its own
(``inherit_claim``: same cores, no lock of its own).

Each experiment (``isolate``) then claims nothing: it pins back any thread, or process started
from this one, whose allowed CPUs left the claim, reports the claim's cores, and calls them
exclusive only while the claim holds its locks and every such thread's allowed CPUs
(``Cpus_allowed_list`` in ``/proc/<pid>/task/<tid>/status``) lie inside them: checked at the
experiment's start and again at its end (``Isolation.still_exclusive``). It sizes torch's
threads and inductor's compile pool to the claim, and compiles into a cache directory no
concurrent experiment uses: a fresh empty one for ``cache: cold`` and ``shared``, and for ``warm`` the node's
directory of its slot (its GPU, or the first core it holds), which persists across
experiments on that slot.

It also steadies glibc's allocator (``timing.allocator: steady``, the default): by default
glibc serves large blocks with fresh ``mmap``s and trims freed heap by thresholds it adjusts
as the process runs, so whether an eager call pays page faults for its temporaries depends on
the process's history; seen on foo3 2048x2048 on the CPU, the same experiment's speedup moved
between 2.3x and 4.7x from run to run (CV 22-30%). Heap-only allocation with no trimming (as
jemalloc and tcmalloc behave in steady state) makes every sample of a side pay the same.
``allocator: system`` leaves glibc as it is, to measure what an untuned process sees.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # read by inductor at each use
CACHE_ENV = (INDUCTOR_CACHE_ENV, "TRITON_CACHE_DIR")
CLAIM_ENV = "COMPILEBENCH_CORE_CLAIM"  # a claiming worker's claim, as JSON, for the processes it starts
PIN_ROUNDS = 8  # passes over the threads until none is outside (one may start while others are pinned)
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


@dataclass(frozen=True)
class CoreClaim:
    """The cores this process runs on for the rest of its life."""

    cores: tuple[int, ...]
    exclusive: bool  # every core is locked by ``owner``, for as long as it lives
    owner: int  # the process holding the locks: this one, or the worker that started it
    locks: tuple[IO[str], ...] = field(default=(), repr=False, compare=False)  # held by the owner only


_claim: CoreClaim | None = None  # this process's claim, once made or inherited


@dataclass
class Isolation:
    cores: list[int]
    exclusive: bool
    cache_dir: str | None
    compile_threads: int | None
    allocator: str | None
    claim: CoreClaim | None = field(default=None, repr=False)

    def still_exclusive(self) -> bool:
        """Whether the cores stayed exclusive from the experiment's start until now: they were at its
        start, and every thread of this process and of those it started is inside the claim now.
        For the end of the measured part; kept in ``exclusive``."""
        self.exclusive = self.exclusive and _holds(self.claim)
        return self.exclusive


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


def claim_worker_cores(cpus: int | None) -> CoreClaim | None:
    """Claim ``cpus`` cores for the rest of this process's life and pin every thread of it, and of
    the processes it started, to them; None (``cpus`` unset) claims and pins nothing.

    Call it before anything starts a thread pool (before ``import torch``); threads and processes
    started afterwards inherit the mask. The locks are held until the process exits. If fewer
    cores are free than requested (a node declaring more CPUs than it has), the claimed ones are
    used; if none is free, the worker shares the cores it is allowed and its results say so
    (``exclusive=False``). Processes this one starts find the claim in ``CLAIM_ENV``. A second
    call returns the first claim."""
    global _claim
    if not cpus:
        return None
    if _claim is None:
        allowed = sorted(os.sched_getaffinity(0))
        cores, locks = claim_cores(cpus, allowed, state_root())
        _claim = CoreClaim(tuple(cores or allowed), bool(cores), os.getpid(), tuple(locks))
        _publish(_claim)
        pin(_claim.cores)
    return _claim


def _publish(claim: CoreClaim) -> None:
    """``claim`` in ``CLAIM_ENV``, for the processes this one starts from now on (``inherit_claim``)."""
    os.environ[CLAIM_ENV] = json.dumps({"cores": list(claim.cores), "exclusive": claim.exclusive, "owner": claim.owner})


def release_claim() -> None:
    """Hand this process's core locks back now; the claim stays, no longer exclusive. For a worker about to be
    replaced (``tasks.worker``): its last result is measured, and its replacement may start on the same cores
    before this process has exited (``ray.kill`` returns first), which would find them taken and share."""
    global _claim
    if _claim is None or not _claim.locks:
        return
    for handle in _claim.locks:
        handle.close()
    _claim = CoreClaim(_claim.cores, False, _claim.owner)
    _publish(_claim)


def inherit_claim() -> CoreClaim | None:
    """Take the claim of the worker that started this process (``CLAIM_ENV``) as this process's
    own: pinned to the same cores, no lock taken (the worker holds them for as long as it lives,
    and this process dies with it). Exclusive where the worker's claim was and the worker is
    this process's parent. None where no worker claimed cores."""
    global _claim
    text = os.environ.get(CLAIM_ENV)
    if not text:
        return None
    given = json.loads(text)
    owner = int(given["owner"])
    _claim = CoreClaim(tuple(given["cores"]), bool(given["exclusive"]) and os.getppid() == owner, owner)
    pin(_claim.cores)
    return _claim


def pin(cores: Sequence[int]) -> None:
    """Set the allowed CPUs of every thread of this process, and of the processes it started, that
    are not inside ``cores`` to ``cores``; a thread already inside (e.g. bound to one of them by
    OpenMP) keeps its mask. Passes over the threads again until none is outside, since a thread
    not yet pinned may start another meanwhile. A thread that cannot be pinned stays outside,
    and the check of an experiment (``threads_inside``) reports it."""
    inside = set(cores)
    for _ in range(PIN_ROUNDS):
        outside = [tid for tid, cpus in thread_affinities(descendants=True).items() if not cpus <= inside]
        if not outside:
            return
        for tid in outside:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # exited meanwhile; not ours
                os.sched_setaffinity(tid, inside)


def thread_affinities(pid: int | None = None, descendants: bool = False) -> dict[int, set[int]]:
    """Allowed CPUs of each thread of process ``pid`` (this one by default), by thread id, as the
    kernel lists them (``Cpus_allowed_list`` in ``/proc/<pid>/task/<tid>/status``); with
    ``descendants``, of the threads of every process started from it, and from those, too (thread
    ids are unique across processes). A thread or process that exits meanwhile is left out."""
    pids = [pid or os.getpid()]
    found: dict[int, set[int]] = {}
    while pids:
        proc = pids.pop()
        for tid in _tids(proc):
            task = f"/proc/{proc}/task/{tid}"
            try:
                status = Path(f"{task}/status").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            for line in status.splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    found[tid] = parse_cpu_list(line.split(":", 1)[1])
            if descendants:  # the ``children`` file needs CONFIG_PROC_CHILDREN, as distributions' kernels have
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    pids += [int(child) for child in Path(f"{task}/children").read_text().split()]
    return found


def threads_inside(cores: Sequence[int]) -> bool:
    """Whether every thread of this process, and of the processes it started, may run only on
    ``cores``."""
    allowed = set(cores)
    return all(cpus <= allowed for cpus in thread_affinities(descendants=True).values())


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a kernel CPU list such as ``0-3,8,10-11``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _tids(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return []


def _holds(claim: CoreClaim | None) -> bool:
    """Whether ``claim`` is exclusive and every thread (and process started from here) is inside it."""
    return bool(claim and claim.exclusive and threads_inside(claim.cores))


@contextmanager
def isolate(cpus: int | None, cache: str, slot: str, allocator: str = "steady") -> Iterator[Isolation]:
    """Run the ``with`` body on this process's claimed cores, with torch's threads and inductor's
    compile pool sized to them, the compile cache selected and the C allocator set
    (``allocator``: ``steady`` or ``system``); claims nothing itself.

    With ``cpus`` set, in a process that claimed cores (``claim_worker_cores``, a worker) or
    inherited a claim (``inherit_claim``): threads and child processes that left the claim are
    pinned back, the claim's cores are reported, exclusive when the claim is and every thread is
    inside it (checked here, and again by ``Isolation.still_exclusive`` and when the body ends).
    With ``cpus`` set and no claim (a direct in-process call): nothing is pinned, the process's
    allowed cores are reported, not exclusive, and ``cpus`` of them sized for. ``cpus=None`` (not
    scheduled by compilebench) pins and sizes nothing and, for a warm cache, keeps inductor's own
    default directory.
    """
    import torch

    root = state_root()
    saved_env = {name: os.environ.get(name) for name in (*CACHE_ENV, "TORCHINDUCTOR_COMPILE_THREADS")}
    saved_threads = torch.get_num_threads()
    claim = _claim if cpus else None
    if claim:
        pin(claim.cores)
        cores = list(claim.cores)
    else:
        cores = sorted(os.sched_getaffinity(0))
    threads = len(cores) if claim else min(cpus or 0, len(cores))
    cold_dir = None
    iso = None
    try:
        if cpus:
            torch.set_num_threads(threads)
        compile_threads = _size_compile_pool(threads) if cpus else None
        allocator_in_effect = set_allocator(allocator) if cpus else None
        if cache in ("cold", "shared"):  # shared: a cold start that first loads the run's shared cache
            cold_dir = tempfile.mkdtemp(prefix="cold-", dir=_mkdir(root / "cache"))
            cache_dir: str | None = cold_dir
        elif cpus:
            cache_dir = str(_mkdir(root / "cache" / _cache_slot(slot, cores, bool(claim and claim.exclusive))))
        else:
            cache_dir = None
        if cache_dir:
            os.environ[INDUCTOR_CACHE_ENV] = cache_dir
            os.environ["TRITON_CACHE_DIR"] = str(Path(cache_dir) / "triton")
        iso = Isolation(cores, _holds(claim), cache_dir, compile_threads, allocator_in_effect, claim)
        yield iso
    finally:
        if iso is not None:
            iso.still_exclusive()
        restore_environment(saved_env)
        if cpus:
            torch.set_num_threads(saved_threads)
        if cold_dir:
            shutil.rmtree(cold_dir, ignore_errors=True)


def restore_environment(saved: Mapping[str, str | None]) -> None:
    """Each variable of ``saved`` back to its saved value, or unset where that is None (it was unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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


def trim_heap() -> bool:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim(0)``); False where the
    C library has none. The steady allocator never trims on its own, so that no timed call pays for
    pages given back and faulted in again; between experiments, the memory an experiment freed would
    otherwise stay resident, fragmented, for the life of the worker (12 `seed.foo` experiments left a
    worker 507 MiB larger, all of it free heap; trimmed, 3 MiB), and ``worker.max_rss_growth_mb``
    would measure the heap's leftovers instead of what the process keeps."""
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        return False
    return True


def _mallopt(*settings: tuple[int, int]) -> bool:
    """glibc's ``mallopt`` for each (parameter, value); False where the C library has none."""
    try:
        libc = _libc()
        return all(libc.mallopt(param, value) for param, value in settings)
    except (OSError, AttributeError, TypeError):
        return False


def _libc() -> ctypes.CDLL:
    """The C library this process runs on (OSError where it cannot be loaded)."""
    return ctypes.CDLL(ctypes.util.find_library("c"))


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
