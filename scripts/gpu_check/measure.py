"""The numbers: kernel bandwidth, the decode curve, continuous vs static, chunked prefill.

Each part reuses the course's own benchmark code (`kernels/bench.py`, `benchmarks`)
and only chooses sizes: the bench's full workloads on a GPU, its quick ones on a CPU
(where the numbers only show that the plumbing works: the kernels then run in Triton's
interpreter, and the engine runs the tests' tiny random Llama). Every result is a plain dict for results.json;
`targets` compares a number with the issue's acceptance target — reported, never
asserted (a target missed is a finding, not a failed check).
"""

from __future__ import annotations

import gc
import statistics
from pathlib import Path

# The acceptance targets (GPU).
DECODE_BANDWIDTH_TARGET = 0.60       # paged decode, batch >= 16, long contexts: of copy bandwidth
CONTINUOUS_OF_IDEAL_TARGET = 0.90    # continuous/static throughput over the step-count ideal
CHUNKED_ITL_TARGET = 3.0             # P99 ITL without chunking / with chunking
CHUNKED_TTFT_TARGET = 1.5            # P50 TTFT with chunking / without chunking


def target(name: str, value: float | None, goal: float, higher: bool, gpu: bool) -> dict:
    """One target line; `met` is None off a GPU (interpreter and CPU timings say nothing)."""
    met = None if not gpu or value is None else (value >= goal if higher else value <= goal)
    return {"name": name, "value": value, "target": f"{'>=' if higher else '<='} {goal}", "met": met}


def plots_dir(ctx) -> Path:
    folder = ctx.work / "plots"
    folder.mkdir(exist_ok=True)
    return folder


def passed(name: str, reason: str) -> dict:
    return {"name": name, "status": "passed", "reason": reason}


# ------------------------------------------------------------------ kernels

def kernel_bench(ctx) -> dict:
    """kernels/bench.py (paged decode, varlen prefill) plus the KV store, vs copy bandwidth."""
    import torch
    from kernels import bench
    report = bench.run(small=not ctx.gpu)
    bench.print_report(report)
    device = torch.device("cuda" if ctx.gpu else "cpu")
    heads = bench.GPU_HEADS if ctx.gpu else bench.CPU_HEADS
    tokens = (256, 4096, 32768) if ctx.gpu else (16, 64)
    report["store_kv"] = [bench_store_kv(t, heads, device, report["copy_bandwidth_gb_per_s"],
                                         iters=20 if ctx.gpu else 2) for t in tokens]
    for row in report["store_kv"]:
        print(f"store_kv {row['tokens']:>6} tokens: {row['triton']['time_ms']:.3f} ms, "
              f"{100 * row['triton']['fraction_of_copy_bandwidth']:.0f}% of copy bandwidth")
    plot_kernels(report, plots_dir(ctx) / "kernels.png")
    long_big = [r["triton"]["fraction_of_copy_bandwidth"] for r in report["decode"]
                if r["batch"] >= 16 and r["context"] >= 2048]
    worst = min(long_big) if long_big else None
    errors = max(r["max_abs_error_vs_ref"] for r in report["decode"] + report["prefill"])
    note = ("" if ctx.gpu else "; Triton INTERPRETER on CPU: timings are not GPU numbers")
    return {"checks": [passed("kernel_bench", f"{len(report['decode'])} decode, "
                              f"{len(report['prefill'])} prefill, {len(tokens)} store sizes; "
                              f"copy bandwidth {report['copy_bandwidth_gb_per_s']:.0f} GB/s; "
                              f"largest error vs reference {errors:.1e}{note}")],
            "data": report,
            "targets": [target("paged decode: worst fraction of copy bandwidth at batch >= 16, "
                               "context >= 2048", worst, DECODE_BANDWIDTH_TARGET, True, ctx.gpu)],
            "headline": {"copy_bandwidth_gb_per_s": report["copy_bandwidth_gb_per_s"],
                         "decode_fraction_of_copy_worst_b16_long": worst}}


