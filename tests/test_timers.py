"""Timers and plans, with fake clocks: counts, blocks, interleaving, budgets, and the two CUDA methods."""

from __future__ import annotations

import pytest
import torch

from tasks.models import TimingConfig
from tasks.timers import (
    BLOCK_TARGET_MS,
    CUDAGRAPH_MIN_WARMUP,
    SETTLE_BLOCKS,
    CpuTimer,
    CudaTimer,
    Plan,
    host_bound,
    plan,
    timer_for,
)


class Clock:
    """A clock that only moves when a fake call says so; given a ``log``, each reading is logged as ``|``."""

    def __init__(self, log=None):
        self.now = 0.0
        self.log = log

    def __call__(self):
        if self.log is not None:
            self.log.append("|")
        return self.now

    def call(self, name, log, seconds):
        def fn():
            log.append(name)
            self.now += seconds

        return fn


def test_interleaved_alternates_sides_block_by_block():
    """Each side's timed block (between two clock readings, ``|``) comes right after an untimed block of
    the same side, of the same size: the settling calls are not in any sample."""
    log = []
    clock = Clock(log)
    timer = CpuTimer(clock=clock)
    eager, compiled = clock.call("e", log, 0.003), clock.call("c", log, 0.001)
    sides = timer.interleaved([eager, compiled], [Plan(0, 3, 2), Plan(0, 3, 1)], rounds=3)
    assert "".join(log) == "ee|ee|c|c|" * 3
    assert [s.samples_ms for s in sides] == [pytest.approx([3.0] * 3), pytest.approx([1.0] * 3)]
    assert all(s.device_samples_ms is None and s.host_bound is None for s in sides)  # no device on the CPU


def test_setup_runs_before_each_round_for_all_its_calls_outside_the_timed_region():
    """One setup per round, asked for the round's calls: the untimed settling block and the timed one."""
    log = []
    clock = Clock(log)
    timer = CpuTimer(clock=clock)

    def setup(size):
        log.append(f"setup{size}")
        clock.now += 1.0  # slow, but untimed

    (side,) = timer.interleaved([clock.call("f", log, 0.002)], [Plan(0, 2, 3)], rounds=2, setups=[setup])
    assert log == ["setup6", "f", "f", "f", "|", "f", "f", "f", "|"] * 2
    assert side.samples_ms == pytest.approx([2.0, 2.0])


def test_each_timed_block_is_preceded_by_an_untimed_block_of_the_same_side_on_the_same_inputs():
    """Two sides cycling through 3 inputs, blocks of 2, 3 rounds: before each timed block (between two
    clock readings, ``|``), as many untimed calls of the same side on the input the block starts with
    (``peek``, which does not move on); the samples hold the timed calls only."""
    from tasks.targets import CycleCall

    log = []
    clock = Clock(log)

    def side(name, ms):
        def fn(x):
            log.append(f"{name}{x}")
            clock.now += (x + 1) * ms / 1e3

        return fn

    sides = [CycleCall(side("e", 1.0), [(i,) for i in range(3)]), CycleCall(side("c", 0.5), [(i,) for i in range(3)])]
    for call in sides:
        call()  # a warmup call: the timed rounds still start at the first input
    log.clear()
    timed = CpuTimer(clock=clock).interleaved(sides, [Plan(0, 3, 2)] * 2, 3, [s.start_round for s in sides])
    rounds = [f"e{a} e{a} | e{a} e{b} | c{a} c{a} | c{a} c{b} |" for a, b in ((0, 1), (2, 0), (1, 2))]
    assert log == " ".join(rounds).split()
    assert [s.samples_ms for s in timed] == [pytest.approx([1.5, 2.0, 2.5]), pytest.approx([0.75, 1.0, 1.25])]
    assert [call.position for call in sides] == [6, 6]  # the settling calls did not move the cycle on


def test_block_timer_on_a_call_of_a_few_microseconds():
    clock, log = Clock(), []
    timer = CpuTimer(clock=clock)
    fn = clock.call("f", log, 5e-6)  # 5 us per call
    estimate = timer.estimate(fn)
    assert estimate == pytest.approx(0.005)
    p = plan(estimate, TimingConfig(warmup=0, repeats=4), blocked=timer.blocked)
    assert p.block_size == 1000  # 1000 calls of 5 us make a 5 ms sample (BLOCK_TARGET_MS)
    log.clear()
    (side,) = timer.interleaved([fn], [p], p.repeats)
    assert len(log) == (1 + SETTLE_BLOCKS) * 1000 * 4  # each timed block preceded by an untimed one
    assert side.samples_ms == pytest.approx([0.005] * 4)  # per-call time, not block time


