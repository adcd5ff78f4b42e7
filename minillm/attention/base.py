"""What every attention backend is: the one op that must know which row belongs to which sequence.

A step's flat batch (`minillm/model/batch.py`) mixes the rows of many sequences. Every
op of the model treats each row on its own, except attention: row i may only look at
the keys of its own sequence, found through that sequence's block table. A backend is
that op, and nothing else. It is used in two moves per step:

    step = backend.for_step(meta)      once, before the first layer: `plan(meta)` does
                                       whatever every layer can share (index tensors,
                                       groups of rows), so the layers do not redo it
    out = step(q, k, v, k_cache, v_cache, scale)      once per layer

    q        [T, Hq, D]   this step's queries, the flat batch's rows end to end
    k, v     [T, Hkv, D]  this step's new keys and values
    k_cache, v_cache      [num_blocks, block_size, Hkv, D]  one layer's paged cache
    scale    1/sqrt(D)
    out      [T, Hq, D]   row i attends to positions 0 … its own position of its own
                          sequence (causal), keys found through its block table

`attend` first writes k, v into the cache at `meta.slot_mapping`, then attends.
`backend(q, k, v, k_cache, v_cache, meta, scale)` does both moves at once (one layer,
one call: handy in a lesson or a test).
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import torch

from minillm.model.batch import AttentionMetadata


class AttentionBackend(abc.ABC):
    """Paged attention over a flat batch (see the module docstring)."""

    name = "abstract"

    def unavailable_reason(self, device: torch.device, dtype: torch.dtype,
                           model_config) -> str | None:
        """Why this backend cannot run a model shaped like `model_config` in `dtype` on
        `device`, None if it can (default: it always can). Asked once, at load."""
        return None

    def plan(self, meta: AttentionMetadata) -> object:
        """Work every layer of this step shares, done once (default: none)."""
        return None

    @abc.abstractmethod
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
               plan: object, scale: float) -> torch.Tensor:
        """Write k, v at `meta.slot_mapping`, then attend q → out [T, Hq, D]."""

    def for_step(self, meta: AttentionMetadata) -> "StepAttention":
        """This backend bound to one step's metadata and plan: what the layers call."""
        return StepAttention(self, meta, self.plan(meta))

    def __call__(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata,
                 scale: float) -> torch.Tensor:
        return self.for_step(meta)(q, k, v, k_cache, v_cache, scale)


class StepAttention(NamedTuple):
    """One step's attention: a backend, the step's metadata and the backend's plan.
    Every layer calls it with its own q, k, v and cache."""

    backend: AttentionBackend
    meta: AttentionMetadata
    plan: object

    def __call__(self, q, k, v, k_cache, v_cache, scale: float) -> torch.Tensor:
        return self.backend.attend(q, k, v, k_cache, v_cache, self.meta, self.plan, scale)
