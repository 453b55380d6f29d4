"""Sweep expansion and stable experiment ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.plan.spec import load_spec
from orchestrator.plan.sweep import deep_merge, expand, split_path
from tasks.models import CompileConfig, Experiment

ROOT = Path(__file__).resolve().parents[1]


def test_sweep_is_the_cartesian_product_in_spec_order(write_spec):
    spec = load_spec(
        write_spec(
            """
            name: x
            experiments:
              - target: seed.foo3
                params: {shape: [8, 8]}
                sweep:
                  compile.backend: [eager, aot_eager]
                  compile.fullgraph: [false, true]
                  params.shape: [[8, 8], [16, 16], [32]]
            """
        )
    )
    points = [(e.compile.backend, e.compile.fullgraph, tuple(e.params["shape"])) for e in spec.experiments]
    assert len(points) == 12
    assert points[:4] == [
        ("eager", False, (8, 8)),
        ("eager", False, (16, 16)),
        ("eager", False, (32,)),
        ("eager", True, (8, 8)),
    ]
    assert len(set(points)) == 12
    assert len({e.id for e in spec.experiments}) == 12


def test_defaults_fill_and_experiment_values_win(write_spec):
    spec = load_spec(
        write_spec(
            """
            name: x
            defaults:
              device: cpu
              compile: {backend: aot_eager, fullgraph: true}
              timing: {repeats: 7}
              seed: 5
            experiments:
              - target: seed.foo
              - target: seed.bar
                compile: {fullgraph: false}
                timing: {warmup: 1}
            """
        )
    )
    first, second = spec.experiments
    assert first.device == "cpu" and first.seed == 5
    assert first.compile == CompileConfig(backend="aot_eager", fullgraph=True)
    assert second.compile == CompileConfig(backend="aot_eager", fullgraph=False)  # own value wins, backend kept
    assert (second.timing.warmup, second.timing.repeats) == (1, 7)


def test_deep_merge_does_not_alias_its_inputs():
    base = {"compile": {"options": {"a": 1}}}
    merged = deep_merge(base, {"compile": {"mode": "max-autotune"}})
    merged["compile"]["options"]["a"] = 2
    assert base == {"compile": {"options": {"a": 1}}}


def test_expand_copies_each_swept_path_and_leaves_the_entry_as_it_was():
    """A point's mapping is the entry's, copied along the swept paths: the entry, the sweep's values and the other
    points never change through one point's mapping; what no path changes is shared (read only)."""
    entry = {"target": "seed.foo", "compile": {"backend": "inductor", "options": {"a": 1}}, "timing": {"warmup": 2}}
    # two paths under compile: one copy of it a point, holding both values
    sweep = {"compile.mode": ["default", "lite"], "params.shape": [[8, 8], [16, 16]], "compile.fullgraph": [True]}
    before = deep_merge({}, entry)
    points = [data for _, data in expand(entry, sweep)]
    assert [(d["compile"]["mode"], d["params"]["shape"], d["compile"]["fullgraph"]) for d in points] == [
        ("default", [8, 8], True),
        ("default", [16, 16], True),
        ("lite", [8, 8], True),
        ("lite", [16, 16], True),
    ]
    assert entry == before and "mode" not in entry["compile"] and "fullgraph" not in entry["compile"]
    assert "params" not in entry
    assert len({id(d["compile"]) for d in points}) == 4 and all(d["compile"] is not entry["compile"] for d in points)
    assert all(d["params"]["shape"] is not v for d in points for v in sweep["params.shape"])
    points[0]["params"]["shape"].append(9)
    points[0]["compile"]["backend"] = "eager"
    assert sweep["params.shape"] == [[8, 8], [16, 16]] and points[2]["params"]["shape"] == [8, 8]
    assert entry["compile"]["backend"] == "inductor" and points[1]["compile"]["backend"] == "inductor"
    assert all(d["timing"] is entry["timing"] for d in points)  # not swept: shared


def test_expand_without_sweep_yields_the_entry_once():
    assert list(expand({"target": "seed.foo"}, {})) == [({}, {"target": "seed.foo"})]


def test_spec_models_compare_by_their_fields_alone():
    """``Closed.__eq__``'s short cut gives what pydantic's comparison gives: equal fields are equal, whatever else
    one of them holds (a cached id); another class, or other fields, are not."""
    from tasks.experiment import CompileConfig, TimingConfig

    a, b = Experiment(target="seed.foo", seed=1), Experiment(target="seed.foo", seed=1)
    assert a.id and "id" in a.__dict__ and "id" not in b.__dict__  # only a has worked its id out
    assert a == b and b == a and a == a
    assert a != Experiment(target="seed.foo", seed=2) and a != "seed.foo"
    assert CompileConfig(mode="lite") == CompileConfig(mode="lite") != CompileConfig()
    assert CompileConfig() != TimingConfig() and (CompileConfig() == object()) is False


