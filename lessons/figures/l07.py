"""Pictures and helpers of lesson 07 (Triton kernels, optional).

* `draw_programs` — which program of a 1-D grid handles which element; masked lanes.
* `draw_block_tables` — logical blocks of each sequence → physical blocks of the cache.
* `online_softmax_states` / `draw_online_softmax` — the online-softmax rescale: after
  each block, the running sum `l` split by the block its terms came from; when a block
  raises the maximum, every older share is multiplied by `alpha = exp(m_old − m_new)`.
* `plot_bytes_per_step` — the bytes one decode step must read: weights vs K/V.
* `time_attention_steps` / `draw_attention_step` — one decode step's attention on a CPU:
  each backend's plan once (`for_step`), then every layer, timed for several backends in
  alternating rounds; drawn as stacked bars, gather + SDPA against reading the blocks in
  place (section 6, and the appendix's `cpp`).
* `cpu_appendix_skip_reason` — why the appendix on the `minillm_cpu` package cannot run
  here (a CUDA machine, `MINILLM_EXECUTOR=eager`, the package or its compiler missing).
* `decode_engines` / `decode_step_rounds` — the real engine on the CPU once per executor,
  a batch decoded together in alternating rounds: the median time of a step that decodes
  every sequence (the appendix: eager vs cpu, fused vs layer by layer).
* `compile_decode_kernel_for_sm90` — compile the decode kernel for an H100/H200 in a
  fresh process (interpreter off) and count instructions in its PTX.
* `gpu_decode_bandwidth` — `kernels.bench`'s decode benchmark on a few sizes (GPU only).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np

from minillm.widgets.style import COLORS

PALETTE = [COLORS["prefill"], COLORS["decode"], COLORS["waiting"], COLORS["preempt"],
           "#64B5CD", "#937860"]


def draw_programs(n: int, block: int, who: list[int]):
    """One box per lane of every program; masked lanes (past n) hatched."""
    num_programs = -(-n // block)
    fig, ax = plt.subplots(figsize=(8, 1.9))
    for lane in range(num_programs * block):
        pid, live = lane // block, lane < n
        ax.add_patch(plt.Rectangle((lane, 0), 0.92, 0.9, alpha=0.85 if live else 1.0,
                                   facecolor=PALETTE[pid % 4] if live else COLORS["free"],
                                   hatch=None if live else "///",
                                   edgecolor="white" if live else "#999"))
        ax.text(lane + 0.46, 0.45, str(lane) if live else "masked", ha="center", va="center",
                fontsize=8 if live else 6, color="white" if live else "#666")
    for pid in range(num_programs):
        ax.text(pid * block + block / 2 - 0.04, 1.05, f"program {pid}", ha="center", fontsize=9)
    ax.set_xlim(-0.2, num_programs * block)
    ax.set_ylim(-0.1, 1.35)
    ax.axis("off")
    ax.set_title(f"{n} elements, BLOCK = {block}: tl.program_id picks the block, the mask "
                 f"switches off lanes ≥ {n}", fontsize=10)
    plt.show()


def draw_block_tables(block_tables, seq_lens, block_size: int, num_blocks: int):
    """Logical blocks of each sequence (top) and where they live in the cache (bottom)."""
    fig, ax = plt.subplots(figsize=(9, 3.0))
    owner, x = {}, 0
    for b, length in enumerate(seq_lens):
        for i in range(math.ceil(length / block_size)):
            phys = int(block_tables[b, i])
            owner[phys] = (b, min(block_size, length - i * block_size))
            ax.add_patch(plt.Rectangle((x, 2), 0.9, 0.8, color=PALETTE[b]))
            ax.text(x + 0.45, 2.4, f"s{b}·{i}", ha="center", va="center", color="white", fontsize=8)
            ax.annotate("", xy=(phys + 0.45, 0.85), xytext=(x + 0.45, 2),
                        arrowprops=dict(arrowstyle="->", color=PALETTE[b], lw=1))
            x += 1
        x += 0.5
    for phys in range(num_blocks):
        b, used = owner.get(phys, (None, 0))
        for r in range(block_size):             # one thin bar per slot of the block
            color = (PALETTE[b] if r < used else COLORS["idle"]) if b is not None else COLORS["free"]
            ax.add_patch(plt.Rectangle((phys + r * 0.9 / block_size, 0.05),
                                       0.9 / block_size * 0.9, 0.8, color=color))
        ax.text(phys + 0.45, -0.25, str(phys), ha="center", fontsize=8)
    ax.text(-0.6, 2.4, "logical\nblocks", ha="right", va="center", fontsize=9)
    ax.text(-0.6, 0.45, "physical\nblocks", ha="right", va="center", fontsize=9)
    ax.set_xlim(-2.2, max(x, num_blocks) + 0.2)
    ax.set_ylim(-0.5, 3.0)
    ax.axis("off")
    ax.set_title("block table: logical block i of sequence b → physical block "
                 "(pale red = slots reserved but not yet holding a token)", fontsize=10)
    plt.show()


def online_softmax_states(s: np.ndarray, block: int):
    """Run the online softmax over `s` block by block and keep what the picture needs.

    Returns (maxes, alphas, shares): after block i, the running max m_i, the rescale
    factor alpha_i = exp(m_{i-1} − m_i) applied to the old state, and shares[i][j] =
    sum of exp(s_t − m_i) over the positions t of block j ≤ i (so sum(shares[i]) = l_i).
    """
    starts = list(range(0, len(s), block))
    maxes, alphas, shares = [], [], []
    m, share = -np.inf, []
    for start in starts:
        sb = s[start:start + block]
        m_new = max(m, sb.max())
        alpha = np.exp(m - m_new)               # 0 on the first block (m = -inf)
        share = [x * alpha for x in share] + [np.exp(sb - m_new).sum()]
        maxes.append(m_new), alphas.append(alpha), shares.append(list(share))
        m = m_new
    return maxes, alphas, shares


def draw_online_softmax(s: np.ndarray, block: int):
    """Top: the scores, block by block, with the running max. Bottom: the running sum l
    after each block, split by which block its terms came from."""
    maxes, alphas, shares = online_softmax_states(s, block)
    nb = len(maxes)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.4), gridspec_kw=dict(height_ratios=[1, 1.25]))
    for j in range(nb):
        pos = np.arange(j * block, min((j + 1) * block, len(s)))
        ax1.bar(pos, s[pos], color=PALETTE[j % len(PALETTE)], width=0.8)
        ax1.plot([pos[0] - 0.4, pos[-1] + 0.4], [maxes[j]] * 2, color=COLORS["text"], lw=2)
    ax1.plot([], [], color=COLORS["text"], lw=2, label="running max m after the block")
    ax1.set_xlabel(f"key position (blocks of {block}, one colour each)")
    ax1.set_xticks(range(0, len(s), block))
    ax1.set_ylabel("score s")
    ax1.legend(loc="upper left", fontsize=8)
    ax1.set_title("One query's scores, fed in blocks: the kernel never holds the whole row",
                  loc="left", fontsize=10)
    for i in range(nb):
        bottom = 0.0
        for j, part in enumerate(shares[i]):
            ax2.bar(i, part, bottom=bottom, color=PALETTE[j % len(PALETTE)], width=0.6,
                    edgecolor="white")
            bottom += part
        if alphas[i] < 1 and i > 0:                  # the max rose: old shares shrank
            ax2.text(i, bottom * 1.03, f"max rose:\nold × α = {alphas[i]:.2f}", ha="center",
                     va="bottom", fontsize=8)
    exact = np.exp(s - s.max()).sum()
    ax2.axhline(exact, color=COLORS["text"], ls="--", lw=1)
    ax2.text(-0.45, exact * 1.02, "final l = Σ exp(s − max s) over the whole row", ha="left",
             va="bottom", fontsize=8)
    ax2.set_xticks(range(nb), [f"after block {i}" for i in range(nb)])
    ax2.set_ylabel("l = Σ exp(s − m)")
    ax2.set_ylim(0, max(map(sum, shares)) * 1.35)
    ax2.set_title("The running sum l, split by the block each term came from: a new max "
                  "rescales every old share by α", loc="left", fontsize=10)
    plt.tight_layout()
    plt.show()


def plot_bytes_per_step(weight_bytes: float, kv_bytes_per_token: float,
                        contexts=(512, 2048, 8192), batches=(1, 2, 4, 8, 16, 32, 64, 128)):
    """GB one decode step must read: the weights (shared) vs every sequence's K/V."""
    batches = np.array(batches)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(batches, np.full(len(batches), weight_bytes / 1e9), "--", color=COLORS["text"],
            label="weights (shared by the batch)")
    for ctx, color in zip(contexts, (COLORS["decode"], COLORS["prefill"], COLORS["static"])):
        ax.plot(batches, batches * ctx * kv_bytes_per_token / 1e9, "o-", color=color, ms=4,
                label=f"K/V, context {ctx}")
    ax.set(xscale="log", yscale="log", xlabel="batch size (sequences)",
           ylabel="GB read per decode step", title="SmolLM2-135M, bf16: bytes one decode step must read")
    ax.set_xticks(batches, batches)
    ax.legend()
    plt.show()


