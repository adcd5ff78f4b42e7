"""Speculative decoding with prompt lookup: same greedy tokens, fewer forward passes."""

from __future__ import annotations

import pytest

from minillm import LLM, SamplingParams
from minillm.engine.speculative import NgramProposer, accept_drafts
from minillm.model.tiny import build_tiny_llama

pytestmark = pytest.mark.unit


def test_proposer_copies_what_followed_the_last_ngram():
    p = NgramProposer(num_speculative_tokens=3, prompt_lookup_max=3)
    #         the cat sat on the mat . the cat
    tokens = [1, 2, 3, 4, 1, 5, 6, 1, 2]
    assert p.propose(tokens) == [3, 4, 1]
    assert p.propose(tokens, limit=1) == [3]
    assert p.propose([7, 8, 9]) == []                 # nothing repeats
    assert p.propose(tokens, limit=0) == []


def test_accept_keeps_agreeing_guesses_plus_the_models_next_pick():
    assert accept_drafts([3, 4, 1], [3, 4, 9, 7]) == [3, 4, 9]
    assert accept_drafts([3, 4, 1], [3, 4, 1, 7]) == [3, 4, 1, 7]
    assert accept_drafts([3, 4, 1], [8, 4, 1, 7]) == [8]


@pytest.mark.parametrize("extra", [
    dict(),
    dict(enable_chunked_prefill=True, max_num_batched_tokens=6),
    dict(num_kv_blocks=14, max_num_seqs=6),                      # preemption too
    dict(enable_prefix_caching=True, num_kv_blocks=20, preemption_mode="swap"),
], ids=["plain", "chunked", "preempting", "prefix+swap"])
def test_greedy_output_is_unchanged(extra):
    prompts = [{"prompt_token_ids": ([5, 6, 7, 8, 9] * 5)[:10 + i]} for i in range(6)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in (5, 17, 9, 30, 3, 12)]
    plain = LLM(build_tiny_llama(seed=0), block_size=4, **extra)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params, use_tqdm=False)]
    spec = LLM(build_tiny_llama(seed=0), block_size=4,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4}, **extra)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params, use_tqdm=False)]
    assert got == want
    records = spec.trace.requests.values()
    assert sum(r.num_draft_proposed for r in records) > 0
    assert sum(r.num_draft_accepted for r in records) > 0
    kv = spec.llm_engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks
    budget = spec.trace.config["max_num_batched_tokens"]
    assert all(s.num_batched_tokens <= budget for s in spec.trace.steps)
    assert len(spec.trace.steps) <= len(plain.trace.steps)


def test_sampled_requests_do_not_speculate():
    spec = LLM(build_tiny_llama(seed=0), speculative_config={"num_speculative_tokens": 3})
    spec.generate({"prompt_token_ids": [5, 6, 7] * 5},
                  SamplingParams(temperature=0.8, seed=1, max_tokens=10), use_tqdm=False)
    assert all(r.num_draft_proposed == 0 for r in spec.trace.requests.values())


def test_bad_speculative_config_is_rejected():
    with pytest.raises(ValueError, match="not supported"):
        LLM(build_tiny_llama(seed=0), speculative_config={"method": "eagle"})
    with pytest.raises(ValueError, match="unknown speculative_config keys"):
        LLM(build_tiny_llama(seed=0), speculative_config={"num_spec": 3})
    with pytest.raises(ValueError, match="continuous"):
        LLM(build_tiny_llama(seed=0), scheduling="static",
            speculative_config={"num_speculative_tokens": 3})
