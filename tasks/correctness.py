"""Whether the compiled side computes what eager computes, judged as PyTorch's dynamo harness does.

The harness (``benchmarks/dynamo/common.py``, ``torch._dynamo.utils.same``) compares the compiled
result with eager's and, where that is not close enough, with a float64 run of the same target:

1. **Structure.** Outputs of any shape are flattened into leaves named by their path
   (``outputs['logits']``, ``outputs.cache.layers[0].keys``, ``gradients['lin.weight']``): tensors,
   tuples, lists, dicts (Hugging Face ``ModelOutput`` is one), namedtuples, dataclasses, types
   registered with ``torch.utils._pytree``, and other objects through their attributes (a
   ``DynamicCache``'s layers and their key/value tensors). Both sides must have the same paths.
2. **Non-floating leaves** (integer and bool tensors, strings, numbers, dtypes) must be equal.
3. **Floating leaves** pass when ``allclose(compiled, eager, rtol, atol)``; else, with a float64
   reference, when ``RMSE(compiled, fp64) <= m * RMSE(eager, fp64) + atol / 10``: compiled may
   differ from eager as long as it is not much further from the exact answer than eager itself
   (a reduction summed in another order is as accurate, not wrong). ``m`` is 2, or 3 for half
   precision and for tensors under ``SMALL_TENSOR`` elements, as the harness sets it. Where the
   float64 run was impossible, cosine similarity ``>= COSINE_MIN`` (the harness's fallback).
   With ``check.reference: eager``, allclose alone decides.
4. **NaN and Inf.** A non-finite value in the compiled result passes only where eager has the same
   one (NaN, or an Inf of the same sign) and the float64 reference, where there is one, is
   non-finite too; such positions count as equal and the rest of the leaf is judged as above. A NaN
   or Inf anywhere else fails, whatever the RMSE says: the harness compares float32 with
   ``equal_nan=False``, and an RMSE that is NaN on both sides says nothing by itself. Its
   exception stays: compiled without NaN where eager has some, and within ``LOOSE_TOL`` of
   float64, is the better result and passes.

Default tolerances (``rtol = atol``) by the dtype the arithmetic ran in:

=========================  =========  =========
dtype                      inference  training
=========================  =========  =========
float64                    1e-7       1e-6
float32                    1e-4       1e-3
tf32 matmuls, float16      1e-3       1e-2
bfloat16                   1e-3       1e-2
=========================  =========  =========

float32 1e-4 and float16 1e-3 are TorchBench's inference settings; training is ten times looser,
as the harness's Hugging Face and TIMM suites are. A float32 output computed under ``tf32`` or
``amp_*`` takes the tolerance of the lower precision. ``check.rtol``/``check.atol`` override them.

What cannot be judged is reported, not failed: an output holding an object with no known structure
(no attributes, no ``__eq__``) raises ``Uncheckable``, which the procedure turns into
``correct: null`` with the reason.

The check step of the procedure (``take_references`` before anything compiles, ``check_compiled``
after the first compiled call), as the harness orders it: eager runs twice from the same training
state and seed, and two runs that differ make the result ``correct: null`` with
``eager_deterministic: false`` rather than a compiled failure; a float64 deep copy of the target
runs on float64 copies of the inputs, outside autocast. Then the compiled side's first call, a later
call (after CUDA graphs were recorded, under ``reduce-overhead``) and its call on every check input
are each compared; every checked call starts from fresh input copies and a reseeded RNG.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
import random
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.utils._pytree as pytree

from tasks import precision
from tasks.models import CheckInfo, CheckReference, Experiment
from tasks.targets import Workload, copy_inputs

if TYPE_CHECKING:
    from tasks.phases import PhaseRun

FLOAT_TOLERANCE = {  # rtol = atol, inference; see the module docstring for the sources
    torch.float64: 1e-7,
    torch.float32: 1e-4,
    torch.float16: 1e-3,
    torch.bfloat16: 1e-3,
}
TRAINING_FACTOR = 10  # training tolerances are this much looser (harness: HF/TIMM 1e-3 -> 1e-2)
COSINE_MIN = 0.99  # the harness's cosine-similarity threshold where no float64 run exists
SMALL_TENSOR = 1000  # elements: below this, noise dominates RMSE and the multiplier is 3 (harness)
LOOSE_TOL = 4e-2  # harness: compiled without NaN, eager with NaN, compiled ~ fp64 at this: compiled wins
MAX_DEPTH = 32  # nesting followed into an output before it counts as having no known structure

Method = Literal["fp64_rmse", "allclose", "cosine", "equal", "none"]
PLAIN = (str, bytes, int, bool, complex, type(None), torch.dtype, torch.device, torch.Size, enum.Enum, range, type)
IDENTITY = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, torch.nn.Module)  # leaves, by ==


class Uncheckable(Exception):
    """An output the check cannot compare; the message says where and why."""


class Mismatch(AssertionError):
    """The compiled side's result failed the check; the message says where and by how much."""


