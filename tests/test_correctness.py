"""How the compiled side is judged: any output structure, the float64 reference, wrong compilers caught."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib.util
import math

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend
from torch._functorch.aot_autograd import make_boxed_func

from tasks.check.judge import Tolerances, compare, deterministic
from tasks.check.outputs import Observed, leaves, observe
from tasks.models import Experiment

from .conftest import run_on_cpu as run


def _perturb_first(outputs):
    """The outputs with the first floating tensor 1% larger: what a subtly wrong compiler returns."""
    outs = list(outputs)
    for i, out in enumerate(outs):
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            outs[i] = out * 1.01
            break
    return type(outputs)(outs) if isinstance(outputs, tuple) else outs


def _register(name, backend):
    with contextlib.suppress(Exception):  # registered already (a re-run in the same process)
        register_backend(compiler_fn=backend, name=name)
    return name


def _output_bug(gm, example_inputs):
    return lambda *args: _perturb_first(gm(*args))


def _gradient_bug(gm, example_inputs):
    """Forward right, backward wrong: the first gradient the backward graph returns is 1% off."""

    def backward(bw, _):
        return make_boxed_func(lambda *args: _perturb_first(bw(*args)))

    return aot_autograd(fw_compiler=lambda fw, _: fw, bw_compiler=backward)(gm, example_inputs)


CALLS = collections.Counter()


def _wrong_after_first_call(gm, example_inputs):
    """Right on its first call, wrong from then on: what only a later (replayed) call shows."""
    key = id(gm)

    def call(*args):
        CALLS[key] += 1
        out = gm(*args)
        return out if CALLS[key] == 1 else _perturb_first(out)

    return call


OUTPUT_BUG = _register("output_bug_TESTING_ONLY", _output_bug)
GRADIENT_BUG = _register("gradient_bug_TESTING_ONLY", _gradient_bug)
LATER_BUG = _register("later_call_bug_TESTING_ONLY", _wrong_after_first_call)


# The five cases of the table: each runs, is timed and is correct.


def test_nested_output_with_non_tensor_leaves_is_compared_leaf_by_leaf():
    r = run("tests.user_targets:make_nested")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.method == "fp64_rmse" and r.check.compared == ["outputs"]
    assert r.compiled is not None and r.compiled.n == 3


def test_input_mutated_in_place_is_copied_for_every_call():
    from tests.user_targets import SEEN_BY_MUTATING

    r = run("tests.user_targets:make_mutating")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.measurement.inputs_mutated is True
    assert r.check.compared == ["outputs", "inputs"]  # the mutation itself is checked too
    assert len(SEEN_BY_MUTATING) > 10
    assert set(SEEN_BY_MUTATING) == {0.0}  # no eager call ever saw a drifted input


def test_long_float32_reduction_reordered_by_inductor_is_as_accurate_as_eager():
    r = run("tests.user_targets:make_long_sum", backend="inductor")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.method == "fp64_rmse"
    assert r.check.rtol == 1e-4  # float32's tolerance, not assert_close's 1.3e-6
    assert r.check.max_rel_error < 1e-4  # allclose decides: inductor's sum strays further from float64 than eager's


def test_dropout_module_runs_in_eval_mode_for_inference():
    r = run("tests.user_targets:make_dropout_mlp")
    assert r.status == "ok", r.error
    assert r.correct is True and r.phase == "inference"
    assert r.check.eager_deterministic is True


def test_model_output_holding_a_cache_object_is_compared_through_its_attributes():
    r = run("tests.user_targets:make_caching_lm")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.method == "fp64_rmse"


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_hugging_face_gpt2_with_its_dynamic_cache_is_timed_and_correct():
    r = run("tests.user_targets:make_hf_gpt2", params={"layers": 1})
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.check.method == "fp64_rmse"
    assert r.eager is not None and r.compiled is not None


# Wrong compilers are caught.


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_compiler_that_perturbs_one_output_by_one_percent_is_incorrect(precision):
    r = run("tests.user_targets:make_linear", backend=OUTPUT_BUG, precision=precision)
    assert r.status == "incorrect", r.error
    assert r.correct is False and r.precision == precision
    assert r.error.type == "tasks.check.judge.Mismatch"
    assert r.error.message.startswith("mismatch at outputs: RMSE against float64")
    assert r.check.worst == "outputs"
    assert r.check.rmse_compiled > r.check.multiplier * r.check.rmse_eager
    assert r.compiled is not None  # an incorrect result is still timed


def test_the_same_linear_is_correct_in_bf16_with_an_honest_compiler():
    r = run("tests.user_targets:make_linear", precision="bf16")
    assert r.status == "ok", r.error
    assert (r.correct, r.check.rtol) == (True, 1e-3)


def test_wrong_gradients_are_caught_in_training():
    r = run("tests.user_targets:make_linear", backend=GRADIENT_BUG, phase="training")
    assert r.status == "incorrect", r.error
    assert r.check.compared == ["outputs", "loss", "gradients"]
    assert r.error.message.startswith("mismatch at gradients[")


def test_a_later_call_is_checked_as_well_as_the_first():
    r = run("tests.user_targets:make_linear", backend=LATER_BUG)
    assert r.status == "incorrect", r.error


def test_the_replayed_call_is_the_one_after_cuda_graph_recording():
    from tasks.check.step import References, check_compiled
    from tasks.phases import PhaseRun

    calls = []

    def side(x):
        calls.append(1)
        return x * (1.01 if len(calls) == 4 else 1.0)  # wrong only on the third call after the first

    x = torch.randn(16)
    exp = Experiment(target="seed.foo", check={"reference": "eager"})
    run_ = PhaseRun("inference")
    refs = [References((x,), observe({"outputs": x}), None)]
    first = observe({"outputs": side(x)})
    assert check_compiled(exp, run_, side, first, refs, False, replays=1).correct is True
    calls.clear()
    first = observe({"outputs": side(x)})
    assert check_compiled(exp, run_, side, first, refs, False, replays=3).correct is False


# What cannot be judged is still timed.


def test_an_output_with_no_known_structure_is_timed_and_not_judged():
    r = run("tests.user_targets:make_opaque")
    assert r.status == "ok", r.error
    assert r.correct is None
    assert "Opaque has no known structure" in r.check_note
    assert r.check.method == "none"
    assert r.eager is not None and r.compiled is not None


def test_eager_that_differs_from_itself_is_recorded_not_blamed_on_the_compiler():
    r = run("tests.user_targets:make_nondeterministic", backend="eager")
    assert r.status == "ok", r.error
    assert r.correct is None
    assert r.check.eager_deterministic is False
    assert r.check_note.startswith("eager is not deterministic: two runs from the same seed and inputs differ")


def test_disabled_check_is_recorded():
    r = run("tests.user_targets:make_linear", check={"enabled": False})
    assert (r.status, r.correct, r.check.method) == ("ok", None, "none")
    assert r.check_note == "not checked: check.enabled is false"


def test_reference_eager_compares_with_allclose_alone():
    r = run("tests.user_targets:make_linear", check={"reference": "eager", "rtol": 0.02, "atol": 0.02})
    assert (r.correct, r.check.method, r.check.rtol) == (True, "allclose", 0.02)
    r = run("tests.user_targets:make_linear", backend=OUTPUT_BUG, check={"reference": "eager"})
    assert r.status == "incorrect"
    assert "beyond rtol=0.0001, atol=0.0001" in r.error.message


# The comparison itself.


@dataclasses.dataclass
class Point:
    x: torch.Tensor
    label: str


Pair = collections.namedtuple("Pair", ["first", "second"])


def test_leaves_are_named_by_their_path_through_any_structure():
    t = torch.ones(2)
    found = leaves({"a": [t, (Pair(t, 2), Point(t, "p"))], "b": {1, 2}})
    assert list(found) == [
        "['a'][0]",
        "['a'][1][0].first",
        "['a'][1][0].second",
        "['a'][1][1].x",
        "['a'][1][1].label",
        "['b']",
    ]


def test_an_object_without_structure_but_with_eq_is_compared_by_it():
    class Tag:
        __slots__ = ("name",)

        def __init__(self, name):
            self.name = name

    same = observe({"outputs": (torch.ones(2), Tag("a"))})
    other = observe({"outputs": (torch.ones(2), Tag("b"))})
    assert compare(same, observe({"outputs": (torch.ones(2), Tag("a"))}), None, Tolerances()).correct is True
    verdict = compare(other, same, None, Tolerances())
    assert verdict.correct is False and "mismatch at outputs[1].name" in str(verdict.mismatch)


def test_structure_differences_are_mismatches():
    a, b = observe({"outputs": {"x": torch.ones(2)}}), observe({"outputs": {"y": torch.ones(2)}})
    verdict = compare(a, b, None, Tolerances())
    assert verdict.correct is False
    assert str(verdict.mismatch) == "mismatch in structure: outputs['x'], outputs['y'] only on one side"


def test_dtype_and_shape_must_match():
    verdict = compare(
        observe({"o": torch.ones(2)}), observe({"o": torch.ones(2, dtype=torch.float64)}), None, Tolerances()
    )
    assert "torch.float32[2] where eager gives torch.float64[2]" in str(verdict.mismatch)


def fp64_case(noise_compiled: float, noise_eager: float, n: int = 4096, dtype=torch.float32):
    """Observations of a compiled and an eager result whose errors against float64 are known."""
    torch.manual_seed(0)
    exact = torch.randn(n, dtype=torch.float64)
    compiled = (exact + noise_compiled * torch.randn(n, dtype=torch.float64)).to(dtype)
    eager = (exact + noise_eager * torch.randn(n, dtype=torch.float64)).to(dtype)
    return observe({"o": compiled}), observe({"o": eager}), observe({"o": exact})


def test_rmse_rule_passes_a_result_as_accurate_as_eager_and_fails_one_twice_as_far():
    assert compare(*fp64_case(1e-3, 1e-3), Tolerances()).correct is True  # beyond allclose, same accuracy
    verdict = compare(*fp64_case(3e-3, 1e-3), Tolerances())
    assert verdict.correct is False
    assert verdict.check.multiplier == 2.0
    assert verdict.check.rmse_compiled == pytest.approx(3e-3, rel=0.1)


def test_multiplier_is_three_for_half_precision_and_small_tensors():
    assert compare(*fp64_case(2.5e-2, 1e-2, dtype=torch.bfloat16), Tolerances()).check.multiplier == 3.0
    assert compare(*fp64_case(2.5e-3, 1e-3, n=100), Tolerances()).check.multiplier == 3.0


def test_without_float64_reference_cosine_similarity_decides():
    compiled, eager, _ = fp64_case(1e-3, 0.0)
    verdict = compare(compiled, eager, None, Tolerances())
    assert (verdict.correct, verdict.check.method) == (True, "cosine")
    wrong = observe({"o": -eager.leaves["o"]})
    assert compare(wrong, eager, None, Tolerances()).correct is False


@pytest.mark.parametrize(
    ("dtype", "training", "compute", "expected"),
    [
        (torch.float32, False, None, 1e-4),
        (torch.float32, True, None, 1e-3),
        (torch.bfloat16, False, None, 1e-3),
        (torch.float16, True, None, 1e-2),
        (torch.float32, False, torch.bfloat16, 1e-3),  # amp_bf16: float32 outputs of bfloat16 arithmetic
        (torch.float64, False, None, 1e-7),
    ],
)
def test_default_tolerances_by_dtype(dtype, training, compute, expected):
    assert Tolerances(training=training, compute_dtype=compute).for_dtype(dtype) == (expected, expected)


def test_overrides_replace_the_defaults():
    assert Tolerances(rtol=0.5, atol=0.25).for_dtype(torch.float32) == (0.5, 0.25)


def test_nan_in_the_same_places_is_equal():
    a = torch.tensor([1.0, float("nan")])
    assert compare(observe({"o": a}), observe({"o": a.clone()}), None, Tolerances()).correct is True


def test_eager_determinism_uses_the_tolerance():
    a = observe({"o": torch.ones(4)})
    assert deterministic(a, observe({"o": torch.ones(4) + 1e-6}), Tolerances()) is None
    assert deterministic(a, observe({"o": torch.ones(4) * 2}), Tolerances()).startswith("o: max abs error 1")


def test_unobservable_results_carry_their_reason():
    observed = observe({"outputs": object()})
    assert observed == Observed(note=observed.note)
    assert observed.note.startswith("outputs: an object of type object has no known structure")


# NaN and Inf: a non-finite compiled value passes only where eager and float64 have it too.

NAN, INF = float("nan"), float("inf")


def nan_case(compiled, eager, fp64):
    """Observations of three results given as lists (float32 for the two sides, float64 reference)."""
    as32 = lambda v: observe({"o": torch.tensor(v, dtype=torch.float32)})  # noqa: E731
    return as32(compiled), as32(eager), observe({"o": torch.tensor(fp64, dtype=torch.float64)}) if fp64 else None


def test_compiled_nan_everywhere_is_incorrect_though_eager_has_one_nan_from_an_overflow():
    """Eager's NaN is a float32 overflow (inf - inf) that float64 does not have: the RMSE is NaN on
    both sides, which once passed."""
    verdict = compare(*nan_case([NAN] * 4, [NAN, 0.5, 0.25, 1.0], [0.0, 0.5, 0.25, 1.0]), Tolerances())
    assert verdict.correct is False
    assert str(verdict.mismatch) == (
        "mismatch at o: 4 non-finite values (NaN/Inf) where the float64 reference is finite "
        "(first at index [0]: compiled nan, eager nan, float64 0); eager is non-finite at 1 of them"
    )
    assert verdict.margin == math.inf


@pytest.mark.parametrize(
    ("value", "found"),
    [
        (NAN, "1 non-finite value (NaN/Inf) where the float64 reference is finite (first at index [1]: compiled nan,"),
        (INF, "1 non-finite value (NaN/Inf) where the float64 reference is finite (first at index [1]: compiled inf,"),
        (
            -INF,
            "1 non-finite value (NaN/Inf) where the float64 reference is finite (first at index [1]: compiled -inf,",
        ),
    ],
)
def test_one_non_finite_compiled_value_where_float64_is_finite_is_incorrect(value, found):
    verdict = compare(*nan_case([0.0, value, 0.25], [0.0, 0.5, 0.25], [0.0, 0.5, 0.25]), Tolerances())
    assert verdict.correct is False
    assert found in str(verdict.mismatch)


def test_an_overflow_eager_shares_is_still_a_failure_where_float64_is_finite():
    """The same Inf on both float32 sides where float64 is finite: compiled is not let off for
    matching eager (the harness's float32 rule); the message says eager has it too."""
    verdict = compare(*nan_case([INF, 0.5], [INF, 0.5], [3e40, 0.5]), Tolerances())
    assert verdict.correct is False
    assert str(verdict.mismatch).endswith("eager is non-finite at 1 of them")


def test_nan_where_eager_and_float64_have_it_too_is_equal_and_the_rest_is_still_judged():
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=torch.float64)
    exact = torch.log(x)  # NaN at the negatives
    eager = exact.to(torch.float32)
    assert eager.isnan().sum() > 1000
    verdict = compare(observe({"o": eager.clone()}), observe({"o": eager}), observe({"o": exact}), Tolerances())
    assert (verdict.correct, verdict.check.method) == (True, "fp64_rmse")
    off = torch.where(eager.isnan(), eager, eager * 1.01)  # the finite values 1% off
    verdict = compare(observe({"o": off}), observe({"o": eager}), observe({"o": exact}), Tolerances())
    assert verdict.correct is False and "RMSE against float64" in str(verdict.mismatch)


