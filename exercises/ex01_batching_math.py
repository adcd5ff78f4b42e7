"""Lesson 01 — why batching works: the arithmetic behind it.

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 01 (or `python -m minillm.grading 01`).
"""

from __future__ import annotations


def arithmetic_intensity(batch_size: int, bytes_per_param: float) -> float:
    """FLOPs per byte of weights read, for one decode step of the weight matmuls.

    One decode step multiplies every weight once per sequence in the batch: each
    parameter costs 2 FLOPs (multiply + add) per sequence, and is read from memory
    once per step, whatever the batch size (`bytes_per_param` bytes each).

    Example: fp32 (4 bytes), batch 1 → 0.5 FLOP/byte; batch 64 → 32 FLOP/byte.
    """
    raise NotImplementedError("Your turn: FLOPs per step / bytes read per step")


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                       bytes_per_element: int) -> int:
    """Bytes of KV cache one token occupies: a key AND a value vector per KV head, per layer.

    Example: SmolLM2-135M (30 layers, 3 KV heads, head dim 64) in fp32 → 46,080 bytes.
    """
    raise NotImplementedError("Your turn: 2 (K and V) × ...")


def max_batch_under_memory(memory_bytes: int, weight_bytes: int, kv_bytes_per_token: int,
                           tokens_per_sequence: int) -> int:
    """How many sequences of `tokens_per_sequence` tokens fit beside the weights.

    Memory left after the weights is shared by the sequences' KV caches. Return the
    whole number of sequences that fit (0 if the weights alone do not fit).
    """
    raise NotImplementedError("Your turn: (memory - weights) // per-sequence KV bytes")
