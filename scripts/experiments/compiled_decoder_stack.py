"""Issue 18, tried and not kept (minillm/PERFORMANCE.md). Run:
    .venv/bin/python scripts/experiments/compiled_decoder_stack.py [float32|bfloat16]

All 30 decoder layers under one `torch.compile` (inductor, dynamic shapes), so Python and
the dispatcher leave the step and inductor fuses every element-wise chain (RMSNorm,
RoPE, SiLU·up, residual adds). Two things stay opaque custom ops, because inductor
cannot take them: the packed oneDNN matmuls (its mkldnn lowering wants the weight as a
graph constant) and the paged attention (the "torch" backend, which plans on Python
lists). Eager vs compiled forward pass, batch-1 and batch-16 decode steps at context
128, alternating rounds; compile time and the largest logit difference are reported.
"""
import json
import os
import sys
import time

import torch

from minillm import LLM
from minillm.packed_linear import Linear, linear

from captured_steps import decode_batches, median_ms      # this folder

dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
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


def opaque_linear_forward(self, x):
    return torch.ops.experiment.packed_linear(x, self.packed.data, self.out_features)


def decoder_stack(h, cos, sin, kv_caches):
    attention = OpaqueAttention()
    for layer, cache in zip(model.layers, kv_caches):
        h = layer(h, (cos, sin), cache, None, attention)
    return h


compiled_stack = torch.compile(decoder_stack, dynamic=True)


@torch.inference_mode()
def forward(batch, compiled: bool):
    batch.meta.scratch.clear()
    if not compiled:
        return model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                     batch.logits_indices, torch_backend)
    current["meta"] = batch.meta
    h = model.embed_tokens(batch.input_ids)
    cos, sin = model.rope.cos_sin(batch.positions, h.dtype)
    eager_forward, Linear.forward = Linear.forward, opaque_linear_forward
    try:
        h = compiled_stack(h, cos, sin, runner.kv_caches)
    finally:
        Linear.forward = eager_forward
    h = model.norm(h[batch.logits_indices])
    return linear(h, model.embed_tokens.weight, packed=model.lm_head_packed).float()


if __name__ == "__main__":
    batches = {f"batch {n}": step for n, step in sorted(decode_batches(llm, sizes=(1, 16)).items())}
    result = {"dtype": dtype_name, "load_avg_start": os.getloadavg()}
    for name, batch in batches.items():              # first call of each shape compiles
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
                rounds.setdefault(key, []).append(round(median_ms(lambda: forward(batch, compiled), 10), 1))
    result["rounds"] = rounds
    result["median"] = {k: sorted(v)[len(v) // 2] for k, v in rounds.items()}
    result["load_avg_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))
