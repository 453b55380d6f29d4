"""The scheduling policy on made-up nodes and events: no Ray, no torch, no clock."""

from __future__ import annotations

from orchestrator.execution.policy import MAX_NODE_LOSSES, Dispatch, Run, Scheduler, Shape, Start, runs_of, shape_of
from orchestrator.machines.nodes import Node
from tasks.models import Calibration, ErrorInfo, Experiment, Result

CRASH = ErrorInfo(type="ray.exceptions.ActorDiedError", message="The actor died unexpectedly")


def node(node_id: str, cpus: int, gpus: int = 0, model: str | None = None) -> Node:
    models = [model] if model else []
    return Node(node_id=node_id, hostname=f"host-{node_id}", address="", cpus=cpus, gpus=gpus, gpu_models=models)


def exp(seed: int = 0, **kw) -> Experiment:
    return Experiment(target="seed.foo", seed=seed, **kw)


def ok(e: Experiment) -> Result:
    return Result(
        experiment_id=e.id,
        target=e.target,
        params={},
        device="cpu",
        compile=e.compile,
        timing=e.timing,
        seed=e.seed,
        status="ok",
        started_at=0,
        finished_at=1,
    )


def ready_all(s: Scheduler, starts: list[Start]) -> None:
    for st in starts:
        s.worker_ready(st.worker_id, "h", 1000 + st.worker_id, [str(st.worker_id)])


def test_shape_defaults_follow_the_node():
    gpu_node, cpu_node, logical = node("g", 32, 8, "H100"), node("c", 16), node("l", 2, 4)
    assert shape_of(exp(), gpus_seen=True) == Shape(1) and shape_of(exp(), gpus_seen=False) == Shape(0)
    assert shape_of(exp(), gpus_seen=None) is None  # device auto, nothing to judge by yet
    assert shape_of(exp(device="cuda"), gpus_seen=False) == Shape(1)
    assert shape_of(exp(gpu_model="A10G"), gpus_seen=False) == Shape(1)
    assert shape_of(exp(device="cpu"), gpus_seen=True) == Shape(0)
    assert shape_of(exp(resources={"gpus": 2, "cpus": 6}), gpus_seen=True) == Shape(2, 6)
    assert Shape(1).cpus_on(gpu_node) == 4 and Shape(2).cpus_on(gpu_node) == 8  # the node's cores per GPU
    assert Shape(0).cpus_on(cpu_node) == 16 and Shape(0).cores_on(cpu_node) == 16  # every core
    assert Shape(1).cpus_on(logical) == 0.5 and Shape(1).cores_on(logical) == 1  # fewer cores than GPUs
    assert Shape(1, 3).cpus_on(gpu_node) == 3
    assert not Shape(1).fits(cpu_node) and not Shape(9).fits(gpu_node) and not Shape(1, 64).fits(gpu_node)
    assert not Shape(0).fits(node("empty-head", 0))


def test_one_worker_per_gpu_fed_in_spec_order():
    s = Scheduler([exp(i) for i in range(5)])
    s.observe_nodes([node("a", 8, 2, "A100")])
    plan = s.plan(now=0)
    assert [(st.gpus, st.cpus, st.cores, st.gpu_model) for st in plan.start] == [(1, 4, 4, "A100")] * 2
    assert s.plan(now=0).start == []  # starting workers are counted as supply
    ready_all(s, plan.start)
    plan2 = s.plan(now=1)
    assert [d.experiment.seed for d in plan2.dispatch] == [0, 1]
    first = plan2.dispatch[0]
    result = s.finished(first.worker_id, ok(first.experiment))
    assert result.attempts == 1 and result.reserved.gpus == 1 and result.reserved.cpus == 4
    assert [d.experiment.seed for d in s.plan(now=2).dispatch] == [2]


def test_gpu_model_goes_only_to_its_nodes_and_none_to_any():
    s = Scheduler([exp(0, gpu_model="H100"), exp(1, gpu_model="A100"), exp(2)])
    s.observe_nodes([node("a", 4, 1, "A100"), node("h", 4, 1, "H100")])
    plan = s.plan(0)
    assert sorted(st.gpu_model for st in plan.start) == ["A100", "H100"]
    ready_all(s, plan.start)
    model_of = {st.worker_id: st.gpu_model for st in plan.start}
    dispatched = {d.experiment.seed: model_of[d.worker_id] for d in s.plan(1).dispatch}
    assert dispatched == {0: "H100", 1: "A100"}