def test_matching_non_finite_values_must_be_the_same_value():
    # NaN where eager and float64 have +Inf; -Inf where eager has +Inf
    for compiled in ([NAN, 1.0], [-INF, 1.0]):
        verdict = compare(*nan_case(compiled, [INF, 1.0], [INF, 1.0]), Tolerances())
        assert verdict.correct is False
        assert "1 non-finite value (NaN/Inf) where eager is finite or differs (first at index [0]" in str(
            verdict.mismatch
        )
    assert compare(*nan_case([INF, -INF, NAN], [INF, -INF, NAN], [INF, -INF, NAN]), Tolerances()).correct is True


def test_compiled_without_the_nan_eager_has_and_close_to_float64_wins():
    """The harness's exception: eager has a NaN, compiled has none and is within LOOSE_TOL of float64."""
    assert compare(*nan_case([0.0, 0.5, 0.25], [NAN, 0.5, 0.25], [0.0, 0.5, 0.25]), Tolerances()).correct is True
    verdict = compare(*nan_case([0.0, 0.9, 0.25], [NAN, 0.5, 0.25], [0.0, 0.5, 0.25]), Tolerances())
    assert verdict.correct is False
    assert "eager has NaN and compiled is not within 0.04 of float64 either" in str(verdict.mismatch)


