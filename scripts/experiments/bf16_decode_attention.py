"""Issue 18: bf16 decode attention with the values read in place (no bf16 sampled_addmm).
    .venv/bin/python scripts/experiments/bf16_decode_attention.py

CPU `torch.sparse.sampled_addmm` computes in float32/float64 only, so in bf16 the sparse
backend falls back to the torch backend's gather + SDPA. `F.embedding_bag` does run in
bf16, so half of the in-place idea still applies: gather only the keys (one copy per K/V
head), compute the scores with a matmul, and sum the value rows where they lie. Variants
of one decode group, all from the same bf16 cache:

* "torch": gather K and V, `scaled_dot_product_attention` (the fallback today);
* "bag16": gather K, bf16 matmul for the scores (bf16 output), softmax in fp32, weights
  back to bf16, `embedding_bag` over the value rows;
* "bag32": as bag16 but the scores' matmul in fp32 (keys and queries converted first).

1. Rounding: each variant's output against a float64 computation from the same bf16
   inputs (largest absolute difference, G=16 sequences of 9 blocks).
2. Hot, one layer: µs per call for G × nb blocks, alternating rounds.
3. A real bf16 decode step captured from the engine (batch 16, 8, 4; ~128 tokens of
   context): the 30 layers' attention calls and the whole forward pass, 8 alternating
   rounds, with per-round ratios to "torch"."""
import torch
import torch.nn.functional as F

from captured_steps import decode_batches, median_ms                 # this folder
from minillm import LLM
from minillm.attention import SparseAttention, TorchAttention
from minillm.attention.sparse_paged import _SparseDecodeGroup
from benchmarks import ab
from minillm_cpu.malloc import keep_freed_memory
from minillm.model.batch import build_attention_metadata

BS, HKV, HQ, D, POOL = 16, 3, 9, 64, 3000
DTYPE = torch.bfloat16


