"""PyTorch references for the Triton kernels: the specification, written to be read.

Each function here has exactly the signature of its Triton twin and defines what the
twin must compute. They loop over sequences in Python and gather each sequence's K/V
out of the paged cache into an ordinary dense tensor, so every step is visible; they
are slow on purpose. The tests compare the Triton kernels against these, and compare
these against an even plainer dense computation.

The paged KV cache (lesson 05) in one picture, `block_size = 4`::

    block_tables[b] = [7, 2, 9]          seq_lens[b] = 10
    token position   0 1 2 3 | 4 5 6 7 | 8 9
    physical block      7    |    2    |  9   (slots 2, 3 of block 9 unused)

    position p of sequence b lives at  k_cache[block_tables[b, p // block_size],
                                               p % block_size]          # [Hkv, D]

Entries of `block_tables[b]` past `ceil(seq_lens[b] / block_size)` are unused and
may hold anything (0, -1, a stale id): nobody may read them.

Numerics: all arithmetic is done in float32 and the result is cast to `q.dtype`,
which is what the kernels do too (fp16/bf16 in memory, fp32 in registers).
"""

from __future__ import annotations

import torch

from ._checks import check_decode_args, check_prefill_args, check_store_kv_args


def store_kv_ref(key, value, k_cache, v_cache, slot_mapping) -> None:
    """Write each new token's key/value into its slot of the paged cache, in place.

    * `key`, `value` — `[T, Hkv, D]` — K and V of this step's T new tokens.
    * `k_cache`, `v_cache` — `[num_blocks, block_size, Hkv, D]` — one layer's cache.
    * `slot_mapping` — `[T]` int — flat slot of each token: slot `s` is block
      `s // block_size`, offset `s % block_size`. `-1` means "padding
      token, write nothing".
    """
    check_store_kv_args(key, value, k_cache, v_cache, slot_mapping)
    num_blocks, block_size = k_cache.shape[:2]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot == -1:
            continue
        if not 0 <= slot < num_blocks * block_size:
            raise ValueError(
                f"slot_mapping[{t}] = {slot} is outside the cache's "
                f"{num_blocks} x {block_size} slots (use -1 to skip a token)"
            )
        block, offset = divmod(slot, block_size)
        k_cache[block, offset] = key[t]  # [Hkv, D]
        v_cache[block, offset] = value[t]


