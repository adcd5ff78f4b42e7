"""Issue 18, tried and not kept (docs/performance.md). Run:
    .venv/bin/python scripts/experiments/compiled_decoder_stack.py [float32|bfloat16] [MODE]

All 30 decoder layers under one `torch.compile` (inductor, dynamic shapes), so inductor
fuses every element-wise chain (RMSNorm, RoPE, SiLU·up, residual adds). The paged
attention always stays an opaque custom op (the engine's default CPU backend, which
plans on Python lists). MODE says what happens to the weight matmuls:

* `opaque` (default): the packed oneDNN matmuls stay opaque custom ops too (inductor's
  own mkldnn lowering wants the weight as a graph constant);
* `frozen`: the layers' `Linear`s are plain `F.linear` while tracing and
  `torch._inductor.config.freezing` makes their weights graph constants, so inductor
  packs them itself; `cpp_wrapper` calls the kernels from generated C++ instead of Python;
* `frozen-python`: the same, with inductor's default Python wrapper.

Eager vs compiled forward pass, decode steps of 1, 4 and 16 sequences at context ~128,
alternating over 5 rounds (median of 10 calls each, then the median round); first-call
(compile) times and the largest logit difference at batch 16 are reported. Dynamo
specializes a size of 1, so batch 1 compiles a graph of its own and batch 16 reuses the
dynamic graph compiled for batch 4.
"""
import json
import os
import sys
import time

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F

from captured_steps import decode_batches, median_ms      # this folder
from minillm import LLM
from minillm_cpu.packed_linear import Linear, linear

MODES = ("opaque", "frozen", "frozen-python")
dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
mode = sys.argv[2] if len(sys.argv) > 2 else "opaque"
if mode not in MODES:
    sys.exit(f"MODE must be one of {MODES}, got {mode!r}")
inductor_config.freezing = mode != "opaque"
inductor_config.cpp_wrapper = mode == "frozen"
torch.set_num_threads(2)
llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype_name)
runner = llm.llm_engine.runner
model, torch_backend = runner.model, runner.backend
current = {}                     # the step's attention metadata, for the opaque op


@torch.library.custom_op("experiment::paged_attention", mutates_args=("k_cache", "v_cache"))
def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, scale: float) -> torch.Tensor:
    return torch_backend(q, k, v, k_cache, v_cache, current["meta"], scale).clone()


@paged_attention.register_fake
def _(q, k, v, k_cache, v_cache, scale):
    return torch.empty_like(q)


@torch.library.custom_op("experiment::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


@packed_linear.register_fake
def _(x, packed, out_features):
    return x.new_empty(x.shape[0], out_features)


class OpaqueAttention:
    name = "opaque"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        return torch.ops.experiment.paged_attention(q, k, v, k_cache, v_cache, scale)


def traced_linear_forward(self, x):
    """Linear.forward while tracing: an opaque packed call, or plain F.linear for freezing."""
    if mode == "opaque":
        return torch.ops.experiment.packed_linear(x, self.packed.data, self.out_features)
    return F.linear(x, self.weight, self.bias)


class DecoderStack(torch.nn.Module):
    """The 30 decoder layers as one module (so freezing sees their weights as constants)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = layers

    def forward(self, h, cos, sin, kv_caches):
        attention = OpaqueAttention()
        pending = None                       # each layer's MLP output, added by the next
        for layer, cache in zip(self.layers, kv_caches):
            h, pending = layer(h, pending, (cos, sin), cache, None, attention)
        return h + pending


compiled_stack = torch.compile(DecoderStack(model.layers), dynamic=True)


@torch.inference_mode()
def forward(batch, compiled: bool):
    batch.meta.scratch.clear()
    if not compiled:
        return model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                     batch.logits_indices, torch_backend)
    current["meta"] = batch.meta
    h = model.embed_tokens(batch.input_ids)
    cos, sin = model.rope.cos_sin(batch.positions, h.dtype)
    eager_forward, Linear.forward = Linear.forward, traced_linear_forward
    try:
        h = compiled_stack(h, cos, sin, runner.kv_caches)
    finally:
        Linear.forward = eager_forward
    h = model.norm(h[batch.logits_indices])
    return linear(h, model.embed_tokens.weight, packed=model.lm_head_packed).float()


if __name__ == "__main__":
    batches = {f"batch {n}": step for n, step in sorted(decode_batches(llm, sizes=(1, 4, 16)).items())}
    result = {"dtype": dtype_name, "mode": mode, "load_avg_start": os.getloadavg()}
    for name, batch in batches.items():              # the first call of a shape compiles
        start = time.perf_counter()
        forward(batch, True)
        result[f"first call, {name} (s)"] = round(time.perf_counter() - start, 1)
    result["max_logit_diff, batch 16"] = (forward(batches["batch 16"], False)
                                          - forward(batches["batch 16"], True)).abs().max().item()
    rounds = {}
    for r in range(5):
        for name, batch in batches.items():
            for compiled in ((False, True) if r % 2 == 0 else (True, False)):
                key = f"{name} {'compiled' if compiled else 'eager'} (ms)"
                rounds.setdefault(key, []).append(
                    round(median_ms(lambda: forward(batch, compiled), 10), 1))
    result["rounds"] = rounds
    result["median"] = {k: sorted(v)[len(v) // 2] for k, v in rounds.items()}
    result["load_avg_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))
