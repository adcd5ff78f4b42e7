"""Bad input gets a clear error that names the problem — and the engine keeps serving.

Each case: the call raises ValueError/TypeError whose message says what is wrong; then
the *same* LLM answers a valid request, with every KV block free again.
"""

from __future__ import annotations

import pytest

from minillm import LLM, SamplingParams
from minillm.model_loader import build_tiny_llama

GOOD = {"prompt_token_ids": [3, 4, 5]}


@pytest.fixture(scope="module")
def llm():
    # 8 blocks of 4 tokens = 32 token slots; model context 64 positions
    return LLM(build_tiny_llama(seed=0, max_position_embeddings=64), num_kv_blocks=8,
               block_size=4, max_num_seqs=4)


def still_serves(llm):
    out = llm.generate(GOOD, SamplingParams(temperature=0.0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
    kv = llm.llm_engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks
    assert not llm.llm_engine.has_unfinished_requests()


BAD_GENERATE = [
    ("", None, ValueError, "empty"),
    ({"prompt_token_ids": []}, None, ValueError, "no tokens"),
    ({"prompt_token_ids": [1, 999]}, None, ValueError, "outside the vocabulary"),
    ({"prompt_token_ids": [1, -1]}, None, ValueError, "outside the vocabulary"),
    ({"prompt_token_ids": [1, 2.5]}, None, TypeError, "ints"),
    ({"prompt_token_ids": list(range(1, 65))}, None, ValueError, "max_model_len"),
    ({"prompt_token_ids": list(range(1, 30))}, SamplingParams(max_tokens=8), ValueError,
     "whole cache"),
    ("text without tokenizer", None, ValueError, "tokenizer"),
    (42, None, TypeError, "prompt"),
    ([GOOD, GOOD], [SamplingParams()], ValueError, "one per prompt"),
]


@pytest.mark.unit
@pytest.mark.parametrize("prompt,params,error,words", BAD_GENERATE)
def test_bad_request_is_rejected_and_engine_still_serves(llm, prompt, params, error, words):
    with pytest.raises(error, match=words):
        llm.generate(prompt, params, use_tqdm=False)
    still_serves(llm)


@pytest.mark.unit
def test_one_bad_prompt_in_a_batch_queues_nothing(llm):
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate([GOOD, {"prompt_token_ids": [10_000]}], use_tqdm=False)
    assert not llm.llm_engine.has_unfinished_requests()
    still_serves(llm)


@pytest.mark.unit
@pytest.mark.parametrize("kwargs,words", [
    (dict(max_tokens=0), "max_tokens must be >= 1"),
    (dict(temperature=-0.5), "temperature must be >= 0"),
    (dict(top_p=0.0), "top_p must be in"),
    (dict(top_p=1.5), "top_p must be in"),
    (dict(top_k=-3), "top_k"),
    (dict(temperature=float("nan")), "finite"),
    (dict(stop_token_ids=[-1]), "stop_token_ids"),
])
def test_sampling_params_are_checked_on_construction(kwargs, words):
    with pytest.raises(ValueError, match=words):
        SamplingParams(**kwargs)


@pytest.mark.unit
@pytest.mark.parametrize("kwargs,words", [
    (dict(max_tokens=2.0), "max_tokens must be an int"),
    (dict(temperature="hot"), "temperature must be a number"),
    (dict(ignore_eos="yes"), "ignore_eos must be a bool"),
])
def test_sampling_param_types_are_checked(kwargs, words):
    with pytest.raises(TypeError, match=words):
        SamplingParams(**kwargs)


@pytest.mark.unit
@pytest.mark.parametrize("kwargs,words", [
    (dict(num_kv_blocks=0), "num_kv_blocks must be >= 1"),
    (dict(block_size=0), "block_size"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(scheduling="round-robin"), "scheduling must be one of"),
    (dict(policy="lifo"), "policy must be one of"),
    (dict(attention_backend="flash"), "unknown attention_backend"),
    (dict(max_model_len=10_000), "exceeds the model"),
    (dict(device="cuda:0"), "CUDA") if not __import__("torch").cuda.is_available()
    else (dict(num_kv_blocks=-1), "num_kv_blocks"),
])
def test_bad_engine_settings_are_rejected(kwargs, words):
    with pytest.raises(ValueError, match=words):
        LLM(build_tiny_llama(seed=0), **kwargs)


@pytest.mark.unit
def test_unknown_model_name_lists_known_names():
    with pytest.raises(ValueError, match="smollm2-135m"):
        LLM("no-such-model")


@pytest.mark.unit
def test_engine_rejects_duplicate_request_ids_and_keeps_the_first(llm):
    engine = llm.llm_engine
    engine.start_new_trace()
    engine.add_request("a", GOOD, SamplingParams(max_tokens=2, temperature=0.0))
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("a", GOOD, SamplingParams(max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.trace.requests["a"].output_len == 2
    still_serves(llm)
