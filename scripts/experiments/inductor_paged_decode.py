"""Issue 18, tried and not kept (docs/performance.md). Run:
    .venv/bin/python scripts/experiments/inductor_paged_decode.py [float32|bfloat16]

Paged decode attention written as plain tensor ops that index the KV cache by slot
(`k_cache[slots]`), compiled by `torch.compile` (inductor). Inductor fuses the indexed
loads into its loops, so the compiled kernel reads each sequence's blocks in place: no
gathered copy of K/V is ever made. Measured two ways, because they disagree:

1. one layer's call in isolation (16 sequences of ~145 tokens, shuffled blocks), against
   the "torch" backend's gather + SDPA on the same data;
2. inside the real SmolLM2 forward pass (batch-16 decode step, context 128), three
   attention implementations alternating round by round: the "torch" backend, the
   compiled in-place kernel, and no attention at all (the floor).
"""
import json
import os
import sys
import time

import torch
import torch.fx.experimental._config as fx_config
import torch.nn.functional as F

from minillm import LLM
from minillm.attention.reference import write_kv
from minillm.attention.torch_paged import gather_blocks

from captured_steps import decode_batches, median_ms      # this folder


def paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale: float):
    """q [G, Hq, D], one query per sequence; caches [N, bs, Hkv, D]; block_tables [G, nb]
    → [G, Hq, D]. Every key is loaded from its slot in the cache (slot = block·bs + offset)."""
    G, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads = block_tables.shape[1], k_cache.shape[1], k_cache.shape[2]
    pos = torch.arange(num_blocks * block_size, device=q.device)                 # [L]
    slots = block_tables.long()[:, pos // block_size] * block_size + pos % block_size   # [G, L]
    keys = k_cache.reshape(-1, num_kv_heads, head_dim)[slots]                   # [G, L, Hkv, D]
    values = v_cache.reshape(-1, num_kv_heads, head_dim)[slots]
    qg = q.view(G, num_kv_heads, num_heads // num_kv_heads, head_dim).float()  # [G, Hkv, R, D]
    scores = (qg[:, None] * keys[:, :, :, None, :].float()).sum(-1) * scale      # [G, L, Hkv, R]
    hidden = (pos[None, :] >= seq_lens[:, None])[:, :, None, None]
    weights = scores.masked_fill(hidden, float("-inf")).softmax(dim=1)           # over L
    out = (weights[..., None] * values[:, :, :, None, :].float()).sum(1)        # [G, Hkv, R, D]
    return out.reshape(G, num_heads, head_dim).to(q.dtype)


compiled_decode = torch.compile(paged_decode, dynamic=True)


def call_compiled(*args):
    # without this, dynamo "duck-sizes" equal dims (16 sequences = block size 16) into one
    # symbol and recompiles when they differ
    with fx_config.patch(use_duck_shape=False):
        return compiled_decode(*args)


def gather_and_sdpa(q, k_cache, v_cache, ids, mask, scale):
    """The "torch" backend's decode path: block ids and mask are made once per step and
    shared by every layer, so they are arguments here too."""
    G, num_heads, head_dim = q.shape
    num_kv_heads, L = k_cache.shape[2], mask.shape[-1]
    keys, values = gather_blocks(k_cache, ids, (G, L)), gather_blocks(v_cache, ids, (G, L))
    out = F.scaled_dot_product_attention(q.view(G, num_kv_heads, -1, head_dim), keys, values,
                                         attn_mask=mask, scale=scale)
    return out.reshape(G, num_heads, head_dim)


def isolated(dtype, result):
    torch.manual_seed(0)
    N, bs, Hkv, D, G, nb = 400, 16, 3, 64, 16, 10
    k_cache, v_cache = torch.randn(N, bs, Hkv, D, dtype=dtype), torch.randn(N, bs, Hkv, D, dtype=dtype)
    tables = torch.randperm(N)[:G * nb].view(G, nb).int()
    lens = torch.randint(130, 160, (G,))
    q = torch.randn(G, 3 * Hkv, D, dtype=dtype)
    args = (q, k_cache, v_cache, tables, lens, D ** -0.5)
    L = nb * bs
    mask = torch.zeros(G, 1, 1, L, dtype=dtype).masked_fill(
        (torch.arange(L)[None] >= lens[:, None])[:, None, None], float("-inf"))
    reference_args = (q, k_cache, v_cache, tables.long().reshape(-1), mask, D ** -0.5)
    start = time.perf_counter()
    out = call_compiled(*args)
    result["compile_s"] = round(time.perf_counter() - start, 1)
    result["isolated_max_abs_err"] = (out.float() - gather_and_sdpa(*reference_args).float()).abs().max().item()
    result["isolated_ms_median_of_200"] = {"compiled_in_place": round(median_ms(lambda: call_compiled(*args), 200), 3),
                                           "gather_plus_sdpa": round(median_ms(lambda: gather_and_sdpa(*reference_args), 200), 3)}


class CompiledBackend:
    """Writes the step's K/V like every backend, then attends with the compiled kernel
    (decode-only steps: one group, no prefill rows)."""
    name = "inductor"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping, True)
        num_blocks = -(-max(meta.seq_lens_list) // k_cache.shape[1])
        return call_compiled(q, k_cache, v_cache, meta.block_tables[:, :num_blocks], meta.seq_lens, scale)


class NoAttention:
    name = "none"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        return q


def in_forward(dtype_name, result, rounds=5, steps_per_round=10):
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype_name)
    batch = decode_batches(llm, sizes=(16,))[16]                 # a batch-16 decode step
    runner = llm.llm_engine.runner

    def forward(backend):
        batch.meta.scratch.clear()
        return runner.model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                            batch.logits_indices, backend)
    backends = {"torch": runner.backend, "inductor_in_place": CompiledBackend(), "no_attention": NoAttention()}
    start = time.perf_counter()
    forward(backends["inductor_in_place"])
    result["in_forward_compile_s"] = round(time.perf_counter() - start, 1)
    result["in_forward_max_logit_diff"] = (forward(backends["torch"]) - forward(backends["inductor_in_place"])).abs().max().item()
    medians = {name: [] for name in backends}
    for r in range(rounds):
        order = list(backends) if r % 2 == 0 else list(backends)[::-1]
        for name in order:
            medians[name].append(round(median_ms(lambda: forward(backends[name]), steps_per_round), 1))
    result["in_forward_step_ms_per_round"] = medians
    result["in_forward_step_ms_median"] = {n: sorted(v)[len(v) // 2] for n, v in medians.items()}


if __name__ == "__main__":
    dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
    torch.set_num_threads(2)
    result = {"dtype": dtype_name, "load_avg_start": os.getloadavg()}
    isolated(getattr(torch, dtype_name), result)
    in_forward(dtype_name, result)
    result["load_avg_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))
