"""Gangs in the scheduling policy, on made-up nodes and events: their shape, their start and reuse, the
reservation that keeps small experiments from starving them, and their faults. No Ray, no torch, no clock."""

from __future__ import annotations

from orchestrator.execution.policy import Scheduler, Shape, shape_of, with_silent_ranks
from orchestrator.execution.policy.placement import why_unfit
from orchestrator.execution.policy.reservation import RESERVE_AFTER_S
from tasks.models import DistributedResult, ErrorInfo, Experiment, Result

from .test_policy import CRASH, exp, node, ok, ready_all


def gang(seed: int = 0, world_size: int = 2, **kw) -> Experiment:
    return exp(seed, phase="training", distributed={"strategy": "ddp", "world_size": world_size}, **kw)


def gang_ok(e: Experiment) -> Result:
    result = ok(e)
    assert e.distributed is not None
    result.distributed = DistributedResult(config=e.distributed, world_size=e.distributed.world_size, backend="gloo")
    return result


def finish_all(s: Scheduler, dispatches, make=ok) -> list[Result]:
    return [s.finished(d.worker_id, make(d.experiment)) for d in dispatches]


def test_a_gang_holds_a_gpu_or_a_core_set_per_rank_on_one_node():
    assert shape_of(gang(world_size=4), gpus_seen=True) == Shape(1, None, 4)
    assert shape_of(gang(device="cpu"), gpus_seen=True) == Shape(0, None, 2)
    gpu_node, two_cores = node("g", 32, 8, "H100"), node("c", 2)
    assert Shape(1, None, 4).cpus_on(gpu_node) == 16 and Shape(1, None, 4).cores_on(gpu_node) == 4
    assert Shape(1, None, 4).held_gpus == 4 and Shape(1, None, 4).fits(gpu_node)
    assert not Shape(1, None, 16).fits(gpu_node)
    cpu_gang = Shape(0, None, 2)  # on a 2-core machine world size 2 is one core per rank
    assert cpu_gang.fits(two_cores) and cpu_gang.cores_on(two_cores) == 1 and cpu_gang.cpus_on(two_cores) == 2
    assert not Shape(0, None, 3).fits(two_cores)
    assert Shape(1, None, 2).bundle("H100") == {"CPU": 2.0, "GPU": 2.0, "accelerator_type:H100": 0.001}


def test_a_gang_too_big_for_every_node_is_unschedulable_naming_world_size():
    s = Scheduler([gang(0, world_size=4), gang(1, world_size=9, device="cpu")])
    s.observe_nodes([node("a", 8, 2), node("b", 2, 1)])
    results = s.plan(0).results
    assert [r.status for r in results] == ["unschedulable"] * 2 and s.done
    assert [r.error.message for r in results] == [
        "distributed.world_size 4 needs 4 GPU(s) on one node, 1 per rank; the largest node has 2",
        "distributed.world_size 9 needs 9 CPU workers on one node (a core set of 1 core(s) per rank); "
        "the largest node has 8",
    ]
    assert [(r.distributed.world_size, r.distributed.backend) for r in results] == [(4, "nccl"), (9, "gloo")]


def test_one_gang_starts_for_a_world_size_and_runs_its_experiments_one_after_another():
    s = Scheduler([gang(0, timeout_s=100), gang(1, timeout_s=300), gang(2)])
    s.observe_nodes([node("a", 8, 4, "A100")])
    plan = s.plan(0)
    assert len(plan.start) == 2  # two gangs of 2 fit the 4 GPUs
    start = plan.start[0]
    assert (start.gpus, start.cpus, start.cores, start.ranks) == (1, 2.0, 2, 2)
    assert start.collective_timeout_s == 1800  # the longest timeout_s of the experiments it may run (default 1800)
    ready_all(s, plan.start)
    first = s.plan(1).dispatch
    assert len(first) == 2
    results = finish_all(s, first, gang_ok)
    assert [r.distributed.gang_id for r in results] == [f"gang-{d.worker_id}" for d in first]
    (third,) = s.plan(2).dispatch
    assert third.worker_id in {d.worker_id for d in first}  # the same gang, reused
    (result,) = finish_all(s, [third], gang_ok)
    assert result.distributed.gang_experiments_before == 1 and s.done