@dataclass(frozen=True)
class Observed:
    """One call's result, flattened into leaves by path and copied, or why it cannot be."""

    leaves: dict[str, Any] = field(default_factory=dict)
    note: str | None = None  # set when the result has no structure the check can follow

    @property
    def compared(self) -> list[str]:
        """The top-level names compared: outputs, loss, gradients, parameters, inputs."""
        roots = (path.split("[")[0].split(".")[0] for path in self.leaves)
        return list(dict.fromkeys(roots))


def observe(parts: Mapping[str, Any]) -> Observed:
    """Flatten ``{"outputs": ..., "loss": ...}`` and copy its tensors now, before a later call
    (a CUDA graph replay, an optimizer step) overwrites them."""
    try:
        found = {path: leaf for name, part in parts.items() for path, leaf in _leaves(part, name, 0, set())}
    except Uncheckable as e:
        return Observed(note=str(e))
    return Observed({path: _detached(leaf) for path, leaf in found.items()})


def leaves(obj: Any) -> dict[str, Any]:
    """The leaves of any output structure by path (the tensors themselves, not copies)."""
    return dict(_leaves(obj, "", 0, set()))


def _detached(leaf: Any) -> Any:
    return leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf


def _leaves(obj: Any, path: str, depth: int, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of any output structure; ``Uncheckable`` for what has none."""
    if isinstance(obj, (torch.Tensor, float, _Equal, *PLAIN, *IDENTITY)):
        yield path, obj
        return
    if type(obj).__module__ == "numpy":
        yield path, torch.as_tensor(obj) if hasattr(obj, "shape") and obj.shape else obj.item()
        return
    if depth > MAX_DEPTH:
        raise Uncheckable(f"{path}: nested more than {MAX_DEPTH} levels deep")
    if id(obj) in seen:
        yield path, "<refers back to an enclosing object>"
        return
    seen = seen | {id(obj)}
    for sub, child in _children(obj, path):
        yield from _leaves(child, sub, depth + 1, seen)


def _children(obj: Any, path: str) -> list[tuple[str, Any]]:
    """The named parts of one container or object."""
    if isinstance(obj, Mapping):  # dict, OrderedDict, Hugging Face ModelOutput
        return [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return [(f"{path}.{name}", getattr(obj, name)) for name in obj._fields]
    if isinstance(obj, list | tuple | collections.deque):
        return [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, set | frozenset):
        if any(isinstance(v, torch.Tensor) for v in obj):
            raise Uncheckable(f"{path}: a set of tensors has no order to compare them in")
        return [(path, _Equal(frozenset(obj)))]
    if dataclasses.is_dataclass(obj):
        return [(f"{path}.{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    if type(obj) in pytree.SUPPORTED_NODES:
        children, _ = pytree.SUPPORTED_NODES[type(obj)].flatten_fn(obj)
        return [(f"{path}[{i}]", v) for i, v in enumerate(children)]
    attributes = _attributes(obj)
    if attributes:  # e.g. a DynamicCache: its layers, their key and value tensors
        return [(f"{path}.{name}", v) for name, v in attributes.items()]
    if type(obj).__eq__ is not object.__eq__:
        return [(path, _Equal(obj))]
    raise Uncheckable(
        f"{path or 'output'}: an object of type {type(obj).__qualname__} has no known structure "
        "(no tensors, no attributes, no __eq__ to compare it by)"
    )


def _attributes(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    slots = [s for cls in type(obj).__mro__ for s in getattr(cls, "__slots__", ())]
    return {s: getattr(obj, s) for s in slots if isinstance(s, str) and hasattr(obj, s)}


class _Equal:
    """A leaf compared by its own ``__eq__``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Equal) and bool(self.value == other.value)

    def __hash__(self) -> int:
        return id(self.value)


