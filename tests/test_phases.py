"""Inference and training: modes, the training step, what is compared, the compiled step."""

from __future__ import annotations

import pytest
import torch

from tasks.models import CompileConfig, Experiment
from tasks.phases import PhaseRun, default_loss, grad_mode
from tasks.targets import Workload, build

from .conftest import run_on_cpu as run


def test_inference_runs_modules_in_eval_mode_without_grad():
    from tests.user_targets import MODES

    r = run("tests.user_targets:make_mode_recorder", backend="eager")
    assert r.status == "ok", r.error
    assert r.phase == "inference"
    assert len(MODES) > 5 and set(MODES) == {(False, False)}


def test_training_runs_modules_in_train_mode_with_grad():
    from tests.user_targets import MODES

    r = run("tests.user_targets:make_mode_recorder", backend="eager", phase="training")
    assert r.status == "ok", r.error
    assert r.phase == "training"
    assert set(MODES) == {(True, True)}


def test_training_compares_the_loss_and_the_gradients():
    r = run("tests.user_targets:make_linear", phase="training")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.compared == ["outputs", "loss", "gradients"]
    assert r.check.rtol == 1e-3  # training's float32 tolerance
    assert r.check.method == "fp64_rmse"


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_an_optimizer_step_is_part_of_the_step_and_its_parameters_are_compared(optimizer):
    r = run("tests.user_targets:make_linear", phase="training", optimizer=optimizer)
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.compared == ["outputs", "loss", "gradients", "parameters"]


def test_the_whole_step_can_be_compiled():
    r = run(
        "tests.user_targets:make_linear",
        phase="training",
        optimizer="adamw",
        compile={"backend": "aot_eager", "scope": "step"},
    )
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.compile.label() == "aot_eager+scope=step"
    assert r.graphs_compiled >= 2  # forward and loss, then the optimizer step, around backward's graph break


def test_scope_is_in_the_label_only_when_not_default():
    assert CompileConfig().label() == "inductor"
    assert CompileConfig(scope="step").label() == "inductor+scope=step"
    assert Experiment(target="seed.foo").id == Experiment(target="seed.foo", compile={"scope": "model"}).id


def test_a_compiled_step_cannot_be_combined_with_module_compile():
    r = run(
        "tests.user_targets:make_linear",
        phase="training",
        compile={"backend": "eager", "scope": "step", "method": "module_compile"},
    )
    assert r.status == "compile_error"
    assert "cannot go with method 'module_compile'" in r.error.message


def test_dropout_in_training_matches_with_inductors_fallback_random_and_a_reseeded_rng():
    r = run("tests.user_targets:make_dropout_mlp", backend="inductor", phase="training")
    assert r.status == "ok", r.error
    assert r.correct is True and r.check.eager_deterministic is True
    # judged on a compile of its own with fallback_random; the timed compile is what the user configured
    assert r.check.fallback_random is True and r.check.compile_latency_s > 0
    assert "fallback_random" not in r.inductor_options


def test_a_parameter_free_target_trains_with_respect_to_its_inputs():
    r = run("tests.user_targets:make_scaled", phase="training", optimizer="sgd")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.compared == ["outputs", "loss", "input_gradients"]


def test_a_workloads_own_loss_is_used():
    work = build("tests.user_targets:make_classifier", torch.device("cpu"), {})
    run_, work = PhaseRun.prepare(work, "training", None)
    _, loss = run_.side(work.fn)(*work.inputs)
    assert loss.item() == pytest.approx(work.loss_fn(work.fn(*work.inputs)).item())
    r = run("tests.user_targets:make_classifier", phase="training")
    assert r.status == "ok", r.error
    assert r.correct is True


def test_default_loss_sums_the_floating_outputs_that_require_grad():
    a = torch.ones(3, requires_grad=True)
    b = torch.full((2,), 2.0, dtype=torch.bfloat16, requires_grad=True)
    loss = default_loss({"a": a * 1, "b": [b * 1, torch.ones(5)], "n": 3})
    assert loss.dtype == torch.float32 and loss.item() == 7.0
    with pytest.raises(ValueError, match="needs a floating output that requires grad"):
        default_loss(torch.ones(2))


def test_checked_steps_start_from_the_saved_state():
    model = torch.nn.Linear(4, 4)
    work = Workload(model, (torch.randn(2, 4),))
    run_, work = PhaseRun.prepare(work, "training", "adamw")
    step = run_.side(model)
    step(*work.inputs)  # the optimizer state exists from the first step on
    run_.save()
    weight, exp_avg = model.weight.detach().clone(), next(iter(run_.optimizer.state.values()))["exp_avg"].clone()
    step(*work.inputs)
    assert not torch.equal(model.weight, weight)
    run_.restore()
    assert torch.equal(model.weight, weight)
    assert torch.equal(next(iter(run_.optimizer.state.values()))["exp_avg"], exp_avg)


def test_the_float64_copy_carries_the_training_state():
    model = torch.nn.Linear(4, 4)
    run_, work = PhaseRun.prepare(Workload(model, (torch.randn(2, 4),)), "training", "adamw")
    run_.side(model)(*work.inputs)
    run64, model64 = run_.float64(model)
    assert model64 is not model and model64.weight.dtype == torch.float64
    state = next(iter(run64.optimizer.state.values()))
    assert state["exp_avg"].dtype == torch.float64
    assert torch.allclose(model64.weight.float(), model.weight)


def test_grad_mode_by_phase():
    with grad_mode("inference"):
        assert not torch.is_grad_enabled()
    with grad_mode("training"):
        assert torch.is_grad_enabled()