def time_attention_steps(backends, step_args, caches, extra=None, rounds: int = 15,
                         steps: int = 3):
    """Alternating rounds (`benchmarks.ab`) of one decode step per backend, as the engine
    runs it: `backend.for_step(meta)` once (the step's plan), then the step's attention
    for every layer's cache. `step_args` = (q, k, v, meta, scale); `extra` = {name:
    call(k_cache, v_cache)}, timed the same way, once per layer. A round's number is the
    median of `steps` steps. Returns the rounds ({name: [{"ms": ...}, ...]}) and the
    medians {name: ms}."""
    import time
    from benchmarks import ab

    q, k, v, meta, scale = step_args

    def backend_step(backend):
        attention = backend.for_step(meta)             # once a step, shared by the layers
        for k_cache, v_cache in caches:
            attention(q, k, v, k_cache, v_cache, scale)

    def extra_step(call):
        for k_cache, v_cache in caches:
            call(k_cache, v_cache)

    def step_ms(one_step):
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            one_step()
            times.append(1e3 * (time.perf_counter() - start))
        return {"ms": ab.median(times)}
    runners = {b.name: (lambda b=b: step_ms(lambda: backend_step(b))) for b in backends}
    runners.update({name: (lambda c=c: step_ms(lambda: extra_step(c)))
                    for name, c in (extra or {}).items()})
    runs = ab.alternate(runners, rounds)
    return runs, {name: m["ms"] for name, m in ab.medians(runs).items()}


