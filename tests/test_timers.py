"""Timers and plans, with fake clocks: counts, blocks, interleaving, budgets."""

from __future__ import annotations

import pytest
import torch

from tasks.models import TimingConfig
from tasks.timers import CUDAGRAPH_MIN_WARMUP, CpuTimer, CudaTimer, Plan, plan


class Clock:
    """A clock that only moves when a fake call says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def call(self, name, log, seconds):
        def fn():
            log.append(name)
            self.now += seconds

        return fn


def test_interleaved_alternates_sides_block_by_block():
    clock, log = Clock(), []
    timer = CpuTimer(clock=clock)
    eager, compiled = clock.call("e", log, 0.003), clock.call("c", log, 0.001)
    samples = timer.interleaved([eager, compiled], [Plan(0, 3, 2), Plan(0, 3, 1)], rounds=3)
    assert "".join(log) == "eec" * 3
    assert samples == [pytest.approx([3.0] * 3), pytest.approx([1.0] * 3)]


def test_block_timer_on_a_call_of_a_few_microseconds():
    clock, log = Clock(), []
    timer = CpuTimer(clock=clock)
    fn = clock.call("f", log, 5e-6)  # 5 us per call
    estimate = timer.estimate(fn)
    assert estimate == pytest.approx(0.005)
    p = plan(estimate, TimingConfig(warmup=0, repeats=4), blocked=timer.blocked)
    assert p.block_size == 200  # 200 calls of 5 us make a 1 ms sample
    log.clear()
    (samples,) = timer.interleaved([fn], [p], p.repeats)
    assert len(log) == 4 * 200
    assert samples == pytest.approx([0.005] * 4)  # per-call time, not block time


def test_calls_long_enough_are_timed_one_by_one():
    assert plan(0.1, TimingConfig(), blocked=True).block_size == 1
    assert plan(0.001, TimingConfig(), blocked=False).block_size == 1  # CUDA events never block


def test_budgets_replace_counts():
    p = plan(2.0, TimingConfig(warmup_ms=25, repeats_ms=100), blocked=True)
    assert (p.warmup, p.repeats, p.block_size) == (13, 50, 1)
    tiny = plan(0.01, TimingConfig(warmup_ms=1, repeats_ms=10), blocked=True)
    assert tiny.block_size == 100 and tiny.repeats == 10  # a budget counts blocks, not calls
    assert plan(500.0, TimingConfig(repeats_ms=10), blocked=True).repeats == 1  # never zero


def test_cudagraph_modes_get_at_least_three_warmup_calls():
    assert plan(1.0, TimingConfig(warmup=0), blocked=False, min_warmup=CUDAGRAPH_MIN_WARMUP).warmup == 3
    assert plan(1.0, TimingConfig(warmup=5), blocked=False, min_warmup=CUDAGRAPH_MIN_WARMUP).warmup == 5


def test_warm_makes_untimed_calls_only():
    clock, log = Clock(), []
    CpuTimer(clock=clock).warm(clock.call("w", log, 1.0), 3)
    assert log == ["w"] * 3


def test_first_call_is_wall_time_in_ms():
    clock, log = Clock(), []
    _, ms = CpuTimer(clock=clock).first_call(clock.call("f", log, 2.5))
    assert ms == 2500.0 and log == ["f"]


class FakeCuda:
    """Stands in for torch.cuda: events read a fake device clock; synchronisations are logged."""

    def __init__(self, monkeypatch):
        self.now, self.log = 0.0, []
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                fake.log.append("record")
                self.t = fake.now

            def elapsed_time(self, end):
                return end.t - self.t

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: self.log.append("sync"))

    def call(self, name, ms):
        def fn():
            self.log.append(name)
            self.now += ms

        return fn


def test_cuda_timer_records_events_around_each_call_and_synchronises_once_at_the_end(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    timer = CudaTimer(torch.device("cuda", 0), flush_l2=True)
    monkeypatch.setattr(timer, "_flush", lambda: cuda.log.append("flush"))
    samples = timer.interleaved([cuda.call("e", 3.0), cuda.call("c", 1.0)], [Plan(0, 2), Plan(0, 2)], rounds=2)
    assert samples == [[3.0, 3.0], [1.0, 1.0]]
    window = ["flush", "record", "e", "record", "flush", "record", "c", "record"]
    assert cuda.log == ["sync", *window, *window, "sync"]  # drain the warmup, then one sync at the end


def test_cuda_timer_without_flush_touches_no_buffer(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    timer = CudaTimer(torch.device("cuda", 0))
    timer.interleaved([cuda.call("e", 2.0)], [Plan(0, 1)], rounds=1)
    assert cuda.log == ["sync", "record", "e", "record", "sync"]
    assert timer._flush_buffer is None
