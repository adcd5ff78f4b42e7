"""Prefix caching on and off, on requests that share a long system prompt.

Every request starts with the same header (a support bot's instructions, a RAG
template, a few-shot prefix) followed by its own short question. With the prefix cache
(前缀缓存) a request reuses the KV blocks an earlier request computed for the shared
part, so fewer prompt tokens are computed and the first token comes sooner.

Printed: prompt tokens computed, hit rate, KV blocks in use, TTFT, tokens/s, wall
time, the ratios, and whether the answers are the same with and without the cache
(`answers.py`). Real model; alternating rounds like every other experiment.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from benchmarks.ab import alternate, medians, paired_ratios, summary
from benchmarks.answers import (RUN_KEYS, differing_requests, same_answers_line, take_tokens,
                                   unrelated_prompts)
from benchmarks.common import (bars_with_rounds, figure, kv_blocks_for, ms, num, pct,
                                  ratio_line, run_workload, save, table, warm_up)
from benchmarks.workloads import prompt_token_ids
from minillm.sim.metrics import summarize
from minillm.sim.workload import RequestSpec, lognormal, make_workload
from minillm.widgets.style import COLORS


@dataclass(frozen=True)
class PrefixShape:
    """Requests that all start with the same `shared_prefix` tokens, then their own
    question."""

    num_requests: int = 48
    shared_prefix: int = 384         # tokens every prompt starts with (24 blocks of 16)
    question_median: int = 24        # the request's own part: lognormal, sigma 0.5
    question_cap: int = 64
    output_median: int = 24          # lognormal, sigma 0.5
    output_cap: int = 64


FULL_PREFIX = PrefixShape()
QUICK_PREFIX = PrefixShape(num_requests=8, shared_prefix=48, question_median=8,
                           question_cap=16, output_median=4, output_cap=8)


def prefix_workload(shape: PrefixShape = FULL_PREFIX, seed: int = 0) -> list[RequestSpec]:
    """A burst of requests whose prompts are `shared_prefix` + their own question.

    `prompt_len` counts both parts; `prefix_prompts` builds the token ids.
    """
    specs = make_workload(shape.num_requests,
                          lognormal(shape.question_median, 0.5, cap=shape.question_cap),
                          lognormal(shape.output_median, 0.5, cap=shape.output_cap),
                          arrival="burst", max_tokens="output_len", seed=seed)
    return [replace(s, prompt_len=shape.shared_prefix + s.prompt_len) for s in specs]


def prefix_prompts(specs: list[RequestSpec], shape: PrefixShape, vocab_size: int,
                   tokenizer=None, seed: int = 0) -> list[list[int]]:
    """Token ids: the same first `shape.shared_prefix` ids in every prompt, then a
    different question per request (text windows with a tokenizer, random ids without)."""
    questions = [replace(s, prompt_len=s.prompt_len - shape.shared_prefix) for s in specs]
    header = RequestSpec("header", shape.shared_prefix, 1, 1)
    if tokenizer is not None:
        shared = prompt_token_ids([header], vocab_size, tokenizer, seed)[0]
        # start the questions elsewhere in the passage, so they differ from the header
        own = prompt_token_ids([header] + questions, vocab_size, tokenizer, seed)[1:]
    else:
        rng = np.random.default_rng(seed + 1)
        shared = rng.integers(2, vocab_size, size=shape.shared_prefix).tolist()
        own = prompt_token_ids(questions, vocab_size, None, seed)
    return [shared + q for q in own]


def planned_runs(config) -> int:
    return 2 * config.rounds


def mean_kv_blocks(trace) -> float:
    """KV blocks held by running requests, averaged over the run (weighted by step time).

    A block shared through the prefix cache counts once. (The peak is no use here: it
    comes in the first step, when a burst's first batch is prefilled side by side before
    any of it is cached.)"""
    weights = [st.duration for st in trace.steps]
    return float(np.average([st.kv_blocks_used for st in trace.steps], weights=weights))


def cache_numbers(trace, tokens: dict) -> dict:
    """A run's numbers: speed, latency, and how much of the prompts the cache served."""
    s = summarize(trace)
    prompt_tokens = sum(r.prompt_len for r in trace.requests.values())
    cached = sum(r.num_cached_tokens for r in trace.requests.values())
    return {**{k: s[k] for k in RUN_KEYS},
            "prompt_tokens": prompt_tokens, "cached_tokens": cached,
            "hit_rate": cached / prompt_tokens,
            "prefill_tokens_computed": sum(st.num_prefill_tokens for st in trace.steps),
            "mean_kv_blocks": mean_kv_blocks(trace),
            "tokens": tokens}


