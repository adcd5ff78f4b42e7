"""Lesson 04 — solutions: the flat batch of selective batching, and per-sequence attention."""

from __future__ import annotations

import torch


def build_flat_batch(requests: list[tuple[list[int], int, list[int]]],
                     block_size: int) -> dict[str, torch.Tensor]:
    """Concatenate every request's uncomputed tokens into one flat batch."""
    input_ids, positions, slot_mapping, starts, seq_lens, logits_indices = [], [], [], [0], [], []
    for tokens, num_computed, block_table in requests:
        new = range(num_computed, len(tokens))               # positions run this step
        input_ids += tokens[num_computed:]
        positions += new
        slot_mapping += [block_table[p // block_size] * block_size + p % block_size for p in new]
        starts.append(starts[-1] + len(new))
        seq_lens.append(len(tokens))
        logits_indices.append(starts[-1] - 1)                # the request's last row
    return {
        "input_ids": torch.tensor(input_ids, dtype=torch.long),             # [T]
        "positions": torch.tensor(positions, dtype=torch.long),             # [T]
        "query_start_loc": torch.tensor(starts, dtype=torch.int32),         # [B+1]
        "seq_lens": torch.tensor(seq_lens, dtype=torch.int32),              # [B]
        "slot_mapping": torch.tensor(slot_mapping, dtype=torch.long),       # [T]
        "logits_indices": torch.tensor(logits_indices, dtype=torch.long),   # [B]
    }


def attend_per_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                        scale: float) -> torch.Tensor:
    """Causal attention, one sequence at a time. q [T, Hq, D]; k, v [B, L, Hkv, D]."""
    out = torch.empty_like(q)
    group = q.shape[1] // k.shape[2]                         # query heads per K/V head
    starts = query_start_loc.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        lo, hi = starts[b], starts[b + 1]
        n = hi - lo
        queries = q[lo:hi].transpose(0, 1)                               # [Hq, n, D]
        keys = k[b, :seq_len].repeat_interleave(group, dim=1).transpose(0, 1)    # [Hq, L, D]
        values = v[b, :seq_len].repeat_interleave(group, dim=1).transpose(0, 1)  # [Hq, L, D]
        scores = queries @ keys.transpose(1, 2) * scale                  # [Hq, n, L]
        q_pos = torch.arange(seq_len - n, seq_len, device=q.device)[:, None]   # [n, 1]
        visible = torch.arange(seq_len, device=q.device)[None, :] <= q_pos     # [n, L]
        scores = scores.masked_fill(~visible, float("-inf"))
        out[lo:hi] = (scores.softmax(dim=-1) @ values).transpose(0, 1)   # [n, Hq, D]
    return out
