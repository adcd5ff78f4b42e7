"""Bad input gets a clear error that names the problem — and the engine keeps serving.

Each case: the call raises ValueError/TypeError whose message says what is wrong; then
the *same* LLM answers a valid request, with every KV block free again.
"""

from __future__ import annotations

import pytest

from minillm import LLM, SamplingParams
from minillm.model.tiny import build_tiny_llama

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
    ({"prompt_token_ids": [1, 2.5]}, None, TypeError, r"prompt_token_ids\[1\] must be an int"),
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
    (dict(ignore_eos="yes"), "ignore_eos must be True or False"),
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
    (dict(attention_backend="flash"), "attention_backend must be one of"),
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


# ---------------------------------------------------------------------- every boundary
# Each case names the parameter in its message; afterwards the same LLM still serves.

def greedy(n=3):
    return SamplingParams(temperature=0.0, max_tokens=n)


@pytest.mark.unit
@pytest.mark.parametrize("arrival,error", [
    (float("nan"), ValueError), (float("inf"), ValueError), (-1.0, ValueError),
    (1e9, ValueError), ("soon", TypeError), (True, TypeError),
])
def test_arrival_time_is_checked_when_given(llm, arrival, error):
    """nan was accepted and never became due (step() spun for ever); inf raised
    OverflowError inside step(); a date far ahead would sleep for days."""
    engine = llm.llm_engine
    engine.start_new_trace()
    with pytest.raises(error, match="arrival_time"):
        engine.add_request("late", GOOD, greedy(), arrival_time=arrival)
    assert not engine.has_unfinished_requests()
    still_serves(llm)


@pytest.mark.unit
@pytest.mark.parametrize("call,error,words", [
    (lambda llm: llm.generate(GOOD, greedy(), priority=5), TypeError, "priority"),
    (lambda llm: llm.generate(GOOD, greedy(), priority=[True]), TypeError, r"priority\[0\]"),
    (lambda llm: llm.generate(GOOD, greedy(), use_tqdm="yes"), TypeError, "use_tqdm"),
    (lambda llm: llm.generate(GOOD, "greedy"), TypeError, "sampling_params"),
    (lambda llm: llm.generate([GOOD, GOOD], [greedy(), None]), TypeError, r"sampling_params\[1\]"),
    (lambda llm: llm.generate([]), ValueError, "prompts is empty"),
    (lambda llm: llm.generate({"prompt_token_ids": [1], "max_tokens": 3}), ValueError,
     "unknown keys"),
    (lambda llm: llm.generate({"prompt_token_ids": __import__("numpy").array([1, 2])}),
     TypeError, "tolist"),
    (lambda llm: llm.generate({"prompt": 5}), TypeError, "'prompt' must be a str"),
    (lambda llm: llm.llm_engine.add_request(7, GOOD), TypeError, "request_id"),
    (lambda llm: llm.llm_engine.add_request("x", GOOD, priority=1.5), TypeError, "priority"),
    (lambda llm: llm.llm_engine.add_request("x", GOOD, params={"max_tokens": 3}), TypeError,
     "params must be a SamplingParams"),
])
def test_generate_and_add_request_arguments_name_the_parameter(llm, call, error, words):
    with pytest.raises(error, match=words):
        call(llm)
    assert not llm.llm_engine.has_unfinished_requests()
    still_serves(llm)


@pytest.mark.unit
def test_an_error_names_the_prompt_not_an_internal_request_id(llm):
    too_long = {"prompt_token_ids": list(range(1, 30))}
    with pytest.raises(ValueError) as info:
        llm.generate([GOOD, too_long], [greedy(), SamplingParams(max_tokens=8)], use_tqdm=False)
    message = str(info.value)
    # the prompt's place in the user's list, not an internal request id the user never chose
    assert message.startswith("prompts[1]: this request needs up to 10 KV blocks")
    still_serves(llm)


