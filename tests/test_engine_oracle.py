"""The engine's outputs equal transformers' batch-1 greedy decoding, in every mode.

Static batching, continuous batching, chunked prefill with a tiny budget, a KV cache so
small that sequences get preempted (recomputed, or swapped out and back), and prefix
caching: whatever the engine does, each request must get exactly the tokens it would
get alone. A difference is
tolerated only at a numerical near-tie (transformers' top-2 logit gap < 1e-3 at the
first differing position) — such cases are counted and printed.

Every configuration whose steps look different to the model (chunks, shared prefixes,
guesses) runs on each executor that runs here — the readable model ("eager") and, where
its kernels build, the "cpu" executor (tests/conftest.py: `executors_under_test`) — and
the two must give the very same tokens; the ones that differ only in scheduling
(`SCHEDULING_ONLY`) run on the first of them. Where the engine
runs is otherwise the engine's own default unless pytest is given `--engine-device`,
`--engine-backend`, `--engine-dtype`, `--engine-executor`: `scripts/gpu_check.sh` runs
this file with `--engine-device cuda --engine-backend triton --engine-dtype float32`,
the Triton kernels on a GPU against transformers on the CPU.
"""

from __future__ import annotations

import pytest

from hf_reference import chat_prompt_ids, compare_with_ties, hf_greedy
from minillm import LLM, SamplingParams

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.",
    "List three prime numbers.",
    "Why is the sky blue?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 12?",
    "Give me a name for a pet turtle.",
    "Describe a cat in five words.",
]
MAX_TOKENS = [8, 40, 16, 64, 24, 48, 12, 32, 20]

CONFIGS = {
    "static": dict(scheduling="static"),
    "continuous": dict(),
    "chunked": dict(enable_chunked_prefill=True, max_num_batched_tokens=32, block_size=4),
    "preempting": dict(num_kv_blocks=14, block_size=16),
    "swapping": dict(num_kv_blocks=14, block_size=16, preemption_mode="swap"),
    "prefix-cached": dict(enable_prefix_caching=True, block_size=4, max_num_seqs=3),
    "speculative": dict(speculative_config={"method": "ngram", "num_speculative_tokens": 4}),
}

# Configurations that differ from "continuous" only in what the scheduler and the KV
# manager decide — the model sees ordinary prefills and decodes — run on the first
# executor alone; the others (chunks, shared prefixes, guesses) on every executor.
SCHEDULING_ONLY = {"static", "preempting", "swapping"}


@pytest.fixture(scope="module")
def oracle(smollm2):
    hf, tokenizer = smollm2
    prompts = chat_prompt_ids(tokenizer, QUESTIONS)
    refs = [hf_greedy(hf, p, n) for p, n in zip(prompts, MAX_TOKENS)]
    return prompts, refs


@pytest.mark.model
@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_tokens_equal_transformers_on_every_executor(name, smollm2, oracle,
                                                            engine_options, executors_under_test):
    executors = executors_under_test[:1] if name in SCHEDULING_ONLY else executors_under_test
    tokens = {executor: run_and_check(name, executor, smollm2, oracle, engine_options)
              for executor in executors}
    first, *others = tokens
    for executor in others:
        assert tokens[executor] == tokens[first], f"{executor} and {first} differ"


def run_and_check(name, executor, smollm2, oracle, engine_options) -> list[list[int]]:
    """Run one configuration on one executor, check it against transformers; its tokens."""
    hf, tokenizer = smollm2
    prompts, refs = oracle
    llm = LLM(hf, tokenizer=tokenizer, **{"max_num_seqs": 8, **CONFIGS[name],
                                          "executor": executor, **engine_options})
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in MAX_TOKENS]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    config = llm.trace.config
    for key, value in {"executor": executor, **engine_options}.items():   # they took effect
        assert config[key] == str(value).replace("torch.", ""), (key, config[key])

    verdicts = [compare_with_ties(o.outputs[0].token_ids, ref, gaps)
                for o, (ref, gaps) in zip(outs, refs)]
    preemptions = sum(len(s.preempted) for s in llm.trace.steps)
    print(f"{name} on {config['device']}/{executor}/{config['attention_backend']}/"
          f"{config['dtype']}: {verdicts.count('equal')} equal, {verdicts.count('near-tie')} "
          f"near-ties, {preemptions} preemptions, {len(llm.trace.steps)} steps")
    assert "mismatch" not in verdicts, verdicts
    assert verdicts.count("equal") >= len(verdicts) - 1
    assert [len(o.outputs[0].token_ids) for o in outs] == MAX_TOKENS
    assert all(o.outputs[0].finish_reason == "length" for o in outs)
    stats = llm.llm_engine.stats()
    assert stats.num_free_blocks == stats.num_blocks, "every block is back after the run"
    check_what_the_config_is_for(name, llm, preemptions)
    return [o.outputs[0].token_ids for o in outs]


def check_what_the_config_is_for(name, llm, preemptions) -> None:
    if name in ("preempting", "swapping"):
        assert preemptions > 0, "this config must force preemption"
    if name == "swapping":
        assert sum(s.num_swapped_out_blocks for s in llm.trace.steps) > 0
        kv = llm.llm_engine.scheduler.kv
        assert kv.swap_allocator.num_free == kv.swap_allocator.num_blocks
    if name == "speculative":
        proposed = sum(r.num_draft_proposed for r in llm.trace.requests.values())
        accepted = sum(r.num_draft_accepted for r in llm.trace.requests.values())
        print(f"speculation: {accepted}/{proposed} guesses accepted")
        assert proposed > 0
    if name == "prefix-cached":
        # the chat template's system prompt is a shared prefix: later requests hit it
        cached = [r.num_cached_tokens for r in llm.trace.requests.values()]
        print(f"prefix cache: {sum(cached)} prompt tokens reused")
        assert sum(c > 0 for c in cached) >= 5
    if name == "chunked":
        assert max(s.num_batched_tokens for s in llm.trace.steps) <= 32
        assert any(e.num_prefill_tokens and any(f.num_decode_tokens for f in s.scheduled)
                   for s in llm.trace.steps for e in s.scheduled), "prefill and decode mixed"


@pytest.mark.model
def test_eos_stops_and_text_is_detokenized(smollm2_llm):
    out = smollm2_llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                           SamplingParams(temperature=0.0, max_tokens=32), use_tqdm=False)[0]
    assert "Paris" in out.outputs[0].text
    assert out.outputs[0].finish_reason == "stop"
    assert out.outputs[0].token_ids[-1] == 2          # EOS kept in token ids
    assert len(out.outputs[0].token_ids) < 32
    assert out.metrics.ttft > 0 and out.metrics.e2e_latency >= out.metrics.ttft
