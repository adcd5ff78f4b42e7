"""Triton kernel: paged decode attention (one new token per sequence, GQA, online softmax).

In a decode step every running sequence brings exactly one new token. Its query
`q[b]` (`[Hq, D]`) must attend to all `seq_lens[b]` keys and values of that
sequence, which live scattered over the paged cache, block by block, as the block table
says. The work is tiny (a few multiply-adds per byte), so decode attention is
*memory-bound*: its speed is how fast the K/V bytes stream out of HBM. The design
follows from that:

* **One program per (sequence, KV head).** With grouped-query attention, `Hq / Hkv`
  query heads share one KV head. A program loads its `GROUP` query heads as a small
  `[BLOCK_G, D]` tile and streams the KV head's keys/values *once* for all of them.
  (One program per query head would read every K/V byte `GROUP` times.)
* **Walk the sequence in tiles of `BLOCK_N` positions.** For each position `p` in the
  tile the program looks up its physical block `block_tables[b, p // block_size]` and
  row `p % block_size`, then gathers the K rows: `[BLOCK_N, D]`. Because the lookup is
  per position, the tile size is independent of the cache's `block_size` (8, 16, 32,
  or not even a power of two all work), and unused block-table entries are never read.
* **Online softmax** (Milakov & Gimelshein 2018, the trick inside FlashAttention). The
  softmax denominator needs *all* scores, but we do not want to store them. Keep, per
  query head, the running maximum `m`, the running sum `l` of `exp(s - m)` and the
  running un-normalised output `acc = sum exp(s - m) * v`. When a new tile raises the
  maximum to `m_new`, the old terms are rescaled by `alpha = exp(m - m_new)`::

      m_new = max(m, max_j s_j)
      l     = l * alpha + sum_j exp(s_j - m_new)
      acc   = acc * alpha + sum_j exp(s_j - m_new) * v_j
      out   = acc / l                              (once, after the last tile)

  Subtracting the maximum keeps `exp` from overflowing. We work in base 2
  (`exp2`, with `log2(e)` folded into the scale) because the GPU has a native
  `exp2` instruction; `exp(x) = exp2(x * log2(e))` so the result is identical.

Precision: K/V/q stay in their storage dtype (fp16/bf16 halve the bytes to read);
`tl.dot` accumulates in fp32 and `m`, `l`, `acc` are fp32. For fp32 inputs we ask
for `input_precision="ieee"`: by default Triton rounds fp32 operands to TF32 (10-bit
mantissa) on tensor cores, which would cost ~1e-3 of accuracy.

Tensor-core matrix instructions work on tiles of at least 16 rows, so the group of query
heads (often 4 or 8) is padded to `BLOCK_G >= 16` rows; the extra rows load zeros and
are never stored. That wastes some arithmetic, which decode has plenty of to spare.

Limitation worth knowing: the grid has only `B * Hkv` programs. With a small batch and
a long context (B=1, 8 KV heads, 32k tokens) most of the GPU's ~100+ SMs sit idle while
8 programs walk 32k positions each. Production kernels then also split each sequence
across programs and merge the partial softmax states afterwards ("flash-decoding",
split-K); we keep the single-pass version because it is the one to understand first.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._checks import check_decode_args, check_launchable

LOG2_E = 1.0 / math.log(2.0)  # exp(x) == exp2(x * LOG2_E)
BLOCK_N = 64  # KV positions per loop iteration


@triton.jit
def _paged_decode_kernel(
    q_ptr,                                   # [B, Hq, D]
    k_cache_ptr, v_cache_ptr,                # [num_blocks, block_size, Hkv, D]
    block_tables_ptr,                        # [B, max_blocks]
    seq_lens_ptr,                            # [B]
    out_ptr,                                 # [B, Hq, D]
    qk_scale,                                # softmax scale * log2(e)
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_ks, stride_kh, stride_kd,
    stride_vb, stride_vs, stride_vh, stride_vd,
    stride_btb, stride_btn,
    stride_ob, stride_oh, stride_od,
    block_size,
    GROUP: tl.constexpr,                     # query heads per KV head (Hq // Hkv)
    HEAD_DIM: tl.constexpr,
    BLOCK_G: tl.constexpr,                   # GROUP padded to a power of two >= 16
    BLOCK_D: tl.constexpr,                   # HEAD_DIM padded to a power of two
    BLOCK_N: tl.constexpr,                   # KV positions per iteration
    DOT_PRECISION: tl.constexpr,             # "ieee" for fp32 inputs (no TF32 rounding)
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)

    # --- the GROUP query heads that share this KV head: a [BLOCK_G, BLOCK_D] tile -------
    rows = tl.arange(0, BLOCK_G)  # [BLOCK_G] row r = query head kv_head * GROUP + r
    dims = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    row_mask = rows < GROUP
    dim_mask = dims < HEAD_DIM
    q_heads = kv_head * GROUP + rows  # [BLOCK_G]
    q_offsets = seq.to(tl.int64) * stride_qb + q_heads[:, None] * stride_qh + dims[None, :] * stride_qd
    q = tl.load(q_ptr + q_offsets, mask=row_mask[:, None] & dim_mask[None, :], other=0.0)  # [BLOCK_G, BLOCK_D]

    # --- online-softmax state, fp32 ------------------------------------------------------
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)  # running max (log2 units)
    l = tl.zeros([BLOCK_G], dtype=tl.float32)  # running sum of exp2(s - m)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)  # running sum of exp2(s - m) * v

    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_btb
    for start in range(0, seq_len, BLOCK_N):
        positions = start + tl.arange(0, BLOCK_N)  # [BLOCK_N] absolute token positions
        pos_mask = positions < seq_len
        # Paged lookup, per position: physical block id and row inside the block.
        # Masked lanes (past the end) never touch the block table.
        block_ids = tl.load(block_table_row + (positions // block_size) * stride_btn,
                            mask=pos_mask, other=0).to(tl.int64)  # [BLOCK_N]
        rows_in_block = positions % block_size  # [BLOCK_N]
        kv_mask = pos_mask[:, None] & dim_mask[None, :]  # [BLOCK_N, BLOCK_D]
        k_offsets = (block_ids[:, None] * stride_kb + rows_in_block[:, None] * stride_ks
                     + kv_head * stride_kh + dims[None, :] * stride_kd)
        k = tl.load(k_cache_ptr + k_offsets, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]

        # Scores of every query head in the group against every key of the tile.
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_G, BLOCK_N]
        s = tl.where(pos_mask[None, :], s, float("-inf"))

        m_new = tl.maximum(m, tl.max(s, axis=1))  # [BLOCK_G]
        alpha = tl.exp2(m - m_new)  # [BLOCK_G] rescales the old state; 0 on the first tile
        p = tl.exp2(s - m_new[:, None])  # [BLOCK_G, BLOCK_N] un-normalised probabilities
        l = l * alpha + tl.sum(p, axis=1)

        v_offsets = (block_ids[:, None] * stride_vb + rows_in_block[:, None] * stride_vs
                     + kv_head * stride_vh + dims[None, :] * stride_vd)
        v = tl.load(v_cache_ptr + v_offsets, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m = m_new

    # An empty sequence (seq_len == 0, e.g. a padded batch slot) has l == 0: write zeros.
    l = tl.where(l > 0.0, l, 1.0)
    out = acc / l[:, None]  # [BLOCK_G, BLOCK_D]
    out_offsets = seq.to(tl.int64) * stride_ob + q_heads[:, None] * stride_oh + dims[None, :] * stride_od
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & dim_mask[None, :])


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale):
    """Decode attention over a paged KV cache: one query token per sequence.

    * `q` — `[B, Hq, D]` — query of each sequence's newest token.
    * `k_cache`, `v_cache` — `[num_blocks, block_size, Hkv, D]`; the newest token's K/V
      must already be stored (`store_kv`), so it attends to itself.
    * `block_tables` — `[B, max_blocks]` int32 — physical block of each logical block.
      Entries past `ceil(seq_lens[b] / block_size)` are never read.
    * `seq_lens` — `[B]` int32 — positions in each sequence's cache (0 gives zeros).
    * `scale` — softmax scale, usually `1 / sqrt(D)`.
    Returns `[B, Hq, D]` in `q.dtype`.
    Raises `ValueError` on a shape, dtype or device mismatch, or `Hq % Hkv != 0`.
    """
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens, scale)
    check_launchable(q, uses_dot=True)
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    out = torch.empty_like(q)
    if batch == 0:
        return out
    group = num_q_heads // num_kv_heads
    grid = (batch, num_kv_heads)  # one program per (sequence, KV head)
    _paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, out,
        float(scale) * LOG2_E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(), *out.stride(),
        k_cache.shape[1],
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_N=BLOCK_N,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out