@pytest.mark.unit
def test_numpy_token_ids_in_a_list_are_accepted(llm):
    import numpy as np
    ids = [np.int64(3), np.int32(4), 5]
    out = llm.generate({"prompt_token_ids": ids}, greedy(), use_tqdm=False)[0]
    assert out.prompt_token_ids == [3, 4, 5] and all(type(t) is int for t in out.prompt_token_ids)
    assert out.outputs[0].token_ids == llm.generate(GOOD, greedy(), use_tqdm=False)[0].outputs[0].token_ids


@pytest.mark.unit
@pytest.mark.parametrize("messages,words", [
    ("hello", "messages must be a list"),
    ({"role": "user", "content": "hi"}, "messages must be a list"),
    ([{"role": "user"}], "message 0"),
    ([[{"role": "user", "content": "hi"}], "oops"], "conversation 1"),
    ([], "messages must be a list"),
])
def test_chat_messages_are_checked(messages, words):
    from minillm.llm import _conversations
    with pytest.raises(TypeError, match=words):
        _conversations(messages)


@pytest.mark.unit
def test_sampling_params_are_checked_again_when_changed(llm):
    params = SamplingParams(temperature=0.5, max_tokens=3)
    with pytest.raises(ValueError, match="temperature"):
        params.temperature = -1.0
    assert params.temperature == 0.5                     # the bad value was not kept
    with pytest.raises(TypeError, match="max_tokens"):
        params.max_tokens = "3"
    assert params.max_tokens == 3
    params.stop_token_ids = [7]
    params.stop_token_ids.append(-1)                     # edited in place: seen at the boundary
    with pytest.raises(ValueError, match=r"prompts\[0\]: stop_token_ids\[1\]"):
        llm.generate(GOOD, params, use_tqdm=False)
    still_serves(llm)


@pytest.mark.unit
def test_the_engine_keeps_its_own_copy_of_sampling_params(llm):
    engine = llm.llm_engine
    engine.start_new_trace()
    params = greedy(4)
    engine.add_request("mine", GOOD, params)
    params.max_tokens = 1                                # too late: the request has its copy
    outs = []
    while engine.has_unfinished_requests():
        outs += [o for o in engine.step() if o.finished]
    assert len(outs[0].outputs[0].token_ids) == 4
    still_serves(llm)


@pytest.mark.unit
@pytest.mark.parametrize("kwargs,error,words", [
    (dict(stop_token_ids=5), TypeError, "stop_token_ids must be a list"),
    (dict(stop_token_ids=["a"]), TypeError, r"stop_token_ids\[0\]"),
    (dict(top_k=2.0), TypeError, "top_k must be an int"),
    (dict(top_p=float("inf")), ValueError, "top_p"),
    (dict(seed=1.5), TypeError, "seed must be an int"),
    (dict(max_tokens=True), TypeError, "max_tokens must be an int"),
])
def test_more_sampling_params_name_their_field(kwargs, error, words):
    with pytest.raises(error, match=words):
        SamplingParams(**kwargs)


@pytest.mark.unit
@pytest.mark.parametrize("kwargs,error,words", [
    (dict(num_swap_blocks=-1, preemption_mode="swap"), ValueError, "num_swap_blocks must be >= 0"),
    (dict(num_swap_blocks=4), ValueError, "num_swap_blocks=4 only applies"),
    (dict(max_model_len=0), ValueError, "max_model_len must be >= 2"),
    (dict(max_num_batched_tokens=0), ValueError, "max_num_batched_tokens must be >= 1"),
    (dict(num_kv_blocks=8, kv_cache_memory=1 << 20), ValueError, "not both"),
    (dict(kv_cache_memory=10), ValueError, "kv_cache_memory=10 bytes holds no KV block"),
    (dict(aging_rate=1.0), ValueError, "aging_rate=1.0 has no effect"),
    (dict(aging_rate=float("nan"), policy="priority"), ValueError, "aging_rate must be a finite"),
    (dict(enable_chunked_prefill="yes"), TypeError, "enable_chunked_prefill"),
    (dict(enable_prefix_caching=True, scheduling="continuous+contiguous"), ValueError,
     "enable_prefix_caching"),
    (dict(speculative_config={}), ValueError, "num_speculative_tokens"),
    (dict(speculative_config={"num_speculative_tokens": 0}), ValueError,
     r"speculative_config\['num_speculative_tokens'\] must be >= 1"),
    (dict(speculative_config={"num_speculative_tokens": 2, "prompt_lookup_min": 3,
                              "prompt_lookup_max": 2}), ValueError, "prompt_lookup_min <="),
    (dict(speculative_config={"num_speculative_tokens": 2}, scheduling="static"), ValueError,
     "speculative decoding needs"),
    (dict(speculative_config="ngram"), TypeError, "speculative_config must be a dict"),
    (dict(dtype="float64"), ValueError, "dtype"),
    (dict(device="tpu"), ValueError, "device"),
    (dict(seed="0"), TypeError, "seed must be an int"),
    (dict(max_num_seq=4), TypeError, "did you mean 'max_num_seqs'"),
    (dict(scheduling=int), ValueError, "scheduling must be one of"),
])
def test_every_engine_knob_names_itself(kwargs, error, words):
    with pytest.raises(error, match=words):
        LLM(build_tiny_llama(seed=0), **kwargs)


