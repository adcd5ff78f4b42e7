"""Lesson 07 — paged decode attention, written by you in Triton.

Your turn: two pieces, then run the check cell at the end of lesson 07 (or
`python -m minillm.grading 07`).

1. `online_softmax_step` — the online-softmax update in plain PyTorch. Get the
   arithmetic right here, where you can print every number.
2. The body of `paged_decode_kernel` — the same update inside a Triton kernel that
   walks one sequence's block table, one KV-cache block per loop iteration.

The wrapper `paged_decode_attention` is written for you: it checks the arguments, picks
the block sizes and launches the grid. It has the same signature as
`kernels.paged_decode_attention_ref`, which is what the tests compare against.

On a machine without a GPU the kernel runs in Triton's interpreter (importing `kernels`
below sets `TRITON_INTERPRET=1` before triton is imported). There you may `print(...)`
inside the kernel to look at a tile. A load or store *outside* its tensor crashes the
interpreter's process, so the tests run your kernel in a child process: a crash or an
endless loop fails the kernel tests instead of taking the grader down.

The answer key's kernel is `kernels/paged_decode.py::paged_decode_attention` (same
arguments); its PyTorch reference is `minillm/attention/reference.py`.
"""

from __future__ import annotations

import torch

import kernels  # noqa: F401  (must come before triton: switches the interpreter on without CUDA)
import triton
import triton.language as tl
from kernels._checks import check_decode_args, check_launchable


# ---------------------------------------------------------------------- task 1

def online_softmax_step(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor,
                        scores: torch.Tensor, values: torch.Tensor):
    """Fold one block of keys into a running softmax-weighted sum of values.

    Attention for one query is ``softmax(scores) @ values`` over *all* its keys. We
    want it while seeing the keys one block at a time and never storing the scores.
    Keep three numbers per query:

    * ``m``   — the largest score seen so far (starts at ``-inf``);
    * ``l``   — ``sum_j exp(s_j - m)`` over the keys seen so far (starts at 0);
    * ``acc`` — ``sum_j exp(s_j - m) * v_j`` over the keys seen so far (starts at 0).

    After the last block, the attention output is ``acc / l``.

    A new block can raise the maximum to ``m_new``. Every old term was computed as
    ``exp(s - m)``; it should now read ``exp(s - m_new)``, which is the old one times
    ``alpha = exp(m - m_new)``. So: rescale ``l`` and ``acc`` by ``alpha``, then add
    the new block's terms ``p_j = exp(s_j - m_new)``. Subtracting the maximum also
    keeps ``exp`` from overflowing: scores of 1000 must not give ``inf``.

    Args:
        m: ``[]`` running max.   l: ``[]`` running sum.   acc: ``[D]`` running output.
        scores: ``[n]`` this block's scores (``-inf`` marks a key to ignore).
        values: ``[n, D]`` this block's values.
    Returns:
        ``(m_new, l_new, acc_new)``, shapes as the inputs. Do not modify the inputs.

    Example: scores [1, 2] then [3]: m = 3, l = e^-2 + e^-1 + 1, and
    acc / l == softmax([1, 2, 3]) @ values.
    """
    raise NotImplementedError("Your turn: m_new = max(m, max(scores)); alpha = exp(m - m_new); ...")


# ---------------------------------------------------------------------- task 2

