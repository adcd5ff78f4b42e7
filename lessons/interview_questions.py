"""The course's interview question bank (lesson 11), with worked answers.

Each question is a dict: "id", "topic", "lesson" (where the idea is taught), "question",
"answer" (light Markdown). Answers that involve numbers are *templates*: their numbers
come from a small function computed when the bank is loaded (`load_questions()`), so
every number a learner sees is computed, never typed.

Model shapes used in the arithmetic (from each model's published configuration):

    Llama-2-7B   32 layers, 32 query heads, 32 KV heads (multi-head), head dim 128
    Llama-2-70B  80 layers, 64 query heads,  8 KV heads (grouped-query), head dim 128
    SmolLM2-135M 30 layers,  9 query heads,  3 KV heads, head dim 64

Parameter counts are the nominal 7e9 / 70e9. GPU figures are NVIDIA's data-sheet values
for the H100 SXM (80 GB HBM3, 3.35 TB/s, 989 TFLOPS dense BF16): theoretical peaks.

    from interview_questions import load_questions      # (the notebook runs in lessons/)
    questions = load_questions()
"""

from __future__ import annotations

import math

# ---------------------------------------------------------------------- shared arithmetic

MODELS = {
    "Llama-2-7B": dict(params=7e9, layers=32, kv_heads=32, head_dim=128),
    "Llama-2-70B": dict(params=70e9, layers=80, kv_heads=8, head_dim=128),
    "SmolLM2-135M": dict(params=135e6, layers=30, kv_heads=3, head_dim=64),
}
H100 = dict(memory_bytes=80e9, bandwidth=3.35e12, bf16_flops=989e12)
GIB, MIB, KIB = 2 ** 30, 2 ** 20, 2 ** 10


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_value: int = 2) -> int:
    """K and V, every layer, every KV head: 2 · layers · kv_heads · head_dim · bytes."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def model_kv_bytes(name: str, bytes_per_value: int = 2) -> int:
    m = MODELS[name]
    return kv_bytes_per_token(m["layers"], m["kv_heads"], m["head_dim"], bytes_per_value)


def max_batch(name: str, gpu_bytes: float, context: int, reserve_fraction: float = 0.1,
              bytes_per_value: int = 2) -> dict:
    """Sequences of `context` tokens whose KV fits next to the weights (fp16/bf16)."""
    weights = MODELS[name]["params"] * bytes_per_value
    budget = gpu_bytes * (1 - reserve_fraction) - weights
    per_seq = context * model_kv_bytes(name, bytes_per_value)
    return {"weights_gb": weights / 1e9, "budget_gb": budget / 1e9, "per_seq_gib": per_seq / GIB,
            "batch": max(0, math.floor(budget / per_seq))}


def slot_waste(output_lens: list[int]) -> dict:
    """One static batch, one slot per request: idle fraction of slot-iterations."""
    iterations = max(output_lens)
    total, useful = len(output_lens) * iterations, sum(output_lens)
    return {"iterations": iterations, "total": total, "useful": useful, "idle": 1 - useful / total}


def padding_waste(lengths: list[int]) -> dict:
    """Pad every sequence to the longest: fraction of token slots that are padding."""
    padded = len(lengths) * max(lengths)
    return {"padded": padded, "real": sum(lengths), "waste": 1 - sum(lengths) / padded}


def speculative_tokens_per_step(acceptance: float, k: int) -> float:
    """Expected tokens per verification step with k guesses, each accepted with prob α
    independently (Leviathan et al., 2023): (1 − α^(k+1)) / (1 − α)."""
    if acceptance >= 1:
        return k + 1.0
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


# ---------------------------------------------------------------------- value functions

def _kv_values():
    v = {}
    for key, name in (("7b", "Llama-2-7B"), ("70b", "Llama-2-70B"), ("smol", "SmolLM2-135M")):
        b = model_kv_bytes(name)
        v[f"kv_{key}_kib"] = b / KIB
        v[f"kv_{key}_4k_gib"] = 4096 * b / GIB
    v["mha_70b_kib"] = kv_bytes_per_token(80, 64, 128) / KIB
    v["gqa_saving"] = 64 / 8
    return v


def _max_batch_values():
    a = max_batch("Llama-2-7B", H100["memory_bytes"], 4096)
    b = max_batch("Llama-2-7B", H100["memory_bytes"], 1024)
    return {"w": a["weights_gb"], "budget": a["budget_gb"], "per_seq": a["per_seq_gib"],
            "batch_4k": a["batch"], "per_seq_1k": b["per_seq_gib"], "batch_1k": b["batch"]}


def _roofline_values():
    w = MODELS["Llama-2-7B"]["params"] * 2
    step = w / H100["bandwidth"]
    ridge = H100["bf16_flops"] / H100["bandwidth"]
    return {"weights_gb": w / 1e9, "step_ms": step * 1e3, "tok_s": 1 / step,
            "ridge": ridge, "batch_ridge": ridge}


def _seed_waste_values():
    s = slot_waste([30, 40, 50, 60, 700, 80, 90, 100])
    return {"it": s["iterations"], "total": s["total"], "useful": s["useful"], "idle": s["idle"]}


def _three_request_values():
    s = slot_waste([50, 150, 80])
    return {"it": s["iterations"], "total": s["total"], "useful": s["useful"], "idle": s["idle"]}


def _padding_values():
    p = padding_waste([12, 50, 200, 33])
    n, b = 512, 32
    return {"padded": p["padded"], "real": p["real"], "waste": p["waste"],
            "n": n, "b": b, "b_minus": b - 1, "mixed_pad": (n - 1) * (b - 1), "mixed_total": n * b,
            "mixed_frac": (n - 1) * (b - 1) / (n * b)}


def _reservation_values():
    reserved, used, block = 2048, 300, 16
    blocks = math.ceil(used / block)
    return {"reserved": reserved, "used": used, "waste": 1 - used / reserved,
            "paged_slots": blocks * block, "paged_waste": 1 - used / (blocks * block),
            "avg_tail": (block - 1) / 2}


def _flat_batch_values():
    lens = [5, 1, 1, 3]
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    return {"cu": starts, "t": sum(lens)}


def _chunk_values():
    prompt, budget, decodes = 2000, 512, 32
    per_step = budget - decodes
    return {"prompt": prompt, "budget": budget, "decodes": decodes, "per_step": per_step,
            "steps": math.ceil(prompt / per_step)}


def _tpot_values():
    arrival, first, finish, n = 0.00, 0.35, 2.35, 41
    return {"ttft": first - arrival, "tpot_ms": (finish - first) / (n - 1) * 1e3,
            "e2e": finish - arrival}


def _little_values():
    rate, latency = 20, 6.0
    return {"rate": rate, "latency": latency, "concurrency": rate * latency}


def _spec_values():
    return {f"t{int(a * 100)}_{k}": speculative_tokens_per_step(a, k)
            for a in (0.5, 0.8) for k in (2, 4, 8)}


def _tp_values():
    weights = MODELS["Llama-2-70B"]["params"] * 2
    return {"w": weights / 1e9, "per_gpu_tp8": weights / 8 / 1e9, "per_gpu_tp4": weights / 4 / 1e9}


def _aging_values():
    gap, rate = 4, 0.5
    return {"gap": gap, "rate": rate, "window": gap / rate}


# ---------------------------------------------------------------------- the questions

QUESTIONS = [
    # ------------------------------------------------------------ why batching works (01)
    dict(id="batching-why", topic="why batching works", lesson="01",
         question="Why does batching speed up decoding, and where does the benefit stop?",
         answer="""
