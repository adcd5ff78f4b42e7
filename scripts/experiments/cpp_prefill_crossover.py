"""docs/performance.md, change 12: where a prefill chunk should leave the C++ kernel for SDPA.
    .venv/bin/python scripts/experiments/cpp_prefill_crossover.py float32|bfloat16

One layer at SmolLM2's shapes (9 query heads, 3 K/V heads, head dim 64, blocks of 16):
a prefill chunk of `q` new tokens on top of `cached` ones, attended by the C++ kernel
(`CppAttention(max_pairs=huge)`: one pass over the keys per query row) and by the torch
backend's SDPA group (`CppAttention(max_pairs=0)`: the kernel only writes K/V), in
alternating rounds. Prints both times, their ratio, and q · (cached + q), the number of
(query, key) pairs `minillm_cpu.cpp_attention.MAX_PAIRS_IN_KERNEL` is compared with."""
import sys

import torch

from captured_steps import median_ms                           # this folder
from benchmarks import ab
from minillm.model.batch import build_attention_metadata
from minillm_cpu.cpp_attention import CppAttention

SHAPES = [(2, 40), (4, 40), (16, 40), (40, 40), (64, 64), (128, 0), (32, 256), (256, 256),
          (256, 1024)]


def chunk(q_len: int, cached: int, dtype, bs=16, hq=9, hkv=3, d=64):
    gen = torch.Generator().manual_seed(0)
    total = cached + q_len
    table = list(range(-(-total // bs)))
    slots = list(range(cached, total))
    meta = build_attention_metadata([q_len], [total], [table], slots, bs, torch.device("cpu"))
    caches = [torch.randn(len(table) + 1, bs, hkv, d, generator=gen).to(dtype) for _ in range(2)]
    q, k, v = (torch.randn(q_len, h, d, generator=gen).to(dtype) for h in (hq, hkv, hkv))
    return q, k, v, caches, meta


def main(dtype_name: str) -> None:
    dtype = getattr(torch, dtype_name)
    kernel, sdpa = CppAttention(max_pairs=1 << 40), CppAttention(max_pairs=0)
    print(f"{dtype_name}, {torch.get_num_threads()} threads; one layer, 9/3 heads, head dim 64")
    for q_len, cached in SHAPES:
        q, k, v, (k_cache, v_cache), meta = chunk(q_len, cached, dtype)

        def attend(backend):                    # plan + KV write + attention, as a step does
            return backend(q, k, v, k_cache, v_cache, meta, 0.125)
        diff = (attend(kernel).float() - attend(sdpa).float()).abs().max().item()
        runs = ab.alternate({"kernel": lambda: {"ms": median_ms(lambda: attend(kernel), 21)},
                             "sdpa": lambda: {"ms": median_ms(lambda: attend(sdpa), 21)}}, 6)
        ms = {name: m["ms"] for name, m in ab.medians(runs).items()}
        ratio = ab.summary(ab.paired_ratios(runs, "sdpa", "kernel", "ms"))["median"]
        pairs = q_len * (cached + q_len)
        print(f"  {q_len:4d} new on {cached:4d} cached ({pairs:7,d} pairs): kernel "
              f"{1e3 * ms['kernel']:8.1f} µs, SDPA {1e3 * ms['sdpa']:8.1f} µs, SDPA/kernel "
              f"{ratio:5.2f}; max diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    main(sys.argv[1] if len(sys.argv) > 1 else "float32")
