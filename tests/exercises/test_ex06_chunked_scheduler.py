"""Lesson 06 exercise: a token-budget scheduler with chunked prefill.

The learner's `ChunkedPrefillScheduler` runs inside the real engine on the tiny random
Llama; its Trace must show a budget that is never exceeded, decodes that never wait
for a prompt chunk, long prompts split into chunks — and the greedy outputs must be
exactly minillm's own.
"""

from __future__ import annotations

import random

import pytest

EXERCISE = "ex06_chunked_scheduler"
BUDGET = 16
PROMPT_LENS = [5, 90, 12, 40, 63, 7]
MAX_TOKENS = [24, 8, 30, 12, 10, 20]
ARRIVAL_STEPS = 3            # requests 3.. arrive while the first ones decode


@pytest.fixture(scope="module")
def tiny():
    from minillm.model.tiny import build_tiny_llama
    return build_tiny_llama(seed=0)


def prompts():
    rng = random.Random(0)
    return [{"prompt_token_ids": [rng.randrange(2, 256) for _ in range(n)]} for n in PROMPT_LENS]


def params():
    from minillm import SamplingParams
    return [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in MAX_TOKENS]


def run(model, scheduling, **kwargs):
    """Generate the workload; the last three requests are added after a few steps."""
    from minillm import LLM
    llm = LLM(model, scheduling=scheduling, max_num_seqs=4, block_size=4, **kwargs)
    engine = llm.llm_engine
    engine.start_new_trace()
    ps, sp = prompts(), params()
    for i in range(3):
        engine.add_request(f"r{i}", ps[i], sp[i])
    outputs, steps = {}, 0
    while engine.has_unfinished_requests() or steps < ARRIVAL_STEPS:
        if steps == ARRIVAL_STEPS:
            for i in range(3, len(ps)):
                engine.add_request(f"r{i}", ps[i], sp[i])
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = out.outputs[0].token_ids
        steps += 1
        assert steps < 2000, "the scheduler does not finish the workload"
    kv = engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks, "every KV block is back after the run"
    return [outputs[f"r{i}"] for i in range(len(ps))], llm.trace


@pytest.fixture(scope="module")
def reference(tiny):
    tokens, _ = run(tiny, "continuous")
    return tokens


def run_exercise(ex, tiny, **kwargs):
    kwargs.setdefault("max_num_batched_tokens", BUDGET)
    return run(tiny, ex.ChunkedPrefillScheduler, enable_chunked_prefill=True, **kwargs)


@pytest.fixture(scope="module")
def exercise_run(tiny):
    """(tokens, trace) of the learner's scheduler on the workload, run once per module."""
    from minillm.grading import load_exercise
    return run_exercise(load_exercise(EXERCISE), tiny)


