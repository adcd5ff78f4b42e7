"""Lesson 03 exercise: an iteration-level Scheduler, graded inside the real engine.

The learner's `IterationScheduler` drives `LLM` on the tiny random Llama (real forward,
real paged KV cache, greedy sampling). Each test is one task.
"""

from __future__ import annotations

import pytest

from minillm import LLM, SamplingParams
from minillm.config import EngineConfig
from minillm.engine.sequence import Sequence
from minillm.kv_cache import KVCacheManager
from minillm.model.tiny import build_tiny_llama

EXERCISE = "ex03_iteration_scheduler"
MAX_STEPS = 400

# 8 requests: prompts of 3–12 tokens, answers of 2–14 tokens (ignore_eos: exact lengths)
PROMPTS = [[(7 * i + 3 * j) % 250 + 2 for j in range(n)]
           for i, n in enumerate((5, 12, 3, 9, 7, 4, 11, 6))]
MAX_TOKENS = [3, 14, 6, 2, 9, 5, 12, 4]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_llama(seed=0)


def make_llm(tiny, scheduling, **limits):
    config = dict(max_num_seqs=3, block_size=4, num_kv_blocks=64, max_model_len=512)
    return LLM(tiny, scheduling=scheduling, device="cpu", **{**config, **limits})


def run(llm, prompts=PROMPTS, max_tokens=MAX_TOKENS):
    """Serve every request through the engine's step loop; fail instead of hanging."""
    engine = llm.llm_engine
    engine.start_new_trace()
    for i, (p, n) in enumerate(zip(prompts, max_tokens)):
        engine.add_request(f"req-{i}", {"prompt_token_ids": p},
                           SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))
    outputs = {}
    for _ in range(MAX_STEPS):
        if not engine.has_unfinished_requests():
            break
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = out.outputs[0].token_ids
    else:
        pytest.fail(f"requests still unfinished after {MAX_STEPS} steps: does schedule() "
                    "return an empty plan while requests wait?")
    return [outputs[f"req-{i}"] for i in range(len(prompts))], engine.trace


def sequence(n_prompt, max_tokens):
    return Sequence("s", list(range(2, 2 + n_prompt)), SamplingParams(max_tokens=max_tokens))


def test_worst_case_blocks(ex):
    sched = ex.IterationScheduler(EngineConfig(max_model_len=100, max_num_batched_tokens=100),
                                 KVCacheManager(64, 16))
    assert sched.worst_case_blocks(sequence(20, 30)) == 4        # 50 tokens
    assert sched.worst_case_blocks(sequence(16, 16)) == 2        # exactly 32
    assert sched.worst_case_blocks(sequence(1, 1)) == 1
    assert sched.worst_case_blocks(sequence(60, 500)) == 7       # capped at max_model_len 100


def test_can_admit_checks_slots_budget_and_memory(ex):
    config = EngineConfig(max_num_seqs=2, max_num_batched_tokens=32, max_model_len=512)
    sched = ex.IterationScheduler(config, KVCacheManager(10, 4))
    newcomer = sequence(8, 8)                                     # worst case 16 tokens: 4 blocks
    assert sched.can_admit(newcomer, num_running=0, budget_left=32)
    assert not sched.can_admit(newcomer, num_running=2, budget_left=32)    # no slot
    assert not sched.can_admit(newcomer, num_running=1, budget_left=7)     # prompt > budget
    assert sched.can_admit(newcomer, num_running=1, budget_left=8)
    # a running sequence (worst case 24 tokens: 6 blocks) that holds 3 blocks so far
    runner = sequence(10, 14)
    sched.kv.allocate(runner, 11)
    assert len(runner.block_table) == 3
    sched.running.append(runner)
    # free 7; runner may need 6 - 3 = 3 more; the newcomer 4: 7 <= 7 fits
    assert sched.can_admit(newcomer, num_running=1, budget_left=32)
    assert not sched.can_admit(sequence(8, 9), num_running=1, budget_left=32)   # 5 blocks: no


def test_greedy_outputs_equal_minillm_continuous(ex, tiny):
    reference, _ = run(make_llm(tiny, "continuous"))
    mine, _ = run(make_llm(tiny, ex.IterationScheduler))
    assert [len(t) for t in mine] == MAX_TOKENS
    assert mine == reference


def test_finished_requests_leave_and_waiting_ones_join_the_next_step(ex, tiny):
    _, trace = run(make_llm(tiny, ex.IterationScheduler))
    finish_step = {}
    for step in trace.steps:
        for e in step.scheduled:
            assert e.request_id not in finish_step, f"{e.request_id} ran after it finished"
        for rid, r in trace.requests.items():
            if r.finish_time == step.end_time:
                finish_step[rid] = step.index
    assert len(finish_step) == len(PROMPTS)
    joined = {}
    for step in trace.steps:
        for e in step.scheduled:
            joined.setdefault(e.request_id, step.index)
    checked = 0
    for s, step in enumerate(trace.steps[:-1]):
        leaving = sum(1 for k in finish_step.values() if k == s)
        arriving = sum(1 for k in joined.values() if k == s + 1)
        expected = min(leaving + step.num_slots - len(step.scheduled), step.num_waiting)
        assert arriving == expected, (f"step {s}: {leaving} request(s) finished with "
                                      f"{step.num_waiting} waiting, but {arriving} joined "
                                      f"at step {s + 1}")
        checked += leaving > 0 and step.num_waiting > 0
    assert checked >= 3, "the workload must exercise leave-and-join"


def test_limits_respected_and_every_block_freed(ex, tiny):
    limits = dict(max_num_seqs=4, max_num_batched_tokens=16, num_kv_blocks=12)
    llm = make_llm(tiny, ex.IterationScheduler, **limits)
    outputs, trace = run(llm)
    assert [len(t) for t in outputs] == MAX_TOKENS
    for step in trace.steps:
        assert len(step.scheduled) <= 4
        assert step.num_batched_tokens <= 16
        assert step.kv_blocks_used <= 12
        assert not step.preempted
    assert max(len(s.scheduled) for s in trace.steps) >= 2, "batching still happens"
    kv = llm.llm_engine.scheduler.kv
    assert kv.num_free_blocks == kv.num_blocks, "every KV block is back after the run"
    assert not llm.llm_engine.scheduler.running and not llm.llm_engine.scheduler.waiting
