"""Issue 18: the decoder stack compiled with inductor's freezing and C++ wrapper. Run:
    .venv/bin/python scripts/experiments/compiled_stack_frozen.py float32|bfloat16 [0|1]

`compiled_decoder_stack.py` kept the packed oneDNN matmuls as opaque custom ops and got
-5-7 %. Here the 30 layers' `Linear`s are plain `F.linear` while tracing, and
`torch._inductor.config.freezing` turns their weights into graph constants, so inductor
packs them itself (its oneDNN lowering) and fuses the element-wise chains around them;
the second argument (default 1) sets `cpp_wrapper`, which generates the code that calls
the kernels in C++ instead of Python. Only the paged attention stays an opaque custom op
(the engine's default CPU backend, which plans on Python lists). Eager vs compiled
forward pass at batch 1, 4 and 16, context ~128, alternating over 5 rounds (median of 10
calls each, then the median round); first-call (compile) times and the largest logit
difference at batch 16 are reported. Batch 1 and batch 4 compile separately (dynamo
specializes a size of 1), batch 16 reuses the dynamic graph of batch 4.
"""
import json
import sys
import time


import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F

from captured_steps import decode_batches, median_ms      # this folder
from minillm import LLM
from minillm.packed_linear import Linear, linear

dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
inductor_config.freezing = True
inductor_config.cpp_wrapper = (sys.argv[2] if len(sys.argv) > 2 else "1") == "1"
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


class OpaqueAttention:
    name = "opaque"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        return torch.ops.experiment.paged_attention(q, k, v, k_cache, v_cache, scale)


class Stack(torch.nn.Module):
    """The 30 decoder layers as one module, so freezing sees their weights as constants."""

    def __init__(self, layers):
        super().__init__()
        self.layers = layers

    def forward(self, h, cos, sin, kv_caches):
        attention = OpaqueAttention()
        for layer, cache in zip(self.layers, kv_caches):
            h = layer(h, (cos, sin), cache, None, attention)
        return h


stack = Stack(model.layers)
compiled = torch.compile(stack, dynamic=True)


def plain(self, x):                 # Linear.forward while tracing: inductor packs the weight
    return F.linear(x, self.weight, self.bias)


@torch.inference_mode()
def forward(batch, use_compiled):
    batch.meta.scratch.clear()
    if not use_compiled:
        return model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                     batch.logits_indices, torch_backend)
    current["meta"] = batch.meta
    h = model.embed_tokens(batch.input_ids)
    cos, sin = model.rope.cos_sin(batch.positions, h.dtype)
    eager, Linear.forward = Linear.forward, plain
    try:
        h = compiled(h, cos, sin, runner.kv_caches)
    finally:
        Linear.forward = eager
    h = model.norm(h[batch.logits_indices])
    return linear(h, model.embed_tokens.weight, packed=model.lm_head_packed).float()


if __name__ == "__main__":
    batches = {f"batch {n}": step for n, step in sorted(decode_batches(llm, sizes=(1, 4, 16)).items())}
    result = {"dtype": dtype_name, "cpp_wrapper": inductor_config.cpp_wrapper}
    for name, batch in batches.items():              # the first call of a shape compiles
        start = time.perf_counter()
        forward(batch, True)
        result[f"first call, {name} (s)"] = round(time.perf_counter() - start, 1)
    result["max_logit_diff, batch 16"] = (forward(batches["batch 16"], False)
                                          - forward(batches["batch 16"], True)).abs().max().item()
    rounds = {}
    for r in range(5):
        for name, batch in batches.items():
            for compiled_first in ((False, True) if r % 2 == 0 else (True, False)):
                key = f"{name} {'compiled' if compiled_first else 'eager'} (ms)"
                rounds.setdefault(key, []).append(
                    round(median_ms(lambda: forward(batch, compiled_first), 10), 1))
    result["median"] = {k: sorted(v)[len(v) // 2] for k, v in rounds.items()}
    print(json.dumps(result, indent=1))
