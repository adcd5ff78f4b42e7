"""The allocator and the KV cache manager: counts, sharing, contiguity, double free."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minillm.engine.sequence import Sequence
from minillm.kv_cache import BlockAllocator, KVCacheManager
from minillm.sampling_params import SamplingParams


def seq(n_prompt, max_tokens=4, rid="r"):
    return Sequence(rid, list(range(1, n_prompt + 1)), SamplingParams(max_tokens=max_tokens))


@pytest.mark.unit
def test_allocate_and_free_round_trip():
    alloc = BlockAllocator(4)
    got = [alloc.allocate() for _ in range(4)]
    assert sorted(got) == [0, 1, 2, 3] and alloc.num_free == 0
    with pytest.raises(RuntimeError, match="no free KV block"):
        alloc.allocate()
    for b in got:
        alloc.free(b)
    assert alloc.num_free == 4
    with pytest.raises(RuntimeError, match="double free"):
        alloc.free(2)


@pytest.mark.unit
def test_shared_block_is_freed_by_its_last_user():
    alloc = BlockAllocator(2)
    b = alloc.allocate()
    alloc.share(b)
    alloc.free(b)
    assert not alloc.is_free(b)
    alloc.free(b)
    assert alloc.is_free(b) and alloc.num_free == 2


@pytest.mark.unit
def test_contiguous_needs_a_run_not_just_a_count():
    alloc = BlockAllocator(6)
    blocks = [alloc.allocate() for _ in range(6)]
    for b in (0, 2, 4):                     # free every other block: 3 free, no run of 2
        alloc.free(blocks[b])
    assert alloc.num_free == 3
    assert alloc.allocate_contiguous(2) is None      # external fragmentation
    alloc.free(blocks[3])
    assert alloc.allocate_contiguous(3) == [2, 3, 4]
    assert alloc.allocate() == 0                     # stale heap entries are skipped


@pytest.mark.unit
def test_paged_growth_takes_one_block_per_block_size_tokens():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    s = seq(5)
    assert kv.blocks_needed(s, 5) == 2
    kv.allocate(s, 5)
    s.num_computed_tokens = 5
    assert kv.blocks_needed(s, 1) == 0 and kv.blocks_needed(s, 4) == 1
    assert kv.slot(s, 4) == s.block_table[1] * 4
    kv.free(s)
    assert kv.num_free_blocks == 10 and s.block_table == []


@pytest.mark.unit
def test_contiguous_reservation_covers_the_worst_case():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    s = seq(5, max_tokens=10)             # 15 tokens worst case → 4 blocks
    assert kv.reserve_contiguous(s)
    assert s.block_table == [0, 1, 2, 3]
    big = seq(20, max_tokens=20, rid="big")   # 40 tokens → 10 blocks, only 6 free
    assert not kv.reserve_contiguous(big) and big.block_table == []
    assert kv.num_free_blocks == 6


@pytest.mark.unit
@given(prompt=st.lists(st.integers(0, 99), min_size=1, max_size=12),
       output=st.lists(st.integers(100, 199), max_size=12),
       drafts=st.lists(st.integers(200, 299), max_size=5),
       bounds=st.tuples(st.integers(0, 30), st.integers(0, 30)))
def test_token_ids_between_slices_prompt_output_and_guesses(prompt, output, drafts, bounds):
    seq = Sequence("r", prompt, SamplingParams(max_tokens=64), output_token_ids=list(output),
                   draft_token_ids=list(drafts))
    start, end = min(bounds), max(bounds)
    assert seq.token_ids_between(start, end) == (prompt + output + drafts)[start:end]
