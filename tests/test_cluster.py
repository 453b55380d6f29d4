"""Joining clusters without leaking settings, shipping user code, describing nodes, several GPU models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.api import default_working_dir, expand_all_gpu_models
from orchestrator.execution.cluster import (
    FAIL_FAST_ENV,
    WORKING_DIR_EXCLUDES,
    ClusterError,
    ClusterInfo,
    describe,
    environment,
    version_warnings,
    with_versions,
    working_dir_env,
)
from orchestrator.machines.nodes import Node
from orchestrator.plan.spec import SpecError, load_spec
from tasks.models import CompileConfig, Result, TimingConfig, WorkerInfo

from .conftest import multinode_cluster

ROOT = Path(__file__).resolve().parents[1]


def node(node_id: str, models: list[str] | None = None, gpus: int = 1) -> Node:
    return Node(node_id=node_id, hostname=f"host-{node_id}", address="", cpus=8, gpus=gpus, gpu_models=models or [])


def result(experiment_id: str, node_id: str, versions: dict[str, str], gpu_model: str | None = None) -> Result:
    return Result(
        experiment_id=experiment_id,
        target="seed.foo",
        params={},
        device="cuda",
        compile=CompileConfig(),
        timing=TimingConfig(),
        seed=0,
        status="ok",
        started_at=1.0,
        finished_at=2.0,
        worker=WorkerInfo(
            hostname=f"host-{node_id}", node_id=node_id, pid=1, threads=1, gpu_model=gpu_model, versions=versions
        ),
    )


# -- the connect-timeout settings stay out of every process but the driver joining an address


def test_connect_settings_reach_no_local_worker(ray_cluster):
    import ray

    @ray.remote(num_cpus=1)
    def seen() -> dict[str, str]:
        return {k: os.environ[k] for k in FAIL_FAST_ENV if k in os.environ}

    assert {k: v for k, v in FAIL_FAST_ENV.items() if os.environ.get(k) == v} == {}  # not set at import
    assert ray.get(seen.remote()) == {}


def test_connect_settings_are_set_while_joining_an_address_and_restored_after():
    script = """
import json, os
from ray._private import ray_constants
from orchestrator.execution.cluster import FAIL_FAST_ENV, fail_fast_connect
import ray
before = {k: os.environ.get(k) for k in FAIL_FAST_ENV}
with fail_fast_connect():
    inside = {k: os.environ.get(k) for k in FAIL_FAST_ENV}
    retries = ray_constants.NUM_REDIS_GET_RETRIES
    timeout = ray._config.py_gcs_connect_timeout_s()
