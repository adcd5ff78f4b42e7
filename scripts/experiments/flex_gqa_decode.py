"""Issue 18: FlexAttention reading the paged cache in place, one sequence per batch entry.
    .venv/bin/python scripts/experiments/flex_gqa_decode.py [float32|bfloat16] [G] [CONTEXT]

`flex_paged_attention.py` put every decode in one batch-1 problem, one query row per
sequence, so a query tile mixed sequences and visited all their blocks. Here each
sequence is its own batch entry and the Hq/Hkv query heads that share a K/V head are
that head's query rows ([G, Hkv, Hq/Hkv, D], as the torch backend groups them), so a
tile belongs to one sequence: its block mask (`BlockMask.from_kv_blocks`, blocks of 16
slots) lists that sequence's physical blocks — the full ones, plus the last one with a
`mask_mod` that hides its unused tail. K/V are the layer's cache seen as
`[1, Hkv, slots, D]`, a view. `torch.compile(flex_attention)` lowers it to inductor's
C++ flex template on the CPU. Against the sparse and torch backends on the same step
(block table scattered, one layer, hot in cache, median of 5 × 60 calls after warm-up)."""
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from minillm.attention import SparseAttention, TorchAttention
from minillm.model.batch import build_attention_metadata

BS, HQ, HKV, D, POOL = 16, 9, 3, 64, 400


def best_us(fn, calls=60, repeats=5):
    for _ in range(10):
        fn()
    best = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best.append((time.perf_counter() - start) / calls)
    return 1e6 * sorted(best)[len(best) // 2]


def main(dtype_name: str, G: int, context: int) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    nb = -(-context // BS)
    k_cache = torch.randn(POOL, BS, HKV, D, generator=g).to(dtype)
    v_cache = torch.randn(POOL, BS, HKV, D, generator=g).to(dtype)
    tables = torch.randperm(POOL, generator=g)[:G * nb].view(G, nb).to(torch.int32)
    q = torch.randn(G, HQ, D, generator=g).to(dtype)
    k, v = (torch.randn(G, HKV, D, generator=g).to(dtype) for _ in range(2))
    slots = [t[-1] * BS + (context - 1) % BS for t in tables.tolist()]
    meta = build_attention_metadata([1] * G, [context] * G, tables.tolist(), slots, BS,
                                    torch.device("cpu"))
    # the block mask: full blocks (all but the last), and the last block, partly used
    last_block, used = tables[:, -1].clone(), torch.full((G,), (context - 1) % BS + 1)
    full_idx = torch.zeros(G, 1, 1, POOL, dtype=torch.int32)
    full_idx[:, 0, 0, :nb - 1] = tables[:, :-1]
    part_idx = torch.zeros(G, 1, 1, POOL, dtype=torch.int32)
    part_idx[:, 0, 0, 0] = last_block

    def tail_mask(b, h, q_idx, kv_idx):
        return (kv_idx // BS != last_block[b]) | (kv_idx % BS < used[b])
    slots_total = POOL * BS
    block_mask = BlockMask.from_kv_blocks(
        torch.ones(G, 1, 1, dtype=torch.int32), part_idx,
        torch.full((G, 1, 1), nb - 1, dtype=torch.int32), full_idx,
        BLOCK_SIZE=(HQ // HKV, BS), mask_mod=tail_mask, seq_lengths=(HQ // HKV, slots_total))
    flex = torch.compile(lambda q4, k4, v4: flex_attention(q4, k4, v4, block_mask=block_mask,
                                                           scale=D ** -0.5), dynamic=False)

    def flex_call():
        q4 = q.view(G, HKV, HQ // HKV, D)
        k4 = k_cache.view(1, slots_total, HKV, D).transpose(1, 2)      # [1, Hkv, slots, D]
        v4 = v_cache.view(1, slots_total, HKV, D).transpose(1, 2)
        return flex(q4, k4, v4).reshape(G, HQ, D)
    start = time.perf_counter()
    with torch.inference_mode():
        out = flex_call()
    compile_s = time.perf_counter() - start
    backends = {b.name: b for b in (SparseAttention(), TorchAttention())}
    reference = backends["torch"](q, k, v, k_cache, v_cache, meta, D ** -0.5)
    # the backends also write k, v (same values every call): flex reads the cache as written
    with torch.inference_mode():
        out = flex_call()
    print(f"{dtype_name}, {G} sequences × {context} tokens: flex compiled in {compile_s:.1f} s, "
          f"largest difference from the torch backend {(out.float() - reference.float()).abs().max():.1e}")
    with torch.inference_mode():
        times = {"flex (in place)": best_us(flex_call)}
        for name, b in backends.items():
            times[f"{name} backend (with its K/V write)"] = best_us(
                lambda b=b: b(q, k, v, k_cache, v_cache, meta, D ** -0.5))
    for name, us in times.items():
        print(f"  {name:36s} {us:7.1f} µs a layer")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32",
         int(sys.argv[2]) if len(sys.argv) > 2 else 16, int(sys.argv[3]) if len(sys.argv) > 3 else 96)
