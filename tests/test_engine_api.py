"""LLMEngine's request-level API: streaming steps, aborts, arrivals, the Trace."""

from __future__ import annotations

import pytest

from minillm import LLM, SamplingParams
from minillm.model.tiny import build_tiny_llama


@pytest.fixture(scope="module")
def llm():
    return LLM(build_tiny_llama(seed=0), block_size=4, num_kv_blocks=64, max_num_seqs=4)


def greedy(n):
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


@pytest.mark.unit
def test_step_streams_partial_outputs_then_a_finished_one(llm):
    engine = llm.llm_engine
    engine.start_new_trace()
    engine.add_request("s", {"prompt_token_ids": [5, 6, 7]}, greedy(4))
    seen = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen.append((len(out.outputs[0].token_ids), out.finished))
    assert seen == [(1, False), (2, False), (3, False), (4, True)]


@pytest.mark.unit
def test_abort_frees_blocks_and_other_requests_continue(llm):
    engine = llm.llm_engine
    engine.start_new_trace()
    engine.add_request("keep", {"prompt_token_ids": list(range(1, 10))}, greedy(6))
    engine.add_request("drop", {"prompt_token_ids": list(range(1, 20))}, greedy(50))
    engine.step()
    assert engine.abort_request("drop")
    assert not engine.abort_request("drop")          # already gone
    assert not engine.abort_request("never-added")
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.trace.requests["drop"].finish_reason == "abort"
    assert engine.trace.requests["keep"].output_len == 6
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks


@pytest.mark.unit
def test_future_arrivals_wait_for_their_time(llm):
    engine = llm.llm_engine
    engine.start_new_trace()
    now = engine.runner.now()
    engine.add_request("early", {"prompt_token_ids": [1, 2]}, greedy(2), arrival_time=now)
    engine.add_request("late", {"prompt_token_ids": [3, 4]}, greedy(2), arrival_time=now + 0.3)
    while engine.has_unfinished_requests():
        engine.step()
    late, early = engine.trace.requests["late"], engine.trace.requests["early"]
    assert late.first_scheduled_time >= now + 0.3          # never before it arrives
    assert early.first_scheduled_time < late.first_scheduled_time
    assert late.output_len == early.output_len == 2


@pytest.mark.unit
def test_outputs_come_back_in_input_order_with_metrics(llm):
    prompts = [{"prompt_token_ids": [i + 1] * (i + 1)} for i in range(6)]
    outs = llm.generate(prompts, [greedy(n) for n in (5, 1, 3, 8, 2, 4)], use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [5, 1, 3, 8, 2, 4]
    assert [o.prompt_token_ids for o in outs] == [p["prompt_token_ids"] for p in prompts]
    for o in outs:
        m = o.metrics
        assert o.finished and m.ttft > 0 and m.e2e_latency >= m.ttft
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finish_time
    assert outs[1].metrics.tpot is None and outs[0].metrics.tpot > 0


@pytest.mark.unit
def test_trace_records_slots_tokens_and_kv(llm):
    llm.generate([{"prompt_token_ids": [1] * 10}, {"prompt_token_ids": [2] * 3}],
                 [greedy(3), greedy(6)], use_tqdm=False)
    steps = llm.trace.steps
    assert steps[0].num_prefill_tokens == 13 and steps[0].num_decode_tokens == 0
    assert steps[1].num_decode_tokens == 2 and steps[1].num_slots == 4
    assert all(s.kv_blocks_used + s.kv_blocks_free == 64 for s in steps)
    # after step 0 the cache holds both prompts: 10 + 3 tokens in 3 + 1 blocks of 4
    assert steps[0].kv_tokens_held == 13 and steps[0].kv_blocks_used == 4
    assert all(s.end_time >= s.start_time for s in steps)
    assert llm.trace.to_dict()["config"]["block_size"] == 4


@pytest.mark.unit
def test_static_batch_keeps_finished_rows_idle_until_the_longest_ends():
    llm = LLM(build_tiny_llama(seed=0), scheduling="static", max_num_seqs=4, block_size=4,
              num_kv_blocks=64)
    llm.generate([{"prompt_token_ids": [1, 2]}] * 5, [greedy(n) for n in (2, 9, 3, 3, 4)],
                 use_tqdm=False)
    steps = llm.trace.steps
    first_batch = steps[:9]                  # the 9-token request keeps batch 1 alive
    assert [len(s.idle) for s in first_batch] == [0, 0, 1, 3, 3, 3, 3, 3, 3]
    # the 5th request waited for the whole first batch: head-of-line blocking
    fifth = list(llm.trace.requests.values())[4]
    assert fifth.first_scheduled_time >= steps[8].end_time
    # contiguous reservations: 4 × ceil((2 + max_tokens)/4) blocks held by batch 1
    assert steps[0].kv_blocks_used == 1 + 3 + 2 + 2
