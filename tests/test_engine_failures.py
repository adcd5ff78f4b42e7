"""One request's failure is that request's alone; aborting is safe at any moment; the
answers are right in every configuration (several EOS ids, seeds, max_model_len)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from minillm import LLM, SamplingParams
import minillm.model.sampler as sampler_module
from minillm.model.tiny import build_tiny_llama
from minillm.scheduler import SCHEDULERS, VARIANTS

PROMPTS = [{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [9, 8, 7, 6, 5]},
           {"prompt_token_ids": [11, 12]}]


def greedy(n=6):
    return SamplingParams(temperature=0.0, max_tokens=n)


def all_blocks_free(llm) -> bool:
    usage = llm.llm_engine.kv_usage()
    return usage.blocks_used == 0 and not llm.llm_engine.has_unfinished_requests()


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_llama(seed=0)


@pytest.fixture(scope="module")
def baseline(tiny):
    llm = LLM(tiny, block_size=4, num_kv_blocks=64)
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, greedy(), use_tqdm=False)]


@pytest.mark.unit
def test_a_tiny_temperature_samples_like_greedy(tiny, baseline):
    """1e-300 used to pass validation, then the sampler made nan (inf − inf) and the whole
    generate() batch was lost; now the logits are shifted before dividing."""
    llm = LLM(tiny, block_size=4, num_kv_blocks=64)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=1e-300, max_tokens=6), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == baseline
    assert all(o.error is None for o in outs) and all_blocks_free(llm)


@pytest.mark.unit
def test_a_failing_request_fails_alone(tiny, baseline, monkeypatch):
    """A sampling error in one row ends that request with finish_reason 'error' and frees
    its blocks; the other requests finish with the right tokens; the engine serves on."""
    real = sampler_module.sample_row

    def fragile(logits, p, seed, index):
        if p.seed == 666:
            raise RuntimeError("boom")
        return real(logits, p, seed, index)

    monkeypatch.setattr(sampler_module, "sample_row", fragile)
    llm = LLM(tiny, block_size=4, num_kv_blocks=64)
    params = [greedy(), SamplingParams(temperature=1.0, seed=666, max_tokens=6), greedy()]
    with pytest.warns(UserWarning, match=r"prompts\[1\] failed inside the engine"):
        outs = llm.generate(PROMPTS, params, use_tqdm=False)
    assert outs[1].outputs[0].finish_reason == "error" and "boom" in outs[1].error
    assert llm.trace.requests[outs[1].request_id].finish_reason == "error"
    assert [outs[0].outputs[0].token_ids, outs[2].outputs[0].token_ids] == [baseline[0], baseline[2]]
    assert all_blocks_free(llm)
    again = llm.generate(PROMPTS, greedy(), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in again] == baseline


@pytest.mark.unit
def test_a_failing_proposer_fails_only_its_request(tiny, baseline):
    llm = LLM(tiny, block_size=4, num_kv_blocks=64, speculative_config={"num_speculative_tokens": 2})
    real = llm.llm_engine.proposer.propose

    def fragile(token_ids, limit=None):
        if token_ids[:2] == [9, 8]:
            raise ValueError("no guess")
        return real(token_ids, limit)

    llm.llm_engine.proposer.propose = fragile
    with pytest.warns(UserWarning):
        outs = llm.generate(PROMPTS, greedy(), use_tqdm=False)
    assert outs[1].outputs[0].finish_reason == "error"
    assert [outs[0].outputs[0].token_ids, outs[2].outputs[0].token_ids] == [baseline[0], baseline[2]]
    assert all_blocks_free(llm)


@pytest.mark.unit
@pytest.mark.parametrize("scheduling", ["continuous", "static"])
@pytest.mark.parametrize("at_step", [0, 1, 3, 5])
def test_abort_from_inside_a_step_is_safe(tiny, baseline, scheduling, at_step):
    """A runner callback aborts a request in the middle of a step: the step completes,
    the abort takes effect when it ends, and the others get their exact tokens."""
    llm = LLM(tiny, scheduling=scheduling, block_size=4, num_kv_blocks=64)
    engine = llm.llm_engine
    real_execute, calls = engine.runner.execute, []

    def execute(plan):
        calls.append(1)
        if len(calls) == at_step + 1:
            assert engine.abort_request("victim")          # mid-step: deferred, accepted
        return real_execute(plan)

    engine.runner.execute = execute
    engine.start_new_trace()
    for rid, prompt in zip(["a", "victim", "c"], PROMPTS):
        engine.add_request(rid, prompt, greedy(12 if rid == "victim" else 6))  # victim outlives the abort
    finished = {}
    for _ in range(100):
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = out
        if not engine.has_unfinished_requests():
            break
    assert engine.trace.requests["victim"].finish_reason == "abort"
    assert finished["a"].outputs[0].token_ids == baseline[0]
    assert finished["c"].outputs[0].token_ids == baseline[2]
    assert all_blocks_free(llm)


@pytest.mark.unit
def test_any_of_several_eos_ids_stops_like_transformers():
    """Llama 3 lists two EOS ids (end of text, end of turn); either one must stop."""
    hf = build_tiny_llama(seed=1)
    prompt = [3, 1, 4, 1, 5]
    with torch.inference_mode():
        free_run = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                               eos_token_id=None)[0, len(prompt):].tolist()
    stop_at = free_run[4]
    first = free_run.index(stop_at)                      # where transformers will stop
    unused = next(t for t in range(hf.config.vocab_size) if t not in free_run)
    hf.config.eos_token_id = [unused, stop_at]
    hf.generation_config.eos_token_id = [unused, stop_at]
    with torch.inference_mode():
        expected = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)
    expected = expected[0, len(prompt):].tolist()
    assert expected == free_run[:first + 1]               # transformers stopped at the 2nd id
    out = LLM(hf, block_size=4, num_kv_blocks=32).generate(
        {"prompt_token_ids": prompt}, greedy(12), use_tqdm=False)[0]
    assert out.outputs[0].token_ids == expected and out.outputs[0].finish_reason == "stop"


SAMPLE_SCRIPT = """
import json, sys
from minillm import LLM, SamplingParams
from minillm.model.tiny import build_tiny_llama
llm = LLM(build_tiny_llama(seed=0), block_size=4, num_kv_blocks=64, seed=int(sys.argv[1]))
outs = llm.generate([{"prompt_token_ids": [5, 6, 7]}] * 3,
                    SamplingParams(temperature=1.0, max_tokens=12), use_tqdm=False)
