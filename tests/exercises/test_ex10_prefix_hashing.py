"""Lesson 10 exercise: prefix-cache block hashing, graded against minillm.kv_cache.prefix_cache.

The learner's functions must agree with minillm's PrefixCache hash for hash: the same
chained hashes, the same longest-prefix matches (stopping at the first miss, never
covering the last prompt token, and treating a hash collision as a miss), the same
entries after registering blocks, and — run through the engine on the simulator — the
same number of cached prompt tokens. The eviction order is LRU, and on a block pool
with a shared system prompt it keeps that prompt cached where lowest-id-first does not.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minillm import SamplingParams
from minillm.engine.sequence import Sequence
from minillm.kv_cache import KVCacheManager
from minillm.kv_cache.prefix_cache import CachedBlock
from minillm.kv_cache.prefix_cache import block_hashes as minillm_block_hashes
from minillm.sim.simulate import make_sim_engine, run_to_completion

EXERCISE = "ex10_prefix_hashing"
PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
# small vocabularies make shared prefixes (and near misses) likely
tokens = st.lists(st.integers(0, 3), min_size=0, max_size=40)


def test_hash_block_chains_parent_and_tokens(ex):
    first = ex.hash_block(None, [1, 2, 3, 4])
    assert first == hash((None, (1, 2, 3, 4)))
    assert ex.hash_block(first, [5, 6, 7, 8]) == hash((first, (5, 6, 7, 8)))
    assert ex.hash_block(first, [5, 6, 7, 8]) != ex.hash_block(None, [5, 6, 7, 8]), \
        "the same tokens after a different prefix must hash differently"


def test_block_hashes_full_blocks_only(ex):
    hashes = ex.block_hashes(list(range(10)), 4)
    assert len(hashes) == 2, "10 tokens in blocks of 4: two full blocks, one partial"
    assert hashes[0] == ex.hash_block(None, [0, 1, 2, 3])
    assert hashes[1] == ex.hash_block(hashes[0], [4, 5, 6, 7])
    assert ex.block_hashes([1, 2, 3], 4) == []
    assert ex.block_hashes(list(range(12)), 4)[:2] == hashes, "a longer prompt extends the chain"


@PROPERTY
@given(token_ids=tokens, block_size=st.sampled_from([1, 2, 3, 4, 8]))
def test_block_hashes_equal_minillm(ex, token_ids, block_size):
    assert ex.block_hashes(token_ids, block_size) == minillm_block_hashes(token_ids, block_size)


def entries(prompt, blocks, bs, hashes):
    """A cache holding `blocks[i]` for the prompt's block i (None: not cached)."""
    cache, parent = {}, None
    for i, block in enumerate(blocks):
        if block is not None:
            cache[hashes[i]] = CachedBlock(block, parent, tuple(prompt[i * bs:(i + 1) * bs]))
        parent = block
    return cache


def test_longest_cached_prefix_stops_at_first_miss_and_keeps_the_last_token(ex):
    bs = 4
    prompt = [9, 9, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]        # 3 full blocks
    h = ex.block_hashes(prompt, bs)
    assert ex.longest_cached_prefix(prompt, {}, bs) == []
    assert ex.longest_cached_prefix(prompt, entries(prompt, [7, None, 3], bs, h), bs) == [7], \
        "block 1 is missing: block 2 cannot be used even though it is cached"
    full = entries(prompt, [7, 8, 3], bs, h)
    assert ex.longest_cached_prefix(prompt, full, bs) == [7, 8], \
        "the block holding the last prompt token is always recomputed"
    assert ex.longest_cached_prefix(prompt + [6], full, bs) == [7, 8, 3]
    assert ex.tokens_to_prefill(len(prompt), 2, bs) == 4
    assert ex.tokens_to_prefill(len(prompt) + 1, 3, bs) == 1
    assert ex.tokens_to_prefill(len(prompt), 0, bs) == len(prompt)


