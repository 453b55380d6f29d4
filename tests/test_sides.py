"""Both sides timed together: peak memory windows that cover CUDA graph recording, on a fake device."""

from __future__ import annotations

import torch

from tasks.dynamo_watch import DynamoWatch
from tasks.models import Measurement, TimingConfig
from tasks.sides import Peaks, time_sides
from tasks.targets import Workload
from tasks.timers import SideSamples


class FakeMemory:
    """A caching allocator's statistics: what is allocated now and the peak since the last reset."""

    def __init__(self) -> None:
        self.allocated = 0
        self.high = 0
        self.resets = 0

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.high = max(self.high, self.allocated)

    def free(self, n: int) -> None:
        self.allocated -= n

    def start(self) -> int:
        self.resets += 1
        self.high = self.allocated
        return self.allocated

    def peak(self) -> int:
        return self.high


class CallingTimer:
    """Calls what it is given as a timer would, with known samples."""

    method = "cuda_events"
    blocked = False

    def first_call(self, fn):
        return fn(), 1.0

    def estimate(self, fn):
        for _ in range(3):
            fn()
        return 1.0

    def warm(self, fn, calls):
        for _ in range(calls):
            fn()

    def interleaved(self, fns, plans, rounds, setups=None):
        for _ in range(rounds):
            for fn in fns:
                fn()
        return [SideSamples([2.0] * rounds), SideSamples([1.0] * rounds)]


def test_compiled_peak_covers_the_recording_of_cuda_graphs_not_only_a_replay():
    memory = FakeMemory()
    recorded = []

    def eager(x):
        memory.alloc(300)  # temporaries of one call, freed when it returns
        memory.free(300)
        return x

    def compiled(x):
        if not recorded:  # the first call after compiling records the graph: its pool stays allocated
            recorded.append(True)
            memory.alloc(1000)
        return x

    work = Workload(eager, (torch.zeros(1),))
    eager_t, compiled_t = time_sides(
        CallingTimer(),
        work,
        [eager, compiled],
        [1.0, 1.0],
        TimingConfig(warmup=2, repeats=3),
        [0, 0],
        torch.device("cpu"),
        Measurement(timer="cuda_events"),
        DynamoWatch(),
        probe=memory,
    )
    assert eager_t.peak_memory_bytes == 300
    assert compiled_t.peak_memory_bytes == 1000  # one replay alone reads 0
    assert memory.resets >= 6  # a window of its own for each side's estimate, warmup and last call


def test_peaks_keep_the_highest_window_of_each_side_and_nothing_without_a_device():
    memory = FakeMemory()
    peaks = Peaks(memory)
    peaks.measure(1, lambda: (memory.alloc(50), memory.free(50)))
    peaks.measure(1, lambda: (memory.alloc(20), memory.free(20)))
    assert (peaks.of(0), peaks.of(1)) == (None, 50)
    assert Peaks(None).measure(0, lambda: 7) == 7 and Peaks(None).of(0) is None