@pytest.mark.parametrize("reference", ["eager", "cosine"])
def test_without_float64_a_compiled_nan_or_inf_where_eager_is_finite_fails(reference):
    """check.reference: eager (allclose), and the cosine path where no float64 run was possible."""
    tol = Tolerances(reference="eager") if reference == "eager" else Tolerances()
    verdict = compare(*nan_case([NAN] * 4, [NAN, 0.5, 0.25, 1.0], None), tol)
    assert verdict.correct is False
    assert "3 non-finite values (NaN/Inf) where eager is finite or differs (first at index [1]: compiled nan, " in str(
        verdict.mismatch
    )
    assert compare(*nan_case([INF, 0.5], [-INF, 0.5], None), tol).correct is False
    assert compare(*nan_case([INF, NAN, 0.5], [INF, NAN, 0.5], None), tol).correct is True
    verdict = compare(*nan_case([1.0, 0.5], [NAN, 0.5], None), tol)  # compiled finite where eager is not: no referee
    assert verdict.correct is False
    assert "1 non-finite value (NaN/Inf) where eager is non-finite and compiled is not" in str(verdict.mismatch)


def test_eager_with_nan_in_the_same_places_twice_is_deterministic():
    a = observe({"o": torch.tensor([NAN, 1.0, -INF])})
    assert deterministic(a, observe({"o": torch.tensor([NAN, 1.0, -INF])}), Tolerances()) is None
    assert deterministic(a, observe({"o": torch.tensor([1.0, 1.0, -INF])}), Tolerances()) is not None


