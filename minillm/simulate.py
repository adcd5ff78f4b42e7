"""Run a workload through the real engine with a simulated model.

    trace = simulate(seed_example(), scheduling="static", max_num_seqs=8)
    summarize(trace)["slot_utilization"]          # → 0.205: 79.5% of the slots idle

`make_sim_engine` builds exactly what `LLM` builds — a `SchedulerConfig`, a
`KVCacheManager`, a static or continuous `Scheduler`, an `LLMEngine` — except that the
runner is a `SimRunner` and there is no model and no tokenizer. Its keyword arguments
have the same names and defaults as `LLM`'s (for SmolLM2-135M), so a configuration
explored in the simulator carries over to the real model unchanged.
"""

from __future__ import annotations

import zlib

import numpy as np

from minillm.block_manager import KVCacheManager, cdiv
from minillm.engine import LLMEngine
from minillm.kv_cache import DEFAULT_KV_CACHE_BYTES
from minillm.llm import DEFAULT_CHUNKED_TOKEN_BUDGET, resolve_scheduler
from minillm.sampling_params import SamplingParams
from minillm.scheduler import Scheduler, SchedulerConfig
from minillm.sim_runner import CostModel, SimRunner
from minillm.trace import Trace
from minillm.workload import RequestSpec

# SmolLM2-135M: 2 (K and V) × 30 layers × 3 KV heads × 64 dims × 4 bytes (fp32)
SMOLLM2_KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 4


def make_sim_engine(scheduling: str | type[Scheduler] = "continuous", *, max_num_seqs: int = 16,
                    max_num_batched_tokens: int | None = None, block_size: int = 16,
                    num_kv_blocks: int | None = None,
                    kv_cache_memory: int = DEFAULT_KV_CACHE_BYTES,
                    enable_chunked_prefill: bool = False, policy: str = "fcfs",
                    aging_rate: float = 0.0, enable_prefix_caching: bool = False,
                    preemption_mode: str = "recompute", num_swap_blocks: int | None = None,
                    cost_model: CostModel | None = None,
                    max_model_len: int = 8192, vocab_size: int = 49152,
                    eos_token_id: int | None = 2, seed: int = 0) -> LLMEngine:
    """An LLMEngine driven by a SimRunner; defaults as `LLM` on SmolLM2-135M in fp32.

    `scheduling`: "continuous", "static", or your own `Scheduler` subclass (an
    exercise's scheduler runs in the simulator exactly as in `LLM`).
    `max_num_batched_tokens=None`: 512 with chunked prefill, else `max_model_len`.
    `num_kv_blocks=None`: as many blocks as `kv_cache_memory` holds for SmolLM2 in
    fp32 (45 KiB per token), but no more than a full batch of `max_model_len` can use.
    """
    scheduler_cls = resolve_scheduler(scheduling)
    if max_num_batched_tokens is None:
        max_num_batched_tokens = (DEFAULT_CHUNKED_TOKEN_BUDGET if enable_chunked_prefill
                                  else max_model_len)
    if num_kv_blocks is None:
        num_kv_blocks = min(kv_cache_memory // (block_size * SMOLLM2_KV_BYTES_PER_TOKEN),
                            cdiv(max_num_seqs * max_model_len, block_size))
    sched_config = SchedulerConfig(max_num_seqs=max_num_seqs,
                                   max_num_batched_tokens=max_num_batched_tokens,
                                   max_model_len=max_model_len,
                                   enable_chunked_prefill=enable_chunked_prefill,
                                   policy=policy, aging_rate=aging_rate,
                                   preemption_mode=preemption_mode)
    if num_swap_blocks is None:
        num_swap_blocks = num_kv_blocks if preemption_mode == "swap" else 0
    kv = KVCacheManager(num_kv_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                        num_swap_blocks=num_swap_blocks)
    scheduler = scheduler_cls(sched_config, kv)
    runner = SimRunner(cost_model, eos_token_id=eos_token_id, vocab_size=vocab_size)
    config = {"model": "simulated", "runner": "sim",
              "scheduling": getattr(scheduler_cls, "name", scheduler_cls.__name__),
              "policy": policy, "aging_rate": aging_rate, "max_num_seqs": max_num_seqs,
              "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size,
              "num_kv_blocks": num_kv_blocks, "enable_chunked_prefill": enable_chunked_prefill,
              "enable_prefix_caching": enable_prefix_caching,
              "preemption_mode": preemption_mode,
              "max_model_len": max_model_len, "cost_model": runner.cost_model.to_dict()}
    return LLMEngine(runner, scheduler, vocab_size=vocab_size, max_model_len=max_model_len,
                     tokenizer=None, eos_token_id=eos_token_id, seed=seed, config=config)


def add_workload(engine: LLMEngine, workload: list[RequestSpec], ignore_eos: bool = False) -> None:
    """Queue every request of `workload` (each at its own arrival time and priority).

    The simulated runner learns each request's output length; the engine only sees
    `max_tokens`, like a real server. A request that can never fit raises ValueError.
    """
    runner = engine.runner
    for spec in workload:
        prompt = {"prompt_token_ids": prompt_token_ids(spec, engine.vocab_size)}
        params = SamplingParams(max_tokens=spec.max_tokens, temperature=0.0,
                                ignore_eos=ignore_eos)
        engine.add_request(spec.request_id, prompt, params,
                           arrival_time=spec.arrival_time, priority=spec.priority)
        runner.output_lens[spec.request_id] = spec.output_len


def prompt_token_ids(spec: RequestSpec, vocab_size: int) -> list[int]:
    """Stand-in prompt tokens, different for every request id and the same every run.

    The simulator never reads them, but a prefix cache would: identical filler
    prompts would all look like one shared prefix.
    """
    rng = np.random.default_rng(zlib.crc32(spec.request_id.encode()))
    return rng.integers(0, vocab_size, size=spec.prompt_len).tolist()


def run_to_completion(engine: LLMEngine, max_steps: int | None = None) -> Trace:
    """Step until every request has finished; return the engine's Trace.

    `max_steps` guards against a scheduler that never finishes (a bug): it raises
    instead of hanging.
    """
    steps = 0
    while engine.has_unfinished_requests():
        engine.step()
        steps += 1
        if max_steps is not None and steps > max_steps:
            raise RuntimeError(f"still unfinished after {max_steps} steps")
    return engine.trace


def simulate(workload: list[RequestSpec], *, max_steps: int | None = None,
             ignore_eos: bool = False, **engine_kwargs) -> Trace:
    """Simulate `workload` on a fresh sim engine (`make_sim_engine(**engine_kwargs)`).

    With `ignore_eos=True` every request runs to its `max_tokens`, whatever its drawn
    output length (the benchmark's setting)."""
    engine = make_sim_engine(**engine_kwargs)
    add_workload(engine, workload, ignore_eos=ignore_eos)
    return run_to_completion(engine, max_steps)
