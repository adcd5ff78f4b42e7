"""Tests for kernels/: Triton kernels vs PyTorch references vs a naive dense oracle.

Three layers of checking:
  1. naive dense oracle (this file): per-sequence K/V kept as plain tensors, attention
     written as explicit loops with an explicit max-subtracted softmax, in float64;
  2. the references (kernels/reference.py) must match the oracle: the spec is right;
  3. the Triton kernels must match the references.

On CPU the kernels run under the Triton interpreter (TRITON_INTERPRET=1, set below
before `kernels` is imported, as the package itself also does). Sizes are small because
the interpreter runs every program of the grid in Python. On a CUDA machine the same
tests run on the GPU and also cover fp16/bf16.

Test data is hostile on purpose: physical blocks are shuffled, every cache slot that
holds no token is NaN, and unused block-table entries are -1 or point at a NaN block.
A kernel that reads past a sequence's end, or reads an unused block-table entry without
masking, produces NaN and fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any @triton.jit runs

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kernels import (  # noqa: E402
    paged_decode_attention,
    paged_decode_attention_ref,
    paged_prefill_attention,
    paged_prefill_attention_ref,
    store_kv,
    store_kv_ref,
    triton_available,
)

pytestmark = [
    pytest.mark.kernels,
    pytest.mark.skipif(not triton_available(), reason="Triton cannot run here"),
]

ON_CUDA = torch.cuda.is_available()
# bf16 arithmetic needs compute capability 8.0 (minillm/model/device.py); older GPUs run fp16.
ON_BF16_GPU = ON_CUDA and torch.cuda.get_device_capability() >= (8, 0)
REPO_ROOT = Path(__file__).resolve().parents[1]

# Max-abs-error tolerances, kernel vs reference. Both see the *same* rounded inputs and
# both accumulate in fp32, so only the kernel's own roundings differ:
#   fp32: summation order only (online softmax vs one softmax) -> ~1e-6; we allow 1e-4.
#   fp16: P is cast to fp16 before the P@V dot (relative error <= 2^-11 ~ 4.9e-4 per
#         weight) and the output is rounded to fp16 (again <= 2^-11 relative). Outputs
#         are weighted means of N(0,1) values, |out| < ~4, so each rounding adds at most
#         ~2e-3 and in practice far less: 5e-3.
#   bf16: the same two roundings with 8 significant bits (<= 2^-8 ~ 3.9e-3 relative),
#         8x coarser than fp16: 3e-2.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.fixture
def device() -> torch.device:
    """Where the kernels run: the GPU when there is one, else CPU under the interpreter."""
    return torch.device("cuda" if ON_CUDA else "cpu")


def dtypes_for_device():
    """fp32 and fp16 everywhere; bf16 attention only on a GPU with bf16 (the interpreter's
    tl.dot cannot do bf16, see kernels/_checks.py; test_bf16_attention_refused_by_interpreter;
    a GPU below compute capability 8.0 has no bf16 and the engine runs fp16 there)."""
    gpu_only = pytest.mark.skipif(not ON_BF16_GPU, reason="bf16 attention needs a GPU with bf16 "
                                  "(compute capability >= 8.0; the interpreter's tl.dot has none)")
    return [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=gpu_only)]


# --------------------------------------------------------------------------------------
# test data: a paged cache built with plain Python indexing (independent of store_kv)
# --------------------------------------------------------------------------------------


class PagedBatch:
    """Dense per-sequence K/V plus the same data scattered into a paged cache."""

    def __init__(self, seq_lens, block_size, num_kv_heads, head_dim, dtype, device, seed):
        gen = torch.Generator().manual_seed(seed)
        blocks_needed = [-(-length // block_size) for length in seq_lens]
        num_blocks = sum(blocks_needed) + 2  # +2 blocks that no sequence owns
        max_blocks = max(blocks_needed, default=0) + 2  # +2 columns never used
        physical = torch.randperm(num_blocks, generator=gen).tolist()  # shuffled blocks
        poison_block = physical[-1]  # never assigned: stays NaN

        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache = torch.full(shape, float("nan"), dtype=dtype)
        self.v_cache = torch.full(shape, float("nan"), dtype=dtype)
        self.block_tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
        self.dense_k, self.dense_v = [], []  # [L, Hkv, D] per sequence, dtype-rounded
        next_block = 0
        for b, length in enumerate(seq_lens):
            if b % 2:  # odd rows: unused entries point at the NaN block instead of -1
                self.block_tables[b, :] = poison_block
            for j in range(blocks_needed[b]):
                self.block_tables[b, j] = physical[next_block]
                next_block += 1
            k = torch.randn(length, num_kv_heads, head_dim, generator=gen).to(dtype)
            v = torch.randn(length, num_kv_heads, head_dim, generator=gen).to(dtype)
            for pos in range(length):
                block = int(self.block_tables[b, pos // block_size])
                self.k_cache[block, pos % block_size] = k[pos]
                self.v_cache[block, pos % block_size] = v[pos]
            self.dense_k.append(k)
            self.dense_v.append(v)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32)
        for name in ("k_cache", "v_cache", "block_tables", "seq_lens"):
            setattr(self, name, getattr(self, name).to(device))


def strided_queries(num_rows, num_q_heads, head_dim, dtype, device, seed):
    """``q`` ``[num_rows, Hq, D]`` as a non-contiguous view, like q sliced out of a fused
    QKV projection output."""
    gen = torch.Generator().manual_seed(seed)
    fused = torch.randn(num_rows, num_q_heads + 2, head_dim, generator=gen).to(dtype).to(device)
    q = fused[:, 1 : num_q_heads + 1]  # [num_rows, Hq, D], row stride (Hq + 2) * D
    assert num_rows <= 1 or not q.is_contiguous()
    return q


def naive_attention(q, dense_k, dense_v, q_positions, scale):
    """Oracle: explicit loops, explicit softmax, float64. q ``[n, Hq, D]`` of one sequence."""
    n, num_q_heads, head_dim = q.shape
    group = num_q_heads // dense_k.shape[1]
    out = torch.empty(n, num_q_heads, head_dim, dtype=torch.float64)
    for i in range(n):
        visible = q_positions[i] + 1  # keys 0 .. q_positions[i]
        for h in range(num_q_heads):
            k = dense_k[:visible, h // group].double()  # [visible, D]
            v = dense_v[:visible, h // group].double()
            scores = (k @ q[i, h].double().cpu()) * scale  # [visible]
            weights = torch.exp(scores - scores.max())
            weights = weights / weights.sum()
            out[i, h] = weights @ v
    return out


def max_error(a, b) -> float:
    if a.numel() == 0:
        return 0.0
    return (a.double().cpu() - b.double().cpu()).abs().max().item()


# --------------------------------------------------------------------------------------
# store_kv
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block_size, num_kv_heads, head_dim, index_dtype",
    [(8, 2, 64, torch.int32), (16, 1, 128, torch.int64), (32, 3, 64, torch.int32)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_store_kv_writes_slots_and_skips_padding(device, block_size, num_kv_heads, head_dim, index_dtype, dtype):
    gen = torch.Generator().manual_seed(block_size)
    num_blocks, num_tokens = 4, 11
    # key/value as strided views (every other token of a bigger tensor).
    key = torch.randn(2 * num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(device)[::2]
    value = torch.randn(2 * num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(device)[::2]
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[[1, 4, 10]] = -1  # padding tokens
    slot_mapping = slots.to(index_dtype).to(device)

    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_before = torch.randn(shape, generator=gen).to(dtype).to(device)
    v_before = torch.randn(shape, generator=gen).to(dtype).to(device)
    k_ref, v_ref = k_before.clone(), v_before.clone()
    k_out, v_out = k_before.clone(), v_before.clone()

    assert store_kv_ref(key, value, k_ref, v_ref, slot_mapping) is None
    assert store_kv(key, value, k_out, v_out, slot_mapping) is None

    # The reference against an independent, explicit expectation.
    k_expected, v_expected = k_before.clone(), v_before.clone()
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            k_expected[slot // block_size, slot % block_size] = key[t]
            v_expected[slot // block_size, slot % block_size] = value[t]
    assert torch.equal(k_ref, k_expected) and torch.equal(v_ref, v_expected)
    # The kernel copies bits: exact equality, and -1 tokens leave the cache untouched.
    assert torch.equal(k_out, k_ref) and torch.equal(v_out, v_ref)
    written = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    untouched = ~written.view(num_blocks, block_size).to(device)
    assert torch.equal(k_out[untouched], k_before[untouched])
    assert torch.equal(v_out[untouched], v_before[untouched])


def test_store_kv_all_padding_and_empty_batch(device):
    k_cache = torch.randn(2, 8, 2, 64, device=device)
    v_cache = torch.randn(2, 8, 2, 64, device=device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    key = torch.randn(3, 2, 64, device=device)
    store_kv(key, key, k_cache, v_cache, torch.full((3,), -1, dtype=torch.int32, device=device))
    store_kv(key[:0], key[:0], k_cache, v_cache, torch.empty(0, dtype=torch.int64, device=device))
    assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)


def test_store_kv_ref_rejects_out_of_range_slot():
    cache = torch.zeros(2, 8, 1, 64)
    key = torch.zeros(1, 1, 64)
    with pytest.raises(ValueError, match="outside the cache"):
        store_kv_ref(key, key, cache, cache.clone(), torch.tensor([16]))


# --------------------------------------------------------------------------------------
# decode: (block_size, Hq, Hkv, D, seq_lens) — GQA ratios 1, 3, 4; D 64 and 128;
# lengths that are not block multiples, a single token, one exactly a block multiple.
# --------------------------------------------------------------------------------------

DECODE_CASES = [
    pytest.param(8, 4, 4, 64, [1, 8, 13, 70], id="bs8-gqa1-d64"),
    pytest.param(16, 6, 2, 128, [5, 33, 64, 100], id="bs16-gqa3-d128"),
    pytest.param(32, 8, 2, 64, [31, 1, 97], id="bs32-gqa4-d64"),
    pytest.param(16, 4, 1, 128, [47, 2], id="bs16-gqa4-d128-mqa"),
]


@pytest.mark.parametrize("block_size, num_q_heads, num_kv_heads, head_dim, seq_lens", DECODE_CASES)
def test_decode_reference_matches_naive(block_size, num_q_heads, num_kv_heads, head_dim, seq_lens):
    batch = PagedBatch(seq_lens, block_size, num_kv_heads, head_dim, torch.float32, "cpu", seed=1)
    q = strided_queries(len(seq_lens), num_q_heads, head_dim, torch.float32, "cpu", seed=2)
    scale = head_dim**-0.5
    out = paged_decode_attention_ref(q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, scale)
    for b, length in enumerate(seq_lens):
        expected = naive_attention(q[b : b + 1], batch.dense_k[b], batch.dense_v[b], [length - 1], scale)
        assert max_error(out[b : b + 1], expected) < 1e-5


@pytest.mark.parametrize("block_size, num_q_heads, num_kv_heads, head_dim, seq_lens", DECODE_CASES)
@pytest.mark.parametrize("dtype", dtypes_for_device())
def test_decode_kernel_matches_reference(device, dtype, block_size, num_q_heads, num_kv_heads, head_dim, seq_lens):
    batch = PagedBatch(seq_lens, block_size, num_kv_heads, head_dim, dtype, device, seed=3)
    q = strided_queries(len(seq_lens), num_q_heads, head_dim, dtype, device, seed=4)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, head_dim**-0.5)
    out = paged_decode_attention(*args)
    expected = paged_decode_attention_ref(*args)
    assert out.shape == q.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    assert max_error(out, expected) <= TOLERANCE[dtype]


def test_decode_empty_sequence_gives_zeros(device):
    batch = PagedBatch([9, 0], 8, 2, 64, torch.float32, device, seed=5)
    q = torch.randn(2, 2, 64, device=device)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens, 0.125)
    out = paged_decode_attention(*args)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert max_error(out, paged_decode_attention_ref(*args)) <= 1e-4


# --------------------------------------------------------------------------------------
# prefill / mixed batches: (block_size, Hq, Hkv, D, [(n_new, seq_len) per sequence])
# A chunk starts at position seq_len - n_new; "mid-block" means that is not a multiple
# of block_size. Whole prompts longer than one query tile exercise several tiles.
# --------------------------------------------------------------------------------------

PREFILL_CASES = [
    # decode | chunk starting at 25 (mid-block) | whole prompt, 4 tiles | 1-token prompt
    pytest.param(16, 8, 2, 64, [(1, 37), (20, 45), (50, 50), (1, 1)], id="bs16-gqa4-d64-mixed"),
    # whole prompt | decode | chunk starting at 23 (mid-block) | empty | decode
    pytest.param(8, 3, 3, 128, [(12, 12), (1, 9), (7, 30), (0, 5), (1, 16)], id="bs8-gqa1-d128-mixed"),
    # whole prompt | decode | chunk starting at 32 (block-aligned) | chunk at 3 (mid-block)
    pytest.param(32, 12, 4, 64, [(40, 40), (1, 65), (9, 41), (30, 33)], id="bs32-gqa3-d64-mixed"),
    # one prompt longer than a query tile with GQA 1 (64 tokens per tile)
    pytest.param(16, 2, 2, 64, [(70, 75)], id="bs16-gqa1-d64-long-chunk"),
]


def flat_queries(cases, num_q_heads, head_dim, dtype, device, seed):
    num_new = [n for n, _ in cases]
    query_start_loc = torch.tensor([0] + torch.tensor(num_new).cumsum(0).tolist(), dtype=torch.int32)
    q = strided_queries(sum(num_new), num_q_heads, head_dim, dtype, device, seed)
    return q, query_start_loc.to(device)


@pytest.mark.parametrize("block_size, num_q_heads, num_kv_heads, head_dim, cases", PREFILL_CASES)
def test_prefill_reference_matches_naive(block_size, num_q_heads, num_kv_heads, head_dim, cases):
    seq_lens = [length for _, length in cases]
    batch = PagedBatch(seq_lens, block_size, num_kv_heads, head_dim, torch.float32, "cpu", seed=6)
    q, query_start_loc = flat_queries(cases, num_q_heads, head_dim, torch.float32, "cpu", seed=7)
    scale = head_dim**-0.5
    out = paged_prefill_attention_ref(
        q, batch.k_cache, batch.v_cache, batch.block_tables, query_start_loc, batch.seq_lens, scale
    )
    starts = query_start_loc.tolist()
    for b, (num_new, length) in enumerate(cases):
        rows = slice(starts[b], starts[b + 1])
        positions = list(range(length - num_new, length))  # absolute positions of the queries
        expected = naive_attention(q[rows], batch.dense_k[b], batch.dense_v[b], positions, scale)
        assert max_error(out[rows], expected) < 1e-5


@pytest.mark.parametrize("block_size, num_q_heads, num_kv_heads, head_dim, cases", PREFILL_CASES)
@pytest.mark.parametrize("dtype", dtypes_for_device())
def test_prefill_kernel_matches_reference(device, dtype, block_size, num_q_heads, num_kv_heads, head_dim, cases):
    seq_lens = [length for _, length in cases]
    batch = PagedBatch(seq_lens, block_size, num_kv_heads, head_dim, dtype, device, seed=8)
    q, query_start_loc = flat_queries(cases, num_q_heads, head_dim, dtype, device, seed=9)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, query_start_loc, batch.seq_lens,
            head_dim**-0.5)
    out = paged_prefill_attention(*args)
    expected = paged_prefill_attention_ref(*args)
    assert out.shape == q.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    assert max_error(out, expected) <= TOLERANCE[dtype]


def test_prefill_of_single_tokens_equals_decode(device):
    """A batch of 1-token "chunks" is a decode batch: both kernels must agree."""
    seq_lens = [3, 17, 40]
    batch = PagedBatch(seq_lens, 16, 2, 64, torch.float32, device, seed=10)
    q = torch.randn(3, 6, 64, device=device)
    query_start_loc = torch.arange(4, dtype=torch.int32, device=device)
    prefill = paged_prefill_attention(q, batch.k_cache, batch.v_cache, batch.block_tables,
                                      query_start_loc, batch.seq_lens, 0.125)
    decode = paged_decode_attention(q, batch.k_cache, batch.v_cache, batch.block_tables,
                                    batch.seq_lens, 0.125)
    assert max_error(prefill, decode) <= 1e-5


@st.composite
def varlen_batches(draw):
    """A random step: 1-4 sequences, each with some cached context and 0-24 new tokens."""
    num_kv_heads = draw(st.sampled_from([1, 2]))
    group = draw(st.sampled_from([1, 2, 3, 4]))
    block_size = draw(st.sampled_from([8, 16, 32]))
    cases = draw(st.lists(
        st.tuples(st.integers(0, 24), st.integers(0, 40)).filter(lambda c: c[0] + c[1] > 0),
        min_size=1, max_size=4,
    ))  # (n_new, context)
    return block_size, num_kv_heads * group, num_kv_heads, [(n, n + ctx) for n, ctx in cases]


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch_spec=varlen_batches())
def test_prefill_kernel_random_batches(device, batch_spec):
    block_size, num_q_heads, num_kv_heads, cases = batch_spec
    batch = PagedBatch([length for _, length in cases], block_size, num_kv_heads, 64, torch.float32,
                       device, seed=13)
    q, query_start_loc = flat_queries(cases, num_q_heads, 64, torch.float32, device, seed=14)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, query_start_loc, batch.seq_lens, 0.125)
    assert max_error(paged_prefill_attention(*args), paged_prefill_attention_ref(*args)) <= 1e-4


def test_store_then_prefill_end_to_end(device):
    """The engine's order: store_kv writes a chunk's K/V mid-block, then attention reads it."""
    block_size, num_kv_heads, head_dim, context, chunk = 8, 2, 64, 13, 6
    batch = PagedBatch([context + chunk], block_size, num_kv_heads, head_dim, torch.float32, device, seed=11)
    slots = torch.tensor(
        [int(batch.block_tables[0, p // block_size]) * block_size + p % block_size
         for p in range(context, context + chunk)], device=device)
    # Wipe the chunk's slots, then write them back with store_kv.
    new_k = batch.dense_k[0][context:].to(device)
    new_v = batch.dense_v[0][context:].to(device)
    flat_k = batch.k_cache.view(-1, num_kv_heads, head_dim)
    flat_v = batch.v_cache.view(-1, num_kv_heads, head_dim)
    flat_k[slots] = float("nan")
    flat_v[slots] = float("nan")
    store_kv(new_k, new_v, batch.k_cache, batch.v_cache, slots)
    q = torch.randn(chunk, 4, head_dim, device=device)
    query_start_loc = torch.tensor([0, chunk], dtype=torch.int32, device=device)
    out = paged_prefill_attention(q, batch.k_cache, batch.v_cache, batch.block_tables,
                                  query_start_loc, batch.seq_lens, head_dim**-0.5)
    expected = naive_attention(q, batch.dense_k[0], batch.dense_v[0],
                               list(range(context, context + chunk)), head_dim**-0.5)
    assert max_error(out, expected) <= 1e-4


def test_prefill_ref_rejects_seq_len_shorter_than_chunk():
    batch = PagedBatch([4], 8, 1, 64, torch.float32, "cpu", seed=12)
    q = torch.randn(6, 1, 64)
    with pytest.raises(ValueError, match="seq_len >= number of new tokens"):
        paged_prefill_attention_ref(q, batch.k_cache, batch.v_cache, batch.block_tables,
                                    torch.tensor([0, 6], dtype=torch.int32), batch.seq_lens, 0.125)


# --------------------------------------------------------------------------------------
# bad input: clear ValueError from kernels and references alike, nothing written
# --------------------------------------------------------------------------------------


def _decode_inputs(**override):
    inputs = dict(
        q=torch.zeros(2, 4, 64), k_cache=torch.zeros(3, 8, 2, 64), v_cache=torch.zeros(3, 8, 2, 64),
        block_tables=torch.zeros(2, 3, dtype=torch.int32), seq_lens=torch.ones(2, dtype=torch.int32),
        scale=0.125,
    )
    inputs.update(override)
    return inputs


BAD_DECODE = [
    pytest.param(dict(q=torch.zeros(2, 5, 64)), "multiple of num_kv_heads", id="hq-not-multiple"),
    pytest.param(dict(q=torch.zeros(2, 256)), "q must be", id="q-2d"),
    pytest.param(dict(q=torch.zeros(2, 4, 32)), "head_dim", id="head-dim-mismatch"),
    pytest.param(dict(k_cache=torch.zeros(3, 8, 128)), "k_cache must be", id="cache-3d"),
    pytest.param(dict(v_cache=torch.zeros(3, 8, 1, 64)), "v_cache shape", id="v-shape"),
    pytest.param(dict(q=torch.zeros(2, 4, 64, dtype=torch.float64)), "dtype", id="q-dtype"),
    pytest.param(dict(block_tables=torch.zeros(6, dtype=torch.int32)), "block_tables", id="table-1d"),
    pytest.param(dict(block_tables=torch.zeros(2, 3)), "int32 or int64", id="table-float"),
    pytest.param(dict(seq_lens=torch.ones(3, dtype=torch.int32)), "sequences", id="seq-lens-length"),
]


@pytest.mark.parametrize("override, message", BAD_DECODE)
@pytest.mark.parametrize("fn", [paged_decode_attention, paged_decode_attention_ref], ids=["triton", "ref"])
def test_decode_bad_input_raises(fn, override, message):
    with pytest.raises(ValueError, match=message):
        fn(**_decode_inputs(**override))


BAD_PREFILL = [
    pytest.param(dict(q=torch.zeros(3, 3, 64)), "multiple of num_kv_heads", id="hq-not-multiple"),
    pytest.param(dict(q=torch.zeros(3, 4, 64, 1)), "q must be", id="q-4d"),
    pytest.param(dict(query_start_loc=torch.tensor([0, 3], dtype=torch.int32)), "query_start_loc", id="qsl-length"),
    pytest.param(dict(query_start_loc=torch.tensor([0.0, 1.0, 3.0])), "int32 or int64", id="qsl-float"),
]


@pytest.mark.parametrize("override, message", BAD_PREFILL)
@pytest.mark.parametrize("fn", [paged_prefill_attention, paged_prefill_attention_ref], ids=["triton", "ref"])
def test_prefill_bad_input_raises(fn, override, message):
    inputs = _decode_inputs(q=torch.zeros(3, 4, 64))
    inputs["query_start_loc"] = torch.tensor([0, 1, 3], dtype=torch.int32)
    inputs.update(override)
    with pytest.raises(ValueError, match=message):
        fn(**inputs)


BAD_STORE = [
    pytest.param(dict(key=torch.zeros(3, 2, 32), value=torch.zeros(3, 2, 32)), "kv_heads, head_dim", id="head-dim"),
    pytest.param(dict(key=torch.zeros(3, 128)), "key must be", id="key-2d"),
    pytest.param(dict(value=torch.zeros(2, 2, 64)), "value shape", id="value-shape"),
    pytest.param(dict(slot_mapping=torch.zeros(3)), "int32 or int64", id="slots-float"),
    pytest.param(dict(slot_mapping=torch.zeros(4, dtype=torch.int32)), "entries", id="slots-length"),
    pytest.param(dict(key=torch.zeros(3, 2, 64, dtype=torch.float16),
                      value=torch.zeros(3, 2, 64, dtype=torch.float16)), "dtype", id="dtype"),
]


@pytest.mark.parametrize("override, message", BAD_STORE)
@pytest.mark.parametrize("fn", [store_kv, store_kv_ref], ids=["triton", "ref"])
def test_store_kv_bad_input_raises_and_writes_nothing(fn, override, message):
    inputs = dict(key=torch.ones(3, 2, 64), value=torch.ones(3, 2, 64), k_cache=torch.zeros(2, 8, 2, 64),
                  v_cache=torch.zeros(2, 8, 2, 64), slot_mapping=torch.arange(3, dtype=torch.int32))
    inputs.update(override)
    with pytest.raises(ValueError, match=message):
        fn(**inputs)
    assert not inputs["k_cache"].any() and not inputs["v_cache"].any()


@pytest.mark.skipif(ON_CUDA, reason="only the interpreter refuses bf16 attention")
def test_bf16_attention_refused_by_interpreter():
    inputs = _decode_inputs()
    for name in ("q", "k_cache", "v_cache"):
        inputs[name] = inputs[name].to(torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        paged_decode_attention(**inputs)
    inputs["q"] = torch.zeros(3, 4, 64, dtype=torch.bfloat16)
    inputs["query_start_loc"] = torch.tensor([0, 1, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="bfloat16"):
        paged_prefill_attention(**inputs)


# --------------------------------------------------------------------------------------
# the interpreter is lenient: make sure the real compiler (sm_90, no GPU needed) agrees
# --------------------------------------------------------------------------------------


def test_kernels_compile_for_sm90():
    pytest.importorskip("triton.backends.nvidia")
    env = dict(os.environ, TRITON_INTERPRET="0")
    result = subprocess.run([sys.executable, "-m", "kernels.compile_check"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok ") == 10, result.stdout
