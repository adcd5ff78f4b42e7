"""Input checks shared by the Triton kernels and their PyTorch references.

A Triton kernel trusts its arguments completely: a wrong shape or a head count that
does not divide evenly does not raise, it reads the wrong memory and returns garbage
(or crashes the GPU context). So every public function in this package validates
*shapes, dtypes and devices* first and raises a `ValueError` that names the argument
and says what was expected.

These checks look only at tensor metadata, never at tensor *values*: reading a value
of a CUDA tensor (`seq_lens.max().item()`) forces the CPU to wait for the GPU, and
the kernels run every layer of every step. The references in `reference.py` are the
slow, clear specification, so they additionally check values (slots in range, block
ids in range, `query_start_loc` consistent) with plain Python.

Shape names used throughout the package:
    T           tokens in the step's flat batch
    B           sequences in the batch
    Hq, Hkv     query heads, key/value heads (GQA: Hq is a multiple of Hkv)
    D           head dimension
    num_blocks  blocks in the paged KV cache
    block_size  token slots per block
"""

from __future__ import annotations

import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _require_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _require_index(name: str, t: torch.Tensor, dims: int) -> None:
    _require_tensor(name, t)
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {_shape(t)}")
    if t.dtype not in INDEX_DTYPES:
        raise ValueError(f"{name} must be int32 or int64, got {t.dtype}")


def _require_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{n}: {d}" for n, d in devices.items())
        raise ValueError(f"all tensors must be on the same device, got {listing}")


def check_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """Check a K/V cache pair and return `(num_blocks, block_size, Hkv, D)`.

    Both caches are `[num_blocks, block_size, Hkv, D]`, same shape and dtype.
    """
    _require_tensor("k_cache", k_cache)
    _require_tensor("v_cache", v_cache)
    if k_cache.dim() != 4:
        raise ValueError(
            f"k_cache must be [num_blocks, block_size, kv_heads, head_dim], got shape {_shape(k_cache)}"
        )
    if v_cache.shape != k_cache.shape:
        raise ValueError(
            f"v_cache shape {_shape(v_cache)} must equal k_cache shape {_shape(k_cache)}"
        )
    if k_cache.dtype not in FLOAT_DTYPES or v_cache.dtype != k_cache.dtype:
        raise ValueError(
            f"k_cache and v_cache must share one of {FLOAT_DTYPES}, got {k_cache.dtype} and {v_cache.dtype}"
        )
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if block_size < 1 or num_kv_heads < 1 or head_dim < 1:
        raise ValueError(f"k_cache has an empty dimension: shape {_shape(k_cache)}")
    return num_blocks, block_size, num_kv_heads, head_dim


def _check_query(q: torch.Tensor, k_cache: torch.Tensor, leading: str) -> tuple[int, int, int]:
    """Check `q` = `[leading, Hq, D]` against the cache; return `(leading, Hq, D)`."""
    _require_tensor("q", q)
    if q.dim() != 3:
        raise ValueError(f"q must be [{leading}, num_q_heads, head_dim], got shape {_shape(q)}")
    n, num_q_heads, head_dim = q.shape
    _, _, num_kv_heads, cache_head_dim = k_cache.shape
    if head_dim != cache_head_dim:
        raise ValueError(f"q head_dim {head_dim} != k_cache head_dim {cache_head_dim}")
    if num_q_heads < 1 or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_q_heads ({num_q_heads}) must be a positive multiple of num_kv_heads "
            f"({num_kv_heads}) for grouped-query attention"
        )
    if q.dtype != k_cache.dtype:
        raise ValueError(f"q dtype {q.dtype} must match the KV cache dtype {k_cache.dtype}")
    return n, num_q_heads, head_dim


def _check_scale(scale) -> None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a Python float, got {type(scale).__name__}")


