"""Bench experiments for lesson 10's two techniques: prefix caching and speculative decoding.

    prefix_caching   48 requests sharing a 384-token system prompt: with and without
                     the prefix cache — prompt tokens computed, hit rate, TTFT,
                     tokens/s, and whether the answers are the same           real model
    speculative      prompt-lookup (n-gram) speculation on two tasks: one whose answer
                     copies the prompt, one that does not — acceptance rate, tokens
                     per forward pass, speed-up, and whether the answers are the same
                                                                              real model

Both compare two configurations of the same engine on the same requests, alternating
rounds (`ab.alternate`) like every other experiment. Outputs are compared token for
token: greedy decoding with and without either technique should give the same answer.
A difference is reported, not hidden — on real hardware it can only come from a
numerical near-tie (a different number of rows in a matmul rounds differently); the
oracle tests (`tests/test_engine_oracle.py`) are where exactness is proven.
"""

from __future__ import annotations

import gc
from functools import partial

import numpy as np

from minillm.bench import workloads as wl
from minillm.bench.ab import alternate, medians, paired_ratios, summary
from minillm.bench.engine_runs import kv_blocks_for, run_specs, warm_up
from minillm.metrics import summarize
from minillm.workload import RequestSpec

KEYS = ("duration_s", "generated_tokens", "generated_tokens_per_s", "ttft_p50", "ttft_p99",
        "tpot_p50", "num_steps")


def _warm_prompts(bench, count: int) -> list[list[int]]:
    """Random ids that share no block with any workload prompt (nothing to cache)."""
    rng = np.random.default_rng(12345)
    return [rng.integers(2, bench.vocab_size, size=8).tolist() for _ in range(count)]


def take_tokens(results: dict[str, list[dict]]) -> dict[str, dict[str, list[int]]]:
    """Remove the generated tokens from every run's result (they are not numbers for the
    JSON); keep the first round's, per contender, for the comparison."""
    first = {name: runs[0]["tokens"] for name, runs in results.items()}
    for runs in results.values():
        for run in runs:
            del run["tokens"]
    return first


def differing_requests(a: dict[str, list[int]], b: dict[str, list[int]]) -> list[str]:
    """Ids of the requests whose generated tokens differ between two runs."""
    return sorted(rid for rid in a if a[rid] != b.get(rid))


# ------------------------------------------------------------------ prefix caching

def mean_kv_blocks(trace) -> float:
    """KV blocks held by running requests, averaged over the run (weighted by step time).

    A block shared through the prefix cache counts once. (The peak is no use here: it
    comes in the first step, when a burst's first batch is prefilled side by side before
    any of it is cached.)"""
    weights = [st.duration for st in trace.steps]
    return float(np.average([st.kv_blocks_used for st in trace.steps], weights=weights))


def prefix_caching(bench) -> dict:
    """The same shared-prefix burst with the prefix cache off and on.

    Each run gets a fresh engine, so the cache starts empty every time: a hit is a
    request reusing blocks that an *earlier request of the same run* computed. With a
    burst, the first `max_num_seqs` requests are prefilled together and find nothing;
    the rest find the shared prompt's full blocks (the last prompt token is always
    recomputed, so the block holding it is too).
    """
    cfg = bench.config
    shape = wl.QUICK_PREFIX if cfg.quick else wl.FULL_PREFIX
    specs = wl.prefix_workload(shape, cfg.seed)
    prompts = wl.prefix_prompts(specs, shape, bench.vocab_size, bench.tokenizer, cfg.seed)
    blocks = kv_blocks_for(specs, cfg.max_num_seqs)
    warm = _warm_prompts(bench, 2)

    def run(caching: bool) -> dict:
        llm = bench.make_llm(scheduling="continuous", num_kv_blocks=blocks,
                             enable_prefix_caching=caching)
        warm_up(llm, warm)
        tokens: dict[str, list[int]] = {}
        trace = run_specs(llm, specs, prompts, tokens)
        del llm
        gc.collect()
        s = summarize(trace)
        prompt_tokens = sum(r.prompt_len for r in trace.requests.values())
        cached = sum(r.num_cached_tokens for r in trace.requests.values())
        return {**{k: s[k] for k in KEYS},
                "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                "hit_rate": cached / prompt_tokens,
                "prefill_tokens_computed": sum(st.num_prefill_tokens for st in trace.steps),
                "mean_kv_blocks": mean_kv_blocks(trace),
                "tokens": tokens}

    results = alternate({"no cache": partial(run, False), "prefix cache": partial(run, True)},
                        cfg.rounds, on_run=bench.tick)
    tokens = take_tokens(results)
    differ = differing_requests(tokens["no cache"], tokens["prefix cache"])
    return {"workload": {"num_requests": len(specs), "shared_prefix": shape.shared_prefix,
                         "prompt_tokens": sum(s.prompt_len for s in specs),
                         "output_tokens": sum(s.output_len for s in specs),
                         "max_num_seqs": cfg.max_num_seqs, "num_kv_blocks": blocks,
                         "shape": vars(shape)},
            "runs": results,
            "medians": medians(results),
            "ratios": {"throughput, cache / no cache": summary(paired_ratios(
                           results, "prefix cache", "no cache", "generated_tokens_per_s")),
                       "TTFT P50, no cache / cache": summary(paired_ratios(
                           results, "no cache", "prefix cache", "ttft_p50"))},
            "outputs_differ": differ}


