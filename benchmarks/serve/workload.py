"""The benchmark's requests: seeded lengths and arrivals, token-id prompts.

Lengths and arrival times come from `minillm.sim.workload.make_workload` (the same seed →
the same requests); the prompts are windows of an English passage, as token ids, cut
with the model's own tokenizer (`benchmarks.workloads.prompt_token_ids`). Every
request sets `ignore_eos` (a vLLM extension minillm also accepts) and its drawn
`max_tokens`, so each server generates exactly the same number of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from minillm.sim.workload import RequestSpec, arrival_times, lognormal, make_workload


@dataclass(frozen=True)
class ServeShape:
    num_prompts: int = 64
    input_median: int = 64           # lognormal lengths, sigma 0.5
    input_cap: int = 256
    output_median: int = 48
    output_cap: int = 128
    output_sigma: float = 0.5        # 1.0: a heavy tail (most answers short, a few long)


def workload(shape: ServeShape, seed: int = 0) -> list[RequestSpec]:
    return make_workload(shape.num_prompts, lognormal(shape.input_median, 0.5, shape.input_cap),
                         lognormal(shape.output_median, shape.output_sigma, shape.output_cap),
                         max_tokens="output_len", seed=seed)


def offsets(num: int, rate: float, seed: int = 0) -> list[float]:
    """Send times: a burst for rate inf, Poisson arrivals at `rate` requests/s otherwise."""
    if rate == float("inf"):
        return [0.0] * num
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    return arrival_times(rng, num, "poisson", rate).tolist()


def payloads(specs: list[RequestSpec], prompts: list[list[int]], model: str | None,
             endpoint: str = "completions", tokenizer=None) -> list[dict]:
    """One streaming request body per spec (chat: the prompt decoded to a user message)."""
    bodies = []
    for spec, ids in zip(specs, prompts):
        body = {"max_tokens": spec.max_tokens, "temperature": 0.0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        if model:
            body["model"] = model
        if endpoint == "chat":
            body["messages"] = [{"role": "user", "content": tokenizer.decode(ids)}]
        else:
            body["prompt"] = ids
        bodies.append(body)
    return bodies


def load_tokenizer(model: str):
    """The tokenizer of a known minillm model name or a local Hugging Face folder."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_folder(model)), model_folder(model)


def model_folder(model: str) -> Path:
    """The Hugging Face folder of `model` (for a known name, the converted cache, made
    once if needed) — what `vllm serve` and the tokenizer load."""
    from minillm.model.loader import KNOWN_MODELS, load_hf_model, model_cache_dir
    if str(model) not in KNOWN_MODELS:
        return Path(model)
    folder = model_cache_dir() / str(model)
    if not (folder / "config.json").is_file():
        load_hf_model(model)
    return folder
