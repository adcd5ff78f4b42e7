"""Triton kernel: varlen causal attention over the paged KV cache (prefill chunks + decodes).

With chunked prefill (lesson 06) one forward step carries a *flat* batch of T query
tokens: for every sequence b, its `n_b` newest tokens, laid end to end::

    q rows:  [ seq0: 1 decode | seq1: 96-token chunk | seq2: 1 decode | seq3: whole prompt ]
    query_start_loc = [0, 1, 97, 98, 98 + len(prompt)]           # [B+1], cumulative n_b

The new tokens' K/V were already written to the cache by `store_kv`, so sequence b's
cache holds `seq_lens[b]` positions, its chunk starts at position
`ctx_b = seq_lens[b] - n_b` (the tokens cached in earlier steps), and query i sits at
absolute position `ctx_b + i`. Causality: it sees keys `0 .. ctx_b + i`. A chunk may
start in the middle of a block (`ctx_b % block_size != 0`): nothing special happens,
because every key position is looked up through the block table on its own.

**Grid.** One program handles one *query tile* (`BLOCK_Q` consecutive tokens of one
sequence) for one KV head, and streams that sequence's K/V in tiles of `BLOCK_N`
positions with the online softmax (see `paged_decode.py`). Its rows are the
`BLOCK_Q x GROUP` (token, query head) pairs that share the KV head: row r is token
`r // GROUP`, query head `kv_head * GROUP + r % GROUP`. So each K/V tile is read once
per query tile for the whole GQA group.

How many query tiles are there? `sum_b ceil(n_b / BLOCK_Q)` depends on the lengths,
which live on the GPU; reading them on the CPU would stall the pipeline. Instead we
number the tiles so that sequence b's tiles start at

    first_tile(b) = query_start_loc[b] // BLOCK_Q + b

It is strictly increasing in b, and it leaves room for all `ceil(n_b / BLOCK_Q)` tiles
of sequence b before `first_tile(b + 1)`: with `s = query_start_loc[b]`,
`(s + n_b) // BLOCK_Q - s // BLOCK_Q >= n_b // BLOCK_Q >= ceil(n_b / BLOCK_Q) - 1`.
The last tile of the last sequence is then at most `T // BLOCK_Q + B - 1`, so we
launch `T // BLOCK_Q + B` tiles (both known on the host, no sync), and each program
finds its sequence with a binary search over `first_tile`. The few programs that land
in a gap (at most one per sequence) return at once.

Example, `BLOCK_Q = 16`, `query_start_loc = [0, 1, 41, 42]` (decode, 40-token chunk,
decode): `first_tile = [0, 1, 4]`; sequence 1 owns tiles 1, 2, 3 (tokens 0-15,
16-31, 32-39); the grid has `42 // 16 + 3 = 5` tiles and tile 4 is sequence 2's.

**Loop bounds.** A tile's last query is at `ctx_b + min(first_token + BLOCK_Q, n_b) - 1`,
so it never needs keys past that: the loop stops there instead of at `seq_lens[b]`.
Inside the loop, a key is visible to a row when `key_pos <= query_pos` (the causal
mask), which also hides positions beyond the end.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._checks import check_launchable, check_prefill_args

LOG2_E = 1.0 / math.log(2.0)  # exp(x) == exp2(x * LOG2_E)
BLOCK_M = 64  # rows (token, query head) per program
BLOCK_N = 32  # KV positions per loop iteration


@triton.jit
def _find_sequence(query_start_loc_ptr, num_seqs, tile, BLOCK_Q: tl.constexpr):
    """Binary search: the last sequence b with `query_start_loc[b] // BLOCK_Q + b <= tile`."""
    # lo and hi change inside a runtime loop, so start them as int32 tensors: their
    # type is then the same before and after every iteration.
    lo = tl.full([], 0, tl.int32)  # invariant: the answer lies in [lo, hi)
    hi = tl.full([], num_seqs, tl.int32)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        first_tile = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        go_right = first_tile <= tile
        lo = tl.where(go_right, mid, lo)
        hi = tl.where(go_right, hi, mid)
    return lo


@triton.jit
def _paged_prefill_kernel(
    q_ptr,                                   # [T, Hq, D]
    k_cache_ptr, v_cache_ptr,                # [num_blocks, block_size, Hkv, D]
    block_tables_ptr,                        # [B, max_blocks]
    query_start_loc_ptr,                     # [B+1]
    seq_lens_ptr,                            # [B]
    out_ptr,                                 # [T, Hq, D]
    qk_scale,                                # softmax scale * log2(e)
    stride_qt, stride_qh, stride_qd,
    stride_kb, stride_ks, stride_kh, stride_kd,
    stride_vb, stride_vs, stride_vh, stride_vd,
    stride_btb, stride_btn,
    stride_ot, stride_oh, stride_od,
    block_size,
    num_seqs,
    GROUP: tl.constexpr,                     # query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr,                   # query tokens per tile = BLOCK_M // GROUP
    BLOCK_M: tl.constexpr,                   # rows per program (power of two)
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)

    # --- which sequence, which of its query tokens ---------------------------------------
    seq = _find_sequence(query_start_loc_ptr, num_seqs, tile, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)  # first row of this sequence in q
    num_new = tl.load(query_start_loc_ptr + seq + 1) - q_start  # n_b
    first_token = (tile - (q_start // BLOCK_Q + seq)) * BLOCK_Q  # within the chunk
    if first_token >= num_new:  # a gap in the tile numbering (or an empty sequence)
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - num_new  # positions cached before this step

    # --- the tile's rows: (token, query head) pairs sharing kv_head ----------------------
    rows = tl.arange(0, BLOCK_M)  # [BLOCK_M]
    dims = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    token = first_token + rows // GROUP  # [BLOCK_M] index within the chunk
    q_heads = kv_head * GROUP + rows % GROUP  # [BLOCK_M]
    row_mask = (rows < BLOCK_Q * GROUP) & (token < num_new)
    dim_mask = dims < HEAD_DIM
    q_rows = (q_start + token).to(tl.int64)  # [BLOCK_M] row of q / out
    io_mask = row_mask[:, None] & dim_mask[None, :]  # [BLOCK_M, BLOCK_D]
    q_offsets = q_rows[:, None] * stride_qt + q_heads[:, None] * stride_qh + dims[None, :] * stride_qd
    q = tl.load(q_ptr + q_offsets, mask=io_mask, other=0.0)  # [BLOCK_M, BLOCK_D]
    # Absolute position of each row's token. Rows past the chunk's end are clamped to
    # the last token so that they, too, see at least key 0 (no all -inf rows -> no NaN).
    q_pos = context_len + tl.minimum(token, num_new - 1)  # [BLOCK_M]

    # --- online softmax over keys 0 .. (last query position of the tile) ---------------
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    kv_end = context_len + tl.minimum(first_token + BLOCK_Q, num_new)  # exclusive
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_btb
    for start in range(0, kv_end, BLOCK_N):
        positions = start + tl.arange(0, BLOCK_N)  # [BLOCK_N] key positions
        pos_mask = positions < kv_end
        block_ids = tl.load(block_table_row + (positions // block_size) * stride_btn,
                            mask=pos_mask, other=0).to(tl.int64)  # [BLOCK_N]
        rows_in_block = positions % block_size
        kv_mask = pos_mask[:, None] & dim_mask[None, :]  # [BLOCK_N, BLOCK_D]
        k_offsets = (block_ids[:, None] * stride_kb + rows_in_block[:, None] * stride_ks
                     + kv_head * stride_kh + dims[None, :] * stride_kd)
        k = tl.load(k_cache_ptr + k_offsets, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]

        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_M, BLOCK_N]
        visible = positions[None, :] <= q_pos[:, None]  # [BLOCK_M, BLOCK_N] causal mask
        s = tl.where(visible, s, float("-inf"))

        m_new = tl.maximum(m, tl.max(s, axis=1))  # [BLOCK_M]
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])  # [BLOCK_M, BLOCK_N]
        l = l * alpha + tl.sum(p, axis=1)

        v_offsets = (block_ids[:, None] * stride_vb + rows_in_block[:, None] * stride_vs
                     + kv_head * stride_vh + dims[None, :] * stride_vd)
        v = tl.load(v_cache_ptr + v_offsets, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m = m_new

    out = acc / l[:, None]  # [BLOCK_M, BLOCK_D]; every stored row saw key 0, so l > 0
    out_offsets = q_rows[:, None] * stride_ot + q_heads[:, None] * stride_oh + dims[None, :] * stride_od
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=io_mask)


def paged_prefill_attention(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale):
    """Causal attention for a flat batch mixing prefill chunks and decodes, over paged KV.

    * `q` — `[T, Hq, D]` — rows `query_start_loc[b] : query_start_loc[b+1]` are the
      `n_b` newest tokens of sequence b.
    * `k_cache`, `v_cache` — `[num_blocks, block_size, Hkv, D]`, with the new tokens'
      K/V already stored.
    * `block_tables` — `[B, max_blocks]` int32; entries past the sequence's last block
      are never read.
    * `query_start_loc` — `[B+1]` int32, from 0 rising to T.
    * `seq_lens` — `[B]` int32, cached positions per sequence including the new
      tokens (so `seq_lens[b] >= n_b`).
    * `scale` — softmax scale.
    Returns `[T, Hq, D]` in `q.dtype`: query i of sequence b attends to positions
      `0 .. seq_lens[b] - n_b + i`.
    Raises `ValueError` on a shape, dtype or device mismatch, or `Hq % Hkv != 0`. Values
      (`query_start_loc` order, `seq_lens >= n_b`) are not checked here, to avoid
      a GPU->CPU sync; `paged_prefill_attention_ref` checks them.
    """
    check_prefill_args(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale)
    check_launchable(q, uses_dot=True)
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    num_seqs = seq_lens.shape[0]
    out = torch.empty_like(q)
    if num_tokens == 0 or num_seqs == 0:
        return out
    group = num_q_heads // num_kv_heads
    block_m = max(BLOCK_M, triton.next_power_of_2(group))  # at least one token per tile
    block_q = block_m // group  # query tokens per tile
    grid = (num_tokens // block_q + num_seqs, num_kv_heads)  # see "Grid" in the module doc
    _paged_prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, out,
        float(scale) * LOG2_E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(), *out.stride(),
        k_cache.shape[1],
        num_seqs,
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_N=BLOCK_N,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out
