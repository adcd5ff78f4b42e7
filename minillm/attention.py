"""Attention over the paged KV cache: the one op that must know about sequences.

Every backend does the same two things per layer:

1. **write** the step's new keys/values into the cache at `slot_mapping`;
2. **attend**: each new query token of sequence b looks at positions
   `0 … its own position` of b's keys/values, found through b's block table.

Backends:

* `TorchAttention` (reference, default on CPU). Per step it plans index tensors once
  (in `meta.scratch`, reused by all layers), then per layer gathers every sequence's
  K/V out of the blocks — **one batched gather per layer**, no Python loop over
  sequences — and runs `scaled_dot_product_attention`. Rows are attended in two
  groups, so a long prompt does not pad every decode row to its length:

  - **decode rows** (one query each, by far the most common): whole *blocks* are
    gathered (`index_select` of block ids — one copy of 16 token rows at a time) into
    `[B, Hkv, L, D]`; the query heads that share a K/V head are stacked as that head's
    "queries" (`[B, Hkv, Hq/Hkv, D]`), so GQA needs no copy of K/V per query head; the
    only mask hides the tail of each sequence's last block;
  - **prefill rows** (chunks of n > 1 queries): padded to the longest chunk, with a
    mask that is causal *and* offset (a chunk's first query sits at position
    `seq_len - query_len`, not 0).
* `attend_per_sequence` — the slow, obvious version the lesson starts from: a Python
  loop, one sequence at a time. Tests check the fast path against it.
* `TritonAttention` (default on CUDA): the kernels in `kernels/`.

Attention has no weights, so running it per sequence loses no weight reuse: the
expensive matmuls (QKV, output projection, MLP) still see the whole flat batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minillm.attention_metadata import AttentionMetadata


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


class TorchAttention:
    """Batched paged attention in plain PyTorch (see module docstring)."""

    name = "torch"

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float):
        plan = meta.scratch.get("torch_plan")
        if plan is None:                        # built once per step, reused by every layer
            plan = meta.scratch["torch_plan"] = _Plan(meta)
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping, plan.all_slots_valid)
        if plan.prefill is None:                # decode only: q's rows are the sequences
            return _attend_decode(q, k_cache, v_cache, plan.decode, scale)
        out = torch.empty_like(q)
        if plan.decode is not None:
            rows = plan.decode.rows
            out[rows] = _attend_decode(q[rows], k_cache, v_cache, plan.decode, scale)
        out[plan.prefill.rows] = _attend_group(q, k_cache, v_cache, plan.prefill, scale)
        return out


class _Plan:
    """Which rows are decodes and which are prefill chunks, with their index tensors."""

    def __init__(self, meta: AttentionMetadata):
        decode_ids = [b for b, n in enumerate(meta.query_lens) if n == 1]
        prefill_ids = [b for b, n in enumerate(meta.query_lens) if n > 1]
        self.decode = _DecodeGroup(meta, decode_ids) if decode_ids else None
        self.prefill = _Group(meta, prefill_ids) if prefill_ids else None
        self.all_slots_valid = bool((meta.slot_mapping >= 0).all())


class _DecodeGroup:
    """Index tensors for G sequences with one query each (see the module docstring)."""

    def __init__(self, meta: AttentionMetadata, seq_ids: list[int]):
        device = meta.seq_lens.device
        bs = meta.block_size
        starts = meta.query_start_loc.tolist()
        self.rows = torch.tensor([starts[b] for b in seq_ids], device=device)       # [G]
        lens = torch.tensor([meta.seq_lens_list[b] for b in seq_ids], device=device)
        num_blocks = -(-max(meta.seq_lens_list[b] for b in seq_ids) // bs)
        tables = meta.block_tables[seq_ids, :num_blocks].long()      # [G, nb] (0-padded)
        self.block_ids = tables.reshape(-1)                           # [G·nb]
        self.shape = (len(seq_ids), num_blocks * bs)                  # (G, L)
        # keys at position >= seq_len (the tail of the last block, or padding blocks)
        # must get no weight: add -inf to their scores
        pos = torch.arange(num_blocks * bs, device=device)
        self.hidden = (pos[None, :] >= lens[:, None])[:, None, None, :]   # [G, 1, 1, L]
        self._masks: dict = {}

    def mask(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask [G, 1, 1, L] in the queries' dtype: 0 visible, -inf hidden."""
        if dtype not in self._masks:
            zeros = torch.zeros(self.hidden.shape, dtype=dtype, device=self.hidden.device)
            self._masks[dtype] = zeros.masked_fill(self.hidden, float("-inf"))
        return self._masks[dtype]