print(json.dumps([o.outputs[0].token_ids for o in outs]))
"""


def sampled_in_a_fresh_process(seed: int, hash_seed: str) -> list:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    run = subprocess.run([sys.executable, "-c", SAMPLE_SCRIPT, str(seed)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.unit
def test_llm_seed_makes_unseeded_sampling_reproducible_run_to_run():
    """Two processes (even with different str hashing) give the same samples for the
    same LLM(seed=...); another seed gives others. Request ids used to be random."""
    first = sampled_in_a_fresh_process(7, "1")
    assert first == sampled_in_a_fresh_process(7, "2")
    assert len({tuple(t) for t in first}) == 3            # three requests, three draws
    assert sampled_in_a_fresh_process(8, "1") != first


@pytest.mark.unit
@pytest.mark.parametrize("scheduling", sorted({**SCHEDULERS, **VARIANTS}))
def test_every_scheduler_honours_max_model_len(tiny, scheduling):
    """prompt 10 + max_tokens 50 > max_model_len 16: every variant admits the request and
    stops it at 16 tokens ("length"); the reserving ones used to ask for 60 and hang."""
    llm = LLM(tiny, scheduling=scheduling, block_size=4, num_kv_blocks=8, max_model_len=16)
    engine = llm.llm_engine
    engine.start_new_trace()
    engine.add_request("long", {"prompt_token_ids": list(range(1, 11))}, greedy(50))
    finished = []
    for _ in range(60):                                   # bounded: a hang fails here
        finished += [o for o in engine.step() if o.finished]
        if not engine.has_unfinished_requests():
            break
    assert finished, f"{scheduling}: still unfinished after 60 steps"
    assert len(finished[0].outputs[0].token_ids) == 6
    assert finished[0].outputs[0].finish_reason == "length"
    assert all_blocks_free(llm)


@pytest.mark.unit
def test_aborting_one_request_of_a_generate_call_keeps_the_others(tiny, baseline):
    """An abort from a callback (or another thread) used to lose the batch: KeyError."""
    llm = LLM(tiny, block_size=4, num_kv_blocks=64)
    engine, real = llm.llm_engine, llm.llm_engine.runner.execute

    def execute(plan):
        engine.abort_request("1")            # the second prompt's id (ids count from 0)
        return real(plan)

    engine.runner.execute = execute
    outs = llm.generate(PROMPTS, greedy(), use_tqdm=False)
    assert outs[1].outputs[0].finish_reason == "abort" and outs[1].finished
    assert [outs[0].outputs[0].token_ids, outs[2].outputs[0].token_ids] == [baseline[0], baseline[2]]
    assert all_blocks_free(llm)


@pytest.mark.unit
def test_reserving_continuous_batching_chunks_long_prompts(tiny):
    """With chunked prefill on, a prompt longer than the budget used to stall the engine."""
    prompt = {"prompt_token_ids": list(range(2, 20))}
    want = LLM(tiny).generate(prompt, greedy(4), use_tqdm=False)[0].outputs[0].token_ids
    llm = LLM(tiny, scheduling="continuous+contiguous", enable_chunked_prefill=True,
              max_num_batched_tokens=8)
    assert llm.generate(prompt, greedy(4), use_tqdm=False)[0].outputs[0].token_ids == want
    assert max(s.num_batched_tokens for s in llm.trace.steps) <= 8


@pytest.mark.unit
def test_an_abort_during_the_wait_for_a_future_arrival_wins(tiny):
    """An idle step waits for the next arrival in short slices; an abort made during the
    wait is applied before the request could be admitted, so it never runs."""
    llm = LLM(tiny, block_size=4, num_kv_blocks=16)
    engine = llm.llm_engine
    engine.start_new_trace()
    engine.add_request("late", PROMPTS[0], greedy(), arrival_time=engine.runner.now() + 3600)
    asked, real_wait = [], engine.runner.wait_until

    def wait_until(t):
        asked.append(t - engine.runner.now())
        real_wait(min(t, engine.runner.now() + 0.01))   # do not really sleep in a test
        engine.abort_request("late")                     # e.g. from a client's thread

    engine.runner.wait_until = wait_until
    assert engine.step() == []
    assert asked and max(asked) <= engine.runner.max_idle_wait + 1e-3   # a slice, not an hour
    record = engine.trace.requests["late"]
    assert record.finish_reason == "abort" and record.first_scheduled_time is None
    assert not engine.has_unfinished_requests()


@pytest.mark.model
def test_chat_errors_name_the_conversations(smollm2_llm):
    message = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ValueError, match="got 1 SamplingParams for 2 conversations"):
        smollm2_llm.chat([message, message], [greedy()], use_tqdm=False)
    with pytest.raises(ValueError, match=r"^messages: .*tokens but max_model_len"):
        smollm2_llm.chat([{"role": "user", "content": "word " * 9000}], greedy(), use_tqdm=False)
