"""The benchmark's own code: workloads, A/B bookkeeping, roofline arithmetic, tables.

No timed assertions here — speed targets live in the bench's output. What is checked is
everything a wrong number could come from: the seeded workloads, the alternation order,
the paired ratios, the roofline formulas, the "exact token counts" guard, and the
experiments end to end on the tiny random Llama and the simulator (their scheduling
quantities — slot utilisation, concurrency under a KV budget — are deterministic).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import (ab, chunked, kv_budget, peers, prefix_caching, roofline, speculative,
                           step_time, throughput)
from benchmarks import workloads as wl
from benchmarks.common import (Bench, BenchConfig, check_output_lengths, kv_blocks_for,
                                  ratio_line, table)
from benchmarks.run import write_json
from executor_support import cpu_executor_reason
from minillm.engine.trace import RequestRecord, Trace
from minillm.model.tiny import build_tiny_llama
from minillm.sim.workload import RequestSpec
from minillm_cpu.kernels import unavailable_reason

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ workloads

def test_throughput_workload_is_seeded_heavy_tailed_and_large_enough():
    specs = throughput.throughput_workload(seed=0)
    assert len(specs) >= 48                                   # the minimum
    assert specs == throughput.throughput_workload(seed=0)    # same seed, same requests
    assert specs != throughput.throughput_workload(seed=1)
    outs = sorted(s.output_len for s in specs)
    assert outs[-1] >= 8 * outs[len(outs) // 2]               # a heavy tail: max >> median
    assert all(s.max_tokens == s.output_len and s.arrival_time == 0.0 for s in specs)


def test_chunked_workload_long_prompts_arrive_while_streams_decode():
    shape = chunked.FULL_CHUNKED
    specs = chunked.chunked_workload(shape, seed=0)
    streams = [s for s in specs if s.request_id.startswith("stream-")]
    longs = [s for s in specs if s.request_id.startswith("long-")]
    assert len(streams) == shape.num_streams and len(longs) == shape.num_long
    assert all(s.arrival_time == 0.0 for s in streams)
    arrivals = [s.arrival_time for s in longs]
    assert arrivals == sorted(arrivals) and arrivals[0] == pytest.approx(shape.long_start)
    assert len(set(arrivals)) == len(arrivals)                # Poisson gaps, not a burst
    assert all(shape.long_prompt_low <= s.prompt_len <= shape.long_prompt_high for s in longs)


class _WordTokenizer:
    """Enough of a tokenizer for prompt_token_ids: one id per word."""

    def __call__(self, text, add_special_tokens=False):
        class Out:
            input_ids = [len(w) for w in text.split()]
        return Out()


def test_prompt_token_ids_have_exact_lengths_with_and_without_tokenizer():
    specs = [RequestSpec(f"r{i}", n, 1, 1) for i, n in enumerate((1, 5, 300, 2000))]
    for tokenizer in (None, _WordTokenizer()):
        prompts = wl.prompt_token_ids(specs, 256, tokenizer, seed=0)
        assert [len(p) for p in prompts] == [1, 5, 300, 2000]
        assert all(0 <= t < 256 for p in prompts for t in p)
        assert prompts == wl.prompt_token_ids(specs, 256, tokenizer, seed=0)
    assert prompts[1] != prompts[2][:5]                       # requests start at different offsets


def test_peer_workload_has_64_distinct_questions_and_skewed_lengths():
    assert len(set(wl.chat_questions(64))) == 64
    lens = peers.peer_output_lengths(seed=0)
    assert len(lens) == 64 and lens == peers.peer_output_lengths(seed=0)
    assert max(lens) >= 4 * sorted(lens)[32]
    with pytest.raises(ValueError):
        wl.chat_questions(65)


# ------------------------------------------------------------------ A/B bookkeeping

def test_alternation_reverses_every_other_round():
    calls = []
    runners = {name: (lambda name=name: calls.append(name) or {"x": len(calls)}) for name in "ABC"}
    results = ab.alternate(runners, rounds=3)
    assert calls == list("ABCCBAABC")
    assert [r["x"] for r in results["A"]] == [1, 6, 7]
    with pytest.raises(ValueError):
        ab.alternate(runners, rounds=0)


def test_medians_are_per_contender_and_per_key_and_skip_nan():
    runs = {"a": [{"x": 1.0, "y": float("nan")}, {"x": 5.0, "y": 2.0}, {"x": 2.0, "y": 4.0}],
            "b": [{"x": 7.0, "y": 1.0}]}
    assert ab.medians(runs) == {"a": {"x": 2.0, "y": 3.0}, "b": {"x": 7.0, "y": 1.0}}


def test_paired_ratios_pair_runs_of_the_same_round():
    results = {"fast": [{"t": 10.0}, {"t": 30.0}, {"t": 9.0}],
               "slow": [{"t": 5.0}, {"t": 10.0}, {"t": 3.0}]}
    assert ab.paired_ratios(results, "fast", "slow", "t") == [2.0, 3.0, 3.0]
    s = ab.summary([2.0, float("nan"), 4.0])
    assert (s["median"], s["min"], s["max"]) == (3.0, 2.0, 4.0)
    assert math.isnan(ab.median([]))


# ------------------------------------------------------------------ roofline

def test_decode_cost_counts_every_weight_once_and_the_tied_head():
    from minillm.model.llama import LlamaModel
    hf = build_tiny_llama(seed=0)
    model = LlamaModel.from_hf(hf)
    cost = roofline.decode_cost(model)
    params = sum(p.numel() for p in hf.parameters())          # tied: embedding counted once
    assert cost.weight_bytes == 4 * params
    cfg = hf.config
    assert cost.kv_bytes_per_token == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * 16 * 4
    assert cost.step_bytes(2, 10) == cost.weight_bytes + 2 * 11 * cost.kv_bytes_per_token


def test_ceiling_is_memory_bound_at_batch_1_and_compute_bound_when_large():
    cost = roofline.DecodeCost(weight_bytes=500_000_000, matmul_params=125_000_000,
                               kv_bytes_per_token=46_080, attn_flops_per_pair=69_120,
                               element_size=4)
    small = roofline.ceiling(cost, 1, 128, bandwidth_gb_s=20.0, peak_gflop_s=200.0)
    large = roofline.ceiling(cost, 64, 128, bandwidth_gb_s=20.0, peak_gflop_s=200.0)
    assert small["bound"] == "memory" and large["bound"] == "compute"
    assert small["step_s"] == pytest.approx(cost.step_bytes(1, 128) / 20e9)
    assert large["tokens_per_s"] == pytest.approx(64 / (cost.step_flops(64, 128) / 200e9))


def test_peak_flops_is_the_faster_of_blas_and_the_engines_packed_kernel():
    from minillm_cpu.packed_linear import PackedWeight
    r = roofline.measure_matmul_flops(128, repeats=2)
    by_kernel = r["best_gflop_s_by_kernel"]
    expected = {"blas", "packed"} if PackedWeight.supported(torch.zeros(1, 1)) else {"blas"}
    assert set(by_kernel) == expected and all(rate > 0 for rate in by_kernel.values())
    assert r["best_gflop_s"] == max(by_kernel.values())
    assert by_kernel[r["kernel"]] == r["best_gflop_s"]


# ------------------------------------------------------------------ checks and report

def test_wrong_token_counts_are_refused():
    trace = Trace(requests={"a": RequestRecord("a", 0.0, 3, 5, output_len=4)})
    with pytest.raises(RuntimeError, match="wrong number of tokens"):
        check_output_lengths(trace, [RequestSpec("a", 3, 5, 5)])
    check_output_lengths(trace, [RequestSpec("a", 3, 4, 5)])


def test_kv_blocks_fit_a_full_batch_of_the_largest_request():
    specs = [RequestSpec("a", 10, 7, 7), RequestSpec("b", 30, 5, 40)]
    assert kv_blocks_for(specs, max_num_seqs=4, block_size=16) == 4 * 5 + 1


def test_report_shows_ratios_targets_and_writes_strict_json(tmp_path):
    line = ratio_line("continuous / static", ab.summary([3.1, 2.9, 3.3]), 2.5)
    assert "3.10×" in line and "met" in line and "NOT" not in line
    assert "NOT met" in ratio_line("x", ab.summary([1.0]), 2.5)
    text = table(["", "a", "b"], [["row", 1, 22]])
    assert text.splitlines()[2].split() == ["row", "1", "22"]
    write_json(tmp_path / "r.json", {"x": float("nan"), "y": [1.5, float("inf")]})
    assert json.loads((tmp_path / "r.json").read_text()) == {"x": None, "y": [1.5, None]}


# ------------------------------------------------------------------ experiments, small

@pytest.fixture
def tiny_bench(monkeypatch, tmp_path):
    monkeypatch.setattr(throughput, "QUICK_THROUGHPUT", throughput.ThroughputShape(
        num_requests=6, prompt_median=8, prompt_cap=16, output_minimum=1, output_alpha=1.0,
        output_cap=12))
    threads = torch.get_num_threads()
    config = BenchConfig(model=build_tiny_llama(seed=0), quick=True, rounds=1, threads=threads,
                         max_num_seqs=4, out=str(tmp_path), progress=False)
    yield Bench(config)
    torch.set_num_threads(threads)


def test_throughput_experiment_on_the_tiny_llama(tiny_bench, tmp_path):
    r = throughput.run(tiny_bench)
    specs = throughput.throughput_workload(throughput.QUICK_THROUGHPUT, seed=0)
    for mode in ("static", "continuous", "chunked"):
        assert r["medians"][mode]["generated_tokens"] == sum(s.output_len for s in specs)
    # scheduling quantities are deterministic: continuous keeps more slots busy
    assert r["medians"]["static"]["slot_utilization"] < r["medians"]["continuous"]["slot_utilization"]
    assert r["medians"]["static"]["num_steps"] > r["medians"]["continuous"]["num_steps"]
    assert len(r["ratios"]["continuous/static"]["values"]) == 1
    throughput.plot(r, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert "continuous / static" in throughput.text(r)


def test_minillm_peer_run_is_timed_from_arrival_to_last_step_without_the_gc(tiny_bench, monkeypatch):
    """run_workload collects garbage before the requests arrive (~0.16 s with the bench's
    models loaded); vLLM's timed run does no such thing, so minillm's time must not hold it."""
    import gc
    import time as time_module
    specs = [RequestSpec(f"r{i}", 5, 3, 3) for i in range(3)]
    prompts = [[5, 6, 7, 8, 9]] * 3
    llm = tiny_bench.make_llm(num_kv_blocks=kv_blocks_for(specs, 4))
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: (time_module.sleep(0.5), real_collect(*a))[1])
    start = time_module.perf_counter()
    r = peers.run_minillm(llm, specs, prompts)
    wall = time_module.perf_counter() - start
    steps = sum(s.duration for s in llm.llm_engine.trace.steps)
    assert steps <= r["elapsed_s"] < wall - 0.4
    assert r["useful_tokens"] == 9


def test_step_time_experiment_names_the_backend_it_timed(tiny_bench):
    """The roofline check times the engine's default backend, and says which one."""
    r = step_time.run(tiny_bench)
    assert [row["batch"] for row in r["rows"]] == [1, 2, 4]
    assert all(row["step_s"] > 0 and row["ceiling_step_s"] > 0 for row in r["rows"])
    # "auto" here: the cpu executor's backend where that plugin runs the model, else sparse
    default = "cpp" if cpu_executor_reason(build_tiny_llama(seed=0).config) is None else "sparse"
    assert r["attention_backend"] == default
    assert f"attention backend '{default}'" in step_time.text(r)


