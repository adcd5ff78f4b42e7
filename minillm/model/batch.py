"""One step's flat batch: the scheduler's plan laid out as `T` tokens end to end.

Selective batching (选择性批处理) concatenates every scheduled sequence's new tokens into
one flat list of `T` tokens — no padding. Linear layers, norms and the MLP do not care
which sequence a row belongs to; attention does. `build_flat_batch(plan)` returns a
`FlatBatch`:

    input_ids      [T]    the tokens
    positions      [T]    each token's position in its own sequence (for RoPE)
    logits_indices [S]    rows whose logits we need: the last row of each sequence
                          that finishes its known tokens this step (it samples), then
                          every row of speculative guesses; a prefill chunk that stops
                          mid-prompt samples nothing
    meta                  what attention needs (`AttentionMetadata`, below)

Logits are computed only at `logits_indices` — for a 500-token prompt that is 1 row of
the 49,152-wide vocabulary projection instead of 500. `AttentionMetadata` holds:

    query_start_loc [B+1]  where each sequence's rows start in the flat batch
                           (cumulative query lengths, "cu_seqlens"): sequence b owns
                           rows query_start_loc[b] : query_start_loc[b+1]
    seq_lens        [B]    tokens of sequence b in the KV cache *after* this step
                           (its context length); its new rows are the last ones
    block_tables    [B, max_blocks]  physical KV block ids per sequence (padded with 0)
    slot_mapping    [T]    flat cache row where each new token's K/V is written
                           (-1: do not write — a padding row)

Example: a 3-token prompt chunk of sequence A (nothing cached yet) and one decode of
sequence B that already has 5 tokens cached, block_size 4, A's blocks [7], B's [2, 9]:

    tokens           A0 A1 A2 | B5
    positions         0  1  2 |  5
    query_start_loc  [0, 3, 4]
    seq_lens         [3, 6]
    slot_mapping     [28, 29, 30, 37]      # 7*4+0.., 9*4+1
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minillm.kv_cache.allocator import slot_of


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor   # [B+1] int32
    seq_lens: torch.Tensor          # [B] int32
    block_tables: torch.Tensor      # [B, max_blocks] int32
    slot_mapping: torch.Tensor      # [T] int64
    query_lens: list[int]           # the same as Python ints, for loops and shapes
    seq_lens_list: list[int]
    block_size: int

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def all_decode(self) -> bool:
        """True when every sequence runs exactly one new token."""
        return self.max_query_len == 1


def build_attention_metadata(query_lens: list[int], seq_lens: list[int],
                             block_tables: list[list[int]], slot_mapping: list[int],
                             block_size: int, device: torch.device) -> AttentionMetadata:
    """Turn the Python lists a runner collects into the tensors attention reads."""
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    width = max(len(t) for t in block_tables) if block_tables else 0
    padded = [t + [0] * (width - len(t)) for t in block_tables]
    return AttentionMetadata(
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.tensor(padded, dtype=torch.int32, device=device).view(len(padded), width),
        slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
        query_lens=list(query_lens),
        seq_lens_list=list(seq_lens),
        block_size=block_size,
    )


@dataclass
class FlatBatch:
    input_ids: torch.Tensor          # [T] long
    positions: torch.Tensor          # [T] long
    logits_indices: torch.Tensor     # [S] long: sampling rows first, then speculative rows
    meta: AttentionMetadata
    sampling_rows: list[int]         # plan rows that sample one token (in logits order)
    speculating_rows: list[int]      # plan rows that verify speculative guesses


def build_flat_batch(plan, block_size: int, device: torch.device) -> FlatBatch:
    """The flat batch of a `SchedulerOutput`: Python lists first, each tensor made once."""
    input_ids, positions, slot_mapping = [], [], []
    query_lens, seq_lens, block_tables = [], [], []
    sampled_at, speculated_at = [], []            # flat rows whose logits we need
    sampling_rows, speculating_rows = [], []      # their plan rows
    for row, item in enumerate(plan.scheduled):
        seq, start = item.seq, item.seq.num_computed_tokens
        end = start + item.num_new_tokens
        input_ids.extend(seq.token_ids_between(start, end))
        positions.extend(range(start, end))
        slot_mapping.extend(slot_of(seq.block_table, p, block_size) for p in range(start, end))
        query_lens.append(item.num_new_tokens)
        seq_lens.append(end)
        block_tables.append(seq.block_table)
        if item.num_drafts:       # logits at the newest real token and every guess
            speculated_at.extend(range(len(input_ids) - item.num_drafts - 1, len(input_ids)))
            speculating_rows.append(row)
        elif item.samples:
            sampled_at.append(len(input_ids) - 1)
            sampling_rows.append(row)
    meta = build_attention_metadata(query_lens, seq_lens, block_tables, slot_mapping,
                                    block_size, device)
    return FlatBatch(
        input_ids=torch.tensor(input_ids, dtype=torch.long, device=device),
        positions=torch.tensor(positions, dtype=torch.long, device=device),
        logits_indices=torch.tensor(sampled_at + speculated_at, dtype=torch.long, device=device),
        meta=meta, sampling_rows=sampling_rows, speculating_rows=speculating_rows)
