"""Prefix caching (前缀缓存): reuse the KV blocks of a prompt prefix seen before.

Many requests start with the same tokens — a system prompt, a few-shot preamble, the
history of a chat. Their keys and values at those positions are identical, so the
blocks holding them can be *shared* instead of recomputed.

**Identity of a block = its tokens and everything before it.** A full block's hash
chains its parent's hash with its own token ids:

    h0 = hash((None, tokens[0:16]))
    h1 = hash((h0,   tokens[16:32]))          # same tokens after a different prefix → different h1
    ...

Only *full* blocks are cached (a partial block is still being written).

**Lifecycle of a cached block.**

* When a sequence's block becomes full, its hash is registered: `hash → block`.
* A new request looks its full prompt blocks up in order and stops at the first miss;
  every hit is shared (reference count + 1) and counts as already computed.
* The last prompt token is always recomputed: its logits are needed to sample the first
  output token. If the whole prompt is cached, the last block is not reused.
* When its last user finishes, a block's reference count drops to 0 and it returns to
  the free pool — *but keeps its contents and its hash*. A later request can still hit
  it. Only when the allocator hands the block out for new tokens is its hash evicted.
  (minillm evicts in allocation order — the lowest free id first; vLLM evicts the
  least recently used block. Either keeps every block either free or cached-and-free,
  never lost.)
"""

from __future__ import annotations

from dataclasses import dataclass

from minillm.engine.sequence import Sequence
from minillm.kv_cache.allocator import BlockAllocator


def hash_block(parent: int | None, block_tokens: list[int]) -> int:
    """The chained hash of one full block: hash((parent's hash or None, its tokens))."""
    return hash((parent, tuple(block_tokens)))


def block_hashes(token_ids: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of `token_ids` (a partial last block gets none)."""
    hashes, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        hashes.append(parent)
    return hashes


@dataclass(frozen=True)
class CachedBlock:
    """What the cache knows about one full block: where it is, and exactly what it holds."""

    block_id: int
    parent_block: int | None         # the physical block before it (None for the first)
    tokens: tuple[int, ...]          # its own tokens


class PrefixCache:
    """hash → cached block, checked on every hit, so a hash collision is only ever a miss.

    A hash is 64 bits: two different prefixes can share one. So a hit counts only if the
    entry holds exactly this block's tokens *and* was computed after exactly the block
    the lookup matched just before (`parent_block`). By induction the whole prefix is
    then the same. For that to stay true, a block handed out for new tokens forgets its
    entry *and* every entry computed after it (`evict` cascades to its children).
    """

    def __init__(self, allocator: BlockAllocator, block_size: int):
        self.allocator = allocator
        self.block_size = block_size
        self.entries: dict[int, CachedBlock] = {}     # hash → the cached block
        self.hash_of: dict[int, int] = {}             # physical block → its hash
        self.children: dict[int, list[int]] = {}      # physical block → blocks cached after it

    @property
    def block_of(self) -> dict[int, int]:
        """hash → physical block id: the table a lookup walks."""
        return {h: entry.block_id for h, entry in self.entries.items()}

    def hash_blocks(self, token_ids: list[int]) -> list[int]:
        """The chained hashes of `token_ids`' full blocks (`block_hashes` above)."""
        return block_hashes(token_ids, self.block_size)

    def match(self, seq: Sequence) -> list[int]:
        """Cached blocks for the longest full-block prefix of `seq`'s prompt.

        Never covers the last prompt token (it must be recomputed to sample from).
        """
        bs, prompt = self.block_size, seq.prompt_token_ids
        usable = (seq.num_prompt_tokens - 1) // bs          # blocks before the last token
        hits: list[int] = []
        for i, h in enumerate(self.hash_blocks(prompt)[:usable]):
            entry = self.entries.get(h)
            previous = hits[-1] if hits else None
            if entry is None or entry.parent_block != previous \
                    or entry.tokens != tuple(prompt[i * bs:(i + 1) * bs]):
                break                                       # a miss, or a collision
            hits.append(entry.block_id)
        return hits

    def acquire(self, seq: Sequence) -> int:
        """Share the matched blocks with `seq`; return how many tokens they cover."""
        assert not seq.block_table and seq.num_computed_tokens == 0
        hits = self.match(seq)
        for block in hits:
            if self.allocator.is_free(block):
                self.allocator.take(block)       # revive a cached block from the free pool
            else:
                self.allocator.share(block)
        seq.block_table = list(hits)
        cached = len(hits) * self.block_size
        seq.num_computed_tokens = cached
        return cached

    def register(self, seq: Sequence) -> None:
        """Record every full, computed block of `seq` under its chained hash."""
        full = seq.num_computed_tokens // self.block_size
        if full == 0:
            return
        bs = self.block_size
        tokens = seq.all_token_ids[:full * bs]
        previous = None
        for i, (block, h) in enumerate(zip(seq.block_table[:full], self.hash_blocks(tokens))):
            if h not in self.entries and block not in self.hash_of:
                self.entries[h] = CachedBlock(block, previous, tuple(tokens[i * bs:(i + 1) * bs]))
                self.hash_of[block] = h
                if previous is not None:
                    self.children.setdefault(previous, []).append(block)
            previous = block

    def evict(self, block: int) -> None:
        """The allocator is reusing `block` for new tokens: forget its old contents, and
        every cached block computed after them (their K/V assumed this block's)."""
        h = self.hash_of.get(block)
        parent = self.entries[h].parent_block if h is not None else None
        if parent in self.children:                         # its parent no longer lists it
            self.children[parent].remove(block)
        stack = [block]
        while stack:                                        # the block, then its descendants
            current = stack.pop()
            h = self.hash_of.pop(current, None)
            if h is not None:
                del self.entries[h]
            stack.extend(self.children.pop(current, []))
