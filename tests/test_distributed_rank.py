"""The worker side of distributed experiments: a gang of two ``RankWorker`` processes over gloo on the CPU,
without Ray, and ``combine`` on outcomes made up here.

One gang (two spawned processes, one core each) runs three experiments in turn, as a long-lived gang
does: a target that raises on rank 1 while it is built, then DDP and FSDP2 (per block) training of a
tiny GPT, eager against ``aot_eager``; the gang survives the fault. ``compile.cache: cold`` skips the
priming compile: one compile per experiment is enough to check what a rank measures.
"""

from __future__ import annotations

import multiprocessing
import queue
import re
from typing import Any

import pytest

from tasks.distributed import RankOutcome, combine
from tasks.distributed.batch import BatchError, rank_params
from tasks.models import Experiment

GPT = {"batch": 4, "seq": 16, "layers": 2, "dim": 32, "heads": 2, "vocab": 64}  # tiny: the ranks take 2 each
TRAIN = {"phase": "training", "optimizer": "sgd", "timing": {"warmup": 1, "repeats": 3}}
COMPILED = {"backend": "aot_eager", "cache": "cold"}
GANG_WAIT_S = 300  # generous: the machine may be loaded; the test asserts no time


def experiment(**fields: Any) -> Experiment:
    return Experiment.model_validate({**TRAIN, **fields})


FAULT = experiment(
    target="tests.fault_targets:make_raise_on_rank", distributed={"strategy": "ddp", "world_size": 2}, compile=COMPILED
)
DDP = experiment(target="models.gpt", params=GPT, distributed={"strategy": "ddp", "world_size": 2}, compile=COMPILED)
FSDP2 = experiment(
    target="models.gpt", params=GPT, distributed={"strategy": "fsdp2", "world_size": 2}, compile=COMPILED
)


def _rank_main(rank: int, port: int, payloads: list[dict[str, Any]], out: Any) -> None:
    """One rank of the gang: join, run each payload in turn, leave; each outcome onto ``out``."""
    from tasks.distributed import RankWorker

    worker = RankWorker({"cpus": 1}, rank, 2)
    worker.join("127.0.0.1", port, timeout_s=120)
    for i, payload in enumerate(payloads):
        out.put((i, rank, worker.run(payload)))
    worker.leave()


@pytest.fixture(scope="module")
def gang_results() -> dict[str, Any]:
    """The three experiments on one gang of two spawned ranks; each one's outcomes and combined result."""
    from tasks.distributed.group import free_port

    exps = [FAULT, DDP, FSDP2]
    payloads = [e.model_dump(mode="json") for e in exps]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, port, payloads, out), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    got: dict[tuple[int, int], dict[str, Any]] = {}
    try:
        while len(got) < 2 * len(exps):
            i, rank, outcome = out.get(timeout=GANG_WAIT_S)
            got[(i, rank)] = outcome
    except queue.Empty:
        pass
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    names = ["fault", "ddp", "fsdp2"]
    return {
        name: {
            "outcomes": [got.get((i, r)) for r in range(2)],
            "result": combine(e, [got[(i, r)] for r in range(2) if (i, r) in got], 0.0, 1.0),
        }
        for i, (name, e) in enumerate(zip(names, exps, strict=True))
    }


@pytest.mark.parametrize("name", ["ddp", "fsdp2"])
def test_two_ranks_train_eager_and_compiled_and_agree(gang_results, name):
    result = gang_results[name]["result"]
    assert result.status == "ok", result.error
    assert result.correct is True and result.check is not None
    assert {"loss", "gradients", "parameters"} <= set(result.check.compared)
    dist = result.distributed
    assert dist.world_size == 2 and dist.backend == "gloo" and dist.failed_rank is None
    assert dist.global_batch == GPT["batch"] and dist.throughput_unit == "tokens/s"
    assert set(dist.throughput) == {"eager", "compiled"}
    assert [f.rank for f in dist.ranks] == [0, 1]
    for f in dist.ranks:
        assert f.eager is not None and f.compiled is not None
        assert len(f.eager.samples_ms) == len(result.eager.samples_ms)  # one plan for every rank
        assert f.compile_latency_s is not None and f.compile_latency_s > 0
        assert f.loss["eager"] == pytest.approx(f.loss["compiled"], rel=1e-3)
        assert f.graph_count == 1 and f.graph_breaks == 0 and f.graphs_compiled
        assert f.collective_ms is not None and f.collective_ms["eager"] > 0 and f.collective_ms["compiled"] > 0
    assert (dist.ranks[0].ddp_splits is not None) == (name == "ddp")
    slowest = [max(step) for step in zip(*(f.eager.samples_ms for f in dist.ranks), strict=True)]
    assert result.eager.samples_ms == slowest
    assert result.compile_latency_s == max(f.compile_latency_s for f in dist.ranks)
    assert dist.disagreements == []