def test_a_hash_collision_is_a_miss(ex):
    """Entries planted under the prompt's own hashes but holding other tokens, or computed
    after another block, must not be reused (a colliding hash, simulated)."""
    bs = 4
    prompt = [9, 9, 1, 1, 2, 2, 3, 3, 4]
    h = ex.block_hashes(prompt, bs)
    honest = entries(prompt, [7, 8], bs, h)
    assert ex.longest_cached_prefix(prompt, honest, bs) == [7, 8]
    other_tokens = {**honest, h[1]: CachedBlock(8, 7, (6, 6, 6, 6))}
    assert ex.longest_cached_prefix(prompt, other_tokens, bs) == [7], \
        "block 1's entry holds other tokens: a collision, not a hit"
    other_parent = {**honest, h[1]: CachedBlock(8, 5, (2, 2, 3, 3))}
    assert ex.longest_cached_prefix(prompt, other_parent, bs) == [7], \
        "block 1 was computed after block 5, not after block 7: its K/V saw another prefix"
    first_wrong = {h[0]: CachedBlock(7, None, (0, 0, 0, 0)), h[1]: honest[h[1]]}
    assert ex.longest_cached_prefix(prompt, first_wrong, bs) == []


def test_register_blocks_only_full_computed_blocks_first_writer_wins(ex):
    bs, cache = 4, {}
    seq_tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]           # 2 full blocks + 2 tokens
    h = ex.block_hashes(seq_tokens, bs)
    assert ex.register_blocks(cache, seq_tokens, [5, 6, 7], num_computed_tokens=6, block_size=bs) == 1
    assert cache == {h[0]: CachedBlock(5, None, (1, 2, 3, 4))}, "block 1 is not fully computed yet"
    assert ex.register_blocks(cache, seq_tokens, [5, 6, 7], num_computed_tokens=10, block_size=bs) == 1
    assert cache[h[1]] == CachedBlock(6, 5, (5, 6, 7, 8)), "block 1 was computed after block 5"
    # another sequence with the same first block in a different physical block
    assert ex.register_blocks(cache, [1, 2, 3, 4, 0, 0, 0, 0], [11, 12], 8, bs) == 1
    assert cache[h[0]].block_id == 5, "the first writer keeps the entry"


def make_seq(i, token_ids, block_table, num_computed):
    seq = Sequence(f"r{i}", token_ids, SamplingParams(max_tokens=1))
    seq.block_table, seq.num_computed_tokens = list(block_table), num_computed
    return seq


@PROPERTY
@given(prompts=st.lists(tokens.filter(bool), min_size=1, max_size=8),
       block_size=st.sampled_from([1, 2, 4]))