def draw_attention_step(parts: dict[str, dict[str, float]]):
    """parts: {backend: {part: ms}} — one horizontal bar per backend, its parts stacked."""
    fig, ax = plt.subplots(figsize=(7, 2.8))
    colors = iter(PALETTE)
    for row, (backend, pieces) in enumerate(parts.items()):
        left = 0.0
        for part, ms in pieces.items():
            ax.barh(row, ms, left=left, color=next(colors), label=part)
            left += ms
        ax.text(left, row, f" {left:.1f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(parts)), list(parts))
    ax.invert_yaxis()
    ax.set(xlabel="ms (median of alternating rounds)", xlim=(0, 1.2 * ax.get_xlim()[1]),
           title="one decode step's attention on this CPU: 30 layers, 16 sequences")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize=8, frameon=False)
    plt.show()


def cpu_appendix_skip_reason() -> str | None:
    """Why the appendix on the `minillm_cpu` package cannot run here (None: it can)."""
    import torch
    from minillm.model.executor import EXECUTORS, FORCE_VARIABLE, load_plugins, readable_forced

    if torch.cuda.is_available():
        return "this machine has a CUDA GPU, and the appendix is about the engine on a CPU"
    if readable_forced():
        return f"{FORCE_VARIABLE}=eager keeps the minillm_cpu package out of this process"
    load_plugins()
    if "cpu" not in EXECUTORS:
        return "the minillm_cpu package is not installed here (or it failed to load)"
    from minillm_cpu.kernels import unavailable_reason
    reason = unavailable_reason()
    return f"minillm_cpu's C++ kernels cannot be built here: {reason}" if reason else None


