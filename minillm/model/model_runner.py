"""The real model's runner: one scheduler plan → one forward pass → sampled tokens.

    execute(plan):  swap copies (preemption by swap) → build_flat_batch(plan)
                    (`batch.py`, selective batching) → the attention backend's plan for
                    the step (`for_step`) → LlamaModel forward, logits only at the rows
                    that sample → Sampler (or, for speculative rows, the greedy pick at
                    every guess)

Prefill chunks and decodes mix freely: to the linear layers it is just `T` rows.

Both runners (this one and `SimRunner`) own the engine's clock: `now()` and
`wait_until()`; the real one reads the wall clock, the simulator keeps its own.
"""

from __future__ import annotations

import torch

from minillm.engine.runner import Runner, WallClock
from minillm.kv_cache.tensors import allocate_kv_cache
from minillm.model.batch import FlatBatch, build_flat_batch
from minillm.model.sampler import Sampler, greedy
from minillm.scheduler import SchedulerOutput


class ModelRunner(Runner):
    max_idle_wait = 0.1      # seconds one idle step() sleeps at most before it returns

    def __init__(self, model, kv_caches, block_size: int, backend, device: torch.device,
                 swap_caches=None):
        self.model = model
        self.kv_caches = kv_caches
        self.swap_caches = swap_caches or []       # per layer (K, V) in CPU memory
        self.block_size = block_size
        self.backend = backend
        self.device = torch.device(device)
        self.sampler = Sampler()
        self.clock = WallClock()

    @classmethod
    def allocate(cls, model, config, backend, device: torch.device) -> "ModelRunner":
        """A runner for `model` with its KV cache (and swap space) allocated as the
        complete `config` (`EngineConfig.for_model`) sizes them."""
        dtype = next(model.parameters()).dtype
        layer = (model.num_kv_heads, model.head_dim, dtype)
        kv_caches = allocate_kv_cache(model.num_layers, config.num_kv_blocks, config.block_size,
                                      *layer, device)
        swap_caches = (allocate_kv_cache(model.num_layers, config.num_swap_blocks,
                                         config.block_size, *layer, "cpu")
                       if config.num_swap_blocks else None)
        return cls(model, kv_caches, config.block_size, backend, device, swap_caches)

    def now(self) -> float:
        return self.clock.now()

    def wait_until(self, t: float) -> None:
        self.clock.wait_until(t)

    def reset_clock(self) -> float:
        return self.clock.reset()

    def execute(self, plan: SchedulerOutput) -> list[list[int]]:
        # swap-outs first: this step may hand the freed blocks to someone else
        self.copy_blocks(plan.swap_out, self.kv_caches, self.swap_caches)
        self.copy_blocks(plan.swap_in, self.swap_caches, self.kv_caches)
        batch = self.flat_batch(plan)
        attention = self.backend.for_step(batch.meta)     # what every layer of the step shares
        logits = self.model(batch.input_ids, batch.positions, self.kv_caches, attention,
                            batch.logits_indices)                            # [S, V]
        result: list = [[] for _ in plan.scheduled]
        sampling_rows, speculating_rows = batch.sampling_rows, batch.speculating_rows
        if sampling_rows:
            seqs = [plan.scheduled[r].seq for r in sampling_rows]
            tokens = self.sampler(logits[:len(sampling_rows)], [s.params for s in seqs],
                                  [s.sampling_seed for s in seqs],
                                  [s.num_output_tokens for s in seqs])
            for row, token in zip(sampling_rows, tokens):    # an Exception: that row failed
                result[row] = token if isinstance(token, BaseException) else [token]
        if speculating_rows:            # greedy picks at the newest token and every guess
            picks = greedy(logits[len(sampling_rows):]).tolist()
            start = 0
            for row in speculating_rows:
                n = plan.scheduled[row].num_drafts + 1
                result[row] = picks[start:start + n]
                start += n
        return result

    def flat_batch(self, plan: SchedulerOutput) -> FlatBatch:
        """The step's tokens laid end to end (`batch.py`, selective batching)."""
        return build_flat_batch(plan, self.block_size, self.device)

    @staticmethod
    def copy_blocks(mapping: list[tuple[int, int]], source, target) -> None:
        """Copy whole KV blocks between two caches, every layer: mapping [(src, dst)]."""
        if not mapping:
            return
        for (src_k, src_v), (dst_k, dst_v) in zip(source, target):
            src = torch.tensor([a for a, _ in mapping], device=src_k.device)
            dst = torch.tensor([b for _, b in mapping], device=dst_k.device)
            dst_k[dst] = src_k[src].to(dst_k.device)     # [n, block_size, Hkv, D]
            dst_v[dst] = src_v[src].to(dst_v.device)
