"""Lesson 13's engine: the exercises' parts assembled (`minillm/engine/components.py`).

With the untouched stubs it must run entirely on the answer key and say so; a
deliberately broken part must stop the run with a message that names the part, the
engine step and (where there is one) the request — one test per part. (With `solutions/`
as the learner, the engine against transformers and served to the openai client: the
graded tasks of `tests/exercises/test_ex13_capstone.py`.)
"""

from __future__ import annotations

import importlib

import pytest
import torch

from minillm import LLM, SamplingParams
from minillm.config import EngineConfig
from minillm.engine.components import (PARTS, ComponentError, latency_report, learner_parts)
from minillm.grading import TARGET_ENV
from minillm.model.tiny import build_tiny_llama

pytestmark = pytest.mark.unit

TINY_PROMPTS = [list(range(3, 3 + n)) for n in (9, 21, 14, 30)]


def solution(exercise: str):
    return importlib.import_module(f"solutions.{exercise}")


@pytest.fixture
def as_solutions(monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "solutions")


# The solutions' engine against transformers and served to the openai client: the graded
# tasks of tests/exercises/test_ex13_capstone.py (the suite runs them on solutions/).


# ---------------------------------------------------------------------- the untouched stubs

def test_untouched_stubs_run_on_the_answer_key(monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "exercises")
    statuses = learner_parts()
    assert len(statuses) == len(PARTS)
    for status in statuses:
        assert not status.yours, status
        assert "NotImplementedError" in status.reason, status      # says so, part by part
    tiny = build_tiny_llama(seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=6)
    prompts = [{"prompt_token_ids": p} for p in TINY_PROMPTS]
    ours = LLM(tiny, components="exercises").generate(prompts, params, use_tqdm=False)
    key = LLM(tiny, executor="eager").generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in ours] == [o.outputs[0].token_ids for o in key]


def test_config_refuses_what_the_exercises_cannot_serve():
    with pytest.raises(ValueError, match="scheduling='static'"):
        EngineConfig(components="exercises", scheduling="static")
    with pytest.raises(ValueError, match="components must be one of"):
        EngineConfig(components="mine")


# ---------------------------------------------------------------------- a broken part each

def run_tiny(**knobs):
    """Run the tiny model on the learner's engine; the ComponentError it raises."""
    llm = LLM(build_tiny_llama(seed=0), components="exercises", **knobs)
    with pytest.raises(ComponentError) as caught:
        llm.generate([{"prompt_token_ids": p} for p in TINY_PROMPTS],
                     SamplingParams(temperature=0.0, max_tokens=6), use_tqdm=False)
    return caught.value


def assert_names(error: ComponentError, part: str, *, request: bool = True):
    message = str(error)
    assert error.part == part and f"your {part} disagree" in message, message
    assert error.step is not None and f"engine step {error.step}" in message, message
    if request:
        assert error.request_id is not None and repr(error.request_id) in message, message


def test_broken_allocator_hands_out_a_block_twice(as_solutions, monkeypatch):
    module = solution("ex05_block_allocator")

    class TwiceAllocator(module.BlockAllocator):
        def allocate(self):
            if not self.free_list:
                raise MemoryError("no free KV block")
            block = self.free_list[0]
            self.free_list.pop()                  # the bug: takes another block off the list
            self.ref_counts[block] = 1
            return block

    monkeypatch.setattr(module, "BlockAllocator", TwiceAllocator)
    error = run_tiny(block_size=4)
    assert_names(error, "block allocator")
    assert "given out twice" in str(error)


def test_broken_block_table_needs_one_block_too_few(as_solutions, monkeypatch):
    module = solution("ex05_block_allocator")

    class ShortTable(module.BlockTable):
        def blocks_needed(self, num_new_tokens):
            return max(0, super().blocks_needed(num_new_tokens) - 1)

    monkeypatch.setattr(module, "BlockTable", ShortTable)
    assert_names(run_tiny(block_size=4), "block table")


