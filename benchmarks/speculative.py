"""Prompt-lookup speculative decoding on and off, on a copy task and a free-form one.

Prompt lookup (投机解码 with an n-gram proposer) guesses the next tokens by finding the
last few generated tokens earlier in the prompt and proposing what followed them
there; one forward pass then checks all the guesses at once. It pays when the answer
copies the prompt (the copy task) and only costs time when it does not (free-form).

Printed per task and mode: tokens/s, tokens per forward pass, the share of guesses
accepted, engine steps, TPOT; the speed-up, and whether the answers are the same with
and without speculation (`answers.py`). Real model; EOS ignored.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial

import numpy as np

from benchmarks.ab import alternate, medians, paired_ratios, summary
from benchmarks.answers import (RUN_KEYS, differing_requests, same_answers_line, take_tokens,
                                   unrelated_prompts)
from benchmarks.common import (bars_with_rounds, figure, kv_blocks_for, ms, num, pct,
                                  ratio_line, run_workload, save, table, warm_up)
from benchmarks.workloads import chat_prompt_ids, chat_questions, prompt_token_ids
from minillm.sim.metrics import summarize
from minillm.sim.workload import RequestSpec
from minillm.widgets.style import COLORS


@dataclass(frozen=True)
class SpeculativeShape:
    """Two tasks: one whose answer copies the prompt, one that does not (where the
    guesses mostly fail)."""

    num_requests: int = 8            # per task
    copy_passage: int = 96           # tokens of text the copy task asks to repeat
    copy_output: int = 96
    free_output: int = 64
    max_num_seqs: int = 4            # speculation pays when decode is memory-bound: small batches
    num_speculative_tokens: int = 4


FULL_SPECULATIVE = SpeculativeShape()
QUICK_SPECULATIVE = SpeculativeShape(num_requests=3, copy_passage=16, copy_output=8,
                                     free_output=6, max_num_seqs=2, num_speculative_tokens=3)

COPY_INSTRUCTION = "Repeat the following text exactly, word for word:\n\n{}"


def speculative_prompts(shape: SpeculativeShape, vocab_size: int, tokenizer=None,
                        seed: int = 0) -> dict[str, tuple[list[list[int]], int]]:
    """{"copy": (prompts, max_tokens), "free-form": (prompts, max_tokens)}.

    With a chat tokenizer, "copy" asks the model to repeat a window of the passage and
    "free-form" asks the peer benchmark's open questions. Without one (the tiny test
    model) both are seeded random ids; "copy" then holds its text twice, so the
    proposer still finds matches."""
    windows = [RequestSpec(f"copy-{i}", shape.copy_passage, 1, 1) for i in range(shape.num_requests)]
    texts = prompt_token_ids(windows, vocab_size, tokenizer, seed)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        rng = np.random.default_rng(seed + 2)
        free = [rng.integers(2, vocab_size, size=24).tolist() for _ in range(shape.num_requests)]
        return {"copy": ([t + t for t in texts], shape.copy_output),
                "free-form": (free, shape.free_output)}
    copy = [chat_prompt_ids(tokenizer, COPY_INSTRUCTION.format(tokenizer.decode(t))) for t in texts]
    free = [chat_prompt_ids(tokenizer, q) for q in chat_questions(shape.num_requests)]
    return {"copy": (copy, shape.copy_output), "free-form": (free, shape.free_output)}


def planned_runs(config) -> int:
    return 4 * config.rounds                  # 2 tasks × 2 modes


def pass_stats(trace) -> tuple[int, int]:
    """(tokens generated, forward passes that produced them), summed over requests.

    A request's tokens that share one timestamp came out of the same forward pass."""
    tokens = passes = 0
    for r in trace.requests.values():
        tokens += len(r.token_times)
        passes += len(set(r.token_times))
    return tokens, passes