@dataclass(frozen=True)
class Tolerances:
    """How floating leaves are judged: the experiment's overrides, its phase and its arithmetic."""

    rtol: float | None = None
    atol: float | None = None
    reference: CheckReference = "fp64"
    training: bool = False
    compute_dtype: torch.dtype | None = None  # arithmetic below the outputs' dtype (tf32, amp)

    @classmethod
    def of(cls, exp: Experiment) -> Tolerances:
        """The experiment's ``check`` overrides, its phase and its precision's arithmetic."""
        return cls(
            rtol=exp.check.rtol,
            atol=exp.check.atol,
            reference=exp.check.reference,
            training=exp.phase == "training",
            compute_dtype=precision.arithmetic_dtype(exp.precision),
        )

    def effective_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The lower precision of the leaf's dtype and the arithmetic that produced it."""
        if self.compute_dtype is None or dtype not in FLOAT_TOLERANCE:
            return dtype
        return max(dtype, self.compute_dtype, key=lambda d: torch.finfo(d).eps)

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for a leaf of this dtype."""
        default = FLOAT_TOLERANCE.get(self.effective_dtype(dtype), FLOAT_TOLERANCE[torch.float32])
        default *= TRAINING_FACTOR if self.training else 1
        return (
            self.rtol if self.rtol is not None else default,
            self.atol if self.atol is not None else default,
        )


@dataclass
class LeafCheck:
    """How one floating leaf fared. ``margin``: the error over what was allowed (over 1 fails)."""

    path: str
    method: Method
    passed: bool
    margin: float
    rtol: float | None = None
    atol: float | None = None
    multiplier: float | None = None
    max_abs: float = 0.0
    max_rel: float = 0.0
    rmse_compiled: float | None = None
    rmse_eager: float | None = None
    why: str = ""


@dataclass
class Verdict:
    """The judgement of one comparison: correct (True/False/None), how, and why."""

    correct: bool | None
    check: CheckInfo
    note: str | None = None  # why correct is None
    mismatch: Mismatch | None = None  # why correct is False
    margin: float = 0.0  # the worst leaf's error over what was allowed


def compare(compiled: Observed, eager: Observed, fp64: Observed | None, tol: Tolerances) -> Verdict:
    """Compiled against eager and, where there is one, the float64 reference (see the module doc)."""
    unchecked = compiled.note or eager.note
    if unchecked:
        return Verdict(None, CheckInfo(method="none", compared=eager.compared), note=unchecked)
    missing = sorted(set(eager.leaves) ^ set(compiled.leaves))
    if missing:
        message = f"mismatch in structure: {', '.join(missing[:5])} only on one side"
        return Verdict(False, CheckInfo(method="equal", compared=eager.compared), mismatch=Mismatch(message))
    results: list[LeafCheck] = []
    for path, expected in eager.leaves.items():
        actual = compiled.leaves[path]
        reference = fp64.leaves.get(path) if fp64 is not None and tol.reference == "fp64" else None
        results.append(_judge(path, actual, expected, reference, tol))
    return _summarise(results, eager.compared, tol)


def deterministic(first: Observed, second: Observed, tol: Tolerances) -> str | None:
    """None when two eager runs agree (allclose at the tolerance, as the harness's ``same`` without
    a float64 reference); else where they differ."""
    if first.note or second.note or set(first.leaves) != set(second.leaves):
        return None if first.note or second.note else "the two runs return different structures"
    eager_only = Tolerances(tol.rtol, tol.atol, "eager", tol.training, tol.compute_dtype)
    for path, a in first.leaves.items():
        leaf = _judge(path, second.leaves[path], a, None, eager_only)
        if not leaf.passed:
            return f"{path}: {leaf.why}"
    return None


def _judge(path: str, actual: Any, expected: Any, reference: Any, tol: Tolerances) -> LeafCheck:
    if isinstance(expected, float) and isinstance(actual, float):
        actual, expected = torch.tensor(actual, dtype=torch.float32), torch.tensor(expected, dtype=torch.float32)
        reference = torch.tensor(reference, dtype=torch.float64) if isinstance(reference, float) else None
    if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
        same = _plain_equal(actual, expected)
        return LeafCheck(path, "equal", same, 0.0 if same else math.inf, why=f"{actual!r} != {expected!r}")
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        why = f"{actual.dtype}{list(actual.shape)} where eager gives {expected.dtype}{list(expected.shape)}"
        return LeafCheck(path, "equal", False, math.inf, why=why)
    if not (expected.is_floating_point() or expected.is_complex()):
        same = torch.equal(actual, expected)
        return LeafCheck(path, "equal", same, 0.0 if same else math.inf, why="values differ")
    return _judge_floating(path, actual, expected, reference, tol)


def _plain_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _judge_floating(
    path: str, actual: torch.Tensor, expected: torch.Tensor, reference: Any, tol: Tolerances
) -> LeafCheck:
    """The harness's rule for one floating tensor: non-finite values first (``_nonfinite``), then
    allclose, else RMSE against float64, else cosine, on the positions that are not NaN or Inf on
    every side alike."""
    dtype = tol.effective_dtype(expected.dtype if not expected.is_complex() else expected.real.dtype)
    rtol, atol = tol.for_dtype(dtype)
    a, e = _as_float64(actual), _as_float64(expected)
    ref = _as_float64(reference) if _is_reference(reference, expected) else None
    diff = (a - e).abs()
    finite = diff[diff.isfinite()]
    nonzero = e.abs() > 0
    leaf = LeafCheck(
        path,
        "allclose" if tol.reference == "eager" else ("fp64_rmse" if ref is not None else "cosine"),
        True,
        0.0,
        rtol,
        atol,
        max_abs=float(finite.max()) if finite.numel() else 0.0,
        max_rel=float((diff[nonzero] / e.abs()[nonzero]).nan_to_num(0.0).max()) if nonzero.any() else 0.0,
    )
    why = _nonfinite(a, e, ref)
    if why is not None:
        leaf.passed, leaf.margin, leaf.why = False, math.inf, why
        return leaf
    judged = ~_same_nonfinite(a, e)  # NaN or Inf alike in compiled, eager (and float64): equal
    numel = ref.numel() if ref is not None else a.numel()
    a, e, diff = a[judged], e[judged], diff[judged]
    if ref is not None:
        ref = ref[judged]
        leaf.rmse_compiled, leaf.rmse_eager = _rmse(ref, a), _rmse(ref, e)
    within = (diff / (atol + rtol * e.abs())).nan_to_num(0.0)
    if torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=False):
        leaf.margin = float(within.max()) if within.numel() else 0.0
        return leaf
    eager_nonfinite = int((~e.isfinite()).sum())  # where compiled is finite
    if tol.reference == "eager" or (ref is None and eager_nonfinite):
        leaf.passed, leaf.margin = False, max(float(within.max()), 1.0 + 1e-9)
        leaf.why = (
            f"max abs error {leaf.max_abs:.3g}, max rel error {leaf.max_rel:.3g} beyond rtol={rtol:g}, atol={atol:g}"
        )
        if eager_nonfinite:
            leaf.margin = math.inf
            leaf.why = f"{_count(eager_nonfinite)} where eager is non-finite and compiled is not; {leaf.why}"
        return leaf
    if ref is None:
        return _judge_cosine(leaf, a, e)
    half = dtype in (torch.float16, torch.bfloat16)
    return _judge_rmse(leaf, a, e, ref, half, numel)


def _same_nonfinite(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Where compiled and eager hold the same non-finite value: both NaN, or equal Infs."""
    return (a.isnan() & e.isnan()) | (a.isinf() & (a == e))


