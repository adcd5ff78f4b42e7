"""The engine stepper shows, at every step, exactly what the Trace recorded."""

from __future__ import annotations

import pytest

from minillm.kv_cache import cdiv
from minillm.sim.simulate import simulate
from minillm.sim.workload import RequestSpec
from minillm.widgets.stepper import EngineStepper

pytestmark = pytest.mark.unit


def small_trace(scheduling="continuous"):
    """3 slots, 5 requests at t = 0 with answers of 3, 6, 4, 2, 5 tokens (simulated)."""
    specs = [RequestSpec(f"req-{i}", 4, n, n) for i, n in enumerate((3, 6, 4, 2, 5))]
    return simulate(specs, scheduling=scheduling, max_num_seqs=3, block_size=4,
                    num_kv_blocks=16, record_block_tables=True)


def test_stepping_shows_the_traces_numbers_and_redraws():
    trace = small_trace()
    stepper = EngineStepper(trace)
    assert stepper.result["step"] == 0
    first_image = stepper.image.value
    assert first_image[:8] == b"\x89PNG\r\n\x1a\n"
    for k in range(1, len(trace.steps)):
        stepper.step_button.click()
        step, shown = trace.steps[k], stepper.result
        assert shown["step"] == k
        assert sorted(shown["running"]) == sorted(e.request_id for e in step.scheduled)
        assert shown["queue_length"] == step.num_waiting
        assert shown["kv_blocks_used"] == step.kv_blocks_used
        assert shown["kv_blocks_free"] == step.kv_blocks_free
        assert shown["prefill_tokens"] == step.num_prefill_tokens
        assert shown["decode_tokens"] == step.num_decode_tokens
        assert shown["kv_blocks"] == {rid: sorted(t) for rid, t in step.block_tables.items() if t}
    assert stepper.image.value != first_image
    stepper.step_button.click()                          # past the end: stays on the last
    assert stepper.result["step"] == len(trace.steps) - 1
    stepper.go(0)
    stepper.back_button.click()                          # before the start: stays on 0
    assert stepper.result["step"] == 0


def test_a_finished_request_leaves_and_the_queue_head_takes_its_slot_next_step():
    stepper = EngineStepper(small_trace())
    # req-0 (3 tokens) emits its last token in step 2; req-3 joins in step 3, in slot 0
    stepper.go(2)
    assert stepper.result["slots"][0] == "req-0" and "req-3" in stepper.result["waiting"]
    stepper.step_button.click()
    assert stepper.result["slots"][0] == "req-3"
    assert stepper.result["slot_states"][0] == "prefill"
    assert stepper.result["waiting"] == ["req-4"]
    # tokens generated = every request's tokens timestamped by the end of the step
    assert stepper.result["tokens_generated"] == 4 * 3      # 3 tokens a step, 4 steps


def test_static_batch_keeps_finished_rows_idle():
    trace = small_trace("static")
    stepper = EngineStepper(trace)
    stepper.go(3)            # req-0 finished at step 2 but keeps slot 0 until req-1 ends
    assert stepper.result["slot_states"][0] == "idle"
    assert stepper.result["idle"] == trace.steps[3].idle == ["req-0"]
    assert stepper.result["queue_length"] == 2
    # the finished row keeps its whole reservation: prompt + max_tokens = 4 + 3 tokens
    assert len(stepper.result["kv_blocks"]["req-0"]) == cdiv(4 + 3, 4)
    for k, step in enumerate(trace.steps):       # every block the Trace counts is drawn
        stepper.go(k)
        assert sum(map(len, stepper.result["kv_blocks"].values())) == step.kv_blocks_used


def test_play_moves_the_slider_and_steps_answer_fast(monkeypatch):
    import minillm.widgets.stepper as stepper_module
    stepper = EngineStepper(small_trace())
    stepper.play.value = 4                           # what the Play button does each tick
    assert stepper.slider.value == 4 and stepper.result["step"] == 4

    replays = []
    monkeypatch.setattr(stepper_module, "replay", lambda trace: replays.append(trace) or [])
    stepper.back_button.click()
    assert stepper.result["step"] == 3
    assert replays == []                 # a redraw of the views computed once, not a replay


def test_real_model_trace():
    from minillm import LLM, SamplingParams
    from minillm.model.tiny import build_tiny_llama
    llm = LLM(build_tiny_llama(seed=0), max_num_seqs=2, block_size=4, num_kv_blocks=16,
              record_block_tables=True)
    prompts = [{"prompt_token_ids": [3, 4, 5]}] * 3
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (2, 5, 3)]
    llm.generate(prompts, params, use_tqdm=False)
    stepper = EngineStepper(llm.trace)
    for k, step in enumerate(llm.trace.steps):
        stepper.go(k)
        assert sorted(stepper.result["running"]) == sorted(e.request_id for e in step.scheduled)
        assert stepper.result["queue_length"] == step.num_waiting
        assert stepper.result["kv_blocks_used"] == step.kv_blocks_used
        assert stepper.result["kv_blocks"] == {r: sorted(t) for r, t in step.block_tables.items() if t}
    assert stepper.result["tokens_generated"] == 2 + 5 + 3
    # without block tables the stepper cannot say who holds which block, and says how to record
    plain = LLM(build_tiny_llama(seed=0), max_num_seqs=2, block_size=4, num_kv_blocks=16)
    plain.generate(prompts, params, use_tqdm=False)
    with pytest.raises(ValueError, match="record_block_tables=True"):
        EngineStepper(plain.trace)


def test_preempted_request_leaves_its_slot_and_queues_in_arrival_order():
    specs = [RequestSpec(f"req-{i}", 8, n, n) for i, n in enumerate((30, 28, 26, 24, 6, 5, 4, 3, 2, 9, 8))]
    trace = simulate(specs, scheduling="continuous", max_num_seqs=4, block_size=4,
                     num_kv_blocks=14, record_block_tables=True)
    k = next(i for i, s in enumerate(trace.steps) if s.preempted)
    stepper = EngineStepper(trace)
    stepper.go(k)
    victim = trace.steps[k].preempted[0]
    assert stepper.result["preempted"] == trace.steps[k].preempted
    assert victim not in stepper.result["slots"].values()
    assert victim not in stepper.result["kv_blocks"]             # its blocks went back
    assert victim in stepper.result["waiting"]
    # all arrived at t = 0: the queue is in the order the requests were added (req-10 last)
    order = [f"req-{i}" for i in range(len(specs))]
    assert stepper.result["waiting"] == sorted(stepper.result["waiting"], key=order.index)
    assert stepper.result["kv_blocks_used"] == trace.steps[k].kv_blocks_used
