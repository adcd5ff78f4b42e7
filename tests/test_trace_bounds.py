"""A long-running engine stays bounded, and a new trace starts a clean clock."""

from __future__ import annotations

import pytest

from minillm.config import DEFAULT_MAX_TRACE_STEPS
from minillm.sampling_params import SamplingParams
from minillm.sim.simulate import make_sim_engine


def serve(engine, num_requests: int, max_tokens: int = 3) -> None:
    """Requests arrive one after another, as on a server that is never restarted."""
    for i in range(num_requests):
        engine.add_request(f"r{i}", {"prompt_token_ids": [5, 6, 7]},
                           SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
        while engine.has_unfinished_requests():
            engine.step()


@pytest.mark.unit
def test_trace_keeps_a_window_of_recent_steps_and_requests():
    engine = make_sim_engine(max_trace_steps=40)
    serve(engine, 200)                                   # 600 steps, 200 requests
    trace = engine.trace
    assert 40 <= len(trace.steps) <= 50 and trace.num_dropped_steps == 600 - len(trace.steps)
    assert [s.index for s in trace.steps] == list(range(trace.num_dropped_steps, 600))
    assert 40 <= len(trace.requests) <= 50
    assert list(trace.requests)[-1] == "r199"            # the newest are the ones kept


@pytest.mark.unit
def test_unfinished_requests_are_never_dropped_from_the_trace():
    engine = make_sim_engine(max_trace_steps=10)
    serve(engine, 30)
    engine.add_request("long", {"prompt_token_ids": [1]}, SamplingParams(max_tokens=500,
                                                                          ignore_eos=True))
    for _ in range(100):
        engine.step()
    assert "long" in engine.trace.requests and len(engine.trace.steps) <= 13


@pytest.mark.unit
def test_the_default_window_holds_every_step_of_a_lesson_sized_run():
    engine = make_sim_engine()
    serve(engine, 100)
    assert engine.trace.num_dropped_steps == 0 and len(engine.trace.steps) == 300
    assert DEFAULT_MAX_TRACE_STEPS >= 10_000


@pytest.mark.unit
def test_a_new_trace_moves_waiting_requests_to_the_new_clock():
    """After 100 simulated seconds, a request due now must not wait 100 s on the new clock
    (stale arrival times); one due in 2 s is still due in 2 s."""
    engine = make_sim_engine()
    engine.runner.wait_until(100.0)
    engine.add_request("now", {"prompt_token_ids": [1, 2]}, SamplingParams(max_tokens=2))
    engine.add_request("soon", {"prompt_token_ids": [3, 4]}, SamplingParams(max_tokens=2),
                       arrival_time=102.0)
    engine.start_new_trace()
    assert engine.runner.now() == 0.0
    assert engine.trace.requests["now"].arrival_time == 0.0
    assert engine.trace.requests["soon"].arrival_time == 2.0
    engine.step()
    assert engine.runner.now() < 1.0                     # ran at once, did not jump to t=100
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.trace.requests["soon"].first_scheduled_time >= 2.0
