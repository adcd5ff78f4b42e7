"""docs/performance.md, change 6: the "sparse" backend (decode K/V read in place) against "torch".
    .venv/bin/python scripts/experiments/sparse_decode_attention.py

1. One layer's decode attention, hot in cache: G sequences of `nb` blocks (block size
   16, 9 query / 3 K/V heads, head size 64, scattered in a 3000-block cache), both
   backends called as the engine calls them (plan built once, then the KV write and the
   attention), median µs over alternating rounds. From G × nb, the cost per
   sequence-block and the fixed cost of a group (the split rule's `group_cost`).
2. A real decode step captured from the engine (`captured_steps.py`, ~128 tokens of
   context, KV cache as the engine left it): the 30 layers' attention calls, and the
   whole forward pass, torch against sparse, 8 alternating rounds, with the per-round
   ratios. The model is the readable one (`executor="eager"`), as the two backends run.
   Both parts use the engine's step API: `step = backend.for_step(meta)` (the plan, once
   a step), then `step(q, k, v, k_cache, v_cache, scale)` per layer."""
import sys

import torch

from captured_steps import decode_batches, median_ms, replay         # this folder
from benchmarks import ab
from minillm import LLM
from minillm.attention import SparseAttention, TorchAttention
from minillm.model.batch import build_attention_metadata
from minillm_cpu.malloc import keep_freed_memory

BS, HKV, HQ, D, POOL = 16, 3, 9, 64, 3000


def hot_layer_us(backend, G: int, nb: int, k_cache, v_cache) -> float:
    """One layer's call for G decodes of nb blocks each (plan built once, outside), µs."""
    perm = torch.randperm(POOL).tolist()
    tables = [perm[i * nb:(i + 1) * nb] for i in range(G)]
    lens = [nb * BS - 3] * G
    slots = [t[(n - 1) // BS] * BS + (n - 1) % BS for t, n in zip(tables, lens)]
    meta = build_attention_metadata([1] * G, lens, tables, slots, BS, torch.device("cpu"))
    q, k, v = (torch.randn(G, h, D) for h in (HQ, HKV, HKV))
    step = backend.for_step(meta)
    call = lambda: step(q, k, v, k_cache, v_cache, D ** -0.5)                 # noqa: E731
    for _ in range(5):
        call()
    return 1e3 * median_ms(call, 30)


def hot() -> None:
    k_cache, v_cache = torch.randn(POOL, BS, HKV, D), torch.randn(POOL, BS, HKV, D)
    sizes = [(G, nb) for G in (1, 4, 16) for nb in (2, 9, 18)]
    backends = {"torch": TorchAttention(), "sparse": SparseAttention()}
    runners = {name: (lambda b=b: {size: hot_layer_us(b, *size, k_cache, v_cache) for size in sizes})
               for name, b in backends.items()}
    medians = ab.medians(ab.alternate(runners, 5))
    for name, t in medians.items():
        per_block = (t[16, 18] - t[16, 2]) / (16 * 16)
        fixed = t[1, 2] - 2 * per_block
        print(f"  hot, one layer, {name:6s}: " + ", ".join(f"{G}×{nb} {us:.0f}" for (G, nb), us in t.items())
              + f" µs; {per_block:.2f} µs per sequence-block, {fixed:.0f} µs per group with the KV "
              f"write (~{fixed / per_block:.0f} blocks)", flush=True)


def real_step() -> None:
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype="float32",
              executor="eager", attention_backend="sparse")
    runner = llm.llm_engine.runner
    for size, batch in decode_batches(llm, sizes=(16, 8, 4)).items():
        q = torch.randn(size, HQ, D)
        k, v = torch.randn(size, HKV, D), torch.randn(size, HKV, D)

        def attention(backend):                 # every layer's call, as in one step
            step = backend.for_step(batch.meta)
            for k_cache, v_cache in runner.kv_caches:
                step(q, k, v, k_cache, v_cache, D ** -0.5)

        def forward(backend):
            return replay(runner, batch, backend)
        backends = {"torch": TorchAttention(), "sparse": SparseAttention()}
        diff = (forward(backends["torch"]) - forward(backends["sparse"])).abs().max().item()
        runners = {}
        for name, b in backends.items():
            runners[f"{name} attention"] = lambda b=b: {"ms": median_ms(lambda: attention(b), 10)}
            runners[f"{name} step"] = lambda b=b: {"ms": median_ms(lambda: forward(b), 5)}
        runs = ab.alternate(runners, 8)
        t = {n: m["ms"] for n, m in ab.medians(runs).items()}
        for part in ("attention", "step"):
            r = ab.summary(ab.paired_ratios(runs, f"torch {part}", f"sparse {part}", "ms"))
            print(f"  real step, batch {size:2d}, {part:9s}: torch {t[f'torch {part}']:.2f} ms, sparse "
                  f"{t[f'sparse {part}']:.2f} ms; torch/sparse per round {r['median']:.2f} "
                  f"({r['min']:.2f}-{r['max']:.2f})", flush=True)
        print(f"  real step, batch {size:2d}: largest logit difference {diff:.1e}")


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    torch.set_num_threads(2)
    torch.manual_seed(0)
    keep_freed_memory()         # as an engine on the CPU does (else 3.5 MB gathers page-fault)
    hot()
    real_step()
