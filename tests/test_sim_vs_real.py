"""Oracle: the simulator makes exactly the scheduling decisions the real engine makes.

The real engine (`LLM` on a tiny random Llama: real forward, real paged KV cache,
real sampler) and the simulated one (`make_sim_engine`: same schedulers and block
manager, a SimRunner instead of the model) serve the same workload. Output lengths are
forced on the real model with `ignore_eos=True` and `max_tokens` = the workload's
length; the simulator uses the same `max_tokens`. Every request arrives at t = 0, so no
decision depends on the clock, and the two Traces must agree step by step: who ran, how
many prefill / decode tokens, the context reached, who was preempted or sat idle, how
full the KV cache was.
"""

from __future__ import annotations

import numpy as np
import pytest

from minillm import LLM, SamplingParams
from minillm.model.tiny import build_tiny_llama, tiny_llama_config
from minillm.sim.simulate import add_workload, make_sim_engine, run_to_completion
from minillm.sim.workload import make_workload, uniform

pytestmark = pytest.mark.unit

TINY = tiny_llama_config()          # vocab 256, 512 positions, EOS 1

CONFIGS = {
    "static": dict(scheduling="static", max_num_seqs=3, block_size=4, num_kv_blocks=64),
    "continuous": dict(scheduling="continuous", max_num_seqs=3, max_num_batched_tokens=64,
                       block_size=4, num_kv_blocks=64),
    "chunked": dict(scheduling="continuous", max_num_seqs=4, max_num_batched_tokens=8,
                    enable_chunked_prefill=True, block_size=4, num_kv_blocks=64),
    "preempting": dict(scheduling="continuous", max_num_seqs=4, max_num_batched_tokens=64,
                       block_size=4, num_kv_blocks=9),
    "preempting-priority": dict(scheduling="continuous", max_num_seqs=4,
                                max_num_batched_tokens=16, enable_chunked_prefill=True,
                                block_size=4, num_kv_blocks=9, policy="priority"),
}


def workload():
    """7 requests at t = 0, prompts 3–12 tokens, answers 2–16 tokens, two priorities."""
    return make_workload(7, uniform(3, 12), uniform(2, 16), max_tokens="output_len",
                         seed=4, priorities=(0, 1))


def decisions(trace) -> list[tuple]:
    """Everything a step decided, without the times."""
    return [([(e.request_id, e.num_prefill_tokens, e.num_decode_tokens, e.context_len)
              for e in s.scheduled],
             s.preempted, s.idle, s.num_waiting, s.kv_blocks_used, s.kv_tokens_held)
            for s in trace.steps]


def run_real(config: dict, specs) -> object:
    llm = LLM(build_tiny_llama(seed=0), max_model_len=TINY.max_position_embeddings,
              device="cpu", **config)
    engine = llm.llm_engine                         # drive it with our own request ids
    engine.start_new_trace()
    rng = np.random.default_rng(0)
    for spec in specs:
        prompt = rng.integers(2, TINY.vocab_size, size=spec.prompt_len).tolist()
        params = SamplingParams(max_tokens=spec.max_tokens, temperature=0.0, ignore_eos=True)
        engine.add_request(spec.request_id, {"prompt_token_ids": prompt}, params,
                           arrival_time=0.0, priority=spec.priority)
    return run_to_completion(engine, max_steps=1000)


def run_sim(config: dict, specs) -> object:
    engine = make_sim_engine(max_model_len=TINY.max_position_embeddings,
                             vocab_size=TINY.vocab_size, eos_token_id=TINY.eos_token_id,
                             **config)
    add_workload(engine, specs)
    return run_to_completion(engine, max_steps=1000)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_simulator_decides_like_the_real_engine(name):
    specs = workload()
    real, sim = run_real(CONFIGS[name], specs), run_sim(CONFIGS[name], specs)
    assert decisions(sim) == decisions(real)
    for spec in specs:
        r, s = real.requests[spec.request_id], sim.requests[spec.request_id]
        assert r.output_len == s.output_len == spec.output_len
        assert r.num_preemptions == s.num_preemptions
    if name.startswith("preempting"):
        assert any(step.preempted for step in sim.steps)   # the case is really covered
    if name == "chunked":
        assert max(step.num_batched_tokens for step in sim.steps) == 8