def test_calls_long_enough_are_timed_one_by_one():
    assert plan(BLOCK_TARGET_MS, TimingConfig(), blocked=True).block_size == 1
    assert plan(12.0, TimingConfig(), blocked=True).block_size == 1


def test_a_memory_bound_call_of_a_fraction_of_a_millisecond_is_timed_in_blocks_long_enough_to_settle():
    """seed.foo3 1024x1024 compiled (0.17 ms on a CPU core) needs about ten calls after the other
    side's run to reach its steady time; one untimed call then one timed call read it 1.3-2.5x slow.
    Its blocks now last 5 ms, and the untimed block before each timed block as long."""
    log = []
    clock = Clock(log)
    timer = CpuTimer(clock=clock)
    p = plan(0.17, TimingConfig(warmup=0, repeats=3), blocked=True)
    assert p.block_size == 30 and p.block_size * 0.17 >= BLOCK_TARGET_MS
    eager, compiled = clock.call("e", log, 0.5e-3), clock.call("c", log, 0.17e-3)
    timer.interleaved([eager, compiled], [p, p], p.repeats)
    assert "".join(log) == ("e" * 30 + "|" + "e" * 30 + "|" + "c" * 30 + "|" + "c" * 30 + "|") * 3
    assert plan(0.001, TimingConfig(), blocked=False).block_size == 1  # CUDA never blocks
    assert plan(0.5, TimingConfig(), blocked=True, block_size=250).block_size == 250  # a common block, as given


def test_budgets_replace_counts():
    p = plan(10.0, TimingConfig(warmup_ms=25, repeats_ms=100), blocked=True)
    assert (p.warmup, p.repeats, p.block_size) == (3, 10, 1)
    tiny = plan(0.01, TimingConfig(warmup_ms=1, repeats_ms=50), blocked=True)
    assert tiny.block_size == 500 and tiny.repeats == 10  # a budget counts blocks, not calls
    assert plan(500.0, TimingConfig(repeats_ms=10), blocked=True).repeats == 1  # never zero


def test_counts_not_given_are_chosen_by_device():
    cpu = plan(2.0, TimingConfig(), blocked=True)
    assert (cpu.warmup, cpu.repeats) == (3, 10)
    cuda = plan(2.0, TimingConfig(), blocked=False, budgets_by_default=True)
    assert (cuda.warmup, cuda.repeats) == (13, 50)  # do_bench's 25 ms and 100 ms
    long = plan(50.0, TimingConfig(), blocked=False, budgets_by_default=True)
    assert (long.warmup, long.repeats) == (1, 10)  # never fewer than 10 samples by default
    given = plan(2.0, TimingConfig(warmup=1, repeats=4), blocked=False, budgets_by_default=True)
    assert (given.warmup, given.repeats) == (1, 4)  # given counts are kept on every device
    mixed = plan(2.0, TimingConfig(repeats=4), blocked=False, budgets_by_default=True)
    assert (mixed.warmup, mixed.repeats) == (13, 4)  # each quantity on its own
    assert plan(50.0, TimingConfig(repeats_ms=10), blocked=False, budgets_by_default=True).repeats == 1


def test_a_count_and_a_budget_for_the_same_thing_are_an_error():
    with pytest.raises(ValueError, match=r"cannot be combined with timing\.repeats"):
        TimingConfig(repeats=10, repeats_ms=100)
    with pytest.raises(ValueError, match=r"cannot be combined with timing\.warmup"):
        TimingConfig(warmup=0, warmup_ms=25)
    assert TimingConfig(repeats=10, warmup_ms=25).warmup_ms == 25  # different things: fine


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


def test_host_bound_compares_medians_with_a_20_percent_margin():
    assert host_bound([1.3, 1.3, 9.0], [1.0, 1.0, 1.0]) is True
    assert host_bound([1.1, 1.2, 1.1], [1.0, 1.0, 1.0]) is False
    assert host_bound([1.0], []) is None