def check_store_kv_args(key, value, k_cache, v_cache, slot_mapping) -> None:
    """`key`/`value` `[T, Hkv, D]`; caches `[num_blocks, block_size, Hkv, D]`; `slot_mapping` `[T]`."""
    _, _, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    _require_tensor("key", key)
    _require_tensor("value", value)
    if key.dim() != 3:
        raise ValueError(f"key must be [num_tokens, kv_heads, head_dim], got shape {_shape(key)}")
    if value.shape != key.shape:
        raise ValueError(f"value shape {_shape(value)} must equal key shape {_shape(key)}")
    if tuple(key.shape[1:]) != (num_kv_heads, head_dim):
        raise ValueError(
            f"key is [T, {key.shape[1]}, {key.shape[2]}] but the cache holds "
            f"[.., .., {num_kv_heads}, {head_dim}] (kv_heads, head_dim)"
        )
    if key.dtype != k_cache.dtype or value.dtype != k_cache.dtype:
        raise ValueError(
            f"key/value dtypes ({key.dtype}, {value.dtype}) must match the cache dtype {k_cache.dtype}"
        )
    _require_index("slot_mapping", slot_mapping, 1)
    if slot_mapping.shape[0] != key.shape[0]:
        raise ValueError(
            f"slot_mapping has {slot_mapping.shape[0]} entries but key has {key.shape[0]} tokens"
        )
    _require_same_device(key=key, value=value, k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping)


def check_decode_args(q, k_cache, v_cache, block_tables, seq_lens, scale) -> None:
    """`q` `[B, Hq, D]`; `block_tables` `[B, max_blocks]`; `seq_lens` `[B]`."""
    check_kv_cache(k_cache, v_cache)
    batch, _, _ = _check_query(q, k_cache, "B")
    _require_index("block_tables", block_tables, 2)
    _require_index("seq_lens", seq_lens, 1)
    if block_tables.shape[0] != batch or seq_lens.shape[0] != batch:
        raise ValueError(
            f"q has {batch} sequences but block_tables has {block_tables.shape[0]} rows "
            f"and seq_lens has {seq_lens.shape[0]} entries"
        )
    _check_scale(scale)
    _require_same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens)


def check_prefill_args(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale) -> None:
    """`q` `[T, Hq, D]`; `block_tables` `[B, max_blocks]`; `query_start_loc` `[B+1]`; `seq_lens` `[B]`."""
    check_kv_cache(k_cache, v_cache)
    _check_query(q, k_cache, "T")
    _require_index("block_tables", block_tables, 2)
    _require_index("query_start_loc", query_start_loc, 1)
    _require_index("seq_lens", seq_lens, 1)
    batch = seq_lens.shape[0]
    if block_tables.shape[0] != batch or query_start_loc.shape[0] != batch + 1:
        raise ValueError(
            f"seq_lens has {batch} sequences, so block_tables needs {batch} rows (got "
            f"{block_tables.shape[0]}) and query_start_loc needs {batch + 1} entries (got "
            f"{query_start_loc.shape[0]})"
        )
    _check_scale(scale)
    _require_same_device(
        q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables,
        query_start_loc=query_start_loc, seq_lens=seq_lens,
    )


def interpreter_enabled() -> bool:
    """True when Triton kernels run in the Python interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def check_launchable(t: torch.Tensor, uses_dot: bool = False) -> None:
    """Can a Triton kernel run on `t` here?

    A compiled kernel needs CUDA tensors; the interpreter works on CPU tensors. One trap:
    Triton 3.7's interpreter stores bfloat16 as raw uint16 bits (numpy has no bf16) and
    its `tl.dot` multiplies those bits as integers, so an attention kernel would return
    garbage without any error. We refuse instead (`uses_dot=True`).
    """
    if t.device.type != "cuda" and not interpreter_enabled():
        raise ValueError(
            f"Triton kernels need CUDA tensors, got a tensor on {t.device}. On a machine "
            "without a GPU, set TRITON_INTERPRET=1 before importing the kernels (importing "
            "the `kernels` package does this for you when CUDA is unavailable)."
        )
    if uses_dot and interpreter_enabled() and t.dtype == torch.bfloat16:
        raise ValueError(
            "bfloat16 attention is not supported under the Triton interpreter (its tl.dot "
            "multiplies the raw bf16 bit patterns); use float32 or float16 on CPU, or a GPU"
        )
