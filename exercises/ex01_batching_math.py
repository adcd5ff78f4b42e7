"""Lesson 01 — why batching works: the arithmetic behind it.

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 01 (or `python -m minillm.grading 01`).

The answer key's counterpart of `kv_bytes_per_token` is
`minillm/kv_cache/tensors.py::kv_bytes_per_token`; the roofline is the one
`benchmarks/roofline.py` prints.
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


def roofline_step_time(num_params: int, bytes_per_param: float, batch_size: int,
                       bandwidth: float, peak_flops: float, kv_bytes: float = 0) -> float:
    """Lower bound, in seconds, on one decode step: the roofline model.

    A decode step must (1) read every weight once plus `kv_bytes` of KV cache, at no
    more than `bandwidth` bytes/s, and (2) do 2 FLOPs per parameter per sequence, at
    no more than `peak_flops` FLOP/s. It cannot be faster than the slower of the two:

        time >= max(bytes read / bandwidth, FLOPs / peak_flops)

    Small batches sit on the memory term (the step time does not depend on the batch);
    past the ridge point the compute term wins and the step time grows with the batch.

    Example: 1e9 parameters in bf16 (2 bytes) on an A100 80GB SXM (2.039e12 B/s,
    312e12 FLOP/s): batch 1 → 0.98 ms (memory-bound); batch 256 → 1.64 ms
    (compute-bound).
    """
    raise NotImplementedError("Your turn: max(memory time, compute time)")
