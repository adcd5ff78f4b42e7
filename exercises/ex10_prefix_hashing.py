"""Lesson 10 — prefix caching (前缀缓存): find the KV blocks a new prompt can reuse.

The KV cache is cut into blocks of `block_size` tokens. Two requests that start with
the same tokens (a system prompt, a few-shot preamble, the history of a chat) compute
the very same keys and values for those positions — so the blocks can be shared.

**A block's identity is its tokens *and everything before them*.** The same 16 tokens
after a different prefix have different K/V (attention saw different context), so a
block's hash chains its parent's hash with its own tokens:

    h0 = hash((None, (t0, …, t15)))
    h1 = hash((h0,   (t16, …, t31)))
    h2 = hash((h1,   (t32, …, t47)))          equal h2 ⇒ equal first 48 tokens

Only **full** blocks get a hash: a partial block is still being written.

**Lookup.** A new prompt's full blocks are hashed in order and looked up in the cache
(hash → the cached block); the first miss ends the match, because every later hash
depends on the missing one. One more rule: the **last prompt token is always computed**,
since its logits pick the first output token. So only blocks that lie entirely before
the last prompt token may be reused: (len(prompt) − 1) // block_size of them.

**Collisions.** A hash is 64 bits: two *different* prefixes can land on the same number
(rarely by chance, on purpose if someone crafts prompts). Reusing a block by hash alone
would then hand one request another's keys and values — a wrong answer nobody notices.
So the cache keeps, per hash, a `CachedBlock(block_id, parent_block, tokens)`: the block,
the physical block it was computed after, and its own tokens. A hit counts only if both
match; by induction the whole prefix is then the same.

**Eviction.** A cached block whose last user finished goes back to the free pool but keeps
its contents: a later prompt may still hit it. When new tokens need a block, *which* free
block gives up its contents? `LRUEviction` answers: the least recently used one — the one
freed longest ago and not hit since — so a system prompt that every request shares stays
cached while one-off tails go first. (The answer key's allocator simply hands out the
lowest free id; lesson 10 compares the two.)

`hash_block` and `block_hashes` are the answer key's own functions
(`minillm/kv_cache/prefix_cache.py`); `longest_cached_prefix` and `register_blocks` are the
essential, dict-based versions of its `PrefixCache.match` and `PrefixCache.register`, with
its `CachedBlock` entries.

Use exactly the hash above — Python's built-in `hash` of the tuple
`(parent_hash, tuple(block_tokens))` — so your cache table and `minillm.kv_cache.prefix_cache`
agree hash for hash (the tests compare them).

Your turn: replace each `raise NotImplementedError`, then run the check cell at the
end of lesson 10 (or `python -m minillm.grading 10`).

The answer key's hashing is `minillm/kv_cache/prefix_cache.py::hash_block` and
`::block_hashes` (same names); its `PrefixCache.match` also checks tokens on a hit.
"""

from __future__ import annotations

from collections import OrderedDict

from minillm.kv_cache.prefix_cache import CachedBlock


def hash_block(parent: int | None, block_tokens: list[int]) -> int:
    """The chained hash of one full block: hash((parent_hash, tuple(tokens))).

    `parent` is the previous block's hash, None for the first block.
    """
    raise NotImplementedError("Your turn: hash the pair (parent, tuple of the block's tokens)")


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """Chained hashes of every *full* block of `token_ids`, in order.

    10 tokens in blocks of 4 → 2 hashes (tokens 0–3 and 4–7); tokens 8–9 form a
    partial block and get none.
    """
    raise NotImplementedError("Your turn: walk the full blocks, chaining each hash to the previous one")


def longest_cached_prefix(prompt_token_ids: list[int], cache: dict[int, CachedBlock],
                          block_size: int) -> list[int]:
    """Physical blocks of the longest cached prefix of a prompt (possibly []).

    `cache` maps block hash → `CachedBlock`. Walk the prompt's block hashes in order and
    stop at the first block that is not a true hit: its hash is missing, or the entry
    holds other tokens, or it was computed after another block than the one matched just
    before (`parent_block`: None for the first block) — a hash collision is a miss. Never
    use a block that holds the last prompt token: at most (len(prompt) − 1) // block_size.
    """
    raise NotImplementedError("Your turn: look the block hashes up in order; stop at a miss "
                              "or an entry whose tokens or parent_block differ")


def register_blocks(cache: dict[int, CachedBlock], token_ids: list[int], block_table: list[int],
                    num_computed_tokens: int, block_size: int) -> int:
    """Record a sequence's full, computed blocks in `cache`; return how many were new.

    Block i of the sequence (physical id block_table[i]) holds tokens
    [i·block_size, (i+1)·block_size); it may be registered once all of them are
    computed (i < num_computed_tokens // block_size). Its entry is
    `CachedBlock(block_table[i], block_table[i - 1] (None for i = 0), its tokens as a
    tuple)`. A hash already in the cache keeps its first entry (first writer wins).
    """
    raise NotImplementedError("Your turn: hash the full computed blocks and add a CachedBlock "
                              "for each new hash")


def tokens_to_prefill(prompt_len: int, num_cached_blocks: int, block_size: int) -> int:
    """Prompt tokens that still go through the model after a cache hit of that many blocks."""
    raise NotImplementedError("Your turn: the prompt minus the tokens the cached blocks hold")


class LRUEviction:
    """Which free cached block gives up its contents first: the least recently used.

    The engine tells it two things: `freed(block)` when a cached block's last user lets
    go (the block becomes evictable — and is now the *most* recently used), and
    `revived(block)` when a prefix hit takes a free cached block back before it was
    evicted (it is no longer evictable). When new tokens need a block, `victim()` names
    the one to reuse and forgets it. Every method is O(1): an `OrderedDict` keeps the
    evictable blocks from least to most recently used.
    """

    def __init__(self):
        self.evictable: OrderedDict[int, None] = OrderedDict()   # least → most recently used

    def __len__(self) -> int:
        return len(self.evictable)

    def freed(self, block_id: int) -> None:
        """`block_id` is free now: evictable, as the most recently used."""
        raise NotImplementedError("Your turn: (re)insert it at the most recently used end")

    def revived(self, block_id: int) -> None:
        """A hit took `block_id` back: not evictable any more (nothing if it was not)."""
        raise NotImplementedError("Your turn: drop it from the evictable blocks, if there")

    def victim(self) -> int:
        """The least recently used evictable block, removed; LookupError if there is none."""
        raise NotImplementedError("Your turn: pop the least recently used end (LookupError if empty)")
