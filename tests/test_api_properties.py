"""A property test of the public API: random configurations and requests, some invalid.

Every call either raises a ValueError/TypeError whose message names the parameter that
was wrong, or completes with every KV block back and greedy tokens identical to the
plain continuous engine. Nothing hangs: every run is bounded by a step count.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minillm import LLM, SamplingParams
from minillm.model.tiny import build_tiny_llama

VOCAB = 256
MAX_STEPS = 400

# (parameter, a bad value) — each must be refused with the parameter's name
BAD_KNOBS = [("max_num_seqs", 0), ("max_num_seqs", 2.5), ("block_size", -4),
             ("num_kv_blocks", 0), ("max_model_len", 1), ("max_num_batched_tokens", -1),
             ("policy", "random"), ("scheduling", "fastest"), ("aging_rate", -1.0),
             ("preemption_mode", "drop"), ("num_swap_blocks", -2), ("seed", None),
             ("enable_chunked_prefill", 1), ("attention_backend", "flash")]
BAD_PARAMS = [("max_tokens", 0), ("temperature", -0.1), ("top_p", 0.0), ("top_k", -2),
              ("stop_token_ids", [-3]), ("seed", "x"), ("ignore_eos", None)]
BAD_PROMPTS = [({"prompt_token_ids": []}, "prompt"), ({"prompt_token_ids": [VOCAB]}, "prompt_token_ids"),
               ({"prompt_token_ids": "1 2"}, "prompt_token_ids"), (3.5, "prompt"),
               ({"tokens": [1]}, "unknown keys")]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_llama(seed=0, max_position_embeddings=128)


_reference_cache: dict = {}


def reference_tokens(tiny, prompt: tuple, max_tokens: int) -> list[int]:
    """Greedy tokens from the plain continuous engine (memoised per prompt)."""
    key = (prompt, max_tokens)
    if key not in _reference_cache:
        llm = LLM(tiny, block_size=8, num_kv_blocks=64)
        out = llm.generate({"prompt_token_ids": list(prompt)},
                           SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)
        _reference_cache[key] = out[0].outputs[0].token_ids
    return _reference_cache[key]


@st.composite
def scenarios(draw):
    knobs = dict(
        scheduling=draw(st.sampled_from(["continuous", "static", "continuous+contiguous",
                                         "static+paged"])),
        max_num_seqs=draw(st.integers(1, 6)),
        block_size=draw(st.sampled_from([1, 2, 4, 8])),
        policy=draw(st.sampled_from(["fcfs", "priority", "shortest"])),
    )
    chunked = draw(st.booleans()) and knobs["scheduling"] != "static"
    knobs["enable_chunked_prefill"] = chunked
    knobs["max_num_batched_tokens"] = draw(st.integers(8, 64)) if chunked else None
    knobs["num_kv_blocks"] = draw(st.integers(48, 96)) // knobs["block_size"] * 2
    if knobs["scheduling"] == "continuous":
        knobs["enable_prefix_caching"] = draw(st.booleans())
    bad_knob = draw(st.none() | st.sampled_from(BAD_KNOBS))
    if bad_knob is not None:
        knobs[bad_knob[0]] = bad_knob[1]
    n = draw(st.integers(1, 5))
    prompts = [tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=10)))
               for _ in range(n)]
    max_tokens = [draw(st.integers(1, 8)) for _ in range(n)]
    bad_param = draw(st.none() | st.sampled_from(BAD_PARAMS))
    bad_prompt = draw(st.none() | st.sampled_from(BAD_PROMPTS))
    return knobs, bad_knob, prompts, max_tokens, bad_param, bad_prompt, draw(st.integers(0, n - 1))


def build(tiny, knobs):
    return LLM(tiny, **{k: v for k, v in knobs.items() if v is not None or k == "seed"})


@pytest.mark.unit
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_every_call_either_names_the_bad_parameter_or_is_right(tiny, scenario):
    knobs, bad_knob, prompts, max_tokens, bad_param, bad_prompt, where = scenario
    if bad_knob is not None:
        with pytest.raises((ValueError, TypeError)) as info:
            build(tiny, knobs)
        assert bad_knob[0] in str(info.value)
        return
    llm = build(tiny, knobs)
    params = [SamplingParams(temperature=0.0, max_tokens=m) for m in max_tokens]
    requests = [{"prompt_token_ids": list(p)} for p in prompts]
    expected_error = None
    if bad_param is not None:
        with pytest.raises((ValueError, TypeError)) as info:
            SamplingParams(**{bad_param[0]: bad_param[1]})
        assert bad_param[0] in str(info.value)
    if bad_prompt is not None:
        requests[where], expected_error = bad_prompt
    engine = llm.llm_engine
    if expected_error is not None:
        with pytest.raises((ValueError, TypeError)) as info:
            llm.generate(requests, params, use_tqdm=False)
        assert expected_error in str(info.value) and f"prompts[{where}]" in str(info.value)
        assert not engine.has_unfinished_requests()
        requests[where] = {"prompt_token_ids": list(prompts[where])}
    engine.start_new_trace()
    for i, (req, p) in enumerate(zip(requests, params)):
        engine.add_request(f"r{i}", req, p, priority=i % 3)
    finished = {}
    for _ in range(MAX_STEPS):
        finished.update({o.request_id: o for o in engine.step() if o.finished})
        if not engine.has_unfinished_requests():
            break
    assert not engine.has_unfinished_requests(), f"still running after {MAX_STEPS} steps"
    usage = engine.kv_usage()
    assert usage.blocks_used == 0 and usage.blocks_free == engine.config["num_kv_blocks"]
    for i, (prompt, m) in enumerate(zip(prompts, max_tokens)):
        assert finished[f"r{i}"].outputs[0].token_ids == reference_tokens(tiny, prompt, m)