def test_unknown_model_and_oversized_reservations_are_unschedulable_at_once_on_a_local_instance():
    big_gpu, big_cpu = exp(1, resources={"gpus": 4}), exp(2, device="cuda", resources={"cpus": 64})
    s = Scheduler([exp(0, gpu_model="B200"), big_gpu, big_cpu])
    s.observe_nodes([node("a", 8, 2, "A100"), node("h", 8, 1, "H100")])
    plan = s.plan(0)
    assert [r.status for r in plan.results] == ["unschedulable"] * 3 and s.done
    assert [r.error.message for r in plan.results] == [
        "needs a 'B200' GPU; the cluster's GPU models are A100, H100",
        "needs 4 GPU(s) on one node; the largest node has 2",
        "needs 64 CPU(s) on one node; the largest node has 8",
    ]
    assert all(r.attempts == 0 for r in plan.results)


def test_against_a_scaling_cluster_it_waits_asks_the_autoscaler_then_gives_up():
    s = Scheduler([exp(0, gpu_model="L4")], pending_timeout_s=60)
    s.observe_nodes([node("head", 0)])
    plan = s.plan(0)
    assert plan.results == [] and plan.bundles == [{"CPU": 1.0, "GPU": 1.0, "accelerator_type:L4": 0.001}]
    assert s.plan(59).results == []
    (late,) = s.plan(60).results
    assert late.status == "unschedulable"
    assert late.error.message == (
        "needs a 'L4' GPU; the cluster's GPU models are none (waited 60 s for a node that fits)"
    )


def test_a_node_that_joins_in_time_takes_the_waiting_experiments():
    s = Scheduler([exp(0), exp(1)], pending_timeout_s=60)
    s.observe_nodes([node("head", 0)])  # no CPUs, no GPUs: device auto cannot be decided yet
    assert s.plan(0).bundles == [{"CPU": 1.0, "GPU": 1.0}] * 2
    s.observe_nodes([node("head", 0), node("g", 8, 2, "A10G")])
    plan = s.plan(30)
    assert len(plan.start) == 2 and plan.results == []
    ready_all(s, plan.start)
    assert len(s.plan(31).dispatch) == 2  # device auto became a GPU once GPUs joined


def test_a_death_is_retried_first_then_crashed_with_every_attempt_counted():
    s = Scheduler([exp(0, retries=1), exp(1)])
    s.observe_nodes([node("a", 1, 1)])
    (start,) = s.plan(0).start
    ready_all(s, [start])
    (d,) = s.plan(0).dispatch
    assert d.experiment.seed == 0
    assert s.died(d.worker_id, CRASH, now=1) is None  # retried
    (replacement,) = s.plan(1).start
    ready_all(s, [replacement])
    (again,) = s.plan(2).dispatch
    assert again.experiment.seed == 0  # the retry goes before experiments not started yet
    final = s.died(again.worker_id, CRASH, now=3)
    assert final.status == "crashed" and final.attempts == 2 and final.error == CRASH
    assert final.worker.pid == 1000 + replacement.worker_id and final.reserved.gpus == 1
    assert final.worker.experiments_before == 0 and final.lost_nodes == 0


def test_a_death_of_the_fresh_process_keeps_the_worker():
    s = Scheduler([exp(0, retries=0, compile={"cache": "cold"}), exp(1)])
    s.observe_nodes([node("a", 1, 1)])
    (start,) = s.plan(0).start
    ready_all(s, [start])
    (d,) = s.plan(0).dispatch
    final = s.died(d.worker_id, CRASH, now=1, alive=True)
    assert final.status == "crashed" and final.attempts == 1
    assert (final.started_at, final.finished_at) == (0, 1)
    plan = s.plan(1)
    assert plan.start == [] and plan.dispatch == [Dispatch(start.worker_id, exp(1))]


