"""The one place the server builds its engine, and the one place it reads engine numbers.

The server talks to an `LLMEngine` only through its public methods (`add_request`,
`step`, `abort_request`, `has_unfinished_requests`). Two things it needs are not methods
yet: how to *build* an engine from command-line arguments, and the queue lengths and KV
block counts that `/metrics` reports. Each lives in one function here, so a change in how
engines are assembled or where those numbers live touches this file only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineStats:
    """A snapshot taken by the engine loop after each step (read by /metrics)."""

    num_running: int = 0          # sequences in the running batch
    num_waiting: int = 0          # arrived and queued inside the engine, not yet running
    num_free_blocks: int = 0      # KV-cache blocks nobody holds
    num_blocks: int = 0           # KV-cache blocks in total

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use (vLLM's kv_cache_usage_perc: 1.0 means full)."""
        return 1.0 - self.num_free_blocks / self.num_blocks if self.num_blocks else 0.0


def engine_kwargs(args) -> dict:
    """The `LLM(...)` keyword arguments for the server's command-line arguments."""
    kwargs = dict(scheduling=args.scheduling, max_num_seqs=args.max_num_seqs,
                  max_num_batched_tokens=args.max_num_batched_tokens,
                  block_size=args.block_size, enable_chunked_prefill=args.enable_chunked_prefill,
                  enable_prefix_caching=args.enable_prefix_caching,
                  policy=args.scheduling_policy, max_model_len=args.max_model_len,
                  attention_backend=args.attention_backend, seed=args.seed)
    if args.num_kv_blocks is not None:
        kwargs["num_kv_blocks"] = args.num_kv_blocks
    if args.dtype is not None:
        import torch
        kwargs["dtype"] = getattr(torch, args.dtype)
    return kwargs


def make_engine(args):
    """Build `(engine, tokenizer, config)` for the server from its arguments.

    `config` is the engine's configuration dict (max_model_len, block_size, ...). Today
    this builds an `LLM` and keeps its `llm_engine`; the server never uses the `LLM`
    object itself, only the engine inside it.
    """
    from minillm import LLM
    llm = LLM(args.model, **engine_kwargs(args))
    engine = llm.llm_engine
    return engine, llm.get_tokenizer(), dict(engine.config)


def engine_stats(engine) -> EngineStats:
    """Queue lengths and KV block counts of `engine` (call it from the engine loop only)."""
    scheduler = engine.scheduler
    return EngineStats(num_running=len(scheduler.running), num_waiting=len(scheduler.waiting),
                       num_free_blocks=scheduler.kv.num_free_blocks,
                       num_blocks=scheduler.kv.num_blocks)
