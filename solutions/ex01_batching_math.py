"""Lesson 01 — solutions."""

from __future__ import annotations


def arithmetic_intensity(batch_size: int, bytes_per_param: float) -> float:
    """FLOPs per byte of weights read, for one decode step of the weight matmuls."""
    flops_per_param = 2 * batch_size          # one multiply-add per sequence
    return flops_per_param / bytes_per_param  # each parameter is read once per step


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                       bytes_per_element: int) -> int:
    """Bytes of KV cache one token occupies."""
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element


def max_batch_under_memory(memory_bytes: int, weight_bytes: int, kv_bytes_per_token: int,
                           tokens_per_sequence: int) -> int:
    """How many sequences of `tokens_per_sequence` tokens fit beside the weights."""
    free = memory_bytes - weight_bytes
    if free <= 0:
        return 0
    return free // (kv_bytes_per_token * tokens_per_sequence)


def roofline_step_time(num_params: int, bytes_per_param: float, batch_size: int,
                       bandwidth: float, peak_flops: float, kv_bytes: float = 0) -> float:
    """Lower bound on one decode step: max(memory time, compute time)."""
    memory_time = (num_params * bytes_per_param + kv_bytes) / bandwidth
    compute_time = 2 * num_params * batch_size / peak_flops
    return max(memory_time, compute_time)
