"""`LLM`: the one-object API, shaped like vLLM's on purpose.

    from minillm import LLM, SamplingParams
    llm = LLM(model="smollm2-135m", max_num_seqs=16)
    outs = llm.generate(["Hello"], SamplingParams(temperature=0.0, max_tokens=32))
    outs[0].outputs[0].text

Change `minillm` to `vllm` in the import and the same script runs on vLLM. Every knob
is a field of `EngineConfig` (`config.py`), checked before the model is loaded; the
minillm-only ones (`scheduling`, `policy`, `aging_rate`, `executor`, the Trace in
`llm.trace`) have safe defaults.

`LLM(...)` is `load_engine` plus the calls a user makes. `load_engine` — which the
server calls too — goes config → model → engine:

    EngineConfig(**knobs)                    every value checked, nothing loaded yet
    weights (model/loader.py) → LlamaModel   our forward, on the chosen device and dtype
      → executor.load(model)                 "eager": as written; a plugin may swap modules
    KV tensors + ModelRunner → build_engine  scheduler, KV manager, engine loop
                                             (components="exercises": the learner's parts,
                                             `engine/components.py`, lesson 13)
"""

from __future__ import annotations

import itertools
import os
import re
import warnings

from minillm.attention import make_attention_backend
from minillm.config import EngineConfig, build_engine
from minillm.engine.checks import check_bool, check_int, reworded
from minillm.engine.engine import LLMEngine
from minillm.kv_cache.tensors import kv_bytes_per_token
from minillm.model.device import resolve_device, resolve_dtype
from minillm.model.executor import resolve_executor
from minillm.model.llama import LlamaModel
from minillm.model.loader import load_model_and_tokenizer
from minillm.model.model_runner import ModelRunner
from minillm.sampling_params import SamplingParams


