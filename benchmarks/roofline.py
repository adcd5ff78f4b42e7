"""The roofline: how fast *could* one decode step be on this machine?

A decode step must at least

* **read every weight once** (QKV, O, gate/up, down of all layers, and the
  vocabulary projection) — the same bytes whether the batch holds 1 sequence or 16;
* **read each sequence's KV cache** (context length × KV bytes per token) and write
  one new K/V row per sequence;
* **compute** 2 FLOPs per weight per batch row (a multiply and an add), plus
  attention's 4 · heads · head_dim FLOPs per (query, cached key) pair.

Time can't beat either roof, so the step takes at least

    max(bytes / memory bandwidth,  FLOPs / peak FLOP/s)

and the ceiling on decode throughput at batch B is B divided by that. At small B
the bytes win — the step is **memory-bound** and batching is nearly free; at larger
B the FLOPs catch up and the step becomes **compute-bound**. Both roofs are *measured*
here, not taken from a data sheet: bandwidth with a large tensor copy, FLOP/s with a
large matrix multiply (the faster of two kernels), with the same thread count the engine
uses.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from benchmarks.ab import median
from minillm_cpu.packed_linear import PackedWeight, linear


def measure_bandwidth(num_bytes: int = 256 << 20, repeats: int = 10) -> dict:
    """Copy a `num_bytes` tensor into another, `repeats` times; GB/s (1e9 B/s).

    A copy reads `num_bytes` and writes `num_bytes`, so we count 2 × num_bytes moved
    (the STREAM "copy" convention). Both tensors are touched once before timing so
    page faults are not measured. Use buffers much larger than the CPU's last-level
    cache, so that the copy runs from DRAM.
    """
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)                                   # first touch: page faults happen here
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        rates.append(2 * num_bytes / (time.perf_counter() - start) / 1e9)
    return {"best_gb_s": max(rates), "median_gb_s": median(rates), "bytes": num_bytes,
            "repeats": repeats}


def measure_matmul_flops(n: int = 1024, dtype: torch.dtype = torch.float32,
                         repeats: int = 6) -> dict:
    """Peak FLOP/s of an n×n @ n×n matrix multiply (2·n³ FLOPs), in GFLOP/s.

    Two kernels are timed and the faster one is the peak: the BLAS library's (`a @ b`)
    and, on a CPU, the packed oneDNN kernel the engine's projections use
    (`minillm_cpu/packed_linear.py`). A roof must be the machine's limit, not one
    library's: on one course machine the packed kernel ran more than twice as fast as
    MKL's fp32 product (docs/performance.md, "Roofline").
    """
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    kernels = {"blas": lambda: a @ b}
    if PackedWeight.supported(b):
        packed = PackedWeight(b)
        kernels["packed"] = lambda: linear(a, b, packed=packed)     # a @ bᵀ: same FLOPs
    rates = {name: _rates(run, 2 * n ** 3, repeats) for name, run in kernels.items()}
    fastest = max(rates, key=lambda name: max(rates[name]))
    return {"best_gflop_s": max(rates[fastest]), "median_gflop_s": median(rates[fastest]),
            "kernel": fastest, "best_gflop_s_by_kernel": {k: max(v) for k, v in rates.items()},
            "n": n, "dtype": str(dtype).replace("torch.", ""), "repeats": repeats}


def _rates(run, flops: int, repeats: int) -> list[float]:
    """GFLOP/s of `repeats` timed calls of `run`, after one untimed warm-up call."""
    run()                                           # warm-up: the library picks its kernel
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        rates.append(flops / (time.perf_counter() - start) / 1e9)
    return rates


@dataclass
class DecodeCost:
    """What one decode step of a model must read and compute (see the module docstring)."""

    weight_bytes: int            # every weight a step reads once
    matmul_params: int           # weights that multiply each batch row (2 FLOPs each)
    kv_bytes_per_token: int      # K and V of one token, all layers
    attn_flops_per_pair: int     # 4 · query heads · head dim · layers
    element_size: int

    def step_bytes(self, batch: int, context: int) -> int:
        """Weights once + every sequence's cached K/V read + one new row written."""
        return self.weight_bytes + batch * (context + 1) * self.kv_bytes_per_token

    def step_flops(self, batch: int, context: int) -> int:
        return batch * (2 * self.matmul_params + context * self.attn_flops_per_pair)

    def to_dict(self) -> dict:
        return asdict(self)


def decode_cost(model) -> DecodeCost:
    """DecodeCost of a minillm `LlamaModel`.

    The embedding table is only *looked up* (B rows), so it counts as a weight read
    only when it doubles as the vocabulary projection (tied embeddings, as SmolLM2).
    """
    element = next(model.parameters()).element_size()
    matmul = sum(p.numel() for name, p in model.named_parameters()
                 if p.dim() == 2 and not name.startswith("embed_tokens"))
    if model.tied:
        matmul += model.embed_tokens.weight.numel()         # lm_head = embedding [V, H]
    norms = sum(p.numel() for p in model.parameters() if p.dim() == 1)
    cfg = model.config
    kv_per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * element
    attn = 4 * cfg.num_attention_heads * model.head_dim * model.num_layers
    return DecodeCost(weight_bytes=(matmul + norms) * element, matmul_params=matmul,
                      kv_bytes_per_token=kv_per_token, attn_flops_per_pair=attn,
                      element_size=element)


def ceiling(cost: DecodeCost, batch: int, context: int, bandwidth_gb_s: float,
            peak_gflop_s: float) -> dict:
    """The fastest possible decode step at this batch and context, and why."""
    memory_s = cost.step_bytes(batch, context) / (bandwidth_gb_s * 1e9)
    compute_s = cost.step_flops(batch, context) / (peak_gflop_s * 1e9)
    seconds = max(memory_s, compute_s)
    return {"batch": batch, "context": context, "memory_s": memory_s, "compute_s": compute_s,
            "step_s": seconds, "tokens_per_s": batch / seconds,
            "bound": "memory" if memory_s >= compute_s else "compute"}