Decoding is **memory-bandwidth-bound**: each step reads every weight once to produce one
token per sequence, and the arithmetic per weight is tiny. A batch shares that one read
among all its sequences, so throughput rises almost linearly with batch size while each
step gets only a little slower — you fill compute units that were idle.

Two walls end it:
1. **KV memory** — every sequence's cache grows with its length; at some batch size the
   GPU memory is full (real systems usually hit this first);
2. **compute** — once batch × FLOPs per token saturates the arithmetic units, step time
   grows with the batch and throughput flattens.
"""),
    dict(id="batching-roofline", topic="why batching works", lesson="01",
         question="A 7B model in bf16 decodes on an H100 (3.35 TB/s). What is the fastest possible decode step at batch 1, and roughly from which batch size does decoding become compute-bound?",
         values=_roofline_values, answer="""
The step must read all weights: {weights_gb:.0f} GB / 3.35 TB/s ≈ **{step_ms:.1f} ms**, so at most
≈ {tok_s:.0f} tokens/s for a single sequence, whatever the kernels do.

A decode step does ≈ 2 FLOPs per parameter per sequence and reads 2 bytes per
parameter, so its arithmetic intensity is ≈ B FLOP/byte at batch B. The H100's ridge
point is 989 TFLOPS / 3.35 TB/s ≈ **{ridge:.0f} FLOP/byte**: below a batch of about
{batch_ridge:.0f} the step is memory-bound (a bigger batch is almost free), above it
compute-bound. KV-cache reads (which grow with context, not shared across the batch)
push the real crossover higher; the KV memory limit usually arrives first.
"""),
    dict(id="batching-kv-bytes", topic="why batching works", lesson="01",
         question="How many bytes of KV cache does one token take in Llama-2-7B and in Llama-2-70B (fp16)? And for a 4,096-token sequence?",
         values=_kv_values, answer="""
Bytes per token = 2 (K and V) × layers × KV heads × head dim × 2 bytes.

- Llama-2-7B: 2 × 32 × 32 × 128 × 2 = **{kv_7b_kib:.0f} KiB** per token → {kv_7b_4k_gib:.1f} GiB for 4,096 tokens.
- Llama-2-70B: 2 × 80 × 8 × 128 × 2 = **{kv_70b_kib:.0f} KiB** per token → {kv_70b_4k_gib:.2f} GiB for 4,096 tokens.

The 70B model needs *less* per token than the 7B one because it uses grouped-query
attention: 8 KV heads shared by 64 query heads. With a KV head per query head it would
need {mha_70b_kib:.0f} KiB — {gqa_saving:.0f}× more. (SmolLM2-135M in fp16:
{kv_smol_kib:.1f} KiB per token.)
"""),
    dict(id="batching-max-batch", topic="why batching works", lesson="01",
         question="How many 4,096-token sequences of Llama-2-7B (fp16) fit on one 80 GB GPU, keeping 10% of the memory for activations and the runtime?",
         values=_max_batch_values, answer="""
- weights: 7e9 × 2 bytes = {w:.0f} GB;
- KV budget: 80 GB × 0.9 − {w:.0f} GB = {budget:.0f} GB;
- one sequence of 4,096 tokens: 4,096 × 512 KiB = {per_seq:.1f} GiB;
- so **{batch_4k} sequences** at most.

With 1,024-token sequences ({per_seq_1k:.2f} GiB each) it would be {batch_1k}. This is the
memory wall: far below the batch where decoding turns compute-bound. It is also why
reserving memory for `max_tokens` instead of the real length (static allocation) costs
so much concurrency, and why quantising the KV cache or GQA matter.
"""),
    dict(id="batching-latency-tradeoff", topic="why batching works", lesson="01",
         question="Bigger batches raise throughput. Why not always run the largest batch that fits?",
         answer="""
Each step of a bigger batch takes longer, so every user's **time per output token**
grows, and a longer queue raises **time to first token**. Past the compute-bound point
throughput barely improves while latency keeps rising. A chat product with a TPOT target
(say 50 ms) has a maximum batch beyond which it breaks its SLO; an offline batch job has
none. So the batch limit (`max_num_seqs`, the token budget) is chosen from the latency
SLO, measured on the real length distribution — there is a sweet spot, not a maximum.
"""),
    # ------------------------------------------------------------ static batching (02)
    dict(id="static-seed", topic="static batching", lesson="02",
         question="A static batch of 8 slots holds requests that generate 30, 40, 50, 60, 700, 80, 90 and 100 tokens. What fraction of the slot-iterations is wasted?",
         values=_seed_waste_values, answer="""
The batch runs until its longest member finishes: {it} iterations × 8 slots = {total}
slot-iterations. Useful ones: 30 + 40 + … + 100 = {useful}. Idle: 1 − {useful}/{total} =
**{idle:.1%}**. Almost all of it is caused by the single 700-token straggler — which is
why chat workloads (huge length variance) gain most from continuous batching and
fixed-length classification gains almost nothing.
"""),
    dict(id="static-three", topic="static batching", lesson="02",
         question="Three requests generate 50, 150 and 80 tokens in one static batch. How many slot-iterations are idle, and what does the first request's user experience?",
         values=_three_request_values, answer="""
