"""Every engine knob in one place, checked once, and the one function that assembles an engine.

    config = EngineConfig(max_num_seqs=8, enable_chunked_prefill=True)   # checks each knob
    config = config.for_model(max_positions=8192, kv_bytes_per_token=46_080)  # fills defaults
    engine = build_engine(config, runner, vocab_size=49152, eos_token_ids=(2,))

`LLM` and the server (real model, `minillm/llm.py: load_engine`) and `make_sim_engine`
(simulator) all go through these two steps; only the runner differs. The schedulers read
the complete config; the command lines (`python -m minillm serve`, `generate`) make
their flags from these fields (`serving/args.py`). `EngineConfig` takes vLLM's names
where vLLM has the knob; the minillm-only ones (`scheduling`, `policy` beyond
fcfs/priority, `aging_rate`, `preemption_mode`, `num_swap_blocks`, `num_kv_blocks`, `executor`,
`max_trace_steps`, `record_block_tables`) have defaults that behave like vLLM.

Defaults that depend on the model are left `None` until `for_model`:

* `max_model_len` — the model's context length (its position table);
* `max_num_batched_tokens` — 512 with chunked prefill, else `max_model_len` (a whole
  prompt must fit one step);
* `num_kv_blocks` — what `kv_cache_memory` (1 GiB) holds, but no more than a full batch
  of `max_model_len`-token sequences can use;
* `num_swap_blocks` — as many as `num_kv_blocks` with `preemption_mode="swap"`, else 0.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields, replace

from minillm.engine.checks import InvalidValue, check_bool, check_choice, check_int, check_number
from minillm.model.device import DTYPES, dtype_name

DEFAULT_KV_CACHE_BYTES = 1 << 30          # 1 GiB of K/V when num_kv_blocks is not given
DEFAULT_CHUNKED_TOKEN_BUDGET = 512        # max_num_batched_tokens with chunked prefill
DEFAULT_MAX_TRACE_STEPS = 20_000          # the Trace keeps this many recent steps
SPECULATIVE_KEYS = ("method", "num_speculative_tokens", "prompt_lookup_max",
                    "prompt_lookup_min")


def knob(default, help: str, **flag):
    """A field with what its command-line flag says (see `serving/args.py`): `help`
    begins with "minillm" for a knob vLLM does not have; `flag=` names a flag other than
    the field's name; `choices=` lists the values the flag offers; `cli=False` keeps
    it off the command line."""
    return field(default=default, metadata={"help": help, **flag})


@dataclass(frozen=True)
class EngineConfig:
    scheduling: object = knob("continuous", "minillm: iteration-level (continuous) or "
                              "request-level (static) batching; 'continuous+contiguous' and "
                              "'static+paged' are lesson 05's other two corners",
                              choices="schedulers")
    max_num_seqs: int = knob(16, "batch slots: sequences in one step at most")
    max_num_batched_tokens: int | None = knob(
        None, "token budget per step (default: 512 with chunked prefill, else max-model-len)")
    max_model_len: int | None = knob(None, "longest prompt + output (default: the model's)")
    block_size: int = knob(16, "token slots per KV-cache block")
    num_kv_blocks: int | None = knob(None, "minillm: KV-cache blocks (vLLM: "
                                     "--num-gpu-blocks-override)")
    kv_cache_memory: int | None = knob(None, "bytes of K/V (default 1 GiB)", cli=False)
    enable_chunked_prefill: bool = knob(False, "split long prompts into chunks that share "
                                        "steps with decodes")
    enable_prefix_caching: bool = knob(False, "reuse the KV blocks of a shared prompt prefix")
    policy: object = knob("fcfs", "which waiting request goes first", flag="--scheduling-policy",
                          choices=("fcfs", "priority"))
    aging_rate: float = knob(0.0, "minillm: priority points a waiting request gains per second")
    preemption_mode: str = knob("recompute", "minillm: what a preempted request loses: "
                                "its K/V (recompute) or nothing (swap)",
                                choices=("recompute", "swap"))
    num_swap_blocks: int | None = knob(None, "minillm: swap-space blocks in CPU memory "
                                       "(default: as many as the cache with swap)")
    speculative_config: dict | None = knob(None, "speculative decoding, as JSON: "
                                           '{"method": "ngram", "num_speculative_tokens": 4}')
    executor: str = knob("auto", "minillm: 'eager' runs the readable model as written; "
                         "'auto' a faster executor where one is installed and runs here",
                         choices="executors")
    attention_backend: str = knob("auto", "attention kernels (default: the executor's)")
    components: str = knob("answer-key", "minillm: whose parts build the engine: the answer "
                           "key's, or yours from the exercises (lesson 13)",
                           choices=("answer-key", "exercises"))
    device: object = knob(None, "None: CUDA if present, else CPU", cli=False)
    dtype: object = knob(None, "number format (default: bf16 on CUDA, fp32 on CPU)",
                         choices=("auto", *DTYPES))
    seed: int = knob(0, "seed of requests that bring none")
    max_trace_steps: int | None = knob(DEFAULT_MAX_TRACE_STEPS, "the Trace keeps this many "
                                       "recent steps", cli=False)
    record_block_tables: bool = knob(False, "the Trace keeps every step's block tables", cli=False)

    def __post_init__(self) -> None:
        scheduler_cls = self.scheduler_class        # checks `scheduling`
        keep = lambda name, value: object.__setattr__(self, name, value)   # noqa: E731 (frozen)
        keep("max_num_seqs", check_int("max_num_seqs", self.max_num_seqs, 1,
                                       hint="it is the number of batch slots"))
        for name in ("max_num_batched_tokens", "num_kv_blocks", "kv_cache_memory",
                     "max_trace_steps"):
            if getattr(self, name) is not None:
                keep(name, check_int(name, getattr(self, name), 1, hint="or None for the default"))
        if self.max_model_len is not None:
            keep("max_model_len", check_int("max_model_len", self.max_model_len, 2,
                                            hint="a request needs one prompt token and room for one more"))
        keep("block_size", check_int("block_size", self.block_size, 1))
        if self.num_kv_blocks is not None and self.kv_cache_memory is not None:
            raise ValueError("give num_kv_blocks or kv_cache_memory, not both "
                             f"(got {self.num_kv_blocks} blocks and {self.kv_cache_memory} bytes)")
        for name in ("enable_chunked_prefill", "enable_prefix_caching", "record_block_tables"):
            check_bool(name, getattr(self, name))
        self._check_policy()
        self._check_preemption()
        self._check_batching(scheduler_cls)
        self._check_speculative(scheduler_cls)
        self._check_model_side()
        self._check_components()
        keep("seed", check_int("seed", self.seed))

    def _check_policy(self) -> None:
        from minillm.scheduler.policies import resolve_policy
        resolve_policy(self.policy)
        object.__setattr__(self, "aging_rate", check_number("aging_rate", self.aging_rate, 0.0))
        if self.aging_rate and self.policy == "fcfs" and isinstance(self.scheduling, str):
            # (a Scheduler subclass of your own may read aging_rate in its own order_key)
            raise ValueError(f"aging_rate={self.aging_rate} has no effect with policy='fcfs': "
                             "use policy='priority' or 'shortest', or drop aging_rate")

    def _check_components(self) -> None:
        from minillm.engine.components import CHOICES, check_config
        check_choice("components", self.components, CHOICES)
        check_config(self)

    def _check_preemption(self) -> None:
        from minillm.scheduler import PREEMPTION_MODES
        check_choice("preemption_mode", self.preemption_mode, PREEMPTION_MODES)
        if self.num_swap_blocks is not None:
            object.__setattr__(self, "num_swap_blocks",
                               check_int("num_swap_blocks", self.num_swap_blocks, 0))
            if self.num_swap_blocks and self.preemption_mode != "swap":
                raise ValueError(f"num_swap_blocks={self.num_swap_blocks} only applies to "
                                 "preemption_mode='swap': set that, or drop num_swap_blocks")

    def _check_batching(self, scheduler_cls) -> None:
        from minillm.scheduler import StaticScheduler
        if self.enable_chunked_prefill and issubclass(scheduler_cls, StaticScheduler):
            raise ValueError("enable_chunked_prefill needs iteration-level scheduling: a static "
                             "batch prefills whole prompts in its first step. Use "
                             "scheduling='continuous' (or 'static+paged'), or drop it")
        if self.enable_prefix_caching and getattr(scheduler_cls, "kv_layout", "paged") != "paged":
            raise ValueError(f"enable_prefix_caching shares paged blocks, but scheduling="
                             f"{self.scheduling_name!r} reserves contiguous ones: use "
                             "scheduling='continuous' (or 'static+paged')")

    def _check_speculative(self, scheduler_cls) -> None:
        spec = self.speculative_config
        if spec is None:
            return
        if not isinstance(spec, dict):
            raise TypeError(f"speculative_config must be a dict or None, got {type(spec).__name__}")
        unknown = sorted(set(spec) - set(SPECULATIVE_KEYS))
        if unknown:
            raise ValueError(f"unknown speculative_config keys {unknown}; use {list(SPECULATIVE_KEYS)}")
        if spec.get("method", "ngram") != "ngram":
            raise ValueError(f"speculative_config method {spec['method']!r} is not supported: "
                             "minillm has 'ngram' (prompt lookup, no draft model)")
        if "num_speculative_tokens" not in spec:
            raise ValueError("speculative_config needs 'num_speculative_tokens' (e.g. 4)")
        low = check_int("speculative_config['prompt_lookup_min']", spec.get("prompt_lookup_min", 1), 1)
        high = check_int("speculative_config['prompt_lookup_max']", spec.get("prompt_lookup_max", 4), 1)
        check_int("speculative_config['num_speculative_tokens']", spec["num_speculative_tokens"], 1)
        if low > high:
            raise ValueError(f"speculative_config needs prompt_lookup_min <= prompt_lookup_max, "
                             f"got {low} > {high}")
        from minillm.scheduler import StaticScheduler
        if issubclass(scheduler_cls, StaticScheduler):
            raise ValueError("speculative decoding needs scheduling='continuous', got "
                             f"{self.scheduling_name!r}")

    def _check_model_side(self) -> None:
        from minillm.model.executor import FORCE_VARIABLE, executor_names, readable_forced
        if readable_forced() and self.executor not in executor_names():
            raise InvalidValue(f"executor={self.executor!r} is out: {FORCE_VARIABLE}=eager "
                               "keeps plugins out (unset it, or use 'auto' or 'eager')",
                               "executor")
        check_choice("executor", self.executor, executor_names())
        if self.attention_backend != "auto":
            from minillm.attention import BACKENDS
            from minillm.model.executor import load_plugins
            load_plugins()
            check_choice("attention_backend", self.attention_backend, ("auto", *BACKENDS))
        if self.device is not None and not (isinstance(self.device, str) or hasattr(self.device, "type")):
            raise TypeError(f"device must be None, a str such as 'cpu' or 'cuda', or a "
                            f"torch.device; got {self.device!r}")
        if self.dtype is not None and dtype_name(self.dtype) is None and self.dtype != "auto":
            raise ValueError(f"dtype must be one of {('auto', *DTYPES)} or the matching torch "
                             f"dtype, got {self.dtype!r}")

    @property
    def scheduler_class(self):
        from minillm.scheduler import resolve_scheduler
        return resolve_scheduler(self.scheduling)

    @property
    def scheduling_name(self) -> str:
        if isinstance(self.scheduling, str):
            return self.scheduling
        return getattr(self.scheduling, "name", self.scheduling.__name__)

    def for_model(self, max_positions: int | None, kv_bytes_per_token: int) -> "EngineConfig":
        """This config with every model-dependent default filled in (see module docstring).

        `max_positions`: the model's context length (None: no limit, for the simulator).
        """
        from minillm.kv_cache.allocator import cdiv
        max_model_len = self.max_model_len or max_positions
        if max_model_len is None:
            raise ValueError("max_model_len must be given when the model has no position limit")
        if max_positions is not None and max_model_len > max_positions:
            raise ValueError(f"max_model_len {max_model_len} exceeds the model's "
                             f"{max_positions} positions: lower max_model_len")
        budget = self.max_num_batched_tokens or (
            DEFAULT_CHUNKED_TOKEN_BUDGET if self.enable_chunked_prefill else max_model_len)
        num_kv_blocks = self.num_kv_blocks
        if num_kv_blocks is None:
            memory = self.kv_cache_memory or DEFAULT_KV_CACHE_BYTES
            per_block = self.block_size * kv_bytes_per_token
            if memory < per_block:
                raise ValueError(f"kv_cache_memory={memory} bytes holds no KV block of "
                                 f"{per_block} bytes: raise kv_cache_memory or lower block_size")
            num_kv_blocks = min(memory // per_block,
                                cdiv(self.max_num_seqs * max_model_len, self.block_size))
        swap = self.num_swap_blocks
        if swap is None:
            swap = num_kv_blocks if self.preemption_mode == "swap" else 0
        # the KV budget is now a block count; kv_cache_memory has done its job
        return replace(self, max_model_len=max_model_len, max_num_batched_tokens=budget,
                       num_kv_blocks=int(num_kv_blocks), kv_cache_memory=None, num_swap_blocks=swap)

    def to_dict(self) -> dict:
        """Plain values for the Trace and JSON (the scheduler by its name)."""
        out = asdict(self)
        out["scheduling"] = self.scheduling_name
        if callable(self.policy):
            out["policy"] = getattr(self.policy, "__name__", "custom")
        for key in ("device", "dtype"):
            out[key] = None if out[key] is None else str(out[key]).replace("torch.", "")
        return out

    @classmethod
    def from_kwargs(cls, kwargs: dict, where: str = "LLM") -> "EngineConfig":
        """`EngineConfig(**kwargs)`, but a misspelt knob names its closest match."""
        known = [f.name for f in fields(cls)]
        for key in kwargs:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; the knobs are {known}"
                raise TypeError(f"{where}() got an unknown argument {key!r}{hint}")
        return cls(**kwargs)


def build_engine(config: EngineConfig, runner, *, vocab_size: int, tokenizer=None,
                 eos_token_ids: tuple[int, ...] = (), extra: dict | None = None):
    """Assemble scheduler + KV manager + proposer + engine around `runner`.

    `config` must be complete (`for_model` done). `extra` goes into the Trace's config
    record beside the knobs (model name, device, cost model, ...).
    """
    from minillm.engine.engine import LLMEngine
    from minillm.engine.speculative import NgramProposer
    from minillm.kv_cache import KVCacheManager
    kv = KVCacheManager(config.num_kv_blocks, config.block_size,
                        enable_prefix_caching=config.enable_prefix_caching,
                        num_swap_blocks=config.num_swap_blocks)
    scheduler = config.scheduler_class(config, kv)
    spec = dict(config.speculative_config or {})
    spec.pop("method", None)
    proposer = NgramProposer(**spec) if config.speculative_config else None
    return LLMEngine(runner, scheduler, config, vocab_size=vocab_size, tokenizer=tokenizer,
                     eos_token_ids=eos_token_ids, proposer=proposer, extra=extra)