def load_engine(model, config: EngineConfig, tokenizer=None) -> LLMEngine:
    """The real model's engine: weights, executor, attention backend, KV cache, runner.

    `model`: a known name, a local Hugging Face folder or a transformers Llama object;
    `tokenizer`: None for the model's own."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    hf_model, loaded_tokenizer = load_model_and_tokenizer(model)
    yours = config.components == "exercises"          # lesson 13: the learner's parts
    executor = resolve_executor("eager" if yours else config.executor, device, dtype,
                                hf_model.config)
    backend_name = config.attention_backend
    if backend_name == "auto":
        backend_name = executor.attention_backend(device, dtype)
    backend = make_attention_backend(backend_name)
    reason = backend.unavailable_reason(device, dtype, hf_model.config)
    if reason:
        raise ValueError(f"attention_backend={backend_name!r} cannot run here: {reason}. "
                         "Use attention_backend='auto'.")
    tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
    eos_ids = eos_token_ids(hf_model, tokenizer)
    llama = executor.load(LlamaModel.from_hf(hf_model, dtype=dtype, device=device), config)
    del hf_model
    config = config.for_model(llama.max_positions, kv_bytes_per_token(
        llama.num_layers, llama.num_kv_heads, llama.head_dim, dtype))
    name = model if isinstance(model, (str, os.PathLike)) else "custom"
    extra = {"model": str(name), "executor": executor.name, "attention_backend": backend_name,
             "device": str(device), "dtype": str(dtype).replace("torch.", "")}
    if yours:
        from minillm.engine.components import build_learner_engine
        return build_learner_engine(config, llama, device, vocab_size=llama.vocab_size,
                                    tokenizer=tokenizer, eos_token_ids=eos_ids,
                                    extra={**extra, "attention_backend": "exercises"})
    runner = ModelRunner.allocate(llama, config, backend, device)
    return build_engine(config, runner, vocab_size=llama.vocab_size, tokenizer=tokenizer,
                        eos_token_ids=eos_ids, extra=extra)


class LLM:
    def __init__(self, model="smollm2-135m", *, tokenizer=None, **knobs):
        """`model`: a known name ("smollm2-135m"), a local Hugging Face folder, or a
        transformers Llama model object. `knobs`: the fields of `EngineConfig`."""
        self._start(model, EngineConfig.from_kwargs(knobs), tokenizer)

    @classmethod
    def from_config(cls, model, config: EngineConfig, tokenizer=None) -> "LLM":
        """An LLM from a checked EngineConfig (what the command line builds)."""
        llm = cls.__new__(cls)
        llm._start(model, config, tokenizer)
        return llm

    def _start(self, model, config: EngineConfig, tokenizer) -> None:
        if tokenizer is not None and not (callable(tokenizer) and hasattr(tokenizer, "decode")):
            raise TypeError("tokenizer must be a tokenizer object (callable, with .decode), e.g. "
                            "transformers.AutoTokenizer.from_pretrained(local_folder), or None "
                            f"for the model's own; got {tokenizer!r:.60}")
        self.llm_engine = load_engine(model, config, tokenizer)
        self.config = self.llm_engine.engine_config           # complete: for_model done
        self.tokenizer = self.llm_engine.tokenizer
        self.model = self.llm_engine.runner.model
        self.device = self.llm_engine.runner.device
        self.hf_config = self.model.config
        self._request_ids = itertools.count()     # "0", "1", ... like vLLM: reproducible

    @property
    def trace(self):
        """The Trace of the last `generate`/`chat` call (per-step and per-request records)."""
        return self.llm_engine.trace

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = True,
                 priority: list[int] | None = None):
        """Run prompts to completion; RequestOutputs come back in input order.

        Every prompt is checked before any is queued, and an error names the prompt
        (`prompts[3]: ...`). A request that fails inside a step comes back with
        `finish_reason="error"` (and `.error`); the others are unaffected.
        """
        prompts = _prompt_list(prompts)
        params = _params_list(sampling_params, len(prompts))
        priorities = _priority_list(priority, len(prompts))
        if any(priorities) and self.config.policy in ("fcfs", "shortest"):
            raise ValueError(f"priority was given, but policy={self.config.policy!r} ignores it: "
                             "create the LLM with policy='priority', or drop priority")
        check_bool("use_tqdm", use_tqdm)
        engine = self.llm_engine
        if engine.has_unfinished_requests():
            raise RuntimeError("the engine still has requests added through llm_engine; "
                               "finish or abort them before calling generate()")
        seqs = []
        for i, (prompt, p, prio) in enumerate(zip(prompts, params, priorities)):
            try:
                seqs.append(engine.make_sequence(str(next(self._request_ids)), prompt, p,
                                                 None, prio))
            except (TypeError, ValueError) as err:
                raise reworded(err, f"prompts[{i}]: {err}") from None
        engine.start_new_trace()
        try:
            for seq in seqs:
                seq.arrival_time = 0.0               # on the fresh trace's clock
                engine.add_sequence(seq)
            finished = self._run_to_completion(len(seqs), use_tqdm)
        finally:
            for seq in seqs:                         # on any error: nothing stays queued
                engine.abort_request(seq.request_id)
        # a request aborted meanwhile (another thread, a callback) comes back as it stopped
        outputs = [finished.get(seq.request_id) or engine.make_output(seq) for seq in seqs]
        for i, out in enumerate(outputs):
            if out.error:
                warnings.warn(f"prompts[{i}] failed inside the engine: {out.error}", stacklevel=2)
        return outputs

    def chat(self, messages, sampling_params=None, use_tqdm: bool = True):
        """One conversation (a list of {"role", "content"} dicts) or a list of them."""
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("this model's tokenizer has no chat template: use generate()")
        conversations = _conversations(messages)
        prompts = []
        for conv in conversations:
            text = self.tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            ids = self.tokenizer(text, add_special_tokens=False).input_ids
            prompts.append({"prompt_token_ids": list(ids), "prompt": text})
        try:
            return self.generate(prompts, sampling_params, use_tqdm)
        except (TypeError, ValueError) as err:           # name what the caller passed
            one = isinstance(messages[0], dict)
            text = str(err).replace("prompts[0]: ", "messages: " if one else "conversations[0]: ")
            text = re.sub(r"prompts\[(\d+)\]", r"conversations[\1]", text)
            raise reworded(err, text.replace(" prompts", " conversations")) from None

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


# argument checks of the public calls
def _prompt_list(prompts) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise TypeError("prompts must be a str, a {'prompt_token_ids': [...]} dict, or a "
                        f"list of them; got {type(prompts).__name__}")
    if not prompts:
        raise ValueError("prompts is empty: generate() needs at least one prompt")
    return list(prompts)


def _params_list(sampling_params, n: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * n
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    if not isinstance(sampling_params, (list, tuple)):
        raise TypeError("sampling_params must be a SamplingParams, a list of them (one per "
                        f"prompt), or None; got {type(sampling_params).__name__}")
    if len(sampling_params) != n:
        raise ValueError(f"got {len(sampling_params)} SamplingParams for {n} prompts: "
                         "pass one, or one per prompt")
    for i, p in enumerate(sampling_params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{i}] must be a SamplingParams, got {type(p).__name__}")
    return list(sampling_params)


def _priority_list(priority, n: int) -> list[int]:
    if priority is None:
        return [0] * n
    if not isinstance(priority, (list, tuple)):
        raise TypeError(f"priority must be a list of ints, one per prompt; got {priority!r}")
    if len(priority) != n:
        raise ValueError(f"got {len(priority)} priorities for {n} prompts: give one per prompt")
    return [check_int(f"priority[{i}]", p) for i, p in enumerate(priority)]


def _conversations(messages) -> list[list[dict]]:
    """One conversation or a list of them → a list of conversations, each checked."""
    shape = "messages must be a list of {'role': ..., 'content': ...} dicts, or a list of such lists"
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(f"{shape}; got {messages!r:.60}")
    conversations = [messages] if isinstance(messages[0], dict) else list(messages)
    for c, conv in enumerate(conversations):
        if not isinstance(conv, (list, tuple)) or not conv:
            raise TypeError(f"{shape}; conversation {c} is {conv!r:.60}")
        for m, message in enumerate(conv):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                    or not isinstance(message.get("content"), str):
                raise TypeError(f"{shape}; conversation {c}, message {m} is {message!r:.60}")
    return [list(conv) for conv in conversations]


def eos_token_ids(hf_model, tokenizer) -> tuple[int, ...]:
    """Every token id that ends a request, as transformers' `generate` sees them.

    Its generation config wins (Llama 3 lists end-of-text *and* end-of-turn there),
    then the model config, then the tokenizer. One id or a list: all of them stop.
    """
    for source in (getattr(hf_model, "generation_config", None), hf_model.config):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            break
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
