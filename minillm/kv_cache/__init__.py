"""The KV cache: where keys and values live, and who owns which block.

* `allocator.py`    — `BlockAllocator`: the free pool of block ids with reference counts
* `manager.py`      — `KVCacheManager`: hands sequences their blocks, paged or as a
                      contiguous reservation; swap space; the slot of each token
* `prefix_cache.py` — `PrefixCache`: full blocks found again by the hash of their tokens
* `tensors.py`      — the K/V tensors themselves (torch): sizing and allocation

Everything but `tensors.py` is pure Python: the schedulers and the simulator use it
without torch.
"""

from minillm.kv_cache.allocator import BlockAllocator, cdiv
from minillm.kv_cache.manager import KVCacheManager
from minillm.kv_cache.prefix_cache import PrefixCache, block_hashes

__all__ = ["BlockAllocator", "KVCacheManager", "PrefixCache", "block_hashes", "cdiv"]
