"""Benchmark the paged-attention kernels: time, achieved bandwidth, and who is faster.

    python -m kernels.bench                  # full sizes on CUDA, tiny ones on CPU
    python -m kernels.bench --out bench-results/kernels.json
    python -m kernels.bench --small          # tiny sizes even on a GPU (a smoke test)

For every configuration it reports:

* **time per call** of the Triton kernel, the PyTorch reference (`reference.py`) and
  `torch.nn.functional.scaled_dot_product_attention` (SDPA) — once on K/V gathered
  out of the paged cache inside the timed call (what an engine without a paged kernel
  must do every step), once on K/V that are already dense (SDPA's best case, a bound
  no paged kernel has to beat);
* **achieved bandwidth** = bytes that must move (K/V of every cached position read once,
  q read, output written) / time, and that as a fraction of the device's *measured*
  copy bandwidth (a large `tensor.copy_`: what the memory system really delivers,
  usually 85-95 % of the datasheet peak). Decode is memory-bound, so this fraction is
  its score: close to 1 means the kernel streams the cache at full speed;
* for prefill also TFLOP/s (causal: query at position p costs `4 * D * (p + 1)` FLOPs
  per head), because long chunks are compute-bound and their bandwidth looks low.

On CPU the kernels run in the Triton *interpreter*, one program at a time in Python:
its timings say nothing about GPU speed, so the CPU run uses tiny sizes and exists to
show the benchmark works end to end.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import (
    interpreter_enabled,
    paged_decode_attention,
    paged_decode_attention_ref,
    paged_prefill_attention,
    paged_prefill_attention_ref,
)

# Full sizes (CUDA): a Llama-3-8B-like attention layer, Hq=32, Hkv=8, D=128, fp16.
GPU_HEADS = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, block_size=16, dtype=torch.float16)
GPU_DECODE = [(b, c) for b in (1, 8, 32, 64, 128) for c in (512, 2048, 8192)]  # (batch, context)
# Prefill batches: list of (new tokens, seq_len) per sequence.
GPU_PREFILL = {
    "1 prompt x 512": [(512, 512)],
    "1 prompt x 2048": [(2048, 2048)],
    "4 chunks x 512 @ ctx 1536": [(512, 2048)] * 4,
    "16 chunks x 128 @ ctx 1920": [(128, 2048)] * 16,
    "mixed: chunk 512 @ ctx 1024 + 63 decodes @ 2048": [(512, 1536)] + [(1, 2048)] * 63,
}
CPU_HEADS = dict(num_q_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype=torch.float32)
CPU_DECODE = [(b, c) for b in (1, 4) for c in (64, 256)]
CPU_PREFILL = {
    "1 prompt x 32": [(32, 32)],
    "2 chunks x 16 @ ctx 48": [(16, 64)] * 2,
    "mixed: chunk 16 @ ctx 20 + 3 decodes @ 50": [(16, 36)] + [(1, 50)] * 3,
}


# ---------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------


def time_call(fn, device: torch.device, iters: int, warmup: int) -> float:
    """Median seconds per call of `fn()`.

    On CUDA each call is timed with CUDA events, and the L2 cache is wiped before each
    one by overwriting a buffer larger than L2: otherwise a small problem would be read
    from cache and report more bandwidth than HBM has.
    """
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
        for _ in range(iters):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: torch.device) -> float:
    """Measured device-memory bandwidth in GB/s: a large copy reads and writes every byte."""
    num_bytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = time_call(lambda: dst.copy_(src), device, iters=10, warmup=2)
    return 2 * num_bytes / seconds / 1e9


# ---------------------------------------------------------------------------------------
# problems
# ---------------------------------------------------------------------------------------


def make_paged_kv(seq_lens, num_kv_heads, head_dim, block_size, dtype, device, gen):
    """Random K/V caches holding `seq_lens` tokens per sequence in shuffled blocks."""
    blocks = [math.ceil(length / block_size) for length in seq_lens]
    num_blocks = sum(blocks)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    physical = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    block_tables = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32, device=device)
    used = 0
    for b, n in enumerate(blocks):
        block_tables[b, :n] = physical[used : used + n]
        used += n
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    return k_cache, v_cache, block_tables, seq_lens_t


def gather_dense(k_cache, v_cache, block_tables, length):
    """Paged -> dense for equal-length sequences: `[B, Hkv, length, D]` each."""
    batch, max_blocks = block_tables.shape
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    idx = block_tables.long()  # [B, max_blocks]
    k = k_cache[idx].view(batch, max_blocks * block_size, num_kv_heads, head_dim)[:, :length]
    v = v_cache[idx].view(batch, max_blocks * block_size, num_kv_heads, head_dim)[:, :length]
    return k.transpose(1, 2), v.transpose(1, 2)  # [B, Hkv, L, D]


def _row(label, seconds, num_bytes, copy_gbps, extra=None):
    row = {"time_ms": seconds * 1e3, "gb_per_s": num_bytes / seconds / 1e9}
    row["fraction_of_copy_bandwidth"] = row["gb_per_s"] / copy_gbps
    row.update(extra or {})
    return {label: row}


def bench_decode(batch, context, heads, device, copy_gbps, iters, gen):
    hq, hkv, d, bs, dtype = (heads[k] for k in ("num_q_heads", "num_kv_heads", "head_dim", "block_size", "dtype"))
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([context] * batch, hkv, d, bs, dtype, device, gen)
    q = torch.randn(batch, hq, d, generator=gen, device=device, dtype=dtype)
    scale = d**-0.5
    args = (q, k_cache, v_cache, block_tables, seq_lens, scale)
    elem = q.element_size()
    num_bytes = 2 * batch * context * hkv * d * elem + 2 * q.numel() * elem  # K+V, q + out

    def sdpa_gathered():
        k, v = gather_dense(k_cache, v_cache, block_tables, context)
        return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, scale=scale, enable_gqa=True)

    k_dense, v_dense = (t.contiguous() for t in gather_dense(k_cache, v_cache, block_tables, context))

    def sdpa_dense():
        return F.scaled_dot_product_attention(q.unsqueeze(2), k_dense, v_dense, scale=scale, enable_gqa=True)

    out = paged_decode_attention(*args)
    error = (out.float() - paged_decode_attention_ref(*args).float()).abs().max().item()
    t_triton = time_call(lambda: paged_decode_attention(*args), device, iters, warmup=3)
    t_ref = time_call(lambda: paged_decode_attention_ref(*args), device, max(2, iters // 5), warmup=1)
    t_gathered = time_call(sdpa_gathered, device, iters, warmup=3)
    t_dense = time_call(sdpa_dense, device, iters, warmup=3)
    result = {"batch": batch, "context": context, "bytes": num_bytes, "max_abs_error_vs_ref": error}
    result.update(_row("triton", t_triton, num_bytes, copy_gbps))
    result.update(_row("torch_reference", t_ref, num_bytes, copy_gbps))
    result.update(_row("sdpa_gathered", t_gathered, num_bytes, copy_gbps))
    result.update(_row("sdpa_dense", t_dense, num_bytes, copy_gbps))
    result["speedup_vs_reference"] = t_ref / t_triton
    result["speedup_vs_sdpa_gathered"] = t_gathered / t_triton
    result["speedup_vs_sdpa_dense"] = t_dense / t_triton
    del k_cache, v_cache, k_dense, v_dense
    return result


def bench_prefill(name, cases, heads, device, copy_gbps, iters, gen):
    hq, hkv, d, bs, dtype = (heads[k] for k in ("num_q_heads", "num_kv_heads", "head_dim", "block_size", "dtype"))
    seq_lens_list = [length for _, length in cases]
    num_new = [n for n, _ in cases]
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv(seq_lens_list, hkv, d, bs, dtype, device, gen)
    starts = [0]
    for n in num_new:
        starts.append(starts[-1] + n)
    query_start_loc = torch.tensor(starts, dtype=torch.int32, device=device)
    q = torch.randn(starts[-1], hq, d, generator=gen, device=device, dtype=dtype)
    scale = d**-0.5
    args = (q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale)
    elem = q.element_size()
    num_bytes = 2 * sum(seq_lens_list) * hkv * d * elem + 2 * q.numel() * elem
    # causal FLOPs: query at absolute position p does QK^T and PV over p+1 keys.
    flops = sum(4 * d * hq * sum(range(length - n + 1, length + 1)) for n, length in cases)

    out = paged_prefill_attention(*args)
    error = (out.float() - paged_prefill_attention_ref(*args).float()).abs().max().item()
    t_triton = time_call(lambda: paged_prefill_attention(*args), device, iters, warmup=3)
    t_ref = time_call(lambda: paged_prefill_attention_ref(*args), device, max(2, iters // 5), warmup=1)
    result = {"name": name, "num_seqs": len(cases), "num_tokens": starts[-1], "bytes": num_bytes,
              "flops": flops, "max_abs_error_vs_ref": error}
    result.update(_row("triton", t_triton, num_bytes, copy_gbps, {"tflop_per_s": flops / t_triton / 1e12}))
    result.update(_row("torch_reference", t_ref, num_bytes, copy_gbps))
    result["speedup_vs_reference"] = t_ref / t_triton

    if len(set(cases)) == 1:  # equal sequences: one batched SDPA call is a fair comparison
        n, length = cases[0]
        batch = len(cases)
        q4 = q.view(batch, n, hq, d).transpose(1, 2)  # [B, Hq, n, D]
        # bottom-right causal mask: query i (position length-n+i) sees keys 0..length-n+i
        mask = None if n == length else (
            torch.arange(length, device=device)[None, :] <= torch.arange(length - n, length, device=device)[:, None])

        def sdpa(k, v):
            return F.scaled_dot_product_attention(q4, k, v, attn_mask=mask, is_causal=mask is None,
                                                  scale=scale, enable_gqa=True)

        k_dense, v_dense = (t.contiguous() for t in gather_dense(k_cache, v_cache, block_tables, length))
        t_gathered = time_call(lambda: sdpa(*gather_dense(k_cache, v_cache, block_tables, length)),
                               device, iters, warmup=3)
        t_dense = time_call(lambda: sdpa(k_dense, v_dense), device, iters, warmup=3)
        result.update(_row("sdpa_gathered", t_gathered, num_bytes, copy_gbps, {"tflop_per_s": flops / t_gathered / 1e12}))
        result.update(_row("sdpa_dense", t_dense, num_bytes, copy_gbps, {"tflop_per_s": flops / t_dense / 1e12}))
        result["speedup_vs_sdpa_gathered"] = t_gathered / t_triton
        result["speedup_vs_sdpa_dense"] = t_dense / t_triton
    else:
        result["sdpa_note"] = "mixed lengths: no single batched SDPA call to compare with"
    return result


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def run(small: bool = False, seed: int = 0) -> dict:
    on_gpu = torch.cuda.is_available() and not interpreter_enabled()
    device = torch.device("cuda" if on_gpu else "cpu")
    full = on_gpu and not small
    heads = GPU_HEADS if full else CPU_HEADS
    decode_sizes = GPU_DECODE if full else CPU_DECODE
    prefill_sizes = GPU_PREFILL if full else CPU_PREFILL
    iters = 20 if on_gpu else 2
    gen = torch.Generator(device=device).manual_seed(seed)

    report = {
        "device": torch.cuda.get_device_name(device) if on_gpu else f"CPU ({platform.processor() or platform.machine()})",
        "triton_interpreter": interpreter_enabled(),
        "torch": torch.__version__,
        "shape": {k: (str(v) if k == "dtype" else v) for k, v in heads.items()},
        "note": ("GPU timings, L2 flushed before each call, median of runs." if on_gpu else
                 "Triton INTERPRETER on CPU: timings are NOT meaningful (each program runs in "
                 "Python); this run only shows the benchmark works. Run on a CUDA GPU for numbers."),
    }
    if not on_gpu:
        print("No CUDA GPU (or TRITON_INTERPRET=1): running tiny sizes under the Triton interpreter.")
        print("Interpreter timings are NOT meaningful; use a GPU for real numbers.\n")
    report["copy_bandwidth_gb_per_s"] = copy_bandwidth(device)
    print(f"device: {report['device']}  measured copy bandwidth: {report['copy_bandwidth_gb_per_s']:.0f} GB/s")

    report["decode"] = []
    for batch, context in tqdm(decode_sizes, desc="decode"):
        report["decode"].append(bench_decode(batch, context, heads, device, report["copy_bandwidth_gb_per_s"], iters, gen))
    report["prefill"] = []
    for name, cases in tqdm(prefill_sizes.items(), desc="prefill"):
        report["prefill"].append(bench_prefill(name, cases, heads, device, report["copy_bandwidth_gb_per_s"], iters, gen))
    return report


def print_report(report: dict) -> None:
    print(f"\ndecode ({report['shape']})")
    print(f"{'batch':>5} {'ctx':>6} {'triton ms':>10} {'GB/s':>8} {'% copy':>7} {'x ref':>7} {'x sdpa+gather':>14} {'x sdpa dense':>13}")
    for r in report["decode"]:
        print(f"{r['batch']:>5} {r['context']:>6} {r['triton']['time_ms']:>10.3f} {r['triton']['gb_per_s']:>8.1f} "
              f"{100 * r['triton']['fraction_of_copy_bandwidth']:>6.1f}% {r['speedup_vs_reference']:>7.2f} "
              f"{r['speedup_vs_sdpa_gathered']:>14.2f} {r['speedup_vs_sdpa_dense']:>13.2f}")
    print("\nprefill")
    print(f"{'batch':<50} {'triton ms':>10} {'GB/s':>8} {'TFLOP/s':>8} {'x ref':>7} {'x sdpa+gather':>14} {'x sdpa dense':>13}")
    for r in report["prefill"]:
        sg = f"{r['speedup_vs_sdpa_gathered']:>14.2f}" if "speedup_vs_sdpa_gathered" in r else f"{'-':>14}"
        sd = f"{r['speedup_vs_sdpa_dense']:>13.2f}" if "speedup_vs_sdpa_dense" in r else f"{'-':>13}"
        print(f"{r['name']:<50} {r['triton']['time_ms']:>10.3f} {r['triton']['gb_per_s']:>8.1f} "
              f"{r['triton']['tflop_per_s']:>8.2f} {r['speedup_vs_reference']:>7.2f} {sg} {sd}")
    print(f"\n{report['note']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the full report as JSON to this path")
    parser.add_argument("--small", action="store_true", help="tiny sizes even on a GPU")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = run(small=args.small, seed=args.seed)
    print_report(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
