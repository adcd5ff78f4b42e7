"""The measurements of `python -m minillm.bench`, one function each.

Each experiment takes the `Bench` (model, settings, progress bar) and returns a plain
dict — numbers only, ready for JSON — that `report.py` turns into tables and plots.

    throughput   static vs continuous vs continuous+chunked on the skewed burst
                 (useful tokens/s, slot utilisation, KV waste)        real model
    kv_budget    max concurrent sequences under one fixed KV budget,
                 contiguous reservation vs paged                      simulator
    chunked      P99 inter-token latency and P50 TTFT, with and without
                 chunked prefill, long prompts arriving during decodes real model
    step_time    decode step time vs batch size, beside the roofline  real model
    simulator    how long the simulator takes for 1000 requests       simulator
    prefix_caching, speculative   lesson 10's techniques, on and off  real model
                 (in `beyond.py`)

"Simulator" experiments run the real schedulers and block manager with a cost model in
place of the forward pass: their *decisions* (who runs, who holds which block) are the
engine's own; only the clock is modelled. They are labelled as such everywhere.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from functools import partial

import torch

from minillm.bench import workloads as wl
from minillm.bench.ab import alternate, median, medians, paired_ratios, summary
from minillm.bench.beyond import prefix_caching, speculative
from minillm.bench.engine_runs import kv_blocks_for, run_specs, run_summary, warm_up
from minillm.bench.roofline import ceiling, decode_cost, measure_bandwidth, measure_matmul_flops
from minillm.metrics import percentiles, request_metrics, summarize
from minillm.trace import Trace

EXPERIMENTS = ("throughput", "kv_budget", "chunked", "step_time", "simulator", "prefix_caching",
               "speculative")
# numbers kept per run (the full Trace of the first round is kept for the plots)
RUN_KEYS = ("duration_s", "generated_tokens", "generated_tokens_per_s", "total_tokens_per_s",
            "slot_utilization", "kv_utilization", "kv_waste", "num_steps", "preemptions",
            "max_running", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "tpot_p50")


@dataclass
class BenchConfig:
    model: object = "smollm2-135m"     # a known name, a folder, or a transformers model
    quick: bool = False                # small workloads, for tests and a first look
    rounds: int = 3                    # A B / B A rounds per comparison
    seed: int = 0
    threads: int = 2
    dtype: str = "float32"
    max_num_seqs: int = 16
    chunk_budget: int = 256            # max_num_batched_tokens with chunked prefill
    experiments: tuple = EXPERIMENTS
    peers: bool = False
    vllm_python: str | None = None     # python of a virtualenv with vLLM (see PERFORMANCE.md)
    out: str = "bench-results"
    progress: bool = True


class Bench:
    """The loaded model, the settings, and the progress bar shared by the experiments."""

    def __init__(self, config: BenchConfig):
        self.config = config
        torch.set_num_threads(config.threads)
        self.dtype = getattr(torch, config.dtype)
        self._loaded = None                 # (transformers model, tokenizer), on first use
        self.bar = None

    def _load(self):
        if self._loaded is None:
            from minillm.model_loader import load_model_and_tokenizer
            self._loaded = load_model_and_tokenizer(self.config.model)
        return self._loaded

    @property
    def hf_model(self):
        return self._load()[0]

    @property
    def tokenizer(self):
        return self._load()[1]

    @property
    def vocab_size(self) -> int:
        return self.hf_model.config.vocab_size

    def make_llm(self, **kwargs):
        from minillm.llm import LLM
        kwargs.setdefault("max_num_seqs", self.config.max_num_seqs)
        return LLM(self.hf_model, tokenizer=self.tokenizer, dtype=self.dtype, **kwargs)

    def mode_kwargs(self, mode: str) -> dict:
        """The LLM settings of a scheduling mode the bench compares."""
        modes = {"static": dict(scheduling="static"),
                 "continuous": dict(scheduling="continuous"),
                 "chunked": dict(scheduling="continuous", enable_chunked_prefill=True,
                                 max_num_batched_tokens=self.config.chunk_budget)}
        return modes[mode]

    def mode_llms(self, modes: tuple[str, ...], num_kv_blocks: int) -> dict:
        """{mode: LLM} for the scheduling modes, all with the same KV cache size."""
        return {m: self.make_llm(num_kv_blocks=num_kv_blocks, **self.mode_kwargs(m)) for m in modes}

    def prompts(self, specs):
        return wl.prompt_token_ids(specs, self.vocab_size, self.tokenizer, self.config.seed)

    def tick(self, name: str, round_index: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{name} (round {round_index + 1})")
            self.bar.update(1)

    def planned_runs(self) -> int:
        """How many timed runs the chosen experiments make (the progress bar's total)."""
        r = self.config.rounds
        per = {"throughput": 3 * r, "kv_budget": 1, "chunked": 2 * r,
               "step_time": len(step_batches(self.config.quick)) * r + 1, "simulator": 1,
               "prefix_caching": 2 * r, "speculative": 4 * r}
        return sum(per[e] for e in self.config.experiments)


def _numbers(run: dict) -> dict:
    return {k: run[k] for k in RUN_KEYS if k in run}


def _compare(bench: Bench, llms: dict, specs, prompts) -> tuple[dict, dict]:
    """Alternate the LLMs over the rounds; per-run numbers and the first round's Traces."""
    for llm in llms.values():
        warm_up(llm, prompts[:bench.config.max_num_seqs])
    runners = {name: partial(run_summary, llm, specs, prompts) for name, llm in llms.items()}
    results = alternate(runners, bench.config.rounds, on_run=bench.tick)
    traces = {name: runs[0]["trace"] for name, runs in results.items()}
    return {name: [_numbers(r) for r in runs] for name, runs in results.items()}, traces


def workload_stats(specs) -> dict:
    outs = sorted(s.output_len for s in specs)
    return {"num_requests": len(specs), "prompt_tokens": sum(s.prompt_len for s in specs),
            "output_tokens": sum(outs), "output_min": outs[0], "output_median": median(outs),
            "output_max": outs[-1], "output_mean": sum(outs) / len(outs)}


# ------------------------------------------------------------------ throughput

def throughput(bench: Bench) -> dict:
    """Useful generated tokens/s: static vs continuous vs continuous + chunked."""
    cfg = bench.config
    shape = wl.QUICK_THROUGHPUT if cfg.quick else wl.FULL_THROUGHPUT
    specs = wl.throughput_workload(shape, cfg.seed)
    prompts = bench.prompts(specs)
    blocks = kv_blocks_for(specs, cfg.max_num_seqs)
    llms = bench.mode_llms(("static", "continuous", "chunked"), blocks)
    runs, traces = _compare(bench, llms, specs, prompts)
    del llms
    gc.collect()
    key = "generated_tokens_per_s"
    return {"workload": {**workload_stats(specs), "shape": vars(shape),
                         "max_num_seqs": cfg.max_num_seqs, "num_kv_blocks": blocks},
            "runs": runs, "medians": medians(runs),
            "ratios": {"continuous/static": summary(paired_ratios(runs, "continuous", "static", key)),
                       "chunked/static": summary(paired_ratios(runs, "chunked", "static", key))},
            "traces": {name: t.to_dict() for name, t in traces.items()}}


# ------------------------------------------------------------------ KV budget (simulator)

def kv_budget(bench: Bench) -> dict:
    """How many sequences fit at once in a fixed KV budget: contiguous vs paged.

    Clients send `max_tokens` = the cap (512: "just in case"), while real answers are
    mostly short. A contiguous reservation must hold prompt + max_tokens per request;
    paging holds what was actually generated. Simulator (real schedulers and block
    manager; the clock is modelled); `max_num_seqs` is set high so memory, not batch
    slots, is the limit.
    """
    from minillm.simulate import simulate
    from minillm.workload import lognormal, make_workload, pareto
    quick = bench.config.quick
    budget_blocks, block_size, cap = (48, 16, 128) if quick else (256, 16, 512)
    specs = make_workload(24 if quick else 128, lognormal(48, 0.5, cap=cap // 2),
                          pareto(8, 1.0, cap=cap), max_tokens=None, seed=bench.config.seed)
    out = {"budget_blocks": budget_blocks, "block_size": block_size,
           "budget_tokens": budget_blocks * block_size, "max_tokens_sent": cap,
           "workload": workload_stats(specs), "runner": "simulator"}
    for name in ("static", "continuous"):
        trace = simulate(specs, scheduling=name, max_num_seqs=256, num_kv_blocks=budget_blocks,
                         block_size=block_size)
        holding = [len(s.scheduled) + len(s.idle) for s in trace.steps]   # [steps]
        s = summarize(trace)
        out[name] = {"max_concurrent": max(holding), "mean_concurrent": sum(holding) / len(holding),
                     "kv_waste": s["kv_waste"], "preemptions": s["preemptions"],
                     "num_steps": s["num_steps"]}
    bench.tick("kv_budget", 0)
    return out


# ------------------------------------------------------------------ chunked prefill

def _group(trace: Trace, prefix: str) -> dict:
    """TTFT / ITL percentiles of the requests whose id starts with `prefix`."""
    sub = Trace(config=trace.config, steps=trace.steps,
                requests={k: r for k, r in trace.requests.items() if k.startswith(prefix)})
    m = request_metrics(sub)
    return {"ttft_p50": percentiles(m["ttft"])[50], "itl_p99": percentiles(m["itl"])[99],
            "itl_max": float(m["itl"].max()) if m["itl"].size else float("nan")}


def chunked(bench: Bench) -> dict:
    """Latency with and without chunked prefill, long prompts arriving during decodes."""
    cfg = bench.config
    shape = wl.QUICK_CHUNKED if cfg.quick else wl.FULL_CHUNKED
    specs = wl.chunked_workload(shape, cfg.seed)
    prompts = bench.prompts(specs)
    blocks = kv_blocks_for(specs, cfg.max_num_seqs)
    llms = bench.mode_llms(("continuous", "chunked"), blocks)
    for llm in llms.values():
        warm_up(llm, prompts[:2])

    def run(llm):
        trace = run_specs(llm, specs, prompts)
        return {**_numbers(summarize(trace)),
                **{f"streams_{k}": v for k, v in _group(trace, "stream-").items()},
                **{f"long_{k}": v for k, v in _group(trace, "long-").items()},
                "trace": trace}

    results = alternate({n: partial(run, llm) for n, llm in llms.items()}, cfg.rounds,
                        on_run=bench.tick)
    traces = {n: rs[0].pop("trace") for n, rs in results.items()}
    runs = {n: [{k: v for k, v in r.items() if k != "trace"} for r in rs]
            for n, rs in results.items()}
    del llms
    gc.collect()
    return {"workload": {**workload_stats(specs), "shape": vars(shape),
                         "chunk_budget": cfg.chunk_budget},
            "runs": runs, "medians": medians(runs),
            "ratios": {k: summary(paired_ratios(runs, "continuous", "chunked", k))
                       for k in ("itl_p99", "ttft_p50", "streams_itl_p99", "long_ttft_p50")},
            "itl": {n: request_metrics(t)["itl"].tolist() for n, t in traces.items()}}


# ------------------------------------------------------------------ step time + roofline

def step_batches(quick: bool) -> tuple[int, ...]:
    return (1, 2, 4) if quick else (1, 2, 4, 8, 16, 32)


def _decode_step_time(llm, batch: int, context: int, steps: int, bench: Bench) -> dict:
    """Median duration of decode-only steps with `batch` sequences at ~`context` tokens."""
    from minillm.workload import RequestSpec
    n = steps + 2                         # first token (prefill), one warm decode, `steps`
    specs = [RequestSpec(f"b{batch}-{i}", context, n, n) for i in range(batch)]
    trace = run_specs(llm, specs, bench.prompts(specs))
    decode = [s.duration for s in trace.steps
              if len(s.scheduled) == batch and s.num_prefill_tokens == 0][1:]
    return {"step_s": median(decode), "num_steps": len(decode)}


def step_time(bench: Bench) -> dict:
    """Decode step time vs batch size, and the roofline ceiling at each batch size."""
    cfg = bench.config
    batches = step_batches(cfg.quick)
    context, steps = (16, 3) if cfg.quick else (128, 8)
    llm = bench.make_llm(max_num_seqs=max(batches),
                         num_kv_blocks=max(batches) * ((context + steps + 2) // 16 + 2))
    warm_up(llm, bench.prompts([_spec(context)] * 2))
    runners = {str(b): partial(_decode_step_time, llm, b, context, steps, bench) for b in batches}
    results = alternate(runners, cfg.rounds, on_run=bench.tick)
    bandwidth = measure_bandwidth(64 << 20 if cfg.quick else 512 << 20)
    flops = measure_matmul_flops(512 if cfg.quick else 1536, dtype=bench.dtype)
    bench.tick("roofline", 0)
    cost = decode_cost(llm.model)
    mean_context = context + 1 + steps // 2
    rows = []
    for b in batches:
        step_s = median([r["step_s"] for r in results[str(b)]])
        roof = ceiling(cost, b, mean_context, bandwidth["best_gb_s"], flops["best_gflop_s"])
        rows.append({"batch": b, "step_s": step_s, "tokens_per_s": b / step_s,
                     "rounds": [r["step_s"] for r in results[str(b)]],
                     "ceiling_step_s": roof["step_s"], "ceiling_tokens_per_s": roof["tokens_per_s"],
                     "bound": roof["bound"], "memory_s": roof["memory_s"],
                     "compute_s": roof["compute_s"], "x_ceiling": step_s / roof["step_s"]})
    del llm
    gc.collect()
    return {"context": mean_context, "bandwidth": bandwidth, "matmul": flops,
            "decode_cost": cost.to_dict(), "rows": rows, "dtype": cfg.dtype}


def _spec(prompt_len: int):
    from minillm.workload import RequestSpec
    return RequestSpec("warm", prompt_len, 1, 1)


# ------------------------------------------------------------------ simulator speed

def simulator(bench: Bench) -> dict:
    """Wall time to simulate 1000 requests (the widgets need this to be fast)."""
    from minillm.simulate import simulate
    from minillm.workload import preset_workload
    n = 200 if bench.config.quick else 1000
    specs = preset_workload("chat", n, arrival="poisson", rate=20.0, seed=bench.config.seed)
    start = time.perf_counter()
    trace = simulate(specs, scheduling="continuous", max_num_seqs=16)
    wall = time.perf_counter() - start
    bench.tick("simulator", 0)
    return {"num_requests": n, "num_steps": len(trace.steps), "wall_s": wall,
            "simulated_s": trace.duration, "steps_per_s": len(trace.steps) / wall}


RUNNERS = {"throughput": throughput, "kv_budget": kv_budget, "chunked": chunked,
           "step_time": step_time, "simulator": simulator, "prefix_caching": prefix_caching,
           "speculative": speculative}
