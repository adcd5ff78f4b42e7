"""`LLM`: the one-object API, shaped like vLLM's on purpose.

    from minillm import LLM, SamplingParams
    llm = LLM(model="smollm2-135m", max_num_seqs=16)
    outs = llm.generate(["Hello"], SamplingParams(temperature=0.0, max_tokens=32))
    outs[0].outputs[0].text

Change `minillm` to `vllm` in the import and the same script runs on vLLM. The
minillm-only knobs (`scheduling`, `policy`, `aging_rate`, `attention_backend`
"reference", the Trace in `llm.trace`) are keyword arguments with safe defaults.

`LLM.__init__` wires the parts together:

    weights (model_loader) → LlamaModel (our forward) → KV cache tensors (kv_cache)
    KVCacheManager (block_manager) + Scheduler (static / continuous)
    ModelRunner (selective batching + sampler) → LLMEngine (the loop)
"""

from __future__ import annotations

import os
import uuid

import torch

from minillm.attention import make_attention_backend
from minillm.block_manager import KVCacheManager, cdiv
from minillm.continuous_scheduler import ContinuousScheduler
from minillm.engine import LLMEngine
from minillm.kv_cache import DEFAULT_KV_CACHE_BYTES, allocate_kv_cache, num_blocks_for_budget
from minillm.model import LlamaModel
from minillm.model_loader import load_model_and_tokenizer
from minillm.model_runner import ModelRunner
from minillm.sampling_params import SamplingParams
from minillm.scheduler import Scheduler, SchedulerConfig
from minillm.speculative import NgramProposer
from minillm.static_scheduler import StaticScheduler

SCHEDULERS = {"continuous": ContinuousScheduler, "static": StaticScheduler}
DEFAULT_CHUNKED_TOKEN_BUDGET = 512