The batch lasts {it} iterations: {total} slot-iterations, {useful} useful, idle
**{idle:.0%}**. The first request finished at iteration 50 but its slot — and its result,
if the server only returns whole batches — waits 100 more iterations. Queued requests
wait for the whole batch too: head-of-line blocking that shows up in P99 latency.
"""),
    dict(id="static-padding", topic="static batching", lesson="02",
         question="Prompts of 12, 50, 200 and 33 tokens are padded to one rectangular batch. How much of the prefill computes padding?",
         values=_padding_values, answer="""
Padded to the longest (200): 4 × 200 = {padded} token slots for {real} real tokens, so
**{waste:.0%}** of the prefill work is padding. Selective batching (ragged, flat batches:
lesson 04) removes it by concatenating the tokens instead of padding them.
"""),
    dict(id="static-when-fine", topic="static batching", lesson="02",
         question="When does static batching waste almost nothing?",
         answer="""
When every request in a batch needs about the same number of steps: fixed-length
outputs (classification, scoring, embeddings), or offline jobs sorted by expected length
into buckets. With equal lengths no slot idles and no request waits for a straggler, so
static and continuous batching do the same work. The waste grows with the *variance* of
output lengths — and with arrivals spread over time, because newcomers wait for the
whole batch.
"""),
    dict(id="static-hol", topic="static batching", lesson="02",
         question="Why does static batching hurt P99 latency even when the GPU is busy?",
         answer="""
Head-of-line blocking (队首阻塞): a request arriving just after a batch started waits
for that batch's longest member to finish before it can even begin; within the batch,
short requests are held until the longest one ends. Tail latency is set by the
stragglers, not by the request's own work — averages hide it, P99 exposes it.
"""),
    # ------------------------------------------------------------ continuous batching (03)
    dict(id="cb-what-changes", topic="continuous batching", lesson="03",
         question="What exactly changes between static and continuous batching?",
         answer="""
The unit of scheduling: from a **request** to an **iteration** (one forward pass).
Before every step the scheduler removes sequences that finished (EOS or `max_tokens`) —
their slots and KV memory free at once — and admits waiting requests while slots,
token budget and KV blocks allow. The model is unchanged; the forward pass must accept
sequences at different stages (prefill and decode together), which selective batching
provides. Orca (Yu et al., OSDI 2022) called it iteration-level scheduling.
"""),
    dict(id="cb-orca-number", topic="continuous batching", lesson="03",
         question="\"Continuous batching gives 36.9× throughput.\" How would you qualify that number?",
         answer="""
