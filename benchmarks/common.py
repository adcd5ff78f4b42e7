"""What every experiment shares: the loaded model, running a workload, formatting.

* `BenchConfig` holds the command line's settings; `Bench` holds the model (loaded on
  first use), builds `LLM`s for the scheduling modes the bench compares, turns a
  workload into prompt ids, and ticks the progress bar.
* `run_workload` drives one `LLM` through a workload with *arrival times*.
  `LLM.generate` hands every prompt to the engine at once; a benchmark also needs
  Poisson traffic, so it talks to `llm.llm_engine` directly — the same loop `generate`
  runs, with `arrival_time` set per request:

      engine.start_new_trace()                 fresh Trace, clock back to 0
      engine.add_request(..., arrival_time=t)  admitted once the clock reaches t
      while engine.has_unfinished_requests(): engine.step()

  Every run is checked: each request must have produced exactly its `output_len`
  tokens (EOS is ignored and `max_tokens` = output_len), or a throughput comparison
  would compare different amounts of work.
* `table`, `pct`, `ms`, `num`, `ratio_line` format the text every experiment prints;
  `figure`, `save`, `bars_with_rounds` are the plot boilerplate.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from benchmarks.ab import alternate, median
from benchmarks.workloads import prompt_token_ids
from minillm import SamplingParams
from minillm.engine.trace import Trace
from minillm.kv_cache import cdiv
from minillm.sim.metrics import summarize
from minillm.sim.workload import RequestSpec
from minillm.widgets.style import COLORS


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
    experiments: tuple | None = None   # names in `registry.EXPERIMENTS`; None: all of them
    peers: bool = False
    vllm_python: str | None = None     # python of a virtualenv with vLLM (see docs/performance.md)
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
            from minillm.model.loader import load_model_and_tokenizer
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
        from minillm import LLM
        kwargs.setdefault("max_num_seqs", self.config.max_num_seqs)
        return LLM(self.hf_model, tokenizer=self.tokenizer, dtype=self.dtype, **kwargs)

    def mode_kwargs(self, mode: str) -> dict:
        """The `LLM` settings of a scheduling mode the bench compares."""
        modes = {"static": dict(scheduling="static"),
                 "continuous": dict(scheduling="continuous"),
                 "chunked": dict(scheduling="continuous", enable_chunked_prefill=True,
                                 max_num_batched_tokens=self.config.chunk_budget)}
        return modes[mode]

    def mode_llms(self, modes: tuple[str, ...], num_kv_blocks: int) -> dict:
        """{mode: LLM} for the scheduling modes, all with the same KV cache size."""
        return {m: self.make_llm(num_kv_blocks=num_kv_blocks, **self.mode_kwargs(m)) for m in modes}

    def prompts(self, specs: list[RequestSpec]) -> list[list[int]]:
        return prompt_token_ids(specs, self.vocab_size, self.tokenizer, self.config.seed)

    def tick(self, name: str, round_index: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{name} (round {round_index + 1})")
            self.bar.update(1)


def kv_blocks_for(specs: list[RequestSpec], max_num_seqs: int, block_size: int = 16) -> int:
    """Enough KV blocks for `max_num_seqs` of the workload's largest requests at once.

    Sized so that neither the paged nor the contiguous (static) cache ever runs out:
    throughput then measures scheduling, not preemption. (The `kv_budget` experiment
    is where memory runs out on purpose.)
    """
    largest = max(s.prompt_len + s.max_tokens for s in specs)
    return max_num_seqs * cdiv(largest, block_size) + 1


def run_workload(llm, specs: list[RequestSpec], prompts: list[list[int]],
                 tokens: dict[str, list[int]] | None = None) -> Trace:
    """Run the workload to completion on `llm` (greedy, EOS ignored); its Trace.

    Pass a dict as `tokens` to also get each request's generated token ids.
    """
    engine = llm.llm_engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine still has requests; finish them before a bench run")
    gc.collect()                                   # no collector pause inside the timing
    engine.start_new_trace()
    for spec, prompt in zip(specs, prompts, strict=True):
        params = SamplingParams(temperature=0.0, max_tokens=spec.max_tokens, ignore_eos=True)
        engine.add_request(spec.request_id, {"prompt_token_ids": prompt}, params,
                           arrival_time=spec.arrival_time, priority=spec.priority)
    while engine.has_unfinished_requests():
        for out in engine.step():
            if tokens is not None and out.finished:
                tokens[out.request_id] = list(out.outputs[0].token_ids)
    trace = engine.trace
    check_output_lengths(trace, specs)
    return trace


def check_output_lengths(trace: Trace, specs: list[RequestSpec]) -> None:
    """Every request generated exactly its output_len tokens (raises otherwise)."""
    wrong = [(s.request_id, trace.requests[s.request_id].output_len, s.output_len)
             for s in specs if trace.requests[s.request_id].output_len != s.output_len]
    if wrong:
        raise RuntimeError(f"requests generated the wrong number of tokens "
                           f"(id, got, wanted): {wrong[:5]}")


def warm_up(llm, prompts: list[list[int]], max_tokens: int = 4) -> None:
    """A short untimed run: the first forward allocates and picks kernels."""
    specs = [RequestSpec(f"warmup-{i}", len(p), max_tokens, max_tokens)
             for i, p in enumerate(prompts)]
    run_workload(llm, specs, prompts)


# the numbers `compare_modes` keeps per run
RUN_KEYS = ("duration_s", "generated_tokens", "generated_tokens_per_s", "total_tokens_per_s",
            "slot_utilization", "kv_utilization", "kv_waste", "num_steps", "preemptions",
            "max_running", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "tpot_p50")


def run_numbers(trace: Trace, peak: bool = True) -> dict:
    """`metrics.summarize` cut to `RUN_KEYS`; with `peak`, also the most requests that
    ran in one step (`max_running`)."""
    s = summarize(trace)
    if peak:
        s["max_running"] = max((len(step.scheduled) for step in trace.steps), default=0)
    return {k: s[k] for k in RUN_KEYS if k in s}


def compare_modes(bench: Bench, llms: dict, specs, prompts, measure=run_numbers,
                  num_warm: int | None = None):
    """Warm the `LLM`s up, then alternate them over the rounds on the same workload.

    The warm-up runs the first `num_warm` prompts (default: one batch, `max_num_seqs`).
    `measure(trace)` turns each run into its numbers. Returns ({name: [numbers of each
    round]}, {name: the first round's Trace}) — the Traces are for the plots.
    """
    for llm in llms.values():
        warm_up(llm, prompts[:num_warm or bench.config.max_num_seqs])

    def one_run(llm):
        trace = run_workload(llm, specs, prompts)
        return {"numbers": measure(trace), "trace": trace}

    results = alternate({name: partial(one_run, llm) for name, llm in llms.items()},
                        bench.config.rounds, on_run=bench.tick)
    runs = {name: [r["numbers"] for r in rs] for name, rs in results.items()}
    return runs, {name: rs[0]["trace"] for name, rs in results.items()}


def workload_stats(specs: list[RequestSpec]) -> dict:
    outs = sorted(s.output_len for s in specs)
    return {"num_requests": len(specs), "prompt_tokens": sum(s.prompt_len for s in specs),
            "output_tokens": sum(outs), "output_min": outs[0], "output_median": median(outs),
            "output_max": outs[-1], "output_mean": sum(outs) / len(outs)}


def table(header: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell; first column left-aligned, others right."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)]
                     + [line(r) for r in cells[1:]])


def _missing(x) -> bool:
    return x is None or x != x


def pct(x: float) -> str:
    return "—" if _missing(x) else f"{100 * x:.1f}%"


def ms(x: float) -> str:
    return "—" if _missing(x) else f"{1000 * x:.0f} ms"


def num(x: float, digits: int = 1) -> str:
    return "—" if _missing(x) else f"{x:,.{digits}f}"


def ratio_line(name: str, s: dict, target: float | None = None, higher: bool = True) -> str:
    """`<name>: <median>× (per round: <r1> <r2> …) — target ≥ <target>×: met` (or NOT met)."""
    rounds = " ".join(f"{v:.2f}" for v in s["values"])
    line = f"{name}: {s['median']:.2f}× (per round: {rounds})"
    if target is not None:
        met = s["median"] >= target if higher else s["median"] <= target
        sign = "≥" if higher else "≤"
        line += f" — target {sign} {target}×: {'met' if met else 'NOT met'}"
    return line


def figure(ncols: int, width: float = 5.2):
    """A row of `ncols` axes in the course style (`minillm.widgets.style`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from minillm.widgets.style import use_course_style
    use_course_style()
    return plt.subplots(1, ncols, figsize=(width * ncols, 3.8))


def save(fig, path) -> None:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def bars_with_rounds(ax, names: list[str], runs_by_name: dict, key: str, colors: list) -> None:
    """One bar per contender at its median, one dot per round."""
    for i, name in enumerate(names):
        values = [r[key] for r in runs_by_name[name]]
        ax.bar(i, np.median(values), color=colors[i], alpha=0.85)
        ax.scatter([i] * len(values), values, color=COLORS["text"], s=12, zorder=3)
    ax.set_xticks(range(len(names)), names)
