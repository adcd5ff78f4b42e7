"""The batched attention backends vs the per-sequence reference, on random steps.

`TorchAttention` splits a step's rows into groups (decodes of similar length, prefill
chunks), gathers whole KV blocks per group and puts the outputs back in row order;
`SparseAttention` plans the same groups but attends decodes in place, through a sparse
matrix of cache rows; `CppAttention` attends every row in place in one C++ call, and
hands long prefill chunks to SDPA. The reference (`attend_per_sequence`) loops over sequences one at
a time. Hypothesis draws mixed steps — decodes and prefill chunks in any order,
scattered block tables, GQA — and all must agree, for every grouping the cost rule
could choose.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.attention import PerSequenceAttention, SparseAttention, TorchAttention
from minillm.attention.sparse_paged import SPARSE_DTYPES
from minillm.attention.torch_paged import split_by_length
import minillm.attention.torch_paged as attention
from minillm.model.batch import build_attention_metadata
from minillm_cpu.cpp_attention import CppAttention

pytestmark = pytest.mark.unit


@st.composite
def steps(draw):
    """One step: per sequence (tokens already cached, new tokens this step)."""
    num_seqs = draw(st.integers(1, 7))
    seqs = [(draw(st.integers(0, 40)), draw(st.sampled_from([1, 1, 1, 2, 3, 7])))
            for _ in range(num_seqs)]
    return {"seqs": seqs, "block_size": draw(st.sampled_from([1, 2, 4, 16])),
            "kv_heads": draw(st.integers(1, 3)), "ratio": draw(st.sampled_from([1, 3, 17])),
            "head_dim": draw(st.sampled_from([8, 16])), "seed": draw(st.integers(0, 1000))}


def make_step(step):
    """Random caches, scattered block tables, new q/k/v and the step's metadata."""
    gen = torch.Generator().manual_seed(step["seed"])
    bs, hkv, d = step["block_size"], step["kv_heads"], step["head_dim"]
    totals = [cached + new for cached, new in step["seqs"]]
    need = [-(-t // bs) for t in totals]
    num_blocks = sum(need) + 2
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, slots = [], []
    for (cached, new), n in zip(step["seqs"], need):
        tables.append(perm[:n])
        perm = perm[n:]
        slots += [tables[-1][p // bs] * bs + p % bs for p in range(cached, cached + new)]
    T = sum(new for _, new in step["seqs"])
    meta = build_attention_metadata([new for _, new in step["seqs"]], totals, tables, slots, bs,
                                    torch.device("cpu"))
    k_cache = torch.randn(num_blocks, bs, hkv, d, generator=gen)   # garbage where no token is
    v_cache = torch.randn(num_blocks, bs, hkv, d, generator=gen)
    q = torch.randn(T, hkv * step["ratio"], d, generator=gen)
    k, v = torch.randn(T, hkv, d, generator=gen), torch.randn(T, hkv, d, generator=gen)
    return q, k, v, k_cache, v_cache, meta


BATCHED = [TorchAttention, SparseAttention]


@pytest.mark.parametrize("backend", BATCHED, ids=lambda b: b.name)
@pytest.mark.parametrize("group_cost", [0, 12, 10_000])   # many groups, the default, one group
@settings(max_examples=60, deadline=None)
@given(step=steps())
def test_batched_attention_matches_per_sequence(backend, group_cost, step):
    q, k, v, k_cache, v_cache, meta = make_step(step)
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    expected = PerSequenceAttention()(q, k, v, ref_k, ref_v, meta, 0.3)
    got = backend(group_cost)(q, k, v, k_cache, v_cache, meta, 0.3)
    assert got.shape == q.shape
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)
    assert torch.equal(k_cache, ref_k) and torch.equal(v_cache, ref_v)   # same K/V written


# max_pairs 0: every prefill chunk of 2+ queries goes to SDPA; 12: some do; 4096: none
@pytest.mark.parametrize("max_pairs", [0, 12, 4096])
@settings(max_examples=60, deadline=None)
@given(step=steps())
def test_cpp_attention_matches_per_sequence(max_pairs, step):
    q, k, v, k_cache, v_cache, meta = make_step(step)
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    expected = PerSequenceAttention()(q, k, v, ref_k, ref_v, meta, 0.3)
    got = CppAttention(max_pairs)(q, k, v, k_cache, v_cache, meta, 0.3)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)
    assert torch.equal(k_cache, ref_k) and torch.equal(v_cache, ref_v)   # same K/V written


def test_every_backend_is_an_attention_backend_and_plans_once_a_step():
    """The interface is code (an ABC), and a step's plan is made once for all layers:
    `for_step` plans, and every layer's call reuses that plan."""
    from minillm.attention import AttentionBackend
    step = {"seqs": [(5, 1), (2, 3)], "block_size": 4, "kv_heads": 1, "ratio": 3,
            "head_dim": 8, "seed": 0}
    q, k, v, k_cache, v_cache, meta = make_step(step)
    for cls in (TorchAttention, SparseAttention, PerSequenceAttention, CppAttention):
        backend = cls()
        assert isinstance(backend, AttentionBackend)
        plans = []
        backend.plan = lambda m, plan=backend.plan: plans.append(plan(m)) or plans[-1]
        step_attention = backend.for_step(meta)
        for _ in range(3):                                   # three layers, one plan
            step_attention(q, k, v, k_cache, v_cache, 0.3)
        assert len(plans) == 1 and step_attention.plan is plans[0]
    with pytest.raises(TypeError):
        AttentionBackend()                                   # abstract: attend is missing


def test_cpp_attention_in_bf16_is_the_reference_rounded():
    """In bf16 the kernel reads bf16 K/V and Q, computes in float32 and rounds the output
    once. So it matches the float32 reference on the same (bf16) numbers to about one
    bf16 unit: 0.0137 the largest difference measured over 200 random steps of outputs
    near 1, where one unit is 2⁻⁷ = 0.0078 (below 1) or 0.0156 (from 1 to 2)."""
    for seed in range(20):
        step = {"seqs": [(3 * seed, 1), (seed + 5, 7), (1, 1), (40, 2)], "block_size": 4,
                "kv_heads": 3, "ratio": 3, "head_dim": 64, "seed": seed}
        q, k, v, k_cache, v_cache, meta = (t.to(torch.bfloat16) if isinstance(t, torch.Tensor)
                                           else t for t in make_step(step))
        expected = PerSequenceAttention()(q.float(), k.float(), v.float(), k_cache.float(),
                                          v_cache.float(), meta, 0.3)
        got = CppAttention()(q, k, v, k_cache, v_cache, meta, 0.3)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), expected, atol=2 ** -6, rtol=2 ** -7)