def test_ids_are_stable_and_canonical():
    a = Experiment(target="seed.foo", params={"shape": [2, 2], "dtype": "float32"})
    b = Experiment.model_validate({"params": {"dtype": "float32", "shape": [2, 2]}, "target": "seed.foo"})
    assert a.id == b.id
    assert Experiment(target="seed.foo", compile={"mode": "default"}).id == Experiment(target="seed.foo").id
    assert Experiment(target="seed.foo", seed=1).id != Experiment(target="seed.foo").id
    explicit_defaults = Experiment(
        target="seed.foo", device="auto", compile={"cache": "warm"}, timing={"repeats": None}
    )
    assert explicit_defaults.id == Experiment(target="seed.foo").id


def test_counts_left_to_the_device_are_a_different_experiment_from_fixed_counts():
    # Unspecified counts are budgets on CUDA, so 'repeats: 10' (ten samples everywhere) is not the same experiment.
    assert Experiment(target="seed.foo", timing={"repeats": 10}).id != Experiment(target="seed.foo").id
    assert Experiment(target="seed.foo").id == GOLDEN_SEED_IDS[0]  # unspecified counts keep the old ids


def test_sweeping_a_dotted_inductor_option_keeps_its_dotted_name(write_spec):
    spec = load_spec(
        write_spec(
            """
            name: x
            experiments:
              - target: seed.foo
                compile: {options: {max_autotune: false}}
                sweep: {compile.options.triton.cudagraphs: [false, true], params.shape: [[8]]}
            """
        )
    )
    assert [e.compile.options for e in spec.experiments] == [
        {"max_autotune": False, "triton.cudagraphs": False},
        {"max_autotune": False, "triton.cudagraphs": True},
    ]
    assert [e.compile.cudagraphs for e in spec.experiments] == [False, True]
    assert split_path("compile.options.triton.cudagraphs") == ["compile", "options", "triton.cudagraphs"]
    assert split_path("params.shape") == ["params", "shape"]


def test_seed_spec_ids_are_the_same_on_every_machine():
    # Golden ids: a change here changes every report's identity, so it must be deliberate.
    ids = [e.id for e in load_spec(ROOT / "examples" / "seed.yaml").experiments]
    assert ids == GOLDEN_SEED_IDS


def test_a_left_out_spec_model_is_one_shared_default_and_the_id_leaves_it_out_however_given():
    """A field holding a spec model (compile, timing, check, resources, worker) left out is the one frozen
    instance every experiment shares, not a new one each (pydantic calls the factory for every experiment
    built and every id worked out); given explicitly with the same values, it is the same experiment."""
    from tasks.experiment import CheckConfig, Resources, TimingConfig, WorkerLimits

    a, b = Experiment(target="seed.foo"), Experiment(target="seed.bar", params={"n": 3})
    for name in ("compile", "timing", "check", "resources", "worker"):
        assert getattr(a, name) is getattr(b, name)
    explicit = Experiment(
        target="seed.foo",
        compile=CompileConfig(),
        timing=TimingConfig(),
        check=CheckConfig(),
        resources=Resources(),
        worker=WorkerLimits(),
    )
    assert explicit.id == a.id and explicit == a and explicit.compile is not a.compile
    assert Experiment(target="seed.foo", compile={"backend": "eager"}).id != a.id
    with pytest.raises(ValidationError):  # frozen: what every experiment shares cannot be changed through one
        a.compile.backend = "eager"  # type: ignore[misc]
    from tasks.lean import shared_default
    from tasks.result import SideTiming

    with pytest.raises(TypeError, match="SideTiming is not frozen"):
        shared_default(SideTiming)


GOLDEN_SEED_IDS = [
    "aa975c26545f",
    "8910eb5b6b62",
    "a48898a66f90",
    "27fee1f93407",
    "48dadc4ad2a5",
    "d46c93668b5c",
    "e765e80aa189",
    "8d79e01853b1",
    "d2ae57ce67ec",
    "600387e0c4c8",
]


def test_a_sweeps_points_share_each_part_validated_once_and_report_a_bad_one_where_they_did(write_spec):
    """A part no sweep path changes (``timing`` here) is one instance for every point; a swept part (``compile``) is
    one instance per distinct value; the experiments and their ids are those of experiments built one by one."""
    spec = load_spec(
        write_spec(
            """
            name: x
            defaults: {timing: {repeats: 5, warmup: 1}}
            experiments:
              - target: seed.foo
                check: {rtol: 0.01}
                sweep: {compile.mode: [default, max-autotune], seed: [0, 1, 2]}
            """
        )
    )
    exps = spec.experiments
    assert len({id(e.timing) for e in exps}) == 1 and len({id(e.check) for e in exps}) == 1
    assert len({id(e.compile) for e in exps}) == 2
    for e in exps:
        alone = Experiment.model_validate(e.model_dump(mode="json"))
        assert alone == e and alone.id == e.id
    with pytest.raises(Exception, match=r"experiments\[0\]\.timing\.repeats: input should be greater than or equal"):
        load_spec(
            write_spec(
                """
                name: x
                experiments:
                  - target: seed.foo
                    timing: {repeats: 0}
                    sweep: {seed: [0, 1]}
                """
            )
        )
    with pytest.raises(Exception, match=r"experiments\[0\]\.sweep\.compile\.mode"):
        load_spec(
            write_spec(
                """
                name: x
                experiments:
                  - target: seed.foo
                    sweep: {compile.mode: [default, 3]}
                """
            )
        )
