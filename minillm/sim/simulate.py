"""Run a workload through the real engine with a simulated model.

    trace = simulate(seed_example(), scheduling="static", max_num_seqs=8)
    summarize(trace)["slot_utilization"]          # → 0.205: 79.5% of the slots idle

`make_sim_engine` builds exactly what `LLM` builds — an `EngineConfig`, a
`KVCacheManager`, a static or continuous `Scheduler`, an `LLMEngine` — except that the
runner is a `SimRunner` and there is no model and no tokenizer. Its keyword arguments
have the same names and defaults as `LLM`'s (for SmolLM2-135M), so a configuration
explored in the simulator carries over to the real model unchanged.
"""

from __future__ import annotations

import zlib

import numpy as np

from minillm.config import EngineConfig, build_engine
from minillm.engine.checks import check_int
from minillm.engine.engine import LLMEngine
from minillm.engine.trace import Trace
from minillm.sampling_params import SamplingParams
from minillm.sim.sim_runner import CostModel, SimRunner
from minillm.sim.workload import RequestSpec

# SmolLM2-135M: 2 (K and V) × 30 layers × 3 KV heads × 64 dims × 4 bytes (fp32)
SMOLLM2_KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 4
SMOLLM2_MAX_POSITIONS = 8192


def make_sim_engine(scheduling="continuous", *, cost_model: CostModel | None = None,
                    vocab_size: int = 49152, eos_token_id: int | None = 2,
                    max_model_len: int = SMOLLM2_MAX_POSITIONS, **knobs) -> LLMEngine:
    """An LLMEngine driven by a SimRunner; the knobs and defaults of `LLM` on SmolLM2-135M.

    `scheduling`: a name in `minillm.scheduler.SCHEDULERS`, or your own
    `Scheduler` subclass (an exercise's scheduler runs in the simulator exactly as in
    `LLM`). `knobs`: the other `EngineConfig` fields (`max_num_seqs`, `block_size`, ...);
    `num_kv_blocks=None` sizes the cache for SmolLM2 in fp32 (45 KiB per token).
    `record_block_tables=True` keeps every step's block tables in the Trace.
    """
    check_int("vocab_size", vocab_size, 2, hint="the simulator needs EOS and a filler token")
    if knobs.get("speculative_config"):
        raise ValueError("the simulator does not model speculative decoding (what is accepted "
                         "depends on the real model's tokens): drop speculative_config, or "
                         "run it on the model with LLM(...)")
    if cost_model is not None and not isinstance(cost_model, CostModel):
        raise TypeError(f"cost_model must be a CostModel or None, got {type(cost_model).__name__}")
    if eos_token_id is not None:
        check_int("eos_token_id", eos_token_id, 0)
        if eos_token_id >= vocab_size:
            raise ValueError(f"eos_token_id {eos_token_id} is outside the vocabulary (0..{vocab_size - 1})")
    config = EngineConfig.from_kwargs({"scheduling": scheduling, "max_model_len": max_model_len,
                                       **knobs}, where="make_sim_engine")
    config = config.for_model(None, SMOLLM2_KV_BYTES_PER_TOKEN)
    runner = SimRunner(cost_model, eos_token_id=eos_token_id, vocab_size=vocab_size)
    engine = build_engine(config, runner, vocab_size=vocab_size,
                          eos_token_ids=() if eos_token_id is None else (eos_token_id,),
                          extra={"model": "simulated", "runner": "sim",
                                 "cost_model": runner.cost_model.to_dict()})
    return engine


def add_workload(engine: LLMEngine, workload: list[RequestSpec], ignore_eos: bool = False) -> None:
    """Queue every request of `workload` (each at its own arrival time and priority).

    The simulated runner learns each request's output length; the engine only sees
    `max_tokens`, like a real server. A request that can never fit raises ValueError.
    """
    runner = engine.runner
    if isinstance(workload, RequestSpec) or not isinstance(workload, (list, tuple)):
        raise TypeError(f"workload must be a list of RequestSpec, got {type(workload).__name__}")
    for i, spec in enumerate(workload):
        if not isinstance(spec, RequestSpec):
            raise TypeError(f"workload[{i}] must be a RequestSpec, got {type(spec).__name__}")
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
    if max_steps is not None:
        check_int("max_steps", max_steps, 1, hint="or None for no limit")
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