def test_a_rank_whose_target_raises_is_the_failed_rank_and_the_gang_lives_on(gang_results):
    fault = gang_results["fault"]
    result = fault["result"]
    assert result.status == "runtime_error"
    assert result.distributed.failed_rank == 1
    assert "fails on rank 1" in result.error.message
    rank0, rank1 = (RankOutcome.model_validate(o) for o in fault["outcomes"])
    assert rank0.peer_failure and "rank 1 failed while building the target" in rank0.error.message
    assert not rank1.peer_failure
    assert rank0.group_ok and rank1.group_ok  # stopped where the ranks agree: no collective broke
    assert gang_results["ddp"]["result"].status == "ok"  # the next experiment on the same gang


# ------------------------------------------------------------------ the spec block


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"strategy": "fsdp2", "bucket_cap_mb": 5}, "bucket_cap_mb is an option of strategy ddp, not of fsdp2"),
        ({"strategy": "ddp", "compiled_autograd": True}, "optimize_ddp 'python_reducer' and compiled_autograd: true"),
        ({"strategy": "ddp", "optimize_ddp": "python_reducer"}, "optimize_ddp 'python_reducer' and compiled_autograd"),
    ],
)
def test_options_that_cannot_go_together_are_one_line_errors(block, message):
    from pydantic import ValidationError

    from tasks.models import DistributedConfig

    with pytest.raises(ValidationError, match=re.escape(message)):
        DistributedConfig.model_validate({"world_size": 2, **block})


# ------------------------------------------------------------------ each rank's batch


def test_a_global_batch_is_shared_out_and_must_divide():
    assert rank_params(DDP, 2)["batch"] == GPT["batch"] // 2
    per_rank = experiment(
        target="models.gpt", params=GPT, distributed={"strategy": "ddp", "world_size": 2, "batch": "per_rank"}
    )
    assert rank_params(per_rank, 2)["batch"] == GPT["batch"]
    with pytest.raises(BatchError, match=r"params\.batch 4 does not divide among world_size 3 ranks"):
        rank_params(DDP, 3)
    no_batch = experiment(target="seed.foo", distributed={"strategy": "ddp", "world_size": 2})
    with pytest.raises(BatchError, match=r"target 'seed\.foo' has none"):
        rank_params(no_batch, 2)


def test_the_built_in_targets_name_their_blocks():
    import torch

    from tasks.distributed.wrap import block_classes, find_blocks
    from tasks.targets import build

    gpt = build("models.gpt", torch.device("cpu"), GPT).fn
    assert [name for _, name, _ in find_blocks(gpt, block_classes(gpt))] == ["0", "1"]
    layer = build("blocks.transformer_layer", torch.device("cpu"), {"dim": 32, "heads": 2, "seq": 8}).fn
    assert [name for _, name, _ in find_blocks(layer, block_classes(layer))] == ["attn", "mlp"]

    def factory(device):  # a user target's factory naming its block class
        return None

    factory.fsdp_blocks = ("Linear",)  # type: ignore[attr-defined]
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 2)))
    assert [name for _, name, _ in find_blocks(model, block_classes(model, factory))] == ["0", "1"]
    assert block_classes(model) == ()


# ------------------------------------------------------------------ combine, on outcomes made up here


def side(samples: list[float], first: float = 100.0) -> dict[str, Any]:
    return {"first_call_ms": first, "samples_ms": samples, "warmup": 1, "median_ms": 0.0, "min_ms": 0.0,
            "mean_ms": 0.0, "iqr_ms": 0.0, "n": len(samples), "noisy": False}  # fmt: skip