after = {k: os.environ.get(k) for k in FAIL_FAST_ENV}
print(json.dumps([before, inside, retries, timeout, after, ray_constants.NUM_REDIS_GET_RETRIES]))
"""
    env = {k: v for k, v in os.environ.items() if k not in FAIL_FAST_ENV}
    env["RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S"] = "77"  # a user's own setting wins
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    before, inside, retries, timeout, after, retries_after = json.loads(proc.stdout)
    expected_before = {k: None for k in FAIL_FAST_ENV} | {"RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "77"}
    assert before == after == expected_before
    assert inside == FAIL_FAST_ENV | {"RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "77"}
    assert (retries, timeout) == (3, 5)  # Ray's own defaults: 20 retries, 30 s
    assert retries_after == 20


# -- user code travels with the job


def test_working_dir_ships_without_environments_caches_and_journals(tmp_path):
    env = working_dir_env(tmp_path)
    assert env["working_dir"] == str(tmp_path.resolve())
    assert {".venv/", ".git/", "__pycache__/", "*.journal.jsonl"} <= set(env["excludes"]) == set(WORKING_DIR_EXCLUDES)
    with pytest.raises(ClusterError, match="not a directory"):
        working_dir_env(tmp_path / "missing")


def test_working_dir_default_is_the_current_one_for_import_path_targets_on_a_cluster(write_spec, monkeypatch):
    user = load_spec(write_spec("name: u\nexperiments: [{target: 'tests.user_targets:make_scaled'}]\n"))
    builtin = load_spec(write_spec("name: b\nexperiments: [{target: seed.foo}]\n", "b.yaml"))
    assert default_working_dir(None, user, "auto") == Path.cwd()
    assert default_working_dir(None, user, None) is None  # local workers share the driver's directory
    assert default_working_dir(None, builtin, "auto") is None
    assert default_working_dir("elsewhere", builtin, None) == Path("elsewhere")
    job = {"runtime_env": {"working_dir": "gcs://_ray_pkg_abc.zip"}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))  # inside `ray job submit --working-dir .`
    assert default_working_dir(None, user, "auto") is None
    with pytest.raises(ClusterError, match="already ships a working directory"):
        working_dir_env(Path.cwd())


# -- the report's environment: every node, its models, its versions, and disagreements


def test_nodes_carry_the_versions_their_workers_reported_and_disagreements_warn():
    nodes = [node("a", ["H100"]), node("b", ["A10G"]), node("c")]
    results = [
        result("1", "a", {"torch": "2.13.0", "triton": "3.6.0", "cuda": "12.8"}),
        result("2", "b", {"torch": "2.12.0", "triton": "3.6.0"}),
        result("3", "b", {"torch": "2.12.0"}),
        result("4", "gone", {"torch": "2.13.0"}, gpu_model="L4"),  # a node of an earlier, resumed run
        result("5", "c", {}),  # a worker that reported nothing
    ]
    described = {n.node_id: n for n in with_versions(nodes, results)}
    assert described["a"].versions == {"torch": "2.13.0", "triton": "3.6.0"}
    assert described["b"].versions == {"torch": "2.12.0", "triton": "3.6.0"}
    assert described["c"].versions == {}
    assert (described["gone"].hostname, described["gone"].gpu_models) == ("host-gone", ["L4"])
    assert version_warnings(list(described.values())) == [
        "nodes disagree on the torch version, so their results may not compare: "
        "2.12.0 on host-b; 2.13.0 on host-a, host-gone"
    ]
    assert version_warnings(with_versions(nodes[:1], results[:1])) == []


def test_environment_lists_the_live_nodes_with_versions(ray_cluster):
    live = describe()  # the session's instance, as it is now
    local = live.nodes[0].node_id
    env = environment(live, [result("1", local, {"torch": "2.13.0", "triton": "3.6.0"})])
    assert [n.node_id for n in env.nodes] == [local]
    assert env.nodes[0].versions == {"torch": "2.13.0", "triton": "3.6.0"} and env.warnings == []


# -- several GPU models: the spec side and `all`


def test_gpu_models_expand_into_one_experiment_per_model(write_spec):
    spec = load_spec(
        write_spec(
            """
            name: models
            defaults: {gpu_models: [H100, A10G], compile: {backend: eager}}
            experiments:
              - target: seed.foo
                sweep: {seed: [1, 2]}
              - target: seed.outer
                gpu_models: [L4]
              - target: seed.bar
                gpu_models: all
            """
        )
    )
    assert [(e.target, e.seed, e.gpu_model) for e in spec.experiments] == [
        ("seed.foo", 1, "H100"),
        ("seed.foo", 1, "A10G"),
        ("seed.foo", 2, "H100"),
        ("seed.foo", 2, "A10G"),
        ("seed.outer", 0, "L4"),
        ("seed.bar", 0, "all"),
    ]
    assert len({e.id for e in spec.experiments}) == 6
    assert spec.source["defaults"]["gpu_models"] == ["H100", "A10G"]  # the spec as written


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ("H100", "must be a list of GPU model names"),
        ("[H100, 3]", "must be a list of GPU model names"),
        ("[]", "empty list (name at least one GPU model, or 'all')"),
        ("[H100, all]", "'all' stands alone (gpu_models: all), not in a list"),
        ("[H100, H100]", "H100 listed more than once"),
    ],
)
def test_bad_gpu_models_are_one_line(write_spec, models, message):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(f"name: x\nexperiments:\n  - target: seed.foo\n    gpu_models: {models}\n"))
    assert str(info.value).startswith("spec.yaml: experiments[0].gpu_models: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_gpu_models_on_a_cpu_experiment_or_beside_gpu_model_is_refused(write_spec):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec("name: x\nexperiments: [{target: seed.foo, device: cpu, gpu_models: [H100]}]\n"))
    assert str(info.value) == "spec.yaml: experiments[0].gpu_models: a CPU experiment runs on no GPU model"
    with pytest.raises(SpecError) as info:
        load_spec(write_spec("name: x\nexperiments: [{target: seed.foo, gpu_model: A, gpu_models: [H100]}]\n"))
    assert str(info.value) == "spec.yaml: experiments[0]: gpu_models and gpu_model name the same thing; keep one"


def test_validate_lists_all_as_every_gpu_model(write_spec):
    from typer.testing import CliRunner

    from orchestrator.cli import app

    spec = write_spec("name: x\nexperiments: [{target: seed.foo, gpu_models: all}, {target: seed.outer}]\n")
    out = CliRunner().invoke(app, ["validate", str(spec)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "auto on every GPU model" in out.output
    assert "valid, 2 experiments (1 run once on each GPU model of the cluster, counted once here)" in out.output


def test_all_expands_to_the_models_the_cluster_advertises(write_spec):
    spec = load_spec(
        write_spec("name: x\nexperiments: [{target: seed.foo, gpu_models: all}, {target: seed.foo, seed: 1}]\n")
    )
    two = ClusterInfo(address="auto", nodes=[node("a", ["H100"]), node("b", ["A10G"]), node("c", ["H100"])])
    experiments, notes = expand_all_gpu_models(spec.experiments, two)
    assert [(e.gpu_model, e.seed) for e in experiments] == [("A10G", 0), ("H100", 0), (None, 1)]
    assert notes == []
    explicit = load_spec(write_spec("name: y\nexperiments: [{target: seed.foo, gpu_models: [A10G]}]\n", "y.yaml"))
    assert [e.id for e in experiments if e.gpu_model == "A10G"] == [explicit.experiments[0].id]  # same experiment

    experiments, notes = expand_all_gpu_models(spec.experiments, ClusterInfo(address=None, nodes=[node("a")]))
    assert [(e.gpu_model, e.seed) for e in experiments] == [(None, 0), (None, 1)]
    assert notes and notes[0].startswith("gpu_models: all: no node advertises a GPU model")

    plain = load_spec(write_spec("name: z\nexperiments: [{target: seed.foo}, {target: seed.foo, gpu_models: all}]\n"))
    experiments, _ = expand_all_gpu_models(plain.experiments, ClusterInfo(address=None, nodes=[node("a")]))
    assert len(experiments) == 1  # `all` with no model named is the plain experiment: kept once


def test_all_runs_once_on_each_model_of_a_multinode_cluster(write_spec, tmp_path):
    """End to end through api.run: two GPU nodes of two models, a head that holds nothing."""
    from orchestrator import api

    spec = write_spec(
        """
        name: models
        defaults: {compile: {backend: eager}, timing: {warmup: 0, repeats: 1}, check: {enabled: false}}
        experiments:
          - target: tests.user_targets:make_scaled
            gpu_models: all
        """
    )
    nodes = [{"num_cpus": 1, "num_gpus": 1, "resources": {f"accelerator_type:{m}": 1}} for m in ("H100", "A10G")]
    with multinode_cluster(head_cpus=0, nodes=nodes):
        report = api.run(spec, tmp_path / "r.json")
    assert [(r.gpu_model, r.status) for r in report.results] == [("A10G", "ok"), ("H100", "ok")]
    assert all(r.worker and r.worker.gpu_model == r.gpu_model for r in report.results)
    assert all(r.measurement and r.measurement.niceness == 0 for r in report.results)  # the head's config reached both
    models = sorted(m for n in report.environment.nodes for m in n.gpu_models)
    assert models == ["A10G", "H100"] and len(report.environment.nodes) == 3
    assert report.complete and report.environment.warnings == []