def one_run(llm, specs, prompts) -> dict:
    tokens: dict[str, list[int]] = {}
    trace = run_workload(llm, specs, prompts, tokens)
    s = summarize(trace)
    generated, passes = pass_stats(trace)
    proposed = sum(r.num_draft_proposed for r in trace.requests.values())
    accepted = sum(r.num_draft_accepted for r in trace.requests.values())
    return {**{k: s[k] for k in RUN_KEYS}, "tokens_per_pass": generated / passes,
            "drafts_proposed": proposed, "drafts_accepted": accepted,
            "acceptance_rate": accepted / proposed if proposed else float("nan"),
            "tokens": tokens}


def run(bench) -> dict:
    """Plain greedy decoding vs prompt-lookup speculation, both tasks, alternating."""
    cfg = bench.config
    shape = QUICK_SPECULATIVE if cfg.quick else FULL_SPECULATIVE
    tasks = speculative_prompts(shape, bench.vocab_size, bench.tokenizer, cfg.seed)
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
        warm_up(llm, unrelated_prompts(bench.vocab_size, shape.max_num_seqs))
    runners = {f"{task} {mode}": partial(one_run, llm, workloads[task], tasks[task][0])
               for task in tasks for mode, llm in llms.items()}
    results = alternate(runners, cfg.rounds, on_run=bench.tick)
    del llms
    gc.collect()
    tokens = take_tokens(results)
    stats = {task: {"num_requests": len(specs), "max_tokens": specs[0].max_tokens,
                    "prompt_tokens": sum(s.prompt_len for s in specs)}
             for task, specs in workloads.items()}
    return {"workload": {**stats, "max_num_seqs": shape.max_num_seqs, "speculative_config": ngram},
            "runs": results,
            "medians": medians(results),
            "ratios": {f"{task}: speculative / plain": summary(paired_ratios(
                           results, f"{task} speculative", f"{task} plain", "generated_tokens_per_s"))
                       for task in tasks},
            "outputs_differ": {task: differing_requests(tokens[f"{task} plain"],
                                                        tokens[f"{task} speculative"])
                               for task in tasks}}


def text(r: dict) -> str:
    w, m = r["workload"], r["medians"]
    c = w["speculative_config"]
    tasks = [t for t in w if isinstance(w[t], dict) and "max_tokens" in w[t]]
    head = (f"Speculative decoding — prompt lookup (n-gram {c['prompt_lookup_min']}–{c['prompt_lookup_max']}, "
            f"k = {c['num_speculative_tokens']} guesses), {w['max_num_seqs']} slots, EOS ignored; "
            + ", ".join(f"{t}: {w[t]['num_requests']} requests × {w[t]['max_tokens']} tokens" for t in tasks)
            + "; real model")
    names = list(m)
    keys = [("generated tokens/s", "generated_tokens_per_s", num),
            ("tokens per forward pass (per request)", "tokens_per_pass", lambda x: f"{x:.2f}"),
            ("guesses accepted", "acceptance_rate", pct),
            ("engine steps", "num_steps", lambda x: f"{x:.0f}"),
            ("TPOT P50", "tpot_p50", ms)]
    rows = [[label, *(fmt(m[n][k]) for n in names)] for label, k, fmt in keys]
    lines = [head, table(["", *names], rows)]
    lines += [ratio_line(name, s) for name, s in r["ratios"].items()]
    lines += [same_answers_line(f"{task}: answers identical with and without speculation", differ)
              for task, differ in r["outputs_differ"].items()]
    return "\n".join(lines)


def plot(r: dict, path) -> None:
    """Tokens/s per task and mode (bars: median, dots: rounds)."""
    fig, ax = figure(1, width=7.5)
    names = list(r["runs"])
    colors = [COLORS["continuous"] if n.endswith("plain") else COLORS["chunked"] for n in names]
    bars_with_rounds(ax, names, r["runs"], "generated_tokens_per_s", colors)
    ax.set_ylabel("generated tokens / s")
    ax.set_title("prompt-lookup speculation (bars: median, dots: rounds)")
    save(fig, path)