def resolve_device(device: str | torch.device | None) -> torch.device:
    """CUDA when available, CPU otherwise; an explicit argument wins."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch sees no CUDA GPU; use 'cpu'")
    return device


def resolve_scheduler(scheduling) -> type[Scheduler]:
    """'continuous' | 'static' | your own Scheduler subclass (the exercises plug in here)."""
    if isinstance(scheduling, type) and issubclass(scheduling, Scheduler):
        return scheduling
    if scheduling not in SCHEDULERS:
        raise ValueError(f"scheduling must be one of {tuple(SCHEDULERS)} or a Scheduler "
                         f"subclass, got {scheduling!r}")
    return SCHEDULERS[scheduling]


def resolve_backend(name: str, device: torch.device) -> str:
    """'auto' → Triton kernels on CUDA, the PyTorch reference on CPU."""
    if name == "auto":
        return "triton" if device.type == "cuda" else "torch"
    return name


class LLM:
    def __init__(self, model="smollm2-135m", *, scheduling="continuous",
                 max_num_seqs: int = 16, max_num_batched_tokens: int | None = None,
                 block_size: int = 16, num_kv_blocks: int | None = None,
                 kv_cache_memory: int = DEFAULT_KV_CACHE_BYTES,
                 enable_chunked_prefill: bool = False, attention_backend: str = "auto",
                 max_model_len: int | None = None, policy: str = "fcfs",
                 aging_rate: float = 0.0, enable_prefix_caching: bool = False,
                 preemption_mode: str = "recompute", num_swap_blocks: int | None = None,
                 speculative_config: dict | None = None, seed: int = 0, device=None,
                 dtype: torch.dtype | None = None, tokenizer=None):
        scheduler_cls = resolve_scheduler(scheduling)
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        self.device = resolve_device(device)
        backend_name = resolve_backend(attention_backend, self.device)
        backend = make_attention_backend(backend_name)      # fails early on a bad name
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32

        hf_model, loaded_tokenizer = load_model_and_tokenizer(model)
        self.tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
        self.model = LlamaModel.from_hf(hf_model, dtype=dtype, device=self.device)
        self.hf_config = hf_model.config
        del hf_model

        max_model_len = max_model_len or self.model.max_positions
        if max_model_len > self.model.max_positions:
            raise ValueError(f"max_model_len {max_model_len} exceeds the model's "
                             f"{self.model.max_positions} positions")
        if max_num_batched_tokens is None:
            max_num_batched_tokens = (DEFAULT_CHUNKED_TOKEN_BUDGET if enable_chunked_prefill
                                      else max_model_len)
        sched_config = SchedulerConfig(max_num_seqs=max_num_seqs,
                                       max_num_batched_tokens=max_num_batched_tokens,
                                       max_model_len=max_model_len,
                                       enable_chunked_prefill=enable_chunked_prefill,
                                       policy=policy, aging_rate=aging_rate,
                                       preemption_mode=preemption_mode)
        if enable_prefix_caching and scheduler_cls is StaticScheduler:
            raise ValueError("prefix caching shares paged blocks; static scheduling reserves "
                             "contiguous ones: use scheduling='continuous'")
        kv_shape = (self.model.num_layers, self.model.num_kv_heads, self.model.head_dim)
        if num_kv_blocks is None:     # the budget, but no more than a full batch can use
            num_kv_blocks = min(num_blocks_for_budget(kv_cache_memory, block_size, *kv_shape, dtype),
                                cdiv(max_num_seqs * max_model_len, block_size))
        if num_swap_blocks is None:
            num_swap_blocks = num_kv_blocks if preemption_mode == "swap" else 0
        kv_manager = KVCacheManager(num_kv_blocks, block_size,      # validates both numbers
                                    enable_prefix_caching=enable_prefix_caching,
                                    num_swap_blocks=num_swap_blocks)
        layer_shape = (self.model.num_kv_heads, self.model.head_dim, dtype)
        kv_caches = allocate_kv_cache(self.model.num_layers, num_kv_blocks, block_size,
                                      *layer_shape, self.device)
        swap_caches = (allocate_kv_cache(self.model.num_layers, num_swap_blocks, block_size,
                                         *layer_shape, "cpu") if num_swap_blocks else None)
        scheduler = scheduler_cls(sched_config, kv_manager)
        runner = ModelRunner(self.model, kv_caches, block_size, backend, self.device, swap_caches)
        config = {"model": model if isinstance(model, (str, os.PathLike)) else "custom",
                  "scheduling": getattr(scheduler_cls, "name", scheduler_cls.__name__),
                  "policy": policy,
                  "max_num_seqs": max_num_seqs,
                  "max_num_batched_tokens": max_num_batched_tokens,
                  "block_size": block_size, "num_kv_blocks": num_kv_blocks,
                  "enable_chunked_prefill": enable_chunked_prefill,
                  "enable_prefix_caching": enable_prefix_caching,
                  "preemption_mode": preemption_mode,
                  "attention_backend": backend_name, "device": str(self.device),
                  "dtype": str(dtype).replace("torch.", ""), "max_model_len": max_model_len}
        config["speculative_config"] = speculative_config
        self.llm_engine = LLMEngine(
            runner, scheduler, vocab_size=self.model.vocab_size, max_model_len=max_model_len,
            tokenizer=self.tokenizer, eos_token_id=_eos_id(self.hf_config, self.tokenizer),
            seed=seed, config=config,
            proposer=make_proposer(speculative_config, scheduler_cls))

    # ------------------------------------------------------------------ API
    @property
    def trace(self):
        """The Trace of the last `generate`/`chat` call (per-step and per-request records)."""
        return self.llm_engine.trace

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = True,
                 priority: list[int] | None = None):
        """Run prompts to completion; RequestOutputs come back in input order."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        elif isinstance(prompts, (list, tuple)):
            prompts = list(prompts)
        else:
            raise TypeError("prompts must be a str, a {'prompt_token_ids': [...]} dict, or a "
                            f"list of them; got {type(prompts).__name__}")
        if not prompts:
            raise ValueError("generate() needs at least one prompt")
        params = self._params_list(sampling_params, len(prompts))
        priorities = list(priority) if priority is not None else [0] * len(prompts)
        if len(priorities) != len(prompts):
            raise ValueError(f"got {len(priorities)} priorities for {len(prompts)} prompts")
        engine = self.llm_engine
        if engine.has_unfinished_requests():
            raise RuntimeError("the engine still has requests added through llm_engine; "
                               "finish or abort them before calling generate()")
        # validate everything first: a bad prompt must leave nothing queued
        batch_id = uuid.uuid4().hex[:8]
        ids = [f"{batch_id}-{i}" for i in range(len(prompts))]
        for rid, prompt, p, prio in zip(ids, prompts, params, priorities):
            engine.scheduler.check_fits(engine.make_sequence(rid, prompt, p, None, prio))
        engine.start_new_trace()
        try:
            for rid, prompt, p, prio in zip(ids, prompts, params, priorities):
                engine.add_request(rid, prompt, p, priority=prio)
            finished = self._run_to_completion(len(prompts), use_tqdm)
        finally:
            for rid in ids:                 # on any error: nothing stays queued
                engine.abort_request(rid)
        return [finished[rid] for rid in ids]

    def chat(self, messages, sampling_params=None, use_tqdm: bool = True):
        """One conversation (a list of {"role", "content"}) or a list of them."""
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("this model's tokenizer has no chat template")
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = []
        for conv in conversations:
            text = self.tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            prompts.append({"prompt_token_ids": list(ids), "prompt": text})
        return self.generate(prompts, sampling_params, use_tqdm)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _params_list(sampling_params, n: int) -> list[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams()] * n
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * n
        params = list(sampling_params)
        if len(params) != n:
            raise ValueError(f"got {len(params)} SamplingParams for {n} prompts: "
                             "pass one, or one per prompt")
        for p in params:
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params entries must be SamplingParams, got {type(p).__name__}")
        return params

    def _run_to_completion(self, total: int, use_tqdm: bool) -> dict:
        from tqdm.auto import tqdm
        finished = {}
        with tqdm(total=total, desc="generate", unit="req", disable=not use_tqdm) as bar:
            while self.llm_engine.has_unfinished_requests():
                for out in self.llm_engine.step():
                    if out.finished:
                        finished[out.request_id] = out
                        bar.update(1)
        return finished


def make_proposer(speculative_config: dict | None, scheduler_cls):
    """vLLM's shape: {"method": "ngram", "num_speculative_tokens": 4,
    "prompt_lookup_max": 4, "prompt_lookup_min": 1} → an NgramProposer (or None)."""
    if not speculative_config:
        return None
    config = dict(speculative_config)
    method = config.pop("method", "ngram")
    if method != "ngram":
        raise ValueError(f"speculative method {method!r} is not supported: minillm has "
                         "'ngram' (prompt lookup, no draft model)")
    if scheduler_cls is StaticScheduler:
        raise ValueError("speculative decoding needs scheduling='continuous'")
    allowed = {"num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"}
    unknown = set(config) - allowed
    if unknown:
        raise ValueError(f"unknown speculative_config keys {sorted(unknown)}; use {sorted(allowed)}")
    return NgramProposer(**config)


def _eos_id(config, tokenizer) -> int | None:
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    return eos