def gather_kv(k_cache, v_cache, block_table_row, length: int):
    """Copy the first `length` positions of one sequence out of the paged cache.

    * `block_table_row` — `[max_blocks]` — this sequence's row of `block_tables`.
    * `length` — number of positions to gather (the sequence's `seq_len`).
    Returns `(k, v)`, each `[length, Hkv, D]`, dense and in position order.
    """
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    blocks_used = -(-length // block_size)  # ceil division
    if blocks_used > block_table_row.shape[0]:
        raise ValueError(
            f"a sequence of {length} tokens needs {blocks_used} blocks but the block table "
            f"has only {block_table_row.shape[0]} columns"
        )
    block_ids = block_table_row[:blocks_used].long()  # [blocks_used]; later entries never read
    if blocks_used and not bool(((block_ids >= 0) & (block_ids < num_blocks)).all()):
        raise ValueError(f"block table entries {block_ids.tolist()} must lie in [0, {num_blocks})")
    k = k_cache[block_ids].reshape(blocks_used * block_size, num_kv_heads, head_dim)[:length]
    v = v_cache[block_ids].reshape(blocks_used * block_size, num_kv_heads, head_dim)[:length]
    return k, v  # [length, Hkv, D] each


def _attend(q, k, v, scale, q_positions):
    """Causal attention of some queries over one sequence's dense K/V, in fp32.

    * `q` — `[n, Hq, D]` queries; query i sits at absolute position `q_positions[i]`.
    * `k`, `v` — `[L, Hkv, D]` — positions `0 .. L-1` of the sequence.
    * `q_positions` — `[n]` — a query at position p sees keys `0 .. p`.
    Returns `[n, Hq, D]` float32.
    """
    group = q.shape[1] // k.shape[1]
    # GQA: query head h reads kv head h // group, so repeat each kv head `group` times.
    k = k.float().repeat_interleave(group, dim=1)  # [L, Hq, D]
    v = v.float().repeat_interleave(group, dim=1)  # [L, Hq, D]
    scores = torch.einsum("nhd,lhd->hnl", q.float(), k) * scale  # [Hq, n, L]
    k_positions = torch.arange(k.shape[0], device=q.device)  # [L]
    visible = k_positions[None, :] <= q_positions[:, None]  # [n, L], causal
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # [Hq, n, L]
    return torch.einsum("hnl,lhd->nhd", probs, v)  # [n, Hq, D]


def paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale):
    """Attention of one new query token per sequence over that sequence's paged KV.

    * `q` — `[B, Hq, D]` — the query of each sequence's newest token.
    * `k_cache`, `v_cache` — `[num_blocks, block_size, Hkv, D]` (the newest token's K/V is
      already stored, so it attends to itself).
    * `block_tables` — `[B, max_blocks]` int.
    * `seq_lens` — `[B]` int — tokens in each sequence's cache, the newest included.
    * `scale` — softmax scale, usually `1 / sqrt(D)`.
    Returns `[B, Hq, D]` in `q.dtype`. A sequence with `seq_len == 0` gets zeros.
    """
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens, scale)
    out = torch.zeros_like(q)
    for b, length in enumerate(seq_lens.tolist()):
        if length < 0:
            raise ValueError(f"seq_lens[{b}] = {length} is negative")
        if length == 0:
            continue
        k, v = gather_kv(k_cache, v_cache, block_tables[b], length)  # [L, Hkv, D]
        # The decode query is the last token, position L-1, so it sees every key.
        last = torch.tensor([length - 1], device=q.device)
        out[b] = _attend(q[b : b + 1], k, v, scale, last)[0].to(q.dtype)
    return out


def paged_prefill_attention_ref(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale):
    """Causal attention for a step's flat batch of prefill chunks and decodes.

    Sequence b owns query rows `query_start_loc[b] : query_start_loc[b+1]` of `q`:
    its `n_b` newest tokens (a whole prompt, a chunk of one, or 1 decode token).
    Their K/V are already in the cache, so the cache holds `seq_lens[b]` positions and
    query i of the sequence sits at absolute position `seq_lens[b] - n_b + i`. It
    attends to positions `0 .. seq_lens[b] - n_b + i`: everything cached before the
    chunk plus the chunk's tokens up to and including itself.

    * `q` — `[T, Hq, D]`.
    * `k_cache`, `v_cache` — `[num_blocks, block_size, Hkv, D]`.
    * `block_tables` — `[B, max_blocks]` int.
    * `query_start_loc` — `[B+1]` int — cumulative query counts, `0 … T`.
    * `seq_lens` — `[B]` int — cached positions per sequence, new tokens included.
    * `scale` — softmax scale.
    Returns `[T, Hq, D]` in `q.dtype`.
    """
    check_prefill_args(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale)
    starts = query_start_loc.tolist()
    if starts[0] != 0 or starts[-1] != q.shape[0] or any(a > b for a, b in zip(starts, starts[1:])):
        raise ValueError(
            f"query_start_loc must rise from 0 to T={q.shape[0]} without decreasing, got {starts}"
        )
    out = torch.zeros_like(q)
    for b, length in enumerate(seq_lens.tolist()):
        start, end = starts[b], starts[b + 1]
        num_new = end - start
        if num_new == 0:
            continue
        if length < num_new:
            raise ValueError(
                f"sequence {b} has {num_new} new tokens but seq_lens[{b}] = {length}; the new "
                "tokens' K/V must already be in the cache, so seq_len >= number of new tokens"
            )
        k, v = gather_kv(k_cache, v_cache, block_tables[b], length)  # [L, Hkv, D]
        q_positions = torch.arange(length - num_new, length, device=q.device)  # [n_b]
        out[start:end] = _attend(q[start:end], k, v, scale, q_positions).to(q.dtype)
    return out