def bench_store_kv(num_tokens: int, heads: dict, device, copy_gbps: float, iters: int) -> dict:
    """Time `store_kv` writing `num_tokens` tokens into shuffled slots, vs `index_copy_`."""
    import torch
    from kernels import bench, store_kv
    hkv, d, bs, dtype = (heads[k] for k in ("num_kv_heads", "head_dim", "block_size", "dtype"))
    gen = torch.Generator(device=device).manual_seed(num_tokens)
    num_blocks = 2 * -(-num_tokens // bs)                      # half the slots get written
    key, value = (torch.randn(num_tokens, hkv, d, generator=gen, device=device, dtype=dtype)
                  for _ in range(2))                           # [T, Hkv, D]
    k_cache, v_cache = (torch.zeros(num_blocks, bs, hkv, d, device=device, dtype=dtype)
                        for _ in range(2))
    slots = torch.randperm(num_blocks * bs, generator=gen, device=device)[:num_tokens]  # [T]

    def torch_store():
        k_cache.view(-1, hkv, d).index_copy_(0, slots, key)
        v_cache.view(-1, hkv, d).index_copy_(0, slots, value)

    store_kv(key, value, k_cache, v_cache, slots)
    exact = torch.equal(k_cache.view(-1, hkv, d)[slots], key)
    # K and V read once and written once, plus the slot of each token.
    num_bytes = 4 * key.numel() * key.element_size() + slots.numel() * slots.element_size()
    row = {"tokens": num_tokens, "bytes": num_bytes, "exact": exact}
    for name, fn in (("triton", lambda: store_kv(key, value, k_cache, v_cache, slots)),
                     ("torch_index_copy", torch_store)):
        seconds = bench.time_call(fn, device, iters, warmup=2)
        gbps = num_bytes / seconds / 1e9
        row[name] = {"time_ms": seconds * 1e3, "gb_per_s": gbps,
                     "fraction_of_copy_bandwidth": gbps / copy_gbps}
    return row


def plot_kernels(report: dict, path: Path) -> None:
    """Decode's fraction of copy bandwidth vs batch, one line per context; the store's bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.4, 3.6))
    for context in sorted({r["context"] for r in report["decode"]}):
        rows = [r for r in report["decode"] if r["context"] == context]
        ax1.plot([r["batch"] for r in rows],
                 [100 * r["triton"]["fraction_of_copy_bandwidth"] for r in rows], "o-",
                 label=f"context {context}")
    ax1.axhline(100 * DECODE_BANDWIDTH_TARGET, ls="--", color="grey", label="target")
    batches = sorted({r["batch"] for r in report["decode"]})
    ax1.set_xscale("log", base=2)
    ax1.set_xticks(batches, [str(b) for b in batches])
    where = report["device"] + (" — interpreter, not GPU numbers" if report["triton_interpreter"] else "")
    ax1.set(xlabel="batch", ylabel="% of measured copy bandwidth", title=f"paged decode, {where}")
    ax1.legend(fontsize=7)
    labels = [str(r["tokens"]) for r in report["store_kv"]]
    ax2.bar(labels, [100 * r["triton"]["fraction_of_copy_bandwidth"] for r in report["store_kv"]])
    ax2.set(xlabel="tokens stored", ylabel="% of measured copy bandwidth", title="store_kv")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ the engine

def comparison_rounds() -> int:
    """`--rounds` of the driver: alternating rounds of each A/B comparison."""
    import os
    return int(os.environ.get("GPU_CHECK_ROUNDS", "1"))


def make_bench(ctx, quick: bool, rounds: int):
    """The course's `Bench` on the engine's default device, in the engine's default dtype.

    GPU mode: SmolLM2-135M. CPU mode: the tiny random Llama of the tests (2 layers,
    hidden 64), so that the plumbing of every measurement runs in seconds; its numbers
    describe nothing but that plumbing.
    """
    import os
    import torch
    from benchmarks.common import Bench, BenchConfig
    from minillm.model.device import resolve_device, resolve_dtype
    from minillm.model.tiny import build_tiny_llama
    dtype = resolve_dtype(None, resolve_device(None))
    threads = min(8, os.cpu_count() or 2) if ctx.gpu else 1
    config = BenchConfig(model="smollm2-135m" if ctx.gpu else build_tiny_llama(seed=0),
                         quick=quick, rounds=rounds, threads=threads,
                         max_num_seqs=16 if ctx.gpu else 4,     # CPU: several static batches
                         dtype=str(dtype).replace("torch.", ""), progress=False,
                         out=str(plots_dir(ctx)))
    torch.manual_seed(0)
    return Bench(config)


def model_label(ctx) -> str:
    return "SmolLM2-135M" if ctx.gpu else "tiny random Llama (CPU mode: plumbing only)"


def decode_curve(ctx) -> dict:
    """Decode tokens/s at batch 1, 2, 4, ..., 64 (CPU: 1, 2, 4), beside the roofline."""
    from benchmarks import step_time
    from benchmarks.common import warm_up
    from benchmarks.roofline import decode_cost
    batches = (1, 2, 4, 8, 16, 32, 64) if ctx.gpu else (1, 2, 4)
    context, steps, rounds = (128, 8, 3) if ctx.gpu else (16, 3, 1)
    bench = make_bench(ctx, quick=not ctx.gpu, rounds=rounds)
    llm = bench.make_llm(max_num_seqs=max(batches),
                         num_kv_blocks=max(batches) * ((context + steps + 2) // 16 + 2))
    warm_up(llm, bench.prompts([_spec(context)] * 2))
    # median of the decode-only steps; NaN (null in the JSON) if there were none
    timings = {b: [step_time.decode_step_time(bench, llm, b, context, steps)["step_s"]
                   for _ in range(rounds)] for b in batches}
    bandwidth, matmul = roofs(ctx, bench.dtype)
    cost = decode_cost(llm.model)
    mean_context = context + 1 + steps // 2
    rows = step_time.ceiling_rows(timings, cost, mean_context, bandwidth, matmul)
    result = {"context": mean_context, "bandwidth": bandwidth, "matmul": matmul,
              "decode_cost": cost.to_dict(), "rows": rows, "dtype": bench.config.dtype,
              "model": model_label(ctx),
              "engine": {k: llm.trace.config.get(k) for k in ("device", "attention_backend", "dtype")}}
    print(step_time.text(result))
    step_time.plot(result, plots_dir(ctx) / "decode_curve.png")
    del llm
    gc.collect()
    engine = result["engine"]
    return {"checks": [passed("decode_curve", f"{model_label(ctx)}, batches {list(batches)} on "
                              f"{engine['device']}/{engine['attention_backend']}/{engine['dtype']}")],
            "data": result,
            "headline": {"decode_tokens_per_s": {str(r["batch"]): round(r["tokens_per_s"], 1)
                                                 for r in rows}}}


def roofs(ctx, dtype) -> tuple[dict, dict]:
    """Measured memory bandwidth and matmul FLOP/s of the device the engine runs on."""
    from benchmarks.roofline import measure_bandwidth, measure_matmul_flops
    if not ctx.gpu:
        return measure_bandwidth(64 << 20), measure_matmul_flops(512, dtype=dtype)
    import torch
    from kernels.bench import copy_bandwidth
    gbps = copy_bandwidth(torch.device("cuda"))
    return ({"best_gb_s": gbps, "median_gb_s": gbps, "bytes": 1 << 30, "repeats": 10},
            gpu_matmul_flops(dtype))


def gpu_matmul_flops(dtype, n: int = 8192, repeats: int = 10) -> dict:
    """n x n @ n x n on the GPU, random data (zeros run faster), timed with CUDA events."""
    import torch
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    rates = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        rates.append(2 * n**3 / (start.elapsed_time(end) / 1e3) / 1e9)
    return {"best_gflop_s": max(rates), "median_gflop_s": statistics.median(rates), "n": n,
            "dtype": str(dtype).replace("torch.", ""), "repeats": repeats}


def _spec(prompt_len: int):
    from minillm.sim.workload import RequestSpec
    return RequestSpec("warm", prompt_len, 1, 1)


def throughput(ctx) -> dict:
    """Continuous vs static (and chunked) on the bench's skewed burst; the step-count ideal."""
    from benchmarks import throughput as experiment
    bench = make_bench(ctx, quick=not ctx.gpu, rounds=comparison_rounds())
    result = experiment.run(bench)
    result["model"] = model_label(ctx)
    print(experiment.text(result))
    experiment.plot(result, plots_dir(ctx) / "throughput.png")
    result.pop("traces")                             # large; the plot above used them
    steps = {mode: result["medians"][mode]["num_steps"] for mode in ("static", "continuous")}
    ideal = steps["static"] / steps["continuous"]
    achieved = result["ratios"]["continuous/static"]["median"]
    result["step_count_ideal"] = {"static_steps": steps["static"],
                                  "continuous_steps": steps["continuous"], "ideal": ideal,
                                  "achieved": achieved, "fraction_of_ideal": achieved / ideal}
    print(f"continuous/static {achieved:.2f}x; step-count ideal {steps['static']:.0f} / "
          f"{steps['continuous']:.0f} = {ideal:.2f}x; {100 * achieved / ideal:.0f}% of it")
    return {"checks": [passed("throughput", f"continuous/static {achieved:.2f}x, "
                              f"{100 * achieved / ideal:.0f}% of the step-count ideal {ideal:.2f}x")],
            "data": result,
            "targets": [target("continuous/static throughput over the step-count ideal",
                               achieved / ideal, CONTINUOUS_OF_IDEAL_TARGET, True, ctx.gpu)],
            "headline": {"continuous_over_static": achieved, "step_count_ideal": ideal}}


def chunked(ctx) -> dict:
    """P99 inter-token latency and P50 TTFT without and with chunked prefill."""
    from benchmarks import chunked as experiment
    bench = make_bench(ctx, quick=not ctx.gpu, rounds=comparison_rounds())
    result = experiment.run(bench)
    result["model"] = model_label(ctx)
    print(experiment.text(result))
    experiment.plot(result, plots_dir(ctx) / "chunked.png")
    itl_cut = result["ratios"]["itl_p99"]["median"]            # no chunking / chunked
    ttft_growth = 1.0 / result["ratios"]["ttft_p50"]["median"]  # chunked / no chunking
    return {"checks": [passed("chunked", f"chunking divides P99 ITL by {itl_cut:.2f}; "
                              f"P50 TTFT x{ttft_growth:.2f}")],
            "data": result,
            "targets": [target("P99 ITL, no chunking / chunked", itl_cut, CHUNKED_ITL_TARGET,
                               True, ctx.gpu),
                        target("P50 TTFT, chunked / no chunking", ttft_growth, CHUNKED_TTFT_TARGET,
                               False, ctx.gpu)],
            "headline": {"p99_itl_cut_by_chunking": itl_cut, "p50_ttft_growth_with_chunking": ttft_growth}}