def test_broken_flat_batch_has_one_position_off(as_solutions, monkeypatch):
    module = solution("ex04_flat_batch")
    right = module.build_flat_batch

    def off_by_one(requests, block_size):
        batch = right(requests, block_size)
        if len(requests) > 1:                     # the bug: only in batches of several
            batch["positions"] = batch["positions"].clone()
            batch["positions"][-1] += 1
        return batch

    monkeypatch.setattr(module, "build_flat_batch", off_by_one)
    error = run_tiny()
    assert_names(error, "flat batch")
    assert "positions[" in str(error) and "token at position" in str(error)
    assert error.request_id in [request for request, _, _ in error.batch]


def test_broken_attention_scales_the_scores_wrong(as_solutions, monkeypatch):
    module = solution("ex04_flat_batch")
    right = module.attend_per_sequence
    monkeypatch.setattr(module, "attend_per_sequence",
                        lambda q, k, v, starts, lens, scale: right(q, k, v, starts, lens,
                                                                   scale * 1.5))
    error = run_tiny()
    assert_names(error, "attention")
    assert "layer 0" in str(error)


def test_broken_scheduler_exceeds_the_token_budget(as_solutions, monkeypatch):
    module = solution("ex06_chunked_scheduler")

    class Greedy(module.ChunkedPrefillScheduler):
        def budget_left(self, out):
            return super().budget_left(out) + 4   # the bug: spends more than the budget

    monkeypatch.setattr(module, "ChunkedPrefillScheduler", Greedy)
    error = run_tiny(enable_chunked_prefill=True, max_num_batched_tokens=16)
    assert_names(error, "scheduler", request=False)
    assert "max_num_batched_tokens=16" in str(error)


def test_broken_policy_forgets_aging(as_solutions, monkeypatch):
    module = solution("ex09_priority_aging")
    monkeypatch.setattr(module, "priority_key", lambda seq, now, aging_rate:
                        (seq.priority, seq.arrival_time, seq.admission_order))
    assert_names(run_tiny(policy="priority", aging_rate=1.0, max_num_seqs=2), "ordering policy")


def test_broken_prefix_hash_does_not_chain(as_solutions, monkeypatch):
    module = solution("ex10_prefix_hashing")
    monkeypatch.setattr(module, "block_hashes", lambda tokens, bs: [
        module.hash_block(None, tokens[i:i + bs]) for i in range(0, len(tokens) - bs + 1, bs)])
    error = run_tiny(enable_prefix_caching=True, block_size=4)
    assert_names(error, "prefix hashing")
    assert "block 1" in str(error)


def test_broken_stream_bridge_sends_half_a_character(as_solutions, monkeypatch):
    module = solution("ex12_stream_bridge")
    monkeypatch.setattr(module, "text_delta", lambda sent, text, finished: text[len(sent):])
    engine = LLM(build_tiny_llama(seed=0), components="exercises").llm_engine
    assert engine.text_delta("ab", "abc", False) == "c"
    with pytest.raises(ComponentError, match="your stream bridge disagree in a streamed answer"):
        engine.text_delta("ab", "abc\ufffd", False)


def test_broken_metrics_time_tpot_from_the_arrival(as_solutions, monkeypatch):
    module = solution("ex08_metrics_and_tuning")
    right = module.request_latencies

    def tpot_from_arrival(arrival_time, token_times):
        latencies = right(arrival_time, token_times)   # the bug: TPOT counts the wait too
        latencies["tpot"] = (token_times[-1] - arrival_time) / len(token_times)
        return latencies

    monkeypatch.setattr(module, "request_latencies", tpot_from_arrival)
    llm = LLM(build_tiny_llama(seed=0), components="exercises")
    llm.generate([{"prompt_token_ids": p} for p in TINY_PROMPTS],
                 SamplingParams(temperature=0.0, max_tokens=6), use_tqdm=False)
    with pytest.raises(ComponentError, match="your latency metrics disagree in the latency "
                                             "report: .*tpot P50"):
        latency_report(llm.llm_engine)