def test_kv_budget_paged_holds_more_sequences_than_contiguous(tiny_bench):
    r = kv_budget.run(tiny_bench)
    assert r["runner"] == "simulator"
    assert r["continuous"]["max_concurrent"] > r["static"]["max_concurrent"]
    assert r["continuous"]["kv_waste"] < r["static"]["kv_waste"]


def test_prefix_workload_shares_exactly_the_prefix():
    shape = prefix_caching.QUICK_PREFIX
    specs = prefix_caching.prefix_workload(shape, seed=0)
    for tokenizer in (None, _WordTokenizer()):
        prompts = prefix_caching.prefix_prompts(specs, shape, 256, tokenizer, seed=0)
        assert [len(p) for p in prompts] == [s.prompt_len for s in specs]
        assert all(p[:shape.shared_prefix] == prompts[0][:shape.shared_prefix] for p in prompts)
        # the questions differ: no two prompts are the same
        assert len({tuple(p) for p in prompts}) == len(prompts)


def test_prefix_caching_experiment_on_the_tiny_llama(tiny_bench, tmp_path):
    r = prefix_caching.run(tiny_bench)
    off, on = r["medians"]["no cache"], r["medians"]["prefix cache"]
    assert off["hit_rate"] == 0 and off["prefill_tokens_computed"] == r["workload"]["prompt_tokens"]
    # requests admitted after the first batch reuse the shared prefix's full blocks
    assert on["hit_rate"] > 0
    assert on["prefill_tokens_computed"] == off["prefill_tokens_computed"] - on["cached_tokens"]
    assert r["outputs_differ"] == []
    assert "hit rate" in prefix_caching.text(r)
    prefix_caching.plot(r, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_speculative_experiment_on_the_tiny_llama(tiny_bench, tmp_path):
    r = speculative.run(tiny_bench)
    shape = speculative.QUICK_SPECULATIVE
    for task, n in (("copy", shape.copy_output), ("free-form", shape.free_output)):
        plain, spec = r["medians"][f"{task} plain"], r["medians"][f"{task} speculative"]
        assert plain["generated_tokens"] == spec["generated_tokens"] == shape.num_requests * n
        assert plain["tokens_per_pass"] == 1.0 and plain["drafts_proposed"] == 0
        assert spec["tokens_per_pass"] >= 1.0
        assert r["outputs_differ"][task] == []
    # the copy prompts hold their text twice: the proposer finds something to guess
    assert r["medians"]["copy speculative"]["drafts_proposed"] > 0
    assert "speculative / plain" in speculative.text(r)
    speculative.plot(r, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


def test_hf_generate_counts_only_useful_tokens():
    from benchmarks.hf_peers import hf_generate_static
    model = build_tiny_llama(seed=0)
    r = hf_generate_static(model, [[3, 4, 5], [6, 7], [8]], [2, 5, 3], batch_size=2, pad_id=0)
    assert r["useful_tokens"] == 10
    assert r["computed_tokens"] == 2 * 5 + 1 * 3              # each batch runs to its longest
    assert model.generation_config.eos_token_id == 1          # restored afterwards


def test_vllm_is_skipped_with_a_reason_when_absent():
    from benchmarks.peers import vllm_status
    assert "skipped" in vllm_status(None)
    assert "skipped" in vllm_status("/nonexistent/python")


@pytest.mark.timeout(60)
def test_the_next_contender_waits_for_a_busy_peer_process_to_go_idle():
    """A child that keeps a core busy for 1.5 s, then sleeps (as vLLM's processes do
    for about a second after each run): the wait ends only once it sleeps; one that
    never stops is given up on at the timeout."""
    import subprocess
    import sys
    import time

    spin = "import time\nt = time.time()\nwhile time.time() - t < {}: pass\ntime.sleep(60)"
    children = [subprocess.Popen([sys.executable, "-c", spin.format(s)]) for s in (1.5, 60)]
    try:
        start = time.monotonic()
        assert peers.wait_until_idle(children[0].pid, timeout=20)
        assert 1.0 <= time.monotonic() - start < 15
        start = time.monotonic()
        assert not peers.wait_until_idle(children[1].pid, timeout=1.0)
        assert 0.9 <= time.monotonic() - start < 5
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_cli_runs_the_simulator_experiments(tmp_path, capsys):
    from benchmarks.__main__ import main
    threads = torch.get_num_threads()
    assert main(["--quick", "--only", "kv_budget,simulator", "--out", str(tmp_path),
                 "--no-progress", "--threads", str(threads)]) == 0
    out = capsys.readouterr().out
    assert "Fixed KV budget" in out and "Simulator" in out and "load average" in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["simulator"]["num_requests"] == 200
    assert (tmp_path / "kv_budget.png").exists()


def test_cli_rejects_unknown_experiments():
    from benchmarks.__main__ import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--only", "nonsense"])


def test_every_registered_experiment_has_the_contract():
    from benchmarks.registry import EXPERIMENTS, PEERS
    config = BenchConfig(quick=True, rounds=2)
    for name, module in {**EXPERIMENTS, **PEERS}.items():
        assert callable(module.run) and callable(module.text), name
        assert module.plot is None or callable(module.plot), name
        assert module.planned_runs(config) >= 1, name


def test_a_new_experiment_is_one_module_plus_one_registry_line(tmp_path, capsys, monkeypatch):
    import types
    from benchmarks.__main__ import main
    from benchmarks.registry import EXPERIMENTS
    fake = types.SimpleNamespace(
        planned_runs=lambda config: 1,
        run=lambda bench: {"answer": 42, "big": [1, 2, 3]},
        text=lambda r: f"Fake experiment — {r['answer']}",
        plot=lambda r, path: path.write_bytes(b"not really a png"),
        DETACHED={"big": "fake-big.json"})
    monkeypatch.setitem(EXPERIMENTS, "fake", fake)
    threads = torch.get_num_threads()
    assert main(["--quick", "--only", "fake", "--out", str(tmp_path), "--no-progress",
                 "--threads", str(threads)]) == 0
    out = capsys.readouterr().out
    assert "Fake experiment — 42" in out and "fake.png" in out
    assert json.loads((tmp_path / "bench.json").read_text())["fake"] == {"answer": 42}
    assert json.loads((tmp_path / "fake-big.json").read_text()) == [1, 2, 3]
    assert (tmp_path / "fake.png").exists()


def test_the_header_reports_what_the_cpu_kernels_cost():
    from benchmarks.run import cpu_kernels_info, cpu_kernels_text
    info = cpu_kernels_info()
    if unavailable_reason() is None:
        assert info["build_s"] >= 0 and info["library"].endswith(".so")
    assert "compiled in 4.6 s" in cpu_kernels_text({"build_s": 4.6, "library": "x.so"})
    assert "from the cache" in cpu_kernels_text({"build_s": 0.0, "library": "x.so"})
    assert "unavailable (no C++ compiler" in cpu_kernels_text({"unavailable": "no C++ compiler\nmore"})