def test_small_experiments_never_starve_a_gang_a_node_is_reserved_and_drains():
    """On one node of 2 GPUs, a stream of 1-GPU experiments would keep the 2 slots busy forever: the gang's
    node is reserved after RESERVE_AFTER_S, its workers finish what they run and retire, the gang forms."""
    smalls = [exp(i) for i in range(50)]
    s = Scheduler([*smalls[:4], gang(100), *smalls[4:]])
    s.observe_nodes([node("a", 8, 2)])
    plan = s.plan(0)
    assert [st.ranks for st in plan.start] == [None, None]  # the small ones came first and took both GPUs
    ready_all(s, plan.start)
    now, gangs_started = 1.0, []
    running = s.plan(now).dispatch
    while not gangs_started and now < 10 * RESERVE_AFTER_S:
        now += 5.0
        finish_all(s, running)
        plan = s.plan(now)
        ready_all(s, plan.start)
        gangs_started = [st for st in plan.start if st.ranks == 2]
        running = plan.dispatch
    assert gangs_started, "the gang never started"
    assert RESERVE_AFTER_S <= now <= RESERVE_AFTER_S + 15  # reserved once it had waited; drained at once
    ready_all(s, gangs_started)
    (dispatched,) = s.plan(now + 1).dispatch
    assert dispatched.experiment.distributed is not None
    assert s.reserved == {}  # the gang exists: the reservation is over
    s.finished(dispatched.worker_id, gang_ok(dispatched.experiment))
    plan = s.plan(now + 2)  # the gang is idle and no gang work waits: it makes way for the small ones
    assert dispatched.worker_id in plan.retire and len(plan.start) == 2


def test_reserved_node_runs_nothing_new_of_other_shapes_while_the_gang_waits():
    s = Scheduler([exp(0), exp(1), gang(2), exp(3), exp(4)])
    s.observe_nodes([node("a", 8, 2), node("b", 8, 2)])
    plan = s.plan(0)
    ready_all(s, plan.start)
    busy = s.plan(1).dispatch  # 4 small workers on 2 nodes (the gang found no 2 free slots on one node)
    assert len(busy) == 4 and not [st for st in plan.start if st.ranks]
    plan = s.plan(RESERVE_AFTER_S + 1)
    assert next(iter(s.reserved.values()))[0].ranks == 2
    (reserved_node,) = s.reserved
    on_it = [d for d in busy if s.workers[d.worker_id].node.node_id == reserved_node]
    elsewhere = [d for d in busy if d not in on_it]
    finish_all(s, on_it)
    plan = s.plan(RESERVE_AFTER_S + 2)
    assert sorted(plan.retire) == sorted(d.worker_id for d in on_it)  # made way, took nothing new
    (gang_start,) = plan.start
    assert gang_start.ranks == 2 and gang_start.node_id == reserved_node
    finish_all(s, elsewhere)
    assert all(s.workers[d.worker_id].node.node_id != reserved_node for d in s.plan(RESERVE_AFTER_S + 3).dispatch)


def test_two_world_sizes_do_not_take_one_node_from_each_other():
    s = Scheduler([gang(0), gang(1), gang(2, world_size=4), gang(3)])
    s.reserve_after_s = 0
    s.observe_nodes([node("a", 8, 4)])
    plan = s.plan(0)
    assert [st.ranks for st in plan.start] == [2, 2]  # both fit at once; the 4-rank gang waits
    ready_all(s, plan.start)
    formed = []
    for now in range(1, 10):
        plan = s.plan(now)
        ready_all(s, plan.start)
        formed += [st.ranks for st in plan.start]
        finish_all(s, plan.dispatch, gang_ok)
    assert s.done and formed == [4]  # one gang of 4 once the 2-rank work was done, none rebuilt in between