def test_decodes_first_then_chunks(ex):
    """One schedule() call on hand-made state: the plan's order and sizes."""
    from minillm.kv_cache import KVCacheManager
    from minillm.sampling_params import SamplingParams
    from minillm.config import EngineConfig
    from minillm.engine.sequence import Sequence, SequenceStatus

    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=10, max_model_len=2048,
                          enable_chunked_prefill=True)
    sched = ex.ChunkedPrefillScheduler(config, KVCacheManager(64, 4))
    p = SamplingParams(max_tokens=50)
    mid = Sequence("mid-prompt", list(range(30)), p, arrival_time=0.0)
    dec1 = Sequence("decoding-1", list(range(6)), p, arrival_time=1.0)
    dec2 = Sequence("decoding-2", list(range(9)), p, arrival_time=2.0)
    new = Sequence("newcomer", list(range(20)), p, arrival_time=3.0)
    for seq, computed in ((mid, 4), (dec1, 6), (dec2, 9)):
        sched.kv.allocate(seq, computed)
        seq.num_computed_tokens = computed
        seq.status = SequenceStatus.RUNNING
        sched.running.append(seq)
    for seq in (dec1, dec2):                          # each has sampled one token
        seq.output_token_ids.append(7)
    sched.add(new)

    plan = sched.schedule(now=4.0)
    rows = [(row.seq.request_id, row.num_new_tokens) for row in plan.scheduled]
    assert rows == [("decoding-1", 1), ("decoding-2", 1), ("mid-prompt", 8)], rows
    assert plan.num_batched_tokens == 10
    assert [row.is_decode for row in plan.scheduled] == [True, True, False]
    assert new in sched.waiting, "no budget left: the newcomer waits"

    for row in plan.scheduled:                        # the engine's update
        row.seq.num_computed_tokens += row.num_new_tokens
    dec1.output_token_ids.append(7)
    dec2.output_token_ids.append(7)
    plan = sched.schedule(now=5.0)
    rows = [(row.seq.request_id, row.num_new_tokens) for row in plan.scheduled]
    assert rows == [("decoding-1", 1), ("decoding-2", 1), ("mid-prompt", 8)], rows
    mid.num_computed_tokens += 8
    dec1.num_computed_tokens += 1
    dec2.num_computed_tokens += 1
    dec1.output_token_ids.append(7)
    dec2.output_token_ids.append(7)
    plan = sched.schedule(now=6.0)                    # 10 of 30 prompt tokens left
    rows = [(row.seq.request_id, row.num_new_tokens) for row in plan.scheduled]
    assert rows == [("decoding-1", 1), ("decoding-2", 1), ("mid-prompt", 8)], rows
    mid.num_computed_tokens += 8
    dec1.num_computed_tokens += 1
    dec2.num_computed_tokens += 1
    dec1.output_token_ids.append(7)
    dec2.output_token_ids.append(7)
    plan = sched.schedule(now=7.0)                    # 2 left; the newcomer gets 6
    rows = [(row.seq.request_id, row.num_new_tokens) for row in plan.scheduled]
    assert rows == [("decoding-1", 1), ("decoding-2", 1), ("mid-prompt", 2), ("newcomer", 6)], rows
    assert new in sched.running


def test_budget_never_exceeded(exercise_run):
    _, trace = exercise_run
    used = [step.num_batched_tokens for step in trace.steps]
    assert max(used) <= BUDGET, f"a step ran {max(used)} tokens, budget {BUDGET}"
    # the budget left after the decodes goes to prompt chunks: while any prompt is
    # still mid-prefill after a step, that step must have used the whole budget
    total = {rid: r.prompt_len for rid, r in trace.requests.items()}
    done = dict.fromkeys(total, 0)
    for step in trace.steps:
        for e in step.scheduled:
            done[e.request_id] += e.num_prefill_tokens
        pending = [rid for rid in total if 0 < done[rid] < total[rid]]
        if pending:
            assert step.num_batched_tokens == BUDGET, (step.index, pending)


def test_decodes_come_before_chunks(exercise_run):
    _, trace = exercise_run
    mixed = 0
    for step in trace.steps:
        kinds = ["decode" if e.num_decode_tokens else "prefill" for e in step.scheduled]
        assert kinds == sorted(kinds), f"step {step.index}: a chunk is planned before a decode"
        if "prefill" in kinds:
            # every request that was streaming when the step began gets its token
            streaming = {rid for rid, r in trace.requests.items()
                         if r.first_token_time is not None
                         and r.first_token_time <= step.start_time < r.finish_time}
            ran = {e.request_id for e in step.scheduled if e.num_decode_tokens}
            assert streaming <= ran, f"step {step.index}: {streaming - ran} waited for a chunk"
            mixed += bool(ran)
    assert mixed > 0, "no step mixed decodes with a prompt chunk"


def test_long_prompts_are_split(exercise_run):
    _, trace = exercise_run
    for rid, record in trace.requests.items():
        chunks = [e.num_prefill_tokens for s in trace.steps for e in s.scheduled
                  if e.request_id == rid and e.num_prefill_tokens]
        assert sum(chunks) == record.prompt_len
        assert len(chunks) >= -(-record.prompt_len // BUDGET), (rid, chunks)
        assert max(chunks) <= BUDGET


def test_greedy_outputs_equal_minillm(exercise_run, reference):
    tokens, _ = exercise_run
    assert tokens == reference
    assert [len(t) for t in tokens] == MAX_TOKENS


def test_tight_cache_preempts_and_still_matches(ex, tiny, reference):
    tokens, trace = run_exercise(ex, tiny, num_kv_blocks=40)
    assert sum(len(s.preempted) for s in trace.steps) > 0, "40 blocks must force preemption"
    assert tokens == reference
