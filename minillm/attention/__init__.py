"""Attention backends: the one op that must know which row belongs to which sequence.

`base.py` holds the interface (`AttentionBackend`: `plan` once a step, `attend` once a
layer). The backends all give the same numbers within float rounding; the tests hold
them to the reference:

* "reference" — `reference.py`: a Python loop over sequences; the oracle;
* "torch"     — `torch_paged.py`: batched gathers of whole blocks, groups of similar
  length, one `scaled_dot_product_attention` per group;
* "sparse"    — `sparse_paged.py`: the same groups, but decodes read K/V in place, as
  a sampled product and an embedding bag with a sparse matrix (the readable engine's
  default on a CPU);
* "triton"    — `triton_paged.py`: the kernels of `kernels/` (the default on CUDA).

A new backend is one new file plus one line in `BACKENDS`. A package outside minillm
may add one too (`minillm/model/executor.py` says how plugins register).
"""

from __future__ import annotations

from minillm.attention.base import AttentionBackend, StepAttention
from minillm.attention.reference import PerSequenceAttention, attend_per_sequence, write_kv
from minillm.attention.sparse_paged import SparseAttention
from minillm.attention.torch_paged import TorchAttention


def _triton():
    from minillm.attention.triton_paged import TritonAttention   # imports triton: only on demand
    return TritonAttention()


BACKENDS = {
    "torch": TorchAttention,
    "sparse": SparseAttention,
    "reference": PerSequenceAttention,
    "triton": _triton,
}


def make_attention_backend(name: str) -> AttentionBackend:
    """A backend object by its name in `BACKENDS` (plugins' backends included)."""
    from minillm.model.executor import load_plugins
    load_plugins()
    if name not in BACKENDS:
        raise ValueError(f"attention_backend must be 'auto' or one of {tuple(BACKENDS)}, "
                         f"got {name!r}")
    return BACKENDS[name]()


__all__ = ["AttentionBackend", "BACKENDS", "PerSequenceAttention", "SparseAttention",
           "StepAttention", "TorchAttention", "attend_per_sequence", "make_attention_backend",
           "write_kv"]
