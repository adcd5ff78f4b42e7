"""Sampling: greedy, top-k, top-p, temperature, and per-request reproducibility."""

from __future__ import annotations

import pytest
import torch

from minillm import LLM, SamplingParams
from minillm.model.sampler import Sampler, filter_logits, greedy
from minillm.model.tiny import build_tiny_llama


@pytest.mark.unit
def test_greedy_is_argmax_and_top_k_1_is_greedy():
    logits = torch.randn(5, 50)
    greedy = Sampler()(logits, [SamplingParams(temperature=0.0)] * 5, [0] * 5, [0] * 5)
    assert greedy == logits.argmax(-1).tolist()
    top1 = Sampler()(logits, [SamplingParams(temperature=1.0, top_k=1)] * 5, [1] * 5, [0] * 5)
    assert top1 == greedy


@pytest.mark.unit
def test_greedy_picks_the_first_of_tied_maxima_like_argmax():
    """`greedy` uses max(dim).indices (faster on the CPU): on a SmolLM2-wide vocabulary
    with ties planted it must pick what argmax picks, the lowest tied id."""
    logits = torch.randn(16, 49152, generator=torch.Generator().manual_seed(0))
    top = logits.max() + 1.0
    logits[0, [7, 3, 49151]] = top                  # tie: 3 wins
    logits[1, [49150, 49151]] = top                 # tie at the end: 49150 wins
    logits[2] = 0.0                                 # all equal: 0 wins
    picks = greedy(logits)
    assert picks[:3].tolist() == [3, 49150, 0]
    assert torch.equal(picks, logits.argmax(dim=-1))


@pytest.mark.unit
def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    assert torch.isfinite(filter_logits(logits, 2, 1.0)).tolist() == [True, True, False, False, False]
    # nucleus 0.8: 0.5 + 0.2 = 0.7 < 0.8, so the third token (0.15) is still needed
    assert torch.isfinite(filter_logits(logits, 0, 0.8)).tolist() == [True, True, True, False, False]
    assert torch.isfinite(filter_logits(logits, 0, 0.5)).tolist() == [True, False, False, False, False]
    assert torch.isfinite(filter_logits(logits, 0, 1e-6)).sum() == 1


@pytest.mark.unit
def test_temperature_sampling_follows_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log().expand(1, 3)
    params = [SamplingParams(temperature=1.0)]
    draws = [Sampler()(logits, params, [7], [i])[0] for i in range(3000)]
    freq = torch.bincount(torch.tensor(draws), minlength=3).float() / len(draws)
    assert torch.allclose(freq, probs, atol=0.03), freq


@pytest.mark.unit
def test_seeded_requests_reproduce_whatever_shares_the_batch():
    llm = LLM(build_tiny_llama(seed=0), max_num_seqs=8)
    p = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seed=123, ignore_eos=True)
    alone = llm.generate({"prompt_token_ids": [4, 5, 6]}, p, use_tqdm=False)[0]
    crowd = llm.generate([{"prompt_token_ids": [9, 9]}, {"prompt_token_ids": [4, 5, 6]},
                          {"prompt_token_ids": list(range(1, 30))}],
                         [SamplingParams(temperature=1.0, max_tokens=20), p,
                          SamplingParams(temperature=0.0, max_tokens=5)], use_tqdm=False)[1]
    assert alone.outputs[0].token_ids == crowd.outputs[0].token_ids
    other_seed = llm.generate({"prompt_token_ids": [4, 5, 6]},
                              SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seed=124,
                                             ignore_eos=True), use_tqdm=False)[0]
    assert other_seed.outputs[0].token_ids != alone.outputs[0].token_ids


@pytest.mark.unit
def test_sampled_output_survives_preemption():
    """Recompute after preemption draws the same tokens as an uninterrupted run."""
    prompts = [{"prompt_token_ids": list(range(1 + i, 12 + i))} for i in range(6)]
    params = [SamplingParams(temperature=0.8, max_tokens=20, seed=i, ignore_eos=True)
              for i in range(6)]
    roomy = LLM(build_tiny_llama(seed=0), block_size=4, num_kv_blocks=200)
    tight = LLM(build_tiny_llama(seed=0), block_size=4, num_kv_blocks=20)
    a = roomy.generate(prompts, params, use_tqdm=False)
    b = tight.generate(prompts, params, use_tqdm=False)
    assert sum(len(s.preempted) for s in tight.trace.steps) > 0
    assert [o.outputs[0].token_ids for o in a] == [o.outputs[0].token_ids for o in b]
