"""The simulated runner: its cost model, its clock, its tokens, and calibration."""

from __future__ import annotations

import dataclasses

import pytest

from minillm.engine.sequence import Sequence
from minillm.sampling_params import SamplingParams
from minillm.scheduler import ScheduledSequence, SchedulerOutput
from minillm.sim.calibrate import calibrate, fit_quality
from minillm.sim.metrics import summarize
from minillm.sim.sim_runner import DEFAULT_COST_MODEL, CostModel, SimRunner, attention_pairs
from minillm.sim.simulate import make_sim_engine, simulate
from minillm.sim.workload import RequestSpec, preset_workload, seed_example

pytestmark = pytest.mark.unit


def seq_with(computed: int, prompt: int = 10, outputs: int = 0, rid: str = "r") -> Sequence:
    seq = Sequence(rid, [5] * prompt, SamplingParams(max_tokens=100))
    seq.output_token_ids = [7] * outputs
    seq.num_computed_tokens = computed
    return seq


def test_attention_pairs_count_causal_query_key_pairs():
    assert attention_pairs(1, 9) == 10          # a decode row reads its whole context
    assert attention_pairs(3, 0) == 1 + 2 + 3   # a fresh prompt: token i sees i keys
    assert attention_pairs(2, 4) == 5 + 6       # a chunk after 4 cached tokens


def test_step_time_is_linear_in_the_plan():
    cost = CostModel(step_overhead=0.01, per_prefill_token=0.001, per_decode_seq=0.002,
                     per_context_token=1e-5)
    decode = ScheduledSequence(seq_with(computed=10, outputs=1), 1, is_decode=True)   # 11 pairs
    prefill = ScheduledSequence(seq_with(computed=0, prompt=4), 4, is_decode=False)   # 10 pairs
    plan = SchedulerOutput(scheduled=[decode, prefill])
    assert cost.step_time(plan) == pytest.approx(0.01 + 4 * 0.001 + 0.002 + 21 * 1e-5)
    assert cost.step_time(SchedulerOutput()) == 0.0
    with pytest.raises(ValueError):
        CostModel(per_decode_seq=-1.0)


def test_default_cost_model_matches_the_measured_decode_steps():
    """SmolLM2 fp32, 2 cores, 128 tokens of context: 37 / 71 / 103 / 178 ms (notes)."""
    def decode_step(batch):
        rows = [ScheduledSequence(seq_with(computed=127, prompt=127, outputs=1, rid=str(i)),
                                  1, is_decode=True) for i in range(batch)]
        return DEFAULT_COST_MODEL.step_time(SchedulerOutput(scheduled=rows))
    for batch, measured in [(1, 0.037), (16, 0.071), (32, 0.103), (64, 0.178)]:
        assert decode_step(batch) == pytest.approx(measured, rel=0.05)


def test_clock_jumps_and_resets():
    runner = SimRunner()
    assert runner.now() == 0.0
    runner.wait_until(2.5)
    runner.wait_until(1.0)                      # never goes back
    assert runner.now() == 2.5
    runner.reset_clock()
    assert runner.now() == 0.0


def test_tokens_come_from_the_workload_and_max_tokens_stays_a_cap():
    """Output lengths 3 and 5 under max_tokens 50: both stop on EOS at their length,
    but a static reservation still holds prompt + 50 tokens each."""
    w = [RequestSpec("a", 4, 3, 50), RequestSpec("b", 4, 5, 50)]
    trace = simulate(w, scheduling="static", max_num_seqs=2, block_size=4)
    assert [(r.output_len, r.finish_reason) for r in trace.requests.values()] == \
        [(3, "stop"), (5, "stop")]
    assert trace.steps[0].kv_blocks_used == 2 * 14                    # 2 × ceil(54 / 4)
    assert summarize(trace)["kv_waste"] > 0.8


def test_ignore_eos_runs_every_request_to_max_tokens():
    w = [RequestSpec("a", 4, 3, 50), RequestSpec("b", 4, 5, 20)]
    trace = simulate(w, scheduling="continuous", max_num_seqs=2, block_size=4, ignore_eos=True)
    assert [(r.output_len, r.finish_reason) for r in trace.requests.values()] == \
        [(50, "length"), (20, "length")]


