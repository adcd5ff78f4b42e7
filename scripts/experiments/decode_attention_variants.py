"""Issue 18: what one layer's decode attention costs, piece by piece, on this CPU.
    .venv/bin/python scripts/experiments/decode_attention_variants.py

One decode group as the torch backend builds it (16 sequences of 130-144 tokens, 9
query / 3 KV heads, head size 64, blocks of 16 scattered in a 400-block cache), hot in
cache, 2 threads, median of 200 calls, microseconds: the backend's gather + SDPA, the
same with matmul + softmax, SDPA alone on gathered K/V (with and without the mask, on
contiguous K/V, forced to the math kernel), the two gathers alone, and SDPA on one
sequence (its fixed cost)."""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from captured_steps import median_ms          # this folder

G, HQ, HKV, D, BS, NB, POOL = 16, 9, 3, 64, 16, 9, 400


def median_us(fn, n=200):
    """Median wall time of `n` calls of `fn` after 10 untimed ones, in µs."""
    for _ in range(10):
        fn()
    return median_ms(fn, n) * 1e3


def variants(dtype):
    k_cache, v_cache = (torch.randn(POOL, BS, HKV, D).to(dtype) for _ in range(2))
    block_ids = torch.randperm(POOL)[:G * NB]
    q = torch.randn(G, HKV, HQ // HKV, D).to(dtype)                    # query heads grouped
    lens = torch.randint(130, 145, (G,))
    hidden = (torch.arange(NB * BS)[None] >= lens[:, None])[:, None, None, :]   # [G, 1, 1, L]
    mask = torch.zeros(hidden.shape, dtype=dtype).masked_fill(hidden, float("-inf"))
    scale = D ** -0.5

    def gather(cache):                                                  # [G, HKV, L, D]
        return cache.view(POOL, -1).index_select(0, block_ids).view(G, NB * BS, HKV, D).transpose(1, 2)

    def matmul_softmax():
        keys, values = gather(k_cache), gather(v_cache)
        scores = torch.matmul(q, keys.transpose(-1, -2)).mul_(scale).add_(mask)
        return torch.matmul(scores.softmax(-1), values)

    keys, values = gather(k_cache), gather(v_cache)
    keys_c, values_c = keys.contiguous(), values.contiguous()

    def math_kernel():
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale)
    return {
        "gather + SDPA (the backend)": lambda: F.scaled_dot_product_attention(
            q, gather(k_cache), gather(v_cache), attn_mask=mask, scale=scale),
        "gather + matmul + softmax": matmul_softmax,
        "SDPA alone": lambda: F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale),
        "SDPA alone, no mask": lambda: F.scaled_dot_product_attention(q, keys, values, scale=scale),
        "SDPA alone, contiguous K/V": lambda: F.scaled_dot_product_attention(
            q, keys_c, values_c, attn_mask=mask, scale=scale),
        "SDPA alone, math kernel": math_kernel,
        "the two gathers": lambda: (gather(k_cache), gather(v_cache)),
        "SDPA on one sequence": lambda: F.scaled_dot_product_attention(
            q[:1], keys[:1], values[:1], attn_mask=mask[:1], scale=scale),
    }


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        print(dtype)
        for name, fn in variants(dtype).items():
            print(f"  {name:28s} {median_us(fn):7.1f} us", flush=True)
