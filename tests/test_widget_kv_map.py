"""The KV block map: recorded maps agree with the Trace, controls re-simulate and redraw."""

from __future__ import annotations

import numpy as np
import pytest

from minillm.simulate import simulate
from minillm.metrics import kv_utilization
from minillm.widgets.kv_map import (FREE, BlockMapRecorder, KVBlockMap, block_image,
                                    default_workload, run_from_trace, simulate_block_map)
from minillm.widgets.style import COLORS

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n"


def assert_map_matches_trace(run):
    """Every recorded snapshot agrees with the Trace's own KV counts."""
    assert run.num_steps == len(run.trace.steps)
    for k, step in enumerate(run.trace.steps):
        used = run.owners[k] != FREE
        assert used.sum() == step.kv_blocks_used, k
        assert run.tokens[k].sum() == step.kv_tokens_held, k
        assert (run.tokens[k] <= run.block_size).all()


@pytest.mark.parametrize("variant", ["static+contiguous", "continuous+contiguous",
                                     "static+paged", "continuous+paged"])
def test_recorded_block_maps_agree_with_the_trace(variant):
    workload = default_workload(12, max_tokens=128)
    run = simulate_block_map(workload, variant, block_size=8, num_kv_blocks=96, max_num_seqs=8)
    assert_map_matches_trace(run)
    # recording does not change what the engine does
    plain = simulate(workload, scheduling=variant, block_size=8, num_kv_blocks=96, max_num_seqs=8)
    assert [s.end_time for s in plain.steps] == [s.end_time for s in run.trace.steps]


def test_default_view_contiguous_wastes_paged_does_not():
    m = KVBlockMap()
    left, right = m.result["left"], m.result["right"]
    assert (left["name"], right["name"]) == ("static+contiguous", "continuous+paged")
    assert left["utilization_avg"] == pytest.approx(kv_utilization(m.runs[0].trace))
    assert left["utilization_avg"] < 0.5 < 0.85 < right["utilization_avg"]
    # contiguous: each request reserves prompt + 256 tokens → few fit in 128 × 16 tokens
    reservation = max(-(-(s.prompt_len + s.max_tokens) // 16) for s in m.workload())
    assert left["max_resident"] <= 128 // min(
        -(-(s.prompt_len + s.max_tokens) // 16) for s in m.workload()) < right["max_resident"]
    assert reservation >= 17
    assert right["tokens_per_s"] > left["tokens_per_s"]
    assert m.image.value[:8] == PNG
    assert "time-averaged" in m.numbers.value


def test_step_slider_moves_both_panels_in_time_and_redraws():
    m = KVBlockMap(num_requests=12)
    first = m.image.value
    m.step.value = m.step.max // 2
    t = m.moments[m.step.value]
    for run, k in zip(m.runs, m.result["panel_steps"]):
        assert run.trace.steps[k].end_time <= t or k == 0
        if k + 1 < run.num_steps:
            assert run.trace.steps[k + 1].end_time > t
    assert m.image.value != first
    shown = m.result["right"]
    k = m.result["panel_steps"][1]
    assert shown["blocks_used"] == m.runs[1].trace.steps[k].kv_blocks_used
    by_step = KVBlockMap(num_requests=12, sync="step")
    by_step.step.value = 5
    assert by_step.result["panel_steps"] == [5, 5]


def test_controls_resimulate():
    m = KVBlockMap(num_requests=16)
    before = dict(m.result["left"]), dict(m.result["right"]), m.image.value
    m.max_tokens.value = 512              # bigger reservations: contiguous holds fewer
    left, right = m.result["left"], m.result["right"]
    assert left["max_resident"] < before[0]["max_resident"]
    assert left["utilization_avg"] < before[0]["utilization_avg"]
    assert right["utilization_avg"] == pytest.approx(before[1]["utilization_avg"], abs=0.02)
    assert m.image.value != before[2]
    m.right.value = "continuous+contiguous"
    assert m.result["right"]["name"] == "continuous+contiguous"
    assert m.result["right"]["max_resident"] <= m.result["left"]["max_resident"] + 1
    m.block_size.value = 64               # same memory, coarser blocks: more waste when paged
    m.right.value = "continuous+paged"
    coarse = m.result["right"]["utilization_avg"]
    m.block_size.value = 4
    assert m.result["right"]["utilization_avg"] > coarse
    assert m.runs[1].num_blocks == 128 * 16 // 4


def test_preemption_is_shown():
    m = KVBlockMap(left="continuous+contiguous", num_kv_blocks=16, num_requests=24,
                   max_tokens=128)
    paged = m.runs[1]
    assert m.result["right"]["preemptions"] > 0
    k = next(i for i, s in enumerate(paged.trace.steps) if s.preempted and i > 0)
    m.sync = "step"
    m._new_figure()
    m.step.value = k
    assert m.result["right"]["preempted_now"] == paged.trace.steps[k].preempted
    image = np.frombuffer(m.image.value, dtype=np.uint8)
    assert image.size > 0 and "PREEMPTED" in m.figure.titles[1].get_text()


def test_block_image_colours():
    owners = np.array([0, 0, FREE, 1])
    tokens = np.array([4, 2, 0, 0])
    image = block_image(owners, tokens, block_size=4, cols=4, px=8)
    assert image.shape == (8, 32, 3)
    from matplotlib.colors import to_rgb
    assert np.allclose(image[3, 8 + 1], image[3, 1])                 # owner colour
    assert np.allclose(image[3, 8 + 6], to_rgb(COLORS["idle"]))      # half-filled block
    assert np.allclose(image[3, 16 + 3], to_rgb(COLORS["free"]))     # free
    assert np.allclose(image[3, 24 + 3], to_rgb(COLORS["idle"]))     # owned, empty


def test_real_engine_recording_and_a_bare_trace(tiny_hf):
    from minillm import LLM, SamplingParams
    llm = LLM(tiny_hf, block_size=4, num_kv_blocks=64, max_num_seqs=4)
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 9, 14)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (6, 3, 8)]
    with BlockMapRecorder(llm.llm_engine) as rec:
        llm.generate(prompts, params, use_tqdm=False)
    run = rec.run("tiny")
    assert "step" not in llm.llm_engine.__dict__, "the recorder unwraps the engine"
    assert_map_matches_trace(run)
    m = KVBlockMap(runs={"recorded": run, "from the trace": llm.trace})
    assert m.result["panels"]["recorded"]["physical"] is True
    assert m.result["panels"]["from the trace"]["physical"] is False
    logical = run_from_trace(llm.trace)
    assert ((logical.owners != FREE).sum(axis=1) == (run.owners != FREE).sum(axis=1)).all()
    m.step.value = m.step.max
    assert m.result["right"]["step"] == len(llm.trace.steps) - 1
