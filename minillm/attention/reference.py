"""The reference attention over the paged KV cache: slow, obvious, and the oracle.

`write_kv` stores a step's new keys/values at `slot_mapping`; `attend_per_sequence`
loops over the sequences, gathers each one's keys/values through its block table and
attends. Every faster backend is tested against this one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minillm.attention.base import AttentionBackend
from minillm.model.batch import AttentionMetadata


def write_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, slot_mapping: torch.Tensor,
             all_valid: bool | None = None) -> None:
    """Store new K/V rows: key/value [T, Hkv, D] → cache rows `slot_mapping` [T].

    Rows with slot -1 (padding) are skipped. `all_valid`: pass True when you already
    know no slot is -1 (it saves a check — and a wait for its answer — per layer).
    """
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    slots = slot_mapping
    if all_valid is None:
        all_valid = bool((slot_mapping >= 0).all())
    if not all_valid:
        valid = slot_mapping >= 0
        slots, key, value = slot_mapping[valid], key[valid], value[valid]
    k_flat = k_cache.view(num_blocks * block_size, num_kv_heads, head_dim)
    v_flat = v_cache.view(num_blocks * block_size, num_kv_heads, head_dim)
    k_flat.index_copy_(0, slots, key.to(k_cache.dtype))
    v_flat.index_copy_(0, slots, value.to(v_cache.dtype))


def attend_per_sequence(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Reference: loop over sequences, gather each one's K/V, attend. q [T, Hq, D]."""
    block_size = meta.block_size
    out = torch.empty_like(q)
    start = 0
    for b, (q_len, seq_len) in enumerate(zip(meta.query_lens, meta.seq_lens_list)):
        positions = torch.arange(seq_len, device=q.device)
        blocks = meta.block_tables[b, positions // block_size].long()
        keys = k_cache[blocks, positions % block_size]           # [L, Hkv, D]
        values = v_cache[blocks, positions % block_size]         # [L, Hkv, D]
        queries = q[start:start + q_len]                         # [n, Hq, D]
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        mask = positions[None, :] <= q_pos[:, None]               # [n, L] causal, offset
        o = F.scaled_dot_product_attention(
            queries.transpose(0, 1), keys.transpose(0, 1).to(q.dtype),
            values.transpose(0, 1).to(q.dtype), attn_mask=mask, scale=scale,
            enable_gqa=True)                                     # [Hq, n, D]
        out[start:start + q_len] = o.transpose(0, 1)
        start += q_len
    return out


class PerSequenceAttention(AttentionBackend):
    """The reference path as a backend (slow; for lessons and tests)."""

    name = "reference"

    def attend(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, plan, scale: float):
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        return attend_per_sequence(q, k_cache, v_cache, meta, scale)