def test_rays_memory_monitor_kill_is_oom_and_not_retried():
    s = Scheduler([exp(0, retries=3)])
    s.observe_nodes([node("a", 1, 1)])
    ready_all(s, s.plan(0).start)
    (d,) = s.plan(0).dispatch
    error = ErrorInfo(type="ray.exceptions.OutOfMemoryError", message="1 worker(s) were killed")
    final = s.died(d.worker_id, error, now=1, oom=True)
    assert final.status == "oom" and final.attempts == 1 and s.done


def test_a_deadline_runs_from_dispatch_and_expiry_replaces_the_worker():
    s = Scheduler([exp(0, timeout_s=10), exp(1)])
    s.observe_nodes([node("a", 1, 1)])
    ready_all(s, s.plan(0).start)
    (d,) = s.plan(5).dispatch
    assert s.next_deadline() == 15
    assert s.expired(14.9) == []
    ((killed, result),) = s.expired(15)
    assert killed == d.worker_id and result.status == "timeout" and result.attempts == 1
    assert result.error.message == "passed timeout_s=10 s; its worker was killed and replaced"
    assert result.started_at == 5 and result.finished_at == 15
    assert len(s.plan(15).start) == 1  # a replacement for the next experiment


def test_gpu_workers_make_way_for_cpu_ones_once_no_gpu_work_waits():
    s = Scheduler([exp(0, device="cuda"), exp(1, device="cpu")])
    s.observe_nodes([node("a", 4, 2)])
    plan = s.plan(0)
    assert [st.gpus for st in plan.start] == [1]  # the CPU worker would need every core: no room
    ready_all(s, plan.start)
    (d,) = s.plan(1).dispatch
    s.finished(d.worker_id, ok(d.experiment))
    plan = s.plan(2)
    assert plan.retire == [d.worker_id]
    assert [(st.gpus, st.cpus, st.cores) for st in plan.start] == [(0, 4, 4)]


def test_a_node_whose_workers_never_start_is_given_up():
    s = Scheduler([exp(0)])
    s.observe_nodes([node("a", 1, 1)])
    for attempt in range(3):
        (start,) = s.plan(attempt).start
        s.died(start.worker_id, ErrorInfo(type="ModuleNotFoundError", message="No module named 'torch'"), now=attempt)
    (result,) = s.plan(3).results
    assert result.status == "unschedulable"
    assert "workers holding 1 GPU and 1 CPU could not start on the nodes that fit" in result.error.message
    assert "No module named 'torch'" in result.error.message


def test_a_lost_node_sends_its_experiments_elsewhere():
    s = Scheduler([exp(0), exp(1)])
    s.observe_nodes([node("a", 1, 1), node("b", 1, 1)])
    starts = s.plan(0).start
    ready_all(s, starts)
    dispatched = {d.worker_id: d.experiment for d in s.plan(0).dispatch}
    on_b = next(st.worker_id for st in starts if st.node_id == "b")
    s.observe_nodes([node("a", 1, 1)])
    assert s.died(on_b, CRASH, now=1) is None
    on_a = next(st.worker_id for st in starts if st.node_id == "a")
    s.finished(on_a, ok(dispatched[on_a]))
    plan = s.plan(2)
    assert plan.start == [] and [d.worker_id for d in plan.dispatch] == [on_a]
    assert plan.dispatch[0].experiment == dispatched[on_b]


NODE_DIED = ErrorInfo(type="ray.exceptions.ActorDiedError", message="The actor died because its node has died.")


def test_a_worker_that_asks_to_retire_is_replaced_and_its_result_stands():
    s = Scheduler([exp(0), exp(1), exp(2)])
    s.observe_nodes([node("a", 1, 1)])
    (start,) = s.plan(0).start
    ready_all(s, [start])
    (first,) = s.plan(1).dispatch
    s.finished(first.worker_id, ok(first.experiment))
    (second,) = s.plan(2).dispatch
    assert second.worker_id == start.worker_id  # the same worker goes on
    kept = s.finished(second.worker_id, ok(second.experiment), retire="ran 2 experiments (max_experiments=2)")
    assert kept.status == "ok" and kept.attempts == 1
    assert start.worker_id not in s.workers
    plan = s.plan(3)
    assert plan.dispatch == [] and len(plan.start) == 1 and plan.start[0].worker_id != start.worker_id
    ready_all(s, plan.start)
    (third,) = s.plan(4).dispatch
    assert third.experiment.seed == 2 and third.worker_id == plan.start[0].worker_id


