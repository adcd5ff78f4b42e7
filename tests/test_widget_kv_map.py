"""The KV block map: maps read from the Trace agree with it, controls re-simulate and redraw."""

from __future__ import annotations

import numpy as np
import pytest

from minillm.engine.trace import Trace
from minillm.sim.metrics import kv_utilization
from minillm.sim.simulate import simulate
from minillm.sim.workload import chat_burst
from minillm.widgets.draw import block_image
from minillm.widgets.kv_map import KVBlockMap
from minillm.widgets.layout import FREE, block_map
from minillm.widgets.style import COLORS

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n"


def assert_map_matches_trace(run):
    """Every step's map agrees with the Trace's own KV counts and block tables."""
    assert run.num_steps == len(run.trace.steps)
    for k, step in enumerate(run.trace.steps):
        used = run.owners[k] != FREE
        assert used.sum() == step.kv_blocks_used, k
        assert run.tokens[k].sum() == step.kv_tokens_held, k
        assert (run.tokens[k] <= run.block_size).all()
        holders = {}                                 # block -> the requests pointing at it
        for rid, table in step.block_tables.items():
            for block in table:
                holders.setdefault(block, set()).add(run.request_ids.index(rid))
        assert set(np.flatnonzero(used)) == set(holders), k
        assert all(run.owners[k, b] in who for b, who in holders.items()), k


@pytest.mark.parametrize("variant", ["static+contiguous", "continuous+contiguous",
                                     "static+paged", "continuous+paged"])
def test_recorded_block_maps_agree_with_the_trace(variant):
    workload = chat_burst(12, max_tokens=128)
    config = dict(scheduling=variant, block_size=8, num_kv_blocks=96, max_num_seqs=8)
    run = block_map(simulate(workload, record_block_tables=True, **config), variant)
    assert_map_matches_trace(run)
    # recording does not change what the engine does
    plain = simulate(workload, **config)
    assert [s.end_time for s in plain.steps] == [s.end_time for s in run.trace.steps]
    assert all(s.block_tables is None for s in plain.steps)


def test_shared_prefix_blocks_are_drawn_once():
    """With prefix caching two sequences point at the same blocks: the map draws each
    block once, as full as its fullest sharer, as the Trace's `kv_tokens_held` counts it."""
    from minillm.sampling_params import SamplingParams
    from minillm.sim.simulate import make_sim_engine, run_to_completion
    engine = make_sim_engine("continuous", block_size=4, num_kv_blocks=64, max_num_seqs=4,
                             enable_prefix_caching=True, record_block_tables=True)
    prompt = list(range(10, 22))                            # 12 tokens: 3 full blocks
    for rid, arrival in (("first", 0.0), ("second", 0.5)):  # the second hits the cache
        engine.add_request(rid, {"prompt_token_ids": prompt}, arrival_time=arrival,
                           params=SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))
        engine.runner.output_lens[rid] = 30
    run = block_map(run_to_completion(engine))
    assert_map_matches_trace(run)
    shared = [s for s in run.trace.steps if len(s.block_tables) == 2
              and set(s.block_tables["first"]) & set(s.block_tables["second"])]
    assert shared, "the two requests should share the cached prefix blocks"


def test_a_trace_with_block_tables_is_drawn_and_one_without_is_refused(tmp_path):
    workload = chat_burst(8, max_tokens=64)
    config = dict(scheduling="continuous", block_size=8, num_kv_blocks=24, max_num_seqs=8)
    recorded = simulate(workload, record_block_tables=True, **config)
    saved = tmp_path / "trace.json"
    recorded.to_json(saved)                          # a Trace saved to disk and read back
    loaded = Trace.from_dict(__import__("json").loads(saved.read_text()))
    m = KVBlockMap(runs={"recorded": recorded, "from disk": loaded})
    assert m.result["panels"]["recorded"] == {**m.result["panels"]["from disk"], "name": "recorded"}
    m.step.value = m.step.max
    assert m.result["left"]["step"] == len(recorded.steps) - 1
    assert m.result["left"]["blocks_used"] == recorded.steps[-1].kv_blocks_used
    assert m.image.value[:8] == PNG
    bare = simulate(workload, **config)
    with pytest.raises(ValueError, match=r"record_block_tables=True"):
        KVBlockMap(runs={"bare": bare})


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


def test_real_engine_trace_with_block_tables_and_a_bare_one(tiny_hf):
    from minillm import LLM, SamplingParams
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 9, 14)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (6, 3, 8)]
    runs = {}
    for name, scheduling in (("static", "static"), ("paged", "continuous")):
        llm = LLM(tiny_hf, scheduling=scheduling, block_size=4, num_kv_blocks=64,
                  max_num_seqs=4, record_block_tables=True)
        llm.generate(prompts, params, use_tqdm=False)
        assert_map_matches_trace(block_map(llm.trace))
        assert llm.llm_engine.step.__func__ is type(llm.llm_engine).step, "nothing is patched"
        runs[name] = llm.trace
    m = KVBlockMap(runs=runs)
    assert m.result["left"]["name"] == "static" and m.result["right"]["name"] == "paged"
    m.step.value = m.step.max
    assert m.result["right"]["step"] == len(runs["paged"].steps) - 1
    bare = LLM(tiny_hf, block_size=4, num_kv_blocks=64, max_num_seqs=4)
    bare.generate(prompts, params, use_tqdm=False)
    with pytest.raises(ValueError, match="record_block_tables=True"):
        KVBlockMap(runs={"bare": bare.trace})
