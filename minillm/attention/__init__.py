"""Attention backends: the one op that must know which row belongs to which sequence.

Every backend is a callable object with a `name`, called once per layer per step:

    backend(q, k, v, k_cache, v_cache, meta, scale) -> out

    q        [T, Hq, D]   this step's queries, the flat batch's rows end to end
    k, v     [T, Hkv, D]  this step's new keys and values
    k_cache, v_cache      [num_blocks, block_size, Hkv, D]  one layer's paged cache
    meta     AttentionMetadata (`minillm/flat_batch.py`): query_start_loc, seq_lens,
             block_tables, slot_mapping — the same object for all layers of a step
    scale    1/sqrt(D)
    out      [T, Hq, D]   row i attends to positions 0 … its own position of its own
             sequence (causal), keys found through that sequence's block table

A backend first writes k, v into the cache at `meta.slot_mapping`, then attends. It may
keep per-step work (index tensors, masks) in `meta.scratch`, built at the first layer
and reused by the others.

The backends (all give the same numbers within float rounding; tests hold them to the
reference):

* "reference" — `reference.py`: a Python loop over sequences; the oracle;
* "torch"     — `torch_paged.py`: batched gathers of whole blocks, groups of similar
  length, one `scaled_dot_product_attention` per group;
* "sparse"    — `sparse_paged.py`: the same groups, but decodes read K/V in place, as
  a sampled product and an embedding bag with a sparse matrix;
* "cpp"       — `cpp_paged.py`: one C++ call a layer (`minillm/cpu_kernels/`) that writes
  K/V and attends every row in place (default on CPU, where the kernels compile);
* "triton"    — `triton_paged.py`: the kernels of `kernels/` (default on CUDA).

A backend may also carry `cpu_kernels` (a `minillm.cpu_kernels.CpuKernels`): the model
then runs its element-wise chains (residual add + RMSNorm, RoPE, SiLU·up) through them.
Only "cpp" does; with the others the model runs the PyTorch lines of `model.py`.

A new backend is one new file plus one line in `BACKENDS`.
"""

from __future__ import annotations

from minillm.attention.reference import PerSequenceAttention, attend_per_sequence, write_kv
from minillm.attention.sparse_paged import SparseAttention
from minillm.attention.torch_paged import TorchAttention


def _cpp():
    from minillm.attention.cpp_paged import CppAttention      # compiles the kernels: on demand
    return CppAttention()


def _triton():
    from minillm.attention.triton_paged import TritonAttention   # imports triton: only on demand
    return TritonAttention()


BACKENDS = {
    "torch": TorchAttention,
    "sparse": SparseAttention,
    "cpp": _cpp,
    "reference": PerSequenceAttention,
    "triton": _triton,
}


def make_attention_backend(name: str):
    """A backend object by its name in `BACKENDS`."""
    if name not in BACKENDS:
        raise ValueError(f"attention_backend must be 'auto' or one of {tuple(BACKENDS)}, "
                         f"got {name!r}")
    return BACKENDS[name]()


__all__ = ["BACKENDS", "make_attention_backend", "PerSequenceAttention", "SparseAttention",
           "TorchAttention",
           "attend_per_sequence", "write_kv"]