@pytest.mark.parametrize("broken", [False, True])
def test_decode_kernel_checked_in_the_interpreter(broken):
    """ex07's kernel runs only on CUDA in the engine; its adapter is checked here with the
    Triton interpreter on one decode-only step."""
    from minillm.attention.reference import PerSequenceAttention
    from minillm.engine.adapters import LearnerAttention, Monitor
    from minillm.model.batch import build_attention_metadata

    kernel = solution("ex07_paged_decode_kernel")
    if broken:
        right = kernel.paged_decode_attention

        class Broken:
            @staticmethod
            def paged_decode_attention(*args):
                return right(*args) * 1.01
        kernel = Broken
    torch.manual_seed(0)
    block_size, heads, kv_heads, dim = 4, 4, 2, 16
    k_cache, v_cache = torch.randn(2, 8, block_size, kv_heads, dim)
    seq_lens = [5, 9]
    meta = build_attention_metadata([1, 1], seq_lens, [[3, 1], [0, 2, 5]],
                                    [1 * 4 + 0, 5 * 4 + 0], block_size, torch.device("cpu"))
    q, k, v = torch.randn(2, heads, dim), torch.randn(2, kv_heads, dim), torch.randn(2, kv_heads, dim)
    monitor = Monitor()
    monitor.rows = [("a", 4, 1), ("b", 8, 1)]
    backend = LearnerAttention(None, kernel, monitor)
    want = PerSequenceAttention()(q, k, v, k_cache.clone(), v_cache.clone(), meta, dim ** -0.5)
    if broken:
        with pytest.raises(ComponentError, match="your decode kernel disagree") as caught:
            backend(q, k, v, k_cache, v_cache, meta, dim ** -0.5)
        assert caught.value.request_id == "a"
    else:
        got = backend(q, k, v, k_cache, v_cache, meta, dim ** -0.5)
        torch.testing.assert_close(got, want)


def test_broken_free_stops_the_run_when_a_request_finishes(as_solutions, monkeypatch):
    """free() runs when a request finishes, inside the engine's per-request error handling:
    a wrong free still stops the whole run (ComponentError is an InvariantError)."""
    module = solution("ex05_block_allocator")

    class LeakyAllocator(module.BlockAllocator):
        def free(self, block_id):
            self.ref_counts[block_id] -= 1       # the bug: never back on the free list

    monkeypatch.setattr(module, "BlockAllocator", LeakyAllocator)
    error = run_tiny(block_size=4)
    assert_names(error, "block allocator")
    assert "after free(" in str(error) and "num_free says" in str(error)


def test_cached_prefixes_are_taken_as_admission_reaches_them(as_solutions):
    """A tight cache: the head of the queue needs every block but one, the request behind
    it would revive cached blocks. The learner's scheduler must admit the head (as the
    answer key does), not stall behind blocks the second request took early."""
    knobs = dict(enable_prefix_caching=True, block_size=4, num_kv_blocks=8, max_num_seqs=2)
    cached_prompt = {"prompt_token_ids": list(range(3, 20))}       # 4 full blocks + 1 token
    head = {"prompt_token_ids": list(range(30, 56))}               # 26 tokens: 7 blocks
    one, two = SamplingParams(temperature=0.0, max_tokens=1), SamplingParams(temperature=0.0,
                                                                             max_tokens=2)
    runs = {}
    for name, extra in (("yours", dict(components="exercises")), ("key", dict(executor="eager"))):
        llm = LLM(build_tiny_llama(seed=0), **knobs, **extra)
        llm.generate([cached_prompt], one, use_tqdm=False)          # its blocks stay cached
        outs = llm.generate([head, cached_prompt], [two, two], use_tqdm=False)
        runs[name] = [o.outputs[0].token_ids for o in outs]
    assert runs["yours"] == runs["key"]