It is Orca's result (OSDI 2022) for **GPT-3 175B**, comparing throughput **at the same
latency level** (around 190 ms per token in the seed article's reading) against the 2022
**NVIDIA FasterTransformer** with request-level batching. Anyscale's 23× (2023) is vLLM
vs naive Hugging Face static batching for OPT-13B on one A100, with output lengths drawn
from an exponential distribution. Change the model, latency target, length distribution
or baseline and the factor changes completely. What transfers: with high length
variance, request-level scheduling can waste an order of magnitude.
"""),
    dict(id="cb-misconception-bigger", topic="continuous batching", lesson="03",
         question="Misconception check: \"continuous batching is just a bigger batch\". What is wrong with it?",
         answer="""
The batch size can be the same; what differs is that membership changes **every
iteration**: finished sequences leave immediately, waiting ones join at the next step.
A bigger static batch makes the waste *worse* (more slots idle behind one straggler,
longer waits for newcomers). Continuous batching keeps slots busy by refilling them, not
by having more of them.
"""),
    dict(id="cb-equal-bench", topic="continuous batching", lesson="03",
         question="Why can a benchmark with equal-length requests be misleading?",
         answer="""
With equal output lengths every member of a static batch finishes in the same iteration:
no slot idles and nobody waits for a straggler, so static and continuous batching do the
same work — the benchmark reports ≈1×. The benefit comes from length variance (and from
arrivals spread over time). Always benchmark with the real distribution of prompt and
output lengths (lesson 08).
"""),
    dict(id="cb-vs-paged", topic="continuous batching", lesson="03",
         question="Continuous batching and PagedAttention: how are they related?",
         answer="""
**Orthogonal but complementary.** Continuous batching removes waste in *time* — slots
held by finished requests; PagedAttention removes waste in *space* — memory reserved for
the worst case but never filled.

- Continuous batching alone: newcomers could take a slot, but each still needs a
  contiguous reservation of `prompt + max_tokens`, so few sequences fit and "there is a
  free slot but no memory".
- Paging alone: more sequences fit, but a batch still waits for its longest member, so
  the freed memory is not reused until the batch ends.

Together they are the default of every modern engine: one manages *when* a request
runs, the other *where* its KV lives. Each needs the other to pay off.
"""),
    # ------------------------------------------------------------ selective batching (04)
    dict(id="sel-which-ops", topic="selective batching", lesson="04",
         question="In selective batching, which operations are batched across sequences and which are not? Why does that lose almost nothing?",
         answer="""
Token-wise operations — the linear layers (QKV, output projection, MLP), layer norms,
activations, embeddings — are applied to all tokens of all sequences at once as one
`[T, hidden]` matrix. Attention is computed **per sequence**, because each sequence
attends to its own, differently long context. Attention has no weights, so not batching
it loses no weight reuse: the expensive weight reads are all in the batched matmuls.
"""),
    dict(id="sel-mixed-padding", topic="selective batching", lesson="04",
         question="One new request with a {n}-token prompt joins {b_minus} decoding sequences. Padded to a rectangular batch, how much work is padding? And flat?",
         values=_padding_values, answer="""
Rectangular `[B, n]` = {b} × {n} = {mixed_total} token slots; the decodes need 1 slot each,
so each of the {b_minus} decode rows carries n − 1 padding: (n − 1)(B − 1) = **{mixed_pad}**
padded slots, {mixed_frac:.0%} of the batch. A flat batch concatenates the real tokens:
{n} + {b_minus} of them, no padding at all — which is what makes mixing prefill and
decode in one forward pass affordable.
"""),
    dict(id="sel-metadata", topic="selective batching", lesson="04",
         question="A flat batch holds sequences that run 5, 1, 1 and 3 new tokens. What are `query_start_loc` (cu_seqlens) and the total token count?",
         values=_flat_batch_values, answer="""
The prefix sums of the lengths: `query_start_loc` = **{cu}**, T = {t} tokens. Sequence i
owns rows `query_start_loc[i]:query_start_loc[i+1]` of the `[T, hidden]` activations;
`positions` restart at each sequence's number of cached tokens, and `slot_mapping` says
where each token's K/V is written in the paged cache.
"""),
    # ------------------------------------------------------------ paged KV (05)
    dict(id="paged-reservation", topic="paged KV cache", lesson="05",
         question="A request reserves KV space for max_tokens = 2,048 but generates 300 tokens. How much of its reservation is wasted, contiguous vs paged with 16-token blocks?",
         values=_reservation_values, answer="""
Contiguous: {used} of {reserved} slots used, **{waste:.0%}** wasted for the whole lifetime
of the request. Paged: blocks are taken as the sequence grows, so it holds
{paged_slots} slots — only the tail of the last block is empty ({paged_waste:.1%}); on
average (block − 1)/2 = {avg_tail:.1f} slots per sequence. The vLLM paper (Kwon et al.,
SOSP 2023) measured 60–80% of KV memory wasted in earlier systems and under 4% with
PagedAttention.
"""),
    dict(id="paged-block-size", topic="paged KV cache", lesson="05",
         question="How do you choose the KV block size?",
         answer="""
Small blocks waste less (at most block − 1 slots per sequence) and make prefix sharing
finer-grained; large blocks mean shorter block tables, fewer gathers and better memory
coalescing in the attention kernel. 16 tokens is vLLM's usual default; SGLang's radix
cache defaults to 1-token pages; TensorRT-LLM exposes `tokens_per_block`. Measure the
kernel speed and the hit rate of prefix caching on your workload.
"""),
    dict(id="paged-admission", topic="paged KV cache", lesson="05",
         question="Misconception check: \"limiting the number of concurrent requests is enough to keep the KV cache safe\".",
         answer="""
No: a request limit says nothing about size. A handful of 32K-token prompts fills the
KV cache while the slot count is nowhere near its limit, and one huge prefill makes a
step very long. Schedulers limit **requests and tokens**: `max_num_seqs` *and*
`max_num_batched_tokens` per step, plus a check that the KV blocks are free at
admission — and preempt or reject when memory runs out anyway.
"""),
    dict(id="paged-preemption", topic="paged KV cache", lesson="05",
         question="What happens in a paged engine when a running sequence needs a new block and none is free?",
         answer="""
The scheduler **preempts** a sequence — the least urgent / latest arrival — to free its
blocks. By **recompute**: its K/V is dropped; when it returns, prompt + generated tokens
are prefilled again and decoding continues, with the same output. By **swap**: its
blocks are copied to CPU memory and back (minillm has both; vLLM 0.32's V1 engine only
recomputes — `_preempt_request` frees the blocks and sets `num_computed_tokens = 0`). No
one is admitted in a step that had to preempt (vLLM: the waiting queue is skipped when
`preempted_reqs` is non-empty). Frequent preemption shows as P99 latency spikes, not as
errors.
"""),
    dict(id="paged-fragmentation", topic="paged KV cache", lesson="05",
         question="What are internal and external fragmentation in a KV cache, and which one does paging remove?",
         answer="""
*Internal*: memory reserved inside an allocation but not used — the unfilled
`max_tokens` of a contiguous reservation, or the tail of a sequence's last block.
*External*: free memory split into pieces too small for a new contiguous allocation,
although enough is free in total. Paging removes external fragmentation entirely (any
free block will do) and bounds internal fragmentation to less than one block per
sequence.
"""),
    # ------------------------------------------------------------ chunked prefill (06)
    dict(id="chunk-stutter", topic="chunked prefill", lesson="06",
         question="Users see the output \"stutter\" now and then, while the average throughput looks fine. Likely cause, how to verify, fixes?",
         answer="""
**Cause:** a prefill is interrupting the decodes. When a request with a long prompt joins
the batch, that step must process its whole prompt — far more work than a decode step —
so every streaming user's next token arrives late. The total token count is unchanged,
so the average throughput hides it.

**Verify:** look at the distribution of inter-token latency (ITL/TPOT P99, maximum), not
the mean, and align the slow steps in time with the arrivals and prompt lengths of new
requests. If the stalls coincide with long prompts joining, that is it.

**Fix:** chunked prefill — cut long prompts into chunks that fit a per-step token budget
next to the decodes (a little TTFT traded for smooth TPOT); or route very long prompts to
a separate queue/instance, or disaggregate prefill and decode onto different GPUs.
"""),
    dict(id="chunk-budget", topic="chunked prefill", lesson="06",
         question="The token budget is {budget} per step and {decodes} sequences are decoding. How many steps does a {prompt}-token prompt need under decode-first chunked prefill?",
         values=_chunk_values, answer="""
Decodes go first: {decodes} tokens. The rest, {budget} − {decodes} = {per_step} tokens per
step, goes to the prompt: ⌈{prompt} / {per_step}⌉ = **{steps} steps** (if nothing else
competes). Its TTFT grows a little; in exchange no step is longer than a budget-sized
forward pass, so the decoders' TPOT stays flat.
"""),
    dict(id="chunk-ttft-tpot", topic="chunked prefill", lesson="06",
         question="How does the token budget (`max_num_batched_tokens`) trade TTFT against TPOT?",
         answer="""
A large budget lets a whole prompt prefill in one step: low TTFT for the newcomer, but
that step is long, so every decoding stream stalls (high TPOT P99). A small budget chops
prompts into many chunks: steps stay short and TPOT smooth, but a long prompt needs many
steps to its first token, and the fixed per-step overhead is paid more often. Choose it
from the SLA: the largest budget whose step time still meets the TPOT target, measured on
your hardware and length distribution.
"""),
    dict(id="chunk-decode-first", topic="chunked prefill", lesson="06",
         question="Why do chunked-prefill schedulers put decodes first in the token budget?",
         answer="""
A decode is one token of budget and it is what a streaming user is waiting for right
now; delaying it directly raises TPOT. Prefill chunks only fill the remaining budget, so
a long prompt can never stall the streams already running (Sarathi-Serve's
"stall-free" batching, Agrawal et al., OSDI 2024). Newcomers still make progress every
step with whatever budget is left. Engines differ in the detail: minillm schedules
decodes, then ongoing prompt chunks, then newcomers; vLLM 0.32 schedules every *running*
request first, in its running order (decodes and ongoing chunks alike), then waiting
ones — no separate decode-first sort.
"""),
    # ------------------------------------------------------------ kernels (07)
    dict(id="kern-paged-attention", topic="GPU kernels", lesson="07",
         question="Why does paged attention need its own kernel?",
         answer="""
A sequence's keys and values are scattered over non-contiguous blocks. A standard
attention kernel expects them contiguous; copying them together each step would cost a
full extra read and write of the cache. A paged kernel reads the block table and gathers
each block directly while computing attention, so the memory traffic stays one read of
the KV cache.
"""),
    dict(id="kern-online-softmax", topic="GPU kernels", lesson="07",
         question="What is online softmax and why do attention kernels use it?",
         answer="""
Softmax needs the maximum and the sum over all scores. Online softmax processes the
keys block by block, keeping a running maximum m, a running sum l and a running weighted
value sum; when a new block raises the maximum, the previous sums are rescaled by
exp(m_old − m_new). One pass over K and V then suffices, without materialising the whole
score row — essential when the context is long and lives in blocks.
"""),
    dict(id="kern-bandwidth", topic="GPU kernels", lesson="07",
         question="How do you judge whether a decode-attention kernel is good?",
         answer="""
Decode attention is memory-bound: it reads the KV cache once and does little math per
byte. So compute the **achieved bandwidth** = bytes read (K and V of every sequence's
context, plus queries and outputs) / kernel time, and compare it with the device's peak
(e.g. 3.35 TB/s on an H100). Well-written kernels reach a large fraction of the peak;
FLOPS are the wrong yardstick here.
"""),
    dict(id="kern-cuda-graphs", topic="GPU kernels", lesson="10",
         question="Why do CUDA graphs conflict with continuous batching, and how do engines still use them?",
         answer="""
A CUDA graph records a fixed sequence of kernel launches with fixed shapes and fixed
memory addresses, then replays it with one launch — removing the CPU launch overhead that
dominates small decode steps. Continuous batching changes the batch (and so the shapes)
every step. Engines capture one graph per **batch-size bucket** (e.g. 1, 2, 4, 8, 16, …),
copy each step's inputs into the graph's static buffers, **pad** the batch up to the next
bucket, and fall back to eager execution for shapes they did not capture (large prefill
steps). TGI's `--cuda-graphs`, SGLang's `--cuda-graph-bs`, vLLM's compilation config all
choose those buckets.
"""),
    # ------------------------------------------------------------ benchmarking (08)
    dict(id="bench-metrics", topic="benchmarking", lesson="08",
         question="A request arrives at t = 0, its first token appears at t = 0.35 s, and its 41st and last at t = 2.35 s. TTFT, TPOT, E2E?",
         values=_tpot_values, answer="""
- TTFT = first token − arrival = **{ttft:.2f} s** (queueing + prefill);
- TPOT = (finish − first token) / (tokens − 1) = 2.00 s / 40 = **{tpot_ms:.0f} ms**;
- E2E = finish − arrival = **{e2e:.2f} s**.

TPOT averages one request's gaps; ITL keeps every gap, so a single long stall shows up in
ITL P99 even when TPOT looks fine.
"""),
    dict(id="bench-throughput-misconception", topic="benchmarking", lesson="08",
         question="Misconception check: \"higher throughput is always better\".",
         answer="""
Throughput and tail latency pull against each other: bigger batches and budgets raise
tokens/s but also TPOT and queueing. A configuration that doubles throughput while
pushing P99 TTFT or TPOT past the SLO serves *fewer happy users*. Optimise **goodput** —
requests per second that meet the SLO (P99 TTFT and TPOT limits) — measured on the real
length distribution, not raw throughput.
"""),
    dict(id="bench-tune-seqs", topic="benchmarking", lesson="08",
         question="How do you tune `max_num_seqs` for a service?",
         answer="""
Watch three signals under a realistic load: GPU utilisation, KV-cache usage, and TPOT
(plus TTFT) percentiles.

- Utilisation low and KV memory to spare → raise concurrency: throughput grows.
- Throughput grows but P99 TTFT/TPOT break the SLO → too much; lower it, or split long
  and short prompts into separate queues/instances, or disaggregate prefill and decode.
- Frequent preemptions → the KV cache is the limit: lower concurrency or add memory.

The load test must use the real prompt and output length distribution; a benchmark of
uniformly short requests will look great and fail in production.
"""),
    dict(id="bench-little", topic="benchmarking", lesson="08",
         question="A service receives {rate} requests/s and each takes {latency:.0f} s end to end. How many requests are in flight on average?",
         values=_little_values, answer="""
Little's law: concurrency = arrival rate × time in system = {rate} × {latency:.0f} =
**{concurrency:.0f}** requests in the system (running or queued). If `max_num_seqs` is
below that, the queue grows without bound; if the KV cache cannot hold that many
sequences at their typical length, preemptions follow.
"""),
    dict(id="bench-percentiles", topic="benchmarking", lesson="08",
         question="Why report P50 and P99 instead of the mean latency?",
         answer="""
Latency distributions in LLM serving are skewed: most requests are fine, a few wait
behind long prompts, preemptions or stragglers. The mean mixes both and hides the tail;
P50 describes the typical user, P99 the unlucky one in a hundred — the one who files the
complaint. SLOs are stated on percentiles for that reason, and each request class
(chat, batch) deserves its own.
"""),
    # ------------------------------------------------------------ scheduling (09)
    dict(id="sched-policies", topic="scheduling policies", lesson="09",
         question="FCFS, shortest-first, priority: what goes wrong with each?",
         answer="""
- **FCFS**: head-of-line blocking — a long request at the front holds a slot while short
  ones behind it wait.
- **Shortest-first**: minimises mean wait, but long requests starve while short ones keep
  arriving (and it needs a length estimate).
- **Strict priority**: the low class starves under sustained high-priority load.

The remedy is *aging* (waiting improves a request's key over time), per-tenant quotas,
and measuring waiting-time distributions per class.
"""),
    dict(id="sched-aging", topic="scheduling policies", lesson="09",
         question="A batch job has priority {gap} levels worse than chats, with aging at {rate} levels/s. Which chats can still be served before it?",
         values=_aging_values, answer="""
Both age at the same rate, so only the arrival times matter: a chat arriving s seconds
after the job ranks ahead of it only while {gap} − {rate}·s > 0, i.e. if it arrived
within **{window:.0f} s** of the job. Chats that arrive later queue behind it. Only a
finite amount of work can overtake the job — that is the starvation bound. Without aging
the window is infinite.
"""),
    dict(id="sched-limits", topic="scheduling policies", lesson="09",
         question="Should a high-priority request be allowed to exceed `max_num_seqs` or the KV budget?",
         answer="""
No. Priority orders requests *inside* the global limits; it must never bypass them, or
one urgent burst can exhaust memory and stall everyone (urgent requests included). The
legal way for an urgent request to get in sooner is to **preempt** less urgent running
work, which frees a slot and blocks through the normal path (SGLang does this when the
priority gap exceeds `--priority-scheduling-preemption-threshold`; vLLM 0.32 never evicts
running work for a waiting request — its priority only picks the victim when a running
request runs out of blocks). Add per-tenant quotas and a maximum context length
(`max_model_len`) so no single customer can mark everything urgent, or send one huge
prompt, and take the server.
"""),
    dict(id="sched-memory-options", topic="scheduling policies", lesson="09",
         question="KV memory is exhausted. Compare delaying admission, recompute, swap and rejecting.",
         answer="""
- **Delay admission** (reserve the worst case before admitting): never preempts, but
  reserves memory for tokens that are never generated → low concurrency and throughput
  (TensorRT-LLM's default capacity policy, `GUARANTEED_NO_EVICT`).
- **Preempt by recompute**: optimistic admission; a victim drops its K/V and is
  prefilled again later: costs compute and a stall for the victim, no extra memory
  (vLLM V1's only mode; SGLang calls it "retract"). TensorRT-LLM's `MAX_UTILIZATION`
  also admits optimistically and pauses requests when the cache is full.
- **Preempt by swap**: copy the victim's blocks to CPU memory and back: saves compute,
  costs PCIe bandwidth, pinned host memory and complexity (vLLM's old V0 engine; removed
  in V1).
- **Reject** (admission control): bound the queue; clients get an error (503 +
  `Retry-After`) and retry — protects the latency of admitted requests.

Compare on your workload: throughput, P99 TTFT/E2E, tokens recomputed vs blocks swapped,
rejections, goodput.
"""),
    dict(id="sched-quota", topic="scheduling policies", lesson="09",
         question="How would you implement per-tenant quotas in an iteration-level scheduler, and what do they cost?",
         answer="""
At admission: skip waiting requests whose tenant already holds its quota of running
sequences (or tokens), so one tenant's burst cannot occupy every slot. Cost: a hard quota
leaves slots idle when only the capped tenant has work; a *work-conserving* quota lets a
tenant borrow idle capacity and makes the borrowed sequences the first to be preempted
when others arrive.
"""),
    # ------------------------------------------------------------ beyond (10)
    dict(id="beyond-prefix", topic="beyond: prefix caching & speculation", lesson="10",
         question="How does prefix caching find reusable KV blocks, and why is the last prompt token always recomputed?",
         answer="""
Each full block gets a hash chained from its parent: hash(parent hash, block tokens). Equal
hashes stand for equal tokens *and* equal everything before them, so equal K/V (up to hash
collisions — the next question). A new prompt hashes its full blocks in order and takes
every cached one up to the first miss (later hashes depend on the missing one); shared
blocks get a reference count. The last prompt token must run through the model anyway —
its logits pick the first output token — so the block holding it is never taken from the
cache. vLLM (0.32) has prefix caching on by default; SGLang keeps cached prefixes in a
radix tree keyed by the tokens themselves.
"""),
    dict(id="beyond-prefix-collision", topic="beyond: prefix caching & speculation", lesson="10",
         question="Two different prompt prefixes get the same block hash. What goes wrong, and how do engines prevent it?",
         answer="""
A lookup by hash alone would hand the second request the **first one's keys and
values**: a silently wrong answer, and across users a leak (an attacker who can craft
colliding prompts can make a victim's request run on attacker-chosen KV, or probe what
others asked through cache-hit timing). Python's `hash` of a tuple of ints is 64 bits,
not cryptographic, and not randomised for integers — collisions can be constructed.

Two defences:
1. **Verify on a hit.** Keep each cached block's own tokens and its parent, and accept a
   hit only if both match — a collision becomes a miss (minillm's `PrefixCache.match`).
   The subtle part: the parent check must pin the *block you just matched*, all the way
   back to the first block. Comparing only the parent's *hash* inherits a collision
   higher up the chain, because every later hash is computed from the colliding value.
2. **A collision-resistant hash.** vLLM 0.32 hashes blocks with SHA-256 by default
   (`--prefix-caching-hash-algo sha256`; also `sha256_cbor`, `xxhash`, `xxhash_cbor`) and
   trusts the hash. With the non-cryptographic xxhash it seeds the chain with random
   per-process bytes (unless `PYTHONHASHSEED` is set) so colliding blocks cannot be
   precomputed. For isolation on purpose, vLLM takes a per-request `cache_salt`.

SGLang's radix cache compares the token sequences themselves, so it has no hash to
collide.
"""),
    dict(id="beyond-spec", topic="beyond: prefix caching & speculation", lesson="10",
         question="Why does speculative decoding not change greedy outputs, and how many tokens per step can it give?",
         values=_spec_values, answer="""
Guesses (from a draft model, or by prompt lookup) are verified in one forward pass; a
guess is kept only if it equals the token the model itself picks at that position, and
the model's own pick after the last accepted guess is always added. So the output is
exactly greedy decoding; only the number of forward passes changes. (For sampling,
rejection sampling keeps the distribution exact.)

With k guesses each accepted with probability α, the expected tokens per step are
(1 − α^(k+1)) / (1 − α) (Leviathan et al., 2023): α = 0.5 gives {t50_2:.2f} (k = 2),
{t50_4:.2f} (k = 4), {t50_8:.2f} (k = 8); α = 0.8 gives {t80_2:.2f}, {t80_4:.2f}, {t80_8:.2f}.
It pays when decoding is memory-bound (a few extra tokens per forward are nearly free) —
at small batches; at large batches the extra tokens cost real compute.
"""),
    dict(id="beyond-parallel", topic="beyond: multi-GPU", lesson="10",
         question="A 70B model in bf16 does not fit one 80 GB GPU. Tensor parallel or pipeline parallel?",
         values=_tp_values, answer="""
The weights alone are {w:.0f} GB. **Tensor parallelism** splits every matrix across GPUs
({per_gpu_tp4:.0f} GB each at TP = 4, {per_gpu_tp8:.1f} GB at TP = 8): every layer needs an
all-reduce, so it wants fast links (NVLink) inside one node, and it cuts per-token latency.
**Pipeline parallelism** gives each GPU a range of layers: only activations cross between
stages (fine across nodes), but a single request flows through stages one after the
other, so it needs many requests in flight (micro-batches) to keep every stage busy and
does not reduce per-token latency. Common practice: TP inside a node, PP across nodes.
"""),
    dict(id="beyond-disagg", topic="beyond: multi-GPU", lesson="10",
         question="What is disaggregated prefill/decode serving and when is it worth it?",
         answer="""
Prefill (compute-bound, bursty) and decode (memory-bound, steady) run on *different*
GPU pools; after the prefill, the request's KV cache is transferred to a decode
instance. Each pool gets its own parallelism and batch size, and long prefills can no
longer stall decoding streams — tail ITL becomes controllable. The price: KV transfer
bandwidth, more moving parts, and it does not raise throughput by itself (vLLM's docs
say so explicitly). Worth it for large deployments with strict TTFT and TPOT SLOs on
long prompts; chunked prefill is the single-instance alternative.
"""),
    dict(id="beyond-vllm", topic="beyond: multi-GPU", lesson="10",
         question="Your minillm script works. What changes to run it on vLLM, and which knobs carry over?",
         answer="""
The import: `from vllm import LLM, SamplingParams` instead of `from minillm import …`;
`LLM(model=…)` takes a Hugging Face model name or folder. The knobs keep their names:
`max_num_seqs`, `max_num_batched_tokens`, `block_size`, `enable_chunked_prefill`,
`enable_prefix_caching`, `speculative_config={"method": "ngram", …}`; `num_kv_blocks`
becomes `gpu_memory_utilization` (or vLLM's block-count override); scale-out is
`tensor_parallel_size` / `pipeline_parallel_size`. minillm-only extras (the simulator,
the Trace, the widgets) have no vLLM counterpart.
"""),
    # ------------------------------------------------------------ online serving (12)
    dict(id="serve-ttft-client", topic="online serving", lesson="12",
         question="Why must TTFT be measured at the client and not read from the engine?",
         answer="""
The engine's TTFT runs from `add_request` to the step that sampled the token. The user
also waits for the connection and upload, request parsing and validation, the engine
loop reaching a step boundary (a request arriving mid-step joins the next step), the SSE
framing, the network back and the client's own parsing — and all of these grow under
load. Server histograms are fine for watching trends across a fleet; an SLA is about
what clients see, so benchmarks time at the client (`vllm bench serve`, this course's
`python -m benchmarks serve`) and compare with the server's numbers to find where the
time goes.
"""),
    dict(id="serve-disconnect", topic="online serving", lesson="12",
         question="A user closes the browser tab in the middle of a streamed answer. What must the server do, and what goes wrong if it does not?",
         answer="""
The HTTP layer sees the connection close and cancels the streaming handler; the handler
must then **abort** the request in the engine, which frees its batch slot and KV blocks.
In minillm the request's stream is closed and the engine loop applies the abort before
its next step; in vLLM 0.32 a handler wrapped in `with_cancellation` listens for the
disconnect, and `AsyncLLM` aborts the request when its generator is cancelled. Without
the abort the engine keeps decoding for nobody: wasted compute, a slot and KV blocks
that waiting requests need — and impatient users who retry add load on top.
"""),
    dict(id="serve-shed-load", topic="online serving", lesson="12",
         question="How does a server shed load, and why is an unbounded queue a bad idea?",
         answer="""
Past capacity the queue grows for as long as the overload lasts, and every queued
request's TTFT grows with it: eventually nobody meets the SLO (goodput collapses) while
throughput still looks fine. **Load shedding** caps the queue and answers the excess at
once with **503 + `Retry-After`**, so clients back off, retry, or a load balancer sends
them to another replica: minillm's server `--max-queued-requests`, SGLang
`--max-queued-requests`, vLLM 0.32 `--max-num-queued-reqs` (counts running requests too)
and `--max-num-queued-tokens` (a cap on the prompt tokens waiting for prefill, chosen
from a TTFT target). Per-tenant rate limits answer 429. Within the engine, admission
control can also look at KV memory, and priority classes can be shed last.
"""),
    # ------------------------------------------------------------ one-liners and memory hooks
    dict(id="hook-static-continuous", topic="one-liners & memory hooks", lesson="03",
         question="In one sentence each, with a picture to remember: static vs continuous batching.",
         answer="""
**Static:** the batch is a coach that leaves only when the whole group is back — everyone
waits for the slowest passenger, and the seats of those already home stay empty (the seed
articles' restaurant: the table is not cleared until the slowest diner is done, however
many seats are free). **Continuous:** a metro line — at every stop (every forward pass)
finished passengers get off and waiting ones get on, so no seat rides empty while people
wait on the platform. The gain comes from refilling seats at once, not from a bigger
train.
"""),
    dict(id="hook-time-space", topic="one-liners & memory hooks", lesson="05",
         question="Continuous batching and PagedAttention in one line.",
         answer="""
**One manages time, the other space — and each needs the other.** Continuous batching
decides *when* a request enters and leaves the batch; paging decides *where* its KV
lives, block by block, so the slot a leaver frees can really be filled. Without paging a
free slot has no memory behind it; without continuous batching freed memory waits for
the whole batch to end.
"""),
    dict(id="hook-batching", topic="one-liners & memory hooks", lesson="01",
         question="Why batching helps decoding, in one line — and its two limits.",
         answer="""
**A decode step reads every weight once; a batch shares that read among all its
sequences.** It stops paying at the KV-memory wall (the caches no longer fit — usually
first) or the compute wall (the step becomes compute-bound).
"""),
    dict(id="hook-chunked", topic="one-liners & memory hooks", lesson="06",
         question="Chunked prefill in one line.",
         answer="""
**Trade a little TTFT for smooth TPOT:** cut long prompts into chunks that fit the
per-step token budget next to the running decodes, so no single step is long enough to
make every stream stutter.
"""),
    dict(id="hook-aging", topic="one-liners & memory hooks", lesson="09",
         question="Aging in one line.",
         answer="""
**The longer you wait, the better your rank** — every waiting request improves at the
same rate, so a newcomer can only overtake you if it arrived within (priority gap ÷
aging rate) seconds of you: a bounded wait instead of starvation.
"""),
    # ------------------------------------------------------------ claims checked against sources
    dict(id="claim-talk-track", topic="misconceptions & claims checked", lesson="03",
         question="Critique this talk track: \"Continuous batching is vLLM's core optimisation. Static batching is a bus that waits until everyone is on board; continuous batching is a metro, on and off at every station. Throughput goes up 2–3×, latency down 3–5×.\"",
         answer="""
Keep the picture, fix the rest.

- **Attribution.** Iteration-level scheduling is Orca's (Yu et al., OSDI 2022) and every
  major engine has it. vLLM's own contribution is **PagedAttention** (Kwon et al., SOSP
  2023): paging the KV cache so that continuous batching can keep many more sequences
  resident.
- **Multipliers without conditions** mean nothing. Which model and GPU? Against which
  static baseline (batch size, padding)? On which workload — the gain comes from the
  *variance* of output lengths and is ≈1× when all answers have the same length? At which
  load — at light load nobody queues and throughput equals the arrival rate either way?
  Which latency — mean, P50, P99; TTFT or end-to-end? Lesson 11 §3 measures the same
  engine giving very different factors as only the workload changes.
- **A better version:** "Continuous batching schedules every forward pass instead of
  every batch: finished requests leave, waiting ones join, so no slot idles behind a
  straggler. The gain grows with output-length variance and load — Orca reports 36.9× on
  GPT-3 175B against FasterTransformer at the same latency, but on equal-length work it is
  about 1×. vLLM adds paged KV memory so the freed slots can really be filled."
"""),
    dict(id="claim-vllm-core", topic="misconceptions & claims checked", lesson="10",
         question="\"Continuous batching is vLLM's core innovation.\" True?",
         answer="""
No. Continuous (iteration-level) batching comes from Orca (Yu et al., OSDI 2022); TGI,
TensorRT-LLM ("in-flight batching") and LMDeploy ("persistent batching") implement it
too. vLLM's paper is about **memory**: PagedAttention (Kwon et al., SOSP 2023) stores the
KV cache in fixed-size blocks allocated on demand, which cuts the waste of contiguous
reservations and lets continuous batching keep more sequences running. In Anyscale's 2023
benchmark (OPT-13B on one A100), TGI's continuous batching alone gave about 8× over naive
static batching and vLLM about 23× — the difference is largely paging.
"""),
    dict(id="claim-compute-waste", topic="misconceptions & claims checked", lesson="05",
         question="An article says \"existing inference systems waste 60–80% of GPU compute\" (2023). What was actually measured?",
         answer="""
*Memory*, not compute. The vLLM paper (Kwon et al., SOSP 2023) profiled earlier systems
(FasterTransformer- and Orca-style contiguous reservations) and found that only about 20–38%
of the **KV cache memory** held actual token states — 60–80% reserved but wasted
(reservation for `max_tokens`, internal and external fragmentation) — against under 4%
waste with PagedAttention. Wasted KV memory costs throughput indirectly (fewer sequences
fit), but it is not idle arithmetic units.
"""),
    dict(id="claim-block-per-token", topic="misconceptions & claims checked", lesson="05",
         question="\"With PagedAttention, every generated token gets a new KV block.\" Correct it.",
         answer="""
A block holds `block_size` tokens (16 by default in vLLM). A sequence takes a new block
only when its last block is full — once every `block_size` tokens — so at most one block
per sequence is partly empty: under `block_size` wasted slots, about half a block on
average. A block per token would make block tables as long as the sequence and the
attention kernel's gathers needlessly fine.
"""),
    dict(id="claim-ragged-free", topic="misconceptions & claims checked", lesson="04",
         question="\"Ragged (flat) batching removes padding, so it wastes nothing.\" What is still wasted?",
         answer="""
It removes padding from the token-wise operations (the matmuls run on exactly the real
tokens). But: attention still differs per sequence, so kernels must balance uneven work
(a 4,000-token prompt next to one-token decodes); implemented naively as one flat
attention with a block-diagonal mask, it computes T × T scores and throws away every
cross-sequence pair; the last KV block of each sequence is partly empty; and engines
that replay CUDA graphs pad each step up to the next captured batch size. Less waste,
not none.
"""),
    dict(id="claim-fill-to-max", topic="misconceptions & claims checked", lesson="03",
         question="A textbook scheduler loop: \"remove finished requests, then add waiting ones until max_batch_size\". What is missing?",
         answer="""
Every limit except the slot count. Admission must also check the **token budget** of the
step (a 32K-token prompt would make one step enormous) and that **KV blocks** are free
for the prompt — and the loop needs an answer for when a running sequence cannot get its
next block (preempt by recompute or swap), a policy for the order of the queue, and a
rule not to admit anyone in a step that had to preempt. minillm's `admit_waiting` and
`take_blocks` (lesson 06) and vLLM's `Scheduler.schedule()` do all of this.
"""),
]


def load_questions() -> list[dict]:
    """The bank with every answer's (and question's) numbers computed and filled in."""
    questions = []
    for q in QUESTIONS:
        q = dict(q)
        values = q.pop("values", None)
        if values is not None:
            filled = values()
            q["answer"] = q["answer"].format(**filled).strip()
            q["question"] = q["question"].format(**filled)
        else:
            q["answer"] = q["answer"].strip()
        questions.append(q)
    return questions