def outcome(rank: int, **over: Any) -> dict[str, Any]:
    figures = {
        "rank": rank,
        "eager": side([10.0, 12.0, 11.0]),
        "compiled": side([5.0, 6.0, 5.0]),
        "compile_latency_s": 2.0 + rank,
        "graphs_compiled": 1,
        "graph_count": 1,
        "graph_breaks": 0,
        "ddp_splits": 2,
        **over.pop("figures", {}),
    }
    base = {"rank": rank, "status": "ok", "backend": "gloo", "device": "cpu", "samples": 2, "tokens": 32,
            "figures": figures, "check": {"correct": True}}  # fmt: skip
    return {**base, **over}


def test_combine_takes_the_slowest_rank_at_each_step():
    slow = outcome(1, figures={"eager": side([9.0, 14.0, 10.0], first=300.0)})
    result = combine(DDP, [outcome(0), slow], 1.0, 2.0)
    assert result.status == "ok" and result.correct is True
    assert result.eager.samples_ms == [10.0, 14.0, 11.0] and result.eager.median_ms == 11.0
    assert result.eager.first_call_ms == 300.0
    assert result.speedup == pytest.approx(11.0 / 5.0)
    assert result.compile_latency_s == 3.0
    assert result.distributed.throughput == {"eager": pytest.approx(64 / 0.011), "compiled": pytest.approx(64 / 0.005)}
    assert result.distributed.throughput_unit == "tokens/s" and result.distributed.global_batch == 4


def test_combine_blames_the_rank_that_failed_on_its_own():
    peer = outcome(0, status="runtime_error", peer_failure=True, error={"type": "PeerFailed", "message": "rank 1 ..."})
    own = outcome(1, status="oom", error={"type": "torch.OutOfMemoryError", "message": "out of memory"})
    result = combine(DDP, [peer, own], 1.0, 2.0)
    assert (result.status, result.error.message, result.distributed.failed_rank) == ("oom", "out of memory", 1)
    assert result.correct is None


def test_combine_counts_a_rank_without_an_outcome_as_crashed():
    result = combine(DDP, [outcome(0)], 1.0, 2.0)
    assert result.status == "crashed" and result.distributed.failed_rank == 1
    assert "no outcome came back" in result.error.message
    assert result.eager is None


def test_combine_flags_ranks_that_disagree_and_a_rank_that_is_wrong():
    odd = outcome(1, figures={"graphs_compiled": 3, "recompiles": 1}, check={"correct": False, "mismatch": "loss"})
    result = combine(DDP, [outcome(0), odd], 1.0, 2.0)
    assert result.status == "incorrect" and result.correct is False and result.error.message == "loss"
    assert result.recompiled
    assert result.distributed.disagreements == [
        "graphs compiled differ: rank 0: 1, rank 1: 3",
        "recompiled inside the timed window on rank(s) 1 only",
    ]


def test_a_bf16_leaf_that_agrees_as_a_whole_passes_by_cosine_unless_eager_alone_is_asked():
    """Logits in bf16 near zero differ between eager and compiled by several of their own ULPs (seen on an
    H200: 0.023 where eager read 5e-7); with no float64 copy, the harness's rule is allclose, else cosine."""
    import torch

    from tasks.check.outputs import Observed
    from tasks.distributed.step import judge

    eager = torch.linspace(-4, 4, 4096).to(torch.bfloat16)
    compiled = eager.clone()
    compiled[2048] += 0.0234  # the element nearest zero
    exp = Experiment(
        target="models.gpt", phase="training", precision="bf16", distributed={"strategy": "ddp", "world_size": 1}
    )
    by_default = judge(exp, Observed({"outputs": compiled}), Observed({"outputs": eager}))
    assert by_default.correct is True and by_default.info.method == "cosine"
    strict = exp.model_copy(update={"check": exp.check.model_copy(update={"reference": "eager"})})
    alone = judge(strict, Observed({"outputs": compiled}), Observed({"outputs": eager}))
    assert alone.correct is False and "beyond rtol=0.01" in alone.mismatch