def test_experiments_before_counts_what_the_worker_ran_in_its_own_process():
    s = Scheduler([exp(0), exp(1, compile={"cache": "cold"}, retries=0), exp(2, timeout_s=5)])
    s.observe_nodes([node("a", 1, 1)])
    ready_all(s, s.plan(0).start)
    (d,) = s.plan(0).dispatch
    s.finished(d.worker_id, ok(d.experiment))
    (cold,) = s.plan(1).dispatch
    final = s.died(cold.worker_id, CRASH, now=2, alive=True)  # its fresh process died: it ran nothing before
    assert final.worker.experiments_before == 0
    (d,) = s.plan(3).dispatch
    ((_, timed_out),) = s.expired(8)
    assert timed_out.status == "timeout" and timed_out.worker.experiments_before == 1


def test_a_worker_ray_cannot_place_is_a_failed_start_at_its_deadline():
    s = Scheduler([exp(0)], start_timeout_s=60)
    s.observe_nodes([node("a", 1, 1)])
    (start,) = s.plan(0).start
    assert s.next_deadline() == 60
    assert s.expired(59.9) == []
    assert s.expired(60) == [(start.worker_id, None)]  # killed by the runner; no result: nothing ran
    assert s.next_deadline() is None
    (again,) = s.plan(60).start  # another try
    assert again.worker_id != start.worker_id


def test_three_start_timeouts_of_a_shape_make_its_experiments_unschedulable_naming_the_resources():
    s = Scheduler([exp(0, device="cuda"), exp(1, device="cuda"), exp(2, device="cpu")], start_timeout_s=60)
    s.observe_nodes([node("abcdef0123", 2, 1)])
    now = 0.0
    for _ in range(3):
        starts = s.plan(now).start
        assert [st.gpus for st in starts] == [1]  # the CPU worker waits for the node's every core
        now += 60
        assert [result for _, result in s.expired(now)] == [None]
    plan = s.plan(now)
    assert [(r.seed, r.status, r.attempts) for r in plan.results] == [(0, "unschedulable", 0), (1, "unschedulable", 0)]
    assert plan.results[0].error.message == (
        "workers holding 1 GPU and 2 CPUs could not start on the nodes that fit (node abcdef01: WorkerStartTimeout: "
        "Ray did not place and start a worker holding 1 GPU and 2 CPUs on node abcdef01 within 60 s "
        "(3 failed starts in a row))"
    )
    assert [(st.gpus, st.cpus) for st in plan.start] == [(0, 2)]  # another shape still starts there


def test_with_a_pending_timeout_start_failures_wait_for_a_node_that_fits():
    s = Scheduler([exp(0)], pending_timeout_s=300, start_timeout_s=60)
    s.observe_nodes([node("a", 1, 1)])
    now = 0.0
    for _ in range(3):
        assert len(s.plan(now).start) == 1
        now += 60
        s.expired(now)
    assert s.plan(now).results == [] and s.plan(now).start == []  # waits, starts no more on that node
    s.observe_nodes([node("a", 1, 1), node("b", 1, 1)])  # a node that fits joins in time
    (start,) = s.plan(now + 10).start
    assert start.node_id == "b"
    assert s.plan(now + 300).results == []


def test_a_lost_node_spends_no_retry_and_takes_no_worker_until_ray_lets_it_go():
    s = Scheduler([exp(0, retries=0)])
    s.observe_nodes([node("a", 1, 1)])
    (start,) = s.plan(0).start
    ready_all(s, [start])
    (d,) = s.plan(1).dispatch
    assert s.died(d.worker_id, NODE_DIED, now=2, node_lost=True) is None  # back in the queue, retries=0 or not
    s.observe_nodes([node("a", 1, 1)])  # Ray still lists the dying node as alive
    plan = s.plan(3)
    assert plan.start == [] and plan.results == []  # no worker on it: a retry there would die with it
    s.observe_nodes([node("b", 1, 1)])  # Ray marked it dead; another node joined
    (retry_start,) = s.plan(4).start
    assert retry_start.node_id == "b"
    ready_all(s, [retry_start])
    (retry,) = s.plan(5).dispatch
    result = s.finished(retry.worker_id, ok(retry.experiment))
    assert (result.status, result.attempts, result.lost_nodes) == ("ok", 2, 1)
    s.observe_nodes([node("a", 1, 1), node("b", 1, 1)])  # the node came back: usable again
    assert "a" in s.nodes and not s.lost