def test_a_rank_that_dies_ends_the_gang_and_retries_without_charging_twice():
    e = gang(0, retries=1)
    s = Scheduler([e])
    s.observe_nodes([node("a", 8, 2)])
    ready_all(s, s.plan(0).start)
    (d,) = s.plan(1).dispatch
    assert s.died(d.worker_id, CRASH, now=2, rank=1) is None  # one retry left: back to the queue
    ready_all(s, s.plan(3).start)  # a new gang
    (d2,) = s.plan(4).dispatch
    final = s.died(d2.worker_id, CRASH, now=5, rank=0)
    assert final.status == "crashed" and final.attempts == 2
    assert final.distributed.failed_rank == 0 and final.distributed.ranks[0].error == CRASH
    assert final.distributed.world_size == 2 and final.distributed.backend == "nccl"


def test_a_gang_past_its_deadline_is_a_timeout_naming_the_ranks_that_did_not_answer():
    s = Scheduler([gang(0, timeout_s=10)])
    s.observe_nodes([node("a", 8, 2)])
    ready_all(s, s.plan(0).start)
    (d,) = s.plan(1).dispatch
    ((worker_id, result),) = s.expired(now=11)
    assert worker_id == d.worker_id
    result = with_silent_ranks(result, [1])
    assert result.status == "timeout" and result.error.message.endswith("; rank 1 had not answered")
    assert result.distributed.failed_rank == 1 and [r.rank for r in result.distributed.ranks] == [1]
    assert result.distributed.ranks[0].error == ErrorInfo(
        type="NoAnswer", message="no outcome when the deadline passed"
    )


def test_the_autoscaler_is_asked_for_a_whole_gang_in_one_bundle():
    s = Scheduler([gang(0, world_size=4, gpu_model="H100")], pending_timeout_s=60)
    s.observe_nodes([node("head", 0)])
    plan = s.plan(0)
    assert plan.results == [] and plan.bundles == [{"CPU": 4.0, "GPU": 4.0, "accelerator_type:H100": 0.001}]


def test_why_unfit_for_a_gang_on_a_cpu_cluster():
    need = (Shape(0, None, 3), None)
    assert why_unfit(need, {"c": node("c", 2)}, [], {}) == (
        "distributed.world_size 3 needs 3 CPU workers on one node (a core set of 1 core(s) per rank); "
        "the largest node has 2"
    )


def test_a_reserved_node_whose_gangs_never_start_is_given_up_for_another():
    s = Scheduler([exp(0), exp(1), exp(2), exp(3), gang(4)], start_timeout_s=10)
    s.observe_nodes([node("a", 8, 2), node("b", 8, 2)])
    ready_all(s, s.plan(0).start)
    busy = s.plan(1).dispatch
    assert len(busy) == 4
    s.plan(RESERVE_AFTER_S + 1)
    (first,) = s.reserved
    finish_all(s, [d for d in busy if s.workers[d.worker_id].node.node_id == first])
    now = RESERVE_AFTER_S + 2
    for _ in range(3):  # the gang is started on the reserved node and never becomes ready
        (start,) = [st for st in s.plan(now).start if st.ranks == 2]
        assert start.node_id == first
        now += 11
        assert [w for w, _ in s.expired(now)] == [start.worker_id]
    s.plan(now)
    assert (first, Shape(1, None, 2)) in s.broken and first not in s.reserved


def test_where_every_rank_is_silent_none_is_blamed():
    s = Scheduler([gang(0, timeout_s=10)])
    s.observe_nodes([node("a", 8, 2)])
    ready_all(s, s.plan(0).start)
    s.plan(1)
    ((_, result),) = s.expired(now=11)
    result = with_silent_ranks(result, [0, 1])
    assert result.error.message.endswith("; ranks 0, 1 had not answered") and result.distributed.failed_rank is None
    assert [r.rank for r in result.distributed.ranks] == [0, 1]