class FakeGpu:
    """Stands in for torch.cuda: a host clock and one stream, in ms.

    A launch costs the host ``launch_ms``; its kernel runs when the stream reaches it (kernels
    run one after another). An event is stamped when the stream reaches it; ``synchronize``
    makes the host wait for the stream; ``torch.cuda._sleep(cycles)`` is a spin kernel of
    ``cycles / CYCLES_PER_MS`` ms. Everything the timer asks for is logged.
    """

    CYCLES_PER_MS = 1e6

    def __init__(self, monkeypatch):
        self.host = 0.0
        self.stream_free = 0.0
        self.log = []
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                gpu.log.append("record")
                self.t = gpu.stream_free = max(gpu.host, gpu.stream_free)

            def elapsed_time(self, end):
                return end.t - self.t

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", self.synchronize)
        monkeypatch.setattr(torch.cuda, "_sleep", self.spin)

    def clock(self):
        return self.host / 1e3  # perf_counter reads seconds

    def synchronize(self, device=None):
        self.log.append("sync")
        self.host = max(self.host, self.stream_free)

    def spin(self, cycles):
        self.log.append("spin")
        self.launch(cycles / self.CYCLES_PER_MS)

    def launch(self, kernel_ms, launch_ms=0.0):
        self.host += launch_ms
        self.stream_free = max(self.host, self.stream_free) + kernel_ms

    def side(self, name, kernels=1, launch_ms=0.0, kernel_ms=1.0):
        def fn():
            self.log.append(name)
            for _ in range(kernels):
                self.launch(kernel_ms, launch_ms)

        return fn


def cuda_timer(gpu, method="wall", flush_l2=False):
    return CudaTimer(torch.device("cuda", 0), flush_l2=flush_l2, method=method, clock=gpu.clock)


def test_events_method_records_events_around_each_call_and_synchronises_once_at_the_end(monkeypatch):
    gpu = FakeGpu(monkeypatch)
    timer = cuda_timer(gpu, "events", flush_l2=True)
    monkeypatch.setattr(timer, "_flush", lambda: gpu.log.append("flush"))
    sides = timer.interleaved([gpu.side("e", kernel_ms=3.0), gpu.side("c", kernel_ms=1.0)], [Plan(0, 2)] * 2, 2)
    assert [s.samples_ms for s in sides] == [[3.0, 3.0], [1.0, 1.0]]
    assert [s.device_samples_ms for s in sides] == [[3.0, 3.0], [1.0, 1.0]]  # the samples are device times
    assert sides[0].host_bound is None  # no wall time taken: not judged
    window = ["e", "flush", "record", "e", "record", "c", "flush", "record", "c", "record"]  # an untimed call first
    assert gpu.log == ["sync", *window, *window, "sync"]  # drain the warmup, then one sync at the end
    assert timer.method == "cuda_events"


def test_wall_method_synchronises_around_each_timed_call_then_takes_its_device_time_behind_a_spin(monkeypatch):
    gpu = FakeGpu(monkeypatch)
    timer = cuda_timer(gpu, "wall")
    (side,) = timer.interleaved([gpu.side("f", kernels=2, launch_ms=0.1, kernel_ms=1.0)], [Plan(0, 2)], 2)
    calibrate = ["sync", "record", "spin", "record", "sync"]  # cycles of torch.cuda._sleep per ms, once
    one_round = ["f", "sync", "f", "sync", "spin", "record", "f", "record"]  # an untimed call first
    assert gpu.log == [*calibrate, *one_round, *one_round, "sync"]
    assert side.samples_ms == pytest.approx(
        [2.1, 2.1]
    )  # 0.1 ms launch, then two 1 ms kernels; the settling call drained before
    assert side.device_samples_ms == pytest.approx([2.0, 2.0])  # the kernels alone
    assert side.host_bound is False
    assert timer.method == "wall"


