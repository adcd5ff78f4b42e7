"""Issue 18: the sparse backend's two decode kernels, hot and cold, by KV cache layout.
    .venv/bin/python scripts/experiments/kv_layout_decode.py

The sparse backend (`minillm/attention/sparse_paged.py`) scores with
`torch.sparse.sampled_addmm` and sums values with `F.embedding_bag`, reading key and
value rows where they lie in the cache. Inside a real step those rows come from DRAM:
30 layers of K/V for 16 sequences is ~100 MB, more than the L3, and the weights stream
through it too. One decode group as the engine builds it (16 sequences of 144 tokens,
9 query / 3 K/V heads, head size 64, blocks of 16 scattered in a 192-block cache):

* cold: 30 caches (one per layer) visited in turn, as a step does; hot: one cache again
  and again;
* token-major rows, minillm's layout (`[blocks, block_size, Hkv, D]`: row
  `slot · Hkv + h`, a head's consecutive tokens 768 bytes apart), against head-major
  rows (`[blocks, Hkv, block_size, D]`, vLLM's CPU layout: row `(block · Hkv + h) ·
  block_size + offset`, a block's 16 tokens of one head in 4 KB end to end). Only the
  column numbers differ; the values are random either way.

Median µs per call over 20 passes of the 30 caches (cold) or 600 calls (hot), 2 threads."""
import time
import warnings

import torch
import torch.nn.functional as F

BLOCKS, BS, HKV, D, HQ, G, L, LAYERS = 192, 16, 3, 64, 9, 16, 144, 30
NB = L // BS


def columns(block_ids: torch.Tensor, head_major: bool) -> torch.Tensor:
    """[G·Hq, L]: the cache row each query head reads at each key position."""
    offsets = torch.arange(BS)
    kv_head = (torch.arange(HQ) // (HQ // HKV)).view(1, HQ, 1, 1)
    blocks = block_ids.view(G, 1, NB, 1)
    if head_major:
        rows = (blocks * HKV + kv_head) * BS + offsets
    else:
        rows = (blocks * BS + offsets) * HKV + kv_head
    return rows.reshape(G * HQ, L)


def kernels(cols: torch.Tensor):
    """(scores(q, k_rows), values(weights, v_rows)) for this column pattern."""
    starts = torch.arange(0, G * HQ * L + 1, L)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)          # sparse CSR is "beta"
        pattern = torch.sparse_csr_tensor(starts, cols.reshape(-1), torch.zeros(G * HQ * L),
                                          size=(G * HQ, BLOCKS * BS * HKV))
    flat_cols, bag_starts = cols.reshape(-1), starts[:-1]

    def scores(q, k_rows):
        torch.sparse.sampled_addmm(pattern, q, k_rows.t(), beta=0.0, alpha=D ** -0.5, out=pattern)
        return pattern.values().view(G * HQ, L).softmax(-1)

    def values(weights, v_rows):
        return F.embedding_bag(flat_cols, v_rows, bag_starts, mode="sum",
                               per_sample_weights=weights.view(-1))
    return scores, values


def median_us(caches, scores, values, passes: int) -> tuple[float, float]:
    q = torch.randn(G * HQ, D)
    spent = {"scores": [], "values": []}
    for _ in range(passes):
        for k_cache, v_cache in caches:
            start = time.perf_counter()
            weights = scores(q, k_cache.view(-1, D))
            middle = time.perf_counter()
            values(weights, v_cache.view(-1, D))
            spent["scores"].append(middle - start)
            spent["values"].append(time.perf_counter() - middle)
    return tuple(sorted(t)[len(t) // 2] * 1e6 for t in spent.values())


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    caches = [(torch.randn(BLOCKS, BS, HKV, D), torch.randn(BLOCKS, BS, HKV, D))
              for _ in range(LAYERS)]
    block_ids = torch.randperm(BLOCKS)[:G * NB]
    for round_ in range(3):
        for layout in ("token-major", "head-major"):
            scores, values = kernels(columns(block_ids, layout == "head-major"))
            cold = median_us(caches, scores, values, passes=20)
            hot = median_us(caches[:1], scores, values, passes=600)
            print(f"round {round_}, {layout:11s}: cold scores {cold[0]:5.1f} + values "
                  f"{cold[1]:5.1f} µs, hot {hot[0]:5.1f} + {hot[1]:5.1f} µs", flush=True)


if __name__ == "__main__":
    main()