# ------------------------------------------------------------------ speculative decoding

def _pass_stats(trace) -> tuple[int, int]:
    """(tokens generated, forward passes that produced them), summed over requests.

    A request's tokens that share one timestamp came out of the same forward pass."""
    tokens = passes = 0
    for r in trace.requests.values():
        tokens += len(r.token_times)
        passes += len(set(r.token_times))
    return tokens, passes


def speculative(bench) -> dict:
    """Plain greedy decoding vs prompt-lookup speculation, on a copy task and a free one."""
    cfg = bench.config
    shape = wl.QUICK_SPECULATIVE if cfg.quick else wl.FULL_SPECULATIVE
    tasks = wl.speculative_prompts(shape, bench.vocab_size, bench.tokenizer, cfg.seed)
    ngram = {"method": "ngram", "num_speculative_tokens": shape.num_speculative_tokens,
             "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    workloads = {task: [RequestSpec(f"{task}-{i}", len(p), max_tokens, max_tokens)
                        for i, p in enumerate(prompts)]
                 for task, (prompts, max_tokens) in tasks.items()}
    # one engine per mode serves both tasks (the proposer keeps no state between runs);
    # room for the guesses too: up to k draft slots past a sequence's last token
    blocks = max(kv_blocks_for(specs, shape.max_num_seqs) for specs in workloads.values())
    blocks += shape.max_num_seqs
    llms = {mode: bench.make_llm(scheduling="continuous", max_num_seqs=shape.max_num_seqs,
                                 num_kv_blocks=blocks, speculative_config=config)
            for mode, config in (("plain", None), ("speculative", ngram))}
    for llm in llms.values():
        warm_up(llm, _warm_prompts(bench, shape.max_num_seqs))
    runners = {f"{task} {mode}": partial(_speculative_run, llm, workloads[task], tasks[task][0])
               for task in tasks for mode, llm in llms.items()}
    results = alternate(runners, cfg.rounds, on_run=bench.tick)
    del llms
    gc.collect()
    tokens = take_tokens(results)
    stats = {task: {"num_requests": len(specs), "max_tokens": specs[0].max_tokens,
                    "prompt_tokens": sum(s.prompt_len for s in specs)}
             for task, specs in workloads.items()}
    out = {"workload": {**stats, "max_num_seqs": shape.max_num_seqs,
                        "speculative_config": ngram},
           "runs": results,
           "medians": medians(results),
           "ratios": {}, "outputs_differ": {}}
    for task in tasks:
        out["ratios"][f"{task}: speculative / plain"] = summary(paired_ratios(
            results, f"{task} speculative", f"{task} plain", "generated_tokens_per_s"))
        out["outputs_differ"][task] = differing_requests(tokens[f"{task} plain"],
                                                         tokens[f"{task} speculative"])
    return out


def _speculative_run(llm, specs, prompts) -> dict:
    tokens: dict[str, list[int]] = {}
    trace = run_specs(llm, specs, prompts, tokens)
    s = summarize(trace)
    generated, passes = _pass_stats(trace)
    proposed = sum(r.num_draft_proposed for r in trace.requests.values())
    accepted = sum(r.num_draft_accepted for r in trace.requests.values())
    return {**{k: s[k] for k in KEYS}, "tokens_per_pass": generated / passes,
            "drafts_proposed": proposed, "drafts_accepted": accepted,
            "acceptance_rate": accepted / proposed if proposed else float("nan"),
            "tokens": tokens}