def _nonfinite(a: torch.Tensor, e: torch.Tensor, ref: torch.Tensor | None) -> str | None:
    """None when every NaN or Inf of the compiled result is one eager has too, at a position where
    the float64 reference (if any) is non-finite as well; else what was found, and where first."""
    bad = ~a.isfinite()
    if not bad.any():
        return None
    if ref is not None:
        where_fp64 = bad & ref.isfinite()
        if where_fp64.any():
            also = int((where_fp64 & ~e.isfinite()).sum())
            eager = f"; eager is non-finite at {also} of them" if also else ""
            return (
                f"{_count(where_fp64)} where the float64 reference is finite ({_first(where_fp64, a, e, ref)}){eager}"
            )
    where_eager = bad & ~_same_nonfinite(a, e)
    if where_eager.any():
        return f"{_count(where_eager)} where eager is finite or differs ({_first(where_eager, a, e, ref)})"
    return None


def _count(mask: torch.Tensor | int) -> str:
    n = int(mask.sum()) if isinstance(mask, torch.Tensor) else mask
    return f"{n} non-finite value{'s' if n != 1 else ''} (NaN/Inf)"


def _first(mask: torch.Tensor, a: torch.Tensor, e: torch.Tensor, ref: torch.Tensor | None) -> str:
    """The first position of ``mask`` and the values each side has there."""
    index = tuple(int(i) for i in mask.nonzero()[0])
    values = f"compiled {float(a[index]):g}, eager {float(e[index]):g}"
    if ref is not None:
        values += f", float64 {float(ref[index]):g}"
    return f"first at index {list(index)}: {values}"


