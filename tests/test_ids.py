"""An experiment's id text, put together field by field (``tasks.ids.canonical_dump``), is pydantic's dump's."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

import tasks.ids as ids
from orchestrator.plan.spec import load_spec
from tasks.experiment import CompileConfig, Experiment, TimingConfig
from tasks.ids import canonical, canonical_dump

ROOT = Path(__file__).resolve().parents[1]
NOT_IN_ID = frozenset({"worker", "replicates", "decision", "trace"})


def pydantics(exp: Experiment) -> str:
    return canonical(exp.model_dump(mode="json", exclude_defaults=True, exclude=set(NOT_IN_ID)))


VARIED: list[dict[str, Any]] = [
    {"target": "seed.foo"},
    {"target": "seed.foo", "timeout_s": 5, "seed": 3, "retries": 0, "gpu_model": "H200", "device": "cuda"},
    {"target": "seed.foo", "params": {"shape": [64, 64], "scale": 0.1, "name": "a", "flag": True, "none": None}},
    {"target": "seed.foo", "params": {"nested": {"b": [1.5, {"c": 1e-05}], "a": 2}}},
    {"target": "seed.foo", "params": {"pair": (1, 2)}},  # a tuple: JSON mode makes it a list
    {"target": "seed.foo", "params": {"set": {3, 1}}},  # a set: a list in JSON mode, its text by default=str here
    {"target": "seed.foo", "params": {"nan": float("nan"), "inf": math.inf}},  # None in JSON mode
    {"target": "seed.foo", "timeout_s": math.inf},
    {"target": "seed.foo", "params": {"é": "ü", "k": "\u2603"}},  # ensure_ascii
    {"target": "seed.foo", "compile": {"backend": "eager", "fullgraph": True, "dynamic": False, "cache": "cold"}},
    {"target": "seed.foo", "compile": {"options": {"max_autotune": True, "triton.cudagraphs": False}}},
    {"target": "seed.foo", "compile": {"mode": "default"}},  # its default: left out
    {"target": "seed.foo", "timing": {"warmup_ms": 20, "repeats_ms": 100}, "check": {"rtol": 0.01}},
    {"target": "seed.foo", "timing": {"repeats": None}, "compile": {"cache": "warm"}},  # explicit defaults
    {"target": "seed.foo", "resources": {"cpus": 2}, "worker": {"max_experiments": 3}, "replicates": 4},
    {"target": "seed.foo", "phase": "training", "precision": "bf16", "optimizer": "adamw"},
    {"target": "seed.foo", "trace": True, "decision": {"calls": 10}},
]


@pytest.mark.parametrize("fields", VARIED, ids=range(len(VARIED)))
def test_the_text_put_together_is_pydantics_dump(fields: dict[str, Any]) -> None:
    exp = Experiment.model_validate(fields)
    assert canonical_dump(exp, NOT_IN_ID) == pydantics(exp)


def test_every_example_spec_gives_pydantics_text_for_every_experiment() -> None:
    specs = sorted((ROOT / "examples").glob("*.yaml"))
    assert specs
    for path in specs:
        for exp in load_spec(path).experiments:
            assert canonical_dump(exp, NOT_IN_ID) == pydantics(exp), (path.name, exp)


def test_random_experiments_give_pydantics_text() -> None:
    """Fields drawn at random, each of the models an experiment holds given or left out."""
    rng = random.Random(7)
    choices: dict[str, list[Any]] = {
        "seed": [0, 1, 2**40],
        "timeout_s": [1800.0, 60, 0.25, 1e-05],
        "phase": ["inference", "training"],
        "precision": ["fp32", "bf16", "amp_fp16"],
        "params": [{}, {"shape": [8, 8]}, {"x": 1.0, "y": [0.1, 0.2]}, {"a": {"b": None}}],
        "compile": [{}, {"mode": "max-autotune"}, {"backend": "aot_eager", "dynamic": True}, {"options": {"a.b": 1}}],
        "timing": [{}, {"repeats": 5, "warmup": 1}, {"repeats_ms": 50.0}],
        "check": [{}, {"atol": 0.001}],
        "resources": [{}, {"gpus": 1}],
        "worker": [{}, {"max_experiments": 2}],
    }
    for _ in range(300):
        fields = {k: rng.choice(v) for k, v in choices.items() if rng.random() < 0.6}
        exp = Experiment.model_validate({"target": "seed.foo", **fields})
        assert canonical_dump(exp, NOT_IN_ID) == pydantics(exp), fields


def test_a_shared_part_is_dumped_once_and_a_full_memo_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    compile_cfg, timing = CompileConfig(mode="max-autotune"), TimingConfig(repeats=5)
    exps = [Experiment(target="seed.foo", seed=s, compile=compile_cfg, timing=timing) for s in range(6)]
    assert all(e.compile is compile_cfg for e in exps)  # an instance given is taken as it is
    monkeypatch.setattr(ids, "NESTED_MEMO_SIZE", 3)
    ids._NESTED.clear()
    calls: list[Any] = []
    real = ids.canonical_dump

    def counted(model: Any, exclude: frozenset[str] = frozenset()) -> str:
        calls.append(type(model).__name__)
        return real(model, exclude)

    monkeypatch.setattr(ids, "canonical_dump", counted)
    texts = [ids.canonical_dump(e, NOT_IN_ID) for e in exps]
    assert texts == [pydantics(e) for e in exps]
    assert calls.count("CompileConfig") == 1 and calls.count("TimingConfig") == 1  # once, not once an experiment
    for cfg in (CompileConfig(mode=m) for m in ("lite", "default", "reduce-overhead", "max-autotune")):
        exp = Experiment(target="seed.foo", compile=cfg)
        assert ids.canonical_dump(exp, NOT_IN_ID) == pydantics(exp)
    assert len(ids._NESTED) <= 3  # emptied when full, never past its size


def test_an_id_is_the_digest_of_pydantics_text() -> None:
    exp = Experiment(target="seed.foo", params={"shape": [3]}, compile={"fullgraph": True})
    assert exp.id == ids.digest(exp.model_dump(mode="json", exclude_defaults=True, exclude=set(NOT_IN_ID)), 12)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's, serializing a value its field does not hold
def test_a_value_set_without_validation_is_dumped_as_pydantic_converts_it() -> None:
    """``model_copy(update=...)`` stores what it is given: an int in a float field, a bool in an int field. Their
    text is pydantic's (``60.0``, ``1``), not the value's own."""
    exp = Experiment(target="seed.foo")
    for update in ({"timeout_s": 60}, {"timeout_s": True}, {"seed": True}, {"retries": 2.0}, {"gpu_model": "H100"}):
        copied = exp.model_copy(update=update)
        assert canonical_dump(copied, NOT_IN_ID) == pydantics(copied), update
    cfg = CompileConfig().model_copy(update={"fullgraph": 1})
    assert canonical_dump(cfg) == canonical(cfg.model_dump(mode="json", exclude_defaults=True))
