"""What a result records to be reproduced: versions, inductor settings, resources asked for."""

from __future__ import annotations

import json

import torch
import torch._inductor
import torch._inductor.config as inductor_config

from tasks.metadata import git_commit, inductor_options, result_metadata, versions
from tasks.models import CompileConfig, Experiment
from tasks.procedure import run_experiment


def test_versions_name_the_software_and_are_read_once_per_process():
    found = versions()
    assert found["torch"] == torch.__version__
    assert found["python"].count(".") == 2
    assert "compilebench" in found  # installed with pip install -e .
    assert found["git"].split("-")[0] == git_commit().split("-")[0] and len(found["git"].split("-")[0]) == 40
    assert versions() is found  # cached
    if torch.version.cuda is None:
        assert "cuda" not in found  # a CPU build names no CUDA


def test_inductor_options_are_the_settings_that_differ_from_defaults():
    assert inductor_options(CompileConfig(backend="eager", options={"a": 1})) == {}  # inductor is not used
    plain = inductor_options(CompileConfig())
    assert "max_autotune" not in plain
    with inductor_config.patch(max_autotune_gemm=True):
        assert inductor_options(CompileConfig())["max_autotune_gemm"] is True  # changed in this process
    explicit = inductor_options(CompileConfig(options={"triton.cudagraphs": True}))
    assert explicit["triton.cudagraphs"] is True
    mode = inductor_options(CompileConfig(mode="reduce-overhead"))
    assert mode["triton.cudagraphs"] is True  # what the mode turns on
    json.dumps(mode)  # plain data, whatever inductor holds


def test_every_result_records_versions_options_and_what_it_asked_for():
    exp = Experiment(
        target="seed.foo",
        params={"shape": [4]},
        device="cpu",
        compile={"backend": "inductor", "options": {"max_autotune": False}},
        timing={"warmup": 0, "repeats": 1},
        resources={"cpus": 1},
    )
    r = run_experiment(exp)
    assert r.status == "ok", r.error
    assert r.requested == exp.resources
    assert r.inductor_options["max_autotune"] is False
    assert r.worker.versions["torch"] == torch.__version__
    assert result_metadata(exp)["requested"].cpus == 1


def test_settings_a_compile_patched_and_restored_are_not_reported():
    import torch

    before = inductor_options(CompileConfig())
    compiled = torch.compile(lambda x: x.sin() + 1)
    compiled(torch.randn(8))
    assert inductor_options(CompileConfig()) == before  # inductor patches e.g. comprehensive_padding and restores it
