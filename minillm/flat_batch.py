"""What attention needs to know about one step's flat batch.

Selective batching (选择性批处理) concatenates every scheduled sequence's new tokens into
one flat list of `T` tokens. Linear layers, norms and the MLP do not care which
sequence a row belongs to; attention does. This object tells it:

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

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor   # [B+1] int32
    seq_lens: torch.Tensor          # [B] int32
    block_tables: torch.Tensor      # [B, max_blocks] int32
    slot_mapping: torch.Tensor      # [T] int64
    query_lens: list[int]           # the same as Python ints, for loops and shapes
    seq_lens_list: list[int]
    block_size: int
    # per-step scratch an attention backend may fill once and reuse in every layer
    scratch: dict = field(default_factory=dict)

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens_list)

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