def test_the_two_methods_differ_on_a_launch_bound_side_after_a_gpu_bound_one(monkeypatch):
    """A launch-bound side (10 launches of 50 us host time each, for 10 us kernels) timed after a
    GPU-bound one (one 2 ms kernel). By events its launches overlap the GPU-bound side's queued
    kernel, so it looks as fast as its kernels (0.1 ms) and the ratio of the two sides is 20x.
    By wall time it costs what a user waits for (0.51 ms): a ratio of 3.9x; its device time,
    taken behind a spin, is still 0.1 ms, so it is flagged host-bound."""
    plans = [Plan(0, 3)] * 2

    def sides(method):
        gpu = FakeGpu(monkeypatch)
        gpu_bound = gpu.side("gpu", kernels=1, launch_ms=0.0, kernel_ms=2.0)
        launch_bound = gpu.side("launch", kernels=10, launch_ms=0.05, kernel_ms=0.01)
        return cuda_timer(gpu, method).interleaved([gpu_bound, launch_bound], plans, 3)

    (heavy_e, light_e), (heavy_w, light_w) = sides("events"), sides("wall")
    assert heavy_e.samples_ms == pytest.approx([2.0] * 3)
    assert light_e.samples_ms == pytest.approx([0.1] * 3)  # launch overhead hidden
    assert heavy_w.samples_ms == pytest.approx([2.0] * 3)
    assert light_w.samples_ms == pytest.approx([0.51] * 3)  # 10 x 50 us of launches + the last kernel
    assert light_w.device_samples_ms == pytest.approx([0.1] * 3)  # the same device time events see
    assert heavy_w.device_samples_ms == pytest.approx([2.0] * 3)
    assert (heavy_w.host_bound, light_w.host_bound) == (False, True)
    events_ratio = heavy_e.samples_ms[0] / light_e.samples_ms[0]
    wall_ratio = heavy_w.samples_ms[0] / light_w.samples_ms[0]
    assert events_ratio == pytest.approx(20.0) and wall_ratio == pytest.approx(2.0 / 0.51)


def test_wall_estimate_is_the_mean_wall_time_of_synchronised_calls(monkeypatch):
    gpu = FakeGpu(monkeypatch)
    fn = gpu.side("f", kernels=10, launch_ms=0.05, kernel_ms=0.01)
    assert cuda_timer(gpu, "wall").estimate(fn) == pytest.approx(0.51)
    # events around 5 calls in a row: each call's launches overlap the previous call's last kernel
    assert cuda_timer(gpu, "events").estimate(fn) == pytest.approx((5 * 0.5 + 0.01) / 5)


def test_cuda_timer_without_flush_touches_no_buffer(monkeypatch):
    gpu = FakeGpu(monkeypatch)
    timer = cuda_timer(gpu, "events")
    timer.interleaved([gpu.side("e", kernel_ms=2.0)], [Plan(0, 1)], rounds=1)
    assert gpu.log == ["sync", "e", "record", "e", "record", "sync"]
    assert timer._flush_buffer is None


def test_the_method_comes_from_the_spec_and_wall_is_the_default():
    cuda = torch.device("cuda", 0)
    assert timer_for(cuda, TimingConfig()).method == "wall"
    assert timer_for(cuda, TimingConfig(method="events")).method == "cuda_events"
    assert timer_for(torch.device("cpu"), TimingConfig(method="events")).method == "perf_counter"


def test_both_sides_see_the_same_input_in_the_same_round_whatever_their_warmup():
    from tasks.dynamo_watch import DynamoWatch
    from tasks.models import Measurement
    from tasks.sides import time_sides
    from tasks.targets import Workload

    clock, seen = Clock(), {"eager": [], "compiled": []}

    class Timer(CpuTimer):
        timing = False

        def interleaved(self, *args, **kwargs):
            Timer.timing = True
            try:
                return super().interleaved(*args, **kwargs)
            finally:
                Timer.timing = False

    def side(name):
        def fn(x):
            if Timer.timing:
                seen[name].append(x)
            clock.now += 0.01  # 10 ms a call: timed one by one

        return fn

    work = Workload(side("eager"), (0,), cycle=[(i,) for i in range(4)])
    with DynamoWatch() as watch:
        time_sides(
            Timer(clock=clock),
            work,
            [work.fn, side("compiled")],
            [1.0, 1.0],
            TimingConfig(warmup=1, repeats=3),
            [0, 3],  # the compiled side warms up longer (as CUDA graphs do)
            torch.device("cpu"),
            Measurement(timer="perf_counter"),
            watch,
        )
    # the calls made in the timed rounds: each round's untimed call on the input the round times, then the timed one
    assert seen == {"eager": [0, 0, 1, 1, 2, 2], "compiled": [0, 0, 1, 1, 2, 2]}


