"""A distributed experiment against the cluster it is about to run on, and the spec's distributed block: one
line naming the field for a world size no node can hold, the block in the schema, its world size swept."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from orchestrator import api
from orchestrator.cli import app
from orchestrator.machines.nodes import Node
from orchestrator.plan.cluster_fit import check_fits, world_size_problem
from orchestrator.plan.spec import SpecError, load_spec
from tasks.models import Experiment
from tests.conftest import RAY_GPUS


def node(cpus: int, gpus: int = 0, model: str | None = None) -> Node:
    return Node(
        node_id=f"n{cpus}-{gpus}", hostname="h", address="", cpus=cpus, gpus=gpus, gpu_models=[model] if model else []
    )


def ddp(world_size: int, **kw) -> Experiment:
    return Experiment(
        target="seed.foo", phase="training", distributed={"strategy": "ddp", "world_size": world_size}, **kw
    )


def test_a_world_size_beyond_the_largest_nodes_gpus_names_the_field():
    nodes = [node(8, 2), node(16, 4)]
    assert world_size_problem(ddp(4), nodes) is None
    assert world_size_problem(ddp(8), nodes) == (
        "distributed.world_size: 8 ranks need 8 GPU(s) on one node (1 per rank); the largest node has 4"
    )
    assert world_size_problem(ddp(2, gpu_model="H100"), [node(8, 8, "A100"), node(8, 1, "H100")]) == (
        "distributed.world_size: 2 ranks need 2 H100 GPU(s) on one node (1 per rank); the largest node has 1"
    )
    assert world_size_problem(Experiment(target="seed.foo"), nodes) is None


def test_on_a_cpu_cluster_a_rank_is_a_core_set_so_two_ranks_fit_two_cores():
    two_cores = [node(2)]
    assert world_size_problem(ddp(2), two_cores) is None  # device auto, no GPU: a core each
    assert world_size_problem(ddp(2, device="cpu", resources={"cpus": 2}), two_cores) == (
        "distributed.world_size: 2 ranks need 2 CPU workers on one node (a core set of 2 core(s) per rank); "
        "the largest node has 2 core(s): 1 CPU worker(s)"
    )
    with pytest.raises(SpecError, match=r"^x: experiment seed.foo \(ddp x3, id [0-9a-f]+\): distributed.world_size"):
        check_fits("x", [ddp(2), ddp(3)], two_cores)


def test_a_rank_holds_one_gpu(write_spec):
    spec = write_spec(
        """
        name: x
        defaults: {phase: training}
        experiments:
          - target: seed.foo
            distributed: {strategy: ddp, world_size: 2}
            resources: {gpus: 2}
        """
    )
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert (
        str(e.value)
        == "spec.yaml: experiments[0].resources.gpus: a rank of a distributed experiment holds one GPU (got 2)"
    )


def test_world_size_is_swept_like_any_field_and_the_schema_knows_it(write_spec):
    spec = write_spec(
        """
        name: x
        defaults: {phase: training}
        experiments:
          - target: seed.foo
            distributed: {strategy: fsdp2, world_size: 1, compile_per: block}
            sweep: {distributed.world_size: [1, 2, 4]}
        """
    )
    loaded = load_spec(spec)
    assert [e.distributed.world_size for e in loaded.experiments] == [1, 2, 4]
    assert len({e.id for e in loaded.experiments}) == 3
    schema = json.loads(CliRunner().invoke(app, ["schema"]).output)
    sweep = schema["$defs"]["ExperimentEntry"]["properties"]["sweep"]["properties"]
    assert {"distributed.world_size", "distributed.strategy", "distributed.optimize_ddp"} <= set(sweep)
    assert schema["$defs"]["DistributedConfig"]["examples"][0] == {"strategy": "ddp", "world_size": 2}


def test_run_refuses_a_gang_no_node_of_a_fixed_cluster_holds_before_anything_runs(ray_cluster, write_spec, tmp_path):
    spec = write_spec(
        """
        name: x
        defaults: {phase: training, device: cuda}
        experiments:
          - target: seed.foo
            distributed: {strategy: ddp, world_size: 8}
        """
    )
    with pytest.raises(
        SpecError,
        match=re.escape(
            f"distributed.world_size: 8 ranks need 8 GPU(s) on one node (1 per rank); the largest node has {RAY_GPUS}"
        ),
    ):
        api.run(spec, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()