def _as_float64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return (torch.view_as_real(t) if t.is_complex() else t).to(torch.float64)


def _is_reference(reference: Any, expected: torch.Tensor) -> bool:
    """Whether the float64 run gave this leaf. Its dtype is what the target returned there (a loss
    it computes in float32, say); like the harness, it is taken as the reference, in float64."""
    return (
        isinstance(reference, torch.Tensor)
        and (reference.is_floating_point() or reference.is_complex())
        and reference.is_complex() == expected.is_complex()
        and reference.shape == expected.shape
    )


def _judge_rmse(
    leaf: LeafCheck, a: torch.Tensor, e: torch.Tensor, ref: torch.Tensor, half: bool, numel: int
) -> LeafCheck:
    """``RMSE(compiled, fp64) <= m * RMSE(eager, fp64) + atol / 10`` on the positions judged, with
    the harness's exception: eager has NaN, compiled and float64 have none and agree within
    ``LOOSE_TOL``: compiled is the better result. ``numel``: the whole leaf's size, for ``m``."""
    rtol, atol = leaf.rtol or 0.0, leaf.atol or 0.0
    nan_only_in_eager = not ref.isnan().any() and not a.isnan().any() and e.isnan().any()
    if nan_only_in_eager and torch.allclose(ref, a, rtol=LOOSE_TOL, atol=LOOSE_TOL):  # compiled is the better
        return leaf
    rmse_c, rmse_e = leaf.rmse_compiled or 0.0, leaf.rmse_eager or 0.0
    leaf.multiplier = 3.0 if half or numel < SMALL_TENSOR or rtol >= 2e-2 else 2.0
    allowed = leaf.multiplier * rmse_e + atol / 10
    margin = rmse_c / allowed if allowed > 0 else math.inf  # NaN allowed (eager's RMSE): not > 0
    leaf.margin = math.inf if math.isnan(margin) else margin
    leaf.passed = leaf.margin <= 1.0
    leaf.why = (
        f"RMSE against float64 {rmse_c:.3g} > {leaf.multiplier:g} x eager's {rmse_e:.3g} + atol/10 {atol / 10:.3g} "
        f"(max abs error {leaf.max_abs:.3g}, max rel error {leaf.max_rel:.3g})"
    )
    if nan_only_in_eager:
        leaf.why += f"; eager has NaN and compiled is not within {LOOSE_TOL:g} of float64 either"
    return leaf