def test_an_idle_worker_on_a_node_lost_under_another_takes_no_run():
    """Two workers on one node: one dies with the node while the other, idle, has not been heard from yet. The
    run sent back waits for a worker elsewhere; given to the idle one it would be lost a second time."""
    s = Scheduler([exp(0, retries=0), exp(1, retries=0)])
    s.observe_nodes([node("a", 2, 2)])
    starts = s.plan(0).start
    ready_all(s, starts)
    first, second = s.plan(1).dispatch
    s.finished(second.worker_id, ok(second.experiment))  # the second worker is idle, on the doomed node
    assert s.died(first.worker_id, NODE_DIED, now=2, node_lost=True) is None  # back in the queue
    plan = s.plan(3)
    assert plan.dispatch == [] and plan.start == []  # not to the idle worker there, and no new one there
    s.died(second.worker_id, NODE_DIED, now=4, node_lost=True)  # its death, seen: it had no run
    s.observe_nodes([node("b", 2, 2)])
    (retry_start,) = s.plan(5).start
    ready_all(s, [retry_start])
    (retry,) = s.plan(6).dispatch
    result = s.finished(retry.worker_id, ok(retry.experiment))
    assert (result.status, result.attempts, result.lost_nodes) == ("ok", 2, 1)


def test_node_losses_past_the_allowance_are_charged():
    s = Scheduler([exp(0, retries=0)])
    names = [f"n{i}" for i in range(MAX_NODE_LOSSES + 1)]
    for i, name in enumerate(names):
        s.observe_nodes([node(name, 1, 1)])
        (start,) = s.plan(i).start
        ready_all(s, [start])
        (d,) = s.plan(i).dispatch
        final = s.died(d.worker_id, NODE_DIED, now=i + 0.5, node_lost=True)
    assert final is not None and final.status == "crashed"
    assert (final.attempts, final.lost_nodes) == (MAX_NODE_LOSSES + 1, MAX_NODE_LOSSES + 1)


def test_a_worker_starting_on_a_lost_node_is_not_a_failed_start():
    s = Scheduler([exp(0)])
    for i in range(3):
        s.observe_nodes([node("a", 1, 1)])  # (back) alive
        (start,) = s.plan(i).start
        s.died(start.worker_id, NODE_DIED, now=i, node_lost=True)
        s.observe_nodes([])  # Ray marked it dead
    assert s.broken == {}
    s.observe_nodes([node("a", 1, 1)])
    assert len(s.plan(4).start) == 1


def test_replicates_are_queued_replicate_by_replicate():
    a, b = exp(0, replicates=3), exp(1)
    assert [(r.experiment.seed, r.replicate) for r in runs_of([a, b])] == [(0, 0), (1, 0), (0, 1), (0, 2)]
    assert runs_of([Run(a, 2)]) == [Run(a, 2)]  # a resumed sweep's remaining runs stay as given


def test_replicates_go_to_different_gpus_of_the_model_when_they_are_free():
    s = Scheduler([exp(0, replicates=3)])
    s.observe_nodes([node("a", 8, 2, "H100"), node("b", 8, 2, "H100")])
    plan = s.plan(0)
    ready_all(s, plan.start)
    gpu_of = {st.worker_id: (st.node_id, st.worker_id) for st in plan.start}
    dispatched = s.plan(1).dispatch
    assert [d.replicate for d in dispatched] == [0, 1, 2]
    assert len({gpu_of[d.worker_id] for d in dispatched}) == 3  # three GPUs, none shared
    results = [s.finished(d.worker_id, ok(d.experiment)) for d in dispatched]
    assert [r.replicate for r in results] == [0, 1, 2] and {r.experiment_id for r in results} == {exp(0).id}


