"""Lesson 01 exercise: arithmetic intensity, KV bytes per token, max batch."""

from __future__ import annotations

import pytest

EXERCISE = "ex01_batching_math"


def test_arithmetic_intensity(ex):
    assert ex.arithmetic_intensity(1, 4) == pytest.approx(0.5)
    assert ex.arithmetic_intensity(64, 4) == pytest.approx(32.0)
    assert ex.arithmetic_intensity(16, 2) == pytest.approx(16.0)      # bf16
    # doubling the batch doubles the intensity: the weights are read once either way
    assert ex.arithmetic_intensity(8, 2) == pytest.approx(2 * ex.arithmetic_intensity(4, 2))


def test_kv_bytes_per_token(ex):
    assert ex.kv_bytes_per_token(30, 3, 64, 4) == 46_080                # SmolLM2-135M, fp32
    assert ex.kv_bytes_per_token(32, 8, 128, 2) == 131_072              # Llama-3-8B, fp16
    assert ex.kv_bytes_per_token(1, 1, 1, 1) == 2


def test_kv_bytes_agree_with_the_engine(ex):
    import torch

    from minillm.kv_cache.tensors import kv_bytes_per_token
    assert ex.kv_bytes_per_token(30, 3, 64, 2) == kv_bytes_per_token(30, 3, 64, torch.bfloat16)


def test_max_batch_under_memory(ex):
    gib = 1 << 30
    # 8 GiB, 1 GiB of weights, 46,080 B/token, 2048-token sequences → 79 sequences
    assert ex.max_batch_under_memory(8 * gib, gib, 46_080, 2048) == 79
    assert ex.max_batch_under_memory(100, 100, 1, 1) == 0
    assert ex.max_batch_under_memory(100, 200, 1, 1) == 0
    assert ex.max_batch_under_memory(1000, 0, 10, 10) == 10


def test_roofline_step_time(ex):
    a100 = dict(bandwidth=2.039e12, peak_flops=312e12)
    # 1e9 bf16 parameters: memory-bound at batch 1, compute-bound at batch 256
    assert ex.roofline_step_time(10**9, 2, 1, **a100) == pytest.approx(2e9 / 2.039e12)
    assert ex.roofline_step_time(10**9, 2, 256, **a100) == pytest.approx(2 * 256e9 / 312e12)
    # below the ridge the batch does not change the bound …
    assert ex.roofline_step_time(10**9, 2, 64, **a100) == ex.roofline_step_time(10**9, 2, 1, **a100)
    # … KV bytes do
    with_kv = ex.roofline_step_time(10**9, 2, 1, kv_bytes=1e9, **a100)
    assert with_kv == pytest.approx(3e9 / 2.039e12)
    # exactly at the ridge (bandwidth 1, peak 10, 4 bytes/param: ridge batch 20) both terms agree
    assert ex.roofline_step_time(100, 4, 20, bandwidth=1.0, peak_flops=10.0) == pytest.approx(400.0)
    assert ex.roofline_step_time(100, 4, 40, bandwidth=1.0, peak_flops=10.0) == pytest.approx(800.0)
