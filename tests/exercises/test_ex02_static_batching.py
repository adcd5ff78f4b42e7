"""Lesson 02 exercise: the slot-waste calculator, left padding, padded static generate.

The oracles are minillm itself: the simulator's static scheduler for the arithmetic,
`LLM(model, scheduling="static")` greedy decoding for the tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

EXERCISE = "ex02_static_batching"

SEED_LENS = [30, 40, 50, 60, 700, 80, 90, 100]


@pytest.fixture(scope="module")
def tiny():
    from minillm.model.tiny import build_tiny_llama
    return build_tiny_llama(seed=0)


def minillm_static(model, prompts, lens, stop_token_ids=None):
    """Greedy tokens from minillm's own static scheduler (one batch of all prompts)."""
    from minillm import LLM, SamplingParams
    llm = LLM(model, scheduling="static", max_num_seqs=len(prompts), block_size=4,
              num_kv_blocks=256)
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True,
                             stop_token_ids=stop_token_ids) for n in lens]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs], llm.trace


def random_prompts(n, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 14, (n,), generator=g).tolist()
    return [torch.randint(2, 256, (k,), generator=g).tolist() for k in lengths]


def test_slot_waste_seed_example(ex):
    got = ex.static_slot_waste(SEED_LENS, 8)
    assert got["iterations"] == 700
    assert got["slot_iterations"] == 5600
    assert got["useful"] == 1150
    assert got["idle_fraction"] == pytest.approx(1 - 1150 / 5600)
    # without the straggler the batch lasts 100 iterations: 7 × 100 − 450 idle
    short = ex.static_slot_waste([30, 40, 50, 60, 80, 90, 100], 7)
    assert (short["iterations"], short["useful"]) == (100, 450)
    assert short["idle_fraction"] == pytest.approx(1 - 450 / 700)


def test_slot_waste_matches_the_simulator(ex):
    """Batches in arrival order, partial last batch: the same numbers as minillm's Trace."""
    from minillm.sim.metrics import slot_counts
    from minillm.sim.simulate import simulate
    from minillm.sim.workload import RequestSpec
    rng = np.random.default_rng(7)
    cases = [([5] * 6, 4), ([1, 1, 1], 1), ([9, 2, 7, 3, 3, 12, 1], 3)]
    cases += [(rng.integers(1, 60, size=int(rng.integers(1, 20))).tolist(),
               int(rng.integers(1, 9))) for _ in range(6)]
    for lens, slots in cases:
        specs = [RequestSpec(f"r{i}", 4, int(n), int(n)) for i, n in enumerate(lens)]
        trace = simulate(specs, scheduling="static", max_num_seqs=slots)
        busy, total = slot_counts(trace)
        got = ex.static_slot_waste(list(lens), slots)
        assert got["iterations"] == len(trace.steps), (lens, slots)
        assert got["slot_iterations"] == total, (lens, slots)
        assert got["useful"] == busy, (lens, slots)
        assert got["idle_fraction"] == pytest.approx(1 - busy / total), (lens, slots)


def test_left_pad(ex):
    ids, mask = ex.left_pad([[5, 6, 7], [8], [9, 10]], pad_token_id=0)
    assert ids.dtype == torch.long and mask.dtype == torch.long
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 9, 10]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    ids, mask = ex.left_pad([[4, 4], [3, 3]], pad_token_id=99)
    assert ids.tolist() == [[4, 4], [3, 3]] and mask.tolist() == [[1, 1], [1, 1]]
    ids, _ = ex.left_pad([[1], [2, 3, 4, 5]], pad_token_id=7)
    assert ids.tolist() == [[7, 7, 7, 1], [2, 3, 4, 5]]


def test_padded_generate_matches_minillm_static(ex, tiny):
    prompts = random_prompts(5, seed=1)
    lens = [6, 2, 11, 4, 6]
    want, _ = minillm_static(tiny, prompts, lens)
    got = ex.padded_static_generate(tiny, prompts, lens, pad_token_id=0)
    assert [list(t) for t in got.tokens] == want
    # one int for everyone works too, and a single prompt needs no padding at all
    same = ex.padded_static_generate(tiny, prompts[:2], 5, pad_token_id=0)
    assert [list(t) for t in same.tokens] == [w[:5] for w in minillm_static(tiny, prompts[:2], [5, 5])[0]]


def test_padded_generate_counts_wasted_row_steps(ex, tiny):
    prompts = random_prompts(4, seed=2)
    lens = [3, 9, 1, 5]
    got = ex.padded_static_generate(tiny, prompts, lens, pad_token_id=0)
    assert got.num_steps == 9
    assert got.wasted_row_steps == 4 * 9 - sum(lens)
    # minillm's static trace holds the same finished rows idle
    _, trace = minillm_static(tiny, prompts, lens)
    assert got.wasted_row_steps == sum(len(s.idle) for s in trace.steps)
    # a stop token ends a row early: it idles (and wastes) from the next step on
    free_run = ex.padded_static_generate(tiny, prompts, 12, pad_token_id=0)
    stop = free_run.tokens[0][2]                        # request 0 emits it at step 3
    want, _ = minillm_static(tiny, prompts, [12] * 4, stop_token_ids=[stop])
    early = ex.padded_static_generate(tiny, prompts, 12, pad_token_id=0, eos_token_id=stop)
    assert [list(t) for t in early.tokens] == want
    assert early.num_steps == max(len(t) for t in want)
    assert early.wasted_row_steps == 4 * early.num_steps - sum(len(t) for t in want)