def test_a_request_unknown_to_the_runner_runs_to_max_tokens():
    engine = make_sim_engine(block_size=4, num_kv_blocks=16)
    engine.add_request("x", {"prompt_token_ids": [3, 4]}, SamplingParams(max_tokens=6))
    while engine.has_unfinished_requests():
        engine.step()
    record = engine.trace.requests["x"]
    assert (record.output_len, record.finish_reason) == (6, "length")


def test_step_durations_are_the_cost_model():
    cost = CostModel(0.01, 0.001, 0.002, 1e-5)
    trace = simulate(seed_example(), max_num_seqs=8, cost_model=cost)
    # step 1: 8 decode rows, each reading 9 keys (8 prompt tokens + its first token)
    assert trace.steps[1].duration == pytest.approx(0.01 + 8 * 0.002 + 1e-5 * 8 * 9)
    assert trace.config["cost_model"] == cost.to_dict()


def test_simulation_is_deterministic():
    w = preset_workload("chat", 40, arrival="poisson", rate=4.0, seed=5)
    assert simulate(w).to_dict() == simulate(w).to_dict()


# ---------------------------------------------------------------------- calibration

TRUE_COST = CostModel(step_overhead=0.02, per_prefill_token=0.0011, per_decode_seq=0.0031,
                      per_context_token=3e-6)


def varied_trace():
    """Chunked prefill + Poisson arrivals: prefill and decode sizes vary step to step."""
    w = preset_workload("chat", 60, arrival="poisson", rate=2.0, seed=11)
    return simulate(w, enable_chunked_prefill=True, max_num_batched_tokens=64,
                    max_num_seqs=8, cost_model=TRUE_COST)


def test_calibrate_recovers_a_known_cost_model():
    trace = varied_trace()
    fitted = calibrate(trace)
    for name in ("step_overhead", "per_prefill_token", "per_decode_seq", "per_context_token"):
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE_COST, name), rel=0.01), name
    assert fitted.fit["r2"] > 0.9999 and fitted.fit["mean_rel_error"] < 1e-6
    assert fitted.fit["num_outliers"] == 0


def test_calibrate_sets_aside_steps_slowed_by_other_load():
    trace = varied_trace()
    slowed = dataclasses.replace(trace, steps=[
        dataclasses.replace(s, end_time=s.start_time + 10 * s.duration) if i % 25 == 7 else s
        for i, s in enumerate(trace.steps)])
    fitted = calibrate(slowed)
    assert fitted.coefficients == pytest.approx(TRUE_COST.coefficients, rel=0.01)
    assert fitted.fit["num_outliers"] == len(range(7, len(trace.steps), 25))
    plain = calibrate(slowed, outlier_factor=None)               # least squares bends
    assert plain.coefficients != pytest.approx(TRUE_COST.coefficients, rel=0.01)


def test_fit_quality_of_a_wrong_model_is_poor():
    trace = varied_trace()
    assert fit_quality(TRUE_COST, trace)["r2"] == pytest.approx(1.0)
    assert fit_quality(CostModel(0.5, 0.0, 0.0, 0.0), trace)["r2"] < 0


def test_a_scheduler_subclass_runs_in_the_simulator():
    """An exercise's scheduler plugs into the simulator as into LLM(scheduling=...)."""
    from minillm.scheduler import ContinuousScheduler

    class ShortestPromptFirst(ContinuousScheduler):
        name = "shortest-prompt-first"

        def ordered_waiting(self, now):
            return sorted(self.waiting, key=lambda s: s.num_prompt_tokens)

    w = [RequestSpec("long", 30, 2, 2), RequestSpec("short", 3, 2, 2)]
    trace = simulate(w, scheduling=ShortestPromptFirst, max_num_seqs=1)
    assert trace.config["scheduling"] == "shortest-prompt-first"
    assert [s.scheduled[0].request_id for s in trace.steps][0] == "short"
