"""Judging one call's leaves against eager's and the float64 reference's, as PyTorch's dynamo
harness does (``torch._dynamo.utils.same``): tolerances by dtype and phase, allclose, RMSE against
float64, cosine, NaN and Inf (see ``tasks.check``, steps 2-4); verdicts and their combination."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from tasks import precision
from tasks.check.outputs import Observed
from tasks.models import CheckInfo, CheckReference, Experiment

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


Method = Literal["fp64_rmse", "allclose", "cosine", "equal", "none"]


class Mismatch(AssertionError):
    """The compiled side's result failed the check; the message says where and by how much."""


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
    # Finite everywhere (both sides finite): the common case, judged without the masks that copy every value.
    everywhere = bool(diff.isfinite().all())
    finite = diff if everywhere else diff[diff.isfinite()]
    magnitude = e.abs()
    nonzero = magnitude > 0
    leaf = LeafCheck(
        path,
        "allclose" if tol.reference == "eager" else ("fp64_rmse" if ref is not None else "cosine"),
        True,
        0.0,
        rtol,
        atol,
        max_abs=float(finite.max()) if finite.numel() else 0.0,
        max_rel=float(torch.where(nonzero, diff / magnitude, 0.0).nan_to_num(0.0).max()) if nonzero.any() else 0.0,
    )
    why = None if everywhere else _nonfinite(a, e, ref)
    if why is not None:
        leaf.passed, leaf.margin, leaf.why = False, math.inf, why
        return leaf
    numel = ref.numel() if ref is not None else a.numel()
    if not everywhere:
        judged = ~_same_nonfinite(a, e)  # NaN or Inf alike in compiled, eager (and float64): equal
        a, e, diff = a[judged], e[judged], diff[judged]
        ref = ref[judged] if ref is not None else None
    if ref is not None:
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