def decode_engines(executors=("eager", "cpu"), batch: int = 16) -> dict:
    """The real SmolLM2 engine on the CPU once per executor, room for `batch` sequences
    (and a KV cache just big enough for `decode_step_rounds`). {executor: LLM}"""
    from minillm import LLM

    return {name: LLM(executor=name, device="cpu", max_num_seqs=batch, num_kv_blocks=16 * batch)
            for name in executors}


def decode_step_rounds(engines: dict, batch: int = 16, prompt_words: int = 90,
                       new_tokens: int = 12, rounds: int = 3):
    """engines {name: (LLM, fused)}: each generates `batch` prompts of ~130 tokens decoded
    together, in alternating rounds (`benchmarks.ab`). `fused` True/False sets the `cpu`
    executor's `llm.model.layers.fused` for that name's rounds (None: leave the model
    alone). A round's number is the median duration of its steps that decode all `batch`
    sequences and carry no prompt. Returns (rounds {name: [{"ms": ...}]}, medians {name:
    ms}, greedy tokens {name: [token ids per prompt]})."""
    from minillm import SamplingParams
    from benchmarks import ab

    words = "the quick brown fox jumps over a lazy dog while".split()
    prompts = [f"Request {i}: " + " ".join(words[(i + j) % len(words)] for j in range(prompt_words))
               for i in range(batch)]
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    tokens = {}

    def one_round(name):
        llm, fused = engines[name]
        if fused is not None:
            llm.model.layers.fused = fused            # FusedDecoderStack: one C++ call a step or not
        outputs = llm.generate(prompts, params, use_tqdm=False)
        tokens[name] = [o.outputs[0].token_ids for o in outputs]
        full = [s.duration for s in llm.trace.steps
                if s.num_decode_tokens == batch and not s.num_prefill_tokens]
        return {"ms": 1e3 * ab.median(full)}
    runs = ab.alternate({name: (lambda name=name: one_round(name)) for name in engines}, rounds)
    return runs, {name: m["ms"] for name, m in ab.medians(runs).items()}, tokens


COMPILE_SCRIPT = r'''
import importlib, json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
kernel = importlib.import_module("kernels.paged_decode")._paged_decode_kernel
const = dict(GROUP=3, HEAD_DIM=64, BLOCK_G=16, BLOCK_D=64, BLOCK_N=64, DOT_PRECISION="tf32")
types = {n: "*fp16" for n in ("q_ptr", "k_cache_ptr", "v_cache_ptr", "out_ptr")}
types.update(block_tables_ptr="*i32", seq_lens_ptr="*i32", qk_scale="fp32")
sig = {n: "constexpr" if n in const else types.get(n, "i32") for n in kernel.arg_names}
src = ASTSource(fn=kernel, signature=sig, constexprs={(kernel.arg_names.index(n),): v for n, v in const.items()})
c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
ptx = c.asm["ptx"]
ops = {op: len(re.findall(re.escape(op), ptx)) for op in ("ld.global", "mma.sync", "ex2.approx", "st.global")}
print(json.dumps(dict(ptx_lines=len(ptx.splitlines()), cubin_bytes=len(c.asm["cubin"]),
                      shared_bytes=c.metadata.shared, ops=ops)))
'''


def compile_decode_kernel_for_sm90(repo_root: str) -> dict | str:
    """Compile `kernels.paged_decode`'s kernel for sm_90 (fp16, SmolLM2's head shape) in a
    fresh process with the interpreter off: triton.compile(ASTSource, GPUTarget("cuda",
    90, 32)). Returns the PTX line count, cubin and shared-memory bytes and instruction
    counts — or the error text when this machine's Triton cannot compile."""
    import json
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, cwd=repo_root,
                            capture_output=True, text=True, timeout=300)
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        return (result.stderr or result.stdout)[-2000:]
    return json.loads(lines[-1])


def gpu_decode_bandwidth(sizes, device, iters: int = 20):
    """`kernels.bench`'s decode benchmark for (batch, context) sizes: (copy GB/s, heads, rows)."""
    import torch
    from kernels.bench import GPU_HEADS, bench_decode, copy_bandwidth
    copy_gbps = copy_bandwidth(device)
    rows = [bench_decode(b, c, GPU_HEADS, device, copy_gbps, iters,
                         torch.Generator(device=device).manual_seed(0)) for b, c in sizes]
    return copy_gbps, GPU_HEADS, rows