def run(bench) -> dict:
    """The same shared-prefix burst with the prefix cache off and on.

    Each run gets a fresh engine, so the cache starts empty every time: a hit is a
    request reusing blocks that an *earlier request of the same run* computed. With a
    burst, the first `max_num_seqs` requests are prefilled together and find nothing;
    the rest find the shared prompt's full blocks (the last prompt token is always
    recomputed, so the block holding it is too).
    """
    cfg = bench.config
    shape = QUICK_PREFIX if cfg.quick else FULL_PREFIX
    specs = prefix_workload(shape, cfg.seed)
    prompts = prefix_prompts(specs, shape, bench.vocab_size, bench.tokenizer, cfg.seed)
    blocks = kv_blocks_for(specs, cfg.max_num_seqs)
    warm = unrelated_prompts(bench.vocab_size, 2)

    def one_run(caching: bool) -> dict:
        llm = bench.make_llm(scheduling="continuous", num_kv_blocks=blocks,
                             enable_prefix_caching=caching)
        warm_up(llm, warm)
        tokens: dict[str, list[int]] = {}
        trace = run_workload(llm, specs, prompts, tokens)
        del llm
        gc.collect()
        return cache_numbers(trace, tokens)

    results = alternate({"no cache": partial(one_run, False), "prefix cache": partial(one_run, True)},
                        cfg.rounds, on_run=bench.tick)
    tokens = take_tokens(results)
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
            "outputs_differ": differing_requests(tokens["no cache"], tokens["prefix cache"])}


def text(r: dict) -> str:
    w, m = r["workload"], r["medians"]
    head = (f"Prefix caching — burst of {w['num_requests']} requests sharing a {w['shared_prefix']}-token "
            f"prompt prefix ({w['prompt_tokens']:,} prompt, {w['output_tokens']:,} output tokens), "
            f"{w['max_num_seqs']} slots, fresh cache per run; real model")
    names = list(m)
    keys = [("prompt tokens computed", "prefill_tokens_computed", lambda x: f"{x:,.0f}"),
            ("prefix-cache hit rate", "hit_rate", pct),
            ("KV blocks in use (time-average)", "mean_kv_blocks", lambda x: f"{x:.0f}"),
            ("TTFT P50", "ttft_p50", ms), ("TTFT P99", "ttft_p99", ms),
            ("generated tokens/s", "generated_tokens_per_s", num),
            ("wall time", "duration_s", lambda x: f"{x:.1f} s")]
    rows = [[label, *(fmt(m[n][k]) for n in names)] for label, k, fmt in keys]
    lines = [head, table(["", *names], rows)]
    lines += [ratio_line(name, s) for name, s in r["ratios"].items()]
    lines.append(same_answers_line("answers identical with and without the cache",
                                   r["outputs_differ"]))
    return "\n".join(lines)


def plot(r: dict, path) -> None:
    """Prompt tokens computed and TTFT P50, cache off and on (bars: median, dots: rounds)."""
    fig, (ax1, ax2) = figure(2, width=4.2)
    names = list(r["runs"])
    colors = [COLORS["static"], COLORS["continuous"]]
    bars_with_rounds(ax1, names, r["runs"], "prefill_tokens_computed", colors)
    ax1.set_ylabel("prompt tokens computed")
    ax1.set_title(f"hit rate {r['medians']['prefix cache']['hit_rate']:.0%}")
    runs_ms = {n: [{"ttft": 1000 * x["ttft_p50"]} for x in rs] for n, rs in r["runs"].items()}
    bars_with_rounds(ax2, names, runs_ms, "ttft", colors)
    ax2.set_ylabel("TTFT P50 (ms)")
    ax2.set_title("time to first token")
    save(fig, path)