class _BagGroup(_SparseDecodeGroup):
    """Keys gathered once per K/V head, values summed in place by an embedding bag."""

    fp32_scores = False

    def attend(self, q, k_cache, v_cache, scale: float) -> torch.Tensor:
        G, L = self.shape
        num_heads, head_dim = q.shape[1:]
        num_kv_heads = k_cache.shape[2]
        if self.pattern is None:
            self._index(num_heads, k_cache, torch.float32)
            per_kv = num_heads // num_kv_heads
            self.kv_cols = self.cols.view(G, num_kv_heads, per_kv, L)[:, :, 0].reshape(-1)
        q = self.queries(q).view(G, num_kv_heads, num_heads // num_kv_heads, head_dim)
        keys = k_cache.view(-1, head_dim).index_select(0, self.kv_cols)    # [G·Hkv·L, D]
        keys = keys.view(G, num_kv_heads, L, head_dim)
        if self.fp32_scores:
            scores = torch.matmul(q.float(), keys.float().transpose(-1, -2))   # [G, Hkv, r, L]
        else:
            scores = torch.matmul(q, keys.transpose(-1, -2)).float()
        scores = scores * scale + self.mask(torch.float32)                   # mask [G,1,1,L]
        weights = scores.softmax(-1).to(q.dtype).view(G * num_heads, L)
        out = F.embedding_bag(self.cols, v_cache.view(-1, head_dim), mode="sum",
                              per_sample_weights=weights)
        return out.view(G, num_heads, head_dim)


class _Bag32Group(_BagGroup):
    fp32_scores = True


class Bag16Attention(SparseAttention):
    name = "bag16"

    def decode_group(self, meta, seq_ids):
        return _BagGroup(meta, seq_ids)


class Bag32Attention(SparseAttention):
    name = "bag32"

    def decode_group(self, meta, seq_ids):
        return _Bag32Group(meta, seq_ids)


BACKENDS = {"torch": TorchAttention, "bag16": Bag16Attention, "bag32": Bag32Attention}


def problem(G: int, nb: int):
    """G decodes of nb blocks scattered over the pool: metadata and one step's q, k, v."""
    perm = torch.randperm(POOL).tolist()
    tables = [perm[i * nb:(i + 1) * nb] for i in range(G)]
    lens = [nb * BS - 3] * G
    slots = [t[(n - 1) // BS] * BS + (n - 1) % BS for t, n in zip(tables, lens)]
    meta = build_attention_metadata([1] * G, lens, tables, slots, BS, torch.device("cpu"))
    q, k, v = (torch.randn(G, h, D, dtype=DTYPE) for h in (HQ, HKV, HKV))
    return meta, tables, lens, q, k, v


def rounding() -> None:
    k_cache, v_cache = (torch.randn(POOL, BS, HKV, D, dtype=DTYPE) for _ in range(2))
    meta, tables, lens, q, k, v = problem(16, 9)
    outs = {name: cls()(q, k, v, k_cache, v_cache, meta, D ** -0.5) for name, cls in BACKENDS.items()}
    worst = {name: 0.0 for name in outs}
    for g, (table, n) in enumerate(zip(tables, lens)):   # float64 oracle, one sequence at a time
        keys = k_cache[table].reshape(-1, HKV, D)[:n].double()
        values = v_cache[table].reshape(-1, HKV, D)[:n].double()
        for h in range(HQ):
            p = (keys[:, h // 3] @ q[g, h].double() * D ** -0.5).softmax(0)
            ref = p @ values[:, h // 3]
            for name, o in outs.items():
                worst[name] = max(worst[name], (o[g, h].double() - ref).abs().max().item())
    print("  rounding, largest |out - float64|: "
          + ", ".join(f"{n} {w:.1e}" for n, w in worst.items()), flush=True)


def hot() -> None:
    k_cache, v_cache = (torch.randn(POOL, BS, HKV, D, dtype=DTYPE) for _ in range(2))
    sizes = [(G, nb) for G in (1, 4, 16) for nb in (2, 9, 18)]

    def layer_us(backend, size):
        meta, _, _, q, k, v = problem(*size)
        call = lambda: backend(q, k, v, k_cache, v_cache, meta, D ** -0.5)        # noqa: E731
        for _ in range(5):
            call()
        return 1e3 * median_ms(call, 30)
    runners = {name: (lambda b=cls(): {s: layer_us(b, s) for s in sizes}) for name, cls in BACKENDS.items()}
    for name, t in ab.medians(ab.alternate(runners, 5)).items():
        print(f"  hot, one layer, {name:6s}: " + ", ".join(f"{G}×{nb} {us:.0f}" for (G, nb), us in t.items())
              + " µs", flush=True)


def real_step() -> None:
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype="bfloat16")
    runner = llm.llm_engine.runner
    for size, batch in decode_batches(llm, sizes=(16, 8, 4)).items():
        q = torch.randn(size, HQ, D, dtype=DTYPE)
        k, v = (torch.randn(size, HKV, D, dtype=DTYPE) for _ in range(2))

        def attention(backend):                 # every layer's call, as in one step
            batch.meta.scratch.clear()
            for k_cache, v_cache in runner.kv_caches:
                backend(q, k, v, k_cache, v_cache, batch.meta, D ** -0.5)

        def forward(backend):
            batch.meta.scratch.clear()
            return runner.model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                                batch.logits_indices, backend)
        backends = {name: cls() for name, cls in BACKENDS.items()}
        logits = {name: forward(b).float() for name, b in backends.items()}
        runners = {}
        for name, b in backends.items():
            runners[f"{name} attention"] = lambda b=b: {"ms": median_ms(lambda: attention(b), 10)}
            runners[f"{name} step"] = lambda b=b: {"ms": median_ms(lambda: forward(b), 5)}
        runs = ab.alternate(runners, 8)
        t = {n: m["ms"] for n, m in ab.medians(runs).items()}
        for part in ("attention", "step"):
            line = f"  real step, batch {size:2d}, {part:9s}: torch {t[f'torch {part}']:.2f} ms"
            for name in ("bag16", "bag32"):
                r = ab.summary(ab.paired_ratios(runs, f"torch {part}", f"{name} {part}", "ms"))
                line += (f"; {name} {t[f'{name} {part}']:.2f} ms, torch/{name} {r['median']:.2f} "
                         f"({r['min']:.2f}-{r['max']:.2f})")
            print(line, flush=True)
        print(f"  real step, batch {size:2d}: largest logit difference to torch: "
              + ", ".join(f"{n} {(logits[n] - logits['torch']).abs().max().item():.2f}"
                          for n in ("bag16", "bag32"))
              + f" (logits up to {logits['torch'].abs().max().item():.1f}); same greedy tokens: "
              + ", ".join(f"{n} {bool((logits[n].argmax(-1) == logits['torch'].argmax(-1)).all())}"
                          for n in ("bag16", "bag32")))


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(0)
    keep_freed_memory()
    rounding()
    hot()
    real_step()