def test_cuda_sides_record_device_time_host_bound_peak_memory_and_cudagraph_use(monkeypatch):
    from tasks.dynamo_watch import DynamoWatch
    from tasks.models import Measurement
    from tasks.sides import time_sides
    from tasks.targets import Workload

    gpu = FakeGpu(monkeypatch)
    allocated = {"now": 1000, "peak": 1000}
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocated["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: allocated.update(peak=1000))

    def side(kernels, launch_ms, kernel_ms, temp_bytes):
        launch = gpu.side("f", kernels, launch_ms, kernel_ms)

        def fn(x):
            allocated["peak"] = max(allocated["peak"], allocated["now"] + temp_bytes)
            launch()

        return fn

    eager, compiled = side(10, 0.05, 0.01, 3000), side(1, 0.01, 0.1, 1000)  # a launch-bound eager side
    timer = CudaTimer(torch.device("cuda", 0), method="wall", clock=gpu.clock)
    measurement = Measurement(timer="wall", cudagraphs=True)
    with DynamoWatch() as watch:
        sides = time_sides(
            timer,
            Workload(eager, (None,)),
            [eager, compiled],
            [5.0, 50.0],
            TimingConfig(),  # counts by device: do_bench's budgets, at least 10 samples
            [0, 3],
            torch.device("cuda", 0),
            measurement,
            watch,
        )
    e, c = sides
    assert e.n == c.n >= 10
    assert e.median_ms == pytest.approx(0.51) and e.device_samples_ms == pytest.approx([0.1] * e.n)
    assert (e.host_bound, c.host_bound) == (True, False)
    assert (e.peak_memory_bytes, c.peak_memory_bytes) == (3000, 1000)  # what the call allocated, not the process
    assert (measurement.cudagraphs_used, measurement.cudagraph_skips) == (True, [])


# Inputs whose shapes change from call to call, on a fake GPU: every shape timed alike by every sample.

SHAPES = 4


class Shapes:
    """A side called on ``SHAPES`` input shapes in turn, as a cycling call takes them: the first timed
    round starts at the first shape, each later round where the last left off; ``repeat`` calls the
    last shape again, ``peek`` the next one without moving on. Shape ``i`` launches one kernel of
    ``(i + 1) * ms`` after 0.1 ms of host time, so a sample tells which shape it timed. Logs each call
    (``e0``: side ``e``, shape 0) and each setup."""

    LAUNCH_MS = 0.1

    def __init__(self, gpu, name, ms):
        self.gpu, self.name, self.ms = gpu, name, ms
        self.position, self.timed, self.setups = 0, False, []

    def _call(self, shape):
        self.gpu.log.append(f"{self.name}{shape}")
        self.gpu.launch((shape + 1) * self.ms, self.LAUNCH_MS)

    def __call__(self):
        self._call(self.position % SHAPES)
        self.position += 1

    def repeat(self):
        self._call((self.position - 1) % SHAPES)

    def peek(self):
        self._call(self.position % SHAPES)

    def start_round(self, calls):
        self.setups.append(calls)
        if not self.timed:
            self.position, self.timed = 0, True

    def shape(self, device_ms):
        return round(device_ms / self.ms) - 1


def test_every_shape_is_timed_as_often_by_the_wall_and_the_device_samples_of_both_sides(monkeypatch):
    """4 shapes, 8 rounds: each side's wall samples and device samples both see every shape twice,
    the device sample of a round times the shape its wall sample timed, the untimed settling call
    before them runs on that shape too, and both sides see the same shape in the same round. Each
    side's inputs move on once per round (one setup, for its three calls)."""
    gpu = FakeGpu(monkeypatch)
    sides = [Shapes(gpu, "e", 1.0), Shapes(gpu, "c", 0.25)]
    for side in sides:
        for _ in range(3):  # warmup calls: the timed rounds still start at the first shape
            side()
    gpu.log.clear()
    timed = cuda_timer(gpu, "wall").interleaved(sides, [Plan(0, 8)] * 2, 8, [s.start_round for s in sides])
    for side, samples in zip(sides, timed, strict=True):
        wall = [side.shape(ms - Shapes.LAUNCH_MS) for ms in samples.samples_ms]
        device = [side.shape(ms) for ms in samples.device_samples_ms]
        assert wall == device == [0, 1, 2, 3] * 2
        assert side.setups == [3] * 8
    calls = [entry for entry in gpu.log if entry[0] in "ec"]
    assert calls == [f"{name}{shape}" for shape in [0, 1, 2, 3] * 2 for name in ("e", "e", "e", "c", "c", "c")]


def test_every_shape_is_timed_as_often_by_the_events_of_both_sides(monkeypatch):
    """Each round's untimed settling call runs on the shape the round's events time (one setup for both)."""
    gpu = FakeGpu(monkeypatch)
    sides = [Shapes(gpu, "e", 1.0), Shapes(gpu, "c", 0.25)]
    timed = cuda_timer(gpu, "events").interleaved(sides, [Plan(0, 8)] * 2, 8, [s.start_round for s in sides])
    for side, samples in zip(sides, timed, strict=True):
        assert [side.shape(ms) for ms in samples.samples_ms] == [0, 1, 2, 3] * 2
        assert side.setups == [2] * 8
    rounds = [[f"{name}{shape}", "record", f"{name}{shape}", "record"] for shape in [0, 1, 2, 3] * 2 for name in "ec"]
    assert gpu.log == ["sync", *[entry for side_round in rounds for entry in side_round], "sync"]


def test_wall_rounds_make_fresh_inputs_for_all_three_calls_before_the_first(monkeypatch):
    """A side whose inputs never change has no ``repeat`` nor ``peek``: the settling call and the
    device sample call it again; the one setup per round asks for the inputs of all three calls,
    before the untimed settling call."""
    gpu = FakeGpu(monkeypatch)
    cuda_timer(gpu, "wall").interleaved(
        [gpu.side("f")], [Plan(0, 2)], 2, [lambda calls: gpu.log.append(f"setup{calls}")]
    )
    one_round = ["setup3", "f", "sync", "f", "sync", "spin", "record", "f", "record"]
    assert gpu.log[5:] == [*one_round, *one_round, "sync"]


def test_cycling_workload_through_time_sides_times_every_shape_on_both_timers(monkeypatch):
    """The procedure's own cycling call and fresh input copies (a target that mutates its inputs):
    every shape timed as often by the wall and the device samples, each round's untimed settling
    call on the shape the round times, and no copy made from a round's settling call to its last
    event."""
    import tasks.targets.workload
    from tasks.dynamo_watch import DynamoWatch
    from tasks.models import Measurement
    from tasks.sides import time_sides
    from tasks.targets import FreshInputs, Workload

    gpu = FakeGpu(monkeypatch)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    copy = tasks.targets.workload.copy_inputs  # where FreshInputs looks it up
    monkeypatch.setattr(tasks.targets.workload, "copy_inputs", lambda inputs: gpu.log.append("copy") or copy(inputs))

    def side(name, ms):
        def fn(shape):
            gpu.log.append(f"{name}{shape}")
            gpu.launch((shape + 1) * ms, Shapes.LAUNCH_MS)

        return fn

    cycle = [(i,) for i in range(SHAPES)]
    fresh = FreshInputs(cycle)
    sides = [fresh.wrap(side("e", 1.0)), fresh.wrap(side("c", 0.25))]
    with DynamoWatch() as watch:
        eager, compiled = time_sides(
            cuda_timer(gpu, "wall"),
            Workload(sides[0], cycle[0], cycle=cycle),
            sides,
            [1.0, 1.0],
            TimingConfig(warmup=2, repeats=8),
            [0, 3],
            torch.device("cuda", 0),
            Measurement(timer="wall"),
            watch,
            before_block=fresh.setup,
        )
    for timing, ms in ((eager, 1.0), (compiled, 0.25)):
        assert [round((w - Shapes.LAUNCH_MS) / ms) - 1 for w in timing.samples_ms] == [0, 1, 2, 3] * 2
        assert [round(d / ms) - 1 for d in timing.device_samples_ms] == [0, 1, 2, 3] * 2
    rounds = gpu.log[gpu.log.index("spin") + 3 :]  # after the spin's calibration: the timed rounds,
    rounds = rounds[: len(rounds) - rounds[::-1].index("record")]  # up to the last one's last event
    calls = [i for i, entry in enumerate(rounds) if entry[0] in "ec" and entry[1:].isdigit()]
    assert "copy" in rounds  # the copies are seen
    assert len(calls) == 3 * 2 * 8  # settling, wall and device calls, of 2 sides, in 8 rounds
    for settle, wall, device in zip(calls[::3], calls[1::3], calls[2::3], strict=True):
        assert rounds[settle] == rounds[wall] == rounds[device]  # one side, one shape
        assert (rounds[wall - 1], rounds[device - 1], rounds[device + 1]) == ("sync", "record", "record")
        assert "copy" not in rounds[settle : device + 2]  # every copy made before the round's first call