# The same, through the procedure: the compiled side alone spoils its output.


def test_compiled_nan_everywhere_beside_eagers_one_overflow_nan_is_reported_incorrect():
    r = run("tests.user_targets:make_overflow", backend="eager", params={"spoil": "all"})
    assert r.status == "incorrect", r.error
    assert r.correct is False and r.check.method == "fp64_rmse"
    assert r.error.message.startswith(
        "mismatch at outputs: 64 non-finite values (NaN/Inf) where the float64 reference is finite (first at index [0]"
    )


@pytest.mark.parametrize(("spoil", "first"), [("one", "[3]: compiled nan"), ("inf", "[5]: compiled inf")])
def test_one_compiled_nan_or_inf_is_reported_incorrect(spoil, first):
    r = run("tests.user_targets:make_overflow", params={"overflow": False, "spoil": spoil})
    assert r.status == "incorrect", r.error
    found = "1 non-finite value (NaN/Inf) where the float64 reference is finite"
    assert r.error.message.startswith(f"mismatch at outputs: {found} (first at index {first}")


def test_nan_from_log_of_negatives_on_every_side_is_correct():
    r = run("tests.user_targets:make_log")
    assert r.status == "ok", r.error
    assert (r.correct, r.check.method, r.check.eager_deterministic) == (True, "fp64_rmse", True)
