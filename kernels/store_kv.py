"""Triton kernel: write the new tokens' K/V into the paged KV cache (`slot_mapping`).

Every forward step produces K and V for its T new tokens, as one flat `[T, Hkv, D]`
tensor each. Before attention runs, they must be copied into the paged cache, each
token into the slot the block manager chose for it::

    slot_mapping[t] = s   ->   k_cache[s // block_size, s % block_size] = key[t]   # [Hkv, D]

In PyTorch that is one advanced-indexing assignment (`k_cache.view(-1, Hkv, D)[slots]
= key`), but it needs the padding slots filtered out first, and it is a good first
Triton kernel: one program per token, no arithmetic, just addresses.

How a Triton program sees memory: a kernel receives raw pointers plus the *strides* of
each tensor (how many elements to step to move by one along a dimension). Element
`x[i, j, k]` lives at `x_ptr + i*stride0 + j*stride1 + k*stride2`. Building a 2-D
tile of such offsets with `tl.arange` and broadcasting lets one `tl.load` fetch the
whole `[Hkv, D]` slice of a token at once. Passing strides (instead of assuming a
contiguous layout) makes the kernel correct for any view, e.g. `key` sliced out of a
fused QKV projection.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import check_launchable, check_store_kv_args


@triton.jit
def _store_kv_kernel(
    key_ptr, value_ptr,                     # [T, Hkv, D]
    k_cache_ptr, v_cache_ptr,               # [num_blocks, block_size, Hkv, D]
    slot_mapping_ptr,                       # [T]
    stride_kt, stride_kh, stride_kd,        # strides of key
    stride_vt, stride_vh, stride_vd,        # strides of value
    stride_kcb, stride_kcs, stride_kch, stride_kcd,  # strides of k_cache
    stride_vcb, stride_vcs, stride_vch, stride_vcd,  # strides of v_cache
    block_size,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,                  # NUM_KV_HEADS rounded up to a power of two
    BLOCK_D: tl.constexpr,                  # HEAD_DIM rounded up to a power of two
):
    # One program copies one token: its [Hkv, D] key slice and its [Hkv, D] value slice.
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:  # -1 marks a padding token: nothing to write.
        return
    block = slot // block_size  # which physical block
    offset = slot % block_size  # which row inside it

    # tl.arange needs a power-of-two length, so the tile is [BLOCK_H, BLOCK_D] and the
    # mask switches off the lanes beyond the real [Hkv, D].
    heads = tl.arange(0, BLOCK_H)  # [BLOCK_H]
    dims = tl.arange(0, BLOCK_D)  # [BLOCK_D]
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM)  # [BLOCK_H, BLOCK_D]

    k_src = token * stride_kt + heads[:, None] * stride_kh + dims[None, :] * stride_kd
    v_src = token * stride_vt + heads[:, None] * stride_vh + dims[None, :] * stride_vd
    k_dst = block * stride_kcb + offset * stride_kcs + heads[:, None] * stride_kch + dims[None, :] * stride_kcd
    v_dst = block * stride_vcb + offset * stride_vcs + heads[:, None] * stride_vch + dims[None, :] * stride_vcd

    k = tl.load(key_ptr + k_src, mask=mask)  # [BLOCK_H, BLOCK_D]
    v = tl.load(value_ptr + v_src, mask=mask)
    tl.store(k_cache_ptr + k_dst, k, mask=mask)
    tl.store(v_cache_ptr + v_dst, v, mask=mask)


def store_kv(key, value, k_cache, v_cache, slot_mapping) -> None:
    """Write `key`/`value` into the paged caches at `slot_mapping`, in place.

    * `key`, `value` — `[T, Hkv, D]` — this step's new K and V (any strides).
    * `k_cache`, `v_cache` — `[num_blocks, block_size, Hkv, D]` — written in place.
    * `slot_mapping` — `[T]` int32/int64 — token t goes to block `s // block_size`,
      row `s % block_size` where `s = slot_mapping[t]`; negative (`-1`) means
      "padding, skip". Slots must be `< num_blocks * block_size`: the kernel does
      not check values (that would cost a GPU->CPU sync); `store_kv_ref` does.
    Returns None.
    Raises `ValueError` on a shape, dtype or device mismatch.
    """
    check_store_kv_args(key, value, k_cache, v_cache, slot_mapping)
    check_launchable(key)
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return None
    grid = (num_tokens,)  # one program per token
    _store_kv_kernel[grid](
        key, value, k_cache, v_cache, slot_mapping,
        *key.stride(), *value.stride(), *k_cache.stride(), *v_cache.stride(),
        k_cache.shape[1],
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_H=triton.next_power_of_2(num_kv_heads),
        BLOCK_D=triton.next_power_of_2(head_dim),
    )
    return None