def _judge_cosine(leaf: LeafCheck, a: torch.Tensor, e: torch.Tensor) -> LeafCheck:
    leaf.method = "cosine"
    score = float(torch.nn.functional.cosine_similarity(a.flatten(), e.flatten(), dim=0, eps=1e-6))
    leaf.margin = (1 - score) / (1 - COSINE_MIN)
    leaf.passed = score >= COSINE_MIN
    leaf.why = f"cosine similarity {score:.4f} < {COSINE_MIN} (no float64 reference; max abs error {leaf.max_abs:.3g})"
    return leaf


def _rmse(reference: torch.Tensor, result: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean(torch.square(reference.to(torch.float64) - result.to(torch.float64)))))


def _summarise(results: list[LeafCheck], compared: list[str], tol: Tolerances) -> Verdict:
    floating = [r for r in results if r.method != "equal"]
    worst = max(results, key=lambda r: r.margin, default=None)
    if not floating:
        method: Method = "equal"
    elif tol.reference == "eager":
        method = "allclose"
    elif any(r.method == "cosine" for r in floating):
        method = "cosine"
    else:
        method = "fp64_rmse"
    decisive = max(floating, key=lambda r: r.margin, default=None)
    info = CheckInfo(
        method=method,
        rtol=decisive.rtol if decisive else None,
        atol=decisive.atol if decisive else None,
        multiplier=decisive.multiplier if decisive else None,
        max_abs_error=max((r.max_abs for r in floating), default=None),
        max_rel_error=max((r.max_rel for r in floating), default=None),
        rmse_compiled=decisive.rmse_compiled if decisive else None,
        rmse_eager=decisive.rmse_eager if decisive else None,
        compared=compared,
        worst=worst.path if worst is not None and worst.margin > 0 else None,
    )
    failed = [r for r in results if not r.passed]
    if failed:
        first = max(failed, key=lambda r: r.margin)
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        message = f"mismatch at {first.path or 'output'}: {first.why}{more}"
        return Verdict(False, info, mismatch=Mismatch(message), margin=first.margin)
    return Verdict(True, info, margin=worst.margin if worst is not None else 0.0)


def combine(verdicts: list[Verdict]) -> Verdict:
    """Several comparisons (inputs, replayed calls) as one: any failure fails; any unjudged leaves
    it unjudged; the check shown is that of the failure, or of the closest call to failing."""
    failed = [v for v in verdicts if v.correct is False]
    if failed:
        return failed[0]
    unjudged = [v for v in verdicts if v.correct is None]
    if unjudged:
        return unjudged[0]
    return max(verdicts, key=lambda v: v.margin)


# The check step of the procedure: references before compiling, then the compiled side's calls.


@dataclass
class References:
    """What the compiled side is judged against on one input tuple."""

    inputs: tuple[Any, ...]
    eager: Observed
    fp64: Observed | None  # None: no float64 run was possible (``fp64_note`` says why)
    fp64_note: str | None = None
    eager_differs: str | None = None  # where a second eager run differed from the first


