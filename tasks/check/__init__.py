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