@triton.jit
def paged_decode_kernel(
    q_ptr,                                # [B, Hq, D]
    k_cache_ptr, v_cache_ptr,             # [num_blocks, BLOCK_SIZE, Hkv, D] each
    block_tables_ptr,                     # [B, max_blocks] physical block ids
    seq_lens_ptr,                         # [B] tokens cached per sequence (>= 1)
    out_ptr,                              # [B, Hq, D]
    scale,                                # softmax scale, 1 / sqrt(D)
    stride_qb, stride_qh,                 # strides of q (the last dimension is contiguous)
    stride_cb, stride_cs, stride_ch,      # strides of k_cache and v_cache (identical)
    stride_tb,                            # row stride of block_tables
    stride_ob, stride_oh,                 # strides of out
    GROUP: tl.constexpr,                  # query heads per KV head (Hq // Hkv)
    BLOCK_SIZE: tl.constexpr,             # token slots per KV-cache block (a power of two)
    HEAD_DIM: tl.constexpr,               # D
    BLOCK_D: tl.constexpr,                # D rounded up to a power of two
):
    """One program = one (sequence, query head): its output row ``out[seq, head, :]``.

    The grid is ``(B, Hq)``. Step by step (``tl.arange`` lengths must be powers of two,
    which is why there is a ``BLOCK_D >= HEAD_DIM`` and a mask):

    1. ``seq = tl.program_id(0)``, ``head = tl.program_id(1)``; with grouped-query
       attention this head reads KV head ``head // GROUP``.
    2. Load the query row: ``dims = tl.arange(0, BLOCK_D)``, masked by
       ``dims < HEAD_DIM``; convert to fp32. Load ``seq_len`` from ``seq_lens_ptr``.
    3. Online-softmax state in fp32: ``m = tl.full([], float("-inf"), tl.float32)``,
       ``l = tl.full([], 0.0, tl.float32)``, ``acc = tl.zeros([BLOCK_D], tl.float32)``.
    4. For each *logical* block ``i`` in ``range(0, tl.cdiv(seq_len, BLOCK_SIZE))``:
       a. its physical block: ``tl.load(block_tables_ptr + seq * stride_tb + i)``;
       b. its token positions ``i * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)``: those
          ``>= seq_len`` (the last block is usually not full) must not count;
       c. load K as a ``[BLOCK_SIZE, BLOCK_D]`` tile: element (slot r, dim d) lives at
          ``physical * stride_cb + r * stride_cs + kv_head * stride_ch + d``; mask
          both the invalid slots and the padded dims (``other=0.0``);
       d. scores ``[BLOCK_SIZE]`` = (K · q) * scale, ``tl.sum(k * q[None, :], axis=1)``;
          set invalid slots to ``-inf`` with ``tl.where``;
       e. the update of task 1 (``tl.max``, ``tl.exp``, ``tl.sum``); load V with the
          same offsets and mask and add ``sum_j p_j * v_j`` to ``acc``.
    5. Store ``acc / l`` (cast to ``out_ptr.dtype.element_ty``) into ``out[seq, head]``,
       masked by ``dims < HEAD_DIM``.

    Pointers are plain addresses: ``q_ptr + seq * stride_qb + head * stride_qh + dims``
    is the address of every element of ``q[seq, head, :]`` at once. Cast a loaded
    block id with ``.to(tl.int64)`` before multiplying it by a stride.
    """
    raise NotImplementedError("Your turn: write the kernel body (steps 1-5 of the docstring)")


# ---------------------------------------------------------------------- given: the launch

def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale):
    """Decode attention over a paged KV cache with `paged_decode_kernel` (given).

    Same signature and result as `kernels.paged_decode_attention_ref`:
    ``q`` ``[B, Hq, D]``, caches ``[num_blocks, block_size, Hkv, D]``, ``block_tables``
    ``[B, max_blocks]``, ``seq_lens`` ``[B]`` (each >= 1) → ``[B, Hq, D]``.
    """
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens, scale)
    check_launchable(q)
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two for this kernel, got {block_size}")
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    block_tables, seq_lens = block_tables.contiguous(), seq_lens.contiguous()
    batch, num_q_heads, _ = q.shape
    # NaN, not empty memory: an output row your kernel forgets to write fails loudly.
    out = torch.full_like(q, float("nan"))
    if batch == 0:
        return out
    grid = (batch, num_q_heads)  # one program per (sequence, query head)
    paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, out, float(scale),
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        GROUP=num_q_heads // num_kv_heads,
        BLOCK_SIZE=block_size,
        HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim),
    )
    return out