def gather_blocks(cache: torch.Tensor, block_ids: torch.Tensor, shape) -> torch.Tensor:
    """cache [N, bs, Hkv, D] → the listed blocks, end to end per sequence: [G, Hkv, L, D]."""
    G, L = shape
    blocks = cache.index_select(0, block_ids)                     # [G·nb, bs, Hkv, D]
    return blocks.view(G, L, *cache.shape[2:]).transpose(1, 2)    # [G, Hkv, L, D]


def _attend_decode(q, k_cache, v_cache, group: _DecodeGroup, scale: float) -> torch.Tensor:
    """q [G, Hq, D], one query per sequence → [G, Hq, D]."""
    G, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    keys = gather_blocks(k_cache, group.block_ids, group.shape).to(q.dtype)     # [G, Hkv, L, D]
    values = gather_blocks(v_cache, group.block_ids, group.shape).to(q.dtype)
    # GQA: the Hq/Hkv query heads of one K/V head act as that head's queries
    q_grouped = q.reshape(G, num_kv_heads, num_heads // num_kv_heads, head_dim)
    o = F.scaled_dot_product_attention(q_grouped, keys, values, attn_mask=group.mask(q.dtype),
                                       scale=scale)               # [G, Hkv, Hq/Hkv, D]
    return o.reshape(G, num_heads, head_dim)


class _Group:
    """Index tensors for attending a set of sequences as one padded batch."""

    def __init__(self, meta: AttentionMetadata, seq_ids: list[int]):
        device = meta.seq_lens.device
        q_lens = [meta.query_lens[b] for b in seq_ids]
        s_lens = [meta.seq_lens_list[b] for b in seq_ids]
        starts = meta.query_start_loc.tolist()
        max_q, max_l = max(q_lens), max(s_lens)
        # which flat rows belong to this group, and where they go in the padded [G, max_q]
        rows, pad_b, pad_i = [], [], []
        for g, b in enumerate(seq_ids):
            rows.extend(range(starts[b], starts[b] + q_lens[g]))
            pad_b.extend([g] * q_lens[g])
            pad_i.extend(range(q_lens[g]))
        self.rows = torch.tensor(rows, device=device)
        self.pad_b = torch.tensor(pad_b, device=device)
        self.pad_i = torch.tensor(pad_i, device=device)
        self.shape = (len(seq_ids), max_q)
        # gather index into the flat cache: slot of key position p of sequence g  [G, max_l]
        pos = torch.arange(max_l, device=device)
        tables = meta.block_tables[seq_ids].long()                       # [G, max_blocks]
        self.slots = tables[:, pos // meta.block_size] * meta.block_size + pos % meta.block_size
        # mask [G, 1, max_q, max_l]: key p visible to query i iff p <= seq_len - q_len + i
        s = torch.tensor(s_lens, device=device)[:, None]
        n = torch.tensor(q_lens, device=device)[:, None]
        q_pos = s - n + torch.arange(max_q, device=device)[None, :]       # [G, max_q]
        self.mask = (pos[None, None, :] <= q_pos[:, :, None])[:, None]


def _attend_group(q, k_cache, v_cache, group: _Group, scale: float) -> torch.Tensor:
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    k_flat = k_cache.view(num_blocks * block_size, num_kv_heads, head_dim)
    v_flat = v_cache.view(num_blocks * block_size, num_kv_heads, head_dim)
    keys = k_flat[group.slots].transpose(1, 2).to(q.dtype)      # [G, Hkv, L, D]
    values = v_flat[group.slots].transpose(1, 2).to(q.dtype)    # [G, Hkv, L, D]
    q_pad = q.new_zeros(*group.shape, q.shape[1], head_dim)      # [G, max_q, Hq, D]
    q_pad[group.pad_b, group.pad_i] = q[group.rows]
    o = F.scaled_dot_product_attention(
        q_pad.transpose(1, 2), keys, values, attn_mask=group.mask, scale=scale,
        enable_gqa=True)                                         # [G, Hq, max_q, D]
    return o.transpose(1, 2)[group.pad_b, group.pad_i]          # [rows, Hq, D]


class PerSequenceAttention:
    """The reference path as a backend (slow; for lessons and tests)."""

    name = "reference"

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float):
        write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        return attend_per_sequence(q, k_cache, v_cache, meta, scale)


def make_attention_backend(name: str):
    """'torch' | 'reference' | 'triton' → a backend object."""
    if name == "torch":
        return TorchAttention()
    if name == "reference":
        return PerSequenceAttention()
    if name == "triton":
        from minillm.triton_attention import TritonAttention
        return TritonAttention()
    raise ValueError(
        f"unknown attention_backend {name!r}: use 'auto', 'torch', 'triton' or 'reference'")
