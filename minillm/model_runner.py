"""Turning a scheduler's plan into one forward pass (selective batching).

For every planned `(sequence, n)` the runner takes the sequence's next `n` tokens and
lays them end to end into ONE flat batch:

    input_ids      [T]    the tokens
    positions      [T]    each token's position in its own sequence (for RoPE)
    slot_mapping   [T]    where each token's K/V goes in the paged cache
    query_start_loc[B+1], seq_lens[B], block_tables[B, max_blocks]   (attention)
    logits_indices [S]    rows whose logits we need: the last row of each sequence
                          that finishes its known tokens this step (it samples);
                          a prefill chunk that stops mid-prompt samples nothing.

Prefill chunks and decodes mix freely: to the linear layers it is just `T` rows.
Logits are computed only at `logits_indices` — for a 500-token prompt that is 1 row of
the 49,152-wide vocabulary projection instead of 500.

Both runners (this one and `SimRunner`) own the engine's clock: `now()` and
`wait_until()`; the real one reads the wall clock, the simulator keeps its own.
"""

from __future__ import annotations

import torch

from minillm.flat_batch import build_attention_metadata
from minillm.engine import Runner, WallClock
from minillm.scheduler import SchedulerOutput
from minillm.sampler import Sampler


class ModelRunner(Runner):
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
        batch = self.build_batch(plan)
        logits = self.model(batch["input_ids"], batch["positions"], self.kv_caches,
                            batch["meta"], batch["logits_indices"], self.backend)  # [S, V]
        result: list[list[int]] = [[] for _ in plan.scheduled]
        sampling_rows, speculating_rows = batch["sampling_rows"], batch["speculating_rows"]
        if sampling_rows:
            seqs = [plan.scheduled[r].seq for r in sampling_rows]
            tokens = self.sampler(logits[:len(sampling_rows)], [s.params for s in seqs],
                                  [s.sampling_seed for s in seqs],
                                  [s.num_output_tokens for s in seqs])
            for row, token in zip(sampling_rows, tokens):    # an Exception: that row failed
                result[row] = token if isinstance(token, BaseException) else [token]
        if speculating_rows:            # greedy picks at the newest token and every guess
            picks = logits[len(sampling_rows):].argmax(dim=-1).tolist()
            start = 0
            for row in speculating_rows:
                n = plan.scheduled[row].num_drafts + 1
                result[row] = picks[start:start + n]
                start += n
        return result

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

    def build_batch(self, plan: SchedulerOutput) -> dict:
        """Collect the flat batch as Python lists, then make each tensor once."""
        input_ids, positions, slot_mapping = [], [], []
        query_lens, seq_lens, block_tables = [], [], []
        sampled_at, speculated_at = [], []            # flat rows whose logits we need
        sampling_rows, speculating_rows = [], []      # their plan rows
        bs = self.block_size
        for row, item in enumerate(plan.scheduled):
            seq, start = item.seq, item.seq.num_computed_tokens
            end = start + item.num_new_tokens
            tokens = seq.token_ids_between(start, end)
            table = seq.block_table
            input_ids.extend(tokens)
            positions.extend(range(start, end))
            slot_mapping.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            query_lens.append(item.num_new_tokens)
            seq_lens.append(end)
            block_tables.append(table)
            if item.num_drafts:       # logits at the newest real token and every guess
                speculated_at.extend(range(len(input_ids) - item.num_drafts - 1, len(input_ids)))
                speculating_rows.append(row)
            elif item.samples:
                sampled_at.append(len(input_ids) - 1)
                sampling_rows.append(row)
        logits_indices = sampled_at + speculated_at
        dev = self.device
        meta = build_attention_metadata(query_lens, seq_lens, block_tables, slot_mapping, bs, dev)
        return {
            "input_ids": torch.tensor(input_ids, dtype=torch.long, device=dev),
            "positions": torch.tensor(positions, dtype=torch.long, device=dev),
            "meta": meta,
            "logits_indices": torch.tensor(logits_indices, dtype=torch.long, device=dev),
            "sampling_rows": sampling_rows,
            "speculating_rows": speculating_rows,
        }