def test_same_matches_and_table_as_minillm_prefix_cache(ex, prompts, block_size):
    """Serve prompts one after another: match, then allocate fresh blocks, then register."""
    kv = KVCacheManager(4096, block_size, enable_prefix_caching=True)
    reference = kv.prefix_cache
    mine: dict[int, CachedBlock] = {}
    next_block = 0
    for i, prompt in enumerate(prompts):
        probe = make_seq(i, prompt, [], 0)
        want = reference.match(probe)
        assert ex.longest_cached_prefix(prompt, mine, block_size) == want
        fresh = -(-len(prompt) // block_size) - len(want)
        table = want + list(range(next_block, next_block + fresh))
        next_block += fresh
        reference.register(make_seq(i, prompt, table, len(prompt)))
        ex.register_blocks(mine, prompt, table, len(prompt), block_size)
        assert mine == reference.entries


def test_cached_tokens_equal_the_engines(ex):
    """A shared system prompt, requests one after another (simulator, prefix caching on).

    Every prompt starts with the same 22-token system prompt; the last one is only its
    first 9 tokens. (Requests run one at a time and each re-acquires the shared blocks
    before it allocates new ones, so minillm's eviction never touches them.)
    """
    rng = random.Random(0)
    bs, system = 4, [rng.randrange(3, 60) for _ in range(22)]
    prompts = [system + [rng.randrange(3, 60) for _ in range(rng.randrange(0, 7))]
               for _ in range(6)] + [system[:9]]
    engine = make_sim_engine(block_size=bs, num_kv_blocks=64, max_num_seqs=2, max_model_len=64,
                             vocab_size=60, enable_prefix_caching=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", {"prompt_token_ids": prompt},
                           SamplingParams(max_tokens=3, temperature=0.0), arrival_time=float(i))
        engine.runner.output_lens[f"r{i}"] = 3
    trace = run_to_completion(engine, max_steps=1000)
    engine_cached = [trace.requests[f"r{i}"].num_cached_tokens for i in range(len(prompts))]
    mine, predicted, next_block = {}, [], 0
    for prompt in prompts:
        hits = ex.longest_cached_prefix(prompt, mine, bs)
        predicted.append(len(prompt) - ex.tokens_to_prefill(len(prompt), len(hits), bs))
        fresh = -(-len(prompt) // bs) - len(hits)
        ex.register_blocks(mine, prompt, hits + list(range(1000 + next_block, 1000 + next_block + fresh)),
                           len(prompt), bs)
        next_block += fresh
    assert engine_cached[0] == 0 and sum(engine_cached) > 0, "the workload must hit the cache"
    assert predicted == engine_cached


# ---------------------------------------------------------------------- eviction: LRU

def test_lru_evicts_the_least_recently_freed_block_not_hit_since(ex):
    lru = ex.LRUEviction()
    with pytest.raises(LookupError):
        lru.victim()
    for block in (4, 1, 7, 2):
        lru.freed(block)
    lru.revived(7)                         # a prefix hit took 7 back
    lru.revived(99)                        # not evictable: nothing happens
    lru.freed(4)                           # used again and freed again: now the most recent
    assert len(lru) == 3
    assert [lru.victim(), lru.victim(), lru.victim()] == [1, 2, 4]
    assert len(lru) == 0


def serve_on_a_block_pool(prompts, num_blocks, bs, evictor, longest_cached_prefix,
                          register_blocks):
    """Requests one at a time on `num_blocks` blocks with prefix caching: hit, take fresh
    blocks from `evictor` (forgetting what they cached), finish, free tail first.
    Returns the prompt tokens served from the cache, per request."""
    cache, served = {}, []
    for block in range(num_blocks):
        evictor.freed(block)
    for prompt in prompts:
        hits = longest_cached_prefix(prompt, cache, bs)
        for block in hits:
            evictor.revived(block)
        fresh = []
        for _ in range(-(-len(prompt) // bs) - len(hits)):
            block = evictor.victim()
            for h in [h for h, e in cache.items() if e.block_id == block]:
                del cache[h]                            # its old contents are gone
            fresh.append(block)
        table = hits + fresh
        register_blocks(cache, prompt, table, len(prompt), bs)
        for block in reversed(table):                   # the tail goes first
            evictor.freed(block)
        served.append(len(hits) * bs)
    return served


class LowestIdFirst:
    """The answer key's allocation order (a min-heap of free ids), as an evictor."""

    def __init__(self):
        self.free = set()

    def freed(self, block):
        self.free.add(block)

    def revived(self, block):
        self.free.discard(block)

    def victim(self):
        block = min(self.free)
        self.free.discard(block)
        return block


def test_lru_keeps_a_shared_system_prompt_cached(ex):
    """Chat requests (the same 12-token system prompt, then 9 tokens of their own) take
    turns with one-off 16-token prompts, on a pool of 8 blocks of 4. LRU serves the system
    prompt from the cache to every chat request after the first; handing out the lowest
    free id gives the system prompt's blocks to the next one-off prompt."""
    rng = random.Random(1)
    system = [rng.randrange(3, 60) for _ in range(12)]
    prompts = []
    for _ in range(6):
        prompts.append(system + [rng.randrange(3, 60) for _ in range(9)])
        prompts.append([rng.randrange(3, 60) for _ in range(16)])
    lru = serve_on_a_block_pool(prompts, 8, 4, ex.LRUEviction(), ex.longest_cached_prefix,
                                ex.register_blocks)
    assert lru[0::2] == [0] + [12] * 5 and lru[1::2] == [0] * 6, lru
    lowest = serve_on_a_block_pool(prompts, 8, 4, LowestIdFirst(), ex.longest_cached_prefix,
                                   ex.register_blocks)
    assert sum(lowest) < sum(lru), (lowest, lru)