def take_references(
    exp: Experiment, run: PhaseRun, eager_fn: Callable[..., Any], work: Workload, device: torch.device, mutated: bool
) -> list[References]:
    """For the timed inputs and each check input: eager's checked call, a second one to see that
    eager repeats itself, and the call of a float64 copy of the target (``check.reference: fp64``)."""
    tolerances = Tolerances.of(exp)
    eager_side = run.side(eager_fn)
    reference, note = None, None
    if exp.check.reference == "fp64":
        try:
            run64, fn64 = run.float64(eager_fn)
            reference = (run64, run64.side(fn64))
        except Exception as e:
            note = f"no float64 copy of the target ({type(e).__name__}: {first_line(e)})"
    found = []
    for inputs in [work.inputs, *work.check_inputs]:
        eager = checked_call(run, eager_side, inputs, exp.seed, mutated)
        again = checked_call(run, eager_side, inputs, exp.seed, mutated)
        fp64 = None
        if reference is not None:
            try:
                with precision.exact(device):
                    fp64 = checked_call(*reference, float64_inputs(inputs), exp.seed, mutated)
            except Exception as e:
                note = f"the float64 run failed ({type(e).__name__}: {first_line(e)})"
        found.append(References(inputs, eager, fp64, note, deterministic(eager, again, tolerances)))
    return found


def check_compiled(
    exp: Experiment,
    run: PhaseRun,
    compiled_side: Callable[..., Any],
    first: Observed,
    references: list[References],
    mutated: bool,
    replays: int,
) -> Verdict:
    """The compiled side's first call, its call after ``replays`` more (a CUDA graph replay under
    ``reduce-overhead``) and its call on every check input, each judged against the references."""
    if not exp.check.enabled:
        return Verdict(None, CheckInfo(method="none"), note="not checked: check.enabled is false")
    differs = next((r.eager_differs for r in references if r.eager_differs), None)
    if differs is not None:
        note = f"eager is not deterministic: two runs from the same seed and inputs differ at {differs}"
        return Verdict(None, CheckInfo(method="none", eager_deterministic=False), note=f"{note}; compiled not judged")
    tolerances = Tolerances.of(exp)
    main = references[0]
    later = first
    for _ in range(replays):
        later = checked_call(run, compiled_side, main.inputs, exp.seed, mutated)
    judged = [compare(first, main.eager, main.fp64, tolerances), compare(later, main.eager, main.fp64, tolerances)]
    for ref in references[1:]:
        observed = checked_call(run, compiled_side, ref.inputs, exp.seed, mutated)
        judged.append(compare(observed, ref.eager, ref.fp64, tolerances))
    verdict = combine(judged)
    verdict.check.eager_deterministic = True
    fp64_note = next((r.fp64_note for r in references if r.fp64_note), None)
    if fp64_note is not None and verdict.note is None:
        verdict.note = f"{fp64_note}: judged by cosine similarity"
    return verdict


def checked_inputs(run: PhaseRun, inputs: tuple[Any, ...], seed: int) -> tuple[Any, ...]:
    """Before a checked call: the saved training state back, the RNG reseeded, fresh input copies."""
    run.restore()
    torch.manual_seed(seed)
    random.seed(seed)
    return copy_inputs(inputs)


def checked_call(
    run: PhaseRun, side: Callable[..., Any], inputs: tuple[Any, ...], seed: int, mutated: bool
) -> Observed:
    inputs = checked_inputs(run, inputs, seed)
    return run.observe(side(*inputs), inputs, mutated)


def float64_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Floating input tensors as float64 copies (gradient requirement kept); others copied."""

    def widen(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        return t.detach().to(torch.float64).requires_grad_(t.requires_grad)

    return tuple(pytree.tree_map_only(torch.Tensor, widen, inputs))


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "no message"