# ---------------------------------------------------------------------- held-out cases
# (a red-team pass over the public API found these after the first round of fixes)

@pytest.mark.unit
def test_kv_cache_memory_alone_sizes_the_cache():
    """It used to fail with 'not both' although only kv_cache_memory was given."""
    from minillm.sim.simulate import make_sim_engine
    assert LLM(build_tiny_llama(seed=0), kv_cache_memory=1 << 20).config.num_kv_blocks == 128
    assert make_sim_engine(kv_cache_memory=1 << 26).config["num_kv_blocks"] == (1 << 26) // (16 * 46_080)


@pytest.mark.unit
@pytest.mark.parametrize("make", [
    lambda: SamplingParams(max_tokens=10**400), lambda: SamplingParams(temperature=10**400),
    lambda: SamplingParams(top_p=10**400), lambda: SamplingParams(seed=2**70),
])
def test_huge_numbers_are_refused_with_their_name(make):
    with pytest.raises(ValueError, match="max_tokens|temperature|top_p|seed"):
        make()


@pytest.mark.unit
def test_huge_numbers_at_the_engine_boundary(llm):
    with pytest.raises(ValueError, match=r"priority\[0\] must fit in 64 bits"):
        llm.generate(GOOD, greedy(), priority=[10**400], use_tqdm=False)
    with pytest.raises(ValueError, match="priority must fit in 64 bits"):
        llm.llm_engine.add_request("x", GOOD, greedy(), priority=10**400)
    with pytest.raises(ValueError, match="arrival_time must be a finite"):
        llm.llm_engine.add_request("x", GOOD, greedy(), arrival_time=10**400)
    with pytest.raises(ValueError, match="aging_rate"):
        LLM(build_tiny_llama(seed=0), aging_rate=10**400, policy="priority")
    still_serves(llm)


@pytest.mark.unit
def test_fractions_and_numpy_numbers_are_stored_as_plain_python(llm):
    import json
    from fractions import Fraction

    import numpy as np
    params = SamplingParams(temperature=Fraction(1, 2), max_tokens=np.int64(3), seed=np.int32(4))
    assert (type(params.temperature), type(params.max_tokens), type(params.seed)) == (float, int, int)
    out = llm.generate(GOOD, params, use_tqdm=False)[0]
    assert out.error is None and len(out.outputs[0].token_ids) == 3
    json.loads(llm.trace.to_json())                      # no numpy scalar left to choke on
    engine = LLM(build_tiny_llama(seed=0), max_num_seqs=np.int64(2), block_size=np.int32(4))
    assert type(engine.config.max_num_seqs) is int


@pytest.mark.unit
def test_a_misspelt_sampling_field_is_an_error_that_suggests_the_right_one():
    params = SamplingParams()
    with pytest.raises(AttributeError, match="did you mean 'max_tokens'"):
        params.max_token = 3
    with pytest.raises(TypeError, match="'stop': vLLM has it.*use stop_token_ids"):
        SamplingParams(stop=["\n"])
    with pytest.raises(TypeError, match="did you mean 'temperature'"):
        SamplingParams(temprature=0.5)