def test_a_replicate_with_no_other_gpu_free_runs_on_a_fresh_worker_of_the_same_gpu():
    s = Scheduler([exp(0, replicates=3), exp(1)])
    s.observe_nodes([node("a", 4, 1, "H100")])
    plan = s.plan(0)
    ready_all(s, plan.start)
    (first,) = s.plan(1).dispatch
    assert (first.experiment.seed, first.replicate) == (0, 0)
    s.finished(first.worker_id, ok(first.experiment))
    (second,) = s.plan(2).dispatch
    assert (second.experiment.seed, second.worker_id) == (1, first.worker_id)  # a run new to this GPU goes first
    s.finished(second.worker_id, ok(second.experiment))
    workers = {first.worker_id}
    for now, replicate in ((3, 1), (5, 2)):
        replaced = s.plan(now)
        assert replaced.dispatch == [] and replaced.retire == [max(workers)]  # only runs it has run: retired
        (start,) = replaced.start  # ... and a fresh worker starts on the same GPU
        assert start.node_id == "a" and start.worker_id not in workers
        workers.add(start.worker_id)
        s.worker_ready(start.worker_id, "h", 2000 + now, ["0"])
        (again,) = s.plan(now + 1).dispatch
        assert (again.worker_id, again.experiment.seed, again.replicate) == (start.worker_id, 0, replicate)
        assert s.workers[again.worker_id].experiments_before == 0
        assert s.finished(again.worker_id, ok(again.experiment)).replicate == replicate
    assert s.done


def test_a_worker_on_another_gpu_that_becomes_ready_takes_the_replicate():
    s = Scheduler([exp(0, replicates=2)])
    s.observe_nodes([node("a", 8, 2, "H100")])
    plan = s.plan(0)
    s.worker_ready(plan.start[0].worker_id, "h", 1, ["0"])
    (first,) = s.plan(1).dispatch
    s.finished(first.worker_id, ok(first.experiment))
    s.worker_ready(plan.start[1].worker_id, "h", 2, ["1"])
    later = s.plan(2)
    (second,) = later.dispatch
    assert second.worker_id == plan.start[1].worker_id and later.retire == []  # GPU 1's worker; GPU 0's stays


def probe(gpu: str, scale: float = 1.0) -> Calibration:
    figures = {"fp32_tflops": 19.5 * scale, "bf16_tflops": 700.0 * scale, "copy_gbps": 3000.0 * scale}
    return Calibration(id=f"a/gpu{gpu}", hostname="h", device="cuda", gpu_id=gpu, model="H100", figures=figures)


def calibrated_fleet(exclude_slow: bool) -> tuple[Scheduler, list[Start]]:
    s = Scheduler([exp(i) for i in range(6)], exclude_slow=exclude_slow)
    s.observe_nodes([node("a", 12, 3, "H100")])
    starts = s.plan(0).start
    for st, scale in zip(starts, (1.0, 0.9, 1.0), strict=True):  # the second GPU's probe is 10% slow
        s.worker_ready(st.worker_id, "h", 1000 + st.worker_id, [str(st.worker_id)], probe(str(st.worker_id), scale))
    return s, starts


def test_with_exclude_slow_a_slow_device_runs_nothing_and_keeps_its_gpu():
    s, starts = calibrated_fleet(exclude_slow=True)
    slow = starts[1].worker_id
    assert s.workers[slow].excluded.startswith("slow device: fp32_tflops 17.6 is 10.0% below the H100 median 19.5")
    now = 1
    while not s.done:
        plan = s.plan(now)
        assert plan.start == [] and plan.retire == []  # no worker replaces it: it still holds its GPU
        assert all(d.worker_id != slow for d in plan.dispatch)
        for d in plan.dispatch:
            s.finished(d.worker_id, ok(d.experiment))
        now += 1
    assert slow in s.workers and s.workers[slow].experiments == 0


def test_without_exclude_slow_every_device_runs_and_the_probes_are_kept():
    s, starts = calibrated_fleet(exclude_slow=False)
    dispatched = s.plan(1).dispatch
    assert sorted(d.worker_id for d in dispatched) == sorted(st.worker_id for st in starts)
    assert not any(w.excluded for w in s.workers.values())
    assert sorted(s.calibrations) == ["a/gpu0", "a/gpu1", "a/gpu2"]
