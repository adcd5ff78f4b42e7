"""Issue 18: two short decodes per SDPA problem, hot and in a real step (not kept).
    .venv/bin/python scripts/experiments/paired_decode_problems.py [float32|bfloat16]

1. Hot in cache, one layer: G decodes (3 query heads per K/V head, 3 K/V heads, head
   size 64) against L keys each, as the torch backend calls SDPA — one problem per
   (sequence, K/V head) — and packed two sequences per problem (6 queries against 2L
   keys, a block-diagonal mask). 20 alternating rounds, median of 5 calls, µs.
2. A real decode step's attention: the 30 layers' backend calls on a step captured from
   the engine (`captured_steps.py`, ~128 tokens of context, KV cache as the engine left
   it), the torch backend against commit `PAIRED` (the same backend packing decode
   groups of ≤ 256 keys two to a problem, imported beside it by `git_versions`), 15
   alternating rounds, ms, with the median and range of the per-round ratios."""
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from captured_steps import decode_batches, median_ms                 # this folder
from minillm import LLM
from minillm.attention import TorchAttention
from minillm.attention.torch_paged import gather_blocks
from benchmarks import ab
from benchmarks.git_versions import load_version

PAIRED = "10a3398"      # the commit that packed them (reverted by the next one)
HKV, SHARE, D, BS, POOL = 3, 3, 64, 16, 3000


def sdpa_call(G: int, L: int, per: int, dtype, k_cache, v_cache):
    """SDPA over G decodes of ≤ L keys, `per` sequences packed into each problem."""
    n = -(-G // per)
    ids = torch.randperm(POOL)[:n * per * (L // BS)]
    lens = torch.randint(L - BS + 1, L + 1, (n * per,))
    q = torch.randn(n * per, HKV, SHARE, D, dtype=dtype)
    keys, values = (gather_blocks(c, ids, (n, per * L)) for c in (k_cache, v_cache))   # [n, Hkv, per·L, D]
    q = q.view(n, per, HKV, SHARE, D).transpose(1, 2).reshape(n, HKV, per * SHARE, D)
    pos = torch.arange(per * L)
    visible = ((pos // L)[None, None] == torch.arange(per)[None, :, None]) & \
        ((pos % L)[None, None] < lens.view(n, per, 1))                    # [n, per, per·L]
    visible = visible.repeat_interleave(SHARE, 1)[:, None]                # [n, 1, per·3, per·L]
    mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, float("-inf"))
    return lambda: F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=D ** -0.5)


def hot_sdpa(dtype) -> None:
    k_cache, v_cache = (torch.randn(POOL, BS, HKV, D, dtype=dtype) for _ in range(2))
    for G in (4, 16):
        for L in (48, 144, 256, 512, 1024):
            calls = {per: sdpa_call(G, L, per, dtype, k_cache, v_cache) for per in (1, 2)}
            runners = {per: (lambda c=c: {"us": 1e3 * median_ms(c, 5)}) for per, c in calls.items()}
            t = {per: m["us"] for per, m in ab.medians(ab.alternate(runners, 20)).items()}
            print(f"  hot SDPA, G={G:2d}, L={L:4d}: one per problem {t[1]:7.1f} us, "
                  f"two per problem {t[2]:7.1f} us ({t[1] / t[2]:.2f}x)", flush=True)


def real_step_attention(dtype_name: str, paired_backend) -> None:
    dtype = getattr(torch, dtype_name)
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype_name)
    for size, batch in decode_batches(llm, sizes=(16, 8, 4)).items():
        q = torch.randn(size, HKV * SHARE, D, dtype=dtype)                  # [B, Hq, D]
        k, v = (torch.randn(size, HKV, D, dtype=dtype) for _ in range(2))   # [B, Hkv, D]

        def attention(backend, batch=batch):        # every layer's call, as in one step
            batch.meta.scratch.clear()
            for k_cache, v_cache in llm.llm_engine.runner.kv_caches:
                backend(q, k, v, k_cache, v_cache, batch.meta, D ** -0.5)
        backends = {"one": TorchAttention(), "two": paired_backend}
        runners = {n: (lambda b=b: {"ms": median_ms(lambda: attention(b), 10)})
                   for n, b in backends.items()}
        runs = ab.alternate(runners, 15)
        ratio = ab.summary(ab.paired_ratios(runs, "one", "two", "ms"))
        t = {n: m["ms"] for n, m in ab.medians(runs).items()}
        print(f"  real step, batch {size:2d}, 30 layers' attention: one per problem {t['one']:.2f} ms, "
              f"two {t['two']:.2f} ms; per-round ratio median {ratio['median']:.3f} "
              f"(range {ratio['min']:.3f}-{ratio['max']:.3f})", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(0)
    dtype_name = sys.argv[1] if len(sys.argv) > 1 else "float32"
    print(dtype_name)
    hot_sdpa(getattr(torch, dtype_name))
    with tempfile.TemporaryDirectory() as folder:
        real_step_attention(dtype_name, load_version(PAIRED, Path(folder)).attention())
