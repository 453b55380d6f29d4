"""Work counting: FLOPs against the analytic formulas, the bytes lower bound, never raising."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tasks.models import WorkInfo
from tasks.targets import build
from tasks.throughput import Throughput, achieved
from tasks.work import count_work, tensor_bytes

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[1]


def work_of(target: str, params: dict, phase: str = "inference") -> WorkInfo:
    torch.manual_seed(0)
    w = build(target, CPU, params)
    notes: list[str] = []
    info = count_work(w.fn, w.inputs, phase=phase, loss_fn=w.loss_fn, notes=notes)
    assert notes == []
    return info


def linear(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out  # a multiply-add is 2 FLOPs


def sdpa(batch: int, seq: int, dim: int) -> int:
    return 4 * batch * seq * seq * dim  # Q @ K^T and P @ V over every head; causal counts the full square


# Training: each Linear's backward is 2x its forward (grad of input, grad of weight), except the grad
# of an input that needs none (the first layer of a block, whose input does not require grad);
# SDPA's backward is 2.5x its forward (scores recomputed, four more products), as PyTorch counts it.


def test_mlp_flops_match_two_linears():
    b, s, d, h = 2, 8, 16, 48
    fc, proj = linear(b * s, d, h), linear(b * s, h, d)
    params = {"batch": b, "seq": s, "dim": d, "hidden": h}
    assert work_of("blocks.mlp", params).flops == fc + proj
    assert work_of("blocks.mlp", params, "training").flops == (fc + proj) + (fc + 2 * proj)


def test_attention_flops_match_projections_plus_sdpa():
    b, s, d, heads = 2, 16, 32, 4
    qkv, out, attn = linear(b * s, d, 3 * d), linear(b * s, d, d), sdpa(b, s, d)
    for causal in (True, False):  # PyTorch's SDPA formula does not discount the causal mask
        params = {"batch": b, "seq": s, "dim": d, "heads": heads, "causal": causal}
        assert work_of("blocks.attention", params).flops == qkv + attn + out
        assert (
            work_of("blocks.attention", params, "training").flops
            == (qkv + attn + out) + (qkv + 2 * out) + 5 * attn // 2
        )


def test_gpt_flops_match_the_decoder_formula():
    b, s, layers, d, vocab = 2, 16, 3, 32, 100
    t = b * s
    per_layer_linear = linear(t, d, 3 * d) + linear(t, d, d) + linear(t, d, 4 * d) + linear(t, 4 * d, d)  # 24 t d^2
    assert per_layer_linear == 24 * t * d * d
    dense = layers * per_layer_linear + linear(t, d, vocab)  # LM head; embeddings are lookups, 0 FLOPs
    attn = layers * sdpa(b, s, d)
    params = {"batch": b, "seq": s, "layers": layers, "dim": d, "heads": 4, "vocab": vocab}
    assert work_of("models.gpt", params).flops == dense + attn
    # Every Linear also gets its input's gradient: the embeddings below the first layer need it.
    assert work_of("models.gpt", params, "training").flops == 3 * dense + attn + 5 * attn // 2


def test_conv_flops_and_memory_bound_blocks_count_zero():
    b, cin, cout, size, k = 2, 3, 8, 10, 3
    params = {"batch": b, "in_channels": cin, "channels": cout, "size": size, "kernel": k}
    assert work_of("blocks.conv_bn_relu", params).flops == 2 * b * cout * size * size * cin * k * k
    # FlopCounterMode counts matmul/conv/attention only: normalisation, GELU and softmax are 0.
    assert work_of("blocks.layernorm_gelu", {"batch": 2, "seq": 4, "dim": 8}).flops == 0
    softmax = build("blocks.softmax", CPU, {"batch": 1, "heads": 2, "seq": 8})
    scores = softmax.inputs[0].requires_grad_()  # trained by its input, as the procedure does
    assert count_work(softmax.fn, (scores,), phase="training") == WorkInfo(flops=0, bytes=3 * 4 * 2 * 8 * 8)


def test_bytes_are_inputs_parameters_outputs_and_gradients():
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    floats = 2 * 4 + (3 * 4 + 3) + 2 * 3  # input, weight and bias, output
    assert count_work(lin, (x,)).bytes == 4 * floats
    assert count_work(lin, (x,), phase="training").bytes == 4 * (floats + 3 * 4 + 3)  # + dW, db (x needs no grad)
    assert count_work(lin.half(), (x.half(),)).bytes == 2 * floats


def test_bytes_count_a_shared_storage_once_at_its_largest_view():
    x = torch.randn(10, 10)
    assert count_work(lambda t: t, (x,)).bytes == 400  # the output is the input
    assert count_work(lambda t: t[:2], (x,)).bytes == 400  # a view of it
    assert tensor_bytes([x[:5], x, x[5:]]) == 400
    assert tensor_bytes([torch.empty(3, device="meta")]) == 0


def test_outputs_of_unknown_structure_are_walked_for_tensors():
    class Cache:  # e.g. a library's key-value cache: no pytree registration, tensors in attributes
        def __init__(self, t):
            self.layers = [{"k": t, "v": t + 1}]

    x = torch.randn(8)
    assert count_work(lambda t: {"logits": t * 2, "cache": Cache(t), "name": "out"}, (x,)).bytes == 4 * 8 * 3


def test_count_work_never_raises_and_says_why():
    def failing(x):
        raise RuntimeError("boom\nsecond line")

    notes: list[str] = []
    assert count_work(failing, (torch.ones(2),), notes=notes) == WorkInfo(flops=None, bytes=None)
    assert notes == ["FLOPs not counted: RuntimeError: boom", "bytes not counted: RuntimeError: boom"]

    notes = []
    nothing_to_train = count_work(lambda x: x * 2, (torch.ones(2),), phase="training", notes=notes)
    assert nothing_to_train == WorkInfo()
    assert "requires grad" in notes[0]
    assert count_work(lambda x: x * 2, (torch.ones(2),), phase="training") == WorkInfo()  # without notes too


def test_a_target_flop_counting_cannot_trace_still_gets_its_bytes():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    def refuses_dispatch_modes(x):  # stands for any call that breaks under a TorchDispatchMode
        if _get_current_dispatch_mode() is not None:
            raise NotImplementedError("cannot run under a dispatch mode")
        return x @ x

    x = torch.randn(4, 4)
    notes: list[str] = []
    info = count_work(refuses_dispatch_modes, (x,), notes=notes)
    assert info == WorkInfo(flops=None, bytes=2 * 64)
    assert notes == ["FLOPs not counted: NotImplementedError: cannot run under a dispatch mode"]


def test_counting_leaves_no_trace_on_rng_buffers_or_grads():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5)).train()
    x = torch.randn(8, 4, requires_grad=True)
    buffers = [b.clone() for b in module.buffers()]
    rng = torch.get_rng_state()
    info = count_work(module, (x,), phase="training")
    assert info.flops == 2 * linear(8, 4, 4) + linear(8, 4, 4)  # forward, grad of input, grad of weight
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(a, b) for a, b in zip(buffers, module.buffers(), strict=True))
    assert x.grad is None and all(p.grad is None for p in module.parameters())


def test_counts_under_autocast_and_of_a_bound_method():
    torch.manual_seed(0)
    w = build("models.gpt", CPU, {"batch": 1, "seq": 8, "layers": 1, "dim": 16, "heads": 2, "vocab": 32})
    fp32 = count_work(w.fn, w.inputs, phase="training", loss_fn=w.loss_fn)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = count_work(w.fn, w.inputs, phase="training", loss_fn=w.loss_fn)
    assert amp.flops == fp32.flops
    assert count_work(w.fn.forward, w.inputs).bytes == count_work(w.fn, w.inputs).bytes  # parameters found


def test_achieved_throughput():
    work = WorkInfo(flops=2 * 10**12, bytes=5 * 10**9)
    assert achieved(work, 1000.0) == Throughput(tflops=2.0, gbps=5.0)
    assert achieved(work, 2.0) == pytest.approx(Throughput(1000.0, 2500.0))
    assert achieved(WorkInfo(flops=0, bytes=100), 1.0) == Throughput(None, pytest.approx(1e-4))
    assert achieved(None, 1.0) == Throughput(None, None)
    assert achieved(work, None) == achieved(work, 0.0) == Throughput(None, None)


def test_throughput_imports_without_torch():
    code = "import sys, tasks.throughput\nassert 'torch' not in sys.modules\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
