"""The KV cache tensors: where keys and values actually live.

Per layer, one K tensor and one V tensor of shape

    [num_blocks, block_size, num_kv_heads, head_dim]

Block `b`, offset `o` is the cache row of one token: `slot = b * block_size + o`.
Which tokens own which blocks is `manager.py`'s business; this file gives the
bytes per token and allocates the memory.

Bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per element.
For SmolLM2-135M in fp32: 2 × 30 × 3 × 64 × 4 = 46,080 bytes ≈ 45 KiB per token —
GQA (3 KV heads instead of 9) already makes it 3× smaller than full multi-head.
"""

from __future__ import annotations

import torch

def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                       dtype: torch.dtype) -> int:
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * num_kv_heads * head_dim * element


def allocate_kv_cache(num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                      head_dim: int, dtype: torch.dtype,
                      device: torch.device | str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Zero-filled (K, V) per layer. Zeros, not garbage: padded gathers read unused
    slots, and a masked NaN would still poison softmax(QKᵀ)·V."""
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    return [(torch.zeros(shape, dtype=dtype, device=device),
             torch.zeros(shape, dtype=dtype, device=device)) for _ in range(num_layers)]