@pytest.mark.unit
def test_priority_is_refused_where_the_policy_ignores_it(llm):
    """vLLM raises too: a priority under FCFS would be silently meaningless."""
    with pytest.raises(ValueError, match="policy='fcfs' ignores it"):
        llm.generate([GOOD, GOOD], greedy(), priority=[5, -5], use_tqdm=False)
    still_serves(llm)


@pytest.mark.unit
def test_more_engine_arguments_are_checked_before_anything_loads():
    from minillm.scheduler import Scheduler
    with pytest.raises(ValueError, match="is abstract"):
        LLM(build_tiny_llama(seed=0), scheduling=Scheduler)
    with pytest.raises(TypeError, match="tokenizer must be a tokenizer object"):
        LLM(build_tiny_llama(seed=0), tokenizer="gpt2")
    with pytest.raises(ValueError, match="Unknown model ''"):
        LLM("")
    with pytest.raises(ValueError, match="enable_chunked_prefill needs iteration-level"):
        LLM(build_tiny_llama(seed=0), scheduling="static", enable_chunked_prefill=True)


@pytest.mark.unit
def test_abort_request_checks_its_argument(llm):
    with pytest.raises(TypeError, match="request_id must be a str"):
        llm.llm_engine.abort_request(["a"])
    assert llm.llm_engine.abort_request("never-added") is False


class WideTokenizer:
    """A tokenizer of another model: its ids run past the tiny model's 256."""

    def __call__(self, text, **kwargs):
        return type("Encoding", (), {"input_ids": [1000 + ord(c) for c in text]})()

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i % 128) for i in ids)


@pytest.mark.unit
def test_a_tokenizer_that_does_not_match_the_model_is_refused_at_the_door():
    llm = LLM(build_tiny_llama(seed=0), tokenizer=WideTokenizer(), num_kv_blocks=8, block_size=4)
    with pytest.raises(ValueError, match=r"prompts\[0\]: the tokenizer gave ids outside"):
        llm.generate("hi", greedy(), use_tqdm=False)
    still_serves(llm)


@pytest.mark.unit
@pytest.mark.parametrize("call,error,words", [
    (lambda: __import__("minillm.sim.simulate", fromlist=["x"]).simulate(
        [], speculative_config={"num_speculative_tokens": 2}), ValueError, "speculative"),
    (lambda: __import__("minillm.sim.simulate", fromlist=["x"]).simulate([], cost_model="fast"),
     TypeError, "cost_model"),
    (lambda: __import__("minillm.sim.sim_runner", fromlist=["x"]).CostModel(step_overhead=None),
     TypeError, "step_overhead"),
    (lambda: __import__("minillm.sim.sim_runner", fromlist=["x"]).CostModel(per_decode_seq=float("inf")),
     ValueError, "per_decode_seq"),
    (lambda: __import__("minillm.sim.metrics", fromlist=["x"]).summarize(
        __import__("minillm.engine.trace", fromlist=["x"]).Trace(), ttft_slo="1"), TypeError, "ttft_slo"),
    (lambda: __import__("minillm.sim.metrics", fromlist=["x"]).summarize(
        __import__("minillm.engine.trace", fromlist=["x"]).Trace(), tpot_slo=float("nan")), ValueError,
     "tpot_slo"),
])
def test_simulator_and_metrics_arguments_name_themselves(call, error, words):
    with pytest.raises(error, match=words):
        call()


@pytest.mark.unit
def test_add_workload_and_run_to_completion_check_their_arguments():
    from minillm.sim.simulate import add_workload, make_sim_engine, run_to_completion
    from minillm.sim.workload import RequestSpec
    engine = make_sim_engine()
    with pytest.raises(TypeError, match="workload must be a list of RequestSpec"):
        add_workload(engine, RequestSpec("a", 3, 2, 2, 0.0))
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        run_to_completion(engine, max_steps=-1)