@pytest.mark.parametrize("backend", BATCHED, ids=lambda b: b.name)
def test_attention_is_wrong_if_rows_come_back_in_group_order(backend):
    """Decodes of very different lengths are grouped out of order: the output must be
    put back in row order, or sequences get each other's attention."""
    step = {"seqs": [(40, 1), (2, 1), (39, 1), (3, 1)], "block_size": 2, "kv_heads": 1,
            "ratio": 3, "head_dim": 8, "seed": 0}
    q, k, v, k_cache, v_cache, meta = make_step(step)
    plan = attention.GroupPlan(meta, 5, TorchAttention().decode_group)
    assert [g.row_list for g in plan.groups] == [[1, 3], [0, 2]]
    expected = PerSequenceAttention()(q, k, v, k_cache.clone(), v_cache.clone(), meta, 0.3)
    got = backend(group_cost_in_blocks=5)(q, k, v, k_cache, v_cache, meta, 0.3)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)
    in_group_order = expected[[1, 3, 0, 2]]
    assert not torch.allclose(got, in_group_order)


def test_sparse_columns_are_the_docstring_example():
    """20 tokens in blocks [7, 2] of 16, 3 K/V heads: query heads of K/V head 1 read
    cache rows slot·3 + 1 — 337, 340, … for block 7's slots 112…127, then 97 … 106
    for block 2's slots 32…35; the rest of block 2 is padding, hidden by the mask."""
    meta = build_attention_metadata([1], [20], [[7, 2]], [2 * 16 + 3], 16, torch.device("cpu"))
    k_cache, v_cache = torch.randn(8, 16, 3, 8), torch.randn(8, 16, 3, 8)
    q, k, v = torch.randn(1, 9, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    step = SparseAttention().for_step(meta)
    step(q, k, v, k_cache, v_cache, 0.3)                # the first layer builds the columns
    group = step.plan.groups[0]
    head_of_kv_head_1 = group.cols[3]                   # query heads 3, 4, 5 share K/V head 1
    assert head_of_kv_head_1[:3].tolist() == [337, 340, 343]
    assert head_of_kv_head_1[16:20].tolist() == [97, 100, 103, 106]
    assert group.hidden.view(-1).tolist() == [False] * 20 + [True] * 12


def test_sparse_backend_in_bf16_is_the_torch_backend():
    """CPU `sampled_addmm` computes in float32/float64 only (if this starts to fail, PyTorch
    gained a bf16 kernel: widen SPARSE_DTYPES). So in bf16 the sparse backend's decode
    groups take the torch backend's gather + SDPA — the very same numbers."""
    assert torch.bfloat16 not in SPARSE_DTYPES
    pattern = torch.eye(2, dtype=torch.bfloat16).to_sparse_csr()
    with pytest.raises(RuntimeError, match="BFloat16"):
        torch.sparse.sampled_addmm(pattern, torch.ones(2, 2, dtype=torch.bfloat16),
                                   torch.ones(2, 2, dtype=torch.bfloat16))
    step = {"seqs": [(30, 1), (3, 1), (12, 7)], "block_size": 4, "kv_heads": 3,
            "ratio": 3, "head_dim": 16, "seed": 1}
    q, k, v, k_cache, v_cache, meta = (t.to(torch.bfloat16) if isinstance(t, torch.Tensor) else t
                                       for t in make_step(step))
    want = TorchAttention()(q, k, v, k_cache.clone(), v_cache.clone(), meta, 0.3)
    assert torch.equal(SparseAttention()(q, k, v, k_cache, v_cache, meta, 0.3), want)


def _cost(groups, blocks, group_cost):
    return sum(len(g) * max(blocks[i] for i in g) + group_cost for g in groups)


@given(blocks=st.lists(st.integers(1, 9), min_size=0, max_size=7), group_cost=st.integers(0, 20))
def test_split_by_length_is_optimal(blocks, group_cost):
    ids = list(range(len(blocks)))
    groups = split_by_length(ids, blocks, group_cost)
    assert sorted(i for g in groups for i in g) == ids             # every row exactly once
    assert all(g == sorted(g) for g in groups)                     # members in batch order
    if not ids:
        assert groups == []
        return
    # brute force: every way of cutting the length-sorted rows into consecutive groups
    order = sorted(ids, key=lambda i: blocks[i])
    best = min(_cost([order[a:b] for a, b in zip((0,) + cuts, cuts + (len(order),))],
                     blocks, group_cost)
               for r in range(len(order))
               for cuts in itertools.combinations(range(1, len(order)), r))
    assert _cost(groups, blocks, group_cost) == best


def test_split_by_length_example_from_the_docstring():
    blocks = [2, 30, 2, 2, 2, 2, 30, 2, 2, 2]
    assert split_by_length(list(range(10)), blocks, 40) == [[0, 2, 3, 4, 5, 7, 8, 9], [1, 6]]
    assert split_by_length(list(range(10)), [2] * 8 + [3, 3], 40) == [list(range(10))]
